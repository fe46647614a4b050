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
	char *sh = malloc(3 + 3 * n + 1), *p = sh;
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
		int has = !takes_arg(&t[i]) ? no_argument :
			  t[i].optional ? optional_argument : required_argument;
		o[k++] = (struct option){t[i].name, has, NULL,
					 t[i].short_name ? t[i].short_name
							 : GK_OPT_FIRST_TOOL + (int)i};
		if (t[i].short_name) {
			*p++ = t[i].short_name;
			if (has != no_argument)
				*p++ = ':';
			if (has == optional_argument)
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
		if (!d->help)
			continue;
		/* "  -b, --batch B" or "  --seed N", the help from column 24 */
		int w = 0;
		if (d->short_name)
			w += fprintf(f, "  -%c, ", d->short_name) - 2;
		else
			fputs("  ", f);
		if (d->optional)
			w += fprintf(f, "--%s[=%s]", d->name, d->arg ? d->arg : "ARG");
		else
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
	if (!s && d->optional)
		return 0; /* --name alone: the field as it is */
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

const gk_optdef *gk_optable_excluded(const gk_optdef *t, const char *const *args,
				     const gk_optdef *d)
{
	for (size_t i = 0; d->excl > 0 && t[i].kind != GK_OPTK_END; i++)
		if (&t[i] != d && t[i].kind != GK_OPTK_SECTION && t[i].excl == d->excl && args[i])
			return &t[i];
	return NULL;
}

char *gk_optable_group(const gk_optdef *t, int excl, const char *last, char *buf, size_t n)
{
	size_t m = 0, w = 0;
	for (size_t i = 0; t[i].kind != GK_OPTK_END; i++)
		m += t[i].kind != GK_OPTK_SECTION && excl > 0 && t[i].excl == excl;
	buf[0] = '\0';
	for (size_t i = 0, k = 0; t[i].kind != GK_OPTK_END && w < n; i++) {
		const gk_optdef *d = &t[i];
		if (d->kind == GK_OPTK_SECTION || excl <= 0 || d->excl != excl)
			continue;
		const char *sep = k == 0 ? "" : k + 1 == m ? last : ", ";
		int r = d->short_name ? snprintf(buf + w, n - w, "%s-%c", sep, d->short_name)
				      : snprintf(buf + w, n - w, "%s--%s", sep, d->name);
		if (r < 0)
			break;
		w += (size_t)r;
		k++;
	}
	return buf;
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

/* ---- what an unknown option was meant to be -------------------------------------- */

/*
 * The names other tools give our options (PyTorch, Hugging Face's
 * TrainingArguments, Megatron-LM, nanoGPT and llm.c), in the form rule 1
 * makes of them: a suggestion only where the table has the option.
 */
static const struct {
	const char *alias, *name;
} aliases[] = {
	{"batch-size", "batch"}, {"train-batch-size", "batch"},
	{"per-device-train-batch-size", "batch"}, {"bs", "batch"},
	{"seq-len", "seq"}, {"seq-length", "seq"}, {"sequence-length", "seq"},
	{"block-size", "seq"}, {"max-seq-len", "seq"}, {"context-length", "seq"},
	{"n-layer", "layers"}, {"n-layers", "layers"}, {"num-layers", "layers"},
	{"num-hidden-layers", "layers"},
	{"n-embd", "hidden"}, {"hidden-size", "hidden"}, {"d-model", "hidden"},
	{"n-head", "heads"}, {"num-heads", "heads"}, {"num-attention-heads", "heads"},
	{"n-positions", "positions"}, {"n-ctx", "positions"},
	{"max-position-embeddings", "positions"},
	{"vocab-size", "vocab"}, {"padded-vocab-size", "vocab"},
	{"learning-rate", "lr"}, {"min-learning-rate", "min-lr"},
	{"train-iters", "steps"}, {"max-steps", "steps"}, {"max-iters", "steps"},
	{"num-iterations", "steps"}, {"iters", "steps"},
	{"gradient-accumulation-steps", "grad-accum"}, {"accumulate-grad-batches", "grad-accum"},
	{"warmup-steps", "warmup"}, {"warmup-iters", "warmup"}, {"lr-warmup-iters", "warmup"},
	{"lr-decay-style", "schedule"}, {"lr-scheduler-type", "schedule"},
	{"clip-grad", "clip"}, {"grad-clip", "clip"}, {"max-grad-norm", "clip"},
	{"adam-beta1", "beta1"}, {"adam-beta2", "beta2"}, {"adam-eps", "eps"},
	{"adam-epsilon", "eps"},
	{"save", "ckpt-dir"}, {"save-dir", "ckpt-dir"}, {"output-dir", "ckpt-dir"},
	{"checkpoint-dir", "ckpt-dir"}, {"out-dir", "ckpt-dir"},
	{"save-interval", "ckpt-every"}, {"save-steps", "ckpt-every"},
	{"checkpoint-every", "ckpt-every"},
	{"load", "resume"}, {"resume-from-checkpoint", "resume"},
	{"eval-interval", "eval-every"}, {"eval-steps", "eval-every"},
	{"eval-iters", "eval-batches"},
	{"zero-stage", "zero"}, {"gpus", "gpus-per-node"}, {"nproc-per-node", "gpus-per-node"},
	{"tensor-model-parallel-size", "tp"}, {"pipeline-model-parallel-size", "pp"},
	{"data-parallel-size", "dp"},
	{"train-data-path", "data"}, {"data-path", "data"}, {"input-bin", "data"},
	{"input-val-bin", "val-data"}, {"val-data-path", "val-data"},
	{"bf16", "precision"}, {"fp16", "precision"}, {"dtype", "precision"},
};

/* s as rule 1 compares it: no leading dashes, up to '=', lower case, '_' as '-' */
static void normal(const char *s, char *out, size_t n)
{
	size_t k = 0;
	while (*s == '-')
		s++;
	for (; *s && *s != '=' && k + 1 < n; s++)
		out[k++] = *s == '_' ? '-' : (char)(*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s);
	out[k] = '\0';
}

/* Letters inserted, deleted, replaced or two neighbours swapped (the
 * optimal string alignment distance); both shorter than 64. */
static int distance(const char *a, const char *b)
{
	int na = (int)strlen(a), nb = (int)strlen(b);
	int d[64][64];
	for (int i = 0; i <= na; i++)
		d[i][0] = i;
	for (int j = 0; j <= nb; j++)
		d[0][j] = j;
	for (int i = 1; i <= na; i++)
		for (int j = 1; j <= nb; j++) {
			int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	return d[na][nb];
}

/* name a whole run of key's dash-separated words, or the start of key */
static int inside(const char *key, const char *name)
{
	size_t n = strlen(name);
	if (n < 2 || strlen(key) <= n)
		return 0;
	if (strncmp(key, name, n) == 0)
		return 1;
	for (const char *p = key; (p = strstr(p, name)); p++)
		if (p[-1] == '-' && (p[n] == '\0' || p[n] == '-'))
			return 1;
	return 0;
}

int gk_optable_suggest(const gk_optdef *t, const char *given, const char **names, int max)
{
	static const char *const common[] = {"help", "version", "quiet", "verbose", "json"};
	const char *cand[256];
	char norm[256][64], key[64];
	int n = 0, found = 0;
	for (size_t i = 0; i < GK_ARRAY_SIZE(common); i++)
		cand[n++] = common[i];
	for (size_t i = 0; t[i].kind != GK_OPTK_END && n < 256; i++)
		if (t[i].kind != GK_OPTK_SECTION)
			cand[n++] = t[i].name;
	for (int i = 0; i < n; i++)
		normal(cand[i], norm[i], sizeof(norm[i]));
	normal(given, key, sizeof(key));
	if (!*key || max <= 0)
		return 0;
#define ADD(i)                                                                   \
	do {                                                                     \
		int dup_ = 0;                                                    \
		for (int k_ = 0; k_ < found; k_++)                               \
			dup_ |= names[k_] == cand[i];                            \
		if (!dup_ && found < max)                                        \
			names[found++] = cand[i];                                \
	} while (0)
	/* 1: the same name but for _ and case */
	for (int i = 0; i < n; i++)
		if (!strcmp(key, norm[i]))
			ADD(i);
	/* 2: an abbreviation of several (getopt took a unique one) */
	for (int i = 0; !found && i < n; i++)
		if (!strncmp(norm[i], key, strlen(key)))
			for (int j = i; j < n; j++)
				if (!strncmp(norm[j], key, strlen(key)))
					ADD(j);
	/* 3: another tool's name for one of ours */
	for (size_t a = 0; !found && a < GK_ARRAY_SIZE(aliases); a++)
		if (!strcmp(key, aliases[a].alias))
			for (int i = 0; i < n; i++)
				if (!strcmp(norm[i], aliases[a].name))
					ADD(i);
	/* 4: the longest name that is a whole word run of it, or its start */
	size_t best = 0;
	for (int i = 0; !found && i < n; i++)
		if (inside(key, norm[i]) && strlen(norm[i]) > best)
			best = strlen(norm[i]);
	for (int i = 0; !found && best && i < n; i++)
		if (inside(key, norm[i]) && strlen(norm[i]) == best)
			ADD(i);
	/* 5: the nearest by spelling, within 1 edit up to 4 letters, 2 beyond */
	int limit = strlen(key) <= 4 ? 1 : 2, dmin = limit + 1;
	for (int i = 0; !found && i < n; i++) {
		int d = distance(key, norm[i]);
		if (d < dmin && d < (int)strlen(norm[i]))
			dmin = d;
	}
	for (int i = 0; !found && dmin <= limit && i < n; i++) {
		int d = distance(key, norm[i]);
		if (d == dmin && d < (int)strlen(norm[i]))
			ADD(i);
	}
	/* a second pass for the rest of the ties */
	for (int i = 0; found && found < max && dmin <= limit && i < n; i++)
		if (distance(key, norm[i]) == dmin && dmin < (int)strlen(norm[i]))
			ADD(i);
#undef ADD
	return found;
}

/*
 * "; did you mean --a?" or "; did you mean --a, --b or --c?" into buf,
 * "" without a suggestion.
 */
static void did_you_mean(const gk_optdef *t, const char *given, char *buf, size_t n)
{
	const char *s[3];
	int k = gk_optable_suggest(t, given, s, 3), w = 0;
	buf[0] = '\0';
	for (int i = 0; i < k && w >= 0 && (size_t)w < n; i++)
		w += snprintf(buf + w, n - (size_t)w, "%s--%s", i == 0 ? "; did you mean " :
							   i == k - 1 ? " or " : ", ", s[i]);
	if (k && w >= 0 && (size_t)w < n)
		snprintf(buf + w, n - (size_t)w, "?");
}

/*
 * getopt's '?' or ':' (opterr is 0): say which option and what is wrong
 * with it in glibc's words, with the nearest names for an unknown one. optopt is the
 * letter or the row's val, 0 for a long option getopt does not know.
 */
static _Noreturn void bad_option(const gk_cli *cli, const gk_optdef *t, int c, char **argv)
{
	char hint[256];
	const char *typed = argv[optind - 1];
	char name[72];
	const gk_optdef *d = gk_optable_find(t, optopt);
	int known = d || (optopt > 0 && strchr("hqv", optopt)) || optopt == GK_OPT_VERSION ||
		    optopt == GK_OPT_JSON;
	if (c == '?' && optopt != 0 && !known)
		gk_cli_usage_error(cli, "invalid option -- '%c'", optopt);
	/* a long option is the argument getopt just passed; a short one a letter */
	if (strncmp(typed, "--", 2) == 0)
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(typed, "="), typed);
	else
		snprintf(name, sizeof(name), "-%c", optopt);
	if (c == ':') {
		if (d && d->arg)
			gk_cli_usage_error(cli, "option '%s' requires an argument: %s %s", name,
					   name, d->arg);
		gk_cli_usage_error(cli, "option '%s' requires an argument", name);
	}
	if (optopt != 0) /* a known long option with an argument it does not take */
		gk_cli_usage_error(cli, "option '%s' doesn't allow an argument", name);
	/* an abbreviation of several: all of them, as getopt would have */
	static const char *const common[] = {"help", "version", "quiet", "verbose", "json"};
	size_t len = strlen(name + 2), w = 0, nc = GK_ARRAY_SIZE(common);
	int nabbr = 0;
	for (size_t i = 0; i < nc || t[i - nc].kind != GK_OPTK_END; i++) {
		const char *o = i < nc ? common[i] : t[i - nc].name;
		if ((i >= nc && t[i - nc].kind == GK_OPTK_SECTION) || strncmp(o, name + 2, len) != 0)
			continue;
		if (nabbr++ < 6 && w < sizeof(hint))
			w += (size_t)snprintf(hint + w, sizeof(hint) - w, "%s--%s",
					      nabbr > 1 ? ", " : "", o);
	}
	if (nabbr > 1)
		gk_cli_usage_error(cli, "option '%s' is ambiguous: %s%s", name, hint,
				   nabbr > 6 ? ", ..." : "");
	did_you_mean(t, typed, hint, sizeof(hint));
	gk_cli_usage_error(cli, "unrecognized option '%s'%s", name, hint);
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
	/* ':' first: a missing argument is ':', told apart from an unknown option */
	char *optstring = malloc(strlen(shorts) + 2);
	if (!optstring) {
		gk_err_sys(&err, ENOMEM, "options");
		exit(gk_cli_fail(cli, &err));
	}
	optstring[0] = ':';
	strcpy(optstring + 1, shorts);
	opterr = 0;
	/* which rows were given, for excl: the caller's args, or ours */
	const char **given = args ? args : calloc(rows(t) + 1, sizeof(*given));
	if (!given) {
		gk_err_sys(&err, ENOMEM, "options");
		exit(gk_cli_fail(cli, &err));
	}
	int c;
	while ((c = getopt_long(argc, argv, optstring, longopts, NULL)) != -1) {
		if (c == '?' || c == ':')
			bad_option(cli, t, c, argv);
		if (gk_cli_common(cli, c))
			continue;
		const gk_optdef *d = gk_optable_find(t, c);
		if (!d)
			gk_cli_usage_error(cli, "unknown option");
		if (gk_optable_excluded(t, given, d)) {
			char names[256];
			gk_cli_usage_error(cli, "only one of %s",
					   gk_optable_group(t, d->excl, ", ", names, sizeof(names)));
		}
		if (gk_optable_set(d, base, optarg, &err) < 0) {
			if (err.sys) /* no memory: a failure, not bad usage */
				exit(gk_cli_fail(cli, &err));
			char name[72];
			int n = snprintf(name, sizeof(name), "--%s", d->name);
			/* the short name, unless the long one was typed */
			int typed_long = strncmp(argv[optind - 1], "--", 2) == 0 ||
					 (optind >= 2 && argv[optind - 1] == optarg &&
					  strncmp(argv[optind - 2], "--", 2) == 0);
			if ((flags & GK_OPTABLE_SHORT_NAMES) && d->short_name && !typed_long &&
			    strncmp(err.msg, name, (size_t)n) == 0)
				gk_cli_usage_error(cli, "-%c%s", d->short_name, err.msg + n);
			gk_cli_usage_error(cli, "%s", err.msg);
		}
		given[d - t] = optarg ? optarg : "";
	}
	if (!args)
		free(given);
	free(longopts);
	free(shorts);
	free(optstring);
	return optind;
}
