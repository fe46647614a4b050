/*
 * ckpt_step.c - training checkpoint directories (stage, commit, list,
 * latest, verify) and the sharding plans against hand-worked cases.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "tap.h"

static char root[] = "/tmp/gk-ckpt-XXXXXX";

static int write_model(gk_ckpt_stage *s, int rank, int world, float v)
{
	gk_err err;
	uint64_t sh = 4;
	float d[4] = {v, v, v, v};
	const void *data[] = {d};
	gk_st_spec t = {"w", GK_DT_F32, 1, &sh};
	char *name = gk_ckpt_rank_file("model", rank, world);
	char *path = gk_ckpt_stage_path(s, name);
	int rc = gk_st_save(path, &t, data, 1, NULL, 0, &err);
	free(name);
	free(path);
	return rc;
}

static void test_steps(void)
{
	gk_err err;
	gk_ckpt_stage *s, *j;
	uint64_t step, *steps;
	size_t n;
	char path[512], link[64];

	ok(gk_ckpt_latest(root, &step, &err) == 0, "no checkpoint yet");
	ok(gk_ckpt_stage_begin(&s, root, 1000, &err) == 0, "stage step 1000");
	ok(strncmp(gk_ckpt_stage_name(s), ".step-00001000.tmp-", 19) == 0,
	   "staged as %s", gk_ckpt_stage_name(s));
	/* A second rank joins the same staging directory by name. */
	ok(gk_ckpt_stage_join(&j, root, 1000, gk_ckpt_stage_name(s), &err) == 0, "rank 1 joins");
	ok(write_model(s, 0, 2, 1.0f) == 0 && write_model(j, 1, 2, 2.0f) == 0, "both ranks write");
	gk_ckpt_stage_free(j);
	gk_ckpt_list(root, &steps, &n, &err);
	is_int(n, 0, "nothing committed while staging");
	free(steps);
	ok(gk_ckpt_stage_commit(s, &err) == 0, "commit: %s", err.msg);
	snprintf(path, sizeof(path), "%s/step-00001000/COMMIT", root);
	ok(access(path, F_OK) == 0, "COMMIT inside step-00001000");
	snprintf(path, sizeof(path), "%s/latest", root);
	ssize_t r = readlink(path, link, sizeof(link) - 1);
	link[r > 0 ? r : 0] = '\0';
	is_str(link, "step-00001000", "latest is a relative link");
	snprintf(path, sizeof(path), "%s/step-00001000", root);
	ok(gk_ckpt_verify_step(path, &err) == 0, "verify: %s", err.msg);

	/* A merge of the step directory sees both ranks' files. */
	gk_ckpt_set *set = NULL;
	char *in[] = {root};
	ok(gk_ckpt_open(&set, in, 1, &err) < 0 && strstr(err.msg, "conflicting copies"),
	   "ranks with different whole copies of 'w' conflict: %s", err.msg);

	/* Step 2000 crashes before commit; step 3000 commits; 2500 is old. */
	ok(gk_ckpt_stage_begin(&s, root, 2000, &err) == 0, "stage 2000");
	write_model(s, 0, 1, 3.0f);
	gk_ckpt_stage_free(s); /* a crash: the staging dir stays */
	snprintf(path, sizeof(path), "%s/step-00002000", root);
	mkdir(path, 0777); /* and a step directory without COMMIT */
	ok(gk_ckpt_stage_begin(&s, root, 3000, &err) == 0 && write_model(s, 0, 1, 4.0f) == 0 &&
	   gk_ckpt_stage_commit(s, &err) == 0, "commit 3000");
	ok(gk_ckpt_stage_begin(&s, root, 2500, &err) == 0 && write_model(s, 0, 1, 5.0f) == 0 &&
	   gk_ckpt_stage_commit(s, &err) == 0, "commit 2500 late");
	ok(gk_ckpt_latest(root, &step, &err) == 1 && step == 3000, "latest stays at 3000");
	gk_ckpt_list(root, &steps, &n, &err);
	ok(n == 3 && steps[0] == 1000 && steps[1] == 2500 && steps[2] == 3000,
	   "committed: 1000 2500 3000, not the incomplete 2000");
	free(steps);
	/* What a writer starting after a step would meet, committed or not. */
	int com = -1;
	ok(gk_ckpt_next_after(root, 1000, &step, &com, &err) == 1 && step == 2000 && !com,
	   "after 1000: 2000, not committed");
	ok(gk_ckpt_next_after(root, 2000, &step, &com, &err) == 1 && step == 2500 && com,
	   "after 2000: 2500, committed");
	ok(gk_ckpt_next_after(root, 0, &step, &com, &err) == 1 && step == 1000 && com,
	   "after 0: 1000");
	ok(gk_ckpt_next_after(root, 3000, &step, &com, &err) == 0, "after 3000: none");

	/* latest dangling or missing: the highest committed step wins. */
	snprintf(path, sizeof(path), "%s/latest", root);
	unlink(path);
	symlink("step-00009999", path);
	ok(gk_ckpt_latest(root, &step, &err) == 1 && step == 3000, "dangling latest: 3000");
	unlink(path);
	ok(gk_ckpt_latest(root, &step, &err) == 1 && step == 3000, "missing latest: 3000");

	/* The root reads as its newest committed step: 3000, value 4.0. */
	ok(gk_ckpt_open(&set, in, 1, &err) == 0 && set->n == 1, "open the root: %s",
	   set ? "ok" : err.msg);
	float v[4] = {0};
	const gk_ckpt_part *pt = &set->e[0].parts[0];
	gk_st_read(set->files[pt->file], pt->t, 0, v, sizeof(v), &err);
	ok(v[0] == 4.0f && v[3] == 4.0f, "the root is step 3000 (got %g)", v[0]);
	ok(strstr(set->files[0]->path, "step-00003000/") != NULL, "  from %s", set->files[0]->path);
	gk_ckpt_close(set);

	/*
	 * Step names as the writer spells them ("step-%08llu"): from 10^8 on
	 * nine digits and more; other spellings of a number are not steps.
	 * Step 10^8 is committed through the stage, so the writer and the
	 * reader are held to one rule.
	 */
	ok(gk_ckpt_stage_begin(&s, root, 100000000, &err) == 0 &&
	   write_model(s, 0, 1, 7.0f) == 0 && gk_ckpt_stage_commit(s, &err) == 0,
	   "commit step 10^8: %s", err.msg);
	snprintf(path, sizeof(path), "%s/step-100000000/COMMIT", root);
	ok(access(path, F_OK) == 0, "written as step-100000000");
	const char *odd[] = {"step-000000001", "step-1", "step-0000000001x"};
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s/%s", root, odd[i]);
		mkdir(path, 0777);
		snprintf(path, sizeof(path), "%s/%s/COMMIT", root, odd[i]);
		fclose(fopen(path, "w"));
	}
	snprintf(path, sizeof(path), "%s/step-00004000", root);
	symlink("step-00003000", path); /* a link is no step directory */
	ok(gk_ckpt_list(root, &steps, &n, &err) == 0, "list again");
	ok(n == 4 && steps[2] == 3000 && steps[3] == 100000000,
	   "committed: 1000 2500 3000 100000000 (n %zu)", n);
	free(steps);
	ok(gk_ckpt_latest(root, &step, &err) == 1 && step == 100000000,
	   "latest (moved by the commit): 10^8");
	ok(gk_ckpt_next_after(root, 3000, &step, &com, &err) == 1 && step == 4000 && !com,
	   "after 3000: the link step-00004000 is in the way, as no step");
	/* latest however spelled: ./step-N/, an absolute path. */
	snprintf(path, sizeof(path), "%s/latest", root);
	unlink(path);
	symlink("./step-00002500/", path);
	ok(gk_ckpt_latest(root, &step, &err) == 1 && step == 2500, "latest ./step-00002500/");
	unlink(path);
	snprintf(link, sizeof(link), "%s/step-00001000", root);
	symlink(link, path);
	ok(gk_ckpt_latest(root, &step, &err) == 1 && step == 1000, "latest %s", link);
	unlink(path);
	symlink("step-000000001", path);
	ok(gk_ckpt_latest(root, &step, &err) == 1 && step == 100000000,
	   "latest to a non-step name: the highest");
	unlink(path);
	for (size_t i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "rm -rf '%s/%s'", root, odd[i]);
		if (system(path) != 0)
			diag("cleanup failed");
	}
	snprintf(path, sizeof(path), "rm -rf '%s/step-100000000' '%s/step-00004000'", root, root);
	if (system(path) != 0)
		diag("cleanup failed");

	/* Committing a step that exists fails and leaves it alone. */
	ok(gk_ckpt_stage_begin(&s, root, 3000, &err) == 0 && write_model(s, 0, 1, 6.0f) == 0 &&
	   gk_ckpt_stage_commit(s, &err) < 0 && strstr(err.msg, "already exists"),
	   "step 3000 again: %s", err.msg);
	gk_ckpt_stage_abort(s);

	/* A corrupted file is caught by verify. */
	snprintf(path, sizeof(path), "%s/step-00003000/model-rank-00000-of-00001.safetensors", root);
	FILE *fp = fopen(path, "r+b");
	fseek(fp, -1, SEEK_END);
	fputc(0x7f, fp);
	fclose(fp);
	snprintf(path, sizeof(path), "%s/step-00003000", root);
	ok(gk_ckpt_verify_step(path, &err) < 0 && strstr(err.msg, "does not match its XXH3"),
	   "corruption found: %s", err.msg);
	snprintf(path, sizeof(path), "rm -rf '%s'", root);
	if (system(path) != 0)
		diag("cleanup failed");
}

/* Commit step of dir with one tensor of value v. */
static int commit_step(const char *dir, uint64_t step, float v)
{
	gk_err err;
	gk_ckpt_stage *s;
	if (gk_ckpt_stage_begin(&s, dir, step, &err) < 0)
		return -1;
	if (write_model(s, 0, 1, v) < 0 || gk_ckpt_stage_commit(s, &err) < 0) {
		gk_ckpt_stage_abort(s);
		return -1;
	}
	return 0;
}

static void set_link(const char *dir, const char *to)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/latest", dir);
	unlink(path);
	if (symlink(to, path) < 0)
		diag("symlink failed");
}

static int link_is(const char *dir, const char *want)
{
	char path[512], link[64];
	snprintf(path, sizeof(path), "%s/latest", dir);
	ssize_t r = readlink(path, link, sizeof(link) - 1);
	link[r > 0 ? r : 0] = '\0';
	return strcmp(link, want) == 0;
}

static void __attribute__((format(printf, 1, 2))) shell(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd) != 0)
		diag("'%s' failed", cmd);
}

/*
 * COMMIT's parent link, and gk_ckpt_repair_latest: the state a writer
 * killed between committing a step and moving latest leaves is repaired,
 * another run's step above latest is not taken for this one's.
 */
static void test_lineage(void)
{
	char a[] = "/tmp/gk-ckpt-a-XXXXXX", b[] = "/tmp/gk-ckpt-b-XXXXXX", path[512];
	gk_err err = {0};
	uint64_t from = 0, to = 0, ps, ph, h;
	if (!mkdtemp(a) || !mkdtemp(b)) {
		ok(0, "mkdtemp");
		return;
	}
	ok(commit_step(a, 1, 1.0f) == 0 && commit_step(a, 2, 2.0f) == 0 &&
	   commit_step(a, 3, 3.0f) == 0, "run a commits 1, 2, 3");

	/* parent: the step latest named, and the XXH3 of its COMMIT's bytes */
	char *buf = NULL;
	size_t len = 0;
	snprintf(path, sizeof(path), "%s/step-00000001/COMMIT", a);
	ok(gk_read_file(path, 1 << 20, &buf, &len, &err) == 0 && !strstr(buf, "parent"),
	   "a run's first COMMIT has no parent");
	h = buf ? gk_xxh3(buf, len) : 0;
	free(buf);
	snprintf(path, sizeof(path), "%s/step-00000002/COMMIT", a);
	json_t *j = gk_json_load_file(path, 1 << 20, &err);
	json_t *pj = json_object_get(j, "parent");
	const char *hex = json_string_value(json_object_get(pj, "commit_xxh3"));
	ps = (uint64_t)json_integer_value(json_object_get(pj, "step"));
	ok(ps == 1 && hex && gk_xxh3_parse(hex, &ph, &err) == 0 && ph == h,
	   "step 2's parent is step 1 and its COMMIT's XXH3 (%s)", hex ? hex : "none");
	json_decref(j);

	ok(gk_ckpt_repair_latest(a, &from, &to, &err) == 0 && link_is(a, "step-00000003"),
	   "latest on the newest: nothing to repair");
	/* Killed after committing 2 and 3 (a failed move of latest in between). */
	set_link(a, "step-00000001");
	ok(gk_ckpt_repair_latest(a, &from, &to, &err) == 1 && from == 1 && to == 3 &&
	   link_is(a, "step-00000003"), "latest on 1, 2 and 3 continue it: moved to 3");

	/* Another run's step 3 in a: not this run's continuation. */
	ok(commit_step(b, 1, 1.5f) == 0 && commit_step(b, 2, 2.5f) == 0 &&
	   commit_step(b, 3, 3.5f) == 0, "run b commits 1, 2, 3");
	shell("mv '%s/step-00000003' '%s/step-00000003.a'", a, a);
	shell("mv '%s/step-00000003' '%s/step-00000003'", b, a);
	set_link(a, "step-00000002");
	ok(gk_ckpt_repair_latest(a, &from, &to, &err) == 0 && link_is(a, "step-00000002"),
	   "another run's step 3 above latest: left alone");
	uint64_t next;
	int com;
	ok(gk_ckpt_next_after(a, 2, &next, &com, &err) == 1 && next == 3 && com,
	   "  and still in the way");
	shell("rm -r '%s/step-00000003' && cd '%s' && mv step-00000003.a step-00000003", a, a);
	snprintf(path, sizeof(path), "%s/step-00000003/COMMIT", a);
	ok(access(path, F_OK) == 0, "run a's step 3 back");

	/* Anything above latest that does not continue it stops the repair. */
	snprintf(path, sizeof(path), "%s/step-00000004", a);
	mkdir(path, 0755);
	ok(gk_ckpt_repair_latest(a, &from, &to, &err) == 0 && link_is(a, "step-00000002"),
	   "a step directory without COMMIT above: left alone");
	snprintf(path, sizeof(path), "%s/step-00000004/COMMIT", a);
	FILE *fp = fopen(path, "w");
	if (fp) {
		fputs("{\"step\": 4, \"files\": {}}\n", fp);
		fclose(fp);
	}
	ok(gk_ckpt_repair_latest(a, &from, &to, &err) == 0 && link_is(a, "step-00000002"),
	   "a COMMIT without parent above: left alone");
	shell("rm -r '%s/step-00000004'", a);
	ok(gk_ckpt_repair_latest(a, &from, &to, &err) == 1 && from == 2 && to == 3 &&
	   link_is(a, "step-00000003"), "then 3 continues 2: moved to 3");

	/* Rolled back to 1 with 2 moved aside: 3 continues 2, not 1. */
	shell("mv '%s/step-00000002' '%s/aside-2'", a, a);
	set_link(a, "step-00000001");
	ok(gk_ckpt_repair_latest(a, &from, &to, &err) == 0 && link_is(a, "step-00000001"),
	   "a step whose parent was moved aside: left alone");

	shell("rm -rf '%s' '%s'", a, b);
}

/*
 * Readers resolve latest, or a root, to one step, once (gk_ckpt_resolve),
 * and check the step they opened (gk_ckpt_verify_set), however latest
 * moves after.
 */
static void test_resolve(void)
{
	char a[] = "/tmp/gk-ckpt-r-XXXXXX", path[512], want[512], in0[512], *r = NULL;
	gk_err err = {0};
	if (!mkdtemp(a)) {
		ok(0, "mkdtemp");
		return;
	}
	ok(commit_step(a, 1, 1.0f) == 0 && commit_step(a, 2, 2.0f) == 0, "commit 1, 2");
	set_link(a, "step-00000001");
	snprintf(want, sizeof(want), "%s/step-00000001", a);
	snprintf(in0, sizeof(in0), "%s/latest/", a);
	int rc = gk_ckpt_resolve(in0, &r, &err);
	ok(rc == 0 && !strcmp(r, want), "latest/ is %s", r ? r : err.msg);
	free(r);
	rc = gk_ckpt_resolve(a, &r, &err);
	ok(rc == 0 && !strcmp(r, want), "the root is %s", r ? r : err.msg);
	free(r);
	snprintf(in0, sizeof(in0), "%s/step-00000002/model-rank-00000-of-00001.safetensors", a);
	rc = gk_ckpt_resolve(in0, &r, &err);
	ok(rc == 0 && !strcmp(r, in0), "a file is itself: %s", r ? r : err.msg);
	free(r);
	/* a link to an unfinished step: left for the reader to refuse by its name */
	shell("cd '%s' && mkdir step-00000003 && ln -s step-00000003 pending", a);
	snprintf(path, sizeof(path), "%s/pending", a);
	rc = gk_ckpt_resolve(path, &r, &err);
	ok(rc == 0 && !strcmp(r, path), "a link to a step without COMMIT stays: %s",
	   r ? r : err.msg);
	free(r);

	snprintf(in0, sizeof(in0), "%s/latest", a);
	gk_ckpt_set *set = NULL;
	char *ins[] = {in0};
	ok(gk_ckpt_open(&set, ins, 1, &err) == 0 && set->steps.n == 1 &&
	   !strcmp(set->steps.v[0], want), "opened latest: step 1 (%s)", err.msg);
	/* latest moves on to a damaged step 2 */
	set_link(a, "step-00000002");
	snprintf(path, sizeof(path), "%s/step-00000002/model-rank-00000-of-00001.safetensors", a);
	FILE *fp = fopen(path, "r+b");
	if (fp) {
		fseek(fp, -1, SEEK_END);
		fputc(0x7f, fp);
		fclose(fp);
	}
	ok(set && gk_ckpt_verify_set(set, &err) == 0, "the step opened is the step checked: %s",
	   err.msg);
	ok(gk_ckpt_verify_input(in0, &err) < 0 && strstr(err.msg, "step-00000002"),
	   "latest itself is step 2 now: %s", err.msg);
	gk_ckpt_close(set);
	shell("rm -rf '%s'", a);
}

/* A set of synthetic entries (no files) for the planners. */
static gk_ckpt_set *fake(const uint64_t *bytes, size_t n)
{
	gk_ckpt_set *s = calloc(1, sizeof(*s));
	s->e = calloc(n, sizeof(*s->e));
	s->n = n;
	for (size_t i = 0; i < n; i++) {
		s->e[i].out_bytes = s->e[i].bytes = bytes[i];
		s->e[i].dtype = s->e[i].out_dtype = GK_DT_U8;
		s->e[i].ndim = 1;
		s->e[i].shape = malloc(sizeof(uint64_t));
		s->e[i].shape[0] = bytes[i];
		asprintf(&s->e[i].name, "t%zu", i);
		s->bytes += bytes[i];
	}
	return s;
}

static void test_plans(void)
{
	gk_err err;
	gk_ckpt_plan p;
	/* max 10: [4,5] [12 alone, emitted before the open shard closes] ... */
	uint64_t b[] = {4, 5, 12, 1, 10, 3};
	gk_ckpt_set *s = fake(b, 6);
	ok(gk_ckpt_plan_size(s, 10, &p, &err) == 0, "size plan");
	/*
	 * huggingface_hub: t0,t1 open (9); t2 > 10 -> [t2] listed first;
	 * t3: 9+1=10 not > 10 -> joins; t4: 10+10 > 10 -> [t0 t1 t3] listed,
	 * new [t4]; t5: 13 > 10 -> [t4] listed, new [t5]; end -> [t5].
	 */
	ok(p.n == 4 && p.f[0].n == 1 && p.f[0].items[0].entry == 2 && p.f[1].n == 3 &&
	   p.f[1].items[2].entry == 3 && p.f[2].items[0].entry == 4 && p.f[3].items[0].entry == 5,
	   "shards [t2] [t0 t1 t3] [t4] [t5]");
	is_str(p.f[0].name, "model-00001-of-00004.safetensors", "HF file name");
	ok(p.index, "index with several shards");
	gk_ckpt_plan_free(&p);
	ok(gk_ckpt_plan_size(s, 100, &p, &err) == 0 && p.n == 1 && !p.index, "one shard, no index");
	is_str(p.f[0].name, "model.safetensors", "single file name");
	gk_ckpt_plan_free(&p);

	ok(gk_ckpt_plan_count(s, 6, &p, &err) == 0, "6 shards of 6 tensors");
	int nonempty = 1;
	for (size_t i = 0; i < p.n; i++)
		nonempty &= p.f[i].n == 1;
	ok(p.n == 6 && nonempty, "one tensor each");
	gk_ckpt_plan_free(&p);
	ok(gk_ckpt_plan_count(s, 7, &p, &err) < 0, "7 shards of 6 tensors refused");

	ok(gk_ckpt_plan_ranks(s, 2, 0, &p, &err) == 0, "rank plan");
	/* LPT: 12->r0, 10->r1, 5->r1(15)? no: r1=10 < r0=12 -> r1=15; 4->r0=16; 3->r0? r1=15 -> r1=18; 1->r0=17 */
	is_u64(p.f[0].bytes, 17, "rank 0 holds 17");
	is_u64(p.f[1].bytes, 18, "rank 1 holds 18");
	gk_ckpt_plan_free(&p);
	ok(gk_ckpt_plan_ranks(s, 4, 1, &p, &err) == 0, "slice plan");
	/* t2 has 12 rows: chunks of 3; t3 has 1 row: rank 0 gets it, the others empty. */
	ok(p.f[3].items[2].row0 == 9 && p.f[3].items[2].rows == 3 && p.f[1].items[3].rows == 0,
	   "ceil chunks, empty trailing slices");
	gk_ckpt_plan_free(&p);
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].name);
		free(s->e[i].shape);
	}
	free(s->e);
	free(s);
}

static void test_index(void)
{
	static const struct {
		const char *doc;
		const char *msg; /* NULL: accepted */
	} cases[] = {
		{"{\"metadata\":{\"total_size\":8},\"weight_map\":{\"a\":\"m-1.safetensors\",\"b\":\"sub/m-2.safetensors\",\"c\":\"m-1.safetensors\"}}", NULL},
		{"{\"weight_map\":{\"a\":\"..\"}}", "not a plain relative path"},
		{"{\"weight_map\":{\"a\":\"x/../../y\"}}", "not a plain relative path"},
		{"{\"weight_map\":{\"a\":\"x/..\"}}", "not a plain relative path"},
		{"{\"weight_map\":{\"a\":\"/abs\"}}", "not a plain relative path"},
		{"{\"weight_map\":{\"a\":\"\"}}", "not a plain relative path"},
		{"{\"weight_map\":{\"a\":3}}", "is not a file name"},
		{"{\"weight_map\":[]}", "no weight_map object"},
		{"{\"metadata\":{\"total_size\":-1},\"weight_map\":{}}", "total_size is not a non-negative integer"},
		{"{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", "duplicate"},
		{"{\"weight_map\":{\"a\":\"..x/y..\"}}", NULL},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(cases); i++) {
		gk_ckpt_index ix;
		gk_err err = {0};
		int rc = gk_ckpt_index_parse(&ix, cases[i].doc, strlen(cases[i].doc), "ix", &err);
		if (!cases[i].msg) {
			ok(rc == 0, "index %zu accepted: %s", i, rc ? err.msg : "");
			if (!rc)
				gk_ckpt_index_free(&ix);
		} else {
			ok(rc < 0 && strstr(err.msg, cases[i].msg), "index %zu refused: %s", i, err.msg);
		}
	}
	gk_ckpt_index ix;
	gk_err err;
	const char *d = "{\"metadata\":{\"total_size\":8},\"weight_map\":{\"a\":\"m-1\",\"b\":\"m-2\",\"c\":\"m-1\"}}";
	gk_ckpt_index_parse(&ix, d, strlen(d), "ix", &err);
	ok(ix.files.n == 2 && ix.names.n == 3 && ix.file_of[2] == 0 && ix.total_size == 8,
	   "files deduplicated, total_size read");
	gk_ckpt_index_free(&ix);
}

/* Buffers, not parameters: whole trailing name components only. */
static void test_buffers(void)
{
	static const char *yes[] = {"h.0.attn.bias", "transformer.h.11.attn.masked_bias",
				    "gpt_neox.layers.3.attention.bias", "attn.bias",
				    "model.layers.0.self_attn.rotary_emb.inv_freq"};
	static const char *no[] = {"h.0.attn.c_attn.bias", "h.0.attn.c_proj.bias",
				   "h.0.xattn.bias", "h.0.ln_1.bias", "bias",
				   "gpt_neox.layers.3.attention.dense.bias"};
	for (size_t i = 0; i < GK_ARRAY_SIZE(yes); i++)
		ok(gk_ckpt_is_buffer(yes[i]), "%s is a buffer", yes[i]);
	for (size_t i = 0; i < GK_ARRAY_SIZE(no); i++)
		ok(!gk_ckpt_is_buffer(no[i]), "%s is not a buffer", no[i]);
}

int main(void)
{
	if (!mkdtemp(root))
		return 1;
	test_steps();
	test_resolve();
	test_lineage();
	test_plans();
	test_index();
	test_buffers();
	return done_testing();
}
