/*
 * ckpt-merge - merge safetensors checkpoints (HF layout, rank shards, plain
 * files, step directories) into one file or another sharding.
 */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt.h"

static const char usage[] =
	"usage: ckpt-merge [-qv] [--dtype TYPE] [--keep-f32 PATTERN]... [--max-size SIZE]\n"
	"                  [--verify] -o OUT IN...\n"
	"       ckpt-merge --check [-q] IN...\n"
	"       ckpt-merge --list [--json] IN...\n"
	"  -o, --output OUT      file (or - for stdout); a directory with --max-size\n"
	"  --dtype TYPE          convert float tensors to bf16, f16 or f32 (round to nearest even)\n"
	"  --keep-f32 PATTERN    tensors whose name matches the glob stay (or become) F32\n"
	"  --max-size SIZE       write the Hugging Face sharded layout into OUT\n"
	"  --verify              re-read the output and compare it with the inputs\n"
	"  --check               validate the inputs only\n"
	"  --list                print name, dtype, shape, bytes and file of every tensor\n"
	"  --json                machine-readable --list\n"
	"  -q, --quiet           no progress or summary\n"
	"  -h, --help            this help; --version the version\n";

enum { OPT_DTYPE = GK_OPT_FIRST_TOOL, OPT_KEEP, OPT_MAX, OPT_CHECK, OPT_LIST, OPT_VERIFY };

static const struct option longopts[] = {
	GK_CLI_LONGOPTS,
	GK_CLI_LONGOPT_JSON,
	{"output", required_argument, NULL, 'o'},
	{"dtype", required_argument, NULL, OPT_DTYPE},
	{"keep-f32", required_argument, NULL, OPT_KEEP},
	{"max-size", required_argument, NULL, OPT_MAX},
	{"check", no_argument, NULL, OPT_CHECK},
	{"list", no_argument, NULL, OPT_LIST},
	{"verify", no_argument, NULL, OPT_VERIFY},
	{NULL, 0, NULL, 0},
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

int main(int argc, char **argv)
{
	gk_cli cli;
	gk_err err = {0};
	const char *out = NULL;
	gk_dtype dt = GK_DT_INVALID;
	gk_strlist keep = {0};
	uint64_t max = 0;
	int check = 0, do_list = 0, verify = 0, opt;

	gk_cli_init(&cli, "ckpt-merge", usage);
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
		case OPT_DTYPE:
			if (gk_dtype_parse_float(optarg, "--dtype", &dt, &err))
				gk_cli_usage_error(&cli, "%s", err.msg);
			break;
		case OPT_KEEP:
			if (gk_strlist_push(&keep, optarg, &err))
				return gk_cli_fail(&cli, &err);
			break;
		case OPT_MAX:
			max = gk_cli_size(&cli, "--max-size", optarg);
			if (!max)
				gk_cli_usage_error(&cli, "--max-size: must be more than 0");
			break;
		case OPT_CHECK: check = 1; break;
		case OPT_LIST: do_list = 1; break;
		case OPT_VERIFY: verify = 1; break;
		}
	}
	if (optind >= argc)
		gk_cli_usage_error(&cli, "no input");
	if (check + do_list > 1 || ((check || do_list) && out))
		gk_cli_usage_error(&cli, "--check, --list and -o exclude each other");
	if (!check && !do_list && !out)
		gk_cli_usage_error(&cli, "no output (-o OUT)");
	if (max && out && strcmp(out, "-") == 0)
		gk_cli_usage_error(&cli, "--max-size writes a directory, not standard output");

	gk_ignore_sigxfsz();
	gk_ckpt_set *s;
	int status = 0;
	if (gk_ckpt_open(&s, argv + optind, (size_t)(argc - optind), &err)) {
		gk_strlist_free(&keep);
		return gk_cli_finish(&cli, gk_cli_fail(&cli, &err));
	}
	if (check) {
		if (gk_ckpt_verify_set(s, &err))
			status = gk_cli_fail(&cli, &err);
		if (!status && !cli.quiet)
			printf("ok: %zu tensors, %" PRIu64 " bytes in %zu files\n", s->n, s->bytes,
			       s->nfiles);
	} else if (do_list) {
		list(s, cli.json);
	} else {
		gk_ckpt_reshard_opts o = {
			.dtype = dt, .keep_f32 = keep.v, .nkeep = keep.n,
			.max_size = max, .verify = verify,
			.progress = !cli.quiet && strcmp(out, "-") != 0 ? "ckpt-merge" : NULL,
		};
		if (gk_ckpt_reshard(s, &o, out, NULL, &err))
			status = gk_cli_fail(&cli, &err);
	}
	gk_ckpt_close(s);
	gk_strlist_free(&keep);
	return gk_cli_finish(&cli, status);
}
