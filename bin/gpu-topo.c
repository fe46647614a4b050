/*
 * gpu-topo - GPUs, NICs, NUMA nodes and the links between them, and where
 * to put the ranks of a job.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "topo/topo.h"

static const char usage[] =
	"usage: gpu-topo [-qv] [-i file.xml] [-m | --json | --pairs]\n"
	"       gpu-topo topo -m     (nvidia-smi's spelling of the matrix)\n"
	"       gpu-topo [-i file.xml] --binding [-n ranks] [--rank r] [--env | --numactl]\n"
	"       gpu-topo [-i file.xml] --rankfile [--hosts host,...] [-n ranks]\n"
	"       gpu-topo [-i file.xml] --explain dev1 dev2\n"
	"       gpu-topo --health [--metrics FILE]\n"
	"\n"
	"  -i, --input FILE        an hwloc XML topology (lstopo --of xml) instead of this machine\n"
	"  -m, --matrix            the link matrix of nvidia-smi topo -m (the default)\n"
	"      --json              devices, pairs, NUMA nodes and warnings as JSON\n"
	"      --pairs             one TSV line per device pair\n"
	"      --binding           GPU, NIC, NUMA node and cores for each local rank (TSV)\n"
	"  -n, --ranks-per-node N  ranks on each node (default: one per GPU)\n"
	"      --rank R            only local rank R\n"
	"      --env               the binding as environment assignments\n"
	"      --numactl           the binding as numactl prefixes\n"
	"      --rankfile          an Open MPI rankfile for --hosts (default: the Slurm\n"
	"                          allocation's SLURM_JOB_NODELIST, else this host)\n"
	"      --hosts LIST        host names, comma-separated; node{01..04} and\n"
	"                          Slurm's node[01-04,07] expand\n"
	"      --explain A B       the PCIe path between two devices (GPU0, NIC1, bus id, mlx5_0)\n"
	"      --health            read every GPU's health from NVML; exit 1 if one is unhealthy\n"
	"      --metrics FILE      with --health: write it for node_exporter's textfile collector\n"
	"  -q, --quiet             no warnings\n"
	"  -v, --verbose           also the NUMA nodes and allowed CPUs\n"
	"  -h, --help              this help\n"
	"      --version           the version\n";

enum { OPT_PAIRS = GK_OPT_FIRST_TOOL, OPT_BINDING, OPT_RANK, OPT_ENV, OPT_NUMACTL,
       OPT_RANKFILE, OPT_HOSTS, OPT_EXPLAIN, OPT_HEALTH, OPT_METRICS };

static const struct option longopts[] = {
	GK_CLI_LONGOPTS,
	GK_CLI_LONGOPT_JSON,
	{"input", required_argument, NULL, 'i'},
	{"matrix", no_argument, NULL, 'm'},
	{"pairs", no_argument, NULL, OPT_PAIRS},
	{"binding", no_argument, NULL, OPT_BINDING},
	{"ranks-per-node", required_argument, NULL, 'n'},
	{"rank", required_argument, NULL, OPT_RANK},
	{"env", no_argument, NULL, OPT_ENV},
	{"numactl", no_argument, NULL, OPT_NUMACTL},
	{"rankfile", no_argument, NULL, OPT_RANKFILE},
	{"hosts", required_argument, NULL, OPT_HOSTS},
	{"explain", required_argument, NULL, OPT_EXPLAIN},
	{"health", no_argument, NULL, OPT_HEALTH},
	{"metrics", required_argument, NULL, OPT_METRICS},
	{NULL, 0, NULL, 0},
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
	const char *input = NULL, *hosts = NULL, *explain = NULL, *metrics = NULL;
	int matrix = 0, pairs = 0, binding = 0, rankfile = 0, fmt = GK_BIND_TSV, ranks = 0, rank = -1;
	int check = 0;

	gk_cli_init(&cli, "gpu-topo", usage);
	int opt;
	while ((opt = getopt_long(argc, argv, "hqvi:mn:", longopts, NULL)) != -1) {
		if (gk_cli_common(&cli, opt))
			continue;
		switch (opt) {
		case 'i': input = optarg; break;
		case 'm': matrix = 1; break;
		case 'n': ranks = (int)gk_cli_i64(&cli, "--ranks-per-node", optarg, 1, 4096); break;
		case OPT_PAIRS: pairs = 1; break;
		case OPT_BINDING: binding = 1; break;
		case OPT_RANK: rank = (int)gk_cli_i64(&cli, "--rank", optarg, 0, 4095); break;
		case OPT_ENV: fmt = GK_BIND_ENV; break;
		case OPT_NUMACTL: fmt = GK_BIND_NUMACTL; break;
		case OPT_RANKFILE: rankfile = 1; break;
		case OPT_HOSTS: hosts = optarg; break;
		case OPT_EXPLAIN: explain = optarg; break;
		case OPT_HEALTH: check = 1; break;
		case OPT_METRICS: metrics = optarg; break;
		default: gk_cli_usage_error(&cli, "unexpected option");
		}
	}
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
