/*
 * optable.c - option tables: one row per option drives getopt_long's
 * list, the summary of --help, the parsing of each argument into its
 * field, and what the ranks of a job compare (core.h, "An option table").
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static size_t rows(const gk_optdef *t)
{
	size_t n = 0;
	while (t[n].kind != GK_OPTK_END)
		n++;
	return n;
}

static int takes_arg(const gk_optdef *d)
{
	return d->kind != GK_OPTK_FLAG && d->kind != GK_OPTK_SECTION;
}

int gk_optable_defaults(const gk_optdef *t, void *base, gk_err *err)
{
	for (size_t i = 0; t[i].kind != GK_OPTK_END; i++)
		if (t[i].def && gk_optable_set(&t[i], base, t[i].def, err) < 0)
			return gk_err_prefix(err, "the default of --%s", t[i].name);
	return 0;
}

const gk_optdef *gk_optable_find(const gk_optdef *t, int opt)
{
	size_t n = rows(t);
	if (opt >= GK_OPT_FIRST_TOOL && (size_t)(opt - GK_OPT_FIRST_TOOL) < n)
		return &t[opt - GK_OPT_FIRST_TOOL];
	for (size_t i = 0; opt > 0 && opt < 128 && i < n; i++)
		if (t[i].kind != GK_OPTK_SECTION && t[i].short_name == opt)
			return &t[i];
	return NULL;
}

struct option *gk_optable_longopts(const gk_optdef *t, int json, char **shorts)
{
	static const struct option common[] = {GK_CLI_LONGOPTS, GK_CLI_LONGOPT_JSON};
	size_t n = rows(t), ncommon = GK_ARRAY_SIZE(common) - !json, k = 0;
	struct option *o = calloc(ncommon + n + 1, sizeof(*o));
	char *sh = malloc(3 + 2 * n + 1), *p = sh;
	if (!o || !sh) {
		free(o);
		free(sh);
		return NULL;
	}
	memcpy(o, common, ncommon * sizeof(*o));
	k = ncommon;
	p += sprintf(p, "hqv");
	for (size_t i = 0; i < n; i++) {
		if (t[i].kind == GK_OPTK_SECTION)
			continue;
		o[k++] = (struct option){t[i].name, takes_arg(&t[i]) ? required_argument : no_argument,
					 NULL, t[i].short_name ? t[i].short_name
							       : GK_OPT_FIRST_TOOL + (int)i};
		if (t[i].short_name) {
			*p++ = t[i].short_name;
			if (takes_arg(&t[i]))
				*p++ = ':';
		}
	}
	*p = '\0';
	*shorts = sh;
	return o;
}

char *gk_optable_usage(const gk_optdef *t, const char *synopsis, const char *tail)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fputs(synopsis, f);
	for (size_t i = 0; t[i].kind != GK_OPTK_END; i++) {
		const gk_optdef *d = &t[i];
		if (d->kind == GK_OPTK_SECTION) {
			fprintf(f, "%s:\n", d->help);
			continue;
		}
		/* "  -b, --batch B" or "  --seed N", the help from column 24 */
		int w = 0;
		if (d->short_name)
			w += fprintf(f, "  -%c, ", d->short_name) - 2;
		else
			fputs("  ", f);
		w += fprintf(f, "--%s%s%s", d->name, d->arg ? " " : "", d->arg ? d->arg : "");
		fprintf(f, "%*s", w < 21 ? 22 - w : 2, "");
		/* continuation lines under the first */
		const char *h = d->help;
		for (const char *nl; (nl = strchr(h, '\n')); h = nl + 1)
			fprintf(f, "%.*s\n%24s", (int)(nl - h), h, "");
		fputs(h, f);
		if (d->def)
			fprintf(f, " (default %s)", d->def);
		fputc('\n', f);
	}
	fputs(tail, f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static void put_int(void *field, size_t size, int64_t v)
{
	if (size == sizeof(int64_t)) {
		int64_t x = v;
		memcpy(field, &x, size);
	} else if (size == sizeof(int32_t)) {
		int32_t x = (int32_t)v;
		memcpy(field, &x, size);
	}
}

static int64_t get_int(const void *field, size_t size)
{
	if (size == sizeof(int64_t)) {
		int64_t x;
		memcpy(&x, field, size);
		return x;
	}
	if (size == sizeof(int32_t)) {
		int32_t x;
		memcpy(&x, field, size);
		return x;
	}
	return 0;
}

int gk_optable_set(const gk_optdef *d, void *base, const char *s, gk_err *err)
{
	char opt[64];
	void *field = (char *)base + d->off;
	snprintf(opt, sizeof(opt), "--%s", d->name);
	switch (d->kind) {
	case GK_OPTK_FLAG:
		put_int(field, d->size, d->set);
		return 0;
	case GK_OPTK_INT: {
		int64_t v;
		if (gk_parse_i64(s, d->imin, d->imax, &v, opt, err) < 0)
			return -1;
		put_int(field, d->size, v);
		return 0;
	}
	case GK_OPTK_UINT: {
		uint64_t v;
		if (gk_parse_u64(s, d->max >= 1.8e19 ? UINT64_MAX : (uint64_t)d->max, &v, opt,
				 err) < 0)
			return -1;
		memcpy(field, &v, sizeof(v));
		return 0;
	}
	case GK_OPTK_NUM: {
		double v;
		if (gk_parse_double(s, d->min, d->max, &v, opt, err) < 0)
			return -1;
		if (d->size == sizeof(float)) {
			float x = (float)v;
			memcpy(field, &x, sizeof(x));
		} else {
			memcpy(field, &v, sizeof(v));
		}
		return 0;
	}
	case GK_OPTK_SIZE: {
		uint64_t v;
		if (gk_parse_size(s, &v, opt, err) < 0)
			return -1;
		memcpy(field, &v, sizeof(v));
		return 0;
	}
	case GK_OPTK_STR:
		if (d->set && !*s)
			return gk_errf(err, "%s '': an empty %s", opt,
				       d->arg && !strcmp(d->arg, "FILE") ? "file name" :
				       d->arg && !strcmp(d->arg, "DIR") ? "directory name" : "value");
		memcpy(field, &s, sizeof(s));
		return 0;
	case GK_OPTK_ENUM: {
		int v = d->parse(s);
		if (v < 0)
			return gk_errf(err, "%s '%s': %s", opt, s, d->names);
		put_int(field, d->size, v);
		return 0;
	}
	case GK_OPTK_CUSTOM:
		return d->custom(opt, s, field, err);
	default:
		return gk_errf(err, "%s: not an option", opt);
	}
}

uint64_t gk_optable_value(const gk_optdef *d, const void *base)
{
	const void *field = (const char *)base + d->off;
	switch (d->kind) {
	case GK_OPTK_STR: {
		const char *s;
		memcpy(&s, field, sizeof(s));
		return s ? gk_xxh3(s, strlen(s)) ^ 1 : 0;
	}
	case GK_OPTK_NUM: {
		double v;
		uint64_t b;
		if (d->size == sizeof(float)) {
			float x;
			memcpy(&x, field, sizeof(x));
			v = x;
		} else {
			memcpy(&v, field, sizeof(v));
		}
		v = v == 0 ? 0 : v; /* -0 is the setting 0 */
		memcpy(&b, &v, sizeof(b));
		return b;
	}
	case GK_OPTK_UINT:
	case GK_OPTK_SIZE: {
		uint64_t v;
		memcpy(&v, field, sizeof(v));
		return v;
	}
	case GK_OPTK_CUSTOM:
	default: {
		/* custom fields are integers or doubles of their size: bits */
		uint64_t v = 0;
		if (d->kind == GK_OPTK_CUSTOM && d->size == sizeof(uint64_t)) {
			memcpy(&v, field, sizeof(v));
			return v;
		}
		return (uint64_t)get_int(field, d->size);
	}
	}
}

int gk_optable_parse(gk_cli *cli, const gk_optdef *t, int flags, void *base, int argc,
		     char **argv, const char **args)
{
	gk_err err = {0};
	char *shorts = NULL;
	struct option *longopts = gk_optable_longopts(t, 1, &shorts);
	if (!longopts)
		gk_err_sys(&err, ENOMEM, "options");
	if (!longopts || gk_optable_defaults(t, base, &err) < 0)
		exit(gk_cli_fail(cli, &err));
	int c;
	while ((c = getopt_long(argc, argv, shorts, longopts, NULL)) != -1) {
		if (gk_cli_common(cli, c))
			continue;
		const gk_optdef *d = gk_optable_find(t, c);
		if (!d)
			gk_cli_usage_error(cli, "unknown option");
		if (gk_optable_set(d, base, optarg, &err) < 0) {
			if (err.sys) /* no memory: a failure, not bad usage */
				exit(gk_cli_fail(cli, &err));
			char name[72];
			int n = snprintf(name, sizeof(name), "--%s", d->name);
			if ((flags & GK_OPTABLE_SHORT_NAMES) && d->short_name &&
			    strncmp(err.msg, name, (size_t)n) == 0)
				gk_cli_usage_error(cli, "-%c%s", d->short_name, err.msg + n);
			gk_cli_usage_error(cli, "%s", err.msg);
		}
		if (args)
			args[d - t] = optarg ? optarg : "";
	}
	free(longopts);
	free(shorts);
	return optind;
}
