/*
 * tok_encode.c - lib/tok's encoder on arbitrary bytes: decode(encode(x))
 * must give x back, and encoding in the parts gk_tok_stable allows (cut
 * where the input's own bytes say) must give the ids of one call. The
 * vocabulary is the 256 byte tokens and merges of a few common pairs,
 * written once to a temporary directory.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tok/tok.h"

static const gk_tok *load(void)
{
	static gk_tok *t;
	if (t)
		return t;
	char dir[] = "/tmp/gk-fuzz-tok-XXXXXX", path[64];
	if (!mkdtemp(dir))
		abort();
	/* GPT-2's names of the bytes: printable ones as themselves, the
	 * rest from U+0100 (encoder.py bytes_to_unicode) */
	snprintf(path, sizeof(path), "%s/vocab.json", dir);
	FILE *v = fopen(path, "w");
	if (!v)
		abort();
	fputc('{', v);
	unsigned n = 0;
	for (unsigned b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
		unsigned cp = printable ? b : 256 + n++;
		if (cp == '"' || cp == '\\')
			fprintf(v, "\"\\%c\": %u, ", (char)cp, b);
		else
			fprintf(v, "\"\\u%04x\": %u, ", cp, b);
	}
	fputs("\"\\u0120t\": 256, \"he\": 257, \"\\u0120the\": 258, \"in\": 259, \"\\u0120\\u0120\": 260, "
	      "\"\\u010a\\u010a\": 261, \"<|endoftext|>\": 262}\n", v);
	fclose(v);
	snprintf(path, sizeof(path), "%s/merges.txt", dir);
	FILE *m = fopen(path, "w");
	if (!m)
		abort();
	fputs("#version: 0.2\n\xC4\xA0 t\nh e\n\xC4\xA0t he\ni n\n\xC4\xA0 \xC4\xA0\n\xC4\x8A \xC4\x8A\n", m);
	fclose(m);
	gk_err err;
	if (gk_tok_open(&t, dir, &err) < 0) {
		fprintf(stderr, "tok_encode: %s\n", err.msg);
		abort();
	}
	snprintf(path, sizeof(path), "%s/vocab.json", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/merges.txt", dir);
	unlink(path);
	rmdir(dir);
	return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const gk_tok *t = load();
	gk_tok_enc *e = gk_tok_enc_new(t);
	gk_tok_ids one = {0}, parts = {0};
	gk_err err;
	unsigned flags = size && data[0] & 1 ? GK_TOK_SPECIAL : 0;
	if (!e || gk_tok_encode(e, data, size, flags, &one, &err) < 0)
		abort();
	/* parts: the sizes come from the input's bytes */
	size_t start = 0, end = 0;
	for (size_t k = 0; end < size; k++) {
		end += 1 + data[k % size] % 13 + (end - start > 64 ? end - start : 0);
		if (end > size)
			end = size;
		size_t c = gk_tok_stable(t, data + start, end - start, flags);
		if (c > end - start || gk_tok_encode(e, data + start, c, flags, &parts, &err) < 0)
			abort();
		start += c;
	}
	if (gk_tok_encode(e, data + start, size - start, flags, &parts, &err) < 0 ||
	    parts.n != one.n || (one.n && memcmp(parts.v, one.v, one.n * sizeof(*one.v))))
		abort();
	char *out = NULL;
	size_t len = 0, cap = 0;
	if (gk_tok_decode(t, one.v, one.n, &out, &len, &cap, &err) < 0 || len != size ||
	    (size && memcmp(out, data, size)))
		abort();
	free(out);
	free(one.v);
	free(parts.v);
	gk_tok_enc_free(e);
	return 0;
}
