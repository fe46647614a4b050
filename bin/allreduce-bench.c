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
#include <unistd.h>

#include "comm/comm.h"
#include "core/core.h"

static const char usage[] =
	"usage: allreduce-bench [-b minbytes] [-e maxbytes] [-f factor | -i stepbytes]\n"
	"                       [-n iters] [-w warmup] [-c check] [-d dtype|all]\n"
	"                       [-o op|all] [-r root] [-z 0|1] [--backend NAME]\n"
	"                       [--algo NAME|all] [--compress bf16|f16|int8]\n"
	"                       [--collective NAME] [--segment SIZE] [--json | --csv]\n"
	"  -b, -e      smallest and largest message in bytes (8, 32M)\n"
	"  -f, -i      grow sizes by a factor (2) or by a step in bytes\n"
	"  -n, -w      timed and warmup iterations (20, 5)\n"
	"  -c          check results: 0 or the number of checked runs (1)\n"
	"  -d, -o      float double half bfloat16 int32 | sum prod max min avg\n"
	"  -z          barrier after each iteration (0)\n"
	"  --backend   auto self mpi nccl      --algo  auto native ring rd rabenseifner all\n"
	"  --collective allreduce reducescatter allgather broadcast\n";

enum { OPT_BACKEND = GK_OPT_FIRST_TOOL, OPT_ALGO, OPT_COMPRESS, OPT_COLL,
       OPT_CSV, OPT_SEGMENT };

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
	{"backend", required_argument, NULL, OPT_BACKEND},
	{"algo", required_argument, NULL, OPT_ALGO},
	{"compress", required_argument, NULL, OPT_COMPRESS},
	{"collective", required_argument, NULL, OPT_COLL},
	{"csv", no_argument, NULL, OPT_CSV},
	{"segment", required_argument, NULL, OPT_SEGMENT},
	{NULL, 0, NULL, 0},
};

/* nccl-tests' type names. */
static const char *type_name(gk_dtype dt)
{
	switch (dt) {
	case GK_DT_F64: return "double";
	case GK_DT_F16: return "half";
	case GK_DT_BF16: return "bfloat16";
	case GK_DT_I32: return "int32";
	default: return "float";
	}
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

typedef struct run_opts {
	uint64_t minb, maxb, stepb;
	int64_t factor;
	gk_comm_bench_params p;
	int all_types, all_ops, all_algos, csv;
} run_opts;

static const gk_dtype all_types[] = {GK_DT_F32, GK_DT_F64, GK_DT_F16,
				     GK_DT_BF16, GK_DT_I32};

int main(int argc, char **argv)
{
	gk_cli cli;
	gk_err err = {0};
	run_opts o = {.minb = 8, .maxb = 32 << 20, .factor = 2};
	gk_comm_config cfg = {.device = -1};
	o.p = (gk_comm_bench_params){.coll = GK_COMM_ALLREDUCE, .dt = GK_DT_F32,
				     .op = GK_COMM_SUM, .iters = 20, .warmup = 5,
				     .check = 1};
	int stepped = 0, c;
	gk_cli_init(&cli, "allreduce-bench", usage);

	while ((c = getopt_long(argc, argv, "hqvb:e:f:i:n:w:c:d:o:r:z:", longopts,
				NULL)) != -1) {
		if (gk_cli_common(&cli, c))
			continue;
		switch (c) {
		case 'b': o.minb = gk_cli_size(&cli, "-b", optarg); break;
		case 'e': o.maxb = gk_cli_size(&cli, "-e", optarg); break;
		case 'f': o.factor = gk_cli_i64(&cli, "-f", optarg, 1, 1 << 20); break;
		case 'i':
			o.stepb = gk_cli_size(&cli, "-i", optarg);
			stepped = 1;
			break;
		case 'n': o.p.iters = (int)gk_cli_i64(&cli, "-n", optarg, 1, 1 << 24); break;
		case 'w': o.p.warmup = (int)gk_cli_i64(&cli, "-w", optarg, 0, 1 << 24); break;
		case 'c': o.p.check = (int)gk_cli_i64(&cli, "-c", optarg, 0, 1000); break;
		case 'r': o.p.root = (int)gk_cli_i64(&cli, "-r", optarg, 0, 1 << 24); break;
		case 'z': o.p.blocking = (int)gk_cli_i64(&cli, "-z", optarg, 0, 1); break;
		case 'd':
			if (strcmp(optarg, "all") == 0)
				o.all_types = 1;
			else if (!gk_comm_dtype_ok(o.p.dt = gk_dtype_parse(optarg)))
				gk_cli_usage_error(&cli, "-d '%s': not one of float double half bfloat16 int32 all", optarg);
			break;
		case 'o':
			if (strcmp(optarg, "all") == 0)
				o.all_ops = 1;
			else if ((int)(o.p.op = gk_comm_op_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "-o '%s': not one of sum prod max min avg all", optarg);
			break;
		case OPT_BACKEND:
			if ((int)(cfg.backend = gk_comm_backend_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "--backend '%s': not one of auto self mpi nccl", optarg);
			break;
		case OPT_ALGO:
			if (strcmp(optarg, "all") == 0)
				o.all_algos = 1;
			else if ((int)(o.p.algo = gk_comm_algo_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "--algo '%s': not one of auto native ring rd rabenseifner all", optarg);
			break;
		case OPT_COMPRESS:
			if ((int)(o.p.compress = gk_comm_compress_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "--compress '%s': not one of none bf16 f16 int8", optarg);
			break;
		case OPT_COLL:
			if ((int)(o.p.coll = gk_comm_coll_parse(optarg)) < 0)
				gk_cli_usage_error(&cli, "--collective '%s': not one of allreduce reducescatter allgather broadcast", optarg);
			break;
		case OPT_CSV: o.csv = 1; break;
		case OPT_SEGMENT: cfg.segment = gk_cli_size(&cli, "--segment", optarg); break;
		default: gk_cli_usage_error(&cli, "unexpected option");
		}
	}
	if (optind < argc)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
	if (o.minb > o.maxb)
		gk_cli_usage_error(&cli, "-b %llu is larger than -e %llu",
				   (unsigned long long)o.minb, (unsigned long long)o.maxb);
	if (stepped && o.stepb == 0)
		gk_cli_usage_error(&cli, "-i 0: the step must be at least one byte");
	if (cli.json && o.csv)
		gk_cli_usage_error(&cli, "--json and --csv exclude each other");
	if (o.p.compress != GK_COMM_COMPRESS_NONE) {
		if (o.all_types || o.p.dt != GK_DT_F32)
			gk_cli_usage_error(&cli, "--compress takes float data (-d float)");
		if (o.all_ops || (o.p.op != GK_COMM_SUM && o.p.op != GK_COMM_AVG))
			gk_cli_usage_error(&cli, "--compress works with -o sum or -o avg");
		if (o.p.coll != GK_COMM_ALLREDUCE)
			gk_cli_usage_error(&cli, "--compress is for --collective allreduce");
	}
	if (stepped)
		o.factor = 1;

	/*
	 * Refuse sizes that cannot fit before touching anything: each rank
	 * holds about four buffers of the largest size (send, receive and
	 * their host copies), and the ranks on this node share its memory.
	 */
	gk_rank_info ri;
	if (gk_rank_discover(&ri, &err) < 0)
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
	double need = 4.0 * (double)o.maxb * (ri.local_world > 0 ? ri.local_world : 1);
	if (phys > 0 && need > phys) {
		char a[32], b[32];
		return gk_cli_finish(&cli, gk_cli_failf(&cli,
			"size '%s': needs %s of host memory on this node, it has %s",
			gk_format_size(o.maxb, 0, a, sizeof a),
			gk_format_size((uint64_t)need, 0, b, sizeof b),
			gk_format_size((uint64_t)phys, 0, (char[32]){0}, 32)));
	}

	gk_comm *comm;
	if (gk_comm_open(&comm, &cfg, &err) < 0)
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	int n = gk_comm_world(comm), me = gk_comm_rank(comm) == 0;
	if (o.p.root >= n) {
		gk_comm_close(comm);
		gk_cli_usage_error(&cli, "-r %d: not a rank of a world of %d", o.p.root, n);
	}

	gk_comm_algo algos[GK_COMM_ALGO_COUNT];
	int nalgo = 0;
	if (o.all_algos) {
		for (int a = GK_COMM_ALGO_NATIVE; a < GK_COMM_ALGO_COUNT; a++)
			if (gk_comm_algo_supported(comm, o.p.coll, a) &&
			    (o.p.compress == GK_COMM_COMPRESS_NONE || a == GK_COMM_ALGO_RING))
				algos[nalgo++] = a;
	} else {
		if (!gk_comm_algo_supported(comm, o.p.coll, o.p.algo)) {
			gk_errf(&err, "--algo '%s': not available for %s on the %s backend",
				gk_comm_algo_name(o.p.algo), gk_comm_coll_name(o.p.coll),
				gk_comm_backend_name(gk_comm_backend_of(comm)));
			gk_comm_close(comm);
			return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
		}
		algos[nalgo++] = o.p.algo;
	}

	/* The host memcpy reference: one rank copies while the others wait. */
	double mcbw = 0;
	size_t mcbytes = o.maxb < (1 << 20) ? (1 << 20) : o.maxb > (256u << 20) ? (256u << 20) : o.maxb;
	if (!gk_comm_on_device(comm)) {
		if (me)
			mcbw = gk_comm_memcpy_bw(mcbytes, 9);
		if (gk_comm_barrier(comm, &err) < 0)
			goto fail;
	}

	json_t *jdoc = NULL, *jres = NULL, *javg = NULL;
	if (me && cli.json) {
		jdoc = json_pack("{s:s,s:s,s:i,s:s,s:I,s:I,s:i,s:i,s:i}", "tool", "allreduce-bench",
				 "collective", gk_comm_coll_name(o.p.coll), "world", n,
				 "backend", gk_comm_backend_name(gk_comm_backend_of(comm)),
				 "minimum_bytes", (json_int_t)o.minb, "maximum_bytes", (json_int_t)o.maxb,
				 "warmup_iters", o.p.warmup, "iterations", o.p.iters,
				 "validation", o.p.check);
		json_object_set_new(jdoc, "compress", json_string(gk_comm_compress_name(o.p.compress)));
		json_object_set_new(jdoc, "memcpy_bw", mcbw > 0 ? json_real(mcbw) : json_null());
		json_object_set_new(jdoc, "results", jres = json_array());
		json_object_set_new(jdoc, "average_bus_bandwidth", javg = json_object());
	} else if (me && o.csv) {
		printf("algo,size,count,type,redop,root,time_oop,algbw_oop,busbw_oop,wrong_oop,"
		       "time_ip,algbw_ip,busbw_ip,wrong_ip%s\n",
		       o.p.compress ? ",max_abs_err,max_rel_err" : "");
	} else if (me) {
		printf("# allreduce-bench (gpukit) %s: %s, backend %s, %d rank%s%s%s\n", GK_VERSION,
		       gk_comm_coll_name(o.p.coll), gk_comm_backend_name(gk_comm_backend_of(comm)),
		       n, n == 1 ? "" : "s", o.p.compress ? ", compress " : "",
		       o.p.compress ? gk_comm_compress_name(o.p.compress) : "");
		printf("# nThread 1 nGpus 1 minBytes %llu maxBytes %llu step: %llu(%s) warmup iters: %d iters: %d agg iters: 1 validation: %d graph: 0\n",
		       (unsigned long long)o.minb, (unsigned long long)o.maxb,
		       (unsigned long long)(o.factor > 1 ? (uint64_t)o.factor : o.stepb),
		       o.factor > 1 ? "factor" : "bytes", o.p.warmup, o.p.iters, o.p.check);
		if (o.p.blocking)
			printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
		printf("#\n");
	}

	int64_t total_wrong = 0;
	for (int ai = 0; ai < nalgo; ai++) {
		gk_comm_bench_params p = o.p;
		p.algo = algos[ai];
		double bwsum = 0;
		int bwn = 0;
		int64_t wrong = 0;
		double last_busbw = 0;
		if (me && !cli.json && !o.csv) {
			printf("# Algorithm: %s\n#\n", gk_comm_algo_name(p.algo));
			printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
			       "", "", "", "", "");
			printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n",
			       "size", "count", "type", "redop", "root", "time", "algbw", "busbw",
			       "#wrong", "time", "algbw", "busbw", "#wrong",
			       p.compress ? "    max_abs    max_rel" : "");
			printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n",
			       "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
			       "(us)", "(GB/s)", "(GB/s)", "", p.compress ? "      (abs)      (rel)" : "");
		}
		for (int ti = 0; ti < (o.all_types ? 5 : 1); ti++) {
			if (o.all_types)
				p.dt = all_types[ti];
			size_t esz = gk_dtype_bits(p.dt) / 8;
			for (int oi = 0; oi < (o.all_ops ? GK_COMM_OP_COUNT : 1); oi++) {
				if (o.all_ops)
					p.op = oi;
				for (uint64_t size = o.minb; size <= o.maxb;) {
					/* nccl-tests: whole elements, and for the scatter/gather
					 * collectives a whole number per rank. */
					size_t unit = esz * (p.coll == GK_COMM_ALLREDUCE ||
							     p.coll == GK_COMM_BROADCAST ? 1 : (size_t)n);
					p.count = size / unit * unit / esz;
					gk_comm_bench_result r[2];
					for (int ip = 0; ip < 2; ip++)
						if (gk_comm_bench_run(comm, &p, ip, &r[ip], &err) < 0)
							goto fail;
					for (int ip = 0; ip < 2; ip++) {
						if (r[ip].wrong > 0)
							wrong += r[ip].wrong;
						bwsum += r[ip].busbw, bwn++;
					}
					last_busbw = r[0].busbw;
					double mabs = r[0].max_abs > r[1].max_abs ? r[0].max_abs : r[1].max_abs;
					double mrel = r[0].max_rel > r[1].max_rel ? r[0].max_rel : r[1].max_rel;
					if (me && cli.json) {
						json_t *row = json_pack("{s:s,s:I,s:I,s:s,s:s,s:i,s:o,s:o}",
							"algo", gk_comm_algo_name(p.algo),
							"size", (json_int_t)r[0].bytes, "count", (json_int_t)p.count,
							"type", type_name(p.dt), "redop", gk_comm_op_name(p.op),
							"root", p.coll == GK_COMM_BROADCAST ? p.root : -1,
							"out_of_place", jbody(&r[0]), "in_place", jbody(&r[1]));
						if (p.compress) {
							json_object_set_new(row, "max_abs_err", json_real(mabs));
							json_object_set_new(row, "max_rel_err", json_real(mrel));
						}
						json_array_append_new(jres, row);
					} else if (me && o.csv) {
						printf("%s,%zu,%zu,%s,%s,%d", gk_comm_algo_name(p.algo),
						       r[0].bytes, p.count, type_name(p.dt), gk_comm_op_name(p.op),
						       p.coll == GK_COMM_BROADCAST ? p.root : -1);
						for (int ip = 0; ip < 2; ip++)
							printf(",%.3f,%.6g,%.6g,%lld", r[ip].time_us, r[ip].algbw,
							       r[ip].busbw, (long long)r[ip].wrong);
						if (p.compress)
							printf(",%.6g,%.6g", mabs, mrel);
						printf("\n");
					} else if (me) {
						printf("%12zu  %12zu  %8s  %6s  %6d", r[0].bytes, p.count,
						       type_name(p.dt), gk_comm_op_name(p.op),
						       p.coll == GK_COMM_BROADCAST ? p.root : -1);
						body(&r[0]);
						body(&r[1]);
						if (p.compress)
							printf("  %9.3g  %9.3g", mabs, mrel);
						printf("\n");
					}
					uint64_t next = o.factor > 1 ? size * (uint64_t)o.factor : size + o.stepb;
					if (next <= size)
						next = size ? UINT64_MAX : 1;
					if (next == UINT64_MAX)
						break;
					size = next;
				}
			}
		}
		double avg = bwn ? bwsum / bwn : 0;
		double pct = mcbw > 0 ? 100 * last_busbw / mcbw : 0;
		total_wrong += wrong;
		if (me && cli.json) {
			json_object_set_new(javg, gk_comm_algo_name(p.algo), json_real(avg));
		} else if (me && !o.csv) {
			printf("# %-20s : %lld %s\n", "Out of bounds values", (long long)wrong,
			       wrong ? "FAILED" : "OK");
			printf("# %-20s : %g \n", "Avg bus bandwidth", avg);
			if (mcbw > 0)
				printf("# %-20s : %.1f%% (largest size, out of place)\n",
				       "busbw / memcpy", pct);
			printf("#\n");
		}
	}
	if (me && cli.json) {
		json_object_set_new(jdoc, "out_of_bounds", json_integer(total_wrong));
		if (gk_json_dump(stdout, jdoc, 1, &err) < 0) {
			json_decref(jdoc);
			goto fail;
		}
		json_decref(jdoc);
	} else if (me && !o.csv) {
		if (mcbw > 0)
			printf("# %-20s : %.2f GB/s (host, %zu MiB, median of 9)\n",
			       "memcpy bandwidth", mcbw, mcbytes >> 20);
		printf("# Collective test concluded: %s\n", gk_comm_coll_name(o.p.coll));
	}
	/* nccl: a failed teardown is a failed run */
	if (gk_comm_finalize(comm, &err) < 0)
		goto fail;
	gk_comm_close(comm);
	if (total_wrong) {
		if (me)
			gk_cli_failf(&cli, "%lld wrong result%s", (long long)total_wrong,
				     total_wrong == 1 ? "" : "s");
		return gk_cli_finish(&cli, 1);
	}
	return gk_cli_finish(&cli, 0);
fail:
	gk_cli_fail(&cli, &err);
	fflush(stdout);
	gk_comm_abort(comm, 1);
	gk_comm_close(comm);
	return gk_cli_finish(&cli, 1);
}
