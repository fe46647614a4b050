/*
 * ckpt.h - checkpoints made of safetensors files (prefix gk_ckpt_): the
 * Hugging Face sharded layout, rank shards with row slices, merging and
 * resharding in bounded memory, and the training-checkpoint directory.
 * The formats are described in gpukit-ckpt(5).
 */
#ifndef GK_CKPT_H
#define GK_CKPT_H

#include <inttypes.h>
#include <stdint.h>

#include "core/core.h"
#include "st/st.h"

#define GK_CKPT_INDEX "model.safetensors.index.json"
#define GK_CKPT_SINGLE "model.safetensors"
/* __metadata__ keys of rank shards (see gpukit-ckpt(5)). */
#define GK_CKPT_META_RANK "gpukit.rank"
#define GK_CKPT_META_WORLD "gpukit.world"
#define GK_CKPT_META_SLICE "gpukit.slice." /* + tensor name: "START:STOP/ROWS" */
/* + tensor name: "START:STOP/D0,D1,...", elements of a tensor of that shape
 * (row-major), stored 1-D: a ZeRO-3 rank's flat range cuts tensors anywhere */
#define GK_CKPT_META_FLAT "gpukit.flat."
#define GK_CKPT_FLAT_DIMS 8 /* the most dimensions a flat slice's shape has */

/* ---- a set of input files seen as one checkpoint -------------------------- */

/*
 * Elements [el0, el0+nel) of an entry (row-major), held by tensor t of
 * file. A whole tensor or a row slice holds whole rows, [row0, row0+rows);
 * a flat slice may start and end inside a row, and row0/rows are then
 * the rows it touches.
 */
typedef struct gk_ckpt_part {
	size_t file;
	const gk_st_tensor *t;
	uint64_t row0, rows;
	uint64_t el0, nel;
} gk_ckpt_part;

typedef struct gk_ckpt_entry {
	char *name;
	gk_dtype dtype, out_dtype; /* out_dtype: after gk_ckpt_set_dtype */
	int ndim;
	uint64_t *shape;           /* the whole tensor */
	uint64_t bytes, out_bytes;
	gk_ckpt_part *parts;       /* sorted by el0, covering the elements exactly */
	size_t nparts;
} gk_ckpt_entry;

typedef struct gk_ckpt_set {
	gk_st_file **files;
	size_t nfiles;
	gk_ckpt_entry *e; /* in order of first appearance */
	size_t n;
	uint64_t bytes;   /* sum of entry bytes */
	gk_strlist steps; /* the training step directories read (gk_ckpt_verify_set) */
	/*
	 * The model's config.json from the directories read (a step
	 * directory, a Hugging Face directory): written beside a directory
	 * output so that it loads with from_pretrained. NULL when none had
	 * one; config_other names a second input's that differs (an error
	 * only when a directory is written).
	 */
	char *config, *config_from, *config_other;
	size_t config_len;
	/*
	 * The same for a tokenizer's files (GK_CKPT_TOK_*, in that order,
	 * NULL where absent): those of the first directory that has any
	 * (tok_from), and the name of another input directory whose files
	 * differ (tok_other).
	 */
	struct gk_ckpt_tok_file {
		char *buf;
		size_t len;
	} tok[3];
	char *tok_from, *tok_other;
} gk_ckpt_set;
/* The names of gk_ckpt_set's tok[] files, in order. */
extern const char *const gk_ckpt_tok_names[3];

/*
 * Open inputs as one checkpoint. Each input is a safetensors file, an index
 * (*.json: a Hugging Face weight_map), or a directory: one holding
 * model.safetensors.index.json, a training step directory (its COMMIT is
 * required, and the index or model*.safetensors files it lists are read:
 * see gk_ckpt_verify_step for what else COMMIT must agree with), a
 * checkpoint root (its latest committed step), or else every
 * *.safetensors in it. Each
 * input is resolved once (gk_ckpt_resolve) and read from there.
 * Checks: every file valid; index paths relative without "..", every
 * indexed tensor in its file and every file tensor in the index,
 * metadata.total_size equal to the tensor bytes; a tensor in several
 * files is either slices (gpukit.slice.* rows, gpukit.flat.* elements)
 * that cover it exactly once, or identical copies (compared by XXH3) kept once;
 * anything else is an error naming both files.
 */
int gk_ckpt_open(gk_ckpt_set **out, char *const *inputs, size_t n,
		 gk_err *err);
void gk_ckpt_close(gk_ckpt_set *s);

/*
 * 1 when a tensor named name is a module buffer that Hugging Face
 * checkpoints carry beside the parameters, not a parameter: the causal
 * masks of GPT-2 and GPT-J ("h.N.attn.bias", "h.N.attn.masked_bias"),
 * GPT-Neo and GPT-NeoX ("...attention.bias", "...attention.masked_bias")
 * and rotary frequencies ("...rotary_emb.inv_freq", Llama, NeoX), which
 * transformers drops on load (_keys_to_ignore_on_load_unexpected).
 * Matched as whole trailing name components.
 */
int gk_ckpt_is_buffer(const char *name);

/*
 * Choose each entry's output dtype: float tensors become dt (GK_DT_INVALID:
 * keep), except names matching one of the fnmatch(3) patterns, which become
 * F32. Other types are kept.
 */
int gk_ckpt_set_dtype(gk_ckpt_set *s, gk_dtype dt, char *const *keep_f32,
		      size_t nkeep, gk_err *err);

/* ---- plans: which tensors (or rows) go to which output file ---------------- */

typedef struct gk_ckpt_item {
	size_t entry;
	uint64_t row0, rows; /* dim-0 range written */
	int sliced;          /* written as a row slice with its metadata */
} gk_ckpt_item;

typedef struct gk_ckpt_outfile {
	char *name;          /* file name inside the output directory */
	gk_ckpt_item *items;
	size_t n, cap;
	uint64_t bytes;      /* tensor bytes in it */
	int rank;            /* >= 0 for rank shards */
} gk_ckpt_outfile;

typedef struct gk_ckpt_plan {
	gk_ckpt_outfile *f;
	size_t n;
	int index;           /* write model.safetensors.index.json */
	int world;           /* rank shards: N, else 0 */
	uint64_t total;      /* tensor bytes of the whole output */
} gk_ckpt_plan;

/* Everything in one file named name. */
int gk_ckpt_plan_one(const gk_ckpt_set *s, const char *name,
		     gk_ckpt_plan *p, gk_err *err);
/*
 * Hugging Face size sharding, as huggingface_hub's
 * split_torch_state_dict_into_shards: tensors in order; a new shard when
 * the running size would strictly exceed max; a tensor larger than max
 * gets a shard of its own, placed when it is met. Files are
 * model-00001-of-0000N.safetensors plus the index, or model.safetensors
 * alone when one shard results.
 */
int gk_ckpt_plan_size(const gk_ckpt_set *s, uint64_t max, gk_ckpt_plan *p,
		      gk_err *err);
/* n contiguous shards of about equal size, in the same HF layout. */
int gk_ckpt_plan_count(const gk_ckpt_set *s, size_t n, gk_ckpt_plan *p,
		       gk_err *err);
/*
 * Rank shards model-rank-RRRRR-of-NNNNN.safetensors. Whole tensors: largest
 * first to the least-full rank (an index is written, so HF loaders read
 * them too). slice: every tensor with a dimension split along dim 0 in
 * chunks of ceil(rows/n) (torch.chunk, FSDP's dim-0 rule; trailing ranks
 * may hold empty slices); scalars whole on rank 0.
 */
int gk_ckpt_plan_ranks(const gk_ckpt_set *s, size_t n, int slice,
		       gk_ckpt_plan *p, gk_err *err);
void gk_ckpt_plan_free(gk_ckpt_plan *p);

/* ---- writing ---------------------------------------------------------------- */

typedef struct gk_ckpt_write_opts {
	gk_progress *progress; /* may be NULL */
	int verify;            /* re-read the output and compare XXH3 of copies */
} gk_ckpt_write_opts;

/*
 * Write one planned file to path (atomic; "-" is stdout). Copies run in
 * the kernel when dtypes match, else through gk_convert in 4 MiB pieces.
 */
int gk_ckpt_write_file(const gk_ckpt_set *s, const gk_ckpt_plan *p, size_t k,
		       const char *path, const gk_ckpt_write_opts *o,
		       gk_err *err);
/*
 * Write the whole plan into directory dir, which must be missing or empty:
 * everything is built in a hidden sibling directory and renamed into place
 * at the end, so dir holds all of it or none (the index written last).
 */
int gk_ckpt_write_dir(const gk_ckpt_set *s, const gk_ckpt_plan *p,
		      const char *dir, const gk_ckpt_write_opts *o,
		      gk_err *err);

/*
 * The whole of merging and resharding an open set (ckpt-merge, ckpt-shard):
 * check the step directories it was opened from (gk_ckpt_verify_set), set
 * the output dtypes (gk_ckpt_set_dtype), plan the layout, and write it.
 * The layout is the first of max_size, shards and ranks that is not 0;
 * with none, one file, out itself (gk_ckpt_write_file: "-" is stdout),
 * else the directory out (gk_ckpt_write_dir). A dry run checks nothing,
 * writes nothing and hands the plan to the caller in *plan (free it with
 * gk_ckpt_plan_free); out may then be NULL for a layout of several files.
 * Errors are those of the calls named, and nothing is left under out.
 */
typedef struct gk_ckpt_reshard_opts {
	gk_dtype dtype;         /* float tensors to this; GK_DT_INVALID: keep */
	char *const *keep_f32;  /* fnmatch(3) patterns of names kept F32 */
	size_t nkeep;
	uint64_t max_size;      /* Hugging Face shards of at most this (gk_ckpt_plan_size) */
	size_t shards;          /* this many of about equal size (gk_ckpt_plan_count) */
	size_t ranks;           /* rank files (gk_ckpt_plan_ranks) ... */
	int slice;              /* ... of row slices */
	int verify;             /* re-read the output (gk_ckpt_write_opts) */
	int dry_run;            /* plan only, into *plan */
	const char *progress;   /* label of a progress line on stderr; NULL: none */
} gk_ckpt_reshard_opts;

int gk_ckpt_reshard(gk_ckpt_set *s, const gk_ckpt_reshard_opts *o,
		    const char *out, gk_ckpt_plan *plan, gk_err *err);

/*
 * The option-table rows (lib/core's GK_OPTK_CUSTOM) of the tools that
 * reshard, ckpt-merge and ckpt-shard: -o refuses an empty path (else all
 * the work is done before the rename fails) into a const char *; --dtype a
 * float type into a gk_dtype; --keep-f32 adds a pattern to a gk_strlist
 * each time; --max-size a size above 0 into a uint64_t.
 */
int gk_ckpt_opt_output(const char *opt, const char *s, void *field, gk_err *err);
int gk_ckpt_opt_dtype(const char *opt, const char *s, void *field, gk_err *err);
int gk_ckpt_opt_keep(const char *opt, const char *s, void *field, gk_err *err);
int gk_ckpt_opt_max_size(const char *opt, const char *s, void *field, gk_err *err);

/* ---- the Hugging Face index ------------------------------------------------- */

/* Write dir/model.safetensors.index.json for the plan (sorted, indent 2). */
int gk_ckpt_index_write(const gk_ckpt_set *s, const gk_ckpt_plan *p,
			const char *dir, gk_err *err);
/*
 * Parse an index document (name for messages): file names (malloc'ed,
 * unique, in first-use order) into files, the weight map into names and
 * file_of (index into files), total_size (UINT64_MAX when absent).
 * Rejects absolute paths, "..", empty names, non-string entries.
 */
typedef struct gk_ckpt_index {
	gk_strlist files, names;
	size_t *file_of;
	uint64_t total_size;
} gk_ckpt_index;

int gk_ckpt_index_parse(gk_ckpt_index *ix, const char *buf, size_t len,
			const char *name, gk_err *err);
void gk_ckpt_index_free(gk_ckpt_index *ix);

/* ---- training checkpoints ---------------------------------------------------
 *
 * ROOT/step-NNNNNNNN/ ("step-%08llu") holds one training checkpoint: model
 * and optimizer files per rank (gk_ckpt_rank_file), trainer.json, and
 * COMMIT, written last: {"step":N,"time":"ISO 8601","files":{NAME:
 * {"bytes":B,"xxh3":"hex"}},"parent":{"step":P,"commit_xxh3":"hex"}}.
 * parent is the step the writer continued (what latest named when it
 * committed, the one it resumed from or its previous checkpoint) and the
 * XXH3 of that step's COMMIT, absent for a run's first checkpoint. It is
 * built in ROOT/.step-NNNNNNNN.tmp-XXXXXX and renamed into place after
 * COMMIT is fsynced; ROOT/latest is then a relative symlink to it,
 * replaced atomically. A step directory without COMMIT is never read as
 * a checkpoint.
 *
 * With several ranks: rank 0 calls gk_ckpt_stage_begin and broadcasts
 * gk_ckpt_stage_name; the others gk_ckpt_stage_join it; every rank writes
 * its files (gk_ckpt_stage_path + gk_st_writer_open); after a barrier rank
 * 0 calls gk_ckpt_stage_commit and the others gk_ckpt_stage_free.
 */
typedef struct gk_ckpt_stage gk_ckpt_stage;

/* The layout's names, spelled here only. */
#define GK_CKPT_STEP_FMT "step-%08" PRIu64 /* a step directory */
#define GK_CKPT_COMMIT "COMMIT"
#define GK_CKPT_LATEST "latest"
#define GK_CKPT_LOCK ".lock"
#define GK_CKPT_CONFIG "config.json"
#define GK_CKPT_TRAINER "trainer.json"
#define GK_CKPT_OPTIM "optim" /* optim.safetensors, or gk_ckpt_rank_file's */
#define GK_CKPT_FEEDBACK "feedback" /* a rank's error feedback: gk_ckpt_rank_file's */
/*
 * A tokenizer beside the model, in Hugging Face's names: tokenizer.json,
 * or vocab.json and merges.txt (gpukit-tok(5)). A step directory, and a
 * directory ckpt-merge writes, carry them as they carry config.json.
 */
#define GK_CKPT_TOK_JSON "tokenizer.json"
#define GK_CKPT_TOK_VOCAB "vocab.json"
#define GK_CKPT_TOK_MERGES "merges.txt"
/* ROOT/step-NNNNNNNN, and dir/file: malloc'ed, NULL without memory. */
char *gk_ckpt_step_path(const char *root, uint64_t step);
char *gk_ckpt_join(const char *dir, const char *file);
/* The optimizer file of this rank: optim.safetensors when one rank writes
 * the whole state, else gk_ckpt_rank_file(GK_CKPT_OPTIM, rank, world). */
char *gk_ckpt_optim_file(int sharded, int rank, int world);
/* Whether name is an optimizer file (optim*.safetensors). */
int gk_ckpt_is_optim_file(const char *name);


int gk_ckpt_stage_begin(gk_ckpt_stage **out, const char *root, uint64_t step,
			gk_err *err);
int gk_ckpt_stage_join(gk_ckpt_stage **out, const char *root, uint64_t step,
		       const char *name, gk_err *err);
/* Base name of the staging directory. */
const char *gk_ckpt_stage_name(const gk_ckpt_stage *s);
/* ROOT/STAGING/file, malloc'ed (NULL when out of memory). */
char *gk_ckpt_stage_path(const gk_ckpt_stage *s, const char *file);
/*
 * fsync and hash every file (a second read of the data, usually from the
 * page cache; other ranks' writers cannot hand their hashes over), write
 * COMMIT, rename into place, point latest at it unless a newer step is
 * already committed. On failure the caller still owns s.
 */
int gk_ckpt_stage_commit(gk_ckpt_stage *s, gk_err *err);
/* Remove the staging directory and everything in it. */
void gk_ckpt_stage_abort(gk_ckpt_stage *s);
/* Forget the handle, leaving the directory (joined ranks). */
void gk_ckpt_stage_free(gk_ckpt_stage *s);

/*
 * Claim ROOT for one writer: create it (mkdir -p), take an exclusive
 * flock on ROOT/.lock (naming the holder, pid and host, in it), and then
 * remove the staging directories that killed writers left. A ROOT/latest
 * that is not a symbolic link (a copy made with cp -rL) is refused, since
 * no commit could replace it. Returns the
 * lock's fd, to keep open while writing (gk_ckpt_unlock), or -1: ROOT
 * cannot be created or written, or another process holds it. Where the
 * file system has no flock (some NFS mounts) it goes on unlocked.
 */
int gk_ckpt_lock(const char *root, gk_err *err);
void gk_ckpt_unlock(int fd);

/* "model-rank-00003-of-00008.safetensors" for kind "model"; malloc'ed. */
char *gk_ckpt_rank_file(const char *kind, int rank, int world);
/*
 * Committed steps in ROOT, ascending (malloc'ed array): directories (not
 * symbolic links) named as the writer names them, "step-%08llu" (so
 * step-100000000 from step 10^8 on, and step-000000001 is not a step),
 * holding a regular COMMIT.
 */
int gk_ckpt_list(const char *root, uint64_t **steps, size_t *n, gk_err *err);
/*
 * The newest committed step: the one `latest` resolves to when that is a
 * committed step directory of ROOT (however the link is spelled: compared
 * by device and inode), else the highest committed step. 1 with *step
 * set, 0 when there is none, -1 on error.
 */
int gk_ckpt_latest(const char *root, uint64_t *step, gk_err *err);
/*
 * The lowest step above `after` whose name ROOT already holds, as a
 * committed step directory or anything else (a writer starting at
 * after + 1 would collide with it, or mix its steps with another run's):
 * 1 with *step and *is_committed set, 0 when there is none, -1 on error.
 */
int gk_ckpt_next_after(const char *root, uint64_t after, uint64_t *step,
		       int *is_committed, gk_err *err);
/*
 * A writer killed between committing a step and moving latest leaves
 * latest on the step before (L) with a committed step above it, which
 * gk_ckpt_next_after then reports as in the way. When every step
 * directory above L is committed and continues L (its COMMIT's parent is
 * L, or a step above L that continues it, by step and COMMIT's XXH3),
 * latest is moved to the highest of them: 1 with *from = L and *to set.
 * 0 when latest is fine or what is above it is not its continuation
 * (another run's steps, a copy without COMMIT, COMMITs without parent),
 * left as it is; -1 on error. For ROOT's one writer (gk_ckpt_lock).
 */
int gk_ckpt_repair_latest(const char *root, uint64_t *from, uint64_t *to,
			  gk_err *err);
/*
 * Check a step directory's COMMIT: every file present, sizes and XXH3;
 * its "step" equal to the number in dir's name (when dir is named
 * step-N); every file in dir of the kinds readers take (*.safetensors, the index, config.json, trainer.json) listed in it (the
 * writer lists all it wrote, so another came after the commit, and would
 * be read unchecked). gk_ckpt_open makes the same checks, less the
 * hashing, on the step directories it reads.
 * The directory is opened once and every file read through it, so dir
 * may be ROOT/latest while a writer moves it. A step removed meanwhile
 * (ckpt-prune) is reported as removed, not as damaged.
 */
int gk_ckpt_verify_step(const char *dir, gk_err *err);
/*
 * What an input of gk_ckpt_open names now, resolved once into *out
 * (malloc'ed): a symbolic link (ROOT/latest, however spelled) becomes the
 * path it points to (DIR/TARGET for a relative target), a checkpoint
 * root ROOT/step-NNNNNNNN of its latest committed step; anything else,
 * and an unfinished step directory (left for the reader to refuse by the
 * name it was given), is copied as it is. A reader that looks at an
 * input twice (checks COMMIT, then reads the files) reads the resolved
 * path both times, so a writer moving latest in between cannot make it
 * check one step and read another.
 */
int gk_ckpt_resolve(const char *in, char **out, gk_err *err);
/*
 * Check the COMMIT behind an input of gk_ckpt_open, resolved once: a step
 * directory's own, the latest committed step's when in is a checkpoint
 * root, and a file's step when the file is in a step directory (checked
 * as the whole step). Other inputs (files elsewhere, Hugging Face
 * directories) have none: 0.
 */
int gk_ckpt_verify_input(const char *in, gk_err *err);
/*
 * gk_ckpt_verify_step for each step directory s was opened from (the
 * very ones its files were opened in). Merging and resharding call it
 * before copying: copy_file_range moves the data without it passing
 * through our memory, and the output's tensor order is not the input
 * files' byte order, so COMMIT's whole-file XXH3 cannot be computed on
 * the way; one extra read (into the page cache the copy then reads
 * from) makes sure a file damaged after COMMIT is not published.
 */
int gk_ckpt_verify_set(const gk_ckpt_set *s, gk_err *err);

/* ---- pruning old checkpoints (ckpt-prune) ------------------------------------
 *
 * Which directories of ROOT go:
 *   committed step-N: kept when it is the newest, what `latest` resolves
 *     to, among the keep_last newest, or a multiple of keep_every;
 *     removed otherwise;
 *   step-N without COMMIT and staging directories .step-N.*: in progress
 *     while anything in them changes, abandoned (removed) once nothing
 *     has for grace seconds. Change is the newest ctime or mtime in the
 *     tree: ctime cannot be set back, so a tree copied in with its old
 *     mtimes (cp -a, tar x) still looks young; `latest` keeps one anyway;
 *   .deleting-*: left by an interrupted run, removed first.
 * Symbolic links, other names and other file systems are never followed
 * or removed. A removal renames the directory to .deleting-NAME.PID, syncs
 * ROOT, then deletes the tree: a crash leaves a name no reader takes for a
 * checkpoint, and a writer that was only slow fails cleanly.
 * One run at a time per ROOT: an exclusive flock(2) on the lock file
 * (ROOT/.ckpt-prune.lock, never through a symbolic link, or o->lock),
 * which must be a regular file. Writers do not take it: COMMIT and the
 * grace period protect them. A dry run takes no lock and changes nothing.
 */
typedef struct gk_ckpt_prune_opts {
	uint64_t keep_last;  /* >= 1 */
	uint64_t keep_every; /* 0: none */
	uint64_t grace;      /* seconds */
	int dry_run;
	const char *lock;    /* NULL: ROOT/.ckpt-prune.lock */
} gk_ckpt_prune_opts;

typedef enum gk_ckpt_prune_kind {
	GK_CKPT_PRUNE_KEPT,    /* name, why */
	GK_CKPT_PRUNE_REMOVED, /* name, why (may be ""), kib; or would be */
	GK_CKPT_PRUNE_FAILED,  /* name, msg "remove 'NAME': why" */
	GK_CKPT_PRUNE_WARNING  /* msg */
} gk_ckpt_prune_kind;

typedef struct gk_ckpt_prune_event {
	gk_ckpt_prune_kind kind;
	const char *name;   /* an entry of ROOT */
	const char *why;    /* "newest, keep-last 2", "no COMMIT, unchanged for 2h" */
	uint64_t kib;       /* disk usage, as du -sk counts it */
	const char *msg;
} gk_ckpt_prune_event;

typedef struct gk_ckpt_prune_stats {
	size_t removed, kept, failed;
	uint64_t freed_kib;
} gk_ckpt_prune_stats;

/*
 * Prune ROOT, reporting each decision to fn (in the order taken) and the
 * totals in *st. Returns 0 (st->failed says whether some removal failed),
 * 1 when another run holds the lock (nothing done), -1 when ROOT or the
 * lock cannot be used ("open 'ROOT': why", "lock 'FILE': why").
 */
int gk_ckpt_prune(const char *root, const gk_ckpt_prune_opts *o,
		  void (*fn)(void *ctx, const gk_ckpt_prune_event *ev),
		  void *ctx, gk_ckpt_prune_stats *st, gk_err *err);
/* "1h30m": the two largest of d, h, m, s ("0s" for 0); returns buf. */
char *gk_ckpt_duration_str(uint64_t secs, char *buf, size_t len);

#endif
