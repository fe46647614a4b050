/*
 * gpu-topo - GPUs, NICs, NUMA nodes and the links between them, and where
 * to put the ranks of a job.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "topo/topo.h"

static const char synopsis[] =
	"usage: gpu-topo [-qv] [-i file.xml] [-m | --json | --pairs]\n"
	"       gpu-topo topo -m     (nvidia-smi's spelling of the matrix)\n"
	"       gpu-topo [-i file.xml] --binding [-n ranks] [--rank r] [--env | --numactl]\n"
	"       gpu-topo [-i file.xml] --rankfile [--hosts host,...] [-n ranks]\n"
	"       gpu-topo [-i file.xml] --explain dev1 dev2\n"
	"       gpu-topo --health [--metrics FILE]\n"
	"\n";

/* the options every tool has (GK_CLI_LONGOPTS), after the table's */
static const char common[] =
	"  --json                devices, pairs, NUMA nodes and warnings as JSON\n"
	"  -q, --quiet           no warnings\n"
	"  -v, --verbose         also the NUMA nodes and allowed CPUs\n"
	"  -h, --help            this help\n"
	"  --version             the version\n";

/* What the command line asks for. */
typedef struct args {
	const char *input, *hosts, *explain, *metrics;
	int matrix, pairs, binding, rankfile, health, fmt, ranks, rank;
} args;

#define FLAG(nm, sh, f, v, h) \
	{.kind = GK_OPTK_FLAG, .name = nm, .short_name = sh, GK_OPTF(args, f), .set = v, .help = h}
#define STR(nm, sh, a, f, h) \
	{.kind = GK_OPTK_STR, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), .set = 1, \
	 .help = h}
#define INT(nm, sh, a, f, lo, hi, h) \
	{.kind = GK_OPTK_INT, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), .imin = lo, \
	 .imax = hi, .help = h}

/*
 * gpu-topo's options, stated once: getopt's list, the summary of --help
 * and the parser of every argument. gpu-topo(1) documents each row (t5000
 * checks both ways).
 */
static const gk_optdef options[] = {
	STR("input", 'i', "FILE", input,
	    "an hwloc XML topology (lstopo --of xml) instead of this machine"),
	FLAG("matrix", 'm', matrix, 1, "the link matrix of nvidia-smi topo -m (the default)"),
	FLAG("pairs", 0, pairs, 1, "one TSV line per device pair"),
	FLAG("binding", 0, binding, 1, "GPU, NIC, NUMA node and cores for each local rank (TSV)"),
	INT("ranks-per-node", 'n', "N", ranks, 1, 4096, "ranks on each node (default: one per GPU)"),
	INT("rank", 0, "R", rank, 0, 4095, "only local rank R"),
	FLAG("env", 0, fmt, GK_BIND_ENV, "the binding as environment assignments"),
	FLAG("numactl", 0, fmt, GK_BIND_NUMACTL, "the binding as numactl prefixes"),
	FLAG("rankfile", 0, rankfile, 1,
	     "an Open MPI rankfile for --hosts (default: the Slurm\n"
	     "allocation's SLURM_JOB_NODELIST, else this host)"),
	STR("hosts", 0, "LIST", hosts,
	    "host names, comma-separated; node{01..04} and\n"
	    "Slurm's node[01-04,07] expand"),
	STR("explain", 0, "A B", explain,
	    "the PCIe path between two devices (GPU0, NIC1, bus id, mlx5_0)"),
	FLAG("health", 0, health, 1, "read every GPU's health from NVML; exit 1 if one is unhealthy"),
	STR("metrics", 0, "FILE", metrics,
	    "with --health: write it for node_exporter's textfile collector"),
	{.kind = GK_OPTK_END},
};

/*
 * The hosts of a rankfile: --hosts, else the Slurm allocation's node list,
 * else this machine alone.
 */
static int hosts_get(const char *hosts, gk_strlist *out, gk_err *err)
{
	char name[256];
	const char *slurm = getenv("SLURM_JOB_NODELIST");
	if (!hosts && slurm && *slurm)
		hosts = slurm;
	if (!hosts) {
		if (gethostname(name, sizeof(name)) < 0)
			return gk_err_sys(err, errno, "host name");
		name[sizeof(name) - 1] = '\0';
		hosts = name;
	}
	return gk_hostlist_expand(hosts, 0, out, err);
}

/*
 * --health: every GPU's health, the problems on stdout (what could not be
 * read too, with -v), the samples into metrics. 1 when a GPU is unhealthy
 * or none can be read.
 */
static int health(gk_cli *cli, const char *metrics)
{
	gk_err err;
	gk_metrics *m;
	gk_topo_health_report h;
	if (gk_metrics_new(&m, NULL, &err) < 0)
		return gk_cli_fail(cli, &err);
	int rc = gk_topo_health(m, &h, &err);
	if (rc == 0) {
		for (size_t i = 0; i < h.problems.n; i++)
			printf("%s\n", h.problems.v[i]);
		for (size_t i = 0; cli->verbose && i < h.notes.n; i++)
			gk_cli_warn(cli, "%s", h.notes.v[i]);
		if (!cli->quiet)
			printf(h.unhealthy ? "%d GPU%s, %d unhealthy\n" : "%d GPU%s, healthy\n",
			       h.ngpus, h.ngpus == 1 ? "" : "s", h.unhealthy);
	}
	/* the samples read are written even when some GPU could not be */
	if (metrics && gk_metrics_write(m, metrics, &err) < 0)
		rc = -1;
	int status = rc < 0 ? gk_cli_fail(cli, &err) : h.unhealthy ? 1 : 0;
	if (rc == 0)
		gk_topo_health_free(&h);
	gk_metrics_free(m);
	return status;
}

int main(int argc, char **argv)
{
	gk_cli cli;
	gk_err err;
	args o = {.fmt = GK_BIND_TSV, .rank = -1};

	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "gpu-topo", usage ? usage : synopsis);
	int optind = gk_optable_parse(&cli, options, 0, &o, argc, argv, NULL);
	const char *input = o.input, *hosts = o.hosts, *explain = o.explain, *metrics = o.metrics;
	int matrix = o.matrix, pairs = o.pairs, binding = o.binding, rankfile = o.rankfile;
	int fmt = o.fmt, ranks = o.ranks, rank = o.rank, check = o.health;
	/* "gpu-topo topo -m": nvidia-smi's subcommand word, for the matrix alone */
	if (!explain && optind < argc && strcmp(argv[optind], "topo") == 0) {
		if (cli.json || pairs || binding || rankfile || check)
			gk_cli_usage_error(&cli, "'topo' is nvidia-smi's word for the matrix: "
					   "drop it, or use -m alone");
		matrix = 1;
		optind++;
	}
	if (explain ? argc - optind != 1 : optind != argc)
		gk_cli_usage_error(&cli, explain ? "--explain needs two devices" : "unexpected argument '%s'",
				   argv[optind]);
	if (matrix + cli.json + pairs + binding + rankfile + !!explain + check > 1)
		gk_cli_usage_error(&cli, "-m, --json, --pairs, --binding, --rankfile, --explain and "
				   "--health exclude each other");
	if (metrics && !check)
		gk_cli_usage_error(&cli, "--metrics goes with --health");
	if (check && input)
		gk_cli_usage_error(&cli, "--health reads this machine's GPUs, not -i's topology");
	if (check) {
		gk_err me;
		if (metrics && gk_metrics_check(metrics, &me) < 0)
			gk_cli_usage_error(&cli, "%s", me.msg);
		return gk_cli_finish(&cli, health(&cli, metrics));
	}
	if (hosts && !rankfile)
		gk_cli_usage_error(&cli, "--hosts goes with --rankfile");
	if ((fmt != GK_BIND_TSV || rank >= 0) && !binding)
		gk_cli_usage_error(&cli, "--env, --numactl and --rank go with --binding");
	if (ranks && !binding && !rankfile)
		gk_cli_usage_error(&cli, "--ranks-per-node goes with --binding or --rankfile");

	gk_strlist hostlist = {0};
	if (rankfile && hosts_get(hosts, &hostlist, &err) < 0)
		gk_cli_usage_error(&cli, "%s", err.msg);

	gk_topo *t;
	if (gk_topo_load(&t, input, &err) < 0)
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	int status = 0;
	gk_strlist warn = {0};
	if (!cli.quiet && !explain && gk_topo_warnings(t, &warn, &err) == 0)
		for (size_t i = 0; i < warn.n; i++)
			gk_cli_warn(&cli, "%s", warn.v[i]);
	gk_strlist_free(&warn);

	if (explain) {
		int a = gk_topo_find(t, explain), b = gk_topo_find(t, argv[optind]);
		const char *bad = a < 0 ? explain : b < 0 ? argv[optind] : NULL;
		if (bad) {
			status = gk_cli_failf(&cli, "explain '%s': no such GPU or NIC", bad);
		} else {
			gk_strlist path = {0};
			char s[16];
			int nv, l = gk_topo_link(t, a, b, &nv);
			printf("%s -> %s: %s\n", gk_topo_dev_at(t, a)->label, gk_topo_dev_at(t, b)->label,
			       gk_topo_link_str(l, nv, s, sizeof(s)));
			if (gk_topo_explain(t, a, b, &path, &err) < 0)
				status = gk_cli_fail(&cli, &err);
			for (size_t i = 0; i < path.n; i++)
				printf("  %s\n", path.v[i]);
			gk_strlist_free(&path);
		}
	} else if (binding || rankfile) {
		gk_topo_bind *b = NULL;
		int n = ranks ? ranks : gk_topo_default_ranks(t);
		if (rank >= n && ranks)
			gk_cli_usage_error(&cli, "--rank %d: -n says %d ranks per node", rank, n);
		if (rank >= n)
			status = gk_cli_failf(&cli, "--rank %d: the topology makes %d rank%s per "
					      "node, one per GPU (or NUMA node without GPUs); -n sets "
					      "another number", rank, n, n == 1 ? "" : "s");
		else if (gk_topo_binding(t, n, &b, &err) < 0)
			status = gk_cli_fail(&cli, &err);
		else if (rankfile)
			gk_topo_print_rankfile(stdout, b, n, &hostlist);
		else
			gk_topo_print_binding(stdout, t, b, rank >= 0 ? rank : 0, rank >= 0 ? 1 : n, fmt);
		for (int r = 0; b && r < n && !cli.quiet; r++)
			if (b[r].shared) {
				gk_cli_warn(&cli, "some ranks share cores: more ranks than cores "
					    "local to their GPU");
				break;
			}
		free(b);
	} else if (cli.json) {
		if (gk_topo_print_json(stdout, t, &err) < 0)
			status = gk_cli_fail(&cli, &err);
	} else if (pairs) {
		gk_topo_print_pairs(stdout, t);
	} else {
		if (gk_topo_ngpus(t) == 0)
			printf("No GPUs: no PCI device of vendor 0x10de with a display class%s.\n\n",
			       input ? " in this topology" : " on this machine");
		gk_topo_print_matrix(stdout, t);
		if (gk_topo_ngpus(t) == 0 || cli.verbose)
			gk_topo_print_numa(stdout, t);
	}
	gk_topo_free(t);
	gk_strlist_free(&hostlist);
	return gk_cli_finish(&cli, status);
}
