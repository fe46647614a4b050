/*
 * ckpt-shard - split a safetensors checkpoint by size (Hugging Face
 * layout), into N shards, or into rank shards (whole tensors or row slices).
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

static const char usage[] =
	"usage: ckpt-shard [-qv] [--dry-run [--json]] [--dtype TYPE] [--keep-f32 PATTERN]...\n"
	"                  -o DIR (--max-size SIZE | --shards N | --ranks N [--slice]) IN...\n"
	"  -o, --output DIR      output directory (missing or empty)\n"
	"  --max-size SIZE       Hugging Face shards of at most SIZE (5GB = 5e9, 5GiB = 5*2^30)\n"
	"  --shards N            N shards of about equal size, same layout\n"
	"  --ranks N             N rank files, whole tensors balanced by size\n"
	"  --slice               with --ranks: split every tensor along dim 0\n"
	"  --dtype TYPE          convert float tensors to bf16, f16 or f32\n"
	"  --keep-f32 PATTERN    tensors whose name matches the glob stay (or become) F32\n"
	"  --dry-run             print the plan, write nothing\n"
	"  --json                the plan as JSON\n"
	"  -q, --quiet           no progress\n"
	"  -h, --help            this help; --version the version\n";

enum { OPT_MAX = GK_OPT_FIRST_TOOL, OPT_SHARDS, OPT_RANKS, OPT_SLICE, OPT_DRY, OPT_DTYPE, OPT_KEEP };

static const struct option longopts[] = {
	GK_CLI_LONGOPTS,
	GK_CLI_LONGOPT_JSON,
	{"output", required_argument, NULL, 'o'},
	{"max-size", required_argument, NULL, OPT_MAX},
	{"shards", required_argument, NULL, OPT_SHARDS},
	{"ranks", required_argument, NULL, OPT_RANKS},
	{"slice", no_argument, NULL, OPT_SLICE},
	{"dry-run", no_argument, NULL, OPT_DRY},
	{"dtype", required_argument, NULL, OPT_DTYPE},
	{"keep-f32", required_argument, NULL, OPT_KEEP},
	{NULL, 0, NULL, 0},
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

int main(int argc, char **argv)
{
	gk_cli cli;
	gk_err err = {0};
	const char *out = NULL;
	uint64_t max = 0;
	int64_t shards = 0, ranks = 0;
	int slice = 0, dry = 0, opt;
	gk_dtype dt = GK_DT_INVALID;
	gk_strlist keep = {0};

	gk_cli_init(&cli, "ckpt-shard", usage);
	while ((opt = getopt_long(argc, argv, "hqvo:", longopts, NULL)) != -1) {
		if (gk_cli_common(&cli, opt))
			continue;
		switch (opt) {
		case 'o':
			/* else all the work is done before the rename fails */
			if (!*optarg)
				gk_cli_usage_error(&cli, "-o: empty path");
			out = optarg;
			break;
		case OPT_MAX:
			max = gk_cli_size(&cli, "--max-size", optarg);
			if (!max)
				gk_cli_usage_error(&cli, "--max-size: must be more than 0");
			break;
		case OPT_SHARDS: shards = gk_cli_i64(&cli, "--shards", optarg, 1, 99999); break;
		case OPT_RANKS: ranks = gk_cli_i64(&cli, "--ranks", optarg, 1, 99999); break;
		case OPT_SLICE: slice = 1; break;
		case OPT_DRY: dry = 1; break;
		case OPT_DTYPE:
			if (gk_dtype_parse_float(optarg, "--dtype", &dt, &err))
				gk_cli_usage_error(&cli, "%s", err.msg);
			break;
		case OPT_KEEP:
			if (gk_strlist_push(&keep, optarg, &err))
				return gk_cli_fail(&cli, &err);
			break;
		}
	}
	if (optind >= argc)
		gk_cli_usage_error(&cli, "no input");
	if ((max != 0) + (shards != 0) + (ranks != 0) != 1)
		gk_cli_usage_error(&cli, "give one of --max-size, --shards and --ranks");
	if (slice && !ranks)
		gk_cli_usage_error(&cli, "--slice needs --ranks");
	if (!out && !dry)
		gk_cli_usage_error(&cli, "no output directory (-o DIR)");

	gk_ignore_sigxfsz();
	gk_ckpt_set *s;
	gk_ckpt_plan p;
	int status = 0;
	if (gk_ckpt_open(&s, argv + optind, (size_t)(argc - optind), &err)) {
		gk_strlist_free(&keep);
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	}
	gk_ckpt_reshard_opts o = {
		.dtype = dt, .keep_f32 = keep.v, .nkeep = keep.n,
		.max_size = max, .shards = (size_t)shards, .ranks = (size_t)ranks,
		.slice = slice, .dry_run = dry,
		.progress = cli.quiet ? NULL : "ckpt-shard",
	};
	if (gk_ckpt_reshard(s, &o, out, &p, &err)) {
		status = gk_cli_fail(&cli, &err);
	} else if (dry) {
		print_plan(s, &p, cli.json);
		gk_ckpt_plan_free(&p);
	}
	gk_ckpt_close(s);
	gk_strlist_free(&keep);
	return gk_cli_finish(&cli, status);
}
