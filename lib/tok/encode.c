/*
 * encode.c - BPE merges, the piece cache and gk_tok_encode.
 *
 * Each piece of the pre-tokenizer starts as one token per byte; then the
 * adjacent pair with the lowest merge rank is merged, the leftmost of
 * equal ranks first, until no pair has a merge. That is Hugging Face
 * tokenizers' Word::merge_all (tokenizers/src/models/bpe/word.rs), and for
 * a trained vocabulary (every merge's parts made by earlier merges) the
 * same result as GPT-2's encoder.py, which merges every occurrence of the
 * best pair in one pass.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tok/internal.h"

/* Pieces up to this many bytes are cached (long ones rarely repeat). */
#define CACHE_PIECE 64
/*
 * Slots of the cache (1.5 MiB), half of which are used before it is
 * emptied; with its keys and values an encoder holds 4 MiB. Merging a
 * short piece again costs little; the cache's size in the shared L3 costs
 * more once several threads encode: at 2 threads, 2^18 slots (16 MiB an
 * encoder) took more CPU time in all than this size, which is as fast
 * for one thread though it merges more.
 */
#define CACHE_SLOTS (1u << 16)
/* Pieces up to this many bytes use the quadratic merge loop. */
#define SHORT_PIECE 48

typedef struct cache_slot {
	uint64_t hash; /* 0: free */
	uint32_t key, keylen, val, vallen;
} cache_slot;

struct gk_tok_enc {
	const gk_tok *t;
	cache_slot *slots; /* CACHE_SLOTS */
	size_t used;
	uint8_t *keys;
	uint32_t *vals;
	size_t nkeys, nvals;
	/* scratch of the merges, for pieces of up to cap bytes */
	size_t cap;
	uint32_t *id, *rank;
	int32_t *prev, *next;
	uint64_t *heap;
	uint8_t *text; /* a segment with the prefix space (add_prefix_space) */
	size_t textcap;
};

gk_tok_enc *gk_tok_enc_new(const gk_tok *t)
{
	gk_tok_enc *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->t = t;
	e->slots = calloc(CACHE_SLOTS, sizeof(*e->slots));
	e->keys = malloc((size_t)CACHE_SLOTS / 2 * CACHE_PIECE / 4);
	e->vals = malloc((size_t)CACHE_SLOTS / 2 * CACHE_PIECE / 4 * sizeof(uint32_t));
	if (!e->slots || !e->keys || !e->vals) {
		gk_tok_enc_free(e);
		return NULL;
	}
	return e;
}

void gk_tok_enc_free(gk_tok_enc *e)
{
	if (!e)
		return;
	free(e->slots);
	free(e->keys);
	free(e->vals);
	free(e->id);
	free(e->rank);
	free(e->prev);
	free(e->next);
	free(e->heap);
	free(e->text);
	free(e);
}

static int scratch(gk_tok_enc *e, size_t n, gk_err *err)
{
	if (n <= e->cap)
		return 0;
	size_t c = n < 256 ? 256 : n + n / 2;
	uint32_t *id = realloc(e->id, c * sizeof(*id));
	if (id)
		e->id = id;
	uint32_t *rank = realloc(e->rank, c * sizeof(*rank));
	if (rank)
		e->rank = rank;
	int32_t *prev = realloc(e->prev, c * sizeof(*prev));
	if (prev)
		e->prev = prev;
	int32_t *next = realloc(e->next, c * sizeof(*next));
	if (next)
		e->next = next;
	uint64_t *heap = realloc(e->heap, 3 * c * sizeof(*heap));
	if (heap)
		e->heap = heap;
	if (!id || !rank || !prev || !next || !heap || c > INT32_MAX)
		return gk_err_sys(err, ENOMEM, "encode: a piece of %zu bytes", n);
	e->cap = c;
	return 0;
}

/* ---- the merges ----------------------------------------------------------- */

static uint32_t pair_rank(const gk_tok *t, uint32_t a, uint32_t b)
{
	const gk_tok_merge *m = gk_tok_merge_find(t, a, b);
	return m ? m->rank : UINT32_MAX;
}

/* O(n^2): scan the pairs' ranks for the lowest, merge, repeat. */
static size_t bpe_short(const gk_tok *t, gk_tok_enc *e, size_t n, uint32_t *out)
{
	uint32_t *id = out, *rk = e->rank;
	for (size_t i = 0; i + 1 < n; i++)
		rk[i] = pair_rank(t, id[i], id[i + 1]);
	while (n > 1) {
		size_t best = 0;
		for (size_t i = 1; i + 1 < n; i++)
			if (rk[i] < rk[best])
				best = i;
		if (rk[best] == UINT32_MAX)
			break;
		id[best] = gk_tok_merge_find(t, id[best], id[best + 1])->id;
		memmove(id + best + 1, id + best + 2, (n - best - 2) * sizeof(*id));
		memmove(rk + best, rk + best + 1, (n - best - 2) * sizeof(*rk));
		n--;
		if (best > 0)
			rk[best - 1] = pair_rank(t, id[best - 1], id[best]);
		if (best + 1 < n)
			rk[best] = pair_rank(t, id[best], id[best + 1]);
	}
	return n;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t x)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (h[p] <= x)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = x;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
	uint64_t top = h[0], x = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1] < h[c])
			c++;
		if (x <= h[c])
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = x;
	return top;
}

/*
 * O(n log n): a heap of (rank, position) over a linked list of symbols;
 * an entry whose pair has since changed is skipped when it comes up.
 */
static size_t bpe_heap(const gk_tok *t, gk_tok_enc *e, size_t n, uint32_t *out)
{
	uint32_t *id = e->id;
	int32_t *prev = e->prev, *next = e->next;
	uint64_t *h = e->heap;
	size_t nh = 0;
	for (size_t i = 0; i < n; i++) {
		id[i] = out[i];
		prev[i] = (int32_t)i - 1;
		next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < n; i++) {
		uint32_t r = pair_rank(t, id[i], id[i + 1]);
		if (r != UINT32_MAX)
			heap_push(h, &nh, (uint64_t)r << 32 | i);
	}
	while (nh) {
		uint64_t top = heap_pop(h, &nh);
		uint32_t r = (uint32_t)(top >> 32), p = (uint32_t)top;
		/* a merged-away symbol has prev == -2 */
		if (prev[p] == -2 || next[p] < 0)
			continue;
		int32_t q = next[p];
		const gk_tok_merge *m = gk_tok_merge_find(t, id[p], id[q]);
		if (!m || m->rank != r)
			continue;
		id[p] = m->id;
		next[p] = next[q];
		if (next[q] >= 0)
			prev[next[q]] = (int32_t)p;
		prev[q] = -2;
		if (prev[p] >= 0) {
			uint32_t r2 = pair_rank(t, id[prev[p]], id[p]);
			if (r2 != UINT32_MAX)
				heap_push(h, &nh, (uint64_t)r2 << 32 | (uint32_t)prev[p]);
		}
		if (next[p] >= 0) {
			uint32_t r2 = pair_rank(t, id[p], id[next[p]]);
			if (r2 != UINT32_MAX)
				heap_push(h, &nh, (uint64_t)r2 << 32 | p);
		}
	}
	size_t m = 0;
	for (int32_t i = 0; i >= 0; i = next[i])
		out[m++] = id[i];
	return m;
}

static size_t bpe(const gk_tok *t, gk_tok_enc *e, const uint8_t *s, size_t n, uint32_t *out,
		  int heap)
{
	for (size_t i = 0; i < n; i++)
		out[i] = t->byte_id[s[i]];
	if (n < 2)
		return n;
	return heap ? bpe_heap(t, e, n, out) : bpe_short(t, e, n, out);
}

size_t gk_tok_bpe(const gk_tok *t, gk_tok_enc *e, const uint8_t *s, size_t n, uint32_t *out,
		  int heap)
{
	if (scratch(e, n, NULL) < 0)
		return 0;
	return bpe(t, e, s, n, out, heap);
}

/* ---- the cache ------------------------------------------------------------ */

static uint64_t piece_hash(const uint8_t *s, size_t n)
{
	uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t x;
		memcpy(&x, s + i, 8);
		h = (h ^ x) * 0xff51afd7ed558ccdull;
		h ^= h >> 32;
	}
	uint64_t x = 0;
	memcpy(&x, s + i, n - i);
	h = (h ^ x) * 0xc4ceb9fe1a85ec53ull;
	h ^= h >> 29;
	return h | 1;
}

static void cache_clear(gk_tok_enc *e)
{
	memset(e->slots, 0, CACHE_SLOTS * sizeof(*e->slots));
	e->used = e->nkeys = e->nvals = 0;
}

/* ---- encoding ------------------------------------------------------------- */

static int encode_piece(gk_tok_enc *e, const uint8_t *s, size_t n, gk_tok_ids *out, gk_err *err)
{
	const gk_tok *t = e->t;
	if (GK_GROW(out->v, out->cap, out->n + n, "token ids", err) < 0)
		return -1;
	uint32_t *dst = out->v + out->n;
	if (n == 1) {
		*dst = t->byte_id[s[0]];
		out->n++;
		return 0;
	}
	if (n > CACHE_PIECE) {
		if (scratch(e, n, err) < 0)
			return -1;
		out->n += bpe(t, e, s, n, dst, n > SHORT_PIECE);
		return 0;
	}
	uint64_t h = piece_hash(s, n);
	size_t i = (size_t)(h >> 40) & (CACHE_SLOTS - 1);
	for (;; i = (i + 1) & (CACHE_SLOTS - 1)) {
		cache_slot *c = &e->slots[i];
		if (!c->hash)
			break;
		if (c->hash == h && c->keylen == n && !memcmp(e->keys + c->key, s, n)) {
			memcpy(dst, e->vals + c->val, c->vallen * sizeof(*dst));
			out->n += c->vallen;
			return 0;
		}
	}
	if (scratch(e, n, err) < 0)
		return -1;
	size_t m = bpe(t, e, s, n, dst, n > SHORT_PIECE);
	out->n += m;
	/* Half the slots used, or the keys and values (sized for pieces of a
	 * quarter of CACHE_PIECE on average) full: start again. */
	if (e->used >= CACHE_SLOTS / 2 || e->nkeys + n > (size_t)CACHE_SLOTS / 2 * CACHE_PIECE / 4 ||
	    e->nvals + m > (size_t)CACHE_SLOTS / 2 * CACHE_PIECE / 4) {
		cache_clear(e);
		i = (size_t)(h >> 40) & (CACHE_SLOTS - 1);
	}
	memcpy(e->keys + e->nkeys, s, n);
	memcpy(e->vals + e->nvals, dst, m * sizeof(*dst));
	e->slots[i] = (cache_slot){h, (uint32_t)e->nkeys, (uint32_t)n, (uint32_t)e->nvals, (uint32_t)m};
	e->nkeys += n;
	e->nvals += m;
	e->used++;
	return 0;
}

static int encode_text(gk_tok_enc *e, const uint8_t *s, size_t n, gk_tok_ids *out, gk_err *err)
{
	if (!n)
		return 0;
	if (e->t->add_prefix_space && s[0] != ' ') {
		/* tokenizers' ByteLevel(add_prefix_space): a space in front of
		 * every segment that does not start with one */
		if (n + 1 > e->textcap) {
			uint8_t *p = realloc(e->text, n + 1);
			if (!p)
				return gk_err_sys(err, ENOMEM, "encode");
			e->text = p;
			e->textcap = n + 1;
		}
		e->text[0] = ' ';
		memcpy(e->text + 1, s, n);
		s = e->text;
		n++;
	}
	for (size_t i = 0; i < n;) {
		size_t l = gk_tok_piece(s + i, n - i);
		if (encode_piece(e, s + i, l, out, err) < 0)
			return -1;
		i += l;
	}
	return 0;
}

/* The longest special token at s (n bytes left), or NULL. */
static const gk_tok_special_tok *special_at(const gk_tok *t, const uint8_t *s, size_t n)
{
	const gk_tok_special_tok *best = NULL;
	for (size_t k = 0; k < t->nspecial; k++) {
		const gk_tok_special_tok *sp = &t->special[k];
		if (sp->len <= n && (!best || sp->len > best->len) && !memcmp(s, sp->text, sp->len))
			best = sp;
	}
	return best;
}

int gk_tok_encode(gk_tok_enc *e, const void *buf, size_t len, unsigned flags, gk_tok_ids *out,
		  gk_err *err)
{
	const gk_tok *t = e->t;
	const uint8_t *s = buf;
	size_t seg = 0;
	if ((flags & GK_TOK_SPECIAL) && t->nspecial) {
		for (size_t i = 0; i < len; i++) {
			if (!t->special_first[s[i]])
				continue;
			const gk_tok_special_tok *sp = special_at(t, s + i, len - i);
			if (!sp)
				continue;
			if (encode_text(e, s + seg, i - seg, out, err) < 0 ||
			    GK_GROW(out->v, out->cap, out->n + 1, "token ids", err) < 0)
				return -1;
			out->v[out->n++] = sp->id;
			seg = i + sp->len;
			i = seg - 1;
		}
	}
	return encode_text(e, s + seg, len - seg, out, err);
}

/*
 * A piece's extent depends on the text after it only through the
 * character after its end (or, for white space, after its run), so every
 * piece but the last two is final: the last may grow or split, and it may
 * turn the one before into a contraction ("'" "r" + "e" is "'re") or take
 * it in (an incomplete UTF-8 sequence is "other" until its last byte
 * comes). A prefix cut there encodes alone as it does in the whole text
 * unless it ends in white space: "\n\nint" is "\n" "\n" "int", but "\n\n"
 * alone is one piece, so the cut never follows a piece of white space.
 * The end of the text is one of the continuations, so the pieces of a
 * prefix are final in the same way whatever follows the prefix: a special
 * token that more bytes could complete ends the segment before it
 * somewhere after limit, which is such a continuation of s[seg, limit).
 */
static size_t stable_plain(const uint8_t *s, size_t from, size_t to)
{
	/* good: the latest cut at or before the last piece's start, and at
	 * or before the one before it */
	size_t good_last = from, good_before = from;
	int space = 0;
	for (size_t i = from; i < to;) {
		good_before = good_last;
		if (!space)
			good_last = i;
		i += gk_tok_piece_kind(s + i, to - i, &space);
	}
	return good_before;
}

size_t gk_tok_stable(const gk_tok *t, const void *buf, size_t len, unsigned flags)
{
	const uint8_t *s = buf;
	/* every segment gets its own prefix space: nothing is final early */
	if (t->add_prefix_space)
		return 0;
	if (!(flags & GK_TOK_SPECIAL) || !t->nspecial)
		return stable_plain(s, 0, len);
	size_t seg = 0;
	for (size_t i = 0; i < len; i++)
		if (t->special_first[s[i]]) {
			const gk_tok_special_tok *sp = special_at(t, s + i, len - i);
			if (sp) {
				seg = i + sp->len;
				i = seg - 1;
			}
		}
	/* a special token may start in the last special_max - 1 bytes */
	size_t limit = len - seg >= t->special_max ? len - t->special_max + 1 : seg;
	return stable_plain(s, seg, limit);
}
