/*
 * core_optable.c - option tables (core.h, "An option table"): getopt_long's
 * list and short string against lists written here by hand, parsing
 * through a real getopt_long loop into a struct against the values the
 * arguments mean, range and error messages, defaults against parsing the
 * same strings, the values ranks compare, and the --help summary against
 * a text written by hand.
 */
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "tap.h"

/* One field of each kind and C type a row may fill. */
struct args {
	int loud;          /* FLAG, set 1 */
	int mode;          /* FLAG --fast sets 3, --slow 0 */
	int batch;         /* INT int [1, 1024] */
	int32_t eot;       /* INT int32_t [-1, INT32_MAX] */
	int64_t offset;    /* INT int64_t, the whole range */
	uint64_t seed;     /* INT uint64_t [0, INT64_MAX] */
	uint64_t count;    /* UINT up to 1000 */
	uint64_t big;      /* UINT, no bound */
	float beta;        /* NUM float [0, 1] */
	double lr;         /* NUM double [1e-9, 10] */
	uint64_t mem;      /* SIZE uint64_t */
	size_t bucket;     /* SIZE size_t */
	const char *name;  /* STR, may be empty */
	const char *out;   /* STR FILE, not empty */
	const char *dir;   /* STR DIR, not empty */
	const char *tag;   /* STR TAG, not empty */
	int color;         /* ENUM */
	double timeout;    /* CUSTOM into a double */
	int level;         /* CUSTOM into an int */
};

static int parse_color(const char *s)
{
	return !strcmp(s, "red") ? 0 : !strcmp(s, "green") ? 1 : !strcmp(s, "blue") ? 2 : -1;
}

/* gpu-train's --timeout: 0 or at least a second, kept as a double */
static int parse_timeout(const char *opt, const char *s, void *field, gk_err *err)
{
	double v;
	if (gk_parse_double(s, 0, 1e9, &v, opt, err) < 0)
		return -1;
	if (v > 0 && v < 1)
		return gk_errf(err, "%s '%s': 0 or at least 1 second", opt, s);
	memcpy(field, &v, sizeof(v));
	return 0;
}

static int parse_level(const char *opt, const char *s, void *field, gk_err *err)
{
	int v = !strcmp(s, "low") ? 1 : !strcmp(s, "high") ? 2 : -1;
	if (v < 0)
		return gk_errf(err, "%s '%s': low or high", opt, s);
	memcpy(field, &v, sizeof(v));
	return 0;
}

#define A(m) GK_OPTF(struct args, m)
#define FIRST GK_OPT_FIRST_TOOL

/* Row indices matter: a row without a short name has val FIRST + index. */
static const gk_optdef table[] = {
	/* 0 */ {.kind = GK_OPTK_SECTION, .help = "flags"},
	/* 1 */ {.kind = GK_OPTK_FLAG, .name = "loud", .short_name = 'L', A(loud), .set = 1,
		 .help = "say more"},
	/* 2 */ {.kind = GK_OPTK_FLAG, .name = "fast", A(mode), .set = 3, .help = "mode 3"},
	/* 3 */ {.kind = GK_OPTK_FLAG, .name = "slow", A(mode), .set = 0, .help = "mode 0"},
	/* 4 */ {.kind = GK_OPTK_SECTION, .help = "numbers"},
	/* 5 */ {.kind = GK_OPTK_INT, .name = "batch", .short_name = 'b', .arg = "B", A(batch),
		 .imin = 1, .imax = 1024, .def = "4", .help = "sequences"},
	/* 6 */ {.kind = GK_OPTK_INT, .name = "eot", .arg = "ID", A(eot), .imin = -1,
		 .imax = INT32_MAX, .def = "-1", .help = "end of text"},
	/* 7 */ {.kind = GK_OPTK_INT, .name = "offset", .arg = "N", A(offset), .imin = INT64_MIN,
		 .imax = INT64_MAX, .def = "-9000000000", .help = "an int64_t"},
	/* 8 */ {.kind = GK_OPTK_INT, .name = "seed", .arg = "N", A(seed), .imin = 0,
		 .imax = INT64_MAX, .def = "1337", .help = "a uint64_t"},
	/* 9 */ {.kind = GK_OPTK_UINT, .name = "count", .arg = "N", A(count), .max = 1000,
		 .def = "10", .help = "up to 1000"},
	/* 10 */ {.kind = GK_OPTK_UINT, .name = "big", .arg = "N", A(big), .max = 2e19,
		  .def = "18446744073709551615", .help = "any uint64_t"},
	/* 11 */ {.kind = GK_OPTK_NUM, .name = "beta", .arg = "X", A(beta), .min = 0, .max = 1,
		  .def = "0.9", .help = "a float"},
	/* 12 */ {.kind = GK_OPTK_NUM, .name = "lr", .short_name = 'r', .arg = "LR", A(lr),
		  .min = 1e-9, .max = 10, .def = "6e-4", .help = "a double"},
	/* 13 */ {.kind = GK_OPTK_SIZE, .name = "mem", .arg = "SIZE", A(mem), .def = "1GiB",
		  .help = "a size"},
	/* 14 */ {.kind = GK_OPTK_SIZE, .name = "bucket", .arg = "SIZE", A(bucket), .def = "25M",
		  .help = "a size_t"},
	/* 15 */ {.kind = GK_OPTK_SECTION, .help = "strings"},
	/* 16 */ {.kind = GK_OPTK_STR, .name = "name", .arg = "S", A(name), .def = "",
		  .help = "may be empty"},
	/* 17 */ {.kind = GK_OPTK_STR, .name = "out", .short_name = 'o', .arg = "FILE", A(out),
		  .set = 1, .help = "a file"},
	/* 18 */ {.kind = GK_OPTK_STR, .name = "dir", .arg = "DIR", A(dir), .set = 1,
		  .help = "a directory"},
	/* 19 */ {.kind = GK_OPTK_STR, .name = "tag", .arg = "TAG", A(tag), .set = 1,
		  .help = "a value"},
	/* 20 */ {.kind = GK_OPTK_ENUM, .name = "color", .short_name = 'c', .arg = "C", A(color),
		  .parse = parse_color, .names = "red, green or blue", .def = "green",
		  .help = "an enum"},
	/* 21 */ {.kind = GK_OPTK_CUSTOM, .name = "timeout", .arg = "S", A(timeout),
		  .custom = parse_timeout, .def = "600", .help = "custom double"},
	/* 22 */ {.kind = GK_OPTK_CUSTOM, .name = "level", .arg = "L", A(level),
		  .custom = parse_level, .help = "custom int"},
	{.kind = GK_OPTK_END},
};

/* ---- getopt_long's list ---------------------------------------------------------- */

static void longopts(void)
{
	/* by hand from the table above: the common options, then each row
	 * but the sections, val its short name or FIRST + its index */
	static const struct {
		const char *name;
		int has_arg, val;
	} want[] = {
		{"help", no_argument, 'h'},       {"version", no_argument, GK_OPT_VERSION},
		{"quiet", no_argument, 'q'},      {"verbose", no_argument, 'v'},
		{"loud", no_argument, 'L'},       {"fast", no_argument, FIRST + 2},
		{"slow", no_argument, FIRST + 3}, {"batch", required_argument, 'b'},
		{"eot", required_argument, FIRST + 6},
		{"offset", required_argument, FIRST + 7},
		{"seed", required_argument, FIRST + 8},
		{"count", required_argument, FIRST + 9},
		{"big", required_argument, FIRST + 10},
		{"beta", required_argument, FIRST + 11}, {"lr", required_argument, 'r'},
		{"mem", required_argument, FIRST + 13},
		{"bucket", required_argument, FIRST + 14},
		{"name", required_argument, FIRST + 16}, {"out", required_argument, 'o'},
		{"dir", required_argument, FIRST + 18},
		{"tag", required_argument, FIRST + 19}, {"color", required_argument, 'c'},
		{"timeout", required_argument, FIRST + 21},
		{"level", required_argument, FIRST + 22},
	};
	size_t nw = GK_ARRAY_SIZE(want);
	for (int json = 0; json <= 1; json++) {
		char *shorts = NULL;
		struct option *o = gk_optable_longopts(table, json, &shorts);
		if (!ok(o && shorts, "longopts (json %d)", json))
			return;
		size_t n = 0;
		while (o[n].name)
			n++;
		is_int(n, nw + json, json ? "  4 common, --json, 20 rows" : "  4 common, 20 rows");
		int good = 1;
		for (size_t i = 0, k = 0; i < n && k < nw; i++) {
			if (json && i == 4) {
				good &= !strcmp(o[i].name, "json") && o[i].has_arg == no_argument &&
					o[i].flag == NULL && o[i].val == GK_OPT_JSON;
				continue;
			}
			int g = !strcmp(o[i].name, want[k].name) && o[i].has_arg == want[k].has_arg &&
				o[i].flag == NULL && o[i].val == want[k].val;
			if (!g)
				diag("entry %zu: {%s, %d, %#x}, want {%s, %d, %#x}", i, o[i].name,
				     o[i].has_arg, o[i].val, want[k].name, want[k].has_arg, want[k].val);
			good &= g;
			k++;
		}
		ok(good, "  names, has_arg and val of every entry, in order%s",
		   json ? ", --json fifth" : "");
		ok(o[n].has_arg == 0 && o[n].flag == NULL && o[n].val == 0,
		   "  ends with a zeroed entry");
		is_str(shorts, "hqvLb:r:o:c:", "  shorts: hqv, then each short name, ':' with an argument");
		free(o);
		free(shorts);
	}

	/* gk_optable_find: every val back to its row */
	int good = 1;
	for (size_t i = 4; i < nw; i++) {
		const gk_optdef *d = gk_optable_find(table, want[i].val);
		good &= d && !strcmp(d->name, want[i].name);
	}
	ok(good, "find: each entry's val gives the row of its name");
	ok(!gk_optable_find(table, 'h') && !gk_optable_find(table, 'q') &&
	   !gk_optable_find(table, GK_OPT_VERSION) && !gk_optable_find(table, GK_OPT_JSON) &&
	   !gk_optable_find(table, '?') && !gk_optable_find(table, 'x') &&
	   !gk_optable_find(table, 0) && !gk_optable_find(table, FIRST + 23) &&
	   !gk_optable_find(table, -1),
	   "find: the common options, unknown letters and vals past the table: NULL");
}

/* ---- parsing through getopt_long ------------------------------------------------- */

/*
 * getopt_long over argv with the table's list, each table option set
 * into *a; returns the first error (-1, err set), or 0. *other gets the
 * last value getopt returned that is not a row (h, v, '?', ...), or 0;
 * *rest the index of the first operand.
 */
static int parse(int json, int argc, char **argv, struct args *a, int *other, int *rest,
		 gk_err *err)
{
	char *shorts;
	struct option *lo = gk_optable_longopts(table, json, &shorts);
	int c, rc = 0;
	*other = 0;
	optind = 0; /* glibc: start again, with a new argv */
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		const gk_optdef *d = gk_optable_find(table, c);
		if (!d)
			*other = c;
		else if (rc == 0 && gk_optable_set(d, a, optarg, err) < 0)
			rc = -1;
	}
	*rest = optind;
	free(lo);
	free(shorts);
	return rc;
}

/* an argv array v, "prog" first and NULL last, and its argc */
#define ARGV(v, ...) char *v[] = {"prog", __VA_ARGS__, NULL}
#define ARGC(v) ((int)GK_ARRAY_SIZE(v) - 1)

static void fill(struct args *a, int byte)
{
	memset(a, byte, sizeof(*a));
}

static void getopt_parsing(void)
{
	struct args a;
	gk_err err = {0};
	int other, rest;
	ARGV(v, "--loud", "-b", "8", "--eot=-1", "--offset", "-9223372036854775808",
			"--seed", "9223372036854775807", "--count", "1000", "--big",
			"18446744073709551615", "--beta", "0.1", "-r", "3e-4", "--mem", "1.5K",
			"--bucket=25M", "--name", "", "-o", "out.bin", "--dir", "/tmp/x", "--tag",
			"t", "--color", "blue", "--timeout", "2.5", "--level", "high", "--fast",
			"in1", "in2");
	char *name_arg = v[21];
	fill(&a, 0);
	int rc = parse(0, ARGC(v), v, &a, &other, &rest, &err);
	if (!ok(rc == 0 && other == 0, "a command line of every kind parses"))
		diag("%s (other %d)", err.msg, other);
	/* what each argument means, by hand */
	ok(a.loud == 1 && a.mode == 3, "  flags: --loud 1, --fast 3");
	ok(a.batch == 8 && a.eot == -1, "  -b 8 into an int, --eot=-1 into an int32_t");
	ok(a.offset == INT64_MIN && a.seed == (uint64_t)INT64_MAX,
	   "  int64_t minimum, uint64_t field at INT64_MAX");
	ok(a.count == 1000 && a.big == UINT64_MAX, "  UINT at its max, and at 2^64 - 1");
	ok(a.beta == 0.1f && a.lr == 3e-4, "  float 0.1f, double 3e-4");
	ok(a.mem == 1536 && a.bucket == (size_t)25 << 20, "  sizes 1.5K and 25M");
	ok(a.name == name_arg && a.name[0] == '\0',
	   "  an empty string where allowed: the argument itself");
	ok(a.out && !strcmp(a.out, "out.bin") && !strcmp(a.dir, "/tmp/x") && !strcmp(a.tag, "t"),
	   "  strings");
	ok(a.color == 2 && a.timeout == 2.5 && a.level == 2, "  enum blue 2, custom 2.5 and high 2");
	ok(rest == ARGC(v) - 2 && !strcmp(v[rest], "in1") && !strcmp(v[rest + 1], "in2"),
	   "  operands left from optind");

	/* a second run over the same struct: short options bundled, a later
	 * flag of the same field winning, an operand before options */
	ARGV(w, "in0", "-Lb16", "-ofile", "-cred", "--slow", "--eot", "7");
	fill(&a, 0);
	rc = parse(0, ARGC(w), w, &a, &other, &rest, &err);
	ok(rc == 0 && a.loud == 1 && a.batch == 16 && !strcmp(a.out, "file") && a.color == 0 &&
		   a.mode == 0 && a.eot == 7 && rest == ARGC(w) - 1 && !strcmp(w[rest], "in0"),
	   "optind reset: -Lb16 -ofile -cred bundled, --slow, operand permuted last");
	ARGV(w2, "--slow", "--fast");
	fill(&a, 0);
	rc = parse(0, ARGC(w2), w2, &a, &other, &rest, &err);
	ok(rc == 0 && a.mode == 3, "two flags of one field: the last wins");

	/* what is not a row reaches the caller */
	ARGV(h, "-h");
	parse(0, ARGC(h), h, &a, &other, &rest, &err);
	is_int(other, 'h', "-h is the caller's");
	ARGV(ver, "--version");
	parse(0, ARGC(ver), ver, &a, &other, &rest, &err);
	is_int(other, GK_OPT_VERSION, "--version is the caller's");
	ARGV(j, "--json");
	parse(0, ARGC(j), j, &a, &other, &rest, &err);
	is_int(other, '?', "--json without json: unknown");
	ARGV(j1, "--json");
	parse(1, ARGC(j1), j1, &a, &other, &rest, &err);
	is_int(other, GK_OPT_JSON, "--json with json");
	ARGV(u, "--nope");
	parse(0, ARGC(u), u, &a, &other, &rest, &err);
	is_int(other, '?', "an unknown option: '?'");
	ARGV(m, "--batch");
	parse(0, ARGC(m), m, &a, &other, &rest, &err);
	is_int(other, '?', "a missing argument: '?'");
	ARGV(fa, "--loud=1");
	parse(0, ARGC(fa), fa, &a, &other, &rest, &err);
	is_int(other, '?', "an argument to a flag: '?'");
}

/* ---- ranges and messages ---------------------------------------------------------- */

static const gk_optdef *row(const char *name)
{
	for (size_t i = 0; table[i].kind != GK_OPTK_END; i++)
		if (table[i].name && !strcmp(table[i].name, name))
			return &table[i];
	return NULL;
}

static void bad(const char *name, const char *s, const char *want)
{
	struct args a, keep;
	gk_err err = {0};
	fill(&a, 0x5a);
	keep = a;
	int rc = gk_optable_set(row(name), &a, s, &err);
	ok(rc == -1, "--%s '%s' refused", name, s);
	is_str(err.msg, want, "  message");
	ok(memcmp(&a, &keep, sizeof(a)) == 0, "  the struct is left as it was");
}

static void good(const char *name, const char *s)
{
	struct args a;
	gk_err err = {0};
	fill(&a, 0);
	int rc = gk_optable_set(row(name), &a, s, &err);
	if (!ok(rc == 0, "--%s '%s' taken", name, s))
		diag("%s", err.msg);
}

static void ranges(void)
{
	good("batch", "1");
	good("batch", "1024");
	bad("batch", "0", "--batch '0': out of range [1, 1024]");
	bad("batch", "1025", "--batch '1025': out of range [1, 1024]");
	bad("batch", "12x", "--batch '12x': not an integer");
	bad("batch", "", "--batch '': not an integer");
	bad("batch", "1.0", "--batch '1.0': not an integer");
	good("eot", "2147483647");
	bad("eot", "2147483648", "--eot '2147483648': out of range [-1, 2147483647]");
	bad("eot", "-2", "--eot '-2': out of range [-1, 2147483647]");
	bad("offset", "9223372036854775808",
	    "--offset '9223372036854775808': out of range [-9223372036854775808, 9223372036854775807]");
	bad("seed", "-1", "--seed '-1': out of range [0, 9223372036854775807]");
	bad("count", "1001", "--count '1001': out of range [0, 1000]");
	bad("count", "-1", "--count '-1': not a non-negative integer");
	bad("count", "", "--count '': not a non-negative integer");
	bad("big", "18446744073709551616",
	    "--big '18446744073709551616': out of range [0, 18446744073709551615]");
	good("beta", "0");
	good("beta", "1");
	bad("beta", "1.5", "--beta '1.5': out of range [0, 1]");
	bad("beta", "-0.1", "--beta '-0.1': out of range [0, 1]");
	bad("beta", "nan", "--beta 'nan': out of range [0, 1]");
	bad("beta", "abc", "--beta 'abc': not a number");
	bad("lr", "", "--lr '': not a number");
	bad("lr", "0", "--lr '0': out of range [1e-09, 10]");
	bad("lr", "1e-3x", "--lr '1e-3x': not a number");
	bad("mem", "", "--mem '': not a size (e.g. 4096, 256M, 1GiB, 5GB)");
	bad("mem", "12Q",
	    "--mem '12Q': unknown unit 'Q' (B, K M G T P, KiB MiB GiB TiB PiB, KB MB GB TB PB)");
	bad("out", "", "--out '': an empty file name");
	bad("dir", "", "--dir '': an empty directory name");
	bad("tag", "", "--tag '': an empty value");
	good("name", "");
	bad("color", "purple", "--color 'purple': red, green or blue");
	bad("color", "", "--color '': red, green or blue");
	bad("timeout", "0.5", "--timeout '0.5': 0 or at least 1 second");
	bad("timeout", "x", "--timeout 'x': not a number");
	bad("level", "mid", "--level 'mid': low or high");

	/* the first error of a real command line is the one reported */
	struct args a;
	gk_err err = {0};
	int other, rest;
	ARGV(v, "-b", "8", "--beta", "2", "--batch", "0");
	fill(&a, 0);
	ok(parse(0, ARGC(v), v, &a, &other, &rest, &err) == -1 &&
		   !strcmp(err.msg, "--beta '2': out of range [0, 1]") && a.batch == 8,
	   "through getopt: the error names the option and its argument (%s)", err.msg);
}

/* ---- defaults ---------------------------------------------------------------------- */

static void defaults(void)
{
	struct args d, p;
	gk_err err = {0};
	fill(&d, 0x77);
	int rc = gk_optable_defaults(table, &d, &err);
	if (!ok(rc == 0, "defaults of the table apply"))
		diag("%s", err.msg);
	/* by hand from the defs */
	ok(d.batch == 4 && d.eot == -1 && d.offset == -9000000000LL && d.seed == 1337 &&
		   d.count == 10 && d.big == UINT64_MAX && d.beta == 0.9f && d.lr == 6e-4 &&
		   d.mem == 1ULL << 30 && d.bucket == (size_t)25 << 20 && d.name &&
		   d.name[0] == 0 && d.color == 1 && d.timeout == 600,
	   "  each default's value");
	/* rows without a default are not touched */
	struct args untouched;
	fill(&untouched, 0x77);
	ok(d.loud == untouched.loud && d.mode == untouched.mode &&
		   !memcmp(&d.out, &untouched.out, sizeof(d.out)) &&
		   !memcmp(&d.dir, &untouched.dir, sizeof(d.dir)) &&
		   !memcmp(&d.tag, &untouched.tag, sizeof(d.tag)) && d.level == untouched.level,
	   "  rows without one are left alone");

	/* the same strings as a command line: "--NAME DEF" for each */
	static char names[32][40];
	char *argv[64];
	int argc = 0, k = 0;
	argv[argc++] = "prog";
	for (size_t i = 0; table[i].kind != GK_OPTK_END; i++) {
		if (!table[i].def)
			continue;
		snprintf(names[k], sizeof(names[k]), "--%s", table[i].name);
		argv[argc++] = names[k++];
		argv[argc++] = (char *)table[i].def;
	}
	argv[argc] = NULL;
	int other;
	int rest;
	fill(&p, 0x77);
	rc = parse(0, argc, argv, &p, &other, &rest, &err);
	ok(rc == 0 && rest == argc, "the defaults as a command line parse (%d words)", argc);
	ok(memcmp(&d, &p, sizeof(d)) == 0, "  into the same bytes as gk_optable_defaults");
	int same = 1;
	for (size_t i = 0; table[i].kind != GK_OPTK_END; i++)
		if (table[i].def) /* the others' strings are 0x77 bytes, no pointers */
			same &= gk_optable_value(&table[i], &d) == gk_optable_value(&table[i], &p);
	ok(same, "  and the same value on every row with a default");

	/* a default that does not parse: an error naming the option */
	gk_optdef t2[] = {
		table[5], table[20], table[11], {.kind = GK_OPTK_END},
	};
	t2[1].def = "purple";
	gk_err_clear(&err);
	fill(&d, 0);
	is_int(gk_optable_defaults(t2, &d, &err), -1, "a bad enum default fails");
	is_str(err.msg, "the default of --color: --color 'purple': red, green or blue",
	       "  naming the option");
	ok(d.batch == 4 && d.beta == 0.0f, "  rows before it applied, rows after it not");
	t2[1].def = NULL;
	t2[0].def = "0";
	is_int(gk_optable_defaults(t2, &d, &err), -1, "a default out of range fails");
	is_str(err.msg, "the default of --batch: --batch '0': out of range [1, 1024]",
	       "  naming the option");
	gk_optdef t3[] = {table[17], {.kind = GK_OPTK_END}};
	t3[0].def = "";
	is_int(gk_optable_defaults(t3, &d, &err), -1, "an empty default of a non-empty string fails");
	is_str(err.msg, "the default of --out: --out '': an empty file name", "  naming the option");
	gk_optdef none[] = {{.kind = GK_OPTK_END}};
	is_int(gk_optable_defaults(none, &d, &err), 0, "an empty table: nothing to do");
}

/* ---- the values ranks compare ------------------------------------------------------- */

static uint64_t dbits(double x)
{
	uint64_t b;
	memcpy(&b, &x, sizeof(b));
	return b;
}

static void values(void)
{
	/* per row: an argument, another spelling of the same setting, and
	 * another setting (for flags: NULL, the field cleared instead) */
	static const struct {
		const char *name, *a, *same, *other;
	} v[] = {
		{"loud", NULL, NULL, NULL},
		{"fast", NULL, NULL, "slow"},
		{"batch", "8", "08", "9"},
		{"eot", "-1", "-01", "0"},
		{"offset", "-9000000000", "-9000000000", "9000000000"},
		{"seed", "18", "+18", "19"},
		{"count", "7", "007", "8"},
		{"big", "18446744073709551615", "18446744073709551615", "0"},
		/* 0.1000000001 rounds to the same float as 0.1 */
		{"beta", "0.1", "0.1000000001", "0.2"},
		{"lr", "6e-4", "0.0006", "6.01e-4"},
		{"mem", "1K", "1024", "1025"},
		{"bucket", "25M", "26214400", "24M"},
		{"name", "abc", "abc", "abd"},
		{"out", "x", "x", "y"},
		{"dir", "d", "d", "e"},
		{"tag", NULL, NULL, NULL}, /* NULL in both; changed to "" below */
		{"color", "red", "red", "blue"},
		{"timeout", "2.5", "2.50", "3"},
		{"level", "high", "high", "low"},
	};
	struct args a, b;
	gk_err err = {0};
	/* other bytes differ: a row's value reads only its own field */
	fill(&a, 0x00);
	fill(&b, 0xa5);
	int rc = 0;
	char copy[GK_ARRAY_SIZE(v)][32];
	for (size_t i = 0; i < GK_ARRAY_SIZE(v); i++) {
		const gk_optdef *d = row(v[i].name);
		if (!strcmp(v[i].name, "tag"))
			continue;
		/* the second from another buffer: strings compare by content */
		snprintf(copy[i], sizeof(copy[i]), "%s", v[i].same ? v[i].same : "");
		rc |= gk_optable_set(d, &a, v[i].a, &err);
		rc |= gk_optable_set(d, &b, d->kind == GK_OPTK_FLAG ? NULL : copy[i], &err);
	}
	a.tag = b.tag = NULL;
	if (!ok(rc == 0, "values: the settings parse"))
		diag("%s", err.msg);
	int eq = 1;
	for (size_t i = 0; table[i].kind != GK_OPTK_END; i++) {
		if (table[i].kind == GK_OPTK_SECTION)
			continue;
		int e = gk_optable_value(&table[i], &a) == gk_optable_value(&table[i], &b);
		if (!e)
			diag("--%s: %#llx and %#llx", table[i].name,
			     (unsigned long long)gk_optable_value(&table[i], &a),
			     (unsigned long long)gk_optable_value(&table[i], &b));
		eq &= e;
	}
	ok(eq, "equal settings, other bytes around them: equal values on every row");

	/* each row changed alone: its value differs, the others' do not */
	int diff = 1;
	for (size_t i = 0; i < GK_ARRAY_SIZE(v); i++) {
		struct args c = b;
		const gk_optdef *d = row(v[i].name);
		if (!strcmp(v[i].name, "loud"))
			c.loud = 0;
		else if (!strcmp(v[i].name, "tag"))
			c.tag = "";
		else if (gk_optable_set(d->kind == GK_OPTK_FLAG ? row(v[i].other) : d, &c,
					v[i].other, &err) < 0)
			diff = 0;
		for (size_t k = 0; table[k].kind != GK_OPTK_END; k++) {
			if (table[k].kind == GK_OPTK_SECTION)
				continue;
			int changed = gk_optable_value(&table[k], &b) != gk_optable_value(&table[k], &c);
			int want = table[k].off == d->off;
			if (changed != want)
				diag("--%s changed: --%s's value %s", v[i].name, table[k].name,
				     changed ? "changed" : "did not");
			diff &= changed == want;
		}
	}
	ok(diff, "each setting changed alone changes its row's value and no other");

	/* the documented encodings, by hand */
	const gk_optdef *tag = row("tag"), *beta = row("beta"), *eot = row("eot");
	a.tag = NULL;
	b.tag = "";
	ok(gk_optable_value(tag, &a) == 0 && gk_optable_value(tag, &b) != 0,
	   "a string: NULL is 0, the empty string is not");
	a.beta = 0.1f;
	ok(gk_optable_value(beta, &a) == dbits((double)0.1f) &&
		   gk_optable_value(beta, &a) != dbits(0.1),
	   "a float's value: the bits of its value as a double");
	a.lr = 0.5;
	a.beta = 0.5f;
	ok(gk_optable_value(beta, &a) == gk_optable_value(row("lr"), &a),
	   "a float and a double of one value: one value");
	a.eot = -1;
	ok(gk_optable_value(eot, &a) == (uint64_t)-1 && gk_optable_value(row("level"), &b) == 2,
	   "integers as they are (int32_t -1 sign-extended; custom int)");
	a.timeout = 2.5;
	ok(gk_optable_value(row("timeout"), &a) == dbits(2.5), "a custom double: its bits");
}

/* ---- the summary of --help ------------------------------------------------------- */

struct small {
	int batch, loud;
	double lr;
	const char *out, *a, *b, *c;
};
#define S(m) GK_OPTF(struct small, m)

static void usage(void)
{
	static const gk_optdef t[] = {
		{.kind = GK_OPTK_SECTION, .help = "model"},
		{.kind = GK_OPTK_INT, .name = "batch", .short_name = 'b', .arg = "B", S(batch),
		 .imin = 1, .imax = 9, .def = "4", .help = "sequences per step"},
		{.kind = GK_OPTK_FLAG, .name = "loud", S(loud), .set = 1, .help = "say more"},
		{.kind = GK_OPTK_NUM, .name = "lr", .arg = "LR", S(lr), .min = 0, .max = 1,
		 .def = "6e-4", .help = "peak rate\nthen cosine"},
		{.kind = GK_OPTK_SECTION, .help = "output"},
		{.kind = GK_OPTK_STR, .name = "out", .short_name = 'o', .arg = "FILE", S(out),
		 .help = "where to write"},
		/* left parts of 20 and 21 columns: the first still aligned, the
		 * second two spaces on */
		{.kind = GK_OPTK_STR, .name = "eighteen-chars-xyz", S(a), .help = "w20"},
		{.kind = GK_OPTK_STR, .name = "nineteen-chars-wxyz", S(b), .help = "w21"},
		{.kind = GK_OPTK_STR, .name = "a-rather-long-option-name", .arg = "FILE", S(c),
		 .help = "long\nsecond line"},
		{.kind = GK_OPTK_END},
	};
	/* by hand: help at column 25 (24 characters before it) */
	const char *want =
		"usage: prog [options] FILE...\n"
		"model:\n"
		"  -b, --batch B         sequences per step (default 4)\n"
		"  --loud                say more\n"
		"  --lr LR               peak rate\n"
		"                        then cosine (default 6e-4)\n"
		"output:\n"
		"  -o, --out FILE        where to write\n"
		"  --eighteen-chars-xyz  w20\n"
		"  --nineteen-chars-wxyz  w21\n"
		"  --a-rather-long-option-name FILE  long\n"
		"                        second line\n"
		"see prog(1)\n";
	char *got = gk_optable_usage(t, "usage: prog [options] FILE...\n", "see prog(1)\n");
	if (!ok(got && !strcmp(got, want), "the whole usage of a small table, as written by hand"))
		diag("got:\n%s", got ? got : "(null)");
	/* the same rule, line by line: where the help starts */
	int col = 1;
	for (const char *l = got; l && *l;) {
		const char *nl = strchr(l, '\n');
		size_t len = nl ? (size_t)(nl - l) : strlen(l);
		if (len > 24 && !strncmp(l, "  ", 2) && l[2] != ' ') {
			/* an option line: its help after the first run of 2+ spaces past the name */
			const char *h = strstr(l + 2, "  ");
			while (h && *h == ' ')
				h++;
			size_t at = (size_t)(h - l);
			size_t left = (size_t)(strstr(l + 2, "  ") - l) - 2;
			col &= left <= 20 ? at == 24 : at == left + 4;
		} else if (len > 24 && !strncmp(l, "                        ", 24)) {
			col &= l[24] != ' ';
		}
		l = nl ? nl + 1 : l + len;
	}
	ok(col, "every help at index 24, or two spaces after a left part over 20");
	free(got);

	char *e = gk_optable_usage((gk_optdef[]){{.kind = GK_OPTK_END}}, "S\n", "T\n");
	is_str(e, "S\nT\n", "an empty table: synopsis and tail");
	free(e);
}

/* ---- optional arguments, rows left out of the summary, excluding rows ------------- */

/* data-pack's shape: modes that exclude each other, --lz4[=LEVEL], tar's -z */
struct modes {
	int mode, level, tarz;
	const char *get, *out;
};
#define M(m) GK_OPTF(struct modes, m)

static const gk_optdef mtable[] = {
	/* 0 */ {.kind = GK_OPTK_FLAG, .name = "create", .short_name = 'c', M(mode), .set = 'c',
		 .excl = 1, .help = "create"},
	/* 1 */ {.kind = GK_OPTK_FLAG, .name = "list", .short_name = 't', M(mode), .set = 't',
		 .excl = 1, .help = "list"},
	/* 2 */ {.kind = GK_OPTK_STR, .name = "get", .short_name = 'g', .arg = "KEY", M(get),
		 .excl = 1, .help = "one sample"},
	/* 3 */ {.kind = GK_OPTK_FLAG, .name = "verify", M(mode), .set = 'V', .excl = 1,
		 .help = "verify"},
	/* 4 */ {.kind = GK_OPTK_SECTION, .help = "create"},
	/* 5 */ {.kind = GK_OPTK_STR, .name = "output", .short_name = 'o', .arg = "PATTERN",
		 M(out), .help = "shard names"},
	/* 6 */ {.kind = GK_OPTK_INT, .name = "lz4", .short_name = 'L', .arg = "LEVEL", M(level),
		 .imin = 0, .imax = 12, .optional = 1, .def = "0", .help = "compress"},
	/* 7 */ {.kind = GK_OPTK_FLAG, .name = "gzip", .short_name = 'z', M(tarz), .set = 'z'},
	{.kind = GK_OPTK_END},
};

/*
 * gk_optable_parse in a child (it exits on a usage error): 0 with *m
 * and args (8 rows) filled, or the exit status with the first line of
 * stderr in line.
 */
static void exit_now(int status, void *arg)
{
	(void)arg;
	fflush(NULL);
	_exit(status);
}

static int run_parse(int argc, char **argv, struct modes *m, const char **args, char *line,
		     size_t n)
{
	int pfd[2], ofd[2];
	line[0] = '\0';
	if (pipe(pfd) < 0 || pipe(ofd) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		gk_cli cli;
		close(pfd[0]);
		close(ofd[0]);
		dup2(pfd[1], STDERR_FILENO);
		/* a usage error exits holding what parsing allocated, as the tools
		 * do (their CLI tests turn LeakSanitizer's check off): exit as
		 * asked before that check runs, under SAN=1 */
		on_exit(exit_now, NULL);
		gk_cli_init(&cli, "prog", "usage: prog\n");
		optind = 0;
		memset(m, 0, sizeof(*m));
		gk_optable_parse(&cli, mtable, 0, m, argc, argv, args);
		/* pointers into argv (and "") mean the same in the parent, a copy */
		if (write(ofd[1], m, sizeof(*m)) < 0 || write(ofd[1], args, 8 * sizeof(*args)) < 0)
			_exit(9);
		_exit(0);
	}
	close(pfd[1]);
	close(ofd[1]);
	FILE *f = fdopen(pfd[0], "r");
	if (!f || !fgets(line, (int)n, f))
		line[0] = '\0';
	line[strcspn(line, "\n")] = '\0';
	struct modes got;
	const char *a8[8];
	ssize_t r1 = read(ofd[0], &got, sizeof(got));
	ssize_t r2 = read(ofd[0], a8, sizeof(a8));
	int st;
	waitpid(pid, &st, 0);
	if (f)
		fclose(f);
	close(ofd[0]);
	if (!WIFEXITED(st))
		return -1;
	if (WEXITSTATUS(st) != 0)
		return WEXITSTATUS(st);
	if (r1 != (ssize_t)sizeof(got) || r2 != (ssize_t)sizeof(a8))
		return -1;
	*m = got;
	memcpy(args, a8, sizeof(a8));
	return 0;
}

static void optional_excl(void)
{
	/* getopt's list: optional_argument for --lz4, "::" after its letter */
	char *shorts = NULL;
	struct option *o = gk_optable_longopts(mtable, 0, &shorts);
	int lz4 = -1, gz = -1;
	for (int i = 0; o && o[i].name; i++) {
		if (!strcmp(o[i].name, "lz4"))
			lz4 = o[i].has_arg;
		if (!strcmp(o[i].name, "gzip"))
			gz = o[i].has_arg;
	}
	ok(lz4 == optional_argument && gz == no_argument,
	   "longopts: --lz4 optional_argument, --gzip no_argument");
	is_str(shorts, "hqvctg:o:L::z", "shorts: '::' after an optional argument's letter");
	free(o);
	free(shorts);

	/* the summary: --lz4[=LEVEL]; --gzip (no help) not shown */
	char *u = gk_optable_usage(mtable, "usage: prog\n", "");
	const char *want = "usage: prog\n"
			   "  -c, --create          create\n"
			   "  -t, --list            list\n"
			   "  -g, --get KEY         one sample\n"
			   "  --verify              verify\n"
			   "create:\n"
			   "  -o, --output PATTERN  shard names\n"
			   "  -L, --lz4[=LEVEL]     compress (default 0)\n";
	if (!ok(u && !strcmp(u, want), "usage: [=ARG] for an optional argument, rows without help left out"))
		diag("got:\n%s", u ? u : "(null)");
	free(u);

	/* gk_optable_set: no argument leaves the field, one is parsed and checked */
	struct modes m = {.level = 7};
	gk_err err = {0};
	ok(gk_optable_set(&mtable[6], &m, NULL, &err) == 0 && m.level == 7,
	   "set: an optional argument left out keeps the field");
	ok(gk_optable_set(&mtable[6], &m, "12", &err) == 0 && m.level == 12, "set: --lz4=12");
	ok(gk_optable_set(&mtable[6], &m, "13", &err) < 0 && !strncmp(err.msg, "--lz4 '13'", 10),
	   "set: --lz4=13 out of range, named");

	/* gk_optable_excluded over args as gk_optable_parse fills them */
	const char *given[9] = {0};
	ok(!gk_optable_excluded(mtable, given, &mtable[0]), "excluded: nothing given, nothing");
	given[0] = "";
	ok(!gk_optable_excluded(mtable, given, &mtable[0]), "excluded: the same row again is fine");
	ok(gk_optable_excluded(mtable, given, &mtable[3]) == &mtable[0],
	   "excluded: --verify after -c names -c");
	ok(gk_optable_excluded(mtable, given, &mtable[2]) == &mtable[0],
	   "excluded: a row with an argument is in its group too");
	ok(!gk_optable_excluded(mtable, given, &mtable[5]) &&
	   !gk_optable_excluded(mtable, given, &mtable[6]),
	   "excluded: rows outside the group (excl 0) exclude nothing");

	char b[128];
	is_str(gk_optable_group(mtable, 1, ", ", b, sizeof(b)), "-c, -t, -g, --verify",
	       "group: short names where there are, in table order");
	is_str(gk_optable_group(mtable, 1, " or ", b, sizeof(b)), "-c, -t, -g or --verify",
	       "group: the last separator");
	is_str(gk_optable_group(mtable, 2, " or ", b, sizeof(b)), "", "group: an empty group");
	is_str(gk_optable_group(mtable, 1, ", ", b, 8), "-c, -t,", "group: truncated to the buffer");

	/* gk_optable_parse itself, in a child */
	char line[512];
	const char *args[9];
	memset(args, 0, sizeof(args));
	ARGV(v1, "-c", "--lz4", "-o", "x.tar", "dir");
	int rc = run_parse(ARGC(v1), v1, &m, args, line, sizeof(line));
	ok(rc == 0 && m.mode == 'c' && m.level == 0 && args[6] && !args[6][0] && m.out &&
	   !strcmp(m.out, "x.tar"), "parse: -c --lz4 -o x.tar: a bare --lz4 is given, its level the default");
	memset(args, 0, sizeof(args));
	ARGV(v2, "-c", "--lz4=9", "-L3", "-c", "dir");
	rc = run_parse(ARGC(v2), v2, &m, args, line, sizeof(line));
	ok(rc == 0 && m.mode == 'c' && m.level == 3, "parse: --lz4=9 then -L3; -c twice is one mode");
	memset(args, 0, sizeof(args));
	ARGV(v3, "--lz4", "9", "-c");
	rc = run_parse(ARGC(v3), v3, &m, args, line, sizeof(line));
	ok(rc == 0 && m.level == 0 && args[6] && !args[6][0],
	   "parse: --lz4 9 (detached) leaves 9 an operand, as getopt does");
	memset(args, 0, sizeof(args));
	ARGV(v4, "-c", "-o", "x", "--verify");
	rc = run_parse(ARGC(v4), v4, &m, args, line, sizeof(line));
	is_int(rc, 2, "parse: -c then --verify: a usage error");
	is_str(line, "prog: only one of -c, -t, -g, --verify", "  the message names the group");
	memset(args, 0, sizeof(args));
	ARGV(v5, "-g", "k", "-t");
	rc = run_parse(ARGC(v5), v5, &m, args, line, sizeof(line));
	ok(rc == 2 && !strcmp(line, "prog: only one of -c, -t, -g, --verify"),
	   "parse: -g KEY then -t: the same");
	memset(args, 0, sizeof(args));
	ARGV(v6, "--lz4=x");
	rc = run_parse(ARGC(v6), v6, &m, args, line, sizeof(line));
	ok(rc == 2 && !strncmp(line, "prog: --lz4 'x'", 15), "parse: --lz4=x: the row's message");
	memset(args, 0, sizeof(args));
	ARGV(v7, "-cz");
	rc = run_parse(ARGC(v7), v7, &m, args, line, sizeof(line));
	ok(rc == 0 && m.tarz == 'z' && m.mode == 'c',
	   "parse: a row without help still parses (-cz)");
}

/* ---- the nearest name to an unknown option ---------------------------------------- */

/* A row of a name only: gk_optable_suggest reads nothing else. */
#define N(nm) {.kind = GK_OPTK_FLAG, .name = nm}

/* Names of gpu-train's, mem-estimate's and allreduce-bench's tables. */
static const gk_optdef train_names[] = {
	N("model"), N("config"), N("layers"), N("hidden"), N("heads"), N("vocab"),
	N("positions"), N("init-from"), N("seed"), N("data"), N("val-data"), N("shuffle"),
	N("eot"), N("batch"), N("seq"), N("grad-accum"), N("recompute"), N("threads"),
	N("device"), N("precision"), N("steps"), N("until"), N("lr"), N("min-lr"),
	N("warmup"), N("schedule"), N("clip"), N("beta1"), N("beta2"), N("eps"),
	N("weight-decay"), N("zero"), N("compress"), N("bucket"), N("timeout"),
	N("ckpt-dir"), N("ckpt-every"), N("resume"), N("eval-every"), N("eval-batches"),
	N("eval-only"), N("sample"), N("top-k"), N("metrics"),
	{.kind = GK_OPTK_END},
};
static const gk_optdef estimate_names[] = {
	N("model"), N("layers"), N("hidden"), N("heads"), N("kv-heads"), N("ffn"), N("vocab"),
	N("positions"), N("precision"), N("zero"), N("micro-batch"), N("batch"), N("seq"),
	N("grad-accum"), N("recompute"), N("dp"), N("tp"), N("pp"), N("gpus-per-node"),
	N("global-batch"), N("fit"), N("gpu"),
	{.kind = GK_OPTK_END},
};
static const gk_optdef bench_names[] = {
	N("minbytes"), N("maxbytes"), N("stepfactor"), N("stepbytes"), N("iters"),
	N("warmup_iters"), N("check"), N("blocking"), N("average"), N("datatype"), N("op"),
	N("root"), N("collective"), N("backend"), N("algo"), N("timeout"), N("csv"),
	{.kind = GK_OPTK_END},
};

static void suggest(void)
{
	static const struct {
		const gk_optdef *t;
		const char *given, *want; /* want: the names, space-separated; "" none */
	} cases[] = {
		/* 1: _ for -, and case */
		{train_names, "--grad_accum", "grad-accum"},
		{train_names, "--Weight_Decay=0.1", "weight-decay"},
		{bench_names, "--warmup-iters", "warmup_iters"},
		/* 2: an abbreviation of several, the common options among them */
		{train_names, "--eval", "eval-every eval-batches eval-only"},
		{train_names, "--ver", "version verbose"},
		/* 4: a name as whole words of it, or its start */
		{train_names, "--batch_size", "batch"},
		{train_names, "--lr-rate", "lr"},
		{train_names, "--num-layers", "layers"},
		{train_names, "--max_steps", "steps"},
		{train_names, "--seqlen", "seq"},
		{estimate_names, "--micro_batch_size", "micro-batch"},
		{estimate_names, "--batch-size", "batch"},
		{train_names, "--lr-warmup-iters", "warmup"},
		/* 3: other tools' names, only where the table has the option */
		{train_names, "--learning_rate", "lr"},
		{train_names, "--n_embd", "hidden"},
		{train_names, "--n-head", "heads"},
		{train_names, "--max-position-embeddings", "positions"},
		{train_names, "--train-iters", "steps"},
		{train_names, "--gradient_accumulation_steps", "grad-accum"},
		{train_names, "--save", "ckpt-dir"},
		{estimate_names, "--tensor-model-parallel-size", "tp"},
		{estimate_names, "--learning-rate", ""},
		/* 5: spelling */
		{train_names, "--lyers", "layers"},
		{train_names, "--warmpu", "warmup"},
		{train_names, "--stpes", "steps"},
		{train_names, "--sead", "seed"},
		{bench_names, "--maxbyte", "maxbytes"},
		{bench_names, "--datatyp", "datatype"},
		{bench_names, "--rot", "root"},
		{train_names, "--seeq", "seed seq"},
		/* nothing near */
		{train_names, "--xyz", ""},
		{train_names, "--qq", ""},
		{train_names, "--", ""},
		{bench_names, "--nthreads", ""},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(cases); i++) {
		const char *got[8];
		int n = gk_optable_suggest(cases[i].t, cases[i].given, got, 8);
		char buf[256] = "";
		for (int k = 0; k < n; k++)
			snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", k ? " " : "",
				 got[k]);
		is_str(buf, cases[i].want, cases[i].given);
	}
	const char *one[1];
	is_int(gk_optable_suggest(train_names, "--eval", one, 1), 1,
	       "at most max names (--eval, max 1)");
	is_str(one[0], "eval-every", "  the first in the table");
}

int main(void)
{
	longopts();
	getopt_parsing();
	ranges();
	defaults();
	values();
	usage();
	optional_excl();
	suggest();
	return done_testing();
}
