/*
 * tok.h - GPT-2 byte-level BPE tokenizer (prefix gk_tok_).
 *
 * Encodes text to token ids and decodes ids to bytes exactly as GPT-2's
 * encoder and Hugging Face tokenizers' ByteLevel BPE do; gpukit-tok(5)
 * describes the files and the rules. The steps, each where it is kept:
 *
 *   pre-tokenizer  GPT-2's pattern ('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|
 *                  ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+) as a hand-made
 *                  matcher over Unicode classes generated from the Unicode
 *                  Character Database (pretok.c, unicode.c by
 *                  tools/mkunicode.py)
 *   byte map       GPT-2's bytes_to_unicode, which gives the 256 byte
 *                  tokens their names in vocab.json (pretok.c)
 *   BPE            merges by rank, lowest first and leftmost among equal
 *                  ranks, with a per-encoder cache of pieces (encode.c)
 *   files          vocab.json + merges.txt or tokenizer.json (load.c)
 *
 * Bytes that are not UTF-8 are encoded, never rejected or replaced: each
 * byte of an ill-formed sequence is one character of its own of the
 * pattern's "other" class (what Python's errors="surrogateescape" makes of
 * it), so decode(encode(x)) == x for every byte string x.
 *
 * Threads: a gk_tok is read-only once opened and may be shared by any
 * number of threads. Encoding needs a gk_tok_enc (the cache and scratch
 * space), one per thread; gk_tok_decode and the lookups need none.
 *
 * Errors follow core.h: -1 and a message in the gk_err. Nothing here
 * prints or exits.
 */
#ifndef GK_TOK_H
#define GK_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

typedef struct gk_tok gk_tok;
typedef struct gk_tok_enc gk_tok_enc;

/* A growable array of token ids; encode appends. Zero-initialise it;
 * free v when done. */
typedef struct gk_tok_ids {
	uint32_t *v;
	size_t n, cap;
} gk_tok_ids;

/* Largest id a vocabulary may use (ids index arrays of this size). */
#define GK_TOK_MAX_ID 0xFFFFFF

/*
 * Open a tokenizer. path is a directory holding tokenizer.json (used when
 * present) or vocab.json and merges.txt, or a tokenizer.json file itself.
 * gk_tok_open_files takes the two GPT-2 files by name.
 *
 * Malformed files are errors naming the file and the problem: JSON that
 * does not parse, ids that repeat or exceed GK_TOK_MAX_ID, a merge naming
 * a token the vocabulary lacks (or whose concatenation it lacks), a merge
 * given twice, a vocabulary missing one of the 256 byte tokens, a
 * tokenizer.json whose model is not a byte-level BPE (another model
 * type, a normalizer, dropout, an unknown-token or subword affix, a
 * pre-tokenizer other than ByteLevel with GPT-2's pattern).
 * *out is set on success only; free it with gk_tok_close.
 */
int gk_tok_open(gk_tok **out, const char *path, gk_err *err);
int gk_tok_open_files(gk_tok **out, const char *vocab_json,
		      const char *merges_txt, gk_err *err);
void gk_tok_close(gk_tok *t);

/* One more than the largest id (the model's embedding rows must cover it). */
uint32_t gk_tok_vocab_size(const gk_tok *t);

/*
 * The id of a special token given by its text ("<|endoftext|>"), or -1 when
 * the tokenizer has none of that name. Special tokens are tokenizer.json's
 * added_tokens; for vocab.json they are the entries whose text has the
 * form "<|...|>", GPT-2's convention for <|endoftext|>.
 */
int64_t gk_tok_special(const gk_tok *t, const char *text);

/*
 * The files the tokenizer was read from (NULL-terminated, owned by t) and
 * a fingerprint of what they define (XXH3 over every id's bytes, the
 * merges in rank order and the special tokens): two tokenizers that
 * encode alike have the same fingerprint whatever their file format, so a
 * manifest records it to refuse data tokenized with another vocabulary.
 */
const char *const *gk_tok_paths(const gk_tok *t);
uint64_t gk_tok_fingerprint(const gk_tok *t);

/* An encoder for one thread at a time. NULL when out of memory. */
gk_tok_enc *gk_tok_enc_new(const gk_tok *t);
void gk_tok_enc_free(gk_tok_enc *e);

/*
 * Encode flags. By default special-token text is ordinary text:
 * "<|endoftext|>" in a document becomes the ids of "<", "|", "endoftext"
 * and so on, as tiktoken's encode_ordinary does, so that documents cannot
 * forge document boundaries. GK_TOK_SPECIAL recognises every special token
 * in the text first (leftmost, longest) as Hugging Face's encode does, and
 * encodes the text between them separately.
 */
#define GK_TOK_SPECIAL 1u

/*
 * Encode len bytes of buf (any bytes; see above) and append the ids to
 * out. A document may be given in pieces: gk_tok_stable says how much of
 * what has been read so far encodes the same whatever follows; encode
 * that much, keep the rest, and encode what is left at the end:
 *
 *     n = gk_tok_stable(t, buf, len, flags);
 *     gk_tok_encode(e, buf, n, flags, &ids, err);   ... keep buf[n..len)
 *
 * gk_tok_stable reads all of buf, and one piece (a run of one letter, a
 * long word) can hold it all back: read at least as much again as is
 * pending before the next call, so that the work stays linear.
 *
 * A tokenizer.json with ByteLevel's add_prefix_space puts a space in
 * front of every piece of text given to encode, so for it gk_tok_stable
 * is always 0 (encode each document in one call).
 *
 * -1 only when out of memory.
 */
int gk_tok_encode(gk_tok_enc *e, const void *buf, size_t len, unsigned flags,
		  gk_tok_ids *out, gk_err *err);
size_t gk_tok_stable(const gk_tok *t, const void *buf, size_t len,
		     unsigned flags);

/*
 * The bytes of token id (*len set), or NULL when no token has that id.
 * Concatenating the bytes of encode's ids gives the text back exactly.
 * Bytes of one token need not be whole UTF-8 characters: print tokens
 * one at a time as raw bytes, not as separate strings.
 */
const char *gk_tok_token(const gk_tok *t, uint32_t id, size_t *len);

/* Append the bytes of n ids to *buf (realloc'ed, *len and *cap updated,
 * not NUL-terminated). -1 for an id no token has, naming it, or no memory. */
int gk_tok_decode(const gk_tok *t, const uint32_t *ids, size_t n, char **buf,
		  size_t *len, size_t *cap, gk_err *err);

#endif
