/*
 * ckpt-prune - remove old training checkpoints from a checkpoint root,
 * safely enough to run from cron next to a running trainer. The policy
 * and its safety (lock, grace, rename-then-delete) are gk_ckpt_prune's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ckpt/ckpt.h"

static const char synopsis[] =
	"usage: ckpt-prune --keep-last N [--keep-every K] [--grace TIME]\n"
	"                  [--lock FILE] [--metrics FILE] [-nqv] DIR\n"
	"       ckpt-prune -h | --help | --version\n"
	"\n"
	"Remove old checkpoints (step-NNNNNNNN directories) from the checkpoint\n"
	"root DIR. The newest committed checkpoint and the one 'latest' points to\n"
	"are never removed.\n"
	"\n";

/* the options every tool has (GK_CLI_LONGOPTS), after the table's */
static const char common[] =
	"  -q, --quiet           log nothing but errors\n"
	"  -v, --verbose         also log what is kept and why\n"
	"  -h, --help            print this help\n"
	"  --version             print the version\n";

/* What the command line asks for. */
typedef struct args {
	gk_ckpt_prune_opts o;
	const char *metrics;
} args;

#define MAX_GRACE 3153600000ull /* 36500 days */

/* --grace: seconds, or a number with s, m, h or d. */
static int grace_arg(const char *opt, const char *s, void *field, gk_err *err)
{
	size_t n = strspn(s, "0123456789");
	const char *unit = strchr("smhd", s[n]);
	uint64_t mult = 1, v = 0;
	if (n == 0 || (s[n] && (!unit || s[n + 1])))
		return gk_errf(err, "%s '%s': not a duration (seconds, or a number with s, m, h or d)",
			       opt, s);
	if (s[n])
		mult = s[n] == 'd' ? 86400 : s[n] == 'h' ? 3600 : s[n] == 'm' ? 60 : 1;
	for (size_t i = 0; i < n; i++)
		if (gk_mul_overflow(v, 10, &v) || gk_add_overflow(v, (uint64_t)(s[i] - '0'), &v) ||
		    v > MAX_GRACE)
			return gk_errf(err, "%s '%s': out of range [0, 36500d]", opt, s);
	if (v * mult > MAX_GRACE)
		return gk_errf(err, "%s '%s': out of range [0, 36500d]", opt, s);
	v *= mult;
	memcpy(field, &v, sizeof(v));
	return 0;
}

/*
 * ckpt-prune's options, stated once: getopt's list, the summary of --help
 * and the parser of every argument. ckpt-prune(1) documents each row
 * (t3100 checks both ways).
 */
static const gk_optdef options[] = {
	{.kind = GK_OPTK_INT, .name = "keep-last", .arg = "N", GK_OPTF(args, o.keep_last),
	 .imin = 1, .imax = 1000000000, .help = "keep the N newest committed checkpoints (N >= 1)"},
	{.kind = GK_OPTK_INT, .name = "keep-every", .arg = "K", GK_OPTF(args, o.keep_every),
	 .imin = 1, .imax = 1000000000,
	 .help = "also keep committed checkpoints whose step is a multiple of K"},
	{.kind = GK_OPTK_CUSTOM, .name = "grace", .arg = "TIME", GK_OPTF(args, o.grace),
	 .custom = grace_arg, .def = "1h",
	 .help = "leave a checkpoint without COMMIT alone until nothing in it\n"
		 "has changed for TIME: seconds, or a number with s, m, h\n"
		 "or d; after that it is removed as abandoned"},
	{.kind = GK_OPTK_STR, .name = "lock", .arg = "FILE", GK_OPTF(args, o.lock), .set = 1,
	 .help = "lock FILE instead of DIR/.ckpt-prune.lock (for file\n"
		 "systems without flock, such as Lustre without -o flock)"},
	{.kind = GK_OPTK_STR, .name = "metrics", .arg = "FILE", GK_OPTF(args, metrics), .set = 1,
	 .help = "write what the run did in Prometheus' text format\n"
		 "(atomically, for node_exporter's textfile collector)"},
	{.kind = GK_OPTK_FLAG, .name = "dry-run", .short_name = 'n', GK_OPTF(args, o.dry_run),
	 .set = 1, .help = "print what would be removed and change nothing"},
	{.kind = GK_OPTK_END},
};

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
	args a = {0};
	gk_ckpt_prune_stats st = {0};
	char size[32];

	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "ckpt-prune", usage ? usage : synopsis);
	int optind = gk_optable_parse(&cli, options, 0, &a, argc, argv, NULL);
	gk_ckpt_prune_opts o = a.o;
	const char *metrics = a.metrics;
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
