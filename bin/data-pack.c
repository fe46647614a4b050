/*
 * data-pack - create, list, extract, verify and index WebDataset shards.
 * The work is in lib/shard; this file parses options and prints.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "shard/shard.h"

static const char synopsis[] =
	"usage: data-pack -c -o PATTERN [--max-count N] [--max-size SIZE]\n"
	"                 [--lz4[=LEVEL]] [--jobs N] [--shuffle SEED] [--no-index]\n"
	"                 [--ext EXT [--name-as-key]] [--manifest FILE]\n"
	"                 [--tokenize TOKENIZER [--eot ID|TEXT]]\n"
	"                 [-T FILE | --from-tar FILE] [DIR | FILE ...]\n"
	"       data-pack -t [--json] SHARD ...\n"
	"       data-pack -x [-C DIR] SHARD ...\n"
	"       data-pack --verify MANIFEST.json | SHARD ...\n"
	"       data-pack --index SHARD ...\n"
	"       data-pack -g KEY[.EXT] SHARD\n";

/* the options every tool has (GK_CLI_LONGOPTS), after the table's */
static const char common[] =
	"  --json                -t: one JSON object per sample\n"
	"  -q, --quiet           no progress line\n"
	"  -v, --verbose         report each shard written or verified\n"
	"  -h, --help            this help\n"
	"  --version             the version\n";

typedef struct args {
	int mode; /* 'c' 't' 'x' 'g' 'V' (verify) 'I' (index) */
	const char *out, *list, *dir, *manifest, *from_tar, *get;
	const char *file; /* -f: tar's habit */
	const char *tokenize, *eot;
	gk_shard_write_opts w;
	gk_shard_naming naming;
	int shuffle, no_index;
	uint64_t seed;
	int tarz; /* -z, -j or -J: tar's, refused with the reason */
	const char *arg[32]; /* every row's argument as given, by row */
} args;

/* One meaning across the tools: no limit is no flag. */
static int parse_max_size(const char *opt, const char *s, void *field, gk_err *err)
{
	uint64_t v;
	if (gk_parse_size(s, &v, opt, err) < 0)
		return -1;
	if (v == 0)
		return gk_errf(err, "%s: must be more than 0 (leave it out for no limit)", opt);
	memcpy(field, &v, sizeof(v));
	return 0;
}

#define MODE(nm, sh, v, h) \
	{.kind = GK_OPTK_FLAG, .name = nm, .short_name = sh, GK_OPTF(args, mode), .set = v, \
	 .excl = 1, .help = h}
#define FLAG(nm, f, h) {.kind = GK_OPTK_FLAG, .name = nm, GK_OPTF(args, f), .set = 1, .help = h}
#define STR(nm, sh, a, f, h) \
	{.kind = GK_OPTK_STR, .name = nm, .short_name = sh, .arg = a, GK_OPTF(args, f), .help = h}
#define INT(nm, a, f, lo, hi, h) \
	{.kind = GK_OPTK_INT, .name = nm, .arg = a, GK_OPTF(args, f), .imin = lo, .imax = hi, \
	 .help = h}
/* tar's compression flags: no summary line, refused with the reason */
#define TARZ(nm, sh) {.kind = GK_OPTK_FLAG, .name = nm, .short_name = sh, GK_OPTF(args, tarz), \
		      .set = sh}

/*
 * data-pack's options, stated once: getopt's list, the summary of --help
 * and the parser of every argument; the modes exclude each other.
 * data-pack(1) documents each row (t2000 checks both ways).
 */
static const gk_optdef options[] = {
	{.kind = GK_OPTK_SECTION, .help = "modes"},
	MODE("create", 'c', 'c', "create shards from directories, -T list or --from-tar"),
	MODE("list", 't', 't', "list samples: shard, key, extensions, bytes"),
	MODE("extract", 'x', 'x', "extract into -C DIR, refusing unsafe names"),
	{.kind = GK_OPTK_STR, .name = "get", .short_name = 'g', .arg = "KEY[.EXT]",
	 GK_OPTF(args, get), .excl = 1, .help = "print one sample as a tar, or one member's bytes"},
	MODE("verify", 0, 'V', "check shards against a manifest or their indexes"),
	MODE("index", 0, 'I', "write each shard's index"),
	{.kind = GK_OPTK_SECTION, .help = "options"},
	STR("output", 'o', "PATTERN", out, "shard names, e.g. out/train-%06d.tar (.tar.lz4: LZ4)"),
	STR("file", 'f', "NAME", file, "tar's spelling: -o for -c, the shard for -t and -x"),
	STR("ext", 0, "EXT", naming.ext, "extension for names without one: README -> README.EXT"),
	FLAG("name-as-key", naming.whole, "each file a sample keyed by its whole name (needs --ext)"),
	STR("tokenize", 0, "TOKENIZER", tokenize,
	    "store text (.txt, --ext) as .npy token ids of TOKENIZER"),
	STR("eot", 0, "ID|TEXT", eot, "the token ending every document (default <|endoftext|>)"),
	STR("files-from", 'T', "FILE", list, "the files to pack, one a line (-: standard input)"),
	STR("from-tar", 0, "FILE", from_tar, "repack a tar stream (-: standard input)"),
	INT("max-count", "N", w.max_count, 1, INT64_MAX, "at most N samples per shard"),
	{.kind = GK_OPTK_CUSTOM, .name = "max-size", .arg = "SIZE", GK_OPTF(args, w.max_size),
	 .custom = parse_max_size, .help = "at most SIZE bytes per shard"},
	{.kind = GK_OPTK_INT, .name = "lz4", .arg = "LEVEL", GK_OPTF(args, w.lz4_level), .imin = 0,
	 .imax = 12, .optional = 1,
	 .help = "compress each sample, LEVEL 0 fast (the default), 3 to 12 high"},
	INT("jobs", "N", w.jobs, 1, 1024, "compress and tokenize with N threads (default 1)"),
	INT("shuffle", "SEED", seed, 0, INT64_MAX, "write the samples in an order shuffled by SEED"),
	FLAG("no-index", no_index, "write no index beside the shards"),
	STR("manifest", 0, "FILE", manifest, "write the dataset manifest (JSON)"),
	STR("directory", 'C', "DIR", dir, "where -x extracts (default .)"),
	TARZ("gzip", 'z'),
	TARZ("bzip2", 'j'),
	TARZ("xz", 'J'),
	{.kind = GK_OPTK_END},
};

/* 1 when the row of that name was given */
static int given(const args *a, const char *name)
{
	for (size_t i = 0; options[i].kind != GK_OPTK_END; i++)
		if (options[i].name && !strcmp(options[i].name, name))
			return a->arg[i] != NULL;
	return 0;
}

static gk_cli cli;

static int64_t source_date_epoch(void)
{
	const char *s = getenv("SOURCE_DATE_EPOCH");
	int64_t v = 0;
	gk_err err;
	if (s && *s && gk_parse_i64(s, 0, INT64_MAX, &v, "SOURCE_DATE_EPOCH", &err) < 0)
		gk_cli_usage_error(&cli, "%s", err.msg);
	return v;
}

/*
 * Shards numbered after the last one written, left by an earlier run with
 * more of them, would be read with the new ones by a glob or a brace
 * range: say so. They are the user's files (this run did not write
 * them), so they are named, not removed.
 */
static void stale_tail(const args *a, unsigned written)
{
	gk_strlist l = {0};
	gk_err err;
	if (gk_shard_pattern_tail(a->out, a->w.first + written, &l, &err) < 0 || l.n == 0) {
		gk_strlist_free(&l);
		return;
	}
	char *first = gk_shard_name_quote(l.v[0]), *last = gk_shard_name_quote(l.v[l.n - 1]);
	char names[2 * 4096 + 16];
	if (first && last) {
		if (l.n == 1)
			snprintf(names, sizeof(names), "'%s'", first);
		else
			snprintf(names, sizeof(names), "'%s'%s'%s'", first, l.n == 2 ? ", " : " .. ",
				 last);
		gk_cli_warn(&cli, "%zu shard%s of an earlier run after the last one written: %s (a glob or brace range over '%s' would read %s too: remove %s)",
			    l.n, l.n > 1 ? "s" : "", names, a->out, l.n > 1 ? "them" : "it",
			    l.n > 1 ? "them" : "it");
	}
	free(first);
	free(last);
	gk_strlist_free(&l);
}

/*
 * A name without a key: the library says which; add the flags that pack
 * it. name is the file's (NULL: a member of a tar stream).
 */
static void nokey_hint(const args *a, const char *name, gk_err *err)
{
	char hint[600], *whole = NULL;
	gk_shard_naming w = {"EXT", 1};
	if (name && gk_shard_member_name(name, &w, &whole, NULL) < 0)
		whole = NULL;
	const char *base = name ? strrchr(name, '/') : NULL;
	base = base ? base + 1 : name;
	if (base && *base == '.')
		snprintf(hint, sizeof(hint), "--name-as-key --ext EXT packs it as '%s' (or leave it out of a -T list)",
			 whole ? whole : "_NAME.EXT");
	else if (a->naming.ext)
		snprintf(hint, sizeof(hint), "--name-as-key packs it under its whole name");
	else if (name)
		snprintf(hint, sizeof(hint), "--ext EXT packs it as '%s.EXT'; --name-as-key --ext EXT makes every file a sample keyed by its whole name",
			 name);
	else
		snprintf(hint, sizeof(hint), "--ext EXT gives such names an extension; --name-as-key --ext EXT makes every member a sample keyed by its whole name");
	free(whole);
	size_t n = strlen(err->msg);
	snprintf(err->msg + n, sizeof(err->msg) - n, ": %s", hint);
}

/*
 * --tokenize: the tokenizer, and the token --eot names (an id, or a
 * special token's text), by default its <|endoftext|>.
 */
static int open_tokenizer(const args *a, gk_tok **tok, gk_shard_tokenize *tz, gk_err *err)
{
	int64_t id = -1;
	if (gk_tok_open(tok, a->tokenize, err) < 0)
		return gk_err_prefix(err, "--tokenize");
	uint32_t vocab = gk_tok_vocab_size(*tok);
	if (!a->eot) {
		id = gk_tok_special(*tok, "<|endoftext|>");
		if (id < 0)
			return gk_errf(err, "tokenizer '%s' has no <|endoftext|> token: give --eot ID or --eot TEXT (the token that ends every document)",
				       a->tokenize);
	} else if (*a->eot >= '0' && *a->eot <= '9') {
		size_t len;
		if (gk_parse_i64(a->eot, 0, (int64_t)vocab - 1, &id, "--eot", err) < 0)
			return -1;
		if (!gk_tok_token(*tok, (uint32_t)id, &len))
			return gk_errf(err, "--eot %s: tokenizer '%s' has no token of that id",
				       a->eot, a->tokenize);
	} else if ((id = gk_tok_special(*tok, a->eot)) < 0) {
		return gk_errf(err, "--eot '%s': tokenizer '%s' has no special token of that text (give its id)",
			       a->eot, a->tokenize);
	}
	*tz = (gk_shard_tokenize){.tok = *tok, .eot = id, .ext = a->naming.ext, .jobs = a->w.jobs};
	return 0;
}

static int create(const args *a, int argc, char **argv)
{
	gk_tok *tok = NULL;
	gk_shard_tokenize tz = {0};
	gk_err err;
	gk_shard_source src = {0};
	gk_shard_writer *w;
	gk_shard_manifest man = {0};
	gk_shard_outputs outs = {0};
	gk_shard_write_opts o = a->w;
	gk_strlist skipped = {0};
	gk_progress prog;
	gk_shard_tokstats stats;
	gk_shard_tokclock clock;
	gk_shard_tokstats *st = a->tokenize && cli.verbose >= 2 ? &stats : NULL;
	int rc = 1;

	if (st)
		gk_shard_tokstats_begin(st, &clock);
	if (a->tokenize && open_tokenizer(a, &tok, &tz, &err) < 0)
		goto fail;
	tz.stats = st;
	gk_shard_tokstats_add(st, GK_TOKST_LOAD, &clock, 1);
	for (int i = 0; i < argc; i++)
		if (gk_shard_source_walk(&src, argv[i], &err) < 0)
			goto fail;
	if (a->list) {
		FILE *fp = strcmp(a->list, "-") == 0 ? stdin : fopen(a->list, "r");
		if (!fp) {
			gk_err_sys(&err, errno, "open '%s'", a->list);
			goto fail;
		}
		int r = gk_shard_source_list(&src, fp, a->list, &err);
		if (fp != stdin)
			fclose(fp);
		if (r < 0)
			goto fail;
	}
	/* As tar's "file is the archive; not dumped". */
	if (gk_shard_source_drop_outputs(&src, a->out, a->w.first, a->manifest, &skipped,
					 &err) < 0)
		goto fail;
	for (size_t i = 0; i < skipped.n; i++)
		gk_cli_warn(&cli, "'%s': an output of this run (-o or --manifest names it); not packed",
			    skipped.v[i]);
	size_t nokey;
	int nr = gk_shard_source_name(&src, &a->naming, &nokey, &err);
	if (nr == GK_SHARD_NO_KEY)
		nokey_hint(a, src.names.v[nokey], &err);
	if (nr < 0)
		goto fail;
	gk_shard_tokstats_add(st, GK_TOKST_LIST, &clock, 1);
	o.outputs = &outs;
	if (gk_shard_writer_open(&w, &o, &err) < 0)
		goto fail;
	/*
	 * Files have sizes, so the line has a total and an ETA (one stat per
	 * file, only when it is shown); a tar stream has none. In a log, a
	 * line every 10 s, and none for a run that ends sooner.
	 */
	uint64_t total = !cli.quiet && !a->from_tar ? gk_shard_source_bytes(&src) : 0;
	gk_progress_start(&prog, "data-pack", total, 1, NULL, !cli.quiet);
	gk_progress_lines(&prog, !cli.quiet, 10.0);
	gk_shard_tokenize *tzp = tok ? &tz : NULL;
	int r = a->from_tar ? gk_shard_pack_tar(w, a->from_tar, &a->naming, tzp, &prog, &err)
			    : gk_shard_pack(w, &src, a->shuffle, a->seed, tzp, &prog, &err);
	if (r == GK_SHARD_NO_KEY)
		nokey_hint(a, NULL, &err);
	gk_progress_finish(&prog);
	if (r < 0) {
		gk_shard_writer_abort(w);
		goto fail;
	}
	if (st)
		gk_shard_tokclock_start(&clock);
	if (gk_shard_writer_close(w, &man, &err) < 0)
		goto fail;
	if (tok && gk_shard_tokenize_info(&tz, &man.tok, &err) < 0)
		goto fail;
	if (a->manifest) {
		char what[4200];
		snprintf(what, sizeof(what), "manifest '%s'", a->manifest);
		if (gk_shard_outputs_check(&outs, a->manifest, what, &err) < 0 ||
		    gk_shard_manifest_write(a->manifest, &man, &err) < 0)
			goto fail;
	}
	gk_shard_tokstats_add(st, GK_TOKST_CLOSE, &clock, 1);
	stale_tail(a, (unsigned)man.n);
	if (cli.verbose)
		for (size_t i = 0; i < man.n; i++)
			fprintf(stderr, "data-pack: %s: %" PRIu64 " samples, %" PRIu64 " bytes\n",
				man.v[i].path, man.v[i].samples, man.v[i].bytes);
	if (cli.verbose && tok)
		fprintf(stderr, "data-pack: %" PRIu64 " tokens (%s)\n", tz.tokens,
			man.tok.itemsize == 2 ? "uint16" : "int32");
	if (st)
		gk_shard_tokstats_print(st, "data-pack", stderr);
	rc = 0;
	goto out;
fail:
	rc = gk_cli_fail(&cli, &err);
out:
	gk_shard_manifest_free(&man);
	gk_shard_outputs_free(&outs);
	gk_strlist_free(&skipped);
	gk_shard_source_free(&src);
	gk_tok_close(tok);
	return rc;
}

/* One sample per line: TSV with quoted names, or a JSON object (UTF-8 only). */
static int list_sample(const char *shard, const gk_shard_sample *s, gk_err *err)
{
	uint64_t bytes = 0;
	for (size_t i = 0; i < s->n; i++)
		bytes += s->m[i].size;
	if (cli.json) {
		/* JSON strings are Unicode: a name that is not UTF-8 has no spelling. */
		int utf8 = gk_shard_utf8_valid(shard) && gk_shard_utf8_valid(s->key);
		for (size_t i = 0; i < s->n; i++)
			utf8 &= gk_shard_utf8_valid(s->m[i].ext);
		if (!utf8) {
			char *q = gk_shard_name_quote(s->key);
			gk_errf(err, "list '%s': sample '%s': name not valid UTF-8, which JSON cannot hold (list it without --json)",
				shard, q ? q : "?");
			free(q);
			return -1;
		}
		json_t *members = json_array(), *o = json_pack("{s:s, s:s}", "shard", shard,
								 "key", s->key);
		for (size_t i = 0; o && members && i < s->n; i++)
			json_array_append_new(members, json_pack("{s:s, s:I, s:I}", "ext", s->m[i].ext,
								 "offset", (json_int_t)s->m[i].offset,
								 "size", (json_int_t)s->m[i].size));
		if (!o || !members) {
			json_decref(o);
			json_decref(members);
			return gk_err_sys(err, ENOMEM, "list '%s'", shard);
		}
		json_object_set_new(o, "members", members);
		json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
		json_dumpf(o, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(o);
		return 0;
	}
	char *sq = gk_shard_name_quote(shard), *kq = gk_shard_name_quote(s->key);
	if (!sq || !kq) {
		free(sq);
		free(kq);
		return gk_err_sys(err, ENOMEM, "list '%s'", shard);
	}
	printf("%s\t%s\t", sq, kq);
	free(sq);
	free(kq);
	for (size_t i = 0; i < s->n; i++) {
		char *eq = gk_shard_name_quote(s->m[i].ext);
		if (!eq)
			return gk_err_sys(err, ENOMEM, "list '%s'", shard);
		printf("%s%s", i ? "," : "", eq);
		free(eq);
	}
	printf("\t%" PRIu64 "\n", bytes);
	return 0;
}

/* -t: every sample's sizes; the data is skipped, never held. */
static int list(int argc, char **argv)
{
	gk_err err;
	for (int i = 0; i < argc; i++) {
		gk_shard_reader *r;
		const gk_shard_sample *s;
		int rc;
		if (gk_shard_reader_open(&r, argv[i], &err) < 0)
			return gk_cli_fail(&cli, &err);
		gk_shard_reader_sizes_only(r, 1);
		while ((rc = gk_shard_reader_next(r, &s, &err)) == 1)
			if (list_sample(argv[i], s, &err) < 0) {
				rc = -1;
				break;
			}
		gk_shard_reader_close(r);
		if (rc < 0)
			return gk_cli_fail(&cli, &err);
	}
	return 0;
}

static int extract(const args *a, int argc, char **argv)
{
	gk_err err;
	if (gk_mkdir_p(a->dir, &err) < 0)
		return gk_cli_fail(&cli, &err);
	int fd = open(a->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return gk_cli_failf(&cli, "open directory '%s': %s", a->dir, strerror(errno));
	int rc = 0;
	for (int i = 0; i < argc && rc == 0; i++)
		if (gk_shard_extract(argv[i], fd, a->dir, &err) < 0)
			rc = gk_cli_fail(&cli, &err);
	close(fd);
	return rc;
}

static int verify(int argc, char **argv)
{
	gk_err err;
	if (argc == 1 && strlen(argv[0]) > 5 && !strcmp(argv[0] + strlen(argv[0]) - 5, ".json")) {
		gk_shard_manifest m;
		if (gk_shard_manifest_load(argv[0], &m, &err) < 0)
			return gk_cli_fail(&cli, &err);
		int rc = 0;
		for (size_t i = 0; i < m.n && rc == 0; i++) {
			char *f = gk_shard_manifest_file(&m, i);
			if (!f || gk_shard_verify(f, &m.v[i], &err) < 0)
				rc = gk_cli_fail(&cli, &err);
			else if (cli.verbose)
				fprintf(stderr, "data-pack: %s: ok\n", f);
			free(f);
		}
		gk_shard_manifest_free(&m);
		return rc;
	}
	for (int i = 0; i < argc; i++) {
		if (gk_shard_verify(argv[i], NULL, &err) < 0)
			return gk_cli_fail(&cli, &err);
		if (cli.verbose)
			fprintf(stderr, "data-pack: %s: ok\n", argv[i]);
	}
	return 0;
}

static int index_shards(int argc, char **argv)
{
	gk_err err;
	for (int i = 0; i < argc; i++) {
		gk_shard_index idx;
		char *ip = gk_shard_index_path(argv[i]);
		int rc = gk_shard_index_build(argv[i], &idx, &err);
		if (rc == 0) {
			rc = gk_shard_index_write(ip, &idx, &err);
			gk_shard_index_free(&idx);
		}
		free(ip);
		if (rc < 0)
			return gk_cli_fail(&cli, &err);
	}
	return 0;
}

static int get(const char *what, const char *shard)
{
	gk_err err;
	if (gk_shard_get(shard, what, source_date_epoch(), STDOUT_FILENO, &err) < 0)
		return gk_cli_fail(&cli, &err);
	return 0;
}

int main(int argc, char **argv)
{
	args a = {0};
	int status;
	char *usage = gk_optable_usage(options, synopsis, common);
	gk_cli_init(&cli, "data-pack", usage ? usage : synopsis);
	a.dir = ".";
	a.w.lz4_level = 0;
	a.w.jobs = 1;
	int first = gk_optable_parse(&cli, options, GK_OPTABLE_SHORT_NAMES, &a, argc, argv, a.arg);
	/* tar's habit: say why there is no such shard. */
	if (a.tarz)
		gk_cli_usage_error(&cli, "-%c: shards are not %s-compressed, since readers seek in them; --lz4 compresses each sample (lz4 -dc x.tar.lz4 | tar t reads it)",
				   a.tarz, a.tarz == 'z' ? "gzip" : a.tarz == 'j' ? "bzip2" : "xz");
	if (a.get)
		a.mode = 'g';
	a.w.lz4 = given(&a, "lz4");
	a.shuffle = given(&a, "shuffle");
	argc -= first;
	argv += first;
	if (!a.mode) {
		char modes[128];
		gk_cli_usage_error(&cli, "no mode: give %s",
				   gk_optable_group(options, 1, " or ", modes, sizeof(modes)));
	}
	/*
	 * -f is tar's name for the archive: for -c the shard written (what -o
	 * names), for the other modes the shard read. tar -xf x.tar NAME
	 * extracts one member; here operands are shards, so that spelling is
	 * refused with the way to get a member.
	 */
	if (a.file && a.mode == 'c') {
		if (a.out)
			gk_cli_usage_error(&cli, "-f and -o both name the output: give one");
		a.out = a.file;
	} else if (a.file) {
		if (argc > 0)
			gk_cli_usage_error(&cli, "-f names the shard, and %s takes no member names (-g KEY.EXT prints one member; -t, -x and --verify take more shards as operands, without -f)",
					   a.mode == 'x' ? "-x" : a.mode == 't' ? "-t" : "this mode");
		argv = (char **)&a.file; /* the one shard operand */
		argc = 1;
	}
	if (a.mode != 'c' && (a.naming.ext || a.naming.whole))
		gk_cli_usage_error(&cli, "--ext and --name-as-key need -c");
	if (a.mode != 'c' && a.tokenize)
		gk_cli_usage_error(&cli, "--tokenize needs -c (it packs text)");
	if (a.eot && !a.tokenize)
		gk_cli_usage_error(&cli, "--eot needs --tokenize (it is the token ending each tokenized document)");
	if (a.mode == 'c') {
		gk_err nerr;
		if (a.naming.whole && !a.naming.ext)
			gk_cli_usage_error(&cli, "--name-as-key needs --ext EXT (the extension every member gets)");
		if (gk_shard_naming_check(&a.naming, &nerr) < 0)
			gk_cli_usage_error(&cli, "--ext: %s", nerr.msg);
		if (!a.out)
			gk_cli_usage_error(&cli, "-c needs -o PATTERN");
		if (!!a.from_tar + (a.list || argc > 0) != 1)
			gk_cli_usage_error(&cli, "-c takes directories or files and/or -T FILE, or --from-tar FILE");
		if (a.from_tar && a.shuffle)
			gk_cli_usage_error(&cli, "--shuffle needs directories or -T (a stream cannot be shuffled)");
		if (strcmp(a.out, "-") == 0 && (a.manifest || a.w.max_count || a.w.max_size))
			gk_cli_usage_error(&cli, "-o - writes one shard: no --manifest, --max-count or --max-size");
		char probe[4096];
		gk_err perr;
		if (gk_shard_format_name(a.out, 0, probe, sizeof(probe), &perr) < 0 || !*a.out)
			gk_cli_usage_error(&cli, "%s", *a.out ? perr.msg : "-o: empty pattern");
		a.w.pattern = a.out;
		a.w.index = !a.no_index && strcmp(a.out, "-") != 0;
		a.w.mtime = source_date_epoch();
		gk_ignore_sigxfsz();
		status = create(&a, argc, argv);
	} else {
		if (a.out || a.list || a.from_tar || a.manifest || a.w.max_count || a.w.max_size ||
		    a.w.lz4 || a.shuffle)
			gk_cli_usage_error(&cli, "creation options need -c");
		if (argc == 0)
			gk_cli_usage_error(&cli, "no shard given");
		if (a.mode == 'g' && argc != 1)
			gk_cli_usage_error(&cli, "-g reads one shard");
		switch (a.mode) {
		case 't': status = list(argc, argv); break;
		case 'x': status = extract(&a, argc, argv); break;
		case 'V': status = verify(argc, argv); break;
		case 'I': status = index_shards(argc, argv); break;
		default: status = get(a.get, argv[0]); break;
		}
	}
	free(usage);
	return gk_cli_finish(&cli, status);
}
