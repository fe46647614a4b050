/*
 * metrics.c - Prometheus text exposition format, written atomically.
 *
 * reference: https://prometheus.io/docs/instrumenting/exposition_formats/
 * (text format 0.0.4) and the textfile collector of node_exporter, which
 * reads every *.prom file of its directory on each scrape and rejects
 * files with timestamps or with a family's samples split apart.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

typedef struct sample {
	char *labels; /* rendered: `a="x",b="y"` (without braces), or "" */
	double v;
} sample;

typedef struct family {
	char *name, *help;
	gk_metric_type type;
	sample *s;
	size_t n, cap;
} family;

struct gk_metrics {
	char *common; /* rendered labels put on every sample */
	family *f;
	size_t n, cap;
};

/* [a-zA-Z_:][a-zA-Z0-9_:]* for metric names; no ':' in label names. */
static int valid_name(const char *s, int colon)
{
	if (!*s || (*s >= '0' && *s <= '9'))
		return 0;
	for (; *s; s++) {
		char c = *s;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || (colon && c == ':')))
			return 0;
	}
	return 1;
}

/* Append `key="value"` to *out, escaping \, " and newline in the value. */
static int render_label(char **out, const char *key, const char *val,
			gk_err *err)
{
	size_t have = *out ? strlen(*out) : 0;
	size_t need = have + strlen(key) + 2 * strlen(val) + 6;
	char *p = realloc(*out, need);

	if (!p)
		return gk_err_sys(err, ENOMEM, "metrics");
	*out = p;
	p += have;
	if (have)
		*p++ = ',';
	p += sprintf(p, "%s=\"", key);
	for (; *val; val++) {
		if (*val == '\\' || *val == '"')
			*p++ = '\\', *p++ = *val;
		else if (*val == '\n')
			*p++ = '\\', *p++ = 'n';
		else
			*p++ = *val;
	}
	*p++ = '"';
	*p = '\0';
	return 0;
}

static int render_labels(char **out, const char *const *kv, gk_err *err)
{
	for (; kv && kv[0]; kv += 2) {
		if (!kv[1])
			return gk_errf(err, "metric label '%s': no value", kv[0]);
		if (!valid_name(kv[0], 0) || !strncmp(kv[0], "__", 2))
			return gk_errf(err, "metric label '%s': not a valid label name",
				       kv[0]);
		if (render_label(out, kv[0], kv[1], err) < 0)
			return -1;
	}
	return 0;
}

int gk_metrics_new(gk_metrics **out, const char *const *labels, gk_err *err)
{
	gk_metrics *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return gk_err_sys(err, ENOMEM, "metrics");
	if (render_labels(&m->common, labels, err) < 0) {
		gk_metrics_free(m);
		return -1;
	}
	*out = m;
	return 0;
}

void gk_metrics_free(gk_metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++) {
		for (size_t j = 0; j < m->f[i].n; j++)
			free(m->f[i].s[j].labels);
		free(m->f[i].s);
		free(m->f[i].name);
		free(m->f[i].help);
	}
	free(m->f);
	free(m->common);
	free(m);
}

static family *find_family(gk_metrics *m, const char *name, gk_metric_type type,
			   const char *help, gk_err *err)
{
	for (size_t i = 0; i < m->n; i++) {
		if (strcmp(m->f[i].name, name))
			continue;
		if (m->f[i].type != type) {
			gk_errf(err, "metric '%s': set as a %s and a %s", name,
				m->f[i].type == GK_METRIC_COUNTER ? "counter" : "gauge",
				type == GK_METRIC_COUNTER ? "counter" : "gauge");
			return NULL;
		}
		return &m->f[i];
	}
	if (!valid_name(name, 1)) {
		gk_errf(err, "metric '%s': not a valid metric name", name);
		return NULL;
	}
	/* Prometheus conventions: counters end in _total, and nothing else does. */
	size_t len = strlen(name);
	int total = len > 6 && !strcmp(name + len - 6, "_total");
	if (total != (type == GK_METRIC_COUNTER)) {
		gk_errf(err, "metric '%s': %s", name,
			total ? "only counters end in _total"
			      : "a counter's name ends in _total");
		return NULL;
	}
	if (GK_GROW(m->f, m->cap, m->n + 1, "metrics", err) < 0)
		return NULL;
	family *f = &m->f[m->n];
	memset(f, 0, sizeof(*f));
	f->name = strdup(name);
	f->help = strdup(help ? help : "");
	f->type = type;
	if (!f->name || !f->help) {
		free(f->name);
		free(f->help);
		gk_err_sys(err, ENOMEM, "metrics");
		return NULL;
	}
	m->n++;
	return f;
}

int gk_metrics_set(gk_metrics *m, const char *name, gk_metric_type type,
		   const char *help, const char *const *labels, double v,
		   gk_err *err)
{
	char *l = NULL;
	family *f = find_family(m, name, type, help, err);

	if (!f)
		return -1;
	if (type == GK_METRIC_COUNTER && !(v >= 0))
		return gk_errf(err, "metric '%s': a counter cannot be %g", name, v);
	if (render_labels(&l, labels, err) < 0) {
		free(l);
		return -1;
	}
	if (!l && !(l = strdup("")))
		return gk_err_sys(err, ENOMEM, "metrics");
	for (size_t j = 0; j < f->n; j++) {
		if (!strcmp(f->s[j].labels, l)) {
			f->s[j].v = v;
			free(l);
			return 0;
		}
	}
	if (GK_GROW(f->s, f->cap, f->n + 1, "metrics", err) < 0) {
		free(l);
		return -1;
	}
	f->s[f->n].labels = l;
	f->s[f->n].v = v;
	f->n++;
	return 0;
}

static void put_value(FILE *fp, double v)
{
	if (isnan(v))
		fputs("NaN", fp);
	else if (isinf(v))
		fputs(v > 0 ? "+Inf" : "-Inf", fp);
	else if (v == (double)(int64_t)v && fabs(v) < 9e15)
		fprintf(fp, "%lld", (long long)v);
	else
		fprintf(fp, "%.17g", v);
}

static void put_help(FILE *fp, const char *s)
{
	/* HELP text escapes \ and newline only. */
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", fp);
		else if (*s == '\n')
			fputs("\\n", fp);
		else
			fputc(*s, fp);
	}
}

/* The exposition text; run, when not NULL, is one more rendered label. */
static int format(const gk_metrics *m, FILE *fp, const char *run)
{
	for (size_t i = 0; i < m->n; i++) {
		const family *f = &m->f[i];
		fprintf(fp, "# HELP %s ", f->name);
		put_help(fp, f->help);
		fprintf(fp, "\n# TYPE %s %s\n", f->name,
			f->type == GK_METRIC_COUNTER ? "counter" : "gauge");
		for (size_t j = 0; j < f->n; j++) {
			const char *l[] = {run, m->common, f->s[j].labels};
			fputs(f->name, fp);
			const char *sep = "{";
			for (size_t k = 0; k < GK_ARRAY_SIZE(l); k++) {
				if (l[k] && *l[k]) {
					fprintf(fp, "%s%s", sep, l[k]);
					sep = ",";
				}
			}
			fputs(*sep == ',' ? "} " : " ", fp);
			put_value(fp, f->s[j].v);
			fputc('\n', fp);
		}
	}
	return ferror(fp) ? -1 : 0;
}

int gk_metrics_format(const gk_metrics *m, FILE *fp)
{
	return format(m, fp, NULL);
}

int gk_metrics_check(const char *path, gk_err *err)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return gk_errf(err, "metrics file '%s' is a directory (name a file in it, such "
			       "as '%s/train.prom')", path, path);
	if (stat(path, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
		return 0;
	char head[8] = {0};
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return gk_err_sys(err, errno, "open '%s'", path);
	ssize_t n = read(fd, head, sizeof(head) - 1);
	close(fd);
	if (n < 0)
		return gk_err_sys(err, errno, "read '%s'", path);
	if (strncmp(head, "# HELP ", 7) && strncmp(head, "# TYPE ", 7))
		return gk_errf(err, "metrics file '%s' exists and holds something else "
			       "(it does not start with '# HELP' or '# TYPE'): not replaced",
			       path);
	return 0;
}

int gk_metrics_write(const gk_metrics *m, const char *path, gk_err *err)
{
	if (gk_metrics_check(path, err) < 0)
		return -1;
	/* run="<the file's name less .prom>" */
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	size_t n = strlen(base);
	if (n > 5 && !strcmp(base + n - 5, ".prom"))
		n -= 5;
	char *stem = strndup(base, n), *run = NULL;
	if (!stem)
		return gk_err_sys(err, ENOMEM, "write '%s'", path);
	const char *lab[] = {"run", stem, NULL};
	int rc = render_labels(&run, lab, err);
	free(stem);
	if (rc < 0)
		return -1;
	/*
	 * A FIFO is written through (gk_atomic_open), but one with no reader
	 * would block the caller's loop in open: it is skipped instead.
	 */
	struct stat st;
	if (stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) {
		int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0) {
			int e = errno;
			free(run);
			return e == ENXIO ? gk_errf(err, "write '%s': a FIFO with no reader", path)
					  : gk_err_sys(err, e, "open '%s'", path);
		}
		close(fd);
	}
	gk_atomic *a;
	FILE *fp;
	if (gk_atomic_open(&a, path, 0644, err) < 0) {
		free(run);
		return -1;
	}
	if (!(fp = gk_atomic_fp(a, err))) {
		gk_atomic_abort(a);
		free(run);
		return -1;
	}
	if (format(m, fp, run) < 0) {
		int e = errno;
		gk_atomic_abort(a);
		free(run);
		return gk_err_sys(err, e, "write '%s'", path);
	}
	free(run);
	return gk_atomic_commit(a, err);
}
