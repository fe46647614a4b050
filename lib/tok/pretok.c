/*
 * pretok.c - GPT-2's pre-tokenizer and byte map.
 *
 * GPT-2 splits text with the regular expression (encoder.py in
 * openai/gpt-2, and Hugging Face tokenizers' ByteLevel pre-tokenizer)
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * matched repeatedly from the end of the previous match. Every character
 * is a letter, a number, white space or other, so at each position one of
 * the alternatives matches, and which one follows from the first two
 * characters; gk_tok_piece decides it directly instead of running a regex
 * engine. PCRE2 with UCP was measured and not taken: Debian 12's 10.42
 * has Unicode 15.0 tables where tokenizers has 16.0, so it cut 4 of the 17
 * planes of t1000's every-code-point documents differently; it skips bytes
 * that are not UTF-8 instead of matching them (PCRE2_MATCH_INVALID_UTF),
 * which needs a pass of its own around it; and its JIT cut the same text
 * 2 to 2.7 times slower than this (16 MB/s against 43 on those documents,
 * 11.5 against 22.6 on the tree's sources, one loaded core).
 */
#include <pthread.h>
#include <stdlib.h>

#include "tok/internal.h"

/* ---- classes -------------------------------------------------------------- */

static uint8_t *cls_table; /* one class per code point below gk_tok_uni_limit */
static uint8_t ascii_cls[128];
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;

static void cls_init(void)
{
	/* ~200 KB, filled once; without memory the binary search serves. */
	uint8_t *t = calloc(gk_tok_uni_limit, 1);
	if (t)
		for (size_t i = 0; i < gk_tok_uni_nranges; i++)
			for (uint32_t c = gk_tok_uni_ranges[i].lo; c <= gk_tok_uni_ranges[i].hi; c++)
				t[c] = gk_tok_uni_ranges[i].cls;
	for (uint32_t c = 0; c < 128; c++)
		ascii_cls[c] = 0;
	for (size_t i = 0; i < gk_tok_uni_nranges && gk_tok_uni_ranges[i].lo < 128; i++)
		for (uint32_t c = gk_tok_uni_ranges[i].lo; c <= gk_tok_uni_ranges[i].hi && c < 128; c++)
			ascii_cls[c] = gk_tok_uni_ranges[i].cls;
	cls_table = t;
}

static int cls_search(uint32_t cp)
{
	size_t lo = 0, hi = gk_tok_uni_nranges;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (cp < gk_tok_uni_ranges[mid].lo)
			hi = mid;
		else if (cp > gk_tok_uni_ranges[mid].hi)
			lo = mid + 1;
		else
			return gk_tok_uni_ranges[mid].cls;
	}
	return GK_TOK_OTHER;
}

int gk_tok_class(uint32_t cp)
{
	pthread_once(&cls_once, cls_init);
	if (cp >= gk_tok_uni_limit)
		return GK_TOK_OTHER;
	return cls_table ? cls_table[cp] : cls_search(cp);
}

/* Class of a code point once cls_once has run (the hot path). */
static inline int cls_of(uint32_t cp)
{
	if (cp >= gk_tok_uni_limit)
		return GK_TOK_OTHER;
	return cls_table ? cls_table[cp] : cls_search(cp);
}

static inline size_t char_at(const uint8_t *s, size_t n, int *cls)
{
	uint8_t b = s[0];
	if (b < 0x80) {
		*cls = ascii_cls[b];
		return 1;
	}
	/* Unicode 15.0, table 3-7 (well-formed UTF-8 byte sequences). */
	uint32_t cp;
	size_t len;
	uint8_t lo = 0x80, hi = 0xBF;
	if (b >= 0xC2 && b <= 0xDF) {
		len = 2;
		cp = b & 0x1F;
	} else if (b >= 0xE0 && b <= 0xEF) {
		len = 3;
		cp = b & 0x0F;
		if (b == 0xE0)
			lo = 0xA0;
		else if (b == 0xED)
			hi = 0x9F;
	} else if (b >= 0xF0 && b <= 0xF4) {
		len = 4;
		cp = b & 0x07;
		if (b == 0xF0)
			lo = 0x90;
		else if (b == 0xF4)
			hi = 0x8F;
	} else {
		*cls = GK_TOK_OTHER;
		return 1;
	}
	if (n < len || s[1] < lo || s[1] > hi)
		goto bad;
	cp = cp << 6 | (s[1] & 0x3F);
	for (size_t i = 2; i < len; i++) {
		if (s[i] < 0x80 || s[i] > 0xBF)
			goto bad;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	*cls = cls_of(cp);
	return len;
bad:
	*cls = GK_TOK_OTHER;
	return 1;
}

size_t gk_tok_char(const uint8_t *s, size_t n, int *cls)
{
	pthread_once(&cls_once, cls_init);
	return char_at(s, n, cls);
}

/* ---- the pattern ---------------------------------------------------------- */

size_t gk_tok_piece(const uint8_t *s, size_t n)
{
	int space;
	return gk_tok_piece_kind(s, n, &space);
}

size_t gk_tok_piece_kind(const uint8_t *s, size_t n, int *space)
{
	pthread_once(&cls_once, cls_init);
	*space = 0;
	/* 's|'t|'re|'ve|'m|'ll|'d: ASCII and case-sensitive, as in GPT-2. */
	if (s[0] == '\'' && n >= 2) {
		uint8_t a = s[1];
		if (a == 's' || a == 't' || a == 'm' || a == 'd')
			return 2;
		if (n >= 3 && ((a == 'r' && s[2] == 'e') || (a == 'v' && s[2] == 'e') ||
			       (a == 'l' && s[2] == 'l')))
			return 3;
	}
	int c;
	size_t i = 0, len = char_at(s, n, &c);
	/* " ?X+" for X letters, numbers or other: the space only before a
	 * character that is not white space. */
	if (s[0] == ' ' && n > 1) {
		int c1;
		size_t l1 = char_at(s + 1, n - 1, &c1);
		if (c1 != GK_TOK_SPACE) {
			i = 1;
			c = c1;
			len = l1;
		}
	}
	if (c != GK_TOK_SPACE) {
		for (i += len; i < n; i += len) {
			int ci;
			len = char_at(s + i, n - i, &ci);
			if (ci != c)
				break;
		}
		return i;
	}
	/*
	 * \s+(?!\S) takes a run of white space that ends the text whole, and
	 * otherwise backs off one character so that the run's last character
	 * goes with the word after it (" ?\p{L}+" takes it when it is a
	 * space); a run of one character followed by a non-space falls
	 * through to \s+, which takes it.
	 */
	size_t last = 0;
	*space = 1;
	for (i = 0; i < n; i += len) {
		int ci;
		len = char_at(s + i, n - i, &ci);
		if (ci != GK_TOK_SPACE)
			break;
		last = i;
	}
	return i < n && last > 0 ? last : i;
}

/* ---- bytes_to_unicode ----------------------------------------------------- */

/*
 * GPT-2's encoder.py: the printable bytes '!'..'~', '¡'..'¬' and '®'..'ÿ'
 * name themselves; the other 68 bytes, in order, are U+0100 onwards.
 */
static int printable(unsigned b)
{
	return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t gk_tok_byte_cp(uint8_t b)
{
	if (printable(b))
		return b;
	unsigned n = 0;
	for (unsigned x = 0; x < b; x++)
		n += !printable(x);
	return 256 + n;
}

int gk_tok_cp_byte(uint32_t cp)
{
	if (cp < 256)
		return printable(cp) ? (int)cp : -1;
	if (cp >= 256 + 68)
		return -1;
	unsigned n = cp - 256;
	for (unsigned x = 0; x < 256; x++)
		if (!printable(x) && n-- == 0)
			return (int)x;
	return -1;
}
