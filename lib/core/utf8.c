/*
 * utf8.c - bytes as text: UTF-8 with each ill-formed part replaced.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/*
 * Unicode's "maximal subpart" practice (The Unicode Standard, 3.9 U+FFFD
 * Substitution of Maximal Subparts; Table 3-7 gives the well-formed
 * byte sequences): one U+FFFD for each maximal prefix of a well-formed
 * sequence that the next byte does not continue, and one for each byte
 * that starts none. Python's errors="replace" and Rust's
 * String::from_utf8_lossy (Hugging Face tokenizers' decode) do the same.
 */
char *gk_utf8_lossy(const char *buf, size_t n, size_t *len)
{
	const unsigned char *b = (const unsigned char *)buf;
	char *out = n <= (SIZE_MAX - 1) / 3 ? malloc(3 * n + 1) : NULL;
	size_t o = 0;
	for (size_t i = 0; out && i < n;) {
		unsigned c = b[i];
		size_t want = c < 0x80 ? 1 : c >= 0xc2 && c < 0xe0 ? 2 : c >= 0xe0 && c < 0xf0 ? 3 :
			      c >= 0xf0 && c < 0xf5 ? 4 : 0;
		/* the second byte's range excludes overlongs, surrogates, > U+10FFFF */
		unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
		unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
		size_t k = 1;
		while (want && k < want && i + k < n &&
		       b[i + k] >= (k == 1 ? lo : 0x80) && b[i + k] <= (k == 1 ? hi : 0xbf))
			k++;
		if (want && k == want) {
			memcpy(out + o, b + i, k);
			o += k;
		} else {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
		}
		i += k;
	}
	if (out) {
		out[o] = '\0';
		*len = o;
	}
	return out;
}
