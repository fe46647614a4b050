/*
 * dataset_internal.h - what the files of the dataset (gk_shard_dataset_*,
 * the trainer's iterator over many shards) share; not installed:
 *
 *   dataset.c         the iterator: the epoch's plan, the producer, the
 *                     window, moving through epochs
 *   dataset_open.c    opening: the shard list, its counts and its identity
 *   dataset_resume.c  a state saved and restored, on the same or another
 *                     world size
 *   dataset_state.c   a state as JSON text
 *   beside.c          the tokenizer of listed shards, from the manifests
 *                     beside them
 */
#ifndef GK_SHARD_DATASET_INTERNAL_H
#define GK_SHARD_DATASET_INTERNAL_H

#include <pthread.h>

#include "shard/internal.h"

/* Samples handed from the prefetch thread to the consumer. */
typedef struct sh_queue {
	pthread_mutex_t mu;
	pthread_cond_t more, room;
	sh_sample **v;
	size_t cap, head, n;
	int done, stop, failed;
	gk_err err;
} sh_queue;

struct gk_shard_dataset {
	gk_shard_dataset_opts o;
	gk_shard_manifest man;
	char **files;
	uint64_t list_id;         /* the shard list's identity (gk_shard_state.list) */
	uint64_t files_id;        /* and by path, size and head (gk_shard_state.files) */
	size_t common;            /* length of the files' common directory, its '/' included */
	const gk_shard_state_shard *base_names; /* basenames, for states with no "files" */
	gk_shard_state_shard *names; /* the list, when states carry it */
	size_t nnames;
	gk_shard_index *idx;      /* per shard; nsamples 0 = not loaded */
	int *idx_tried;           /* SH_IDX_*: where idx[i] came from */
	unsigned char **checked;  /* per shard, a bit per sample whose tar
				     headers were found where idx puts them */
	uint64_t part, parts, per;
	uint64_t per0;            /* samples per part in a normal epoch */
	uint64_t epoch, pos;
	/*
	 * A remapped epoch (gk_shard_dataset_restore_world): the part reads
	 * the stream samples list[0..per), ascending, instead of the range
	 * [part*per, (part+1)*per); hist is the remap history the list was
	 * computed from (gk_shard_state.hist).
	 */
	uint64_t *list, *hist;
	size_t nhist;
	/* the current epoch's plan */
	uint64_t *order, *prefix;
	/* the window */
	sh_sample **win;
	uint64_t *perm;
	size_t wlen, wpos;
	/* the producer's cursor: part position j is stream sample
	 * prefix[k] + local */
	size_t k;
	uint64_t j, local, remaining;
	gk_shard_reader *r;
	int fd;                   /* the shard read through its index */
	sh_map *map;              /* or mapped, when it is a plain tar */
	char *ipath;              /* its index file's name, for messages */
	/* prefetch */
	sh_queue q;
	pthread_t thread;
	int running;
	int started;              /* an epoch position is set up */
};

/* d->idx_tried[i]: not yet, the shard's .idx (or none), built from the tar. */
enum { SH_IDX_NOT_TRIED, SH_IDX_FILE, SH_IDX_BUILT };

/* One line for the caller (o.note), when the dataset works around a
 * problem in the data and goes on. */
void sh_dataset_note(const gk_shard_dataset *d, const char *fmt, ...) GK_PRINTF(2, 3);
/*
 * A dataset opened from a list (not a manifest): the tokenizer record of
 * the manifests beside its shards, into d->man.tok (beside.c).
 */
int sh_dataset_beside(gk_shard_dataset *d, gk_err *err);
/*
 * Say that a shard ends without the two zero blocks of a proper end
 * (end_blocks 0 or 1, from sh_index_build or sh_index_load_for) and that
 * its n whole samples are read; nothing for a proper end.
 */
void sh_dataset_note_end(const gk_shard_dataset *d, const char *file,
			 int end_blocks, size_t n);

/* Samples a window holds: the shuffle buffer, or 1 without shuffling. */
static inline size_t sh_dataset_window(const gk_shard_dataset *d)
{
	return d->o.shuffle ? d->o.shuffle_buffer : 1;
}
/* The permutation key of window w of part `part` in remap generation gen
 * (0: a normal epoch). */
uint64_t sh_dataset_window_key(const gk_shard_dataset *d, uint64_t epoch,
			       uint64_t part, uint64_t gen, uint64_t w);
/* Make the current epoch remapped by hist (copied; list is taken), or
 * normal (nhist 0). The producer must be stopped. */
int sh_dataset_set_remap(gk_shard_dataset *d, const uint64_t *hist,
			 size_t nhist, uint64_t *list, uint64_t len, gk_err *err);
/* Stop the prefetch thread (if running) and drop what it queued. */
void sh_dataset_stop(gk_shard_dataset *d);
/* Start the producer and the window at (epoch, pos) of the current plan. */
int sh_dataset_go(gk_shard_dataset *d, uint64_t epoch, uint64_t pos, gk_err *err);

/*
 * Write s as a JSON string, the way snprintf writes (the length it needs,
 * whatever fits). s is UTF-8: only quotes, backslashes and control
 * characters are escaped.
 */
size_t sh_json_str(char *buf, size_t len, const char *s);

#endif
