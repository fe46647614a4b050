/*
 * shard.h - WebDataset-compatible tar shards (prefix gk_shard_).
 *
 * The format is described in gpukit-shard(5). In short: a shard is a tar
 * file (pax_restricted, regular members only, mode 0444, uid/gid 0, empty
 * uname/gname, one fixed mtime); a sample is the run of consecutive
 * members sharing a key; a member is KEY.EXT where the key is the path up
 * to the first dot of the last path component. A ".tar.lz4" shard is the
 * same tar cut at sample boundaries into concatenated LZ4 frames (one
 * frame per sample, then one frame for the end-of-archive blocks), so
 * `lz4 -dc x.tar.lz4 | tar t` works and a sample is one seek + one frame.
 *
 * Five layers, each usable alone:
 *   names     key/extension split and the checks the writer applies
 *   writer    samples in, shards + indexes + manifest out (atomic files)
 *   reader    one shard (file or stream, plain or LZ4) -> samples in order
 *   index     per-shard sidecar (DALI wds2idx "v1.2" text) and manifest
 *   dataset   the trainer's iterator over many shards: rank/worker split,
 *             (seed, epoch)-keyed shuffle, prefetch thread, exact resume
 *
 * Errors follow core.h: -1 and a message in the gk_err. Nothing here
 * prints or exits.
 */
#ifndef GK_SHARD_H
#define GK_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "tok/tok.h"

/* ---- names ------------------------------------------------------------------ */

/*
 * Split a member name into key and extension the way webdataset's
 * base_plus_ext does: the key runs to the first dot of the last path
 * component. Returns the key length (the extension starts one past it),
 * or -1 when the name has no key ("README", ".hidden", "dir/"), which
 * webdataset and the reader skip.
 */
ssize_t gk_shard_key_len(const char *name);

/*
 * The writer's checks on a member name: valid UTF-8, relative, no "."
 * or ".." component, no empty component, no control characters, no
 * whitespace (DALI's index separates fields by spaces), and a key and a
 * non-empty extension. Messages read "name 'N': why", N quoted as
 * gk_shard_name_quote does (a message stays one line).
 */
int gk_shard_check_name(const char *name, gk_err *err);

/*
 * A name as data-pack -t prints it, on one line of tab-separated fields:
 * backslash, tab and newline as \\ \t \n, other control characters and
 * bytes that are not UTF-8 as \xHH; everything else as it is (so a name
 * gk_shard_check_name accepts prints unchanged unless it has a
 * backslash). Returns a malloc'ed string, NULL when out of memory.
 */
char *gk_shard_name_quote(const char *name);
/* 1 when s is valid UTF-8 (what a JSON string can hold). */
int gk_shard_utf8_valid(const char *s);

/* Shard name number n from a printf pattern with one %d/%u/%x conversion
 * (flags and width allowed, e.g. "train-%06d.tar"); -1 when the pattern
 * has not exactly one such conversion or the result does not fit. */
int gk_shard_format_name(const char *pattern, unsigned n, char *buf,
			 size_t len, gk_err *err);

/*
 * Append to out the files the pattern names from number n on that exist
 * (the scan ends after 64 free numbers in a row): the shards a longer,
 * earlier run left after the last one a run wrote, which a glob or a
 * brace range would read with the new ones. A pattern without a
 * conversion names none. -1 only for a bad pattern or no memory.
 */
int gk_shard_pattern_tail(const char *pattern, unsigned n, gk_strlist *out,
			  gk_err *err);

/* 1 when path ends in ".lz4" (the writer compresses, the reader expects
 * LZ4 frames; the reader also detects LZ4 by its magic number). */
int gk_shard_is_lz4_name(const char *path);

/* ---- samples ---------------------------------------------------------------- */

typedef struct gk_shard_member {
	const char *ext;  /* extension, without the dot */
	const void *data; /* size bytes */
	uint64_t size;
	uint64_t offset;  /* of the data in the uncompressed tar stream */
} gk_shard_member;

typedef struct gk_shard_sample {
	const char *key;
	size_t n;                  /* members, in the shard's order */
	const gk_shard_member *m;
	uint64_t shard;            /* position in the dataset's shard list */
	uint64_t index;            /* sample number within its shard */
	uint64_t epoch;            /* dataset only */
} gk_shard_sample;

/* ---- index and manifest ----------------------------------------------------- */

typedef struct gk_shard_index_member {
	char *name;            /* full member name, KEY.EXT */
	uint64_t offset, size; /* data offset in the uncompressed tar stream */
} gk_shard_index_member;

typedef struct gk_shard_index_sample {
	uint64_t header; /* offset of the sample's first header (uncompressed) */
	uint64_t frame;  /* LZ4 shards: file offset of its frame, else = header */
	size_t first, n; /* its members: m[first .. first+n) */
} gk_shard_index_sample;

typedef struct gk_shard_index {
	size_t nsamples, nmembers;
	gk_shard_index_sample *s;
	gk_shard_index_member *m;
	int lz4;           /* frame offsets are present */
	uint64_t end;      /* offset of the end-of-archive blocks (uncompressed) */
	uint64_t frame_end;/* LZ4: file offset of the end-of-archive frame */
	int bound;         /* the index names its shard's size and XXH3: */
	uint64_t shard_bytes, shard_xxh3;
} gk_shard_index;

/* "dir/train-000000.tar[.lz4]" -> "dir/train-000000.idx" (DALI's default:
 * the shard name up to its first dot). Returns a malloc'ed string. */
char *gk_shard_index_path(const char *shard);

/*
 * The index is DALI's wds2idx text: "v1.2 N", then one line per sample
 * of "EXT OFFSET SIZE NAME" groups separated by spaces, OFFSET being the
 * member's data offset (Python tarfile's TarInfo.offset_data). For an
 * LZ4 shard a trailer follows: "lz4 N+1" and N+1 lines of frame offsets
 * (the last is the end-of-archive frame). Last, when bound, comes
 * "shard BYTES XXH3": the size and XXH3 (16 hex digits) of the shard the
 * index was made for, so an index left beside a different shard of the
 * same name is recognised (gk_shard_index_check). DALI reads the N
 * sample lines and ignores what follows; it cannot read LZ4 shards anyway.
 */
int gk_shard_index_write(const char *path, const gk_shard_index *idx,
			 gk_err *err);
int gk_shard_index_load(const char *path, gk_shard_index *idx, gk_err *err);
/*
 * Build the index by reading the shard (plain tars and our LZ4 shards,
 * told by content: frame offsets are found by walking the LZ4 frame
 * headers), bound to the shard. Names the index cannot hold
 * (gk_shard_check_name: whitespace would split DALI's fields) are errors,
 * and so is a shard compressed otherwise (gzip, bzip2, xz, zstd...),
 * whose offsets would mean nothing: the message names the compression.
 */
int gk_shard_index_build(const char *shard, gk_shard_index *idx, gk_err *err);
/*
 * Does idx belong to the shard open as fd? The shard must be a plain tar
 * or LZ4 (its first bytes), its size must match a bound index's (one
 * fstat), and with check_sample >= 0 the tar headers of
 * that sample must be where the index puts them, with its names and
 * sizes (reading only that sample's headers, or its LZ4 frame). An index
 * without binding (DALI's wds2idx) passes the size test. -1 and a message
 * that says to rebuild the index when not.
 */
int gk_shard_index_check(const gk_shard_index *idx, int fd, const char *shard,
			 const char *index, ssize_t check_sample, gk_err *err);
void gk_shard_index_free(gk_shard_index *idx);
/* Sample number of key, or -1 (a linear scan; indexes are per shard). */
ssize_t gk_shard_index_find(const gk_shard_index *idx, const char *key);
/*
 * Random access: read sample i of the shard at path (already opened as
 * fd) into *buf (malloc'ed, the caller frees) and fill m[0..n) (the
 * caller passes room for idx->s[i].n members). Reads only that sample:
 * one pread of its byte range (plain) or of its LZ4 frame.
 */
int gk_shard_read_sample(int fd, const char *path, const gk_shard_index *idx,
			 size_t i, void **buf, gk_shard_member *m, gk_err *err);

/*
 * data-pack -g: one sample or one member of a shard, found through its
 * index (never reading the rest of the shard) and written to out. what
 * is "KEY" (the sample, as a one-sample tar whose members carry mtime)
 * or "KEY.EXT" (that member's bytes). The index must belong to the shard
 * (gk_shard_index_check on that sample). Data is copied in chunks: memory
 * stays bounded whatever the member sizes. Errors name what is missing or
 * wrong: the index, the key, the member.
 */
int gk_shard_get(const char *shard, const char *what, int64_t mtime, int out,
		 gk_err *err);

typedef struct gk_shard_info {
	char *path;      /* as listed: relative to the manifest's directory */
	uint64_t samples, bytes, xxh3;
} gk_shard_info;

/* A file of the tokenizer shards were tokenized with, and its XXH3. */
typedef struct gk_shard_tok_file {
	char *path;    /* as given to the packer */
	uint64_t xxh3; /* of the file's bytes */
} gk_shard_tok_file;

/*
 * The tokenizer of tokenized shards (gk_shard_tokenize), as the manifest
 * records it: the tokenizer's identity (gk_tok_fingerprint: equal for
 * tokenizers that encode alike, whatever their files' format), its
 * vocabulary size, the end-of-text id ending every document, the .npy
 * element size (2: '<u2', 4: '<i4'), the ids written (end-of-text ids
 * included) and the files it was read from. present is 0 for shards of
 * other data.
 */
typedef struct gk_shard_tok_info {
	int present;
	uint64_t fingerprint;
	uint64_t vocab;
	int64_t eot;
	int itemsize;
	uint64_t tokens;
	size_t nfiles;
	gk_shard_tok_file *files;
} gk_shard_tok_info;

typedef struct gk_shard_manifest {
	size_t n;
	gk_shard_info *v;
	size_t cap;              /* of v */
	uint64_t samples, bytes; /* totals */
	char *dir;               /* directory the paths are relative to */
	gk_shard_tok_info tok;   /* tokenized shards: their tokenizer */
} gk_shard_manifest;

/*
 * JSON: {"format": "gpukit-shards", "version": 1, "samples": S,
 * "bytes": B, "shards": [{"path", "samples", "bytes", "xxh3"}...]}, and
 * for tokenized shards "tokenizer": {"fingerprint": HEX, "vocab_size": V,
 * "eot": E, "dtype": "<u2" | "<i4", "tokens": N, "files": [{"path",
 * "xxh3"}...]} (gpukit-shard(5)). Paths under the manifest's directory
 * are written relative to it. A manifest without "tokenizer" loads with
 * tok.present 0; a malformed one is an error.
 */
int gk_shard_manifest_write(const char *path, const gk_shard_manifest *m,
			    gk_err *err);
int gk_shard_manifest_load(const char *path, gk_shard_manifest *m,
			   gk_err *err);
/* Global sample number -> (shard, local); -1 when past the end. */
int gk_shard_manifest_locate(const gk_shard_manifest *m, uint64_t global,
			     size_t *shard, uint64_t *local);
/* path of shard i as a file name (the directory prepended); malloc'ed. */
char *gk_shard_manifest_file(const gk_shard_manifest *m, size_t i);
int gk_shard_manifest_add(gk_shard_manifest *m, const char *path,
			  uint64_t samples, uint64_t bytes, uint64_t xxh3,
			  gk_err *err);
void gk_shard_manifest_free(gk_shard_manifest *m);

/*
 * Verify a shard: read every byte in strict mode (gk_shard_reader_strict;
 * LZ4 content checksums are checked on the way), require the
 * end-of-archive blocks, compare the index beside it when there is one,
 * and with want (may be NULL) the manifest's sample count and XXH3.
 * The message names the shard and, for structure, the sample.
 */
int gk_shard_verify(const char *shard, const gk_shard_info *want, gk_err *err);

/* ---- writer ----------------------------------------------------------------- */

/*
 * The files a run has written (shards, indexes, the manifest), by
 * identity (st_dev, st_ino), so that two names of one file
 * ("x0/../s.tar" and "x1/../s.tar") are one. A later output that is one
 * of them would destroy it: the writer refuses instead (a pattern that
 * gives two shard numbers one file, a manifest named like a shard).
 */
typedef struct gk_shard_output {
	uint64_t dev, ino;
	char *what; /* "shard 3 'out/x-3.tar'", for messages */
} gk_shard_output;

typedef struct gk_shard_outputs {
	gk_shard_output *v;
	size_t n, cap;
} gk_shard_outputs;

/*
 * Record the file now at path as written by this run; what names it.
 * A path that names no file (removed meanwhile) is not recorded.
 */
int gk_shard_outputs_add(gk_shard_outputs *o, const char *path, const char *what,
			 gk_err *err);
/* The recorded file that path names, or NULL. */
const gk_shard_output *gk_shard_outputs_find(const gk_shard_outputs *o, const char *path);
/*
 * 0 when path names no file or one this run has not written; -1 when it
 * is one of them, with "WHAT: the same file as THAT, written by this
 * run" in err.
 */
int gk_shard_outputs_check(const gk_shard_outputs *o, const char *path,
			   const char *what, gk_err *err);
void gk_shard_outputs_free(gk_shard_outputs *o);

typedef struct gk_shard_write_opts {
	const char *pattern; /* "out/train-%06d.tar" or one name ("-": stdout) */
	uint64_t max_count;  /* samples per shard, 0: no limit */
	uint64_t max_size;   /* bytes per shard file, 0: no limit; a sample
				larger than this gets a shard of its own */
	int lz4;             /* compress (default: when the name ends in .lz4) */
	int lz4_level;       /* LZ4F compressionLevel: 0 fast, 3..12 HC */
	int jobs;            /* compression threads (OpenMP), <= 1: one */
	int index;           /* write NAME.idx beside every shard */
	int64_t mtime;       /* every member's mtime (SOURCE_DATE_EPOCH or 0) */
	unsigned first;      /* number of the first shard */
	int fd;              /* pattern "-": write here (0: standard output) */
	gk_shard_outputs *outputs; /* every shard and index committed is
				added; one that would replace a file
				already there is refused (NULL: the
				writer keeps its own list) */
} gk_shard_write_opts;

typedef struct gk_shard_writer gk_shard_writer;

int gk_shard_writer_open(gk_shard_writer **out, const gk_shard_write_opts *o,
			 gk_err *err);
/*
 * Add one sample. The members (ext, data, size; offset ignored) may come
 * in any order: they are written in byte order of their extensions.
 * Errors: a bad name, two extensions equal up to case (webdataset
 * lowercases them), a key already written to this shard. The data is
 * copied; the caller may reuse its buffers on return.
 */
int gk_shard_writer_add(gk_shard_writer *w, const char *key, size_t n,
			const gk_shard_member *m, gk_err *err);
/*
 * Where gk_shard_writer_add_stream gets a member's bytes: n bytes (n <= 1
 * MiB) of member i (its number in the caller's array) starting at byte
 * off of its data, into buf. Return 0, or -1 with err set. Calls for a
 * member come in increasing off without gaps, members one after another
 * in the writer's order (by extension).
 */
typedef int (*gk_shard_read_fn)(void *ctx, size_t i, uint64_t off, void *buf,
				size_t n, gk_err *err);
/*
 * Add one sample whose data is read through read instead of held in
 * memory: m[].data is ignored and m[].size must be exact. The sample is
 * written straight to the shard (the samples added before it first), so
 * memory stays at one chunk whatever the sizes; LZ4 frames of streamed
 * samples are compressed on the calling thread. Same errors as
 * gk_shard_writer_add, and read's; after an error the writer only aborts.
 */
int gk_shard_writer_add_stream(gk_shard_writer *w, const char *key, size_t n,
			       const gk_shard_member *m, gk_shard_read_fn read,
			       void *ctx, gk_err *err);
/* Bytes of input added so far (for progress). */
uint64_t gk_shard_writer_bytes_in(const gk_shard_writer *w);
/*
 * Finish the last shard and commit every file: each shard before its
 * index (an index under the index's name that belonged to an earlier
 * shard is removed first, also with index off). *man (may be NULL) gets
 * the shards written, in order. Frees w. A shard or index whose name
 * resolves to a file this run wrote (gk_shard_outputs_check) is an
 * error at its commit, before anything is removed or replaced.
 */
int gk_shard_writer_close(gk_shard_writer *w, gk_shard_manifest *man,
			  gk_err *err);
/* Remove the shard being written (committed shards stay). Frees w. */
void gk_shard_writer_abort(gk_shard_writer *w);

/* ---- reader ----------------------------------------------------------------- */

typedef struct gk_shard_reader gk_shard_reader;

/* Open a shard file ("-": standard input), plain or LZ4. */
int gk_shard_reader_open(gk_shard_reader **out, const char *path, gk_err *err);
/* Read from fd (not closed by the reader); name is for messages. */
int gk_shard_reader_open_fd(gk_shard_reader **out, int fd, const char *name,
			    gk_err *err);
/*
 * Start at sample i of the shard (before the first next). With an index,
 * one seek; without, the samples before i are skipped (their data is not
 * copied; on a regular plain file it is not even read).
 */
int gk_shard_reader_seek(gk_shard_reader *r, uint64_t i,
			 const gk_shard_index *idx, gk_err *err);
/*
 * The next sample: 1 and *s filled (valid until the next call), 0 at the
 * end of the shard, -1 on error: truncation (in a plain file, also a
 * member claiming more bytes than the file has), garbage, a member whose key
 * was seen before in a sample that ended (members not consecutive), a
 * duplicate extension within a sample. Non-regular entries and names
 * without a key are skipped, as webdataset skips them.
 */
int gk_shard_reader_next(gk_shard_reader *r, const gk_shard_sample **s,
			 gk_err *err);
/* Uncompressed tar bytes consumed so far (the end-of-archive offset once
 * next has returned 0). */
uint64_t gk_shard_reader_offset(const gk_shard_reader *r);
/*
 * Sizes only (data-pack -t): members get their size and offset but no
 * data (m[].data is NULL), which is skipped, by a seek on a plain file.
 */
void gk_shard_reader_sizes_only(gk_shard_reader *r, int on);
/*
 * Strict mode (data-pack -x and --verify): entries webdataset would skip
 * are errors instead: links, devices, directories... ("not a regular
 * file"), names without a key, and names failing gk_shard_check_name
 * (absolute, "..", control characters, invalid UTF-8).
 */
void gk_shard_reader_strict(gk_shard_reader *r, int strict);
void gk_shard_reader_close(gk_shard_reader *r);

/* ---- dataset: the trainer's iterator ---------------------------------------- */

/*
 * Order of an epoch (gpukit-shard(5), "SPLIT AND SHUFFLE"):
 *  1. the shard list is permuted by a PRNG keyed on (seed, epoch) when
 *     shuffle is on;
 *  2. the samples of the permuted shards form one stream of S samples;
 *  3. the stream is cut into P = world * workers equal contiguous parts
 *     of floor(S / P) samples: part rank*workers+worker is ours. Every
 *     rank gets the same count even with fewer shards than ranks (a part
 *     may start mid-shard); the S mod P samples left at the end of the
 *     stream are not used in that epoch (a different set each epoch when
 *     shuffling);
 *  4. with shuffle, the part is read in windows of shuffle_buffer samples
 *     and each window is permuted by a PRNG keyed on (seed, epoch, part,
 *     window).
 * So the order is a pure function of (seed, epoch, part), and the state
 * is (epoch, position): resume is one seek plus the refill of one window.
 *
 * A shard with an index beside it is read by offsets (one pread or one
 * LZ4 frame per sample); one without is read through gk_shard_reader
 * (with a brace pattern, by offsets too: the counts come from reading
 * its headers, which makes an index in memory). The index must be the
 * shard's: when it is loaded, its size binding and the tar headers of its
 * first and last samples are checked (and that nothing follows the last),
 * and each sample's headers the first time it is read (they are in
 * memory then: one header per member). An index that fails is replaced
 * by the tar's own headers, with a note; if that changes the shard's
 * sample count the dataset fails. Compressed shards other than LZ4 are
 * refused. The dataset needs files (it counts and seeks);
 * gk_shard_reader alone also reads pipes.
 */
typedef struct gk_shard_dataset_opts {
	int rank, world;        /* default 0 of 1 */
	int worker, workers;    /* default 0 of 1 */
	int shuffle;            /* shard and window shuffle */
	uint64_t seed;
	size_t shuffle_buffer;  /* window in samples; 0: 1000 */
	size_t prefetch;        /* samples read ahead by a thread; 0: no thread */
	int loop;               /* at the end of an epoch start the next */
	/*
	 * Called with one line (no tool name, no newline) when the dataset
	 * works around a problem in the data and goes on: an index that is
	 * not its shard's (the tar's own headers are read instead), a shard
	 * without its end-of-archive blocks. From gk_shard_dataset_open, or
	 * later from the prefetch thread; once per shard and problem. NULL:
	 * nobody is told (the library does not print).
	 */
	void (*note)(void *ctx, const char *msg);
	void *note_ctx;
} gk_shard_dataset_opts;

/* One shard of the list a state was saved for: its name and count. */
typedef struct gk_shard_state_shard {
	const char *name;
	uint64_t samples;
} gk_shard_state_shard;

/*
 * What a checkpoint stores, also as one line of JSON. A trainer gathers
 * every part's state (every rank's, every worker's) and keeps them all:
 * on the same world each part restores its own; on another world
 * gk_shard_dataset_restore_world remaps the epoch from the list.
 */
typedef struct gk_shard_state {
	uint64_t seed, epoch, pos; /* pos: samples returned in this epoch */
	uint64_t samples;          /* this part's in this epoch, a check */
	uint32_t part, parts;
	uint64_t window;           /* shuffle window read with (1: no shuffle;
				      0 in a parsed state without one: as now) */
	/*
	 * A remapped epoch's history, empty otherwise: per earlier world
	 * ("generation") of this epoch, its parts P, its window B and every
	 * part's position: [P, B, pos[0..P)] after one another. It is the
	 * same in every part's state. From gk_shard_dataset_state it points
	 * into the dataset (valid until it moves to another epoch or
	 * restores); from gk_shard_state_parse it is the caller's to free
	 * with gk_shard_state_free.
	 */
	const uint64_t *hist;
	size_t nhist;
	/*
	 * The shard list the positions index. files is its identity, the
	 * XXH3-64 of, per shard in list order, its path relative to the
	 * list's longest common directory, a NUL, then its sample count,
	 * its size in bytes and the XXH3-64 of its first 4 KiB, each as 8
	 * little-endian bytes: the tree moved elsewhere resumes, from a
	 * manifest or a brace pattern alike, while en/s-0.tar and
	 * de/s-0.tar, or two folders of like-named shards, differ (has_files
	 * 0 in a parsed state saved before it). list is the older identity,
	 * basenames and counts (the same bytes with the basename and the
	 * count only), by which a state without files is checked. shards is
	 * the list's length, 0 in a parsed state saved before states named
	 * their list (not checked then). names, only for a short list
	 * (nnames 0 or shards), is the list itself (relative paths; basenames
	 * in a state without files), so a refusal can name the first shard
	 * that differs. Owned as hist is.
	 */
	uint64_t files;
	int has_files;
	uint64_t list, shards;
	const gk_shard_state_shard *names;
	size_t nnames;
} gk_shard_state;

/*
 * The files a shard list names, appended to out in this order: the list
 * is brace-expanded (gk_brace_expand), then each word is
 *   a glob (it has *, ? or [): the files it matches, in byte order (not
 *       the locale's: every rank must list the same order); a directory
 *       it matches stands for its shards; no match is an error unless
 *       the word names a file as it is, and so is a match that is an
 *       index (.idx) or a manifest (.json) beside the shards;
 *   a directory: the files in it named *.tar or *.tar.lz4 (not those in
 *       its subdirectories), in byte order; a
 *       manifest in it is not read (name the manifest for that); none is
 *       an error that says what is there instead (a manifest, .bin token
 *       files, files to pack);
 *   else the word as it is (a file, or a name that open will say is
 *       missing).
 * A manifest is not a list: gk_shard_dataset_open tells it by its .json.
 */
int gk_shard_list_expand(const char *source, gk_strlist *out, gk_err *err);
/* 1 when a file name is a shard's (*.tar, *.tar.lz4). */
int gk_shard_list_is_shard(const char *name);

typedef struct gk_shard_dataset gk_shard_dataset;

/*
 * source: a manifest (".json"), or a list of shard files (brace
 * patterns "train-{000000..000031}.tar", globs "shards/train-*.tar" and
 * directories, as gk_shard_list_expand reads them), whose sample counts
 * come from their .idx files when present, else from reading each shard
 * once. A list's tokenizer (gk_shard_dataset_manifest's tok) is that of
 * the manifests beside its shards: in each directory a shard comes from,
 * the .json files that are gpukit-shards manifests recording a tokenizer
 * (the format named in their first 4 KiB; a malformed one is noted and
 * skipped). Every shard must then be a file one of them lists, at the
 * size it lists (the file itself, found by device and inode: a name and
 * a size, no hash of the shard's bytes), and all must agree on the
 * tokenizer (fingerprint and end-of-text id); otherwise the open fails
 * naming the shard and the manifests. No such manifest: tok.present 0.
 */
int gk_shard_dataset_open(gk_shard_dataset **out, const char *source,
			  const gk_shard_dataset_opts *o, gk_err *err);
/* 1 and *s (valid until the next call), 0 at the end of the epoch
 * (unless loop), -1 on error. */
int gk_shard_dataset_next(gk_shard_dataset *d, const gk_shard_sample **s,
			  gk_err *err);
/* Samples in this epoch for this rank/worker: equal on every rank in a
 * normal epoch; in a remapped one the first parts may have one more. */
uint64_t gk_shard_dataset_len(const gk_shard_dataset *d);
/* The whole dataset's counts. */
const gk_shard_manifest *gk_shard_dataset_manifest(const gk_shard_dataset *d);
/*
 * This part's state; its pointers are into d (hist valid until d moves to
 * another epoch or restores, names until d closes). The shard list's
 * names are in it when their JSON takes at most GK_SHARD_STATE_NAMES
 * bytes (and they are UTF-8), so a state stays small on many shards.
 */
enum { GK_SHARD_STATE_NAMES = 512 };
void gk_shard_dataset_state(const gk_shard_dataset *d, gk_shard_state *st);
/*
 * Go to a state of this part (any epoch, any position, remapped or not);
 * checks it fits this dataset: same seed, part and parts, shard list
 * (gk_shard_state.files, in order: the first difference is named when
 * the state holds the list), window, counts.
 */
int gk_shard_dataset_restore(gk_shard_dataset *d, const gk_shard_state *st,
			     gk_err *err);
/*
 * Resume from the states of every part of a run, on any world size (and
 * workers). With the same number of parts, this part restores its own
 * state. With another, the epoch is remapped: the samples no old part had
 * returned (each old part's unseen samples, in stream order: the rest of
 * its current shuffle window and everything after it), taken over the
 * old parts in order, are cut into parts contiguous pieces, the first
 * (count mod parts) one sample longer, and this part reads its piece in
 * shuffled windows as usual. So within the epoch every sample is returned
 * once by the old world or the new, none twice; the next epoch is a
 * normal one. A remapped epoch can be saved and remapped again (the
 * states carry the history). The states must come from one run of this
 * dataset (same shard list, seed, shuffle window, one epoch, each part
 * once); the shard list is checked as gk_shard_dataset_restore does.
 */
int gk_shard_dataset_restore_world(gk_shard_dataset *d,
				   const gk_shard_state *states, size_t n,
				   gk_err *err);
/*
 * Whether this part returns sample `index` of shard `shard` (positions in
 * the manifest) in the current epoch, remapped or not: 1 or 0.
 */
int gk_shard_dataset_part_has(const gk_shard_dataset *d, uint64_t shard,
			      uint64_t index);
/* Start an epoch from its first sample (same as restore with pos 0). */
int gk_shard_dataset_set_epoch(gk_shard_dataset *d, uint64_t epoch,
			       gk_err *err);
void gk_shard_dataset_close(gk_shard_dataset *d);

/*
 * {"seed":S,"epoch":E,"pos":P,"samples":N,"part":R,"parts":W,"window":B,
 *  "list":"XXH3","shards":K,"files":"XXH3"} plus "names":[["s-00.tar",29],...] for a
 * short list and "hist":[...] in a remapped epoch; JSON integers, so a
 * seed that must round-trip stays below 2^63. format returns the length
 * the text needs, as snprintf does (a history makes it long: size buf
 * from it); names are UTF-8.
 */
int gk_shard_state_format(const gk_shard_state *st, char *buf, size_t len);
int gk_shard_state_parse(const char *json, gk_shard_state *st, gk_err *err);
void gk_shard_state_free(gk_shard_state *st);

/* The PRNG the shuffles use (splitmix64), exposed for tests. */
uint64_t gk_shard_mix(uint64_t x);
/* Fisher-Yates permutation of 0..n-1 keyed on key. */
void gk_shard_permute(uint64_t *v, size_t n, uint64_t key);

/* ---- tokenizing --------------------------------------------------------------- */

/*
 * Packing text as token ids (data-pack --tokenize). Every sample of the
 * input is one document: its one member must be text, that is have the
 * extension "txt" or ext (any case, as webdataset lowercases them); it is
 * encoded with tok (gk_tok_encode without special tokens: text that
 * spells "<|endoftext|>" stays text), eot is appended, and the ids are
 * stored as the member KEY.npy, '<u2' when the vocabulary has at most
 * 65536 ids, else '<i4' (gk_shard_npy_header). Documents are read (files)
 * and encoded by jobs threads (OpenMP) in batches of some MiB, and added
 * to the writer in input order by one of them while the others encode
 * the next batch, so the shards are the same bytes whatever jobs is, and
 * so is the error of a failing run (the first document in input order
 * that fails); a document is held in memory (its bytes and ids) while it
 * is encoded, two batches at most.
 */
typedef struct gk_shard_tokenize {
	const gk_tok *tok;
	int64_t eot;     /* id appended to every document */
	const char *ext; /* another text extension, or NULL: "txt" only */
	int jobs;        /* encoding threads, <= 1: one */
	uint64_t tokens; /* out: ids written so far, eot included */
	struct gk_shard_tokstats *stats; /* where the time goes, or NULL */
} gk_shard_tokenize;

/*
 * Where a --tokenize run's time goes (data-pack -vv): for each stage the
 * wall and thread-CPU seconds spent in it (summed over the threads for
 * the stages run on them), and its serial seconds: the wall time it took
 * while no other thread could work (on the one thread outside the
 * batches' parallel regions, or the tail of a region, after the first
 * thread ran out of work, charged to write when the last thread was the
 * writer, else to encode).
 * The serial path is the whole run's wall time less the parallel
 * regions' wall time up to their tails: at one thread it is the part
 * that more threads cannot shorten (Amdahl).
 */
enum {
	GK_TOKST_LOAD,   /* opening the tokenizer (the caller's) */
	GK_TOKST_LIST,   /* listing and naming the input (the caller's) */
	GK_TOKST_QUEUE,  /* documents to batches, a stat each (the source's thread) */
	GK_TOKST_READ,   /* reading documents' files (threads) */
	GK_TOKST_ENCODE, /* gk_tok_encode (threads) */
	GK_TOKST_NPY,    /* making the .npy members (threads) */
	GK_TOKST_WRITE,  /* the writer: tar entries, hashes, LZ4, writing */
	GK_TOKST_WAIT,   /* threads idle at a batch's end */
	GK_TOKST_CLOSE,  /* closing the writer and the manifest (the caller's) */
	GK_TOKST_N
};
typedef struct gk_shard_tokstats {
	double wall[GK_TOKST_N], cpu[GK_TOKST_N], serial[GK_TOKST_N];
	double start;     /* gk_now() when the run started */
	double parallel;  /* wall seconds of parallel regions before their tails */
	uint64_t batches, docs;
	int jobs;
} gk_shard_tokstats;
/* A stage's stopwatch: wall (gk_now) and this thread's CPU seconds. */
typedef struct gk_shard_tokclock {
	double wall, cpu;
} gk_shard_tokclock;
/* s zeroed, its start now; c started. */
void gk_shard_tokstats_begin(gk_shard_tokstats *s, gk_shard_tokclock *c);
void gk_shard_tokclock_start(gk_shard_tokclock *c);
/*
 * The time since c to stage (all of it serial when serial is 1), and c
 * restarted. Nothing when s is NULL. Not for concurrent use.
 */
void gk_shard_tokstats_add(gk_shard_tokstats *s, int stage, gk_shard_tokclock *c,
			   int serial);
/* The table, lines "prefix: ...", the run's wall time up to now. */
void gk_shard_tokstats_print(const gk_shard_tokstats *s, const char *prefix, FILE *fp);

/* 1 when a member of extension ext is text for tz. */
int gk_shard_tokenize_is_text(const gk_shard_tokenize *tz, const char *ext);
/* The .npy element size for tz's vocabulary: 2 or 4. */
int gk_shard_tokenize_itemsize(const gk_shard_tokenize *tz);
/*
 * tz's record for the manifest (*out is freed first, as
 * gk_shard_tok_info_free does): the tokenizer's fingerprint, vocabulary,
 * eot, element size, tokens so far, and its files' paths and XXH3 (each
 * read again). -1 when a file cannot be read.
 */
int gk_shard_tokenize_info(const gk_shard_tokenize *tz, gk_shard_tok_info *out,
			   gk_err *err);
void gk_shard_tok_info_free(gk_shard_tok_info *t);

/* ---- packing: inputs to the writer ------------------------------------------ */

/* Files to pack: member names and the files they come from. */
typedef struct gk_shard_source {
	gk_strlist names, paths;
} gk_shard_source;

/*
 * Add every regular file under dir, walked in byte order of names,
 * named relative to dir (symlinks to files are followed; symlinks to
 * directories, devices and fifos are errors). A regular file (or a
 * symlink to one) given as dir is added itself, named by its path with
 * leading "/" and "./" removed, as tar and gk_shard_source_list name it.
 */
int gk_shard_source_walk(gk_shard_source *src, const char *dir, gk_err *err);
/*
 * Add the files listed in fp, one path per line (empty lines skipped).
 * Member names are the paths with leading "/" and "./" removed, as tar
 * does. what names the list in messages ("-" for standard input).
 */
int gk_shard_source_list(gk_shard_source *src, FILE *fp, const char *what,
			 gk_err *err);
void gk_shard_source_free(gk_shard_source *src);
/*
 * The bytes of src's files, as stat says now (the total of a progress
 * line, whose done is gk_shard_writer_bytes_in): 0, unknown, when one is
 * not a regular file (a fifo's size is known when it ends) or cannot be
 * stat'ed (packing will say why).
 */
uint64_t gk_shard_source_bytes(const gk_shard_source *src);
/*
 * How a file's name becomes its member name, for names webdataset's rule
 * (the key ends at the first dot of the last component) cannot split:
 *   ext    given to a name whose last component has no dot: "README"
 *          -> "README.txt" (key "README"); NULL: such a name is an error;
 *   whole  every file is a sample of its own, keyed by its whole name:
 *          the dots of the last component become '_' and ext (required)
 *          is the extension: "notes.md" -> "notes_md.txt",
 *          ".bashrc" -> "_bashrc.txt", "v1.2/x" -> "v1.2/x.txt".
 * A name that is KEY.EXT already is kept as it is unless whole. The key
 * is webdataset's in every case, so readers split the result as the
 * writer did.
 */
typedef struct gk_shard_naming {
	const char *ext;
	int whole;
} gk_shard_naming;

/* The return of the calls below for a name that has no KEY.EXT form and
 * gets none from the naming (no ext, or a hidden file without whole). */
enum { GK_SHARD_NO_KEY = -2 };

/* Is nm usable: ext a valid extension ("txt", "seg.png": no '/', no
 * leading, trailing or double dot, what gk_shard_check_name allows),
 * present when whole. */
int gk_shard_naming_check(const gk_shard_naming *nm, gk_err *err);
/*
 * *out (malloc'ed) = the member name of file name `name` under nm (NULL:
 * names are kept). GK_SHARD_NO_KEY with "name 'N': ..." in err for a name
 * that stays without a key, -1 when out of memory.
 */
int gk_shard_member_name(const char *name, const gk_shard_naming *nm, char **out,
			 gk_err *err);
/*
 * Give every file of src its member name (gk_shard_member_name) and check
 * that no two files get one name ("files 'A' and 'B' would both be member
 * 'M'", or a file given twice), before anything is packed.
 * GK_SHARD_NO_KEY and *nokey = the file's number in src for a name
 * without a key; -1 for the rest (*nokey = SIZE_MAX).
 */
int gk_shard_source_name(gk_shard_source *src, const gk_shard_naming *nm,
			 size_t *nokey, gk_err *err);
/*
 * Take out of src the files this run writes and replaces, as GNU tar
 * leaves out the archive it writes: every file the pattern names from
 * shard first on (until 64 numbers in a row name none, as
 * gk_shard_pattern_tail scans), the index beside each and the manifest
 * (may be NULL), compared by identity (st_dev, st_ino). Packing them
 * would put an earlier run's shards into the shards that replace them.
 * skipped gets the paths taken out, in input order, for the caller to
 * say so.
 */
int gk_shard_source_drop_outputs(gk_shard_source *src, const char *pattern,
				 unsigned first, const char *manifest,
				 gk_strlist *skipped, gk_err *err);

/*
 * Group the files into samples by key (in the order keys first appear;
 * with shuffle, in a random order keyed on seed), read each sample's
 * files and add it to w. progress (may be NULL) is updated with input
 * bytes. Regular files are read for exactly the size fstat gave (a file
 * that shrinks or grows meanwhile is an error), a sample over 4 MiB is
 * streamed to the shard, so memory stays bounded whatever the file
 * sizes; other files (fifos) are read to their end into memory. With
 * tz (may be NULL) every sample is a text document stored as token ids
 * (gk_shard_tokenize; a file is then read whole), and tz->tokens counts
 * the ids; progress is then updated with text bytes read.
 */
int gk_shard_pack(gk_shard_writer *w, const gk_shard_source *src, int shuffle,
		  uint64_t seed, gk_shard_tokenize *tz, gk_progress *progress,
		  gk_err *err);
/*
 * Repack a tar stream (any format and compression libarchive reads):
 * consecutive members sharing a key make a sample; leading "./" is
 * dropped; directories are skipped. What webdataset would skip is an
 * error, as gk_shard_pack makes it for files: links (hard and symbolic),
 * devices, fifos, names left without KEY.EXT by nm (may be NULL:
 * names as they are; GK_SHARD_NO_KEY then). A stream cannot be read twice,
 * so each sample is held in memory. tz as for gk_shard_pack.
 */
int gk_shard_pack_tar(gk_shard_writer *w, const char *path,
		      const gk_shard_naming *nm, gk_shard_tokenize *tz,
		      gk_progress *progress, gk_err *err);

/* ---- extraction ------------------------------------------------------------- */

/*
 * Write data to DIR/name without ever leaving DIR: name must pass
 * gk_shard_check_name-like path checks (relative, no ".."), parent
 * directories are created with mkdirat, and every component is opened
 * with O_NOFOLLOW so a symlink planted in DIR cannot redirect the write.
 * The file appears atomically (temp + rename) with mode 0644 & ~umask.
 */
int gk_shard_extract_file(int dirfd, const char *dirname, const char *name,
			  const void *data, size_t size, gk_err *err);
/*
 * data-pack -x: every member of a shard ("-": standard input) to DIR as
 * gk_shard_extract_file does, read in strict mode and copied in chunks
 * as it is read (memory stays bounded whatever the member sizes).
 * Members before a bad one stay extracted, as with tar.
 */
int gk_shard_extract(const char *shard, int dirfd, const char *dirname,
		     gk_err *err);

/* ---- token members ------------------------------------------------------------ */

/* A parsed .npy array (numpy/lib/format.py, versions 1 to 3): a sample's
 * tokens, as data-pack and numpy write them (npy.c). */
typedef struct gk_shard_npy {
	const unsigned char *data; /* inside the buffer given */
	uint64_t count;            /* elements */
	int itemsize, is_signed;   /* '<u2': 2, 0; '<i4': 4, 1 */
} gk_shard_npy;

/* Accepts 1-D, C order, '<u2' or '<i4', data filling the rest exactly. */
int gk_shard_npy_parse(const void *buf, size_t len, gk_shard_npy *out, gk_err *err);

/*
 * The header numpy's np.save writes before count elements of a 1-D
 * array of itemsize 2 ('<u2') or 4 ('<i4'): format 1.0, the dictionary
 * padded with numpy's growth room and to 64 bytes, so a member written
 * as this header and the little-endian elements is byte for byte the
 * file np.save makes. Writes at most GK_SHARD_NPY_HEADER_MAX bytes to
 * buf and returns their number.
 */
enum { GK_SHARD_NPY_HEADER_MAX = 192 };
size_t gk_shard_npy_header(unsigned char *buf, int itemsize, uint64_t count);

#endif
