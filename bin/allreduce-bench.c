/*
 * allreduce-bench - nccl-tests-style sweep of a collective over lib/comm.
 *
 * The table, its header and the summary lines are nccl-tests' own
 * (src/util.cu writeResultHeader, writeBenchmarkLine*, writeResultFooter),
 * so scripts that read all_reduce_perf output read ours.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/core.h"

static const char usage[] =
	"usage: allreduce-bench [-b minbytes] [-e maxbytes] [-f factor | -i stepbytes]\n"
	"                       [-n iters] [-w warmup] [-c check] [-d dtype|all]\n"
	"                       [-o op|all] [-r root] [-z 0|1] [-a 0|1|2|3]\n"
	"                       [--backend NAME] [--algo NAME|all]\n"
	"                       [--compress bf16|f16|int8] [--collective NAME]\n"
	"                       [--segment SIZE] [--timeout SECONDS] [--json | --csv]\n"
	"                       [--metrics FILE]\n"
	"  -b, -e      smallest and largest message in bytes (8, 32M)\n"
	"  -f, -i      grow sizes by a factor (2) or by a step in bytes\n"
	"  -n, -w      timed and warmup iterations (20, 5)\n"
	"  -c          check results: 0 or the number of checked runs (1)\n"
	"  -d, -o      float double half bfloat16 int32 | sum prod max min avg\n"
	"  -z          wait and barrier after each iteration (0)\n"
	"  -a          time over ranks: 0 rank 0, 1 mean, 2 min, 3 max (1)\n"
	"  --backend   auto self mpi nccl      --algo  auto native ring rd rabenseifner all\n"
	"  --collective allreduce reducescatter allgather broadcast reduce\n"
	"  --timeout   fail a call with no progress for this long, 0 off (600)\n"
	"  --metrics FILE  write the results in Prometheus' text format at the end\n";

enum { OPT_BACKEND = GK_OPT_FIRST_TOOL, OPT_ALGO, OPT_COMPRESS, OPT_COLL,
       OPT_CSV, OPT_SEGMENT, OPT_METRICS, OPT_TIMEOUT };

static const struct option longopts[] = {
	GK_CLI_LONGOPTS,
	GK_CLI_LONGOPT_JSON,
	{"minbytes", required_argument, NULL, 'b'},
	{"maxbytes", required_argument, NULL, 'e'},
	{"stepfactor", required_argument, NULL, 'f'},
	{"stepbytes", required_argument, NULL, 'i'},
	{"iters", required_argument, NULL, 'n'},
	{"warmup_iters", required_argument, NULL, 'w'},
	{"check", required_argument, NULL, 'c'},
	{"datatype", required_argument, NULL, 'd'},
	{"op", required_argument, NULL, 'o'},
	{"root", required_argument, NULL, 'r'},
	{"blocking", required_argument, NULL, 'z'},
	{"average", required_argument, NULL, 'a'},
	{"backend", required_argument, NULL, OPT_BACKEND},
	{"algo", required_argument, NULL, OPT_ALGO},
	{"compress", required_argument, NULL, OPT_COMPRESS},
	{"collective", required_argument, NULL, OPT_COLL},
	{"csv", no_argument, NULL, OPT_CSV},
	{"segment", required_argument, NULL, OPT_SEGMENT},
	{"metrics", required_argument, NULL, OPT_METRICS},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{NULL, 0, NULL, 0},
};


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

/* Name lookups that exit 2 with the accepted spellings. */
#define PARSE(var, fn, what, names)                                          \
	do {                                                                 \
		int v_ = fn(optarg);                                         \
		if (v_ < 0)                                                  \
			gk_cli_usage_error(&cli, "%s '%s': not one of %s", what, \
					   optarg, names);                   \
		var = v_;                                                    \
	} while (0)

int main(int argc, char **argv)
{
	gk_cli cli;
	gk_err err = {0};
	gk_comm_bench_opts o;
	gk_comm_config cfg = {.device = -1};
	int stepped = 0, csv = 0, c;
	const char *metrics = NULL;
	gk_comm_bench_defaults(&o);
	gk_cli_init(&cli, "allreduce-bench", usage);

	while ((c = getopt_long(argc, argv, "hqvb:e:f:i:n:w:c:d:o:r:z:a:", longopts,
				NULL)) != -1) {
		if (gk_cli_common(&cli, c))
			continue;
		switch (c) {
		case 'b': o.minbytes = gk_cli_size(&cli, "-b", optarg); break;
		case 'e': o.maxbytes = gk_cli_size(&cli, "-e", optarg); break;
		case 'f': o.factor = (uint64_t)gk_cli_i64(&cli, "-f", optarg, 1, 1 << 20); break;
		case 'i':
			o.stepbytes = gk_cli_size(&cli, "-i", optarg);
			stepped = 1;
			break;
		case 'n': o.iters = (int)gk_cli_i64(&cli, "-n", optarg, 1, 1 << 24); break;
		case 'w': o.warmup = (int)gk_cli_i64(&cli, "-w", optarg, 0, 1 << 24); break;
		case 'c': o.check = (int)gk_cli_i64(&cli, "-c", optarg, 0, 1000); break;
		case 'r': o.root = (int)gk_cli_i64(&cli, "-r", optarg, 0, 1 << 24); break;
		case 'z': o.blocking = (int)gk_cli_i64(&cli, "-z", optarg, 0, 1); break;
		case 'a': o.average = (gk_comm_bench_avg)gk_cli_i64(&cli, "-a", optarg, 0, 3); break;
		case 'd':
			if (strcmp(optarg, "all") == 0)
				o.all_types = 1;
			else if (!gk_comm_dtype_ok(o.dt = gk_dtype_parse(optarg)))
				gk_cli_usage_error(&cli, "-d '%s': not one of float double half bfloat16 int32 all", optarg);
			break;
		case 'o':
			if (strcmp(optarg, "all") == 0)
				o.all_ops = 1;
			else
				PARSE(o.op, gk_comm_op_parse, "-o", "sum prod max min avg all");
			break;
		case OPT_ALGO:
			if (strcmp(optarg, "all") == 0)
				o.all_algos = 1;
			else
				PARSE(o.algo, gk_comm_algo_parse, "--algo",
				      "auto native ring rd rabenseifner all");
			break;
		case OPT_BACKEND:
			PARSE(cfg.backend, gk_comm_backend_parse, "--backend", "auto self mpi nccl");
			break;
		case OPT_COMPRESS:
			PARSE(o.compress, gk_comm_compress_parse, "--compress", "none bf16 f16 int8");
			break;
		case OPT_COLL:
			PARSE(o.coll, gk_comm_coll_parse, "--collective",
			      "allreduce reducescatter allgather broadcast reduce");
			break;
		case OPT_CSV: csv = 1; break;
		case OPT_SEGMENT: cfg.segment = gk_cli_size(&cli, "--segment", optarg); break;
		case OPT_METRICS:
			if (!*optarg)
				gk_cli_usage_error(&cli, "--metrics '': an empty file name");
			metrics = optarg;
			break;
		case OPT_TIMEOUT: {
			double v;
			if (gk_parse_double(optarg, 0, 1e9, &v, "--timeout", &err) < 0)
				gk_cli_usage_error(&cli, "%s", err.msg);
			/* The library reads 0 as its default and < 0 as off. */
			cfg.timeout = v > 0 ? v : -1;
			break;
		}
		default: gk_cli_usage_error(&cli, "unexpected option");
		}
	}
	if (optind < argc)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
	if (cli.json && csv)
		gk_cli_usage_error(&cli, "--json and --csv exclude each other");
	if (stepped)
		o.factor = 1;
	if (gk_comm_bench_validate(&o, cfg.backend, &err) < 0)
		gk_cli_usage_error(&cli, "%s", err.msg);

	/*
	 * Refuse sizes that cannot fit before touching anything; the ranks
	 * of a node see the same figures, so its first rank speaks for it.
	 */
	gk_rank_info ri;
	if (gk_rank_discover(&ri, &err) < 0)
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	if (gk_comm_bench_fits(&o, ri.local_world, &err) < 0) {
		if (ri.local_rank == 0)
			gk_cli_fail(&cli, &err);
		return gk_cli_finish(&cli, gk_cli_defer(&cli, 1));
	}

	gk_comm *comm;
	if (gk_comm_open(&comm, &cfg, &err) < 0)
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	int me = gk_comm_rank(comm) == 0;
	/* Options every rank must share: on a difference all ranks stop, rank 0 says why. */
	if (gk_comm_bench_agree(comm, &o, &err) < 0) {
		if (me)
			gk_cli_fail(&cli, &err);
		gk_comm_close(comm);
		return gk_cli_finish(&cli, 2);
	}
	if (o.root >= gk_comm_world(comm)) {
		int n = gk_comm_world(comm);
		gk_comm_close(comm);
		gk_cli_usage_error(&cli, "-r %d: not a rank of a world of %d", o.root, n);
	}

	out u = {.cli = &cli, .o = &o, .me = me, .csv = csv, .err = &err};
	size_t mcbytes;
	if (gk_comm_bench_memcpy(comm, o.maxbytes, &u.mcbw, &mcbytes, &err) < 0)
		goto fail;
	if (metrics && me && (gk_metrics_check(metrics, &err) < 0 ||
			      gk_comm_bench_metrics_new(&u.metrics, comm, &o, &err) < 0))
		goto fail;
	int n = gk_comm_world(comm);
	const char *backend = gk_comm_backend_name(gk_comm_backend_of(comm));
	json_t *jdoc = NULL;
	if (me && cli.json) {
		jdoc = json_pack("{s:s,s:s,s:i,s:s,s:I,s:I,s:i,s:i,s:i,s:i}", "tool", "allreduce-bench",
				 "collective", gk_comm_coll_name(o.coll), "world", n,
				 "backend", backend, "minimum_bytes", (json_int_t)o.minbytes,
				 "maximum_bytes", (json_int_t)o.maxbytes, "warmup_iters", o.warmup,
				 "iterations", o.iters, "validation", o.check, "average", (int)o.average);
		json_object_set_new(jdoc, "compress", json_string(gk_comm_compress_name(o.compress)));
		json_object_set_new(jdoc, "memcpy_bw", u.mcbw > 0 ? json_real(u.mcbw) : json_null());
		json_object_set_new(jdoc, "results", u.jres = json_array());
		json_object_set_new(jdoc, "average_bus_bandwidth", u.javg = json_object());
	} else if (me && csv) {
		printf("algo,size,count,type,redop,root,time_oop,algbw_oop,busbw_oop,wrong_oop,"
		       "time_ip,algbw_ip,busbw_ip,wrong_ip%s\n",
		       o.compress ? ",max_abs_err,max_rel_err" : "");
	} else if (me) {
		printf("# allreduce-bench (gpukit) %s: %s, backend %s, %d rank%s%s%s\n", GK_VERSION,
		       gk_comm_coll_name(o.coll), backend, n, n == 1 ? "" : "s",
		       o.compress ? ", compress " : "",
		       o.compress ? gk_comm_compress_name(o.compress) : "");
		printf("# nThread 1 nGpus 1 minBytes %llu maxBytes %llu step: %llu(%s) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
		       (unsigned long long)o.minbytes, (unsigned long long)o.maxbytes,
		       (unsigned long long)(o.factor > 1 ? o.factor : o.stepbytes),
		       o.factor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check);
		if (o.blocking)
			printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
		printf("#\n");
	}

	int64_t wrong;
	gk_comm_bench_sink sink = {&u, on_begin, on_row, on_end};
	if (gk_comm_bench_sweep(comm, &o, &sink, &wrong, &err) < 0) {
		json_decref(jdoc);
		goto fail;
	}
	/*
	 * A file that cannot be written fails the run, after the other ranks
	 * have been let go: they are done.
	 */
	int metrics_failed = 0;
	if (u.metrics && (gk_comm_bench_metrics_run(u.metrics, n, u.mcbw, wrong,
						    (double)time(NULL), &err) < 0 ||
			  gk_metrics_write(u.metrics, metrics, &err) < 0)) {
		gk_cli_fail(&cli, &err);
		metrics_failed = 1;
	}
	gk_metrics_free(u.metrics);
	u.metrics = NULL;
	if (me && cli.json) {
		json_object_set_new(jdoc, "out_of_bounds", json_integer(wrong));
		int rc = gk_json_dump(stdout, jdoc, 1, &err);
		json_decref(jdoc);
		if (rc < 0)
			goto fail;
	} else if (me && !csv) {
		if (u.mcbw > 0)
			printf("# %-20s : %.2f GB/s (host, %zu MiB, median of 9)\n",
			       "memcpy bandwidth", u.mcbw, mcbytes >> 20);
		printf("# Collective test concluded: %s\n", gk_comm_coll_name(o.coll));
	}
	/* every rank knows the total; rank 0 says it while the others wait in close */
	if (wrong && me)
		gk_cli_failf(&cli, "%lld wrong result%s", (long long)wrong,
			     wrong == 1 ? "" : "s");
	/* nccl: a failed teardown is a failed run */
	if (gk_comm_finalize(comm, &err) < 0)
		goto fail;
	gk_comm_close(comm);
	return gk_cli_finish(&cli, wrong || metrics_failed ? 1 : 0);
fail:
	gk_metrics_free(u.metrics);
	gk_cli_fail(&cli, &err);
	gk_cli_flush(&cli);
	gk_comm_abort(comm, 1);
	gk_comm_close(comm);
	return gk_cli_finish(&cli, 1);
}
