/*
 * tok.c - lib/tok's pieces: the byte map against GPT-2's bytes_to_unicode
 * written out again, Unicode classes and UTF-8 decoding at the edges, the
 * pre-tokenizer on hand-made cases derived from the pattern, the two
 * merge loops against each other on a vocabulary trained here, round
 * trips, streaming against one call, and every malformed-file error.
 *
 * With arguments it is the driver of tests/cli/t1000-tok-exact.sh, which
 * compares it with Hugging Face tokenizers:
 *
 *   tok pieces FILE...                byte lengths of the pre-tokenizer's pieces
 *   tok encode TOK [-s] [-c SEED] FILE...   ids, one line per file
 *                                     (-s: special tokens; -c: fed in random chunks)
 *   tok roundtrip TOK FILE...         decode(encode(x)) == x, one line per file
 *   tok info TOK                      vocab size, <|endoftext|>, fingerprint
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"
#include "tok/internal.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t next32(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

/* ---- driver --------------------------------------------------------------- */

static char *slurp(const char *path, size_t *len)
{
	char *buf;
	gk_err err;
	if (gk_read_file(path, (size_t)1 << 30, &buf, len, &err) < 0) {
		fprintf(stderr, "tok: %s\n", err.msg);
		exit(1);
	}
	return buf;
}

static gk_tok *open_or_die(const char *path)
{
	gk_tok *t;
	gk_err err;
	if (gk_tok_open(&t, path, &err) < 0) {
		fprintf(stderr, "tok: %s\n", err.msg);
		exit(1);
	}
	return t;
}

/* Encode buf in random chunks, as a streaming caller would. */
static int encode_chunked(gk_tok *t, gk_tok_enc *e, const char *buf, size_t len, unsigned flags,
			  gk_tok_ids *ids, gk_err *err)
{
	size_t start = 0, end = 0;
	while (end < len) {
		/* a long piece stays pending: read as much again, as the
		 * header asks, so that the scans stay linear */
		end += 1 + next32() % 7 + (end - start > 256 ? end - start : 0);
		if (end > len)
			end = len;
		size_t n = gk_tok_stable(t, buf + start, end - start, flags);
		if (gk_tok_encode(e, buf + start, n, flags, ids, err) < 0)
			return -1;
		start += n;
	}
	return gk_tok_encode(e, buf + start, len - start, flags, ids, err);
}

static int driver(int argc, char **argv)
{
	const char *cmd = argv[1];
	if (!strcmp(cmd, "pieces")) {
		for (int a = 2; a < argc; a++) {
			size_t len;
			char *buf = slurp(argv[a], &len);
			for (size_t i = 0; i < len;) {
				size_t l = gk_tok_piece((const uint8_t *)buf + i, len - i);
				printf("%s%zu", i ? " " : "", l);
				i += l;
			}
			putchar('\n');
			free(buf);
		}
		return 0;
	}
	if (argc < 3)
		return 2;
	gk_tok *t = open_or_die(argv[2]);
	gk_err err;
	if (!strcmp(cmd, "info")) {
		printf("vocab %u\nendoftext %lld\nfingerprint %016llx\n", gk_tok_vocab_size(t),
		       (long long)gk_tok_special(t, "<|endoftext|>"),
		       (unsigned long long)gk_tok_fingerprint(t));
		for (const char *const *p = gk_tok_paths(t); *p; p++)
			printf("file %s\n", *p);
		gk_tok_close(t);
		return 0;
	}
	unsigned flags = 0;
	int chunked = 0, a = 3;
	for (; a < argc && argv[a][0] == '-'; a++) {
		if (!strcmp(argv[a], "-s"))
			flags |= GK_TOK_SPECIAL;
		else if (!strcmp(argv[a], "-c") && a + 1 < argc)
			chunked = 1, rng = strtoull(argv[++a], NULL, 10) | 1;
		else
			return 2;
	}
	gk_tok_enc *e = gk_tok_enc_new(t);
	int rc = 0;
	for (; a < argc && e; a++) {
		size_t len;
		char *buf = slurp(argv[a], &len);
		gk_tok_ids ids = {0};
		int r = chunked ? encode_chunked(t, e, buf, len, flags, &ids, &err)
				: gk_tok_encode(e, buf, len, flags, &ids, &err);
		if (r < 0) {
			fprintf(stderr, "tok: %s\n", err.msg);
			return 1;
		}
		if (!strcmp(cmd, "encode")) {
			for (size_t i = 0; i < ids.n; i++)
				printf("%s%u", i ? " " : "", ids.v[i]);
			putchar('\n');
		} else {
			char *out = NULL;
			size_t n = 0, cap = 0;
			if (gk_tok_decode(t, ids.v, ids.n, &out, &n, &cap, &err) < 0) {
				fprintf(stderr, "tok: %s\n", err.msg);
				return 1;
			}
			int same = n == len && (!n || !memcmp(out, buf, n));
			printf("%s %s\n", argv[a], same ? "ok" : "DIFFERS");
			rc |= !same;
			free(out);
		}
		free(ids.v);
		free(buf);
	}
	gk_tok_enc_free(e);
	gk_tok_close(t);
	return e ? rc : 1;
}

/* ---- byte map ------------------------------------------------------------- */

/* openai/gpt-2 src/encoder.py bytes_to_unicode, line by line. */
static void check_byte_map(void)
{
	uint32_t bs[256], cs[256];
	int nb = 0;
	for (int b = '!'; b <= '~'; b++)
		bs[nb++] = (uint32_t)b;
	for (int b = 0xA1; b <= 0xAC; b++)
		bs[nb++] = (uint32_t)b;
	for (int b = 0xAE; b <= 0xFF; b++)
		bs[nb++] = (uint32_t)b;
	for (int i = 0; i < nb; i++)
		cs[i] = bs[i];
	int n = 0, listed = nb;
	for (uint32_t b = 0; b < 256; b++) {
		int in = 0;
		for (int i = 0; i < listed; i++)
			in |= bs[i] == b;
		if (!in) {
			bs[nb] = b;
			cs[nb++] = 256 + (uint32_t)n++;
		}
	}
	int good = nb == 256, inverse = 1;
	for (int i = 0; i < 256; i++) {
		good &= gk_tok_byte_cp((uint8_t)bs[i]) == cs[i];
		inverse &= gk_tok_cp_byte(cs[i]) == (int)bs[i];
	}
	ok(good, "byte map: bytes_to_unicode for all 256 bytes");
	ok(inverse, "byte map: its inverse");
	int none = 1;
	for (uint32_t cp = 0; cp < 0x200; cp++) {
		int named = 0;
		for (int i = 0; i < 256; i++)
			named |= cs[i] == cp;
		if (!named)
			none &= gk_tok_cp_byte(cp) == -1;
	}
	ok(none, "byte map: code points that name no byte map to -1");
}

/* ---- classes and UTF-8 ---------------------------------------------------- */

static void check_classes(void)
{
	static const struct {
		uint32_t cp;
		int cls;
		const char *what;
	} cases[] = {
		{'a', GK_TOK_LETTER, "a"},
		{'Z', GK_TOK_LETTER, "Z"},
		{'7', GK_TOK_NUMBER, "7"},
		{' ', GK_TOK_SPACE, "space"},
		{'\t', GK_TOK_SPACE, "tab"},
		{0x0B, GK_TOK_SPACE, "vertical tab"},
		{0x1C, GK_TOK_OTHER, "U+001C (Python's isspace says yes; \\s no)"},
		{'\'', GK_TOK_OTHER, "apostrophe"},
		{'_', GK_TOK_OTHER, "underscore"},
		{0, GK_TOK_OTHER, "NUL"},
		{0x85, GK_TOK_SPACE, "NEL"},
		{0xA0, GK_TOK_SPACE, "no-break space"},
		{0xB2, GK_TOK_NUMBER, "superscript two (No)"},
		{0xBA, GK_TOK_LETTER, "masculine ordinal (Lo)"},
		{0x0300, GK_TOK_OTHER, "combining grave (Mn)"},
		{0x0378, GK_TOK_OTHER, "unassigned U+0378"},
		{0x0661, GK_TOK_NUMBER, "Arabic-Indic one"},
		{0x16EE, GK_TOK_NUMBER, "runic arlaug (Nl)"},
		{0x1680, GK_TOK_SPACE, "ogham space mark"},
		{0x180E, GK_TOK_OTHER, "Mongolian vowel separator (Cf since 6.3)"},
		{0x200B, GK_TOK_OTHER, "zero width space (Cf)"},
		{0x200D, GK_TOK_OTHER, "zero width joiner"},
		{0x2028, GK_TOK_SPACE, "line separator"},
		{0x202F, GK_TOK_SPACE, "narrow no-break space"},
		{0x3000, GK_TOK_SPACE, "ideographic space"},
		{0x3007, GK_TOK_NUMBER, "ideographic zero (Nl)"},
		{0x4E00, GK_TOK_LETTER, "CJK one"},
		{0xAC00, GK_TOK_LETTER, "Hangul GA"},
		{0xFEFF, GK_TOK_OTHER, "BOM"},
		{0x11F04, GK_TOK_LETTER, "Kawi letter A (Unicode 15.0)"},
		{0x1F600, GK_TOK_OTHER, "emoji"},
		{0x31350, GK_TOK_LETTER, "CJK extension H (Unicode 15.0)"},
		{0xE0001, GK_TOK_OTHER, "language tag"},
		{0x10FFFF, GK_TOK_OTHER, "U+10FFFF"},
		{0x110000, GK_TOK_OTHER, "past Unicode"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(cases); i++)
		is_int(gk_tok_class(cases[i].cp), cases[i].cls, cases[i].what);

	static const struct {
		const char *s;
		size_t len;
		int cls;
		const char *what;
	} utf8[] = {
		{"\xC3\xA9", 2, GK_TOK_LETTER, "é is two bytes"},
		{"\xE4\xB8\x80", 3, GK_TOK_LETTER, "U+4E00 is three"},
		{"\xF0\x9F\x98\x80", 4, GK_TOK_OTHER, "U+1F600 is four"},
		{"\xC0\x80", 1, GK_TOK_OTHER, "overlong NUL: one invalid byte"},
		{"\xC1\xBF", 1, GK_TOK_OTHER, "overlong C1: one invalid byte"},
		{"\xE0\x9F\xBF", 1, GK_TOK_OTHER, "overlong three-byte form"},
		{"\xED\xA0\x80", 1, GK_TOK_OTHER, "an encoded surrogate"},
		{"\xF4\x90\x80\x80", 1, GK_TOK_OTHER, "past U+10FFFF"},
		{"\xF5\x80\x80\x80", 1, GK_TOK_OTHER, "F5 lead byte"},
		{"\xE2\x82", 1, GK_TOK_OTHER, "truncated at the end"},
		{"\xE2\x82" "A", 1, GK_TOK_OTHER, "truncated before ASCII"},
		{"\x80", 1, GK_TOK_OTHER, "lone continuation byte"},
		{"\xFF", 1, GK_TOK_OTHER, "FF"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(utf8); i++) {
		int c;
		size_t l = gk_tok_char((const uint8_t *)utf8[i].s, strlen(utf8[i].s), &c);
		ok(l == utf8[i].len && c == utf8[i].cls, "utf-8: %s (got %zu bytes, class %d)",
		   utf8[i].what, l, c);
	}
}

/* ---- the pattern ---------------------------------------------------------- */

/*
 * Each case is the text with '|' between the pieces the pattern makes
 * (the texts hold no '|'), worked out from the regular expression by hand.
 */
static void check_pieces(void)
{
	static const char *const cases[] = {
		"Hello|,| world|!",
		"I|'m| here|,| you|'re| not|,| it|'s| '|S| we|'ll| I|'d|'|LL",
		"don|'t| DON|'|T",
		"'s|'t",
		"a|    | b",
		"a|  |\n|b",
		"a| \n|\n|b",
		"a|\n\n",
		"a|   ",
		"x|\t|\t|b",
		" |\t|y",
		"1234567| 89|abc| 12",
		"abc|123|def",
		" !!!???| ...",
		"\xC2\xA0|x",                          /* NBSP then a letter */
		"a|\xC2\xA0\xC2\xA0",                  /* NBSP run at the end */
		"a|\xC2\xA0| b",
		"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C|\xEF\xBC\x81", /* 你好世界！ */
		"e|\xCC\x81|t\xC3\xA9",                /* e + combining acute: Mn is "other" */
		"caf\xC3\xA9| na\xC3\xAFve",
		"\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9| \xF0\x9F\x91\x8B",
		"x|\xFF\xFE|y",                        /* invalid bytes are "other" */
		" \xFF|abc",
		"\xE2\x82|A",
		"\xD9\xA1\xD9\xA2|x",                  /* Arabic-Indic digits */
		"''|s",                                /* "''s": a run of others, then s */
		"'re|'ve|'ll",
	};
	int all = 1;
	for (size_t k = 0; k < GK_ARRAY_SIZE(cases); k++) {
		const char *c = cases[k];
		char text[256], got[512];
		size_t n = 0, g = 0;
		for (const char *p = c; *p; p++)
			if (*p != '|')
				text[n++] = *p;
		for (size_t i = 0; i < n;) {
			size_t l = gk_tok_piece((const uint8_t *)text + i, n - i);
			if (i)
				got[g++] = '|';
			memcpy(got + g, text + i, l);
			g += l;
			i += l;
		}
		got[g] = '\0';
		int same = !strcmp(got, c);
		all &= same;
		if (!same)
			diag("pieces of case %zu: got '%s', want '%s'", k, got, c);
	}
	ok(all, "pre-tokenizer: %zu hand-made cases", GK_ARRAY_SIZE(cases));
	/* a long run of one character is one piece, found in linear time */
	size_t big = 1 << 22;
	char *s = malloc(big);
	memset(s, 'a', big);
	ok(gk_tok_piece((uint8_t *)s, big) == big, "pre-tokenizer: 4 MiB of 'a' is one piece");
	memset(s, ' ', big);
	s[big - 1] = 'x';
	ok(gk_tok_piece((uint8_t *)s, big) == big - 2, "pre-tokenizer: 4 MiB of spaces before a word leave one space");
	free(s);
}

/* ---- a vocabulary trained here --------------------------------------------- */

static void put_name(FILE *f, const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t cp = gk_tok_byte_cp(s[i]);
		if (cp == '"' || cp == '\\')
			fprintf(f, "\\%c", (char)cp);
		else if (cp < 0x80)
			fputc((int)cp, f);
		else
			fprintf(f, "\\u%04x", cp);
	}
}

static void put_name_raw(FILE *f, const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t cp = gk_tok_byte_cp(s[i]);
		if (cp < 0x80)
			fputc((int)cp, f);
		else {
			fputc((int)(0xC0 | cp >> 6), f);
			fputc((int)(0x80 | (cp & 0x3F)), f);
		}
	}
}

typedef struct sym {
	uint8_t b[64];
	size_t n;
} sym;

/*
 * A tiny BPE trainer (the most frequent adjacent pair in a text over a
 * few letters, merged everywhere, nmerges times) writes dir/vocab.json and
 * dir/merges.txt: enough merges that long runs exercise both merge loops.
 */
static int train(const char *dir, int nmerges)
{
	enum { N = 4000 };
	static sym toks[512];
	static int seq[N];
	int ntok = 256, n = N;
	for (int i = 0; i < 256; i++)
		toks[i] = (sym){{(uint8_t)i}, 1};
	for (int i = 0; i < N; i++)
		seq[i] = "aabacabbca"[next32() % 10];
	char path[512];
	snprintf(path, sizeof(path), "%s/merges.txt", dir);
	FILE *m = fopen(path, "w");
	if (!m)
		return -1;
	fprintf(m, "#version: 0.2\n");
	for (int k = 0; k < nmerges; k++) {
		static int count[512][512];
		memset(count, 0, sizeof(count));
		int ba = -1, bb = -1, best = 0;
		for (int i = 0; i + 1 < n; i++) {
			int c = ++count[seq[i]][seq[i + 1]];
			if (c > best && toks[seq[i]].n + toks[seq[i + 1]].n <= 64)
				best = c, ba = seq[i], bb = seq[i + 1];
		}
		if (best < 2)
			break;
		sym *t = &toks[ntok];
		memcpy(t->b, toks[ba].b, toks[ba].n);
		memcpy(t->b + toks[ba].n, toks[bb].b, toks[bb].n);
		t->n = toks[ba].n + toks[bb].n;
		int o = 0;
		for (int i = 0; i < n; i++) {
			if (i + 1 < n && seq[i] == ba && seq[i + 1] == bb) {
				seq[o++] = ntok;
				i++;
			} else {
				seq[o++] = seq[i];
			}
		}
		n = o;
		put_name_raw(m, toks[ba].b, toks[ba].n);
		fputc(' ', m);
		put_name_raw(m, toks[bb].b, toks[bb].n);
		fputc('\n', m);
		ntok++;
	}
	fclose(m);
	snprintf(path, sizeof(path), "%s/vocab.json", dir);
	FILE *v = fopen(path, "w");
	if (!v)
		return -1;
	fputc('{', v);
	for (int i = 0; i < ntok; i++) {
		fprintf(v, "%s\"", i ? ", " : "");
		put_name(v, toks[i].b, toks[i].n);
		fprintf(v, "\": %d", i);
	}
	fprintf(v, ", \"<|endoftext|>\": %d}\n", ntok);
	fclose(v);
	return ntok + 1;
}

/* Piece starts of s[0, n) into starts (n + 1 room), returning the count. */
static size_t piece_starts(const char *s, size_t n, size_t *starts)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i += gk_tok_piece((const uint8_t *)s + i, n - i))
		starts[k++] = i;
	starts[k] = n;
	return k;
}

/*
 * gk_tok_stable's promise, piece by piece (ids alone can hide a moved
 * boundary where no merge spans it): for every prefix of the text read
 * so far, the stable part cut alone has the same pieces as the whole
 * text has up to there.
 */
static void check_stable(const gk_tok *t)
{
	static const char *const alpha[] = {"a", "b", " ", " ", "\n", "\t", "'", "s", "r", "e", "1",
					    "!", "\xC2\xA0", "\xE3\x80\x80", "\xC3\xA9", "\xFF", "\xE2\x82"};
	static char buf[400];
	static size_t whole[401], part[401];
	int good = 1;
	for (int k = 0; k < 400 && good; k++) {
		size_t n = 0;
		while (n < sizeof(buf) - 4) {
			const char *a = alpha[next32() % GK_ARRAY_SIZE(alpha)];
			memcpy(buf + n, a, strlen(a));
			n += strlen(a);
		}
		size_t nw = piece_starts(buf, n, whole);
		for (size_t len = 0; len <= n && good; len++) {
			size_t c = gk_tok_stable(t, buf, len, 0);
			size_t np = piece_starts(buf, c, part);
			good &= c <= len && np <= nw && whole[np] == c &&
				!memcmp(part, whole, np * sizeof(*part));
			if (!good)
				diag("text %d, prefix %zu: cut at %zu is not a boundary of the whole", k, len, c);
		}
	}
	ok(good, "gk_tok_stable: every stable prefix has the pieces the whole text has");
}

/*
 * More distinct pieces than the cache holds (it empties itself), encoded
 * twice with one encoder: the ids of each piece's merges done afresh.
 */
static void check_cache(const gk_tok *t, gk_tok_enc *e)
{
	enum { WORDS = 300000 };
	size_t n = 0;
	char *text = malloc((size_t)WORDS * 16);
	for (unsigned w = 0; w < WORDS; w++) {
		text[n++] = ' ';
		for (unsigned x = w + 1; x; x /= 3)
			text[n++] = "abc"[x % 3];
	}
	gk_tok_ids want = {0}, got = {0};
	gk_err err;
	int good = 1;
	for (size_t i = 0; i < n && good;) {
		size_t l = gk_tok_piece((const uint8_t *)text + i, n - i);
		good &= GK_GROW(want.v, want.cap, want.n + l, "ids", &err) == 0;
		want.n += gk_tok_bpe(t, e, (const uint8_t *)text + i, l, want.v + want.n, 1);
		i += l;
	}
	for (int k = 0; k < 2 && good; k++) {
		got.n = 0;
		good &= gk_tok_encode(e, text, n, 0, &got, &err) == 0 && got.n == want.n &&
			!memcmp(got.v, want.v, got.n * sizeof(*got.v));
	}
	ok(good, "the cache, filled and emptied by %d distinct pieces, gives the ids of fresh merges", WORDS);
	free(want.v);
	free(got.v);
	free(text);
}

static void check_bpe(const char *dir)
{
	int nv = train(dir, 200);
	gk_tok *t;
	gk_err err;
	if (!ok(nv > 256 && gk_tok_open(&t, dir, &err) == 0, "open the vocabulary trained here")) {
		diag("%s", nv > 0 ? err.msg : "training failed");
		return;
	}
	is_int(gk_tok_vocab_size(t), nv, "vocab size");
	is_int(gk_tok_special(t, "<|endoftext|>"), nv - 1, "<|endoftext|> is a special token");
	is_int(gk_tok_special(t, "<|nothing|>"), -1, "an unknown special token is -1");
	gk_tok_enc *e = gk_tok_enc_new(t);
	uint32_t a[300], b[300];
	uint8_t s[300];
	int agree = 1, merged = 0;
	for (int k = 0; k < 3000; k++) {
		size_t n = 1 + next32() % 299;
		for (size_t i = 0; i < n; i++)
			s[i] = (uint8_t)"aabacabbca"[next32() % 10];
		size_t na = gk_tok_bpe(t, e, s, n, a, 0), nb = gk_tok_bpe(t, e, s, n, b, 1);
		agree &= na == nb && !memcmp(a, b, na * sizeof(*a));
		merged |= na < n / 4;
	}
	ok(agree && merged, "merges: the quadratic and the heap loops agree on 3000 random words");

	/* round trips and streaming over random bytes, text and specials */
	int round = 1, stream = 1, special = 1;
	static char buf[5000];
	for (int k = 0; k < 300; k++) {
		size_t n = next32() % sizeof(buf);
		for (size_t i = 0; i < n; i++) {
			uint32_t r = next32() % 16;
			buf[i] = r < 8 ? "ab c'\n\xC3\xE4"[r] : r < 12 ? (char)next32() : "aabacabbca"[r - 12];
		}
		if (k % 3 == 0 && n > 40)
			memcpy(buf + next32() % (n - 20), "<|endoftext|>", 13);
		gk_tok_ids one = {0}, chunks = {0};
		char *out = NULL;
		size_t len = 0, cap = 0;
		unsigned flags = k % 2 ? GK_TOK_SPECIAL : 0;
		if (gk_tok_encode(e, buf, n, flags, &one, &err) < 0 ||
		    encode_chunked(t, e, buf, n, flags, &chunks, &err) < 0 ||
		    gk_tok_decode(t, one.v, one.n, &out, &len, &cap, &err) < 0) {
			ok(0, "encode: %s", err.msg);
			return;
		}
		round &= len == n && !memcmp(out, buf, n);
		stream &= one.n == chunks.n && !memcmp(one.v, chunks.v, one.n * sizeof(*one.v));
		if (flags && memmem(buf, n, "<|endoftext|>", 13)) {
			int found = 0;
			for (size_t i = 0; i < one.n; i++)
				found |= one.v[i] == (uint32_t)(nv - 1);
			special &= found;
		} else {
			for (size_t i = 0; i < one.n; i++)
				special &= one.v[i] != (uint32_t)(nv - 1);
		}
		free(one.v);
		free(chunks.v);
		free(out);
	}
	ok(round, "decode(encode(x)) == x for 300 random byte strings");
	check_stable(t);
	check_cache(t, e);
	ok(stream, "encoding in random chunks through gk_tok_stable == encoding at once");
	ok(special, "<|endoftext|> is one token with GK_TOK_SPECIAL and text without it");

	gk_tok_ids ids = {0};
	uint32_t bad = (uint32_t)nv + 5;
	char *out = NULL;
	size_t len = 0, cap = 0;
	ok(gk_tok_decode(t, &bad, 1, &out, &len, &cap, &err) < 0 && strstr(err.msg, "is no token"),
	   "decode of an id past the vocabulary is an error: %s", err.msg);
	free(out);
	free(ids.v);
	gk_tok_enc_free(e);
	gk_tok_close(t);
}

/* ---- malformed files -------------------------------------------------------- */

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* A vocabulary of the 256 byte tokens plus extra, as JSON members. */
static char *byte_vocab(const char *extra, int skip)
{
	size_t cap = 8192 + strlen(extra);
	char *s = malloc(cap), *p = s;
	*p++ = '{';
	for (int i = 0; i < 256; i++) {
		if (i == skip)
			continue;
		uint32_t cp = gk_tok_byte_cp((uint8_t)i);
		p += sprintf(p, "%s\"", p == s + 1 ? "" : ", ");
		if (cp == '"' || cp == '\\')
			p += sprintf(p, "\\%c", (char)cp);
		else if (cp < 0x80)
			*p++ = (char)cp;
		else
			p += sprintf(p, "\\u%04x", cp);
		p += sprintf(p, "\": %d", i);
	}
	sprintf(p, "%s}", extra);
	return s;
}

static void check_errors(const char *dir)
{
	static const struct {
		const char *vocab_extra;
		int skip;
		const char *merges;
		const char *want;
		const char *what;
	} cases[] = {
		{", \"ab\": 256", -1, "a b\n", NULL, "a good pair of files opens"},
		{", \"ab\": 256", -1, "a c\nc\n", "line 2: 'c' is not two tokens", "a merge line without a space"},
		{", \"ab\": 256", -1, "a  b\n", "is not two tokens", "two spaces"},
		{", \"ab\": 256", -1, "#version: 0.2\na zz\n", "line 2: 'zz' is not in the vocabulary", "a merge naming an unknown token"},
		{", \"ab\": 256", -1, "a c\n", "the merged token 'ac' is not in the vocabulary", "a merge whose result is unknown"},
		{", \"ab\": 256", -1, "a b\na b\n", "line 2: 'a b' repeats line 1", "a merge given twice"},
		{", \"ab\": 97", -1, "", "tokens 'a' and 'ab' both have id 97", "duplicate ids"},
		{", \"ab\": -1", -1, "", "not an integer in [0, 16777215]", "a negative id"},
		{", \"ab\": 99999999", -1, "", "out of range", "an id past GK_TOK_MAX_ID"},
		{", \"ab\": \"x\"", -1, "", "of another type", "an id that is a string"},
		{"", 'q', "", "no token for byte 0x71", "a vocabulary without byte q"},
		{"", 0, "", "no token for byte 0x00 (named '\xC4\x80')", "a vocabulary without byte 0"},
	};
	for (size_t k = 0; k < GK_ARRAY_SIZE(cases); k++) {
		char *v = byte_vocab(cases[k].vocab_extra, cases[k].skip);
		write_file(dir, "vocab.json", v);
		write_file(dir, "merges.txt", cases[k].merges);
		free(v);
		gk_tok *t = NULL;
		gk_err err = {0};
		int rc = gk_tok_open(&t, dir, &err);
		if (!cases[k].want)
			ok(rc == 0, "%s", cases[k].what);
		else
			ok(rc < 0 && strstr(err.msg, cases[k].want), "%s: %s", cases[k].what, err.msg);
		gk_tok_close(t);
	}

	/* vocab.json itself */
	static const struct {
		const char *file, *text, *want, *what;
	} json[] = {
		{"vocab.json", "{\"a\": 1, \"b\": ", "parse", "truncated vocab.json"},
		{"vocab.json", "[1, 2]", "not a JSON object", "vocab.json that is an array"},
		{"vocab.json", "{\"a\": 1, \"a\": 2}", "duplicate", "a token named twice"},
		{"vocab.json", "{}", "no tokens", "an empty vocabulary"},
		{"tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\"", "parse", "truncated tokenizer.json"},
		{"tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "not BPE", "a WordPiece tokenizer.json"},
		{"tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [], \"dropout\": 0.1}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
		 "model.dropout is set", "BPE dropout"},
		{"tokenizer.json", "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
		 "normalizer is set", "a normalizer"},
		{"tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
		 "pre_tokenizer is Metaspace", "a SentencePiece-style pre-tokenizer"},
		{"tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": [3]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
		 "merges[0] is neither", "a merge that is a number"},
		{"tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
		 "no token for byte", "a tokenizer.json without byte tokens"},
	};
	for (size_t k = 0; k < GK_ARRAY_SIZE(json); k++) {
		char sub[256];
		snprintf(sub, sizeof(sub), "%s/j%zu", dir, k);
		mkdir(sub, 0700);
		write_file(sub, json[k].file, json[k].text);
		write_file(sub, "merges.txt", "");
		gk_tok *t = NULL;
		gk_err err = {0};
		int rc = gk_tok_open(&t, sub, &err);
		ok(rc < 0 && strstr(err.msg, json[k].want), "%s: %s", json[k].what, err.msg);
		gk_tok_close(t);
	}
	char sub[256];
	snprintf(sub, sizeof(sub), "%s/empty", dir);
	mkdir(sub, 0700);
	gk_tok *t = NULL;
	gk_err err = {0};
	ok(gk_tok_open(&t, sub, &err) < 0 && strstr(err.msg, "no tokenizer.json"),
	   "a directory without tokenizer files: %s", err.msg);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		return driver(argc, argv);
	char dir[] = "/tmp/gk-tok-unit-XXXXXX";
	if (!mkdtemp(dir)) {
		ok(0, "mkdtemp");
		return done_testing();
	}
	check_byte_map();
	check_classes();
	check_pieces();
	check_bpe(dir);
	check_errors(dir);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
