/*
 * npy.c - a sample's token member in NumPy's .npy format (reference:
 * numpy/lib/format.py, versions 1.0 to 3.0): the header parsed without
 * Python, for the 1-D token arrays gpu-train reads ('<u2' or '<i4').
 */
#include <inttypes.h>
#include <string.h>

#include "shard/shard.h"

/* Skip spaces in a Python literal. */
static const char *npy_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n'))
		p++;
	return p;
}

/* A quoted Python string at p: its body in [*s, *s + *n). */
static const char *npy_str(const char *p, const char *end, const char **s,
			   size_t *n)
{
	if (p >= end || (*p != '\'' && *p != '"'))
		return NULL;
	char q = *p++;
	const char *b = p;
	while (p < end && *p != q)
		p++;
	if (p >= end)
		return NULL;
	*s = b;
	*n = (size_t)(p - b);
	return p + 1;
}

int gk_shard_npy_parse(const void *buf, size_t len, gk_shard_npy *out, gk_err *err)
{
	const unsigned char *u = buf;
	memset(out, 0, sizeof(*out));
	if (len < 10 || memcmp(u, "\x93NUMPY", 6) != 0)
		return gk_errf(err, "not a .npy file (no \\x93NUMPY magic)");
	/* reference: numpy/lib/format.py (versions 1.0, 2.0, 3.0) */
	size_t hlen, pre;
	if (u[6] == 1) {
		hlen = (size_t)u[8] | (size_t)u[9] << 8;
		pre = 10;
	} else if (u[6] == 2 || u[6] == 3) {
		if (len < 12)
			return gk_errf(err, "truncated .npy header");
		hlen = (size_t)u[8] | (size_t)u[9] << 8 | (size_t)u[10] << 16 |
		       (size_t)u[11] << 24;
		pre = 12;
	} else {
		return gk_errf(err, ".npy version %u.%u is not supported", u[6], u[7]);
	}
	if (hlen > len - pre)
		return gk_errf(err, "truncated .npy header");
	const char *p = (const char *)u + pre, *end = p + hlen;
	int have_descr = 0, have_fortran = 0, have_shape = 0;
	p = npy_ws(p, end);
	if (p >= end || *p++ != '{')
		return gk_errf(err, ".npy header is not a dictionary");
	for (;;) {
		p = npy_ws(p, end);
		if (p < end && *p == '}')
			break;
		const char *k;
		size_t kn;
		if (!(p = npy_str(p, end, &k, &kn)))
			return gk_errf(err, ".npy header: bad key");
		p = npy_ws(p, end);
		if (p >= end || *p++ != ':')
			return gk_errf(err, ".npy header: ':' expected");
		p = npy_ws(p, end);
		if (kn == 5 && !memcmp(k, "descr", 5)) {
			const char *d;
			size_t dn;
			if (!(p = npy_str(p, end, &d, &dn)))
				return gk_errf(err, ".npy header: descr is not a string");
			if (dn == 3 && !memcmp(d, "<u2", 3))
				out->itemsize = 2, out->is_signed = 0;
			else if (dn == 3 && !memcmp(d, "<i4", 3))
				out->itemsize = 4, out->is_signed = 1;
			else
				return gk_errf(err, ".npy dtype '%.*s' is not a token type (<u2 or <i4)",
					       (int)dn, d);
			have_descr = 1;
		} else if (kn == 13 && !memcmp(k, "fortran_order", 13)) {
			if ((size_t)(end - p) >= 5 && !memcmp(p, "False", 5))
				p += 5;
			else if ((size_t)(end - p) >= 4 && !memcmp(p, "True", 4))
				return gk_errf(err, ".npy array is in Fortran order");
			else
				return gk_errf(err, ".npy header: bad fortran_order");
			have_fortran = 1;
		} else if (kn == 5 && !memcmp(k, "shape", 5)) {
			if (p >= end || *p++ != '(')
				return gk_errf(err, ".npy header: shape is not a tuple");
			int dims = 0;
			uint64_t n = 0;
			for (;;) {
				p = npy_ws(p, end);
				if (p < end && *p == ')') {
					p++;
					break;
				}
				if (p >= end || *p < '0' || *p > '9')
					return gk_errf(err, ".npy header: bad shape");
				uint64_t v = 0;
				while (p < end && *p >= '0' && *p <= '9') {
					if (v > (UINT64_MAX - 9) / 10)
						return gk_errf(err, ".npy header: shape too large");
					v = v * 10 + (uint64_t)(*p++ - '0');
				}
				n = v;
				dims++;
				p = npy_ws(p, end);
				if (p < end && *p == ',')
					p++;
			}
			if (dims != 1)
				return gk_errf(err, ".npy array has %d dimensions, not 1", dims);
			out->count = n;
			have_shape = 1;
		} else {
			return gk_errf(err, ".npy header: unknown key '%.*s'", (int)kn, k);
		}
		p = npy_ws(p, end);
		if (p < end && *p == ',')
			p++;
		else if (p < end && *p == '}')
			break;
		else
			return gk_errf(err, ".npy header: ',' or '}' expected");
	}
	if (!have_descr || !have_fortran || !have_shape)
		return gk_errf(err, ".npy header lacks %s", !have_descr ? "descr" :
			       !have_fortran ? "fortran_order" : "shape");
	uint64_t bytes;
	if (gk_mul_overflow(out->count, (uint64_t)out->itemsize, &bytes) ||
	    bytes != len - pre - hlen)
		return gk_errf(err, ".npy data is %zu bytes, the header says %" PRIu64
			       " elements of %d bytes", len - pre - hlen, out->count,
			       out->itemsize);
	out->data = (const unsigned char *)buf + pre + hlen;
	return 0;
}


size_t gk_shard_npy_header(unsigned char *buf, int itemsize, uint64_t count)
{
	/*
	 * reference: numpy/lib/_format_impl.py _write_array_header and
	 * _wrap_header: the dictionary's repr with sorted keys, spaces for
	 * the shape to grow to 21 digits, then spaces and a newline to a
	 * multiple of ARRAY_ALIGN (64) bytes counted from the magic.
	 */
	char dict[GK_SHARD_NPY_HEADER_MAX], num[24];
	int nd = snprintf(num, sizeof(num), "%" PRIu64, count);
	int n = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (%s,), }%*s",
			 itemsize == 2 ? "<u2" : "<i4", num, nd < 21 ? 21 - nd : 0, "");
	size_t hlen = (size_t)n + 1, pad = 64 - (10 + hlen) % 64;
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (unsigned char)((hlen + pad) & 0xff);
	buf[9] = (unsigned char)((hlen + pad) >> 8);
	memcpy(buf + 10, dict, (size_t)n);
	memset(buf + 10 + n, ' ', pad);
	buf[10 + (size_t)n + pad] = '\n';
	return 10 + hlen + pad;
}
