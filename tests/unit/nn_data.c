/*
 * nn_data.c - the trainer's token stream: .npy members against files
 * numpy wrote (tests/data/npy), llm.c and nanoGPT token files, shard
 * streams rebuilt from the samples written, the same global batch at
 * every world size for token files, and resume from a saved state giving
 * the same micro-batches as an uninterrupted run (with and without
 * shuffle), and shards resumed on another world size token by token.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "nn/data.h"
#include "nn/nn.h"
#include "shard/shard.h"
#include "tap.h"

static char dir[] = "/tmp/gk-nn-data-XXXXXX";

static int load(const char *name, char **buf, size_t *len)
{
	char path[512];
	gk_err err = {0};
	snprintf(path, sizeof(path), "tests/data/npy/%s", name);
	if (gk_read_file(path, 1 << 20, buf, len, &err) < 0)
		return diag("%s", err.msg), -1;
	return 0;
}

static void npy_tests(void)
{
	char *b;
	size_t n;
	gk_err err = {0};
	gk_shard_npy a;
	if (load("u2.npy", &b, &n) == 0) {
		ok(gk_shard_npy_parse(b, n, &a, &err) == 0, "u2.npy parses");
		is_u64(a.count, 300, "u2.npy: 300 elements");
		is_int(a.itemsize, 2, "u2.npy: 2-byte items");
		int good = 1;
		for (uint64_t i = 0; i < a.count; i++) {
			uint16_t v;
			memcpy(&v, a.data + 2 * i, 2);
			good &= v == (i * 7) % 50257;
		}
		ok(good, "u2.npy: values are numpy's arange(300)*7 %% 50257");
		free(b);
	}
	if (load("i4.npy", &b, &n) == 0) {
		ok(gk_shard_npy_parse(b, n, &a, &err) == 0 && a.count == 100 && a.itemsize == 4 &&
			   a.is_signed, "i4.npy parses as 100 int32");
		int32_t v;
		memcpy(&v, a.data + 4 * 99, 4);
		is_int(v, 99 * 13 % 257, "i4.npy: last value");
		free(b);
	}
	if (load("v2.npy", &b, &n) == 0) {
		ok(gk_shard_npy_parse(b, n, &a, &err) == 0 && a.count == 10, "version 2.0 header");
		free(b);
	}
	if (load("empty.npy", &b, &n) == 0) {
		ok(gk_shard_npy_parse(b, n, &a, &err) == 0 && a.count == 0, "empty array");
		free(b);
	}
	static const struct {
		const char *file, *msg;
	} bad[] = {
		{"fortran.npy", "Fortran order"},
		{"2d.npy", "2 dimensions"},
		{"f4.npy", "dtype '<f4'"},
		{"be.npy", "dtype '>u2'"},
		{"trunc.npy", "data is 597 bytes"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(bad); i++) {
		if (load(bad[i].file, &b, &n) < 0)
			continue;
		err.msg[0] = 0;
		int r = gk_shard_npy_parse(b, n, &a, &err);
		ok(r < 0 && strstr(err.msg, bad[i].msg), "%s refused: %s", bad[i].file, err.msg);
		free(b);
	}
	err.msg[0] = 0;
	ok(gk_shard_npy_parse("\x93NUMPX\x01\x00\x00\x00", 10, &a, &err) < 0 &&
		   strstr(err.msg, "magic"), "bad magic refused");
	/* The writer's header: numpy's own bytes for the files numpy wrote. */
	static const struct {
		const char *file;
		int itemsize;
		uint64_t count;
	} same[] = {{"u2.npy", 2, 300}, {"i4.npy", 4, 100}, {"empty.npy", 2, 0}};
	for (size_t i = 0; i < GK_ARRAY_SIZE(same); i++) {
		if (load(same[i].file, &b, &n) < 0)
			continue;
		unsigned char h[GK_SHARD_NPY_HEADER_MAX];
		size_t hl = gk_shard_npy_header(h, same[i].itemsize, same[i].count);
		ok(hl % 64 == 0 && hl + same[i].count * (size_t)same[i].itemsize == n &&
			   memcmp(h, b, hl) == 0, "%s: gk_shard_npy_header writes numpy's header",
		   same[i].file);
		free(b);
	}
	/* Any count: numpy's rule (growth room to 21 digits, 64-byte blocks). */
	static const uint64_t counts[] = {1, 9, 10, 12345678, 99999999999ull, 1ull << 62,
					  UINT64_MAX / 10};
	int good = 1;
	for (size_t i = 0; i < GK_ARRAY_SIZE(counts); i++) {
		unsigned char h[GK_SHARD_NPY_HEADER_MAX + 8];
		size_t hl = gk_shard_npy_header(h, 4, counts[i]);
		gk_shard_npy p;
		good &= hl % 64 == 0 && hl <= GK_SHARD_NPY_HEADER_MAX && h[hl - 1] == '\n' &&
			gk_shard_npy_parse(h, hl, &p, &err) < 0 && strstr(err.msg, "data is 0 bytes");
	}
	ok(good, "headers for counts up to 2^64/10 parse and are numpy's size");
}

/* Token i of the synthetic token files: a pattern below vocab 257. */
static uint16_t tok_at(uint64_t i)
{
	return (uint16_t)((i * 31 + i / 7) % 257);
}

static int write_bin(const char *path, uint64_t first, uint64_t n, int llmc)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	if (llmc) {
		int32_t h[256] = {20240520, 1, (int32_t)n};
		fwrite(h, sizeof(h), 1, f);
	}
	for (uint64_t i = 0; i < n; i++) {
		uint16_t t = tok_at(first + i);
		fwrite(&t, 2, 1, f);
	}
	return fclose(f);
}

static void bin_tests(void)
{
	char a[600], b[600], pat[700];
	gk_err err = {0};
	snprintf(a, sizeof(a), "%s/a.bin", dir);
	snprintf(b, sizeof(b), "%s/b.bin", dir);
	/* llm.c's header on one file, nanoGPT's raw array on the other. */
	write_bin(a, 0, 1000, 1);
	write_bin(b, 1000, 777, 0);
	snprintf(pat, sizeof(pat), "%s/{a,b}.bin", dir);
	enum { B = 2, T = 5, K = 40 };
	/* The documented windows: micro k of rank r starts at (k*W + r)*B*T. */
	for (int W = 1; W <= 3; W++) {
		int good = 1;
		for (int r = 0; r < W; r++) {
			gk_nn_data *d;
			gk_nn_data_opts o = {.rank = r, .world = W, .vocab = 257, .eot = -1,
					     .batch = B, .seq = T, .loop = 1};
			if (gk_nn_data_open(&d, pat, &o, &err) < 0) {
				ok(0, "open token files: %s", err.msg);
				return;
			}
			int32_t in[B * T], tg[B * T];
			uint64_t epoch_len = (1777 - 1) / ((uint64_t)W * B * T);
			for (uint64_t k = 0; k < K; k++) {
				gk_nn_data_next(d, in, tg, &err);
				uint64_t kk = k % epoch_len;
				uint64_t start = (kk * (uint64_t)W + (uint64_t)r) * B * T;
				for (int i = 0; i < B * T; i++) {
					uint64_t p = start + (uint64_t)(i / T) * T + (uint64_t)(i % T);
					good &= in[i] == tok_at(p) && tg[i] == tok_at(p + 1);
				}
			}
			gk_nn_data_close(d);
		}
		ok(good, "token files, world %d: every rank's windows as documented, across epochs", W);
	}
	/* The same global batch: 2 ranks x B equals 1 rank x 2B. */
	{
		gk_nn_data *d1, *d2[2];
		gk_nn_data_opts o1 = {.world = 1, .vocab = 257, .eot = -1, .batch = 2 * B, .seq = T, .loop = 1};
		gk_nn_data_opts o2 = {.world = 2, .vocab = 257, .eot = -1, .batch = B, .seq = T, .loop = 1};
		gk_nn_data_open(&d1, pat, &o1, &err);
		gk_nn_data_open(&d2[0], pat, &o2, &err);
		o2.rank = 1;
		gk_nn_data_open(&d2[1], pat, &o2, &err);
		int good = 1;
		int32_t in1[2 * B * T], tg1[2 * B * T], in2[2 * B * T], tg2[2 * B * T];
		for (int k = 0; k < 10; k++) {
			gk_nn_data_next(d1, in1, tg1, &err);
			gk_nn_data_next(d2[0], in2, tg2, &err);
			gk_nn_data_next(d2[1], in2 + B * T, tg2 + B * T, &err);
			good &= !memcmp(in1, in2, sizeof(in1)) && !memcmp(tg1, tg2, sizeof(tg1));
		}
		ok(good, "token files: 2 ranks x %d rows = 1 rank x %d rows", B, 2 * B);
		/* Resume at another world size: the global token position. */
		char st[512];
		gk_nn_data_state(d2[0], st, sizeof(st));
		gk_nn_data *d3;
		gk_nn_data_open(&d3, pat, &o1, &err);
		ok(gk_nn_data_restore(d3, st, &err) == 0, "restore a 2-rank state on 1 rank");
		int32_t x[2 * B * T], y[2 * B * T];
		gk_nn_data_next(d1, in2, tg2, &err);
		gk_nn_data_next(d3, x, y, &err);
		ok(!memcmp(x, in2, sizeof(x)), "it continues with the same global batch");
		gk_nn_data_close(d1);
		gk_nn_data_close(d2[0]);
		gk_nn_data_close(d2[1]);
		gk_nn_data_close(d3);
	}
	/* Errors. */
	gk_nn_data *d;
	gk_nn_data_opts o = {.world = 1, .vocab = 200, .eot = -1, .batch = B, .seq = T, .loop = 1};
	err.msg[0] = 0;
	ok(gk_nn_data_open(&d, a, &o, &err) < 0 && strstr(err.msg, "is not below the vocabulary size 200") &&
		   strstr(err.msg, "a.bin"), "a token >= vocab names the file: %s", err.msg);
	FILE *f = fopen(a, "r+b");
	int32_t wrong = 999;
	fseek(f, 8, SEEK_SET);
	fwrite(&wrong, 4, 1, f);
	fclose(f);
	o.vocab = 257;
	err.msg[0] = 0;
	ok(gk_nn_data_open(&d, a, &o, &err) < 0 && strstr(err.msg, "llm.c header says 999 tokens"),
	   "an llm.c header whose count disagrees with the size: %s", err.msg);
	f = fopen(b, "ab");
	fputc(1, f);
	fclose(f);
	err.msg[0] = 0;
	ok(gk_nn_data_open(&d, b, &o, &err) < 0 && strstr(err.msg, "odd size"),
	   "an odd-sized raw file: %s", err.msg);
}

/* Shard sample i: text of 3 + i*5 % 23 bytes. */
static size_t sample_text(int i, char *buf)
{
	size_t n = 3 + (size_t)(i * 5 % 23);
	for (size_t j = 0; j < n; j++)
		buf[j] = (char)('a' + (i * 3 + (int)j) % 26);
	return n;
}

enum { NS = 37 };

static void shard_tests(void)
{
	char pattern[600], src[700];
	gk_err err = {0};
	snprintf(pattern, sizeof(pattern), "%s/s-%%02d.tar", dir);
	gk_shard_write_opts wo = {.pattern = pattern, .max_count = 10, .index = 1};
	gk_shard_writer *w;
	if (gk_shard_writer_open(&w, &wo, &err) < 0) {
		ok(0, "shard writer: %s", err.msg);
		return;
	}
	char text[64], key[16];
	for (int i = 0; i < NS; i++) {
		snprintf(key, sizeof(key), "k%03d", i);
		gk_shard_member m = {.ext = "txt", .data = text, .size = sample_text(i, text)};
		gk_shard_writer_add(w, key, 1, &m, &err);
	}
	gk_shard_writer_close(w, NULL, &err);
	snprintf(src, sizeof(src), "%s/s-{00..03}.tar", dir);

	enum { B = 3, T = 4 };
	/* Rank r of 2 owns samples [r*18, r*18+18): its stream, by hand. */
	for (int r = 0; r < 2; r++) {
		int32_t want[4096];
		size_t nw = 0;
		for (int i = r * (NS / 2); i < (r + 1) * (NS / 2); i++) {
			size_t n = sample_text(i, text);
			for (size_t j = 0; j < n; j++)
				want[nw++] = (unsigned char)text[j];
			want[nw++] = 256;
		}
		gk_nn_data *d;
		gk_nn_data_opts o = {.rank = r, .world = 2, .vocab = 257, .eot = -1,
				     .batch = B, .seq = T, .loop = 0};
		if (gk_nn_data_open(&d, src, &o, &err) < 0) {
			ok(0, "open shards: %s", err.msg);
			return;
		}
		int32_t in[B * T], tg[B * T];
		size_t k = 0;
		int good = 1;
		while (gk_nn_data_next(d, in, tg, &err) == 1) {
			for (int i = 0; i < B * T; i++) {
				size_t p = k * B * T + (size_t)(i / T) * T + (size_t)(i % T);
				good &= in[i] == want[p] && tg[i] == want[p + 1];
			}
			k++;
		}
		ok(good && k == (nw - 1) / (B * T), "shards, rank %d of 2: %zu micro-batches are the part's samples joined by end-of-text",
		   r, k);
		gk_nn_data_close(d);
	}
	/* Resume: stop after j micro-batches, restore, compare the rest. */
	for (int shuffle = 0; shuffle <= 1; shuffle++) {
		gk_nn_data_opts o = {.rank = 1, .world = 2, .vocab = 257, .eot = -1, .batch = B,
				     .seq = T, .loop = 1, .shuffle = shuffle, .seed = 7};
		int32_t ref[40][B * T], in[B * T], tg[B * T];
		gk_nn_data *d;
		gk_nn_data_open(&d, src, &o, &err);
		for (int k = 0; k < 40; k++)
			gk_nn_data_next(d, ref[k], tg, &err);
		gk_nn_data_close(d);
		int good = 1;
		for (int j = 1; j < 40; j += 3) {
			char st[1024];
			gk_nn_data_open(&d, src, &o, &err);
			for (int k = 0; k < j; k++)
				gk_nn_data_next(d, in, tg, &err);
			gk_nn_data_state(d, st, sizeof(st));
			gk_nn_data_close(d);
			gk_nn_data_open(&d, src, &o, &err);
			if (gk_nn_data_restore(d, st, &err) < 0) {
				good = 0;
				diag("restore: %s", err.msg);
			}
			for (int k = j; k < 40; k++) {
				gk_nn_data_next(d, in, tg, &err);
				good &= !memcmp(in, ref[k], sizeof(in));
			}
			gk_nn_data_close(d);
		}
		ok(good, "shards%s: resuming after any micro-batch (across epochs) gives the same stream",
		   shuffle ? ", shuffled" : "");
	}
	/* A token outside the vocabulary names the shard and the sample. */
	gk_nn_data *d;
	gk_nn_data_opts o = {.world = 1, .vocab = 110, .eot = -1, .batch = B, .seq = T, .loop = 0};
	int32_t in[B * T], tg[B * T];
	err.msg[0] = 0;
	int r = gk_nn_data_open(&d, src, &o, &err);
	while (r == 0 && (r = gk_nn_data_next(d, in, tg, &err)) == 1)
		r = 0;
	ok(r < 0 && strstr(err.msg, "s-00.tar") && strstr(err.msg, "sample 'k00") &&
		   strstr(err.msg, "not in [0, 110)"), "token >= vocab: %s", err.msg);
	gk_nn_data_close(d);
}

/*
 * Resuming shards on another world size, token by token: sample i holds
 * 5 + (i * 7) % 21 tokens valued i * 64 + j (an int32 .npy), so every
 * token names its sample and position. 3 ranks take a few micro-batches
 * each, stopping partway through samples; 2 ranks resume from their
 * states and read the epoch out. No token may be trained on (be a
 * target) twice, and only the 2 new ranks' last partial windows, each
 * stream's first token and one token per cut sample may go unseen.
 */
enum { NR = 30, RV = NR * 64 + 1, RB = 2, RT = 5 };

static size_t remap_npy(int i, char *buf)
{
	size_t n = 5 + (size_t)(i * 7 % 21);
	char h[128];
	int hl = snprintf(h, sizeof(h), "{'descr': '<i4', 'fortran_order': False, 'shape': (%zu,), }", n);
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = 118;
	buf[9] = 0;
	memset(buf + 10, ' ', 118);
	memcpy(buf + 10, h, (size_t)hl);
	buf[127] = '\n';
	for (size_t j = 0; j < n; j++) {
		int32_t v = i * 64 + (int32_t)j;
		memcpy(buf + 128 + 4 * j, &v, 4);
	}
	return 128 + 4 * n;
}

static int remap_open(gk_nn_data **d, const char *src, int rank, int world, int shuffle)
{
	gk_err err = {0};
	gk_nn_data_opts o = {.rank = rank, .world = world, .vocab = RV, .eot = -1,
			     .batch = RB, .seq = RT, .shuffle = shuffle, .seed = 9};
	if (gk_nn_data_open(d, src, &o, &err) < 0)
		return diag("open: %s", err.msg), -1;
	return 0;
}

static void remap_tests(void)
{
	char pattern[600], src[700], buf[256];
	gk_err err = {0};
	snprintf(pattern, sizeof(pattern), "%s/r-%%02d.tar", dir);
	gk_shard_write_opts wo = {.pattern = pattern, .max_count = 7, .index = 1};
	gk_shard_writer *w;
	if (gk_shard_writer_open(&w, &wo, &err) < 0) {
		ok(0, "shard writer: %s", err.msg);
		return;
	}
	for (int i = 0; i < NR; i++) {
		char key[16];
		snprintf(key, sizeof(key), "r%03d", i);
		gk_shard_member m = {.ext = "npy", .data = buf, .size = remap_npy(i, buf)};
		gk_shard_writer_add(w, key, 1, &m, &err);
	}
	gk_shard_writer_close(w, NULL, &err);
	snprintf(src, sizeof(src), "%s/r-{00..04}.tar", dir);

	for (int shuffle = 0; shuffle <= 1; shuffle++) {
		static unsigned char seen[RV];
		memset(seen, 0, sizeof(seen));
		char st[3][4096];
		const char *sp[3] = {st[0], st[1], st[2]};
		int32_t in[RB * RT], tg[RB * RT];
		int steps[3] = {2, 3, 1}, twice = 0, good = 1, partway = 0;
		gk_nn_data *d;
		/* a token is trained on when it is a target */
#define MARK()                                                                 \
	for (int i = 0; i < RB * RT; i++)                                      \
		if (tg[i] != RV - 1 && seen[tg[i]]++)                          \
			twice++
		for (int r = 0; r < 3; r++) {
			if (remap_open(&d, src, r, 3, shuffle) < 0)
				return;
			for (int k = 0; k < steps[r]; k++) {
				good &= gk_nn_data_next(d, in, tg, &err) == 1;
				MARK();
			}
			gk_nn_data_state(d, st[r], sizeof(st[r]));
			partway += strstr(st[r], "\"skip\":0,") == NULL;
			gk_nn_data_close(d);
		}
		/* new rank r's whole stream, and resumed after each micro-batch */
		for (int r = 0; r < 2; r++) {
			int32_t ref[64][RB * RT];
			int nref = 0;
			if (remap_open(&d, src, r, 2, shuffle) < 0)
				return;
			if (gk_nn_data_restore_world(d, sp, 3, &err) < 0) {
				ok(0, "restore_world: %s", err.msg);
				gk_nn_data_close(d);
				return;
			}
			while (nref < 64 && gk_nn_data_next(d, in, tg, &err) == 1) {
				MARK();
				memcpy(ref[nref++], in, sizeof(in));
			}
			gk_nn_data_close(d);
			for (int j = 1; j < nref; j++) {
				char s2[4096];
				remap_open(&d, src, r, 2, shuffle);
				gk_nn_data_restore_world(d, sp, 3, &err);
				for (int k = 0; k < j; k++)
					gk_nn_data_next(d, in, tg, &err);
				gk_nn_data_state(d, s2, sizeof(s2));
				gk_nn_data_close(d);
				remap_open(&d, src, r, 2, shuffle);
				if (gk_nn_data_restore(d, s2, &err) < 0) {
					diag("restore: %s", err.msg);
					good = 0;
				}
				for (int k = j; k < nref; k++)
					good &= gk_nn_data_next(d, in, tg, &err) == 1 &&
						!memcmp(in, ref[k], sizeof(in));
				good &= gk_nn_data_next(d, in, tg, &err) == 0;
				gk_nn_data_close(d);
			}
		}
#undef MARK
		int missing = 0;
		for (int i = 0; i < NR; i++)
			for (int j = 0; j < 5 + i * 7 % 21; j++)
				missing += !seen[i * 64 + j];
		/* the 2 last partial windows, the 5 streams' first tokens,
		 * the 3 cut samples' first tokens read again */
		int bound = 2 * RB * RT + 5 + 3;
		ok(partway == 3 && twice == 0 && missing <= bound,
		   "shards%s, 3 ranks resumed on 2: no token a target twice (%d), "
		   "%d unseen (at most %d)", shuffle ? ", shuffled" : "", twice,
		   missing, bound);
		ok(good, "shards%s, remapped: resuming after any micro-batch gives the same stream",
		   shuffle ? ", shuffled" : "");
	}
}

/*
 * A remapped epoch's state keeps every earlier rank's position: resumed
 * from 2100 ranks it outgrows any fixed buffer (a checkpoint used to get
 * "state too long" in its place, and could not be resumed), and
 * gk_nn_data_state gives it whole, or cut as snprintf cuts.
 */
static void long_state_tests(void)
{
	enum { P = 2100, B = 1, T = 4, LEN = 1024 };
	char pattern[600], src[700];
	gk_err err = {0};
	snprintf(pattern, sizeof(pattern), "%s/l-%%02d.tar", dir);
	gk_shard_write_opts wo = {.pattern = pattern, .max_count = 1000, .index = 1};
	gk_shard_writer *w;
	if (gk_shard_writer_open(&w, &wo, &err) < 0) {
		ok(0, "shard writer: %s", err.msg);
		return;
	}
	for (int i = 0; i < 2 * P; i++) {
		char key[16], txt[16];
		snprintf(key, sizeof(key), "l%05d", i);
		gk_shard_member m = {.ext = "txt", .data = txt,
				     .size = (size_t)snprintf(txt, sizeof(txt), "doc %d.", i)};
		gk_shard_writer_add(w, key, 1, &m, &err);
	}
	gk_shard_writer_close(w, NULL, &err);
	snprintf(src, sizeof(src), "%s/l-{00..04}.tar", dir);
	char *st = calloc(P, LEN);
	const char **sp = calloc(P, sizeof(*sp));
	int32_t in[B * T], tg[B * T], ref[B * T];
	gk_nn_data *d, *e;
	int fits = 1;
	gk_nn_data_opts o = {.world = P, .vocab = 257, .eot = -1, .batch = B, .seq = T,
			     .shuffle = 1, .seed = 5, .loop = 1};
	for (int r = 0; r < P && st && sp; r++) {
		o.rank = r;
		if (gk_nn_data_open(&d, src, &o, &err) < 0 ||
		    gk_nn_data_next(d, in, tg, &err) != 1) {
			ok(0, "rank %d of %d: %s", r, P, err.msg);
			return;
		}
		sp[r] = st + (size_t)r * LEN;
		fits &= gk_nn_data_state(d, st + (size_t)r * LEN, LEN) < LEN;
		gk_nn_data_close(d);
	}
	o.rank = 0;
	o.world = P - 1;
	if (gk_nn_data_open(&d, src, &o, &err) < 0 ||
	    gk_nn_data_restore_world(d, sp, P, &err) < 0) {
		ok(0, "restore_world from %d ranks: %s", P, err.msg);
		return;
	}
	char small[64];
	int n = gk_nn_data_state(d, NULL, 0), m = gk_nn_data_state(d, small, sizeof(small));
	char *all = n > 0 ? malloc((size_t)n + 1) : NULL;
	int whole = all && gk_nn_data_state(d, all, (size_t)n + 1) == n && (int)strlen(all) == n;
	ok(fits && n > 4096 && whole && m == n && strlen(small) == sizeof(small) - 1 &&
		   !strncmp(all, small, sizeof(small) - 1) && !strstr(all, "too long"),
	   "a state resumed from %d ranks: all %d bytes of it, or cut as snprintf cuts", P, n);
	int good = gk_nn_data_next(d, in, tg, &err) == 1;
	memcpy(ref, in, sizeof(ref));
	good &= whole && gk_nn_data_open(&e, src, &o, &err) == 0;
	good &= good && gk_nn_data_restore(e, all, &err) == 0 &&
		gk_nn_data_next(e, in, tg, &err) == 1 && !memcmp(in, ref, sizeof(ref));
	ok(good, "that state resumes where it was taken%s%s", good ? "" : ": ", good ? "" : err.msg);
	if (whole)
		gk_nn_data_close(e);
	gk_nn_data_close(d);
	free(all);
	free(st);
	free(sp);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	npy_tests();
	bin_tests();
	shard_tests();
	remap_tests();
	long_state_tests();
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd))
		diag("could not remove %s", dir);
	return done_testing();
}
