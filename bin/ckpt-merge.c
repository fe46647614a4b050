/*
 * ckpt-merge - merge safetensors checkpoints (HF layout, rank shards, plain
 * files, step directories) into one file or another sharding.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

static const char synopsis[] =
	"usage: ckpt-merge [-qv] [--dtype TYPE] [--keep-f32 PATTERN]... [--max-size SIZE]\n"
	"                  [--verify] -o OUT IN...\n"
	"       ckpt-merge --check [-q] IN...\n"
	"       ckpt-merge --list [--json] IN...\n";

/* the options every tool has (GK_CLI_LONGOPTS), after the table's */
static const char common[] =
	"  --json                machine-readable --list\n"
	"  -q, --quiet           no progress or summary\n"
	"  -v, --verbose         accepted, as by every gpukit tool\n"
	"  -h, --help            this help\n"
	"  --version             the version\n";

/* What the command line asks for. */
typedef struct args {
	gk_ckpt_reshard_opts o; /* --dtype --max-size --verify */
	gk_strlist keep;        /* --keep-f32, each one */
	const char *out;
	int check, list;
} args;

static gk_cli cli;

#define FLAG(nm, f, h) {.kind = GK_OPTK_FLAG, .name = nm, GK_OPTF(args, f), .set = 1, .help = h}
#define CUSTOM(nm, sh, a, f, fn, h) \
	{.kind = GK_OPTK_CUSTOM, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), \
	 .custom = fn, .help = h}

/*
 * ckpt-merge's options, stated once: getopt's list, the summary of --help
 * and the parser of every argument. ckpt-merge(1) documents each row
 * (t3000 checks both ways).
 */
static const gk_optdef options[] = {
	CUSTOM("output", 'o', "OUT", out, gk_ckpt_opt_output,
	       "file (or - for stdout); a directory with --max-size"),
	CUSTOM("dtype", 0, "TYPE", o.dtype, gk_ckpt_opt_dtype,
	       "convert float tensors to bf16, f16 or f32 (round to nearest even)"),
	CUSTOM("keep-f32", 0, "PATTERN", keep, gk_ckpt_opt_keep,
	       "tensors whose name matches the glob stay (or become) F32"),
	CUSTOM("max-size", 0, "SIZE", o.max_size, gk_ckpt_opt_max_size,
	       "write the Hugging Face sharded layout into OUT"),
	FLAG("verify", o.verify, "re-read the output and compare it with the inputs"),
	FLAG("check", check, "validate the inputs only"),
	FLAG("list", list, "print name, dtype, shape, bytes and file of every tensor"),
	{.kind = GK_OPTK_END},
};

/*
 * A name as the table prints it: control bytes as \xHH, so that a
 * checkpoint's tensor names cannot drive the terminal (--json escapes
 * them as JSON does). Cut to fit buf.
 */
static const char *printable(const char *s, char *buf, size_t n)
{
	size_t o = 0;
	for (; *s && o + 5 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	buf[o] = '\0';
	return buf;
}

static void list(const gk_ckpt_set *s, int json)
{
	json_t *arr = json ? json_array() : NULL;
	char shape[256], name[1024], path[4096];
	if (!json)
		printf("%-48s %-8s %-20s %14s  %s\n", "NAME", "DTYPE", "SHAPE", "BYTES", "FILE");
	for (size_t i = 0; i < s->n; i++) {
		const gk_ckpt_entry *e = &s->e[i];
		const char *file = s->files[e->parts[0].file]->path;
		if (json) {
			json_t *sh = json_array(), *files = json_array();
			for (int d = 0; d < e->ndim; d++)
				json_array_append_new(sh, json_integer((json_int_t)e->shape[d]));
			for (size_t p = 0; p < e->nparts; p++)
				json_array_append_new(files, json_string(s->files[e->parts[p].file]->path));
			json_t *o = json_pack("{s:s,s:s,s:o,s:I,s:o}", "name", e->name, "dtype",
					      gk_dtype_name(e->dtype), "shape", sh, "bytes",
					      (json_int_t)e->bytes, "files", files);
			json_array_append_new(arr, o);
			continue;
		}
		gk_st_shape_str(e->shape, e->ndim, shape, sizeof(shape));
		printf("%-48s %-8s %-20s %14" PRIu64 "  %s%s\n",
		       printable(e->name, name, sizeof(name)), gk_dtype_name(e->dtype), shape,
		       e->bytes, printable(file, path, sizeof(path)),
		       e->nparts > 1 ? " (+ slices)" : "");
	}
	if (json) {
		gk_json_dump(stdout, arr, 1, NULL);
		json_decref(arr);
	}
}

/* Parse the command line into a; argv[*first...] are the inputs. */
static void parse_args(int argc, char **argv, args *a, int *first)
{
	memset(a, 0, sizeof(*a));
	a->o.dtype = GK_DT_INVALID;
	optind = gk_optable_parse(&cli, options, 0, a, argc, argv, NULL);
	if (optind >= argc)
		gk_cli_usage_error(&cli, "no input");
	if (a->check + a->list > 1 || ((a->check || a->list) && a->out))
		gk_cli_usage_error(&cli, "--check, --list and -o exclude each other");
	if (!a->check && !a->list && !a->out)
		gk_cli_usage_error(&cli, "no output (-o OUT)");
	if (a->o.max_size && a->out && strcmp(a->out, "-") == 0)
		gk_cli_usage_error(&cli, "--max-size writes a directory, not standard output");
	a->o.keep_f32 = a->keep.v;
	a->o.nkeep = a->keep.n;
	a->o.progress = !cli.quiet && a->out && strcmp(a->out, "-") != 0 ? "ckpt-merge" : NULL;
	*first = optind;
}

int main(int argc, char **argv)
{
	gk_err err = {0};
	args a;
	int first;
	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "ckpt-merge", usage ? usage : synopsis);
	parse_args(argc, argv, &a, &first);

	gk_ignore_sigxfsz();
	gk_ckpt_set *s;
	int status = 0;
	if (gk_ckpt_open(&s, argv + first, (size_t)(argc - first), &err)) {
		gk_strlist_free(&a.keep);
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	}
	if (a.check) {
		if (gk_ckpt_verify_set(s, &err))
			status = gk_cli_fail(&cli, &err);
		if (!status && !cli.quiet)
			printf("ok: %zu tensors, %" PRIu64 " bytes in %zu files\n", s->n, s->bytes,
			       s->nfiles);
	} else if (a.list) {
		list(s, cli.json);
	} else if (gk_ckpt_reshard(s, &a.o, a.out, NULL, &err)) {
		status = gk_cli_fail(&cli, &err);
	}
	gk_ckpt_close(s);
	gk_strlist_free(&a.keep);
	return gk_cli_finish(&cli, status);
}
