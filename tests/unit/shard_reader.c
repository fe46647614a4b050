/*
 * shard_reader.c - member names as webdataset splits them, shard name
 * patterns, and the reader: seeking with and without an index, plain and
 * LZ4, and random access, against the samples that were written.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "shard/shard.h"
#include "tap.h"

static char dir[] = "/tmp/gk-shard-rd-XXXXXX";

static void test_names(void)
{
	/* As webdataset's base_plus_ext regular expression splits names. */
	is_int(gk_shard_key_len("a/b/0001.seg.png"), 8, "key of a/b/0001.seg.png is a/b/0001");
	is_int(gk_shard_key_len("x.y/0001.jpg"), 8, "a dot in a directory is not the split");
	is_int(gk_shard_key_len("README"), -1, "no dot: no key");
	is_int(gk_shard_key_len("d/.hidden"), -1, "a dot file has no key");
	gk_err err;
	ok(gk_shard_check_name("a/0001.jpg", &err) == 0, "a good name passes");
	const char *bad[] = {"/abs.jpg", "a/../b.jpg", "./a.jpg", "a//b.jpg", "a b.jpg",
			     "a\tb.jpg", "a.", "noext", "\xff.jpg", "\xc0\xaf.jpg"};
	for (size_t i = 0; i < GK_ARRAY_SIZE(bad); i++)
		ok(gk_shard_check_name(bad[i], &err) < 0, "refused: %s", err.msg);
	char buf[64];
	ok(gk_shard_format_name("t-%06d.tar", 42, buf, sizeof(buf), &err) == 1 &&
	   strcmp(buf, "t-000042.tar") == 0, "pattern t-%%06d.tar -> %s", buf);
	ok(gk_shard_format_name("one.tar", 0, buf, sizeof(buf), &err) == 0, "a plain name");
	ok(gk_shard_format_name("t-%s.tar", 0, buf, sizeof(buf), &err) < 0, "%%s is refused");
	ok(gk_shard_format_name("%d-%d.tar", 0, buf, sizeof(buf), &err) < 0, "two conversions are refused");
	ok(gk_shard_format_name("t-% d.tar", 0, buf, sizeof(buf), &err) < 0, "a flag is refused: %s",
	   err.msg);
	ok(gk_shard_format_name("100%%-%d.tar", 7, buf, sizeof(buf), &err) == 1 &&
	   strcmp(buf, "100%-7.tar") == 0, "%%%% with a conversion: %s", buf);
	ok(gk_shard_format_name("100%%.tar", 7, buf, sizeof(buf), &err) == 0 &&
	   strcmp(buf, "100%.tar") == 0, "%%%% without one: %s", buf);
	char *p = gk_shard_index_path("d.x/train-000001.tar.lz4");
	is_str(p, "d.x/train-000001.idx", "index path as DALI's wds2idx names it");
	free(p);
}

static int make_shard(const char *path, int lz4)
{
	gk_err err;
	gk_shard_write_opts o = {.pattern = path, .index = 1, .lz4 = lz4};
	gk_shard_writer *w;
	if (gk_shard_writer_open(&w, &o, &err) < 0)
		return -1;
	for (int i = 0; i < 20; i++) {
		char key[16], data[600];
		snprintf(key, sizeof(key), "k%02d", i);
		memset(data, 'a' + i, sizeof(data));
		gk_shard_member m[2] = {{.ext = "b", .data = data, .size = (uint64_t)i * 25},
					{.ext = "a", .data = key, .size = 3}};
		if (gk_shard_writer_add(w, key, 2, m, &err) < 0)
			return -1;
	}
	return gk_shard_writer_close(w, NULL, &err);
}

static void test_reader(const char *path, const char *what)
{
	gk_err err = {0};
	gk_shard_index idx, built;
	char *ip = gk_shard_index_path(path);
	ok(gk_shard_index_load(ip, &idx, &err) == 0 && idx.nsamples == 20,
	   "%s: index has 20 samples", what);
	ok(gk_shard_index_build(path, &built, &err) == 0 && built.nmembers == idx.nmembers &&
	   built.end == idx.end && built.frame_end == idx.frame_end &&
	   built.s[7].frame == idx.s[7].frame && built.m[15].offset == idx.m[15].offset,
	   "%s: a rebuilt index equals the one written while packing", what);
	gk_shard_index_free(&built);
	for (int with = 0; with < 2; with++) {
		gk_shard_reader *r;
		const gk_shard_sample *s;
		int good = gk_shard_reader_open(&r, path, &err) == 0 &&
			   gk_shard_reader_seek(r, 13, with ? &idx : NULL, &err) == 0;
		int n = 13;
		while (good && gk_shard_reader_next(r, &s, &err) == 1) {
			char key[16];
			snprintf(key, sizeof(key), "k%02d", n);
			good = strcmp(s->key, key) == 0 && s->index == (uint64_t)n && s->n == 2 &&
			       strcmp(s->m[0].ext, "a") == 0 && s->m[1].size == (uint64_t)n * 25 &&
			       (n == 0 || ((const char *)s->m[1].data)[0] == 'a' + n) &&
			       s->m[1].offset == idx.m[2 * n + 1].offset;
			n++;
		}
		gk_shard_reader_close(r);
		ok(good && n == 20, "%s: seek to sample 13 %s an index, read 13..19 (%s)", what,
		   with ? "with" : "without", err.msg);
	}
	int fd = open(path, O_RDONLY);
	void *buf = NULL;
	gk_shard_member m[2];
	ok(gk_shard_read_sample(fd, path, &idx, 17, &buf, m, &err) == 0 &&
	   m[1].size == 17 * 25 && ((const char *)m[1].data)[424] == 'a' + 17 &&
	   memcmp(m[0].data, "k17", 3) == 0, "%s: random access to sample 17", what);
	free(buf);
	ok(gk_shard_read_sample(fd, path, &idx, 20, &buf, m, &err) < 0, "%s: no sample 20: %s",
	   what, err.msg);
	close(fd);
	ok(gk_shard_index_find(&idx, "k05") == 5 && gk_shard_index_find(&idx, "k5") == -1,
	   "%s: find a key", what);
	gk_shard_index_free(&idx);
	free(ip);
}

int main(void)
{
	char plain[256], lz4[256];
	test_names();
	if (!mkdtemp(dir))
		return 1;
	snprintf(plain, sizeof(plain), "%s/p.tar", dir);
	snprintf(lz4, sizeof(lz4), "%s/z.tar.lz4", dir);
	ok(make_shard(plain, 0) == 0 && make_shard(lz4, 1) == 0, "write a plain and an LZ4 shard");
	test_reader(plain, "plain");
	test_reader(lz4, "lz4");
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
