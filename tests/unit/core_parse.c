/* core_parse.c - number and size parsing and formatting. */
#include "core/core.h"
#include "tap.h"

static void size_ok(const char *s, uint64_t want)
{
	uint64_t v = 0;
	gk_err err = {0};
	int rc = gk_parse_size(s, &v, "--size", &err);
	if (!ok(rc == 0 && v == want, "size '%s' = %llu", s, (unsigned long long)want))
		diag("rc %d value %llu: %s", rc, (unsigned long long)v, err.msg);
}

static void size_bad(const char *s, const char *want_msg)
{
	uint64_t v = 0;
	gk_err err = {0};
	int rc = gk_parse_size(s, &v, "--size", &err);
	ok(rc == -1, "size '%s' refused", s);
	is_str(err.msg, want_msg, "  message");
}

int main(void)
{
	/* doc/DESIGN.md: K M G T and KiB MiB GiB are 1024-based, KB MB GB 1000-based. */
	size_ok("0", 0);
	size_ok("4096", 4096);
	size_ok("4K", 4096);
	size_ok("4k", 4096);
	size_ok("256M", 268435456ULL);
	size_ok("1G", 1073741824ULL);
	size_ok("2T", 2199023255552ULL);
	size_ok("1KiB", 1024);
	size_ok("1MiB", 1048576);
	size_ok("1GiB", 1073741824ULL);
	size_ok("5GiB", 5368709120ULL);
	size_ok("5GB", 5000000000ULL); /* Hugging Face's max_shard_size="5GB" */
	size_ok("5gb", 5000000000ULL);
	size_ok("10MB", 10000000ULL);
	size_ok("1KB", 1000);
	size_ok("1TB", 1000000000000ULL);
	size_ok("512B", 512);
	size_ok("1b", 1); /* case-insensitive like every other unit ("5gb") */
	size_ok("2PiB", 2ULL << 50);
	size_ok("3PB", 3000000000000000ULL);
	size_ok("1.5G", 1610612736ULL);
	size_ok("1.5GB", 1500000000ULL);
	size_ok("0.5K", 512);
	size_ok("80GiB", 85899345920ULL);
	size_ok("1 GiB", 1073741824ULL);
	size_ok("16383P", 16383ULL << 50);
	size_bad("", "--size '': not a size (e.g. 4096, 256M, 1GiB, 5GB)");
	size_bad("G", "--size 'G': not a size (e.g. 4096, 256M, 1GiB, 5GB)");
	size_bad("-1", "--size '-1': not a size (e.g. 4096, 256M, 1GiB, 5GB)");
	size_bad("12Q", "--size '12Q': unknown unit 'Q' (B, K M G T P, KiB MiB GiB TiB PiB, KB MB GB TB PB)");
	size_bad("16384P", "--size '16384P': too large");
	size_bad("99999999999999999999", "--size '99999999999999999999': too large");
	size_bad("1.5", "--size '1.5': not a whole number of bytes");

	int64_t i;
	uint64_t u;
	int n;
	double d;
	gk_err err;
	ok(gk_parse_i64("-42", -100, 100, &i, "x", &err) == 0 && i == -42, "i64 -42");
	ok(gk_parse_i64("9223372036854775807", INT64_MIN, INT64_MAX, &i, "x", &err) == 0 &&
	   i == INT64_MAX, "i64 max");
	ok(gk_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &i, "x", &err) == -1,
	   "i64 overflow refused");
	ok(gk_parse_i64("12abc", 0, 100, &i, "--jobs", &err) == -1, "trailing junk refused");
	is_str(err.msg, "--jobs '12abc': not an integer", "  message");
	ok(gk_parse_i64(" 1", 0, 100, &i, "x", &err) == -1, "leading space refused");
	ok(gk_parse_i64("101", 0, 100, &i, "--jobs", &err) == -1, "above max refused");
	is_str(err.msg, "--jobs '101': out of range [0, 100]", "  message");
	ok(gk_parse_u64("-1", UINT64_MAX, &u, "x", &err) == -1, "u64 '-1' refused (no wrap)");
	ok(gk_parse_u64("18446744073709551615", UINT64_MAX, &u, "x", &err) == 0 &&
	   u == UINT64_MAX, "u64 max");
	ok(gk_parse_int("7", 1, 8, &n, "x", &err) == 0 && n == 7, "int 7");
	ok(gk_parse_int("0", 1, 8, &n, "x", &err) == -1, "int below min refused");
	ok(gk_parse_double("3e-4", 0, 1, &d, "--lr", &err) == 0 && d == 3e-4, "double 3e-4");
	ok(gk_parse_double("nan", 0, 1, &d, "--lr", &err) == -1, "double nan refused");
	ok(gk_parse_double("1e999", 0, 1e300, &d, "--lr", &err) == -1, "double overflow refused");

	char buf[32];
	is_str(gk_format_size(0, 0, buf, sizeof(buf)), "0 B", "format 0");
	is_str(gk_format_size(1023, 0, buf, sizeof(buf)), "1023 B", "format 1023");
	is_str(gk_format_size(1024, 0, buf, sizeof(buf)), "1.00 KiB", "format 1 KiB");
	is_str(gk_format_size(1536, 0, buf, sizeof(buf)), "1.50 KiB", "format 1.5 KiB");
	is_str(gk_format_size(256ULL << 20, 0, buf, sizeof(buf)), "256 MiB", "format 256 MiB");
	is_str(gk_format_size(80ULL << 30, 0, buf, sizeof(buf)), "80.0 GiB", "format 80 GiB");
	is_str(gk_format_size(5000000000ULL, 1, buf, sizeof(buf)), "5.00 GB", "format 5 GB si");
	is_str(gk_format_size(5000000000ULL, 0, buf, sizeof(buf)), "4.66 GiB", "format 5e9 binary");
	is_str(gk_format_size(UINT64_MAX, 0, buf, sizeof(buf)), "16.0 EiB", "format max");
	return done_testing();
}
