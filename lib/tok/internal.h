/*
 * internal.h - lib/tok's shared internals (not part of the public API;
 * tests/unit/tok.c reaches in to check the pieces one by one).
 */
#ifndef GK_TOK_INTERNAL_H
#define GK_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tok/tok.h"

/* ---- Unicode classes (unicode.c, generated; pretok.c) --------------------- */

enum { GK_TOK_OTHER = 0, GK_TOK_LETTER = 1, GK_TOK_NUMBER = 2, GK_TOK_SPACE = 3 };

typedef struct gk_tok_uni_range {
	uint32_t lo, hi;
	uint8_t cls;
} gk_tok_uni_range;

extern const gk_tok_uni_range gk_tok_uni_ranges[];
extern const size_t gk_tok_uni_nranges;
extern const uint32_t gk_tok_uni_limit; /* every code point >= it is OTHER */

/* The class of code point cp (any value; past U+10FFFF is OTHER). */
int gk_tok_class(uint32_t cp);

/*
 * The character at s (n > 0 bytes left): its length in bytes and its
 * class. A byte that does not start a well-formed UTF-8 sequence (Unicode
 * table 3-7: no overlongs, no surrogates, nothing past U+10FFFF, no
 * truncation) is a character of one byte and class OTHER.
 */
size_t gk_tok_char(const uint8_t *s, size_t n, int *cls);

/*
 * The length of the piece of GPT-2's pattern that starts at s (n > 0):
 * the regular expression's leftmost alternative that matches there,
 * matched as the regex engines do (greedy, with the look-ahead of
 * \s+(?!\S)).
 */
size_t gk_tok_piece(const uint8_t *s, size_t n);
/* The same, and *space says whether the piece is white space. */
size_t gk_tok_piece_kind(const uint8_t *s, size_t n, int *space);

/* GPT-2's bytes_to_unicode: the code point that names byte b in vocab.json,
 * and back (-1 for a code point that names no byte). */
uint32_t gk_tok_byte_cp(uint8_t b);
int gk_tok_cp_byte(uint32_t cp);

/* ---- the tokenizer (load.c, encode.c) ------------------------------------- */

typedef struct gk_tok_merge {
	uint64_t pair; /* left id << 32 | right id; UINT64_MAX marks a free slot */
	uint32_t rank, id;
} gk_tok_merge;

typedef struct gk_tok_special_tok {
	char *text;
	size_t len;
	uint32_t id;
} gk_tok_special_tok;

struct gk_tok {
	uint32_t nids;       /* vocab size: largest id + 1 */
	uint32_t *off;       /* token id's bytes: bytes[off[id] .. off[id+1]) */
	uint8_t *present;    /* 1 where an id has a token */
	char *bytes;
	uint32_t byte_id[256];
	gk_tok_merge *merges; /* open addressing, mask + 1 slots */
	size_t merge_mask, nmerges;
	gk_tok_special_tok *special;
	size_t nspecial, special_max;
	uint8_t special_first[256]; /* 1 where a special token starts with the byte */
	int add_prefix_space;        /* tokenizer.json's ByteLevel option */
	gk_strlist paths;
	uint64_t fingerprint;
};

/* The merge of (a, b): its rank and result, or NULL. */
static inline const gk_tok_merge *gk_tok_merge_find(const gk_tok *t, uint32_t a,
						    uint32_t b)
{
	uint64_t key = (uint64_t)a << 32 | b;
	if (!t->merges)
		return NULL;
	uint64_t h = key * 0x9E3779B97F4A7C15ull;
	size_t i = (size_t)(h >> 32) & t->merge_mask;
	for (;;) {
		const gk_tok_merge *m = &t->merges[i];
		if (m->pair == key)
			return m;
		if (m->pair == UINT64_MAX)
			return NULL;
		i = (i + 1) & t->merge_mask;
	}
}

/*
 * BPE of one piece of n bytes into out (room for n ids), returning the
 * count (0 when out of memory). heap chooses the O(n log n) algorithm that long pieces use; the
 * O(n^2) one is faster for short ones, and the two agree (tests/unit/tok.c).
 */
size_t gk_tok_bpe(const gk_tok *t, gk_tok_enc *e, const uint8_t *s, size_t n,
		  uint32_t *out, int heap);

#endif
