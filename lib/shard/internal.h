/*
 * internal.h - helpers shared by the lib/shard sources; not public.
 */
#ifndef GK_SHARD_INTERNAL_H
#define GK_SHARD_INTERNAL_H

#include "shard/shard.h"

/* A growable byte buffer. */
typedef struct sh_buf {
	unsigned char *p;
	size_t len, cap;
} sh_buf;

int sh_buf_reserve(sh_buf *b, size_t extra);
int sh_buf_append(sh_buf *b, const void *p, size_t n);

/* A set of strings (keys seen in a shard). */
typedef struct sh_set {
	char **slot;
	size_t n, cap;
} sh_set;

/* 1 when s was added, 0 when already there, -1 out of memory. */
int sh_set_add(sh_set *s, const char *str, size_t len);
int sh_set_has(const sh_set *s, const char *str, size_t len);
void sh_set_clear(sh_set *s);

/*
 * A sample the reader made and the caller may keep: the public view plus
 * the storage it points into (one data buffer, one string buffer).
 */
/* A shard mapped into memory, shared by the samples that point into it. */
typedef struct sh_map {
	void *p;
	size_t len;
	int refs; /* atomic: samples are freed on another thread */
} sh_map;

sh_map *sh_map_ref(sh_map *m);
void sh_map_unref(sh_map *m);

typedef struct sh_sample {
	gk_shard_sample s;
	sh_map *map;  /* when set, member data points into it, not into data */
	gk_shard_member *m;
	size_t mcap;
	sh_buf data;  /* member data, back to back */
	sh_buf names; /* key\0ext\0ext\0... */
	uint64_t *ext_off, *data_off;
} sh_sample;

void sh_sample_free(sh_sample *x);

/* Reader internals the dataset uses to keep samples without copying. */
sh_sample *sh_reader_detach(gk_shard_reader *r);
void sh_reader_set_base(gk_shard_reader *r, uint64_t shard);
/* Skip member data (sizes and offsets only: building an index). */
void sh_reader_skip_data(gk_shard_reader *r, int skip);

#endif
