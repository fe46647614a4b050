/*
 * shard_dataset.c - the writer and the dataset iterator: every sample
 * exactly once, equal counts per rank (also with fewer shards than
 * ranks), deterministic (seed, epoch) shuffles, and resume from a saved
 * state giving the same tail as an uninterrupted run, for plain and LZ4
 * shards, with and without the prefetch thread.
 */
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "shard/shard.h"
#include "tap.h"

enum { NSAMPLES = 50, MAXS = 64 };
static char dir[] = "/tmp/gk-shard-ds-XXXXXX";

/* Sample i: key "s%04d", a .txt of i+1 bytes and, for even i, a .cls. */
static void fill(int i, char *txt, char *cls)
{
	for (int j = 0; j <= i; j++)
		txt[j] = (char)('a' + (i + j) % 26);
	snprintf(cls, 16, "%d", i % 10);
}

static int write_shards(const char *pattern, const char *manifest, int lz4, int index)
{
	gk_err err = {0};
	gk_shard_write_opts o = {.pattern = pattern, .max_count = 8, .index = index,
				 .lz4 = lz4, .jobs = 2};
	gk_shard_writer *w;
	gk_shard_manifest man = {0};
	char txt[MAXS + 1], cls[16], key[16];
	if (gk_shard_writer_open(&w, &o, &err) < 0)
		return diag("%s", err.msg), -1;
	for (int i = 0; i < NSAMPLES; i++) {
		fill(i, txt, cls);
		snprintf(key, sizeof(key), "s%04d", i);
		/* Members in reverse order: the writer sorts them. */
		gk_shard_member m[2] = {{.ext = "txt", .data = txt, .size = (uint64_t)i + 1},
					{.ext = "cls", .data = cls, .size = strlen(cls)}};
		if (gk_shard_writer_add(w, key, i % 2 ? 1 : 2, m, &err) < 0)
			return diag("%s", err.msg), -1;
	}
	if (gk_shard_writer_close(w, &man, &err) < 0)
		return diag("%s", err.msg), -1;
	int rc = gk_shard_manifest_write(manifest, &man, &err);
	gk_shard_manifest_free(&man);
	return rc;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* 1 when v[0..n) is a permutation of 0..n-1: sorted, it is 0, 1, 2... */
static int is_permutation(const uint64_t *v, size_t n)
{
	uint64_t *s = malloc((n + 1) * sizeof(*s));
	int ok = s != NULL;
	if (s) {
		memcpy(s, v, n * sizeof(*s));
		qsort(s, n, sizeof(*s), cmp_u64);
		for (size_t i = 0; i < n && ok; i++)
			ok = s[i] == i;
	}
	free(s);
	return ok;
}

/* Run a dataset and collect sample numbers; check contents on the way. */
static int run(const char *src, gk_shard_dataset_opts o, int *out, int max,
	       int *bad)
{
	gk_err err = {0};
	gk_shard_dataset *d;
	const gk_shard_sample *s;
	int n = 0, rc;
	if (gk_shard_dataset_open(&d, src, &o, &err) < 0)
		return diag("%s", err.msg), -1;
	while (n < max && (rc = gk_shard_dataset_next(d, &s, &err)) == 1) {
		int i = atoi(s->key + 1);
		char txt[MAXS + 1], cls[16];
		fill(i, txt, cls);
		size_t want = i % 2 ? 1 : 2;
		if (s->n != want || strcmp(s->m[want - 1].ext, "txt") ||
		    s->m[want - 1].size != (uint64_t)i + 1 ||
		    memcmp(s->m[want - 1].data, txt, (size_t)i + 1) ||
		    (want == 2 && (strcmp(s->m[0].ext, "cls") || memcmp(s->m[0].data, cls, s->m[0].size))))
			(*bad)++;
		out[n++] = i;
	}
	gk_shard_dataset_close(d);
	return n;
}

static void test_split(const char *src, const char *what)
{
	int seen[NSAMPLES] = {0}, got[NSAMPLES], bad = 0, total = 0, eq = 1;
	gk_shard_dataset_opts o = {.world = 3, .shuffle = 1, .seed = 7,
				   .shuffle_buffer = 5, .prefetch = 4};
	for (int r = 0; r < 3; r++) {
		o.rank = r;
		int n = run(src, o, got, NSAMPLES, &bad);
		eq &= n == NSAMPLES / 3;
		for (int i = 0; i < n; i++)
			seen[got[i]]++, total++;
	}
	int dup = 0;
	for (int i = 0; i < NSAMPLES; i++)
		dup += seen[i] > 1;
	ok(eq && total == NSAMPLES / 3 * 3 && dup == 0 && bad == 0,
	   "%s: 3 ranks get 16 distinct samples each, contents intact", what);

	/* 8 ranks x 2 workers over 7 shards: 3 samples each, no part empty. */
	gk_shard_dataset_opts o2 = {.world = 8, .workers = 2, .shuffle = 1, .seed = 1};
	int all = 1;
	memset(seen, 0, sizeof(seen));
	for (int r = 0; r < 8; r++)
		for (int k = 0; k < 2; k++) {
			o2.rank = r;
			o2.worker = k;
			int n = run(src, o2, got, NSAMPLES, &bad);
			all &= n == NSAMPLES / 16;
			for (int i = 0; i < n; i++)
				all &= seen[got[i]]++ == 0;
		}
	ok(all && bad == 0, "%s: 16 parts over 7 shards: 3 distinct samples each", what);
}

static void test_order(const char *src, const char *what)
{
	int a[NSAMPLES], b[NSAMPLES], bad = 0;
	gk_shard_dataset_opts o = {0};
	int n = run(src, o, a, NSAMPLES, &bad), inorder = n == NSAMPLES;
	for (int i = 0; i < n; i++)
		inorder &= a[i] == i;
	ok(inorder && bad == 0, "%s: unshuffled, one rank: every sample in order", what);

	o.shuffle = 1;
	o.seed = 3;
	o.shuffle_buffer = 10;
	run(src, o, a, NSAMPLES, &bad);
	o.prefetch = 3;
	run(src, o, b, NSAMPLES, &bad);
	ok(memcmp(a, b, sizeof(a)) == 0, "%s: the same shuffle with and without prefetch", what);
	int moved = 0;
	uint64_t v[NSAMPLES];
	for (int i = 0; i < NSAMPLES; i++)
		moved += a[i] != i, v[i] = (uint64_t)a[i];
	ok(moved > NSAMPLES / 2 && is_permutation(v, NSAMPLES),
	   "%s: a shuffle is a permutation that moves most samples (%d moved)", what, moved);
	o.loop = 1;
	int two[2 * NSAMPLES];
	run(src, o, two, 2 * NSAMPLES, &bad);
	ok(memcmp(two, a, sizeof(a)) == 0 && memcmp(two + NSAMPLES, a, sizeof(a)) != 0,
	   "%s: with loop, epoch 1 follows in another order", what);
}

static void test_resume(const char *src, const char *what, size_t prefetch)
{
	gk_err err = {0};
	gk_shard_dataset_opts o = {.world = 2, .rank = 1, .shuffle = 1, .seed = 11,
				   .shuffle_buffer = 4, .prefetch = prefetch, .loop = 1};
	int full[60], bad = 0;
	int n = run(src, o, full, 60, &bad);
	gk_shard_dataset *d;
	const gk_shard_sample *s;
	char buf[1024];
	int stop = 31, tail[60], k = 0, same = n == 60;
	if (gk_shard_dataset_open(&d, src, &o, &err) < 0) {
		ok(0, "open: %s", err.msg);
		return;
	}
	for (int i = 0; i < stop; i++)
		gk_shard_dataset_next(d, &s, &err);
	gk_shard_state st, st2;
	gk_shard_dataset_state(d, &st);
	gk_shard_state_format(&st, buf, sizeof(buf));
	gk_shard_dataset_close(d);
	is_int(st.epoch, 1, "state after 31 of 25-sample epochs: epoch 1");
	if (gk_shard_state_parse(buf, &st2, &err) < 0 ||
	    gk_shard_dataset_open(&d, src, &o, &err) < 0 ||
	    gk_shard_dataset_restore(d, &st2, &err) < 0) {
		ok(0, "restore: %s", err.msg);
		return;
	}
	while (stop + k < 60 && gk_shard_dataset_next(d, &s, &err) == 1)
		tail[k++] = atoi(s->key + 1);
	gk_shard_dataset_close(d);
	for (int i = 0; i < k && same; i++)
		same = tail[i] == full[stop + i];
	ok(same && k == 60 - stop, "%s: resume from %s gives the same %d samples (prefetch %zu)",
	   what, buf, k, prefetch);

	gk_shard_state wrong = st2;
	wrong.parts = 4;
	gk_shard_dataset_open(&d, src, &o, &err);
	ok(gk_shard_dataset_restore(d, &wrong, &err) < 0 && strstr(err.msg, "part 1 of 4"),
	   "a state from another world size is refused: %s", err.msg);
	gk_shard_dataset_close(d);
	gk_shard_state_free(&st2);
}

/*
 * One part's run in a resumed world: restore from every state of the
 * previous world (none: a fresh start), read stop samples or to the end
 * of the epoch, count the samples seen, and save the state as JSON, the
 * way a trainer's checkpoint would. Returns the samples read, or -1.
 */
static int part_run(const char *src, gk_shard_dataset_opts o, const gk_shard_state *prev,
		    size_t nprev, int stop, int *seen, char *json, size_t jlen,
		    uint64_t *len)
{
	gk_err err = {0};
	gk_shard_dataset *d;
	const gk_shard_sample *s;
	gk_shard_state st;
	int n = 0;
	if (gk_shard_dataset_open(&d, src, &o, &err) < 0)
		return diag("open: %s", err.msg), -1;
	if (nprev && gk_shard_dataset_restore_world(d, prev, nprev, &err) < 0) {
		diag("restore_world: %s", err.msg);
		gk_shard_dataset_close(d);
		return -1;
	}
	*len = gk_shard_dataset_len(d);
	int claimed = 1; /* gk_shard_dataset_part_has says so of each */
	while ((stop < 0 || n < stop) && gk_shard_dataset_next(d, &s, &err) == 1) {
		seen[atoi(s->key + 1)]++;
		claimed &= gk_shard_dataset_part_has(d, s->shard, s->index);
		n++;
	}
	/* ... and of no more samples than the part's share */
	const gk_shard_manifest *man = gk_shard_dataset_manifest(d);
	uint64_t has = 0;
	for (size_t k = 0; k < man->n; k++)
		for (uint64_t i = 0; i < man->v[k].samples; i++)
			has += gk_shard_dataset_part_has(d, k, i);
	if (n && (!claimed || has != *len)) {
		diag("part_has: %s; claims %llu of %llu", claimed ? "agrees" : "disowns a sample",
		     (unsigned long long)has, (unsigned long long)*len);
		n = -1;
	}
	gk_shard_dataset_state(d, &st);
	int need = gk_shard_state_format(&st, json, jlen);
	gk_shard_dataset_close(d);
	if (need < 0 || (size_t)need >= jlen)
		return diag("state does not fit in %zu bytes (%d)", jlen, need), -1;
	return n;
}

enum { MAXW = 8, JSON = 4096 };

/*
 * Epoch 0 read by worlds[0] parts up to their stops, then by worlds[1]
 * (and worlds[2]...) restored from every previous part's state: each
 * sample of the epoch is seen exactly as often as in one uninterrupted
 * run of worlds[0] (once, or never for the S mod P left out).
 */
static void test_remap(const char *src, const int *worlds, size_t nw, int shuffle,
		       size_t prefetch)
{
	gk_shard_dataset_opts o = {.shuffle = shuffle, .seed = 5, .shuffle_buffer = 4,
				   .prefetch = prefetch};
	int want[NSAMPLES] = {0}, seen[NSAMPLES] = {0}, good = 1, runs = 0;
	char json[MAXW][JSON], what[64];
	gk_shard_state prev[MAXW];
	size_t nprev = 0;
	uint64_t len, lens[MAXW];
	int pos = snprintf(what, sizeof(what), "shuffle %d: world", shuffle);
	for (size_t g = 0; g < nw; g++)
		pos += snprintf(what + pos, sizeof(what) - (size_t)pos, "%s%d", g ? "->" : " ",
				worlds[g]);
	for (int r = 0; r < worlds[0]; r++) {
		o.world = worlds[0];
		o.rank = r;
		good &= part_run(src, o, NULL, 0, -1, want, json[0], JSON, &len) >= 0;
	}
	for (size_t g = 0; g < nw && good; g++) {
		int last = g + 1 == nw;
		o.world = worlds[g];
		for (int r = 0; r < worlds[g] && good; r++) {
			o.rank = r;
			/* Stops all over the epoch: 0, mid-window, the end. */
			int stop = last ? -1 : (r * 7 + 3 + (int)g * 5) % 13;
			if (r == 1 && !last)
				stop = 0;
			if (r == 2 && !last)
				stop = 1000;
			int n = part_run(src, o, prev, nprev, stop, seen, json[r], JSON, &lens[r]);
			good &= n >= 0;
			runs += n > 0;
		}
		for (size_t i = 0; i < nprev; i++)
			gk_shard_state_free(&prev[i]);
		nprev = 0;
		for (int r = 0; r < worlds[g] && good; r++) {
			gk_err err;
			good &= gk_shard_state_parse(json[r], &prev[r], &err) == 0;
			nprev++;
		}
		/* Remapped parts differ by at most one sample. */
		for (int r = 1; r < worlds[g] && g > 0; r++)
			good &= lens[r] <= lens[0] && lens[0] - lens[r] <= 1;
	}
	for (size_t i = 0; i < nprev; i++)
		gk_shard_state_free(&prev[i]);
	int same = good, epoch = 0, twice = 0;
	for (int i = 0; i < NSAMPLES; i++) {
		same &= seen[i] == want[i];
		epoch += want[i];
		twice += seen[i] > 1;
	}
	ok(same && twice == 0 && runs > 0,
	   "remap %s: the %d samples of the epoch seen once, none twice", what, epoch);
}

/* After a remapped epoch the next one is the new world's normal epoch. */
static void test_remap_next_epoch(const char *src)
{
	gk_err err = {0};
	gk_shard_dataset_opts o = {.shuffle = 1, .seed = 9, .shuffle_buffer = 3, .world = 3};
	gk_shard_state st[3];
	char json[JSON];
	int ok_all = 1;
	for (int r = 0; r < 3; r++) {
		gk_shard_dataset *d;
		const gk_shard_sample *s;
		o.rank = r;
		ok_all &= gk_shard_dataset_open(&d, src, &o, &err) == 0;
		for (int i = 0; i < 2 + r * 3; i++)
			ok_all &= gk_shard_dataset_next(d, &s, &err) == 1;
		gk_shard_state t;
		gk_shard_dataset_state(d, &t);
		gk_shard_state_format(&t, json, sizeof(json));
		ok_all &= gk_shard_state_parse(json, &st[r], &err) == 0;
		gk_shard_dataset_close(d);
	}
	/* Rank 1 of 2 with loop: the rest of epoch 0, remapped, then epoch 1. */
	gk_shard_dataset_opts o2 = {.shuffle = 1, .seed = 9, .shuffle_buffer = 3, .world = 2,
				    .rank = 1, .loop = 1};
	gk_shard_dataset *d, *fresh;
	const gk_shard_sample *s, *f;
	ok_all &= gk_shard_dataset_open(&d, src, &o2, &err) == 0 &&
		  gk_shard_dataset_restore_world(d, st, 3, &err) == 0;
	o2.loop = 0;
	ok_all &= gk_shard_dataset_open(&fresh, src, &o2, &err) == 0 &&
		  gk_shard_dataset_set_epoch(fresh, 1, &err) == 0;
	uint64_t rest = gk_shard_dataset_len(d);
	for (uint64_t i = 0; ok_all && i < rest; i++)
		ok_all &= gk_shard_dataset_next(d, &s, &err) == 1 && s->epoch == 0;
	int n = 0, same = ok_all;
	while (same && gk_shard_dataset_next(fresh, &f, &err) == 1) {
		char key[16];
		snprintf(key, sizeof(key), "%s", f->key);
		same &= gk_shard_dataset_next(d, &s, &err) == 1 && s->epoch == 1 &&
			strcmp(s->key, key) == 0;
		n++;
	}
	ok(same && n == NSAMPLES / 2, "after a remapped epoch, epoch 1 is the new world's own (%d samples)",
	   n);
	gk_shard_dataset_close(d);
	gk_shard_dataset_close(fresh);
	/* Bad lists are refused with a reason. */
	ok(gk_shard_dataset_open(&d, src, &o2, &err) == 0 &&
	   gk_shard_dataset_restore_world(d, st, 2, &err) < 0 &&
	   strstr(err.msg, "2 given for a world of 3 parts") != NULL, "%s", err.msg);
	gk_shard_state dup[3] = {st[0], st[0], st[2]};
	ok(gk_shard_dataset_restore_world(d, dup, 3, &err) < 0 &&
	   strstr(err.msg, "part 0 is out of range or given twice") != NULL, "%s", err.msg);
	gk_shard_state other[3] = {st[0], st[1], st[2]};
	other[2].epoch = 4;
	ok(gk_shard_dataset_restore_world(d, other, 3, &err) < 0 &&
	   strstr(err.msg, "is not from the run of state 0") != NULL, "%s", err.msg);
	gk_shard_dataset_close(d);
	for (int r = 0; r < 3; r++)
		gk_shard_state_free(&st[r]);
}

/* ---- the shard list a state is for ------------------------------------------- */

static const char WHY[] = ": a state resumes on the same shard list, in the same order";

/*
 * Read stop samples of part rank of world over src and keep its state as
 * JSON, the way a trainer does; *next gets the key of the sample after.
 */
static int save_at(const char *src, int world, int rank, int stop, char *json,
		   size_t len, char *next)
{
	gk_err err = {0};
	gk_shard_dataset_opts o = {.world = world, .rank = rank, .shuffle = 1, .seed = 3,
				   .shuffle_buffer = 4};
	gk_shard_dataset *d;
	const gk_shard_sample *s;
	gk_shard_state st;
	int rc = gk_shard_dataset_open(&d, src, &o, &err);
	for (int i = 0; rc == 0 && i < stop; i++)
		rc = gk_shard_dataset_next(d, &s, &err) == 1 ? 0 : -1;
	if (rc == 0) {
		gk_shard_dataset_state(d, &st);
		int need = gk_shard_state_format(&st, json, len);
		rc = need >= 0 && (size_t)need < len ? 0 : -1;
	}
	if (rc == 0)
		rc = gk_shard_dataset_next(d, &s, &err) == 1 ? 0 : -1;
	if (rc == 0)
		snprintf(next, 16, "%s", s->key);
	else
		diag("save_at %s: %s", src, err.msg);
	gk_shard_dataset_close(d);
	return rc;
}

/*
 * Restore json (one state) on part rank of world over src: 0 and the next
 * sample's key in next, or -1 and err.
 */
static int restore_at(const char *src, int world, int rank, const char *json, char *next,
		      gk_err *err)
{
	gk_shard_dataset_opts o = {.world = world, .rank = rank, .shuffle = 1, .seed = 3,
				   .shuffle_buffer = 4};
	gk_shard_dataset *d;
	const gk_shard_sample *s;
	gk_shard_state st;
	if (gk_shard_state_parse(json, &st, err) < 0)
		return -1;
	int rc = gk_shard_dataset_open(&d, src, &o, err);
	if (rc == 0)
		rc = gk_shard_dataset_restore(d, &st, err);
	if (rc == 0)
		rc = gk_shard_dataset_next(d, &s, err) == 1 ? 0 : -1;
	if (rc == 0)
		snprintf(next, 16, "%s", s->key);
	gk_shard_dataset_close(d);
	gk_shard_state_free(&st);
	return rc;
}

/* restore_world on part 0 of world over src from the n states in json. */
static int restore_world_at(const char *src, int world, char json[][JSON], int n,
			    gk_err *err)
{
	gk_shard_dataset_opts o = {.world = world, .shuffle = 1, .seed = 3, .shuffle_buffer = 4};
	gk_shard_dataset *d;
	gk_shard_state st[MAXW];
	int rc = 0, got = 0;
	for (; rc == 0 && got < n; got++)
		rc = gk_shard_state_parse(json[got], &st[got], err);
	if (rc == 0)
		rc = gk_shard_dataset_open(&d, src, &o, err);
	if (rc == 0) {
		rc = gk_shard_dataset_restore_world(d, st, (size_t)n, err);
		gk_shard_dataset_close(d);
	}
	for (int i = 0; i < got; i++)
		gk_shard_state_free(&st[i]);
	return rc;
}

static void test_list(const char *man, const char *mann)
{
	char brace[300], moved[300], swapped[300], shorter[300], lng[300], lswapped[300];
	char json[MAXW][JSON], want[1024], next[16], got[16];
	gk_err err = {0};
	snprintf(brace, sizeof(brace), "%s/p-{000..006}.tar", dir);
	snprintf(moved, sizeof(moved), "%s/n/p-{000..006}.tar", dir);
	snprintf(swapped, sizeof(swapped), "%s/p-{000,001,002,004,003,005,006}.tar", dir);
	snprintf(shorter, sizeof(shorter), "%s/p-{000..005}.tar", dir);
	/* 42 shards: too many for the names, the identity alone */
	snprintf(lng, sizeof(lng), "%s/{p,p,p,p,p,p}-{000..006}.tar", dir);
	snprintf(lswapped, sizeof(lswapped), "%s/{p,p,p,p,p,p}-{000,001,002,004,003,005,006}.tar",
		 dir);

	/*
	 * The identities, from their definitions: "list", basename, NUL,
	 * count (LE64); "files", the path below the common directory (here
	 * the basename), NUL, count, size and XXH3 of the first 4 KiB (LE64).
	 */
	gk_shard_manifest m;
	unsigned char bytes[512], fbytes[1024];
	size_t nb = 0, nf = 0;
	char names[512] = "", hex[17], fhex[17];
	int made = gk_shard_manifest_load(man, &m, &err) == 0 && m.n == 7;
	for (size_t i = 0; made && i < m.n; i++) {
		const char *b = strrchr(m.v[i].path, '/') ? strrchr(m.v[i].path, '/') + 1 : m.v[i].path;
		memcpy(bytes + nb, b, strlen(b) + 1);
		nb += strlen(b) + 1;
		for (int k = 0; k < 8; k++)
			bytes[nb++] = (unsigned char)(m.v[i].samples >> (8 * k));
		char *path = gk_shard_manifest_file(&m, i), head[4096];
		FILE *fp = path ? fopen(path, "rb") : NULL;
		size_t len = fp ? fread(head, 1, sizeof(head), fp) : 0;
		struct stat sb;
		made = made && fp && stat(path, &sb) == 0;
		if (fp)
			fclose(fp);
		free(path);
		uint64_t v[3] = {m.v[i].samples, made ? (uint64_t)sb.st_size : 0, gk_xxh3(head, len)};
		memcpy(fbytes + nf, b, strlen(b) + 1);
		nf += strlen(b) + 1;
		for (int j = 0; j < 3; j++)
			for (int k = 0; k < 8; k++)
				fbytes[nf++] = (unsigned char)(v[j] >> (8 * k));
		snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s[\"%s\",%llu]",
			 i ? "," : "", b, (unsigned long long)m.v[i].samples);
	}
	if (made)
		gk_shard_manifest_free(&m);
	snprintf(want, sizeof(want), ",\"list\":\"%s\",\"shards\":7,\"files\":\"%s\",\"names\":[%s]}",
		 gk_xxh3_hex(gk_xxh3(bytes, nb), hex), gk_xxh3_hex(gk_xxh3(fbytes, nf), fhex), names);
	made = made && save_at(man, 2, 1, 5, json[0], JSON, next) == 0;
	ok(made && strstr(json[0], want) != NULL,
	   "a state names its list: XXH3 of basenames and LE64 counts, of relative paths, counts, sizes and heads, and the names: %s",
	   json[0]);

	/* The same list: from a brace pattern, from another directory. */
	ok(restore_at(brace, 2, 1, json[0], got, &err) == 0 && strcmp(got, next) == 0,
	   "saved from a manifest, resumed from the same shards by a brace pattern at '%s'", got);
	ok(restore_at(moved, 2, 1, json[0], got, &err) == 0 && strcmp(got, next) == 0,
	   "resumed from copies of the shards in another directory at '%s'", got);
	ok(restore_at(mann, 2, 1, json[0], got, &err) == 0 && strcmp(got, next) == 0,
	   "resumed from the other directory's manifest at '%s'", got);

	/* Another list, the same counts: refused, naming the difference. */
	snprintf(want, sizeof(want), "dataset state: saved for shard 3 'p-003.tar' (8 samples), this list has 'p-004.tar' (8 samples) there%s",
		 WHY);
	ok(restore_at(swapped, 2, 1, json[0], got, &err) < 0 && strcmp(err.msg, want) == 0,
	   "two shards of one size swapped: %s", err.msg);
	snprintf(want, sizeof(want), "dataset state: saved for shard 6 'p-006.tar' (2 samples), this list ends before it, after 6 shards%s",
		 WHY);
	ok(restore_at(shorter, 2, 1, json[0], got, &err) < 0 && strcmp(err.msg, want) == 0,
	   "a shorter list: %s", err.msg);
	ok(save_at(shorter, 2, 1, 5, json[1], JSON, got) == 0 &&
	   restore_at(brace, 2, 1, json[1], got, &err) < 0 &&
	   strcmp(err.msg, "dataset state: saved for a list of 6 shards, this list goes on with shard 6 'p-006.tar' (2 samples): a state resumes on the same shard list, in the same order") == 0,
	   "a longer list: %s", err.msg);

	/* Every part's states, resumed on the same world and on another. */
	made = save_at(man, 2, 0, 3, json[0], JSON, got) == 0 &&
	       save_at(man, 2, 1, 5, json[1], JSON, got) == 0;
	snprintf(want, sizeof(want), "dataset state: saved for shard 3 'p-003.tar' (8 samples), this list has 'p-004.tar' (8 samples) there%s",
		 WHY);
	ok(made && restore_world_at(brace, 3, json, 2, &err) == 0 &&
	   restore_world_at(moved, 2, json, 2, &err) == 0,
	   "restore_world: the same list resumes on 3 parts and on 2");
	ok(restore_world_at(swapped, 3, json, 2, &err) < 0 && strcmp(err.msg, want) == 0,
	   "restore_world on another world, swapped shards: %s", err.msg);
	ok(restore_world_at(swapped, 2, json, 2, &err) < 0 && strcmp(err.msg, want) == 0,
	   "restore_world on the same world, swapped shards: %s", err.msg);
	char mixed[2][JSON];
	snprintf(mixed[0], JSON, "%s", json[0]);
	made = save_at(shorter, 2, 1, 5, mixed[1], JSON, got) == 0;
	ok(made && restore_world_at(man, 2, mixed, 2, &err) < 0 &&
	   strstr(err.msg, "state 1 (part 1) is not from the run of state 0") != NULL,
	   "restore_world: states of two lists: %s", err.msg);

	/* A long list: the identity alone, still checked. */
	char *end;
	made = save_at(lng, 2, 1, 5, json[2], JSON, next) == 0;
	ok(made && strstr(json[2], "\"shards\":42") && !strstr(json[2], "\"names\"") &&
	   strlen(json[2]) < 200,
	   "42 shards: the state keeps the identity, not the names: %s", json[2]);
	ok(restore_at(lng, 2, 1, json[2], got, &err) == 0 && strcmp(got, next) == 0,
	   "42 shards: the same list resumes at '%s'", got);
	const char *id = strstr(json[2], "\"files\":\"");
	snprintf(want, sizeof(want), "dataset state: saved for another shard list (42 shards, identity %.16s), this list has 42 (identity ",
		 id ? id + 9 : "?");
	ok(restore_at(lswapped, 2, 1, json[2], got, &err) < 0 &&
	   strncmp(err.msg, want, strlen(want)) == 0 && (end = strstr(err.msg, WHY)) &&
	   strcmp(end + strlen(WHY), " (paths below their common directory, sample counts, sizes and first 4 KiB)") == 0,
	   "42 shards, two swapped: %s", err.msg);

	/*
	 * Shards of the same names, counts and sizes in other folders: the
	 * folder is part of the list (below the common directory), and so is
	 * the content. r/ holds p-* with one data byte changed in each.
	 */
	char other[300], nr[300], rn[300];
	made = 1;
	for (int i = 0; i < 7; i++) {
		char from[300], to[300], buf[1 << 16];
		snprintf(from, sizeof(from), "%s/p-%03d.tar", dir, i);
		snprintf(to, sizeof(to), "%s/r", dir);
		mkdir(to, 0755);
		snprintf(to, sizeof(to), "%s/r/p-%03d.tar", dir, i);
		FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
		size_t n = in ? fread(buf, 1, sizeof(buf), in) : 0;
		made = made && in && out && n > 513 && n < sizeof(buf);
		if (made)
			buf[512] ^= 1; /* the first member's data */
		made = made && fwrite(buf, 1, n, out) == n;
		if (in)
			fclose(in);
		if (out)
			made = fclose(out) == 0 && made;
	}
	snprintf(other, sizeof(other), "%s/r/p-{000..006}.tar", dir);
	made = made && save_at(brace, 2, 1, 5, json[0], JSON, next) == 0;
	snprintf(want, sizeof(want), "dataset state: saved for shards of the same names and counts whose sizes or contents differ (identity ");
	ok(made && restore_at(other, 2, 1, json[0], got, &err) < 0 &&
	   strncmp(err.msg, want, strlen(want)) == 0 && strstr(err.msg, WHY),
	   "like-named shards of another folder, same counts and sizes: %s", err.msg);
	snprintf(nr, sizeof(nr), "%s/{n,r}/p-{000..006}.tar", dir);
	snprintf(rn, sizeof(rn), "%s/{r,n}/p-{000..006}.tar", dir);
	snprintf(want, sizeof(want), "dataset state: saved for shard 0 'n/p-000.tar' (8 samples), this list has 'r/p-000.tar' (8 samples) there%s",
		 WHY);
	made = save_at(nr, 2, 1, 5, json[0], JSON, next) == 0;
	ok(made && restore_at(rn, 2, 1, json[0], got, &err) < 0 && strcmp(err.msg, want) == 0,
	   "two folders of like-named shards swapped: %s", err.msg);
	ok(made && restore_at(nr, 2, 1, json[0], got, &err) == 0 && strcmp(got, next) == 0,
	   "two folders of like-named shards, in their order, resume at '%s'", got);

	/* A state saved with "list" but before "files": checked on basenames. */
	char mid[JSON];
	made = save_at(man, 2, 1, 5, json[0], JSON, next) == 0 &&
	       (id = strstr(json[0], ",\"files\":\"")) != NULL;
	if (made)
		snprintf(mid, sizeof(mid), "%.*s%s", (int)(id - json[0]), json[0], id + 27);
	ok(made && !strstr(mid, "files") && restore_at(other, 2, 1, mid, got, &err) == 0 &&
	   strcmp(got, next) == 0,
	   "a state without \"files\" resumes on basenames and counts, as before: %s", made ? mid : err.msg);
	snprintf(want, sizeof(want), "dataset state: saved for shard 3 'p-003.tar' (8 samples), this list has 'p-004.tar' (8 samples) there%s",
		 WHY);
	ok(made && restore_at(swapped, 2, 1, mid, got, &err) < 0 && strcmp(err.msg, want) == 0,
	   "a state without \"files\" is still refused on swapped basenames: %s", err.msg);

	/* A state saved before states named their list: taken on its counts. */
	char old[JSON];
	made = save_at(man, 2, 1, 5, json[0], JSON, next) == 0 &&
	       (end = strstr(json[0], ",\"list\"")) != NULL;
	if (made)
		snprintf(old, sizeof(old), "%.*s}", (int)(end - json[0]), json[0]);
	ok(made && restore_at(moved, 2, 1, old, got, &err) == 0 && strcmp(got, next) == 0,
	   "a state without a list resumes as before: %s", made ? old : err.msg);
	ok(restore_at(swapped, 2, 1, old, got, &err) == 0,
	   "a state without a list is taken on its counts: two shards of one size swapped pass, as before");
	ok(restore_at(shorter, 2, 1, old, got, &err) < 0 &&
	   strstr(err.msg, "dataset state: position 5 of 25 samples; this part has 24") != NULL,
	   "a state without a list still has its counts checked: %s", err.msg);

	/* The text: names escaped and read back; malformed lists refused. */
	gk_shard_state_shard nm[2] = {{"a\"b\\c\td.tar", 3}, {"\xc3\xa9.tar", 0}};
	gk_shard_state st = {.seed = 1, .samples = 3, .parts = 1, .window = 1, .list = 0xfedcba9876543210ull,
			     .shards = 2, .names = nm, .nnames = 2}, back;
	char buf[512];
	int rt = gk_shard_state_format(&st, buf, sizeof(buf)) > 0 &&
		 gk_shard_state_parse(buf, &back, &err) == 0;
	ok(rt && back.list == st.list && back.shards == 2 && back.nnames == 2 &&
	   strcmp(back.names[0].name, nm[0].name) == 0 && back.names[0].samples == 3 &&
	   strcmp(back.names[1].name, nm[1].name) == 0 && back.names[1].samples == 0 &&
	   strstr(buf, "\"names\":[[\"a\\\"b\\\\c\\u0009d.tar\",3],[\"\xc3\xa9.tar\",0]]"),
	   "names round-trip through JSON: %s", buf);
	if (rt)
		gk_shard_state_free(&back);
	static const char *bad[][2] = {
		{"\"list\":\"12345\",\"shards\":2", "dataset state: 'list' is not 16 hex digits"},
		{"\"list\":\"fedcba9876543210\"", "dataset state: 'shards' is not a count of shards"},
		{"\"list\":\"fedcba9876543210\",\"shards\":2,\"names\":[[\"a\",1]]",
		 "dataset state: 'names' does not give a name and a count for each of its 'shards' (2)"},
		{"\"list\":\"fedcba9876543210\",\"shards\":1,\"names\":[[\"a\",-1]]",
		 "dataset state: 'names' does not give a name and a count for each of its 'shards' (1)"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"seed\":1,\"epoch\":0,\"pos\":0,\"samples\":3,\"part\":0,\"parts\":1,%s}",
			 bad[i][0]);
		ok(gk_shard_state_parse(buf, &back, &err) < 0 && strcmp(err.msg, bad[i][1]) == 0 &&
		   back.names == NULL && back.hist == NULL,
		   "refused: %s: %s", bad[i][0], err.msg);
	}
}

/* ---- an index that is not its shard's ---------------------------------------- */

static char notes[4][1400];
static int nnotes;

static void on_note(void *ctx, const char *msg)
{
	(void)ctx;
	if (nnotes < 4)
		snprintf(notes[nnotes], sizeof(notes[0]), "%s", msg);
	nnotes++;
}

/* A shard of n samples: key "%03d" of k[i], one .txt of sz[i] bytes of
 * 'A' + k[i]. */
static int make_sized(const char *path, const int *k, const int *sz, int n)
{
	gk_err err = {0};
	gk_shard_write_opts o = {.pattern = path, .index = 1};
	gk_shard_writer *w;
	static char buf[2048];
	if (gk_shard_writer_open(&w, &o, &err) < 0)
		return diag("%s", err.msg), -1;
	for (int i = 0; i < n; i++) {
		char key[8];
		snprintf(key, sizeof(key), "%03d", k[i]);
		memset(buf, 'A' + k[i], (size_t)sz[i]);
		gk_shard_member m = {.ext = "txt", .data = buf, .size = (uint64_t)sz[i]};
		if (gk_shard_writer_add(w, key, 1, &m, &err) < 0)
			return diag("%s", err.msg), -1;
	}
	return gk_shard_writer_close(w, NULL, &err) < 0 ? diag("%s", err.msg), -1 : 0;
}

/* Every sample of src, in order, against the shard made from k and sz. */
static int read_all(const char *src, size_t prefetch, const int *k, const int *sz,
		    int n, gk_err *err)
{
	gk_shard_dataset_opts o = {.prefetch = prefetch, .note = on_note};
	gk_shard_dataset *d;
	const gk_shard_sample *s;
	int got = 0, good = 1, rc;
	nnotes = 0;
	if (gk_shard_dataset_open(&d, src, &o, err) < 0)
		return -1;
	while ((rc = gk_shard_dataset_next(d, &s, err)) == 1) {
		char key[8];
		snprintf(key, sizeof(key), "%03d", got < n ? k[got] : -1);
		const unsigned char *p = s->m[0].data;
		good &= got < n && strcmp(s->key, key) == 0 && s->n == 1 &&
			s->m[0].size == (uint64_t)sz[got];
		for (uint64_t j = 0; good && j < s->m[0].size; j++)
			good &= p[j] == 'A' + k[got];
		got++;
	}
	gk_shard_dataset_close(d);
	if (rc < 0)
		return -1;
	return good && got == n ? 0 : gk_errf(err, "%d samples, contents %s", got, good ? "right" : "wrong");
}

static void test_stale_index(void)
{
	/*
	 * In 512-byte blocks (header + data) x is [2, 2, 3, 3] and y is
	 * [2, 3, 2, 3]: the same size, the same first and last sample, the
	 * index of x wrong for y from sample 1 on. z is [2, 5, 3] under keys
	 * 0, 1, 3: x's size, first and last samples again, but three samples.
	 */
	static const int k4[] = {0, 1, 2, 3}, kz[] = {0, 1, 3};
	static const int sx[] = {100, 100, 700, 700}, sy[] = {100, 700, 100, 700},
			 sz[] = {100, 2000, 700};
	char x[300], y[300], z[300], xi[300], yi[300], zi[300], mx[300], brace[300];
	snprintf(x, sizeof(x), "%s/st/x.tar", dir);
	snprintf(y, sizeof(y), "%s/st/y.tar", dir);
	snprintf(z, sizeof(z), "%s/st/z.tar", dir);
	snprintf(xi, sizeof(xi), "%s/st/x.idx", dir);
	snprintf(yi, sizeof(yi), "%s/st/y.idx", dir);
	snprintf(zi, sizeof(zi), "%s/st/z.idx", dir);
	snprintf(mx, sizeof(mx), "%s/st/m.json", dir);
	snprintf(brace, sizeof(brace), "%s/st/{x,y}.tar", dir);
	gk_err err = {0};
	gk_shard_manifest m = {0};
	char cmd[2500];
	/* x.tar becomes y.tar; x.idx stays. z.tar keeps x's index. */
	snprintf(cmd, sizeof(cmd), "cp %s %s.x && cp %s %s && cp %s %s.x && cp %s.x %s", x, x,
		 y, x, xi, xi, xi, zi);
	int made = make_sized(x, k4, sx, 4) == 0 && make_sized(y, k4, sy, 4) == 0 &&
		   make_sized(z, kz, sz, 3) == 0 && system(cmd) == 0 &&
		   gk_shard_manifest_add(&m, x, 4, 0, 0, &err) == 0 &&
		   gk_shard_manifest_write(mx, &m, &err) == 0;
	gk_shard_manifest_free(&m);
	ok(made, "shards x, y, z of %s", dir);
	char want[1400];
	snprintf(want, sizeof(want), "index '%s' does not match '%s' at sample 1 '001' (rebuild it with data-pack --index): reading the tar instead",
		 xi, x);
	for (size_t pf = 0; pf <= 2; pf += 2) {
		int rc = read_all(mx, pf, k4, sy, 4, &err);
		ok(rc == 0 && nnotes == 1 && strcmp(notes[0], want) == 0,
		   "manifest, prefetch %zu: y's samples, one note: %s", pf,
		   rc < 0 ? err.msg : notes[0]);
	}
	static const int k8[] = {0, 1, 2, 3, 0, 1, 2, 3};
	static const int s8[] = {100, 700, 100, 700, 100, 700, 100, 700};
	int rc = read_all(brace, 2, k8, s8, 8, &err);
	ok(rc == 0 && nnotes == 1 && strcmp(notes[0], want) == 0,
	   "brace list x, y: y's samples twice, one note: %s", rc < 0 ? err.msg : notes[0]);
	/* z: its index (x's) passes the first and last sample, not the count */
	snprintf(want, sizeof(want), "shard '%s': 3 samples; the manifest or its index said 4 (rebuild the index with data-pack --index)",
		 z);
	rc = read_all(z, 0, kz, sz, 3, &err);
	ok(rc < 0 && strcmp(err.msg, want) == 0 && nnotes == 1, "z: %s", err.msg);
	/* with its own index, nothing to say */
	snprintf(cmd, sizeof(cmd), "cp %s %s", yi, xi);
	rc = system(cmd) == 0 ? read_all(x, 2, k4, sy, 4, &err) : -1;
	ok(rc == 0 && nnotes == 0, "x with y's index: no note");
}

/* The strings of l joined by '\n' with dir's prefix dropped. */
static void joined(const gk_strlist *l, char *buf, size_t len)
{
	size_t n = 0, dl = strlen(dir) + 1;
	buf[0] = '\0';
	for (size_t i = 0; i < l->n && n < len; i++)
		n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "\n" : "",
				      strncmp(l->v[i], dir, dl - 1) == 0 ? l->v[i] + dl : l->v[i]);
}

static void touch(const char *name)
{
	char path[300];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *fp = fopen(path, "w");
	if (fp)
		fclose(fp);
}

/*
 * Shard lists: a directory is its *.tar and *.tar.lz4 files and a glob its
 * matches, both in byte order (checked under a locale that collates
 * otherwise, when there is one), the same list as the brace pattern;
 * empty ones are errors that say what is there.
 */
static void test_list_expand(void)
{
	char src[300], got[2048], want[2048];
	gk_strlist l = {0}, b = {0};
	gk_err err = {0};
	int r;

	snprintf(src, sizeof(src), "%s/p-{000..006}.tar", dir);
	gk_brace_expand(src, 0, &b, &err);
	joined(&b, want, sizeof(want));
	gk_strlist_free(&b);
	const char *same[] = {"DIR", "DIR/", "DIR/*.tar", "DIR/p-00[0-6].tar",
			      "{DIR/p-{000..003}.tar,DIR/p-00[4-6].tar}"};
	for (size_t i = 0; i < GK_ARRAY_SIZE(same); i++) {
		switch (i) {
		case 0: snprintf(src, sizeof(src), "%s", dir); break;
		case 1: snprintf(src, sizeof(src), "%s/", dir); break;
		case 2: snprintf(src, sizeof(src), "%s/*.tar", dir); break;
		case 3: snprintf(src, sizeof(src), "%s/p-00[0-6].tar", dir); break;
		default: snprintf(src, sizeof(src), "{%s/p-{000..003}.tar,%s/p-00[4-6].tar}", dir, dir);
		}
		r = gk_shard_list_expand(src, &l, &err);
		joined(&l, got, sizeof(got));
		ok(r == 0 && strcmp(got, want) == 0, "list '%s' is the brace pattern's 7 shards",
		   same[i]);
		if (r < 0 || strcmp(got, want))
			diag("%s", r < 0 ? err.msg : got);
		gk_strlist_free(&l);
	}
	snprintf(src, sizeof(src), "%s/{n,z}/*-00[0-2].tar*", dir);
	r = gk_shard_list_expand(src, &l, &err);
	joined(&l, got, sizeof(got));
	is_str(r == 0 ? got : err.msg, "n/p-000.tar\nn/p-001.tar\nn/p-002.tar\n"
	       "z/l-000.tar.lz4\nz/l-001.tar.lz4\nz/l-002.tar.lz4", "braces, then a glob per word");
	gk_strlist_free(&l);

	/* Byte order, whatever the locale: '_' (0x5f) between 'B' and 'a'. */
	char o[300];
	snprintf(o, sizeof(o), "%s/o", dir);
	mkdir(o, 0755);
	touch("o/a.tar");
	touch("o/B.tar");
	touch("o/_.tar");
	touch("o/x[1].tar");
	touch("o/notes.txt");
	const char *loc = setlocale(LC_ALL, "en_US.UTF-8");
	if (!loc)
		loc = setlocale(LC_ALL, "C.UTF-8");
	diag("collation locale: %s", loc ? loc : "C");
	for (int dirform = 0; dirform < 2; dirform++) {
		if (dirform)
			snprintf(src, sizeof(src), "%s/o", dir);
		else
			snprintf(src, sizeof(src), "%s/o/*.tar", dir);
		r = gk_shard_list_expand(src, &l, &err);
		joined(&l, got, sizeof(got));
		is_str(r == 0 ? got : err.msg, "o/B.tar\no/_.tar\no/a.tar\no/x[1].tar",
		       dirform ? "a directory: its shards in byte order" : "a glob: in byte order");
		gk_strlist_free(&l);
	}
	setlocale(LC_ALL, "C");
	snprintf(src, sizeof(src), "%s/o/x[1].tar", dir);
	r = gk_shard_list_expand(src, &l, &err);
	joined(&l, got, sizeof(got));
	is_str(r == 0 ? got : err.msg, "o/x[1].tar", "a name with '[' that matches nothing is itself");
	gk_strlist_free(&l);

	snprintf(src, sizeof(src), "%s/p-000*", dir);
	r = gk_shard_list_expand(src, &l, &err);
	snprintf(want, sizeof(want), "shard list: '%s/p-000*' matches '%s/p-000.idx', an index, not a shard (narrow it to the shards, e.g. '*.tar')", dir, dir);
	is_str(r < 0 ? err.msg : "(no error)", want, "a glob that matches an index says so");
	gk_strlist_free(&l);

	/* Empty: errors that name the list and what is there instead. */
	char e[300];
	snprintf(e, sizeof(e), "%s/e", dir);
	mkdir(e, 0755);
	snprintf(src, sizeof(src), "%s/e/*.tar", dir);
	r = gk_shard_list_expand(src, &l, &err);
	snprintf(want, sizeof(want), "shard list: no file matches '%s/e/*.tar'", dir);
	ok(r < 0 && l.n == 0, "a glob that matches nothing is an error");
	is_str(err.msg, want, "  message");
	r = gk_shard_list_expand(e, &l, &err);
	snprintf(want, sizeof(want), "shard list: directory '%s/e' holds no shards (*.tar, *.tar.lz4)", dir);
	ok(r < 0 && l.n == 0, "a directory without shards is an error");
	is_str(err.msg, want, "  message");
	touch("e/train_000.bin");
	r = gk_shard_list_expand(e, &l, &err);
	snprintf(want, sizeof(want), "shard list: directory '%s/e' holds no shards (*.tar, *.tar.lz4); "
		 "token files are listed by a glob, e.g. '%s/e/*train*.bin'", dir, dir);
	is_str(r < 0 ? err.msg : "(no error)", want, "  with token files, the glob that lists them");
	touch("e/m.json");
	r = gk_shard_list_expand(e, &l, &err);
	snprintf(want, sizeof(want), "shard list: directory '%s/e' holds no shards (*.tar, *.tar.lz4); "
		 "a manifest is read when named: '%s/e/m.json'", dir, dir);
	is_str(r < 0 ? err.msg : "(no error)", want, "  with a manifest, its name");
	gk_strlist_free(&l);

	/* The dataset: a directory is the same list as its brace pattern. */
	gk_shard_dataset_opts opt = {0};
	gk_shard_dataset *d1 = NULL, *d2 = NULL;
	gk_shard_state s1, s2;
	snprintf(src, sizeof(src), "%s/p-{000..006}.tar", dir);
	int o1 = gk_shard_dataset_open(&d1, src, &opt, &err);
	int o2 = gk_shard_dataset_open(&d2, dir, &opt, &err);
	if (o1 == 0 && o2 == 0) {
		gk_shard_dataset_state(d1, &s1);
		gk_shard_dataset_state(d2, &s2);
	}
	ok(o1 == 0 && o2 == 0 && s1.files == s2.files && s1.list == s2.list &&
	   gk_shard_dataset_manifest(d2)->samples == NSAMPLES,
	   "dataset from the directory: the brace pattern's shards, counts and identity");
	if (o1 == 0)
		gk_shard_dataset_close(d1);
	if (o2 == 0)
		gk_shard_dataset_close(d2);
	r = gk_shard_dataset_open(&d1, e, &opt, &err);
	ok(r < 0 && strstr(err.msg, "holds no shards"), "dataset from an empty directory: %s", err.msg);
}

int main(void)
{
	char pat[256], man[256], pat4[256], man4[256], brace[256];
	if (!mkdtemp(dir))
		return 1;
	snprintf(pat, sizeof(pat), "%s/p-%%03d.tar", dir);
	snprintf(man, sizeof(man), "%s/p.json", dir);
	snprintf(pat4, sizeof(pat4), "%s/z/l-%%03d.tar.lz4", dir);
	snprintf(man4, sizeof(man4), "%s/z/l.json", dir);
	snprintf(brace, sizeof(brace), "%s/p-{000..006}.tar", dir);
	char patn[256], mann[256];
	snprintf(patn, sizeof(patn), "%s/n/p-%%03d.tar", dir);
	snprintf(mann, sizeof(mann), "%s/n/p.json", dir);
	ok(write_shards(pat, man, 0, 1) == 0, "write 7 plain shards");
	ok(write_shards(pat4, man4, 1, 1) == 0, "write 7 LZ4 shards (2 compression threads)");
	ok(write_shards(patn, mann, 0, 0) == 0, "write 7 plain shards without indexes");

	gk_shard_manifest m;
	gk_err err;
	size_t sh;
	uint64_t loc;
	ok(gk_shard_manifest_load(man, &m, &err) == 0 && m.n == 7 && m.samples == NSAMPLES &&
	   gk_shard_manifest_locate(&m, 17, &sh, &loc) == 0 && sh == 2 && loc == 1 &&
	   gk_shard_manifest_locate(&m, NSAMPLES, &sh, &loc) < 0,
	   "manifest: 7 shards, 50 samples, sample 17 is shard 2 local 1");
	gk_shard_manifest_free(&m);

	test_order(man, "manifest");
	test_order(brace, "brace list");
	test_order(man4, "lz4 manifest");
	test_order(mann, "no index (tar reader)");
	test_split(man, "plain");
	test_split(man4, "lz4");
	test_resume(man, "plain", 0);
	test_resume(man, "plain", 8);
	test_resume(man4, "lz4", 2);
	test_resume(mann, "no index (tar reader)", 3);
	test_split(mann, "no index (tar reader)");

	static const int pairs[][3] = {{3, 2}, {2, 5}, {4, 3}, {1, 3}, {5, 1}, {3, 7},
				       {3, 2, 4}, {2, 3, 2}};
	for (int shuf = 0; shuf <= 1; shuf++)
		for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++)
			test_remap(i % 2 ? man : mann, pairs[i], pairs[i][2] ? 3 : 2, shuf,
				   i % 3 ? 0 : 2);
	test_remap(man4, pairs[0], 2, 1, 1);
	test_remap_next_epoch(man);
	test_list(man, mann);
	test_stale_index();
	test_list_expand();

	/* Sorting, not summing: [2,2,2,2,2] has the sum of a permutation. */
	uint64_t fake[5] = {2, 2, 2, 2, 2};
	ok(!is_permutation(fake, 5), "the permutation check refuses [2,2,2,2,2]");
	int perms = 1, differ = 0;
	uint64_t p[1000], q[1000];
	for (size_t n = 0; n <= 1000; n += n < 20 ? 1 : 245) {
		gk_shard_permute(p, n, 42 + n);
		gk_shard_permute(q, n, 43 + n);
		perms &= is_permutation(p, n) && is_permutation(q, n);
		differ += n > 3 && memcmp(p, q, n * sizeof(*p)) != 0;
	}
	ok(perms && differ > 10, "permute yields permutations (n = 0..19, 20..1000), keyed");
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return done_testing();
}
