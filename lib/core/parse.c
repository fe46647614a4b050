/*
 * parse.c - checked number and size parsing, size formatting.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"

int gk_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out,
		 const char *what, gk_err *err)
{
	char *end;
	if (!s || !*s || isspace((unsigned char)*s))
		return gk_errf(err, "%s '%s': not an integer", what, s ? s : "");
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (*end)
		return gk_errf(err, "%s '%s': not an integer", what, s);
	if (errno == ERANGE || v < min || v > max)
		return gk_errf(err, "%s '%s': out of range [%" PRId64 ", %" PRId64 "]",
			       what, s, min, max);
	*out = v;
	return 0;
}

int gk_parse_u64(const char *s, uint64_t max, uint64_t *out, const char *what,
		 gk_err *err)
{
	char *end;
	/* strtoull accepts "-1" and wraps it; only digits are a u64. */
	if (!s || !isdigit((unsigned char)*s))
		return gk_errf(err, "%s '%s': not a non-negative integer", what,
			       s ? s : "");
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end)
		return gk_errf(err, "%s '%s': not a non-negative integer", what, s);
	if (errno == ERANGE || v > max)
		return gk_errf(err, "%s '%s': out of range [0, %" PRIu64 "]", what,
			       s, max);
	*out = v;
	return 0;
}

int gk_parse_int(const char *s, int min, int max, int *out, const char *what,
		 gk_err *err)
{
	int64_t v;
	if (gk_parse_i64(s, min, max, &v, what, err))
		return -1;
	*out = (int)v;
	return 0;
}

int gk_parse_double(const char *s, double min, double max, double *out,
		    const char *what, gk_err *err)
{
	char *end;
	if (!s || !*s || isspace((unsigned char)*s))
		return gk_errf(err, "%s '%s': not a number", what, s ? s : "");
	errno = 0;
	double v = strtod(s, &end);
	if (*end)
		return gk_errf(err, "%s '%s': not a number", what, s);
	if (errno == ERANGE || !isfinite(v) || v < min || v > max)
		return gk_errf(err, "%s '%s': out of range [%g, %g]", what, s, min,
			       max);
	*out = v;
	return 0;
}

static const struct {
	const char *suffix;
	uint64_t mult;
} units[] = {
	{"", 1},
	{"B", 1},
	{"K", 1ULL << 10},
	{"M", 1ULL << 20},
	{"G", 1ULL << 30},
	{"T", 1ULL << 40},
	{"P", 1ULL << 50},
	{"KiB", 1ULL << 10},
	{"MiB", 1ULL << 20},
	{"GiB", 1ULL << 30},
	{"TiB", 1ULL << 40},
	{"PiB", 1ULL << 50},
	{"KB", 1000ULL},
	{"MB", 1000000ULL},
	{"GB", 1000000000ULL},
	{"TB", 1000000000000ULL},
	{"PB", 1000000000000000ULL},
};

int gk_parse_size(const char *s, uint64_t *out, const char *what, gk_err *err)
{
	const char *p = s;
	uint64_t whole = 0, frac = 0, fscale = 1;
	int ndig = 0;

	if (!s)
		s = p = "";
	while (isdigit((unsigned char)*p)) {
		if (gk_mul_overflow(whole, 10, &whole) ||
		    gk_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
			return gk_errf(err, "%s '%s': too large", what, s);
		p++, ndig++;
	}
	if (*p == '.') {
		p++;
		while (isdigit((unsigned char)*p)) {
			/* 18 fractional digits are more than any unit can use. */
			if (fscale < 1000000000000000000ULL) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				fscale *= 10;
			}
			p++, ndig++;
		}
	}
	if (ndig == 0)
		return gk_errf(err, "%s '%s': not a size (e.g. 4096, 256M, 1GiB, 5GB)",
			       what, s);
	const char *unit = p;
	if (*unit == ' ')
		unit++;
	for (size_t i = 0; i < GK_ARRAY_SIZE(units); i++) {
		/*
		 * One rule for every unit: letters are case-insensitive, so
		 * "1b" is a byte as "5gb" is 5e9 bytes (no size here counts bits).
		 */
		if (strcasecmp(unit, units[i].suffix) != 0)
			continue;
		uint64_t mult = units[i].mult, v;
		if (fscale > 1 && mult == 1 && frac != 0)
			return gk_errf(err, "%s '%s': not a whole number of bytes",
				       what, s);
		if (gk_mul_overflow(whole, mult, &v))
			return gk_errf(err, "%s '%s': too large", what, s);
		/* frac/fscale * mult without overflow: mult <= 2^50, frac < 10^18. */
		unsigned __int128 f = (unsigned __int128)frac * mult / fscale;
		if (gk_add_overflow(v, (uint64_t)f, &v))
			return gk_errf(err, "%s '%s': too large", what, s);
		*out = v;
		return 0;
	}
	return gk_errf(err, "%s '%s': unknown unit '%s' (B, K M G T P, KiB MiB GiB TiB PiB, KB MB GB TB PB)",
		       what, s, unit);
}

char *gk_format_size(uint64_t n, int si, char *buf, size_t len)
{
	static const char *bin[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	static const char *dec[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
	const char **names = si ? dec : bin;
	double base = si ? 1000.0 : 1024.0;
	double v = (double)n;
	int u = 0;

	while (v >= base && u < 6) {
		v /= base;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", n);
	else if (v < 10)
		snprintf(buf, len, "%.2f %s", v, names[u]);
	else if (v < 100)
		snprintf(buf, len, "%.1f %s", v, names[u]);
	else
		snprintf(buf, len, "%.0f %s", v, names[u]);
	return buf;
}
