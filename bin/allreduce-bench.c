/*
 * allreduce-bench - nccl-tests-style sweep of a collective over lib/comm.
 *
 * The table, its header and the summary lines are nccl-tests' own
 * (src/util.cu writeResultHeader, writeBenchmarkLine*, writeResultFooter),
 * so scripts that read all_reduce_perf output read ours.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/core.h"

static const char synopsis[] =
	"usage: allreduce-bench [-b minbytes] [-e maxbytes] [-f factor | -i stepbytes]\n"
	"                       [-n iters] [-w warmup] [-c check] [-d dtype|all]\n"
	"                       [-o op|all] [-r root] [-z 0|1] [-a 0|1|2|3]\n"
	"                       [--backend NAME] [--algo NAME|all]\n"
	"                       [--compress bf16|f16|int8] [--collective NAME]\n"
	"                       [--segment SIZE] [--timeout SECONDS] [--json | --csv]\n"
	"                       [--metrics FILE] [--trace-dir DIR]\n";

/* the options every tool has (GK_CLI_LONGOPTS), at the end of "output" */
static const char common[] =
	"  --json                one JSON document: the configuration and every row\n"
	"  -q, --quiet           accepted, as by every gpukit tool\n"
	"  -v, --verbose         accepted, as by every gpukit tool\n"
	"  -h, --help            this help\n"
	"  --version             the version\n";

/* -i's size, and whether it was given: it then replaces -f whatever the order */
typedef struct step {
	uint64_t bytes;
	int given;
} step;

/*
 * nccl-tests' options (src/common.cu) that drive what one rank per GPU
 * over lib/comm does not have: the values that mean what we do anyway are
 * accepted, any other is refused with the reason (a user who pastes an
 * all_reduce_perf command line learns what differs, not just "invalid").
 */
static const struct {
	const char *name;
	int64_t lo, hi;     /* the values accepted, with no effect; none when lo > hi */
	const char *why;
} nccl_only[] = {
	{"nthreads", 1, 1, "one thread per rank here: start a rank per GPU (mpirun -np N)"},
	{"ngpus", 1, 1, "one GPU per rank here: start a rank per GPU (mpirun -np N)"},
	{"agg_iters", 1, 1, "lib/comm launches one collective at a time, never a group of them;"
			    " -n sets the iterations"},
	{"run_cycles", 1, 1, "one sweep per run here: run the command again"},
	{"parallel_init", 0, 1, ""},
	{"stream_null", 0, 0, "each communicator has a stream of its own"},
	{"cudagraph", 0, 0, "lib/comm's collectives are not captured in CUDA graphs"},
	{"report_cputime", 0, 0, "the times are the host's clock around synchronised iterations"},
	{"report_timestamps", 0, 0, "no timestamps are printed; --json has the results"},
	{"local_register", 0, 0, "lib/comm registers no buffers with NCCL"},
	{"output_file", 1, 0, "--json prints allreduce-bench's own JSON on standard output"
			      " (--json >FILE); its shape is not nccl-tests'"},
	{"cta_policy", 1, 0, "lib/comm sets no NCCL CTA policy"},
	{"device_implementation", 0, 0, "only NCCL's own implementation runs here"},
	{"device_cta_count", 1, 0, "only NCCL's own implementation runs here"},
	{"memory", 0, 0, "no memory report here: mem-estimate, or the tool's RSS"},
	{"unalign", 0, 0, "buffers are always aligned here"},
	{"per_iter_timing", 0, 0, "one time per size here, over the -n iterations"},
	{"per_iter_skip", 0, 0, "one time per size here, over the -n iterations"},
};

/* What the command line asks for. */
typedef struct args {
	gk_comm_bench_opts o; /* from gk_comm_bench_defaults, then the flags */
	gk_comm_config cfg;   /* --backend --segment --timeout */
	step step;
	int nccl_only;        /* the rows of nccl_only[] write here, and nothing reads it */
	int csv;
	const char *metrics;
} args;

static gk_cli cli;

/*
 * The custom rows. -d, -o and --algo take a name or "all", which sweeps
 * them all instead (their field is the whole of gk_comm_bench_opts);
 * -i is remembered as given; --timeout's 0 means off.
 */
static int parse_dtype(const char *opt, const char *s, void *field, gk_err *err)
{
	gk_comm_bench_opts *o = field;
	if (strcmp(s, "all") == 0) {
		o->all_types = 1;
		return 0;
	}
	gk_dtype dt = gk_dtype_parse(s);
	if (!gk_comm_dtype_ok(dt))
		return gk_errf(err, "%s '%s': not one of float double half bfloat16 int32 all", opt,
			       s);
	o->dt = dt;
	return 0;
}

static int parse_op(const char *opt, const char *s, void *field, gk_err *err)
{
	gk_comm_bench_opts *o = field;
	if (strcmp(s, "all") == 0) {
		o->all_ops = 1;
		return 0;
	}
	int v = gk_comm_op_parse(s);
	if (v < 0)
		return gk_errf(err, "%s '%s': not one of sum prod max min avg all", opt, s);
	o->op = v;
	return 0;
}

static int parse_algo(const char *opt, const char *s, void *field, gk_err *err)
{
	gk_comm_bench_opts *o = field;
	if (strcmp(s, "all") == 0) {
		o->all_algos = 1;
		return 0;
	}
	int v = gk_comm_algo_parse(s);
	if (v < 0)
		return gk_errf(err, "%s '%s': not one of auto native ring rd rabenseifner all", opt,
			       s);
	o->algo = v;
	return 0;
}

static int parse_step(const char *opt, const char *s, void *field, gk_err *err)
{
	step *st = field;
	if (gk_parse_size(s, &st->bytes, opt, err) < 0)
		return -1;
	st->given = 1;
	return 0;
}

/* a row of nccl_only[]: a number, then accepted or refused with its reason */
static int parse_nccl_only(const char *opt, const char *s, void *field, gk_err *err)
{
	(void)field;
	for (size_t i = 0; i < GK_ARRAY_SIZE(nccl_only); i++) {
		if (strcmp(opt + 2, nccl_only[i].name) != 0)
			continue;
		int64_t v = 0;
		if (nccl_only[i].lo <= nccl_only[i].hi &&
		    gk_parse_i64(s, INT32_MIN, INT32_MAX, &v, opt, err) < 0)
			return -1;
		if (v < nccl_only[i].lo || v > nccl_only[i].hi)
			return gk_errf(err, "%s %s: not supported: %s", opt, s, nccl_only[i].why);
		return 0;
	}
	return gk_errf(err, "%s: not an option", opt);
}

static int parse_timeout(const char *opt, const char *s, void *field, gk_err *err)
{
	double v;
	if (gk_parse_double(s, 0, 1e9, &v, opt, err) < 0)
		return -1;
	v = v > 0 ? v : -1; /* the library reads 0 as its default and < 0 as off */
	memcpy(field, &v, sizeof(v));
	return 0;
}

#define SECTION(title) {.kind = GK_OPTK_SECTION, .help = title}
#define INT(nm, sh, a, f, lo, hi, h) \
	{.kind = GK_OPTK_INT, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), \
	 .imin = lo, .imax = hi, .help = h}
#define SIZE(nm, sh, a, f, h) \
	{.kind = GK_OPTK_SIZE, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), .help = h}
#define ENUM(nm, a, f, fn, nms, h) \
	{.kind = GK_OPTK_ENUM, .name = nm, .arg = a, GK_OPTF(args, f), .parse = fn, \
	 .names = nms, .help = h}
#define CUSTOM(nm, sh, a, f, fn, h) \
	{.kind = GK_OPTK_CUSTOM, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), \
	 .custom = fn, .help = h}
#define NCCL_ONLY(nm, sh, a, h) CUSTOM(nm, sh, a, nccl_only, parse_nccl_only, h)
#define STRINGIFY(x) #x
#define XSTR(x) STRINGIFY(x)

/*
 * allreduce-bench's options, stated once: getopt's list (nccl-tests'
 * letters and long names), the summary of --help and the parser of every
 * argument. The defaults are nccl-tests', set by gk_comm_bench_defaults.
 * allreduce-bench(1) documents each row (t6000 checks both ways).
 */
static const gk_optdef options[] = {
	SECTION("sizes"),
	SIZE("minbytes", 'b', "SIZE", o.minbytes, "smallest message in bytes (8)"),
	SIZE("maxbytes", 'e', "SIZE", o.maxbytes, "largest message in bytes (32M)"),
	INT("stepfactor", 'f', "N", o.factor, 1, 1 << 20, "grow sizes by this factor (2)"),
	CUSTOM("stepbytes", 'i', "SIZE", step, parse_step, "grow sizes by this many bytes instead"),
	SECTION("runs"),
	INT("iters", 'n', "N", o.iters, 1, 1 << 24, "timed iterations (20)"),
	INT("warmup_iters", 'w', "N", o.warmup, 0, 1 << 24, "warmup iterations (5)"),
	INT("check", 'c', "N", o.check, 0, 1000, "checked runs per size, 0 none (1)"),
	INT("blocking", 'z', "0|1", o.blocking, 0, 1, "wait and barrier after each iteration (0)"),
	INT("average", 'a', "0-3", o.average, 0, 3,
	    "time over ranks: 0 rank 0, 1 mean, 2 min, 3 max (1)"),
	SECTION("what is reduced"),
	CUSTOM("datatype", 'd', "TYPE", o, parse_dtype,
	       "float double half bfloat16 int32, or all (float)"),
	CUSTOM("op", 'o', "OP", o, parse_op, "sum prod max min avg, or all (sum)"),
	INT("root", 'r', "N", o.root, 0, 1 << 24, "root rank of broadcast and reduce (0)"),
	ENUM("collective", "NAME", o.coll, gk_comm_coll_parse,
	     "not one of allreduce reducescatter allgather broadcast reduce",
	     "allreduce reducescatter allgather broadcast reduce"),
	ENUM("compress", "KIND", o.compress, gk_comm_compress_parse,
	     "not one of none bf16 f16 int8",
	     "none bf16 f16 int8: partial sums on the wire (none)"),
	SECTION("communication"),
	ENUM("backend", "NAME", cfg.backend, gk_comm_backend_parse, "not one of auto self mpi nccl",
	     "auto self mpi nccl (auto)"),
	CUSTOM("algo", 0, "NAME", o, parse_algo,
	       "auto native ring rd rabenseifner, or all (auto)"),
	SIZE("segment", 0, "SIZE", cfg.segment, "the ring's pipeline segment (1M)"),
	CUSTOM("timeout", 'T', "SECONDS", cfg.timeout, parse_timeout,
	       "fail a call with no progress this long, 0 never ("
	       XSTR(GK_COMM_DEFAULT_TIMEOUT) ")"),
	{.kind = GK_OPTK_STR, .name = "trace-dir", .arg = "DIR", GK_OPTF(args, cfg.trace_dir),
	 .set = 1, .help = "dump the flight recorder here on a hang, a failure or SIGUSR2"},
	SECTION("nccl-tests' other options (only the values that mean what runs here)"),
	NCCL_ONLY("nthreads", 't', "N", "only 1: one thread per rank"),
	NCCL_ONLY("ngpus", 'g', "N", "only 1: one GPU per rank"),
	NCCL_ONLY("agg_iters", 'm', "N", "only 1: one collective per iteration"),
	NCCL_ONLY("run_cycles", 'N', "N", "only 1: one sweep"),
	NCCL_ONLY("parallel_init", 'p', "N", "0 or 1: one thread, nothing to start in parallel"),
	NCCL_ONLY("stream_null", 'y', "N", "only 0: the communicator's own stream"),
	NCCL_ONLY("cudagraph", 'G', "N", "only 0: no CUDA graphs"),
	NCCL_ONLY("report_cputime", 'C', "N", "only 0"),
	NCCL_ONLY("report_timestamps", 'S', "N", "only 0"),
	NCCL_ONLY("output_file", 'J', "FILE", "never: --json prints this tool's JSON instead"),
	NCCL_ONLY("local_register", 'R', "N", "only 0: no registered buffers"),
	NCCL_ONLY("cta_policy", 'x', "N", "never: NCCL's default CTA policy"),
	NCCL_ONLY("device_implementation", 'D', "N", "only 0: NCCL's own implementation"),
	NCCL_ONLY("device_cta_count", 'V', "N", "never: NCCL's own implementation only"),
	NCCL_ONLY("memory", 'M', "N", "only 0: no memory report"),
	NCCL_ONLY("unalign", 'u', "N", "only 0: aligned buffers"),
	NCCL_ONLY("per_iter_timing", 'I', "N", "only 0: one time per size"),
	NCCL_ONLY("per_iter_skip", 'K', "N", "only 0: one time per size"),
	SECTION("output"),
	{.kind = GK_OPTK_FLAG, .name = "csv", GK_OPTF(args, csv), .set = 1,
	 .help = "one line per size and algorithm, with a header line"},
	{.kind = GK_OPTK_STR, .name = "metrics", .arg = "FILE", GK_OPTF(args, metrics), .set = 1,
	 .help = "write the results in Prometheus' text format at the end"},
	{.kind = GK_OPTK_END},
};

/* Parse the command line into a and refuse what no backend can run. */
static void parse_args(int argc, char **argv, args *a)
{
	gk_err err = {0};
	memset(a, 0, sizeof(*a));
	gk_comm_bench_defaults(&a->o);
	a->cfg.device = -1;
	optind = gk_optable_parse(&cli, options, GK_OPTABLE_SHORT_NAMES, a, argc, argv, NULL);
	if (optind < argc)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
	if (cli.json && a->csv)
		gk_cli_usage_error(&cli, "--json and --csv exclude each other");
	if (a->step.given) {
		a->o.stepbytes = a->step.bytes;
		a->o.factor = 1;
	}
	if (gk_comm_bench_validate(&a->o, a->cfg.backend, &err) < 0)
		gk_cli_usage_error(&cli, "%s", err.msg);
}

/* nccl-tests' getFloatStr: as many decimals as fit the width. */
static char *fnum(double v, int width, char *s, size_t n)
{
	int power = 0;
	for (double x = 1; v >= x; x *= 10)
		power++;
	if (power < width - 2)
		snprintf(s, n, "%*.2f", width, v);
	else if (power < width - 1)
		snprintf(s, n, "%*.1f", width, v);
	else if (power < width + 1)
		snprintf(s, n, "%*.0f", width, v);
	else
		snprintf(s, n, "%*.1e", width, v);
	return s;
}

static void body(const gk_comm_bench_result *r)
{
	char t[32], a[32], b[32];
	printf("  %7s  %6s  %6s", fnum(r->time_us, 7, t, sizeof t),
	       fnum(r->algbw, 6, a, sizeof a), fnum(r->busbw, 6, b, sizeof b));
	if (r->wrong < 0)
		printf("    N/A");
	else
		printf("  %6g", (double)r->wrong);
}

static json_t *jbody(const gk_comm_bench_result *r)
{
	return json_pack("{s:f,s:f,s:f,s:o}", "time", r->time_us, "alg_bw", r->algbw,
			 "bus_bw", r->busbw, "nwrong",
			 r->wrong < 0 ? json_null() : json_integer(r->wrong));
}

/* What the table printer needs between callbacks. */
typedef struct out {
	const gk_cli *cli;
	const gk_comm_bench_opts *o;
	int me, csv;
	double mcbw;
	json_t *jres, *javg;
	gk_metrics *metrics;  /* --metrics, on rank 0 */
	gk_err *err;
} out;

static int on_begin(void *ctx, gk_comm_algo algo)
{
	out *u = ctx;
	if (!u->me || u->cli->json || u->csv)
		return 0;
	const char *z = u->o->compress ? "    max_abs    max_rel" : "";
	const char *zu = u->o->compress ? "      (abs)      (rel)" : "";
	printf("# Algorithm: %s\n#\n", gk_comm_algo_name(algo));
	printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
	       "", "", "", "", "");
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n",
	       "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
	       "#wrong", "time", "algbw", "busbw", "#wrong", z);
	printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n",
	       "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
	       "(us)", "(GB/s)", "(GB/s)", "", zu);
	return 0;
}

static int on_row(void *ctx, const gk_comm_bench_row *w)
{
	out *u = ctx;
	if (!u->me)
		return 0;
	const gk_comm_bench_result *r = w->r;
	if (u->metrics && gk_comm_bench_metrics_row(u->metrics, w, u->err) < 0)
		return -1;
	double mabs = r[0].max_abs > r[1].max_abs ? r[0].max_abs : r[1].max_abs;
	double mrel = r[0].max_rel > r[1].max_rel ? r[0].max_rel : r[1].max_rel;
	if (u->cli->json) {
		json_t *row = json_pack("{s:s,s:I,s:I,s:s,s:s,s:i,s:o,s:o}",
			"algo", gk_comm_algo_name(w->algo), "size", (json_int_t)w->bytes,
			"count", (json_int_t)w->count, "type", gk_comm_bench_type_name(w->dt),
			"redop", gk_comm_op_name(w->op), "root", w->root,
			"out_of_place", jbody(&r[0]), "in_place", jbody(&r[1]));
		if (u->o->compress) {
			json_object_set_new(row, "max_abs_err", json_real(mabs));
			json_object_set_new(row, "max_rel_err", json_real(mrel));
		}
		json_array_append_new(u->jres, row);
	} else if (u->csv) {
		printf("%s,%zu,%zu,%s,%s,%d", gk_comm_algo_name(w->algo), w->bytes,
		       w->count, gk_comm_bench_type_name(w->dt), gk_comm_op_name(w->op), w->root);
		for (int ip = 0; ip < 2; ip++)
			printf(",%.3f,%.6g,%.6g,%lld", r[ip].time_us, r[ip].algbw,
			       r[ip].busbw, (long long)r[ip].wrong);
		if (u->o->compress)
			printf(",%.6g,%.6g", mabs, mrel);
		printf("\n");
	} else {
		printf("%12zu  %12zu  %8s  %6s  %6d", w->bytes, w->count,
		       gk_comm_bench_type_name(w->dt), gk_comm_op_name(w->op), w->root);
		body(&r[0]);
		body(&r[1]);
		if (u->o->compress)
			printf("  %9.3g  %9.3g", mabs, mrel);
		printf("\n");
	}
	return 0;
}

static int on_end(void *ctx, const gk_comm_bench_summary *s)
{
	out *u = ctx;
	if (u->metrics && gk_comm_bench_metrics_summary(u->metrics, s, u->err) < 0)
		return -1;
	if (!u->me || u->csv)
		return 0;
	if (u->cli->json) {
		json_object_set_new(u->javg, gk_comm_algo_name(s->algo), json_real(s->avg_busbw));
		return 0;
	}
	printf("# %-20s : %lld %s\n", "Out of bounds values", (long long)s->wrong,
	       s->wrong ? "FAILED" : "OK");
	printf("# %-20s : %g \n", "Avg bus bandwidth", s->avg_busbw);
	if (u->mcbw > 0)
		printf("# %-20s : %.1f%% (largest size, out of place)\n",
		       "busbw / memcpy", 100 * s->last_busbw / u->mcbw);
	printf("#\n");
	return 0;
}

/*
 * Rank 0's first lines: the JSON document to fill (returned; NULL
 * otherwise), the CSV header, or nccl-tests' header.
 */
static json_t *header(const args *a, out *u, int n, const char *backend)
{
	const gk_comm_bench_opts *o = &a->o;
	if (!u->me)
		return NULL;
	if (cli.json) {
		json_t *jdoc = json_pack("{s:s,s:s,s:i,s:s,s:I,s:I,s:i,s:i,s:i,s:i}", "tool",
			"allreduce-bench", "collective", gk_comm_coll_name(o->coll), "world", n,
			"backend", backend, "minimum_bytes", (json_int_t)o->minbytes,
			"maximum_bytes", (json_int_t)o->maxbytes, "warmup_iters", o->warmup,
			"iterations", o->iters, "validation", o->check, "average", (int)o->average);
		json_object_set_new(jdoc, "compress", json_string(gk_comm_compress_name(o->compress)));
		json_object_set_new(jdoc, "memcpy_bw", u->mcbw > 0 ? json_real(u->mcbw) : json_null());
		json_object_set_new(jdoc, "results", u->jres = json_array());
		json_object_set_new(jdoc, "average_bus_bandwidth", u->javg = json_object());
		return jdoc;
	}
	if (a->csv) {
		printf("algo,size,count,type,redop,root,time_oop,algbw_oop,busbw_oop,wrong_oop,"
		       "time_ip,algbw_ip,busbw_ip,wrong_ip%s\n",
		       o->compress ? ",max_abs_err,max_rel_err" : "");
		return NULL;
	}
	printf("# allreduce-bench (gpukit) %s: %s, backend %s, %d rank%s%s%s\n", GK_VERSION,
	       gk_comm_coll_name(o->coll), backend, n, n == 1 ? "" : "s",
	       o->compress ? ", compress " : "",
	       o->compress ? gk_comm_compress_name(o->compress) : "");
	printf("# nThread 1 nGpus 1 minBytes %llu maxBytes %llu step: %llu(%s) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
	       (unsigned long long)o->minbytes, (unsigned long long)o->maxbytes,
	       (unsigned long long)(o->factor > 1 ? o->factor : o->stepbytes),
	       o->factor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check);
	if (o->blocking)
		printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
	int headers, library;
	if (strcmp(backend, "nccl") == 0 && gk_comm_nccl_versions(&headers, &library) == 0)
		printf("# nccl-headers=%d nccl-library=%d%s\n", headers, library,
		       library < headers ? " (the library is older than the headers gpukit was "
					   "built with)" : "");
	printf("#\n");
	return NULL;
}

/*
 * The sweep on an open communicator whose ranks agree: 0 or 1 (wrong
 * results, or a metrics file that could not be written), or -1 with the
 * failure in err, after which the caller aborts the job.
 */
static int sweep(gk_comm *comm, const args *a, gk_err *err)
{
	const gk_comm_bench_opts *o = &a->o;
	int me = gk_comm_rank(comm) == 0, n = gk_comm_world(comm);
	out u = {.cli = &cli, .o = o, .me = me, .csv = a->csv, .err = err};
	size_t mcbytes;
	if (gk_comm_bench_memcpy(comm, o->maxbytes, &u.mcbw, &mcbytes, err) < 0)
		return -1;
	if (a->metrics && me && (gk_metrics_check(a->metrics, err) < 0 ||
				 gk_comm_bench_metrics_new(&u.metrics, comm, o, err) < 0)) {
		gk_metrics_free(u.metrics);
		return -1;
	}
	const char *backend = gk_comm_backend_name(gk_comm_backend_of(comm));
	json_t *jdoc = header(a, &u, n, backend);
	int64_t wrong;
	gk_comm_bench_sink sink = {&u, on_begin, on_row, on_end};
	if (gk_comm_bench_sweep(comm, o, &sink, &wrong, err) < 0) {
		json_decref(jdoc);
		gk_metrics_free(u.metrics);
		return -1;
	}
	/*
	 * A file that cannot be written fails the run, after the other ranks
	 * have been let go: they are done.
	 */
	int metrics_failed = 0;
	if (u.metrics && (gk_comm_bench_metrics_run(u.metrics, n, u.mcbw, wrong,
						    (double)time(NULL), err) < 0 ||
			  gk_metrics_write(u.metrics, a->metrics, err) < 0)) {
		gk_cli_fail(&cli, err);
		metrics_failed = 1;
	}
	gk_metrics_free(u.metrics);
	if (jdoc) {
		json_object_set_new(jdoc, "out_of_bounds", json_integer(wrong));
		int rc = gk_json_dump(stdout, jdoc, 1, err);
		json_decref(jdoc);
		if (rc < 0)
			return -1;
	} else if (me && !a->csv) {
		if (u.mcbw > 0)
			printf("# %-20s : %.2f GB/s (host, %zu MiB, median of 9)\n",
			       "memcpy bandwidth", u.mcbw, mcbytes >> 20);
		printf("# Collective test concluded: %s\n", gk_comm_coll_name(o->coll));
	}
	/* every rank knows the total; rank 0 says it while the others wait in close */
	if (wrong && me)
		gk_cli_failf(&cli, "%lld wrong result%s", (long long)wrong, wrong == 1 ? "" : "s");
	/* nccl: a failed teardown is a failed run */
	if (gk_comm_finalize(comm, err) < 0)
		return -1;
	return wrong || metrics_failed ? 1 : 0;
}

/*
 * --trace-dir: SIGUSR2 dumps the flight recorder and the run goes on;
 * SIGTERM and SIGINT (a launcher ending the job once a rank died) dump
 * it, then end the process as they would have. Both async-signal-safe.
 */
static void on_trace_signal(int sig)
{
	gk_comm_trace_dump_all(sig == SIGUSR2 ? "SIGUSR2" : sig == SIGTERM ? "SIGTERM" : "SIGINT");
	if (sig == SIGUSR2)
		return;
	gk_cleanup_now();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int catch_trace_signals(const char *dir, gk_err *err)
{
	if (gk_comm_trace_dir_check(dir, err) < 0)
		return gk_err_prefix(err, "--trace-dir");
	/* lib/core's temp-file cleanup first, ours over it (we call it) */
	gk_cleanup_forget(gk_cleanup_on_signal("/nonexistent"));
	static const int sigs[] = {SIGUSR2, SIGTERM, SIGINT};
	for (size_t i = 0; i < GK_ARRAY_SIZE(sigs); i++) {
		struct sigaction sa = {.sa_handler = on_trace_signal, .sa_flags = SA_RESTART};
		struct sigaction prev;
		sigaction(sigs[i], NULL, &prev);
		if (sigs[i] != SIGUSR2 && prev.sa_handler == SIG_IGN)
			continue; /* nohup's, a shell's background job's */
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
	return 0;
}

/* Open the communicator the options ask for, check them, sweep: the exit status. */
static int bench(const args *a)
{
	gk_err err = {0};
	/*
	 * Refuse sizes that cannot fit before touching anything; the ranks
	 * of a node see the same figures, so its first rank speaks for it.
	 */
	gk_rank_info ri;
	if (gk_rank_discover(&ri, &err) < 0)
		return gk_cli_fail(&cli, &err);
	if (gk_comm_bench_fits(&a->o, ri.local_world, &err) < 0) {
		if (ri.local_rank == 0)
			gk_cli_fail(&cli, &err);
		return gk_cli_defer(&cli, 1);
	}
	if (a->cfg.trace_dir && catch_trace_signals(a->cfg.trace_dir, &err) < 0)
		return gk_cli_fail(&cli, &err);
	gk_comm *comm;
	if (gk_comm_open(&comm, &a->cfg, &err) < 0)
		return gk_cli_fail(&cli, &err);
	/* Options every rank must share: on a difference all ranks stop, rank 0 says why. */
	if (gk_comm_bench_agree(comm, &a->o, &err) < 0) {
		if (gk_comm_rank(comm) == 0)
			gk_cli_fail(&cli, &err);
		gk_comm_close(comm);
		return 2;
	}
	if (a->o.root >= gk_comm_world(comm)) {
		int n = gk_comm_world(comm);
		gk_comm_close(comm);
		gk_cli_usage_error(&cli, "-r %d: not a rank of a world of %d", a->o.root, n);
	}
	int status = sweep(comm, a, &err);
	if (status < 0) {
		/* a stall is said once for the job, by the rank the watchdog chose */
		int rep = gk_comm_stall_reporter();
		gk_err why;
		if (rep < 0 || rep == gk_comm_world_rank(comm, -1))
			gk_cli_fail(&cli, &err);
		gk_cli_flush(&cli);
		/* ... unless that rank died before it could */
		if (gk_comm_await_reporter(comm, &why) < 0)
			gk_cli_failf(&cli, "%s; %s", err.msg, why.msg);
		gk_comm_abort(comm, 1);
		status = 1;
	}
	gk_comm_close(comm);
	return status;
}

int main(int argc, char **argv)
{
	args a;
	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "allreduce-bench", usage ? usage : synopsis);
	parse_args(argc, argv, &a);
	return gk_cli_finish(&cli, bench(&a));
}
