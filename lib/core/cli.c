/*
 * cli.c - the conventions every tool's main() follows. The only part of
 * libgpukit that prints to the user or exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

void gk_cli_init(gk_cli *cli, const char *name, const char *usage)
{
	memset(cli, 0, sizeof(*cli));
	cli->name = name;
	cli->usage = usage;
	/*
	 * A descriptor 0, 1 or 2 left closed by the caller (`tool >&-`) would
	 * be reused by the next open, and output meant for stdout would land
	 * in a lock file or a checkpoint. Hold each closed one with /dev/null
	 * opened the wrong way round, so that reading stdin or writing stdout
	 * still fails with EBADF as it would have.
	 */
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
			(void)open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY); /* lowest free: fd */
	/*
	 * `tool | head` must end quietly: if our parent left SIGPIPE ignored,
	 * restore the default so a closed pipe kills us like any filter
	 * (gk_cli_finish also stays silent on EPIPE).
	 */
	signal(SIGPIPE, SIG_DFL);
	/* a mapped input truncated under us: a message and exit 1, not SIGBUS */
	gk_map_guard(name);
	setvbuf(stderr, NULL, _IOLBF, 0);
	/*
	 * Under mpirun -np N every rank parses the same command line: a usage
	 * error would be printed N times. Only the first rank speaks (getopt's
	 * own messages included); every rank still exits 2. A malformed
	 * launcher environment counts as the first rank, so it is heard.
	 */
	gk_rank_info ri;
	cli->silent_usage = gk_rank_discover(&ri, NULL) == 0 && ri.rank != 0;
	if (cli->silent_usage)
		opterr = 0;
}

/*
 * After a usage error: the SYNOPSIS lines (the first "usage:" line and
 * its continuations, indented deeper than an option line's two spaces),
 * not the whole option summary, which would push the error off the
 * screen; then where the rest is.
 */
static void synopsis(const gk_cli *cli)
{
	const char *p = cli->usage;
	while (*p) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
		if (p != cli->usage && strncmp(p, "   ", 3) != 0)
			break;
		fwrite(p, 1, n, stderr);
		p += n;
	}
	if (*p)
		fprintf(stderr, "Try '%s --help' for the options.\n", cli->name);
}

static _Noreturn void version(const gk_cli *cli)
{
	printf("%s (gpukit) %s\n", cli->name, GK_VERSION);
	exit(gk_cli_finish(cli, 0));
}

int gk_cli_common(gk_cli *cli, int opt)
{
	switch (opt) {
	case 'h':
		/* a usage longer than stdio's buffer is written here, not
		 * at the flush: keep the error's errno for the message */
		if (fputs(cli->usage, stdout) == EOF)
			cli->out_errno = errno;
		exit(gk_cli_finish(cli, 0));
	case GK_OPT_VERSION:
		version(cli);
	case 'q':
		cli->quiet = 1;
		return 1;
	case 'v':
		cli->verbose++;
		return 1;
	case GK_OPT_JSON:
		cli->json = 1;
		return 1;
	case '?':
	case ':':
		/* getopt already said what was wrong. */
		if (!cli->silent_usage)
			synopsis(cli);
		exit(gk_cli_defer(cli, 2));
	}
	return 0;
}

void gk_cli_usage_error(const gk_cli *cli, const char *fmt, ...)
{
	va_list ap;
	if (cli->silent_usage)
		exit(gk_cli_defer(cli, 2));
	fprintf(stderr, "%s: ", cli->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	synopsis(cli);
	exit(2);
}

int gk_cli_defer(const gk_cli *cli, int status)
{
	/*
	 * mpirun ends the whole job as soon as one rank exits non-zero: a
	 * silent rank that exits at once can get the first rank killed before
	 * it has printed the message they share. Half a second is long enough
	 * for a rank that parsed the same arguments; the launcher then ends
	 * this one with the job.
	 */
	struct timespec ts = {0, 500 * 1000 * 1000};
	if (cli->silent_usage && status != 0)
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	return status;
}

int gk_cli_fail(const gk_cli *cli, const gk_err *err)
{
	fprintf(stderr, "%s: %s\n", cli->name, err->msg);
	return 1;
}

int gk_cli_failf(const gk_cli *cli, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", cli->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

void gk_cli_warn(const gk_cli *cli, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: warning: ", cli->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int64_t gk_cli_i64(const gk_cli *cli, const char *opt, const char *s,
		   int64_t min, int64_t max)
{
	gk_err err;
	int64_t v;
	if (gk_parse_i64(s, min, max, &v, opt, &err) < 0)
		gk_cli_usage_error(cli, "%s", err.msg);
	return v;
}

uint64_t gk_cli_size(const gk_cli *cli, const char *opt, const char *s)
{
	gk_err err;
	uint64_t v;
	if (gk_parse_size(s, &v, opt, &err) < 0)
		gk_cli_usage_error(cli, "%s", err.msg);
	return v;
}

void gk_cli_flush(gk_cli *cli)
{
	if (fflush(stdout) != 0 && !cli->out_errno)
		cli->out_errno = errno;
}

int gk_cli_finish(const gk_cli *cli, int status)
{
	errno = 0;
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0) {
		/* an error of an earlier flush leaves errno 0 here */
		int e = errno ? errno : cli->out_errno ? cli->out_errno : EIO;
		if (e == EPIPE)
			exit(141); /* like death by SIGPIPE, and just as quiet */
		fprintf(stderr, "%s: write standard output: %s\n", cli->name, strerror(e));
		return 1;
	}
	return status;
}
