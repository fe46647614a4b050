/*
 * st_format.c - the safetensors writer against the byte strings in the
 * reference's own tests (safetensors/src/tensor.rs: test_serialization,
 * test_empty, test_serialization_forced_alignement), the reader on inputs
 * built here, and the streaming writer's bookkeeping.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "st/st.h"
#include "tap.h"

static char dir[] = "/tmp/gk-st-XXXXXX";

static const float six[6] = {0, 1, 2, 3, 4, 5};

static int header_is(const gk_st_spec *t, size_t n, const gk_st_kv *meta,
		     size_t nmeta, const unsigned char *want, size_t want_len)
{
	char *hdr;
	size_t len;
	uint64_t dlen;
	gk_err err;
	if (gk_st_header(t, n, meta, nmeta, &hdr, &len, NULL, &dlen, &err))
		return 0;
	int same = len == want_len && memcmp(hdr, want, len) == 0;
	if (!same)
		diag("got %zu bytes: %.*s", len, (int)len - 8, hdr + 8);
	free(hdr);
	return same;
}

static void test_reference_bytes(void)
{
	/* test_serialization: "attn.0" F32 [1,2,3], no metadata. */
	static const unsigned char ser[] = {
		64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100,
		116, 121, 112, 101, 34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34,
		58, 91, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116, 97, 95, 111, 102, 102, 115,
		101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125};
	uint64_t sh[] = {1, 2, 3};
	gk_st_spec t = {"attn.0", GK_DT_F32, 3, sh};
	ok(header_is(&t, 1, NULL, 0, ser, sizeof(ser)), "reference test_serialization header");

	/* test_serialization_forced_alignement: "attn0" [1,1,2,3], 7 spaces. */
	static const unsigned char al[] = {
		72, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 48, 34, 58, 123, 34, 100, 116,
		121, 112, 101, 34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58,
		91, 49, 44, 49, 44, 50, 44, 51, 93, 44, 34, 100, 97, 116, 97, 95, 111, 102, 102,
		115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 32, 32, 32, 32, 32,
		32, 32};
	uint64_t sh4[] = {1, 1, 2, 3};
	gk_st_spec t4 = {"attn0", GK_DT_F32, 4, sh4};
	ok(header_is(&t4, 1, NULL, 0, al, sizeof(al)), "reference forced-alignment header (7 spaces)");

	/* test_empty: no tensors, then metadata {"framework":"pt"}. */
	static const unsigned char e1[] = {8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32};
	ok(header_is(NULL, 0, NULL, 0, e1, sizeof(e1)), "reference empty header");
	static const unsigned char e2[] = {
		40, 0, 0, 0, 0, 0, 0, 0, 123, 34, 95, 95, 109, 101, 116, 97, 100, 97, 116, 97, 95,
		95, 34, 58, 123, 34, 102, 114, 97, 109, 101, 119, 111, 114, 107, 34, 58, 34, 112,
		116, 34, 125, 125, 32, 32, 32, 32, 32};
	gk_st_kv m = {"framework", "pt"};
	ok(header_is(NULL, 0, &m, 1, e2, sizeof(e2)), "reference empty header with metadata");

	/* The whole file: header then the six floats. */
	char path[256];
	gk_err err;
	snprintf(path, sizeof(path), "%s/ser.safetensors", dir);
	const void *data[] = {six};
	ok(gk_st_save(path, &t, data, 1, NULL, 0, &err) == 0, "save");
	char *buf;
	size_t len;
	gk_read_file(path, 1 << 20, &buf, &len, &err);
	ok(len == sizeof(ser) + 24 && memcmp(buf, ser, sizeof(ser)) == 0 &&
	   memcmp(buf + sizeof(ser), six, 24) == 0, "saved file = reference bytes");
	free(buf);
}

static void test_order_and_escapes(void)
{
	/* Dtype descending (the reference's enum order), then name bytes. */
	uint64_t one = 1;
	gk_st_spec t[] = {
		{"b", GK_DT_F16, 1, &one}, {"a", GK_DT_U8, 1, &one}, {"c", GK_DT_F64, 1, &one},
		{"a2", GK_DT_F16, 1, &one}, {"z", GK_DT_I64, 1, &one}, {"q\"\\\n\x01/\xc3\xa9", GK_DT_BOOL, 1, &one},
	};
	char *hdr;
	size_t len, *order;
	uint64_t dlen;
	gk_err err;
	ok(gk_st_header(t, 6, NULL, 0, &hdr, &len, &order, &dlen, &err) == 0, "header of six");
	is_int(order[0], 4, "I64 first");
	is_int(order[1], 2, "then F64");
	is_int(order[2], 3, "then F16 'a2'");
	is_int(order[3], 0, "then F16 'b'");
	is_int(order[4], 1, "then U8");
	is_int(order[5], 5, "BOOL last");
	is_u64(dlen, 8 + 8 + 2 + 2 + 1 + 1, "data length");
	ok(strstr(hdr + 8, "\"q\\\"\\\\\\n\\u0001/\xc3\xa9\"") != NULL,
	   "serde_json escapes: only quote, backslash and controls (lowercase \\u)");
	is_int((len - 8) % 8, 0, "padded to 8");
	free(hdr);
	free(order);
	gk_st_spec dup[] = {{"x", GK_DT_F32, 1, &one}, {"y", GK_DT_I8, 1, &one}, {"x", GK_DT_F16, 1, &one}};
	ok(gk_st_header(dup, 3, NULL, 0, &hdr, &len, NULL, &dlen, &err) < 0 &&
	   strstr(err.msg, "given twice"), "duplicate names (of different dtypes) refused: %s", err.msg);
	gk_st_spec f4 = {"x", GK_DT_F4, 1, &one};
	ok(gk_st_header(&f4, 1, NULL, 0, &hdr, &len, NULL, &dlen, &err) < 0,
	   "one F4 element (half a byte) refused");
}

static void test_parse(void)
{
	gk_st_file *f = NULL;
	gk_err err;
	const char *good = "{\"__metadata__\":{\"k\":\"v\"},\"b\":{\"dtype\":\"F4\",\"shape\":[2,3],\"data_offsets\":[8,11]},"
			   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"e\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[11,11]}}";
	char buf[512];
	size_t hl = strlen(good);
	for (int i = 0; i < 8; i++)
		buf[i] = (char)(hl >> (8 * i));
	memcpy(buf + 8, good, hl);
	ok(gk_st_parse(&f, buf, 8 + hl, 8 + hl + 11, "mem", &err) == 0, "parse: %s",
	   f ? "ok" : err.msg);
	is_int(f->n, 3, "three tensors");
	is_str(f->t[0].name, "a", "sorted by offset");
	is_str(gk_st_meta_get(f, "k"), "v", "metadata");
	is_u64(gk_st_numel(gk_st_find(f, "b")), 6, "numel");
	gk_st_close(f);
	ok(gk_st_parse(&f, buf, 8 + hl, 8 + hl + 12, "mem", &err) < 0 &&
	   strstr(err.msg, "1 bytes after the last tensor"), "trailing byte: %s", err.msg);
	ok(gk_st_parse(&f, buf, 8 + hl, 8 + hl + 10, "mem", &err) < 0 &&
	   strstr(err.msg, "truncated"), "short data: %s", err.msg);
	ok(gk_st_parse(&f, buf, 6, 100, "mem", &err) < 0, "fewer than 8 bytes given");
	/* Overlong UTF-8 (C0 80) and a surrogate (ED A0 80) are not UTF-8. */
	const char *bad[] = {"{\"\xc0\x80\":1}", "{\"\xed\xa0\x80\":1}", "{\"\xf4\x90\x80\x80\":1}", "{\"\xe2\x82\":1}"};
	for (size_t i = 0; i < GK_ARRAY_SIZE(bad); i++) {
		hl = strlen(bad[i]);
		for (int k = 0; k < 8; k++)
			buf[k] = (char)(hl >> (8 * k));
		memcpy(buf + 8, bad[i], hl);
		ok(gk_st_parse(&f, buf, 8 + hl, 8 + hl, "mem", &err) < 0 &&
		   strstr(err.msg, "not UTF-8"), "bad UTF-8 %zu: %s", i, err.msg);
	}
}

static void test_writer(void)
{
	char path[256], src[256];
	gk_err err;
	gk_st_writer *w;
	uint64_t n4 = 4, n3 = 3;
	gk_st_spec t[] = {{"x", GK_DT_F32, 1, &n4}, {"y", GK_DT_BF16, 1, &n3}};
	snprintf(path, sizeof(path), "%s/w.safetensors", dir);
	snprintf(src, sizeof(src), "%s/src.bin", dir);
	float fs[4] = {1.0f, -2.5f, 3.0f, 1.00390625f}; /* last: a bf16 tie, rounds to even */
	gk_atomic_write_file(src, fs, sizeof(fs), 0644, &err);
	int fd = open(src, O_RDONLY);

	ok(gk_st_writer_open(&w, path, t, 2, NULL, 0, &err) == 0, "writer open");
	is_int(gk_st_writer_next(w), 0, "F32 x comes first");
	ok(gk_st_writer_copy(w, fd, 0, 8, src, &err) == 0, "copy half of x");
	ok(gk_st_writer_copy(w, fd, 8, 8, src, &err) == 0, "copy the rest");
	is_int(gk_st_writer_next(w), 1, "then y");
	ok(gk_st_writer_convert(w, fd, 4, GK_DT_F32, 3, src, &err) == 0, "convert 3 F32 to BF16");
	ok(gk_st_writer_write(w, "x", 1, &err) < 0 && strstr(err.msg, "more data"),
	   "writing past the end refused");
	ok(gk_st_writer_close(w, &err) == 0, "close");
	gk_st_file *f;
	ok(gk_st_open(&f, path, &err) == 0, "reopen valid");
	uint16_t y[3];
	gk_st_read(f, gk_st_find(f, "y"), 0, y, 6, &err);
	ok(y[0] == 0xc020 && y[1] == 0x4040 && y[2] == 0x3f80, "bf16 values %04x %04x %04x", y[0], y[1], y[2]);
	gk_st_close(f);

	ok(gk_st_writer_open(&w, path, t, 2, NULL, 0, &err) == 0, "writer open again");
	gk_st_writer_write(w, fs, 4, &err);
	ok(gk_st_writer_close(w, &err) < 0 && strstr(err.msg, "never written"),
	   "close with bytes missing fails: %s", err.msg);
	ok(gk_st_open(&f, path, &err) == 0, "the old file is still there, valid");
	gk_st_close(f);
	ok(gk_st_writer_open(&w, path, t, 2, NULL, 0, &err) == 0, "open once more");
	ok(gk_st_writer_copy(w, fd, 12, 16, src, &err) < 0 && strstr(err.msg, "truncated"),
	   "copy past the source's end: %s", err.msg);
	gk_st_writer_abort(w);
	close(fd);
	unlink(src);
	unlink(path);
	snprintf(path, sizeof(path), "%s/ser.safetensors", dir);
	unlink(path);
}

int main(void)
{
	if (!mkdtemp(dir))
		return 1;
	test_reference_bytes();
	test_order_and_escapes();
	test_parse();
	test_writer();
	rmdir(dir);
	return done_testing();
}
