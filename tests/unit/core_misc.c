/*
 * core_misc.c - errors, string lists, dtypes, XXH3 (against `xxhsum -H3`
 * output), JSON helpers, the progress line.
 */
#include <fcntl.h>
#include <jansson.h>
#include <unistd.h>

#include "core/core.h"
#include "tap.h"

static void test_err(void)
{
	gk_err err;
	ok(gk_errf(&err, "open '%s'", "x.tar") == -1, "gk_errf returns -1");
	is_str(err.msg, "open 'x.tar'", "gk_errf message");
	gk_err_sys(&err, 2, "open '%s'", "x.tar");
	is_str(err.msg, "open 'x.tar': No such file or directory", "gk_err_sys message");
	is_int(err.sys, 2, "gk_err_sys keeps errno");
	gk_err_prefix(&err, "shard %d", 3);
	is_str(err.msg, "shard 3: open 'x.tar': No such file or directory", "gk_err_prefix");
	ok(gk_errf(NULL, "nothing") == -1, "NULL err is allowed");
}

static void test_dtype(void)
{
	is_str(gk_dtype_name(GK_DT_BF16), "BF16", "name BF16");
	is_int(gk_dtype_from_name("F8_E4M3"), GK_DT_F8_E4M3, "from name F8_E4M3");
	is_int(gk_dtype_from_name("f32"), GK_DT_INVALID, "safetensors names are exact");
	is_int(gk_dtype_parse("bf16"), GK_DT_BF16, "parse bf16");
	is_int(gk_dtype_parse("float16"), GK_DT_F16, "parse float16");
	is_int(gk_dtype_parse("FP32"), GK_DT_F32, "parse FP32");
	is_int(gk_dtype_parse("f33"), GK_DT_INVALID, "parse f33 fails");
	is_int(gk_dtype_bits(GK_DT_F4), 4, "F4 is 4 bits");
	is_int(gk_dtype_bits(GK_DT_I64), 64, "I64 is 64 bits");
	is_int(gk_dtype_bits(GK_DT_BOOL), 8, "BOOL is a byte");
}

static void test_xxh3(void)
{
	char hex[17];
	/* printf '' | xxhsum -H3; printf gpukit | xxhsum -H3; printf abc | ... */
	is_str(gk_xxh3_hex(gk_xxh3("", 0), hex), "2d06800538d394c2", "xxh3('')");
	is_str(gk_xxh3_hex(gk_xxh3("gpukit", 6), hex), "8ca3dec17c383657", "xxh3('gpukit')");
	is_str(gk_xxh3_hex(gk_xxh3("abc", 3), hex), "78af5f94892f3950", "xxh3('abc')");

	static char big[3 << 20];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 131 + (i >> 9));
	gk_hash *h = gk_hash_new();
	for (size_t off = 0; off < sizeof(big); off += 12345)
		gk_hash_update(h, big + off, sizeof(big) - off < 12345 ? sizeof(big) - off : 12345);
	is_u64(gk_hash_digest(h), gk_xxh3(big, sizeof(big)), "streaming = one-shot over 3 MiB");
	gk_hash_free(h);

	char path[] = "/tmp/gk-core-misc-XXXXXX";
	int fd = mkstemp(path);
	gk_write_full(fd, big, sizeof(big));
	uint64_t v;
	gk_err err;
	ok(gk_xxh3_fd(fd, 0, UINT64_MAX, &v, path, &err) == 0 && v == gk_xxh3(big, sizeof(big)),
	   "file hash to end of file");
	ok(gk_xxh3_fd(fd, 1000, 2 << 20, &v, path, &err) == 0 && v == gk_xxh3(big + 1000, 2 << 20),
	   "file hash of a range");
	ok(gk_xxh3_fd(fd, sizeof(big) - 10, 20, &v, "f", &err) == -1, "range past the end fails");
	ok(strstr(err.msg, "truncated") != NULL, "  message: %s", err.msg);
	close(fd);
	unlink(path);

	ok(gk_xxh3_parse("8ca3dec17c383657", &v, &err) == 0 && v == 0x8ca3dec17c383657ULL,
	   "parse hex");
	ok(gk_xxh3_parse("8ca3dec17c38365", &v, &err) == -1, "15 digits refused");
	ok(gk_xxh3_parse("8ca3dec17c38365g", &v, &err) == -1, "non-hex refused");
}

static void test_json(void)
{
	gk_err err;
	const char *doc = "{\"n_layer\": 12, \"name\": \"gpt2\", \"lr\": 3e-4}";
	json_t *j = gk_json_load_buf(doc, strlen(doc), "config.json", &err);
	ok(j != NULL, "load JSON");
	int64_t n;
	const char *s;
	double d;
	ok(gk_json_get_int(j, "n_layer", &n, &err) == 0 && n == 12, "get int");
	ok(gk_json_get_str(j, "name", &s, &err) == 0 && strcmp(s, "gpt2") == 0, "get string");
	ok(gk_json_get_num(j, "lr", &d, &err) == 0 && d == 3e-4, "get number");
	ok(gk_json_get_int(j, "name", &n, &err) == -1, "string is not an int");
	is_str(err.msg, "JSON key 'name': not an integer", "  message");
	ok(gk_json_get_int(j, "n_head", &n, &err) == -1, "missing key");
	is_str(err.msg, "JSON key 'n_head': missing", "  message");
	json_decref(j);

	const char *dup = "{\"a\": 1, \"a\": 2}";
	ok(gk_json_load_buf(dup, strlen(dup), "x.json", &err) == NULL, "duplicate keys refused");
	is_str(err.msg, "parse 'x.json': line 1 column 12: duplicate object key near '\"a\"'", "  message");
	const char *bad = "{\"a\": 1,\n \"b\": }";
	ok(gk_json_load_buf(bad, strlen(bad), "x.json", &err) == NULL, "syntax error refused");
	ok(strncmp(err.msg, "parse 'x.json': line 2 column", 29) == 0, "  message: %s", err.msg);
}

static void test_progress(void)
{
	gk_progress p;
	char buf[256];
	gk_progress_start(&p, "data-pack", 4ULL << 30, 1, NULL, 0);
	ok(!p.on, "progress off when not enabled");
	gk_progress_format(&p, 1ULL << 30, 2.0, buf, sizeof(buf));
	is_str(buf, "data-pack: 1.00 GiB / 4.00 GiB   25%  512 MiB/s  ETA 0:06", "bytes line");
	gk_progress_start(&p, "verify", 4000, 0, "samples", 0);
	gk_progress_format(&p, 1000, 0.5, buf, sizeof(buf));
	is_str(buf, "verify: 1000 / 4000 samples   25%  2000/s  ETA 0:02", "items line");
	gk_progress_format(&p, 4000, 2.0, buf, sizeof(buf));
	is_str(buf, "verify: 4000 / 4000 samples  100%  2000/s", "finished line has no ETA");
	gk_progress_start(&p, "read", 0, 1, NULL, 0);
	gk_progress_format(&p, 3ULL << 20, 1.0, buf, sizeof(buf));
	is_str(buf, "read: 3.00 MiB  3.00 MiB/s", "unknown total");
	gk_progress_start(&p, "x", 7200, 0, NULL, 0);
	gk_progress_format(&p, 1, 1.0, buf, sizeof(buf));
	is_str(buf, "x: 1 / 7200    0%  1/s  ETA 1:59:59", "hours in ETA");
}

/* Count c in the file's text; the text into buf. */
static int count_in(FILE *f, int c, char *buf, size_t len)
{
	size_t n;
	int k = 0;
	fflush(f);
	rewind(f);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	for (size_t i = 0; i < n; i++)
		k += buf[i] == c;
	return k;
}

/*
 * The redraw is rate-limited by the clock alone: thousands of updates a
 * second (a sample each) draw a few times, with a total or without one
 * (data-pack without a total redrew on every update). Plain lines for a
 * log: one per interval, none for a short run.
 */
static void test_progress_rate(void)
{
	static char buf[1 << 16];
	for (int known = 0; known <= 1; known++) {
		gk_progress p;
		FILE *f = tmpfile();
		gk_progress_start(&p, "data-pack", known ? 1000000 : 0, 0, NULL, 0);
		p.on = GK_PROGRESS_TTY; /* as isatty(2) would make it */
		p.out = f;
		p.start = p.last = 100.0;
		/* 2000 updates in 0.2 s, then 1000 more over 2 s */
		for (int i = 0; i < 2000; i++)
			gk_progress_update_at(&p, (uint64_t)i * 100, 100.0 + i * 0.0001);
		int early = count_in(f, '\r', buf, sizeof(buf));
		for (int i = 0; i < 1000; i++)
			gk_progress_update_at(&p, 200000 + (uint64_t)i * 100, 100.2 + (i + 1) * 0.002);
		int later = count_in(f, '\r', buf, sizeof(buf));
		ok(early == 1, "terminal, total %s: 2000 updates in 0.2 s draw once (%d)",
		   known ? "known" : "unknown", early);
		/* 0.25 s apart over 2.2 s: at most 1 + 2.2 / 0.25 */
		ok(later >= 8 && later <= 9, "  and 1000 over 2 s draw every 0.25 s (%d)", later);
		ok(strstr(buf, "\033[K") && !strchr(buf, '\n'), "  in place, no newline");
		ok(!known || strstr(buf, "ETA "), "  with an ETA when the total is known");
		fclose(f);
	}

	gk_progress p;
	FILE *f = tmpfile();
	gk_progress_start(&p, "data-pack", 1000, 0, NULL, 1);
	gk_progress_lines(&p, 1, 10.0);
	ok(p.on == GK_PROGRESS_LINES, "not a terminal: plain lines");
	p.out = f;
	p.start = p.last = 0;
	for (int i = 0; i < 50; i++)
		gk_progress_update_at(&p, (uint64_t)i, i * 0.5); /* 0 .. 24.5 s */
	int lines = count_in(f, '\n', buf, sizeof(buf));
	ok(lines == 2 && !strchr(buf, '\r') && !strchr(buf, '\033'),
	   "  one line each 10 s, no control characters (%d)", lines);
	is_str(buf, "data-pack: 20 / 1000    2%  2/s  ETA 8:10\n"
	       "data-pack: 40 / 1000    4%  2/s  ETA 8:00\n", "  their text");
	fclose(f);

	f = tmpfile();
	gk_progress_start(&p, "data-pack", 1000, 0, NULL, 1);
	gk_progress_lines(&p, 1, 10.0);
	p.out = f;
	p.start = p.last = gk_now();
	for (int i = 0; i < 100; i++)
		gk_progress_update(&p, (uint64_t)i);
	gk_progress_finish(&p);
	ok(count_in(f, '\n', buf, sizeof(buf)) == 0, "  a short run prints nothing, not even at the end");
	fclose(f);

	gk_progress_start(&p, "data-pack", 1000, 0, NULL, 0);
	gk_progress_lines(&p, 0, 10.0);
	ok(p.on == 0, "quiet: neither");
}

static void test_strlist(void)
{
	gk_strlist l = {0};
	gk_err err;
	char name[16];
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "s%d", i);
		gk_strlist_push(&l, name, &err);
	}
	ok(l.n == 100 && strcmp(l.v[99], "s99") == 0 && l.v[100] == NULL,
	   "strlist grows and stays NULL-terminated");
	gk_strlist_free(&l);
	ok(l.n == 0 && l.v == NULL, "strlist free resets");
}

static void test_str_ends(void)
{
	ok(gk_str_ends("model.safetensors", ".safetensors"), "ends with a suffix");
	ok(gk_str_ends(".safetensors", ".safetensors"), "a string ends with itself");
	ok(gk_str_ends("x", ""), "every string ends with the empty suffix");
	ok(!gk_str_ends("tensors", ".safetensors"), "shorter than the suffix");
	ok(!gk_str_ends("a.json.bak", ".json"), "the suffix elsewhere");
	ok(!gk_str_ends("", "a"), "the empty string ends with no letter");
}

/* gk_utf8_lossy(in) is want; both n bytes long */
static int lossy_is(const char *in, size_t n, const char *want, size_t wn)
{
	size_t len = 0;
	char *got = gk_utf8_lossy(in, n, &len);
	int same = got && len == wn && !memcmp(got, want, wn) && got[len] == '\0';
	free(got);
	return same;
}

#define R "\xef\xbf\xbd" /* U+FFFD */
#define LOSSY(in, want, name) \
	ok(lossy_is(in, sizeof(in) - 1, want, sizeof(want) - 1), "utf8_lossy: %s", name)

static void test_utf8_lossy(void)
{
	/* The Unicode Standard, Table 3-8 (U+FFFD for maximal subparts) */
	LOSSY("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
	      "a" R R R "b" R "c" R R "d", "Unicode's Table 3-8");
	LOSSY("\xed\xa0\x80", R R R, "a surrogate: three");
	LOSSY("\xc0\xaf", R R, "an overlong: two");
	LOSSY("\xe0\x80\xaf", R R R, "an overlong of three bytes: three");
	LOSSY("\xf4\x90\x80\x80", R R R R, "past U+10FFFF: four");
	LOSSY("x\xe2\x82", "x" R, "truncated at the end: one");
	LOSSY("\xf0\x9f\x98x", R "x", "truncated before ASCII: one");
	LOSSY("\xff\xfe", R R, "bytes that start nothing");
	LOSSY("a\0b", "a\0b", "NUL is text");
	LOSSY("", "", "empty");
	/* every scalar value passes unchanged, one after another */
	char *all = malloc(4 * 0x110000), *p = all;
	for (uint32_t c = 0; all && c < 0x110000; c++) {
		if (c >= 0xd800 && c < 0xe000)
			continue;
		if (c < 0x80) {
			*p++ = (char)c;
		} else if (c < 0x800) {
			*p++ = (char)(0xc0 | c >> 6);
			*p++ = (char)(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			*p++ = (char)(0xe0 | c >> 12);
			*p++ = (char)(0x80 | (c >> 6 & 0x3f));
			*p++ = (char)(0x80 | (c & 0x3f));
		} else {
			*p++ = (char)(0xf0 | c >> 18);
			*p++ = (char)(0x80 | (c >> 12 & 0x3f));
			*p++ = (char)(0x80 | (c >> 6 & 0x3f));
			*p++ = (char)(0x80 | (c & 0x3f));
		}
	}
	ok(all && lossy_is(all, (size_t)(p - all), all, (size_t)(p - all)),
	   "utf8_lossy: every scalar value unchanged");
	free(all);
}

static void test_grow(void)
{
	gk_err err;
	uint32_t *v = NULL;
	size_t cap = 0, n, grows = 0, last = 0;

	for (n = 0; n < 100000; n++) {
		if (GK_GROW(v, cap, n + 1, "test array", &err) < 0)
			break;
		if (cap != last)
			grows++, last = cap;
		v[n] = (uint32_t)n * 2654435761u;
	}
	is_u64(n, 100000, "GK_GROW: 100000 pushes");
	ok(cap >= n && grows < 30, "geometric growth (cap %zu after %zu reallocs)", cap, grows);
	int same = 1;
	for (size_t i = 0; i < n; i++)
		same &= v[i] == (uint32_t)i * 2654435761u;
	ok(same, "GK_GROW keeps the contents");
	size_t keep = cap;
	uint32_t *old = v;
	ok(GK_GROW(v, cap, SIZE_MAX / 2, "test array", &err) == -1, "GK_GROW: size overflow fails");
	ok(v == old && cap == keep, "a failed grow leaves the array");
	is_str(err.msg, "test array: Cannot allocate memory", "failed grow says ENOMEM");
	ok(GK_GROW(v, cap, 10, "test array", &err) == 0 && cap == keep, "need below cap: no-op");
	free(v);
}

int main(void)
{
	test_err();
	test_dtype();
	test_xxh3();
	test_json();
	test_progress();
	test_progress_rate();
	test_strlist();
	test_str_ends();
	test_utf8_lossy();
	test_grow();
	return done_testing();
}
