/*
 * ckpt-prune - remove old training checkpoints from a checkpoint root,
 * safely enough to run from cron next to a running trainer. The policy
 * and its safety (lock, grace, rename-then-delete) are gk_ckpt_prune's.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ckpt/ckpt.h"

static const char usage[] =
	"usage: ckpt-prune --keep-last N [--keep-every K] [--grace TIME]\n"
	"                  [--lock FILE] [--metrics FILE] [-nqv] DIR\n"
	"       ckpt-prune -h | --help | --version\n"
	"\n"
	"Remove old checkpoints (step-NNNNNNNN directories) from the checkpoint\n"
	"root DIR. The newest committed checkpoint and the one 'latest' points to\n"
	"are never removed.\n"
	"\n"
	"  --keep-last N   keep the N newest committed checkpoints (N >= 1)\n"
	"  --keep-every K  also keep committed checkpoints whose step is a multiple of K\n"
	"  --grace TIME    leave a checkpoint without COMMIT alone until nothing in it\n"
	"                  has changed for TIME: seconds, or a number with s, m, h\n"
	"                  or d (default 1h); after that it is removed as abandoned\n"
	"  --lock FILE     lock FILE instead of DIR/.ckpt-prune.lock (for file\n"
	"                  systems without flock, such as Lustre without -o flock)\n"
	"  --metrics FILE  write what the run did in Prometheus' text format\n"
	"                  (atomically, for node_exporter's textfile collector)\n"
	"  -n, --dry-run   print what would be removed and change nothing\n"
	"  -q, --quiet     log nothing but errors\n"
	"  -v, --verbose   also log what is kept and why\n"
	"  -h, --help      print this help\n"
	"      --version   print the version\n";

enum { OPT_KEEP_LAST = GK_OPT_FIRST_TOOL, OPT_KEEP_EVERY, OPT_GRACE, OPT_LOCK, OPT_METRICS };

static const struct option longopts[] = {
	GK_CLI_LONGOPTS,
	{"keep-last", required_argument, NULL, OPT_KEEP_LAST},
	{"keep-every", required_argument, NULL, OPT_KEEP_EVERY},
	{"grace", required_argument, NULL, OPT_GRACE},
	{"lock", required_argument, NULL, OPT_LOCK},
	{"metrics", required_argument, NULL, OPT_METRICS},
	{"dry-run", no_argument, NULL, 'n'},
	{NULL, 0, NULL, 0},
};

#define MAX_GRACE 3153600000ull /* 36500 days */

/* Seconds, or a number with s, m, h or d. */
static uint64_t grace_arg(const gk_cli *cli, const char *s)
{
	size_t n = strspn(s, "0123456789");
	const char *unit = strchr("smhd", s[n]);
	uint64_t mult = 1, v = 0;
	if (n == 0 || (s[n] && (!unit || s[n + 1])))
		gk_cli_usage_error(cli, "--grace '%s': not a duration (seconds, or a number with s, m, h or d)", s);
	if (s[n])
		mult = s[n] == 'd' ? 86400 : s[n] == 'h' ? 3600 : s[n] == 'm' ? 60 : 1;
	for (size_t i = 0; i < n; i++)
		if (gk_mul_overflow(v, 10, &v) || gk_add_overflow(v, (uint64_t)(s[i] - '0'), &v) ||
		    v > MAX_GRACE)
			gk_cli_usage_error(cli, "--grace '%s': out of range [0, 36500d]", s);
	if (v * mult > MAX_GRACE)
		gk_cli_usage_error(cli, "--grace '%s': out of range [0, 36500d]", s);
	return v * mult;
}

/* 1048576 KiB -> "1.0 GiB": a tenth, as a log line needs. */
static char *human(uint64_t kib, char *buf, size_t len)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	uint64_t unit = 1;
	int i = 0;
	while (i < 4 && kib >= unit * 1024) {
		unit *= 1024;
		i++;
	}
	uint64_t tenths = (kib * 10 + unit / 2) / unit;
	snprintf(buf, len, "%" PRIu64 ".%" PRIu64 " %s", tenths / 10, tenths % 10, units[i]);
	return buf;
}

/*
 * The run as gauges (the values of the last run: a counter would restart
 * at every cron run), labelled with the root. ok: 0 when the run failed.
 */
static int write_metrics(const char *path, const char *dir, const gk_ckpt_prune_stats *st,
			 int ok, int dry_run, gk_err *err)
{
	static const char pre[] = "gpukit_ckpt_prune_";
	const char *labels[] = {"root", dir, NULL};
	const struct {
		const char *name, *help;
		double v;
	} g[] = {
		{"removed", "Checkpoints the last run removed (would remove, with --dry-run).",
		 (double)st->removed},
		{"kept", "Checkpoints and directories in progress the last run kept.",
		 (double)st->kept},
		{"failed", "Removals that failed in the last run.", (double)st->failed},
		{"freed_bytes", "Disk space the last run freed (would free, with --dry-run).",
		 (double)st->freed_kib * 1024},
		{"success", "1 when the last run did all it had to, else 0.", ok},
		{"dry_run", "1 when the last run was --dry-run: it removed nothing.", dry_run},
		{"last_run_timestamp_seconds", "When the last run ended, in Unix time.",
		 (double)time(NULL)},
	};
	gk_metrics *m;
	char name[64];
	int rc = gk_metrics_new(&m, labels, err);
	for (size_t i = 0; !rc && i < GK_ARRAY_SIZE(g); i++) {
		snprintf(name, sizeof(name), "%s%s", pre, g[i].name);
		rc = gk_metrics_set(m, name, GK_METRIC_GAUGE, g[i].help, NULL, g[i].v, err);
	}
	if (!rc)
		rc = gk_metrics_write(m, path, err);
	gk_metrics_free(m);
	return rc;
}

typedef struct ctx {
	const gk_cli *cli;
	int dry_run;
} ctx;

static void report(void *p, const gk_ckpt_prune_event *ev)
{
	const ctx *c = p;
	char size[32];
	switch (ev->kind) {
	case GK_CKPT_PRUNE_REMOVED:
		if (!c->cli->quiet)
			printf("%s %s (%s%s%s)\n", c->dry_run ? "would remove" : "removed",
			       ev->name, human(ev->kib, size, sizeof(size)),
			       *ev->why ? ", " : "", ev->why);
		break;
	case GK_CKPT_PRUNE_KEPT:
		if (c->cli->verbose && !c->cli->quiet)
			printf("kept %s (%s)\n", ev->name, ev->why);
		break;
	case GK_CKPT_PRUNE_WARNING:
		if (!c->cli->quiet)
			gk_cli_warn(c->cli, "%s", ev->msg);
		break;
	case GK_CKPT_PRUNE_FAILED:
		gk_cli_failf(c->cli, "%s", ev->msg);
		break;
	}
}

int main(int argc, char **argv)
{
	gk_cli cli;
	gk_err err = {0};
	gk_ckpt_prune_opts o = {0, 0, 3600, 0, NULL};
	gk_ckpt_prune_stats st = {0};
	const char *metrics = NULL;
	char size[32];
	int opt;

	gk_cli_init(&cli, "ckpt-prune", usage);
	while ((opt = getopt_long(argc, argv, "nqvh", longopts, NULL)) != -1) {
		if (gk_cli_common(&cli, opt))
			continue;
		switch (opt) {
		case OPT_KEEP_LAST:
			o.keep_last = (uint64_t)gk_cli_i64(&cli, "--keep-last", optarg, 1, 1000000000);
			break;
		case OPT_KEEP_EVERY:
			o.keep_every = (uint64_t)gk_cli_i64(&cli, "--keep-every", optarg, 1, 1000000000);
			break;
		case OPT_GRACE: o.grace = grace_arg(&cli, optarg); break;
		case OPT_LOCK:
			if (!*optarg)
				gk_cli_usage_error(&cli, "--lock '': an empty file name");
			o.lock = optarg;
			break;
		case OPT_METRICS:
			if (!*optarg)
				gk_cli_usage_error(&cli, "--metrics '': an empty file name");
			metrics = optarg;
			break;
		case 'n': o.dry_run = 1; break;
		}
	}
	if (optind >= argc)
		gk_cli_usage_error(&cli, "missing the checkpoint directory");
	if (argc - optind > 1)
		gk_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind + 1]);
	/* A bare `ckpt-prune DIR` from a typo in a crontab must not mean "keep one". */
	if (!o.keep_last)
		gk_cli_usage_error(&cli, "--keep-last is required");

	const char *dir = argv[optind];
	/* before anything is removed: a metrics path naming another file */
	if (metrics && gk_metrics_check(metrics, &err) < 0)
		return gk_cli_fail(&cli, &err);
	ctx c = {&cli, o.dry_run};
	int rc = gk_ckpt_prune(dir, &o, report, &c, &st, &err), status = 0;
	if (rc < 0) {
		status = gk_cli_fail(&cli, &err);
	} else if (rc == 1) {
		/* The run holding the lock writes the metrics. */
		if (!cli.quiet)
			gk_cli_warn(&cli, "'%s' is being pruned by another ckpt-prune; nothing done", dir);
		return gk_cli_finish(&cli, 0);
	} else {
		if (cli.verbose && !cli.quiet)
			printf(o.dry_run ? "would remove %zu, keep %zu, free %s\n"
					 : "removed %zu, kept %zu, freed %s\n",
			       st.removed, st.kept, human(st.freed_kib, size, sizeof(size)));
		status = st.failed ? 1 : 0;
	}
	if (metrics && write_metrics(metrics, dir, &st, status == 0, o.dry_run, &err))
		status = gk_cli_fail(&cli, &err);
	return gk_cli_finish(&cli, status);
}
