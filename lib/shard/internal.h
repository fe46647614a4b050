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
	char *path; /* its own copy: the map may outlive the dataset */
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
/* Read tar bytes from memory: p[0..n) is the stream from offset base on. */
int sh_reader_open_mem(gk_shard_reader **out, const void *p, size_t n,
		       uint64_t base, const char *name, gk_err *err);
/* Bytes per read from a descriptor (1 MiB unless set before the first next). */
void sh_reader_block(gk_shard_reader *r, size_t block);
/* Zero blocks at the end of the archive (0, 1, or 2 for the proper end)
 * once next has returned 0; -1 before. */
int sh_reader_end_blocks(const gk_shard_reader *r);
/* What the reader does with member data: keep it (the default), skip it
 * (a seek on a plain file), or read it through a small buffer (verify). */
enum { SH_BUFFER, SH_SKIP, SH_DISCARD };
void sh_reader_skip_data(gk_shard_reader *r, int skip);
/*
 * Repacking (--from-tar): what would be dropped is an error instead, as
 * data-pack -T refuses it: links and other entries that are not regular
 * files (directories are still skipped) and names without a key.
 */
void sh_reader_pack(gk_shard_reader *r, int on);
/* Repacking: member names by nm (gk_shard_member_name; NULL: as they are).
 * nokey: 1 when the reader's last error was a name left without a key. */
void sh_reader_pack_naming(gk_shard_reader *r, const gk_shard_naming *nm);
int sh_reader_nokey(const gk_shard_reader *r);
/*
 * Hand each member to fn as its header is read instead of keeping its
 * data: fn reads the data (size bytes) with sh_reader_read, which returns
 * a positive count, 0 at the member's end or -1. What fn leaves unread is
 * skipped. The sample's checks (consecutive keys, extensions once) come
 * before fn sees a member.
 */
typedef int (*sh_member_fn)(void *ctx, const char *name, uint64_t size,
			    gk_err *err);
void sh_reader_on_member(gk_shard_reader *r, sh_member_fn fn, void *ctx);
ssize_t sh_reader_read(gk_shard_reader *r, void *buf, size_t n, gk_err *err);

/* Index flags for sh_index_build. */
enum {
	SH_STRICT = 1, /* verify: strict reader, every byte read */
	SH_NAMES = 2,  /* refuse names the index cannot hold */
	SH_BIND = 4,   /* bind to the shard: its size and XXH3 (reads it all) */
};
int sh_index_build(const char *shard, gk_shard_index *idx, int flags,
		   int *end_blocks, gk_err *err);
/*
 * Can the shard open as fd be read at offsets? 0 for a plain tar (*lz4 0)
 * and for LZ4 (*lz4 1, frames to be checked); -1 for the other
 * compressions libarchive reads (gzip, bzip2, xz, zstd...), with a
 * message naming it and how to undo it. Sequential reading takes them all.
 */
int sh_shard_filter(int fd, const char *path, int *lz4, gk_err *err);
/* The same for the shard at path ("-", a stream, passes). */
int sh_path_filter(const char *path, int *lz4, gk_err *err);
/*
 * Load the index beside shard when it is there and belongs to it
 * (sh_index_check_ends): 1 loaded, 0 none or not this shard's (idx empty;
 * then stale says why, its message empty when there is no index), -1 an
 * unreadable index or a shard random access cannot read. *end_blocks:
 * the zero blocks after the last sample when loaded, else -1.
 */
int sh_index_load_for(const char *shard, gk_shard_index *idx, gk_err *stale,
		      int *end_blocks, gk_err *err);
/*
 * Does idx belong to the shard open as fd, as far as a few small reads
 * can tell? gk_shard_index_check's tests (compression, size, plain or
 * LZ4), then the first and the last sample's tar headers where the index
 * puts them, and nothing but the end after the last (*end_blocks gets
 * its zero blocks). The samples between are checked as they are read
 * (sh_index_check_mem).
 */
int sh_index_check_ends(const gk_shard_index *idx, int fd, const char *shard,
			const char *index, int *end_blocks, gk_err *err);
/*
 * Sample i's tar headers, in p: its bytes from its first header to the
 * next sample's (as mapped or decoded), where idx puts them, with its
 * names and sizes. 0, or -1 and the message of gk_shard_index_check.
 */
int sh_index_check_mem(const gk_shard_index *idx, size_t i, const void *p,
		       const char *shard, const char *index, gk_err *err);

/*
 * Tokenizing (tokenize.c): a batch of documents between a source and the
 * writer. sh_tokb_check: the number of a sample's one text member, or -1
 * with the reason (a member that is not text, two text members).
 * sh_tokb_add takes text (malloc'ed, freed by the batch, also on error);
 * sh_tokb_add_file a regular file of size bytes, read whole by one of the
 * encoding threads (path must outlive the batch: until sh_tokb_finish or
 * sh_tokb_free). A full batch is encoded while the one before it is
 * written; the rest by sh_tokb_finish. An error of either (the first
 * document in input order that failed) is returned by a later add or by
 * finish; the threads have all returned by then. sh_tokb_error: a source
 * failed on a document before adding it (err says why); the documents
 * before it are encoded and written first, and when one of them fails,
 * its error, earlier in input order, replaces err (1; else 0), so the
 * error does not depend on where the batches end.
 */
typedef struct sh_tokb sh_tokb;
int sh_tokb_new(sh_tokb **out, gk_shard_writer *w, gk_shard_tokenize *tz,
		gk_progress *progress, gk_err *err);
ssize_t sh_tokb_check(const gk_shard_tokenize *tz, const char *key, size_t n,
		      const gk_shard_member *m, gk_err *err);
int sh_tokb_add(sh_tokb *b, const char *key, unsigned char *text, size_t len,
		gk_err *err);
int sh_tokb_add_file(sh_tokb *b, const char *key, const char *path, uint64_t size,
		     gk_err *err);
int sh_tokb_finish(sh_tokb *b, gk_err *err);
int sh_tokb_error(sh_tokb *b, gk_err *err);
void sh_tokb_free(sh_tokb *b);
/* writer.c: start writing back the open shard's bytes, not waiting. */
void sh_writer_writeback(gk_shard_writer *w);

#endif
