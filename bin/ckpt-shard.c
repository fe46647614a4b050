/*
 * ckpt-shard - split a safetensors checkpoint by size (Hugging Face
 * layout), into N shards, or into rank shards (whole tensors or row slices).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

static const char synopsis[] =
	"usage: ckpt-shard [-qv] [--dry-run [--json]] [--dtype TYPE] [--keep-f32 PATTERN]...\n"
	"                  -o DIR (--max-size SIZE | --shards N | --ranks N [--slice]) IN...\n";

/* the options every tool has (GK_CLI_LONGOPTS), after the table's */
static const char common[] =
	"  --json                the plan as JSON\n"
	"  -q, --quiet           no progress\n"
	"  -v, --verbose         accepted, as by every gpukit tool\n"
	"  -h, --help            this help\n"
	"  --version             the version\n";

/* What the command line asks for. */
typedef struct args {
	gk_ckpt_reshard_opts o; /* the layout, --dtype, --dry-run */
	gk_strlist keep;        /* --keep-f32, each one */
	const char *out;
} args;

static gk_cli cli;

#define INT(nm, a, f, lo, hi, h) \
	{.kind = GK_OPTK_INT, .name = nm, .arg = a, GK_OPTF(args, f), .imin = lo, .imax = hi, \
	 .help = h}
#define FLAG(nm, f, h) {.kind = GK_OPTK_FLAG, .name = nm, GK_OPTF(args, f), .set = 1, .help = h}
#define CUSTOM(nm, sh, a, f, fn, h) \
	{.kind = GK_OPTK_CUSTOM, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), \
	 .custom = fn, .help = h}

/*
 * ckpt-shard's options, stated once: getopt's list, the summary of --help
 * and the parser of every argument. ckpt-shard(1) documents each row
 * (t3000 checks both ways).
 */
static const gk_optdef options[] = {
	CUSTOM("output", 'o', "DIR", out, gk_ckpt_opt_output, "output directory (missing or empty)"),
	CUSTOM("max-size", 0, "SIZE", o.max_size, gk_ckpt_opt_max_size,
	       "Hugging Face shards of at most SIZE (5GB = 5e9, 5GiB = 5*2^30)"),
	INT("shards", "N", o.shards, 1, 99999, "N shards of about equal size, same layout"),
	INT("ranks", "N", o.ranks, 1, 99999, "N rank files, whole tensors balanced by size"),
	FLAG("slice", o.slice, "with --ranks: split every tensor along dim 0"),
	CUSTOM("dtype", 0, "TYPE", o.dtype, gk_ckpt_opt_dtype,
	       "convert float tensors to bf16, f16 or f32"),
	CUSTOM("keep-f32", 0, "PATTERN", keep, gk_ckpt_opt_keep,
	       "tensors whose name matches the glob stay (or become) F32"),
	FLAG("dry-run", o.dry_run, "print the plan, write nothing"),
	{.kind = GK_OPTK_END},
};

static void print_plan(const gk_ckpt_set *s, const gk_ckpt_plan *p, int json)
{
	if (json) {
		json_t *files = json_array();
		for (size_t k = 0; k < p->n; k++) {
			json_t *names = json_array();
			for (size_t i = 0; i < p->f[k].n; i++) {
				const gk_ckpt_item *it = &p->f[k].items[i];
				json_t *t = json_pack("{s:s}", "name", s->e[it->entry].name);
				if (it->sliced) {
					json_object_set_new(t, "start", json_integer((json_int_t)it->row0));
					json_object_set_new(t, "stop", json_integer((json_int_t)(it->row0 + it->rows)));
				}
				json_array_append_new(names, t);
			}
			json_array_append_new(files, json_pack("{s:s,s:I,s:I,s:o}", "file", p->f[k].name,
				"tensors", (json_int_t)p->f[k].n, "bytes", (json_int_t)p->f[k].bytes,
				"contents", names));
		}
		json_t *j = json_pack("{s:I,s:b,s:o}", "total_size", (json_int_t)p->total,
				      "index", p->index, "files", files);
		gk_json_dump(stdout, j, 1, NULL);
		json_decref(j);
		return;
	}
	printf("%-44s %8s %16s\n", "FILE", "TENSORS", "BYTES");
	for (size_t k = 0; k < p->n; k++)
		printf("%-44s %8zu %16" PRIu64 "\n", p->f[k].name, p->f[k].n, p->f[k].bytes);
	if (p->index)
		printf("%-44s %8zu %16" PRIu64 "\n", GK_CKPT_INDEX, s->n, p->total);
}

/* Parse the command line into a; argv[*first...] are the inputs. */
static void parse_args(int argc, char **argv, args *a, int *first)
{
	memset(a, 0, sizeof(*a));
	a->o.dtype = GK_DT_INVALID;
	optind = gk_optable_parse(&cli, options, 0, a, argc, argv, NULL);
	const gk_ckpt_reshard_opts *o = &a->o;
	if (optind >= argc)
		gk_cli_usage_error(&cli, "no input");
	if ((o->max_size != 0) + (o->shards != 0) + (o->ranks != 0) != 1)
		gk_cli_usage_error(&cli, "give one of --max-size, --shards and --ranks");
	if (o->slice && !o->ranks)
		gk_cli_usage_error(&cli, "--slice needs --ranks");
	if (!a->out && !o->dry_run)
		gk_cli_usage_error(&cli, "no output directory (-o DIR)");
	a->o.keep_f32 = a->keep.v;
	a->o.nkeep = a->keep.n;
	a->o.progress = cli.quiet ? NULL : "ckpt-shard";
	*first = optind;
}

int main(int argc, char **argv)
{
	gk_err err = {0};
	args a;
	int first;
	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "ckpt-shard", usage ? usage : synopsis);
	parse_args(argc, argv, &a, &first);

	gk_ignore_sigxfsz();
	gk_ckpt_set *s;
	gk_ckpt_plan p;
	int status = 0;
	if (gk_ckpt_open(&s, argv + first, (size_t)(argc - first), &err)) {
		gk_strlist_free(&a.keep);
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	}
	if (gk_ckpt_reshard(s, &a.o, a.out, &p, &err)) {
		status = gk_cli_fail(&cli, &err);
	} else if (a.o.dry_run) {
		print_plan(s, &p, cli.json);
		gk_ckpt_plan_free(&p);
	}
	gk_ckpt_close(s);
	gk_strlist_free(&a.keep);
	return gk_cli_finish(&cli, status);
}
