/*
 * data.h - the trainer's token stream (prefix gk_nn_data_): shards or
 * llm.c/nanoGPT token files, split over the ranks, with a position that
 * checkpoints keep.
 *
 * Errors: functions returning int give 0, or -1 with a message in err.
 */
#ifndef GK_NN_DATA_H
#define GK_NN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/*
 * The trainer's token stream, from either
 *   shards   a manifest or a brace pattern of shard files (lib/shard's
 *            dataset: the rank split, the (seed, epoch) shuffle, resume);
 *            a sample's tokens are its .npy member (1-D '<u2' or '<i4')
 *            or else its .txt member's bytes; samples are joined with the
 *            end-of-text token into one stream per rank;
 *   tokens   .bin files (every name ending in .bin): llm.c's (a
 *            1024-byte header of int32: magic 20240520, version 1, token
 *            count; then uint16 tokens) or nanoGPT's (raw uint16), told
 *            apart by the magic and the exact size; the files are one
 *            stream shared by all ranks, and micro-batch k of rank r
 *            starts at token (k*world + r)*B*T (llm.c's loader), so a
 *            global batch is the same tokens at any world size.
 * Row b of a micro-batch is tokens [h + b*T, h + b*T + T + 1) of the
 * stream from the head h: inputs are the first T, targets the last T;
 * the head then moves by B*T (shards) or world*B*T (tokens).
 */
typedef struct gk_nn_data_opts {
	int rank, world;
	int shuffle;        /* shards: lib/shard's shard and window shuffle */
	uint64_t seed;
	int64_t vocab;      /* every token id must be below it */
	int32_t eot;        /* end-of-text token; < 0: the one a manifest
			     * of tokenized shards records, else vocab - 1
			     * (GPT-2's 50256, the byte vocabulary's 256);
			     * another than the manifest's is an error */
	int batch, seq;     /* B, T */
	int loop;           /* go on into the next epoch at the end */
	int skip_bad;       /* shards: skip (and count) a sample that cannot
			     * be decoded or holds a token >= vocab,
			     * instead of failing */
	/* shards: gk_shard_dataset_opts' note (a problem worked around) */
	void (*note)(void *ctx, const char *msg);
	void *note_ctx;
} gk_nn_data_opts;

typedef struct gk_nn_data gk_nn_data;

/* Samples skipped so far under skip_bad (0 otherwise). */
uint64_t gk_nn_data_bad(const gk_nn_data *d);

/* Open source; a token >= vocab is an error naming the shard and sample
 * (shards: when the sample is read) or the file (tokens: at open). */
int gk_nn_data_open(gk_nn_data **out, const char *source,
		    const gk_nn_data_opts *o, gk_err *err);
/* Fill B*T inputs and targets: 1, or 0 at the end of the data (without
 * loop), or -1. */
int gk_nn_data_next(gk_nn_data *d, int32_t *inputs, int32_t *targets,
		    gk_err *err);
/* The position as one line of JSON (what a checkpoint keeps), as much
 * as fits in buf; returns, as snprintf does, the length of the whole
 * (which has no fixed bound: a remapped epoch keeps every earlier rank's
 * position), or -1. */
int gk_nn_data_state(const gk_nn_data *d, char *buf, size_t len);
/* Go back to a saved position: the next micro-batch is the one that
 * followed it. Token files: the global token position, so another world
 * size resumes at the same place. */
int gk_nn_data_restore(gk_nn_data *d, const char *json, gk_err *err);
/*
 * Shards saved by another world size: json holds every old rank's state
 * (n of them, in rank order); lib/shard's gk_shard_dataset_restore_world
 * splits the epoch's unseen samples evenly over the new ranks, so within
 * the epoch no sample is skipped and none is seen twice. The sample each
 * old rank was partway through is among them; the new rank that gets it
 * starts it at the token where the old rank stopped, so no token is
 * trained on twice either. (Its state carries that cut until the epoch
 * ends, for a restore that reads the sample again.)
 */
int gk_nn_data_restore_world(gk_nn_data *d, const char *const *json, size_t n,
			     gk_err *err);
uint64_t gk_nn_data_epoch(const gk_nn_data *d);
/*
 * What d reads, as a number that ranks can compare: for shards the
 * list's names and sample counts (gk_shard_state.list), for token files
 * the token count and the XXH3 of the tokens of each, in order (the state
 * keeps it too, and a restore refuses other files). Equal on ranks that
 * split the same data.
 */
uint64_t gk_nn_data_identity(const gk_nn_data *d);
int gk_nn_data_is_bin(const gk_nn_data *d);
/*
 * Was the data tokenized with the model's tokenizer? Shards read through
 * a manifest that records their tokenizer (data-pack --tokenize), or
 * listed with such a manifest beside them (gk_shard_dataset_open), are
 * refused when fingerprint (gk_tok_fingerprint of the model's tokenizer;
 * NULL: unknown) differs from theirs, or, with it unknown, when their
 * vocabulary is larger than vocab, the model's (a smaller one is not
 * refused: models pad their vocabulary). name (may be NULL) names the
 * model's tokenizer in the message, which names both. Data with no
 * record (token files, untokenized shards, shards listed without a
 * manifest beside them that records a tokenizer) passes.
 */
int gk_nn_data_check_tokenizer(const gk_nn_data *d, const uint64_t *fingerprint,
			       const char *name, int64_t vocab, gk_err *err);
/* 1 when d's manifest records the tokenizer its shards were made with. */
int gk_nn_data_tokenized(const gk_nn_data *d);
void gk_nn_data_close(gk_nn_data *d);



#endif
