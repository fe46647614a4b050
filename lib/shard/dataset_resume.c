/*
 * dataset_resume.c - a dataset's position as a state (gk_shard_state),
 * and back: the same part resumes where it was; a run on another number
 * of ranks or workers remaps the rest of the epoch among its parts
 * (shard.h spells out the order), replaying the history of remaps.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shard/dataset_internal.h"

void gk_shard_dataset_state(const gk_shard_dataset *d, gk_shard_state *st)
{
	st->seed = d->o.seed;
	st->epoch = d->epoch;
	st->pos = d->pos;
	st->samples = d->per;
	st->part = (uint32_t)d->part;
	st->parts = (uint32_t)d->parts;
	st->window = sh_dataset_window(d);
	st->hist = d->hist;
	st->nhist = d->nhist;
	st->list = d->list_id;
	st->files = d->files_id;
	st->has_files = 1;
	st->shards = d->man.n;
	st->names = d->names;
	st->nnames = d->nnames;
}

/* ---- remapping an epoch to another world size --------------------------------- */

/*
 * Append to out the samples of a part's list (elements L[0..n), or the
 * range start.. when L is NULL) that the part had not returned at pos:
 * the part read its list in windows of B, window w permuted by key(w),
 * so the returned ones are all windows before pos/B and, in window pos/B,
 * the elements at the first pos%B permuted positions.
 */
static int unseen(const gk_shard_dataset *d, uint64_t epoch, uint64_t part,
		  uint64_t gen, const uint64_t *L, uint64_t start, uint64_t n,
		  uint64_t pos, uint64_t B, uint64_t *out, size_t *nout, gk_err *err)
{
	uint64_t w = pos / B, j = pos % B, w0 = w * B;
	uint64_t wn = w0 < n ? (n - w0 < B ? n - w0 : B) : 0;
	unsigned char *seen = NULL;
	if (j > 0) {
		uint64_t *perm = malloc(wn * sizeof(*perm));
		seen = calloc(wn, 1);
		if (!perm || !seen) {
			free(perm);
			free(seen);
			return gk_err_sys(err, ENOMEM, "dataset remap");
		}
		if (B > 1)
			gk_shard_permute(perm, (size_t)wn,
					 sh_dataset_window_key(d, epoch, part, gen, w));
		else
			perm[0] = 0;
		for (uint64_t t = 0; t < j; t++)
			seen[perm[t]] = 1;
		free(perm);
	}
	for (uint64_t t = w0; t < n; t++)
		if (!seen || t >= w0 + wn || !seen[t - w0])
			out[(*nout)++] = L ? L[t] : start + t;
	free(seen);
	return 0;
}

/* Part q of P when n samples are cut evenly: the first n mod P get one more. */
static void split(uint64_t n, uint64_t P, uint64_t q, uint64_t *off, uint64_t *len)
{
	uint64_t base = n / P, r = n % P;
	*off = q * base + (q < r ? q : r);
	*len = base + (q < r);
}

/*
 * The samples of part q of P in the epoch a history describes: replay it
 * generation by generation (each part's unseen samples, in stream order,
 * cut evenly among the next generation's parts), then cut the last
 * generation's unseen samples into P. *list is malloc'ed (NULL with
 * want_list 0: only *len). Checks the history fits this dataset.
 */
static int remap(const gk_shard_dataset *d, uint64_t epoch, const uint64_t *hist,
		 size_t nhist, uint64_t P, uint64_t q, uint64_t **list, uint64_t *len,
		 gk_err *err)
{
	uint64_t S = d->man.samples, *U = NULL, *next = NULL, gen = 0;
	size_t nU = 0;
	int rc = -1;
	for (size_t i = 0; i < nhist; gen++) {
		uint64_t Pg = i + 2 <= nhist ? hist[i] : 0, B = i + 2 <= nhist ? hist[i + 1] : 0;
		if (Pg == 0 || B == 0 || Pg > nhist - i - 2 || (gen == 0 && S / Pg == 0)) {
			gk_errf(err, "dataset state: remap history: generation %llu is malformed",
				(unsigned long long)gen);
			goto out;
		}
		const uint64_t *pos = hist + i + 2;
		size_t cap = gen == 0 ? (size_t)(S / Pg * Pg) : nU, nn = 0;
		if (!(next = malloc((cap + 1) * sizeof(*next)))) {
			gk_err_sys(err, ENOMEM, "dataset remap");
			goto out;
		}
		for (uint64_t p = 0; p < Pg; p++) {
			uint64_t off, n;
			if (gen == 0)
				off = p * (S / Pg), n = S / Pg;
			else
				split(nU, Pg, p, &off, &n);
			if (pos[p] > n) {
				gk_errf(err, "dataset state: remap history: part %llu of %llu at %llu of its %llu samples",
					(unsigned long long)p, (unsigned long long)Pg,
					(unsigned long long)pos[p], (unsigned long long)n);
				goto out;
			}
			if (unseen(d, epoch, p, gen, gen ? U + off : NULL, off, n, pos[p], B,
				   next, &nn, err) < 0)
				goto out;
		}
		free(U);
		U = next;
		next = NULL;
		nU = nn;
		i += 2 + (size_t)Pg;
	}
	uint64_t off, n;
	split(nU, P, q, &off, &n);
	*len = n;
	if (list) {
		if (!(*list = malloc((n + 1) * sizeof(**list)))) {
			gk_err_sys(err, ENOMEM, "dataset remap");
			goto out;
		}
		memcpy(*list, U + off, n * sizeof(**list));
	}
	rc = 0;
out:
	free(U);
	free(next);
	return rc;
}

/* ---- restoring ------------------------------------------------------------------ */

/* Same run options: a state's window says how its part was read. */
static int check_window(const gk_shard_dataset *d, const gk_shard_state *st,
			gk_err *err)
{
	if (st->window && st->window != sh_dataset_window(d))
		return gk_errf(err, "dataset state: saved with a shuffle window of %llu samples; this dataset reads %llu (same seed, shuffle and buffer to resume)",
			       (unsigned long long)st->window,
			       (unsigned long long)sh_dataset_window(d));
	return 0;
}

/*
 * Same shard list: the positions are into the stream of this list's
 * samples, so another list (reordered, a shard replaced by another of
 * the same count, the same names in another folder) would resume at
 * other samples, repeating some and skipping others. Named by the first
 * difference when the state holds the list. A state with "files" is
 * checked on it (paths below the common directory, counts, sizes,
 * heads); one saved before it, with only "list", on basenames and
 * counts as it was then; one from before lists were named (shards 0) on
 * its counts alone.
 */
static int check_list(const gk_shard_dataset *d, const gk_shard_state *st,
		      gk_err *err)
{
	static const char why[] = "a state resumes on the same shard list, in the same order";
	size_t n = d->man.n;
	if (st->shards == 0)
		return 0;
	/* d->names is NULL for a long list: compare only while st's are there */
	const gk_shard_state_shard *mine = st->has_files ? d->names : d->base_names;
	for (size_t i = 0; mine && st->nnames == st->shards && i <= st->nnames && i <= n; i++) {
		const gk_shard_state_shard *a = i < st->nnames ? &st->names[i] : NULL;
		const char *b = i < n ? mine[i].name : NULL;
		if (a && b && strcmp(a->name, b) == 0 && a->samples == d->man.v[i].samples)
			continue;
		if (a && b)
			return gk_errf(err, "dataset state: saved for shard %zu '%s' (%llu samples), this list has '%s' (%llu samples) there: %s",
				       i, a->name, (unsigned long long)a->samples, b,
				       (unsigned long long)d->man.v[i].samples, why);
		if (a)
			return gk_errf(err, "dataset state: saved for shard %zu '%s' (%llu samples), this list ends before it, after %zu shards: %s",
				       i, a->name, (unsigned long long)a->samples, n, why);
		if (b)
			return gk_errf(err, "dataset state: saved for a list of %zu shards, this list goes on with shard %zu '%s' (%llu samples): %s",
				       i, i, b, (unsigned long long)d->man.v[i].samples, why);
	}
	uint64_t want = st->has_files ? st->files : st->list;
	uint64_t have = st->has_files ? d->files_id : d->list_id;
	if (want == have && st->shards == n)
		return 0;
	char x[17], y[17];
	if (st->has_files && st->shards == n && st->list == d->list_id && st->nnames == n)
		return gk_errf(err, "dataset state: saved for shards of the same names and counts whose sizes or contents differ (identity %s, this list %s): %s",
			       gk_xxh3_hex(want, x), gk_xxh3_hex(have, y), why);
	return gk_errf(err, "dataset state: saved for another shard list (%llu shards, identity %s), this list has %zu (identity %s): %s (%s)",
		       (unsigned long long)st->shards, gk_xxh3_hex(want, x), n,
		       gk_xxh3_hex(have, y), why,
		       st->has_files ? "paths below their common directory, sample counts, sizes and first 4 KiB"
				     : "basenames and sample counts");
}

int gk_shard_dataset_restore(gk_shard_dataset *d, const gk_shard_state *st,
			     gk_err *err)
{
	uint64_t *list = NULL, len = d->per0;
	if (st->seed != d->o.seed || st->parts != d->parts || st->part != d->part)
		return gk_errf(err, "dataset state: saved with seed %llu for part %u of %u, "
			       "restored with seed %llu for part %llu of %llu: the order of the "
			       "samples is the seed's, so a state resumes with its own",
			       (unsigned long long)st->seed, st->part, st->parts,
			       (unsigned long long)d->o.seed, (unsigned long long)d->part,
			       (unsigned long long)d->parts);
	if (check_list(d, st, err) < 0 || check_window(d, st, err) < 0)
		return -1;
	if (st->nhist && remap(d, st->epoch, st->hist, st->nhist, d->parts, d->part,
			       &list, &len, err) < 0)
		return -1;
	if (st->samples != len || st->pos > len) {
		free(list);
		return gk_errf(err, "dataset state: position %llu of %llu samples; this part has %llu in that epoch",
			       (unsigned long long)st->pos, (unsigned long long)st->samples,
			       (unsigned long long)len);
	}
	sh_dataset_stop(d);
	if (sh_dataset_set_remap(d, st->hist, st->nhist, list, len, err) < 0)
		return -1;
	return sh_dataset_go(d, st->epoch, st->pos, err);
}

int gk_shard_dataset_restore_world(gk_shard_dataset *d, const gk_shard_state *st,
				   size_t n, gk_err *err)
{
	if (n == 0)
		return gk_errf(err, "dataset states: none given");
	const gk_shard_state *a = &st[0];
	if (a->parts != n)
		return gk_errf(err, "dataset states: %zu given for a world of %u parts (give every rank's and worker's)",
			       n, a->parts);
	unsigned char *have = calloc(n, 1);
	if (!have)
		return gk_err_sys(err, ENOMEM, "dataset states");
	uint64_t *hist = NULL, *list = NULL, len;
	int rc = -1;
	for (size_t i = 0; i < n; i++) {
		const gk_shard_state *s = &st[i];
		if (s->seed != d->o.seed || s->epoch != a->epoch || s->parts != a->parts ||
		    s->nhist != a->nhist || s->window != a->window ||
		    s->list != a->list || s->shards != a->shards ||
		    s->has_files != a->has_files || s->files != a->files ||
		    (s->nhist && memcmp(s->hist, a->hist, s->nhist * sizeof(*s->hist)))) {
			gk_errf(err, "dataset states: state %zu (part %u) is not from the run of state 0 (seed %llu, epoch %llu, %u parts)",
				i, s->part, (unsigned long long)a->seed,
				(unsigned long long)a->epoch, a->parts);
			goto out;
		}
		if (s->part >= n || have[s->part]++) {
			gk_errf(err, "dataset states: part %u is out of range or given twice", s->part);
			goto out;
		}
		if (check_window(d, s, err) < 0)
			goto out;
	}
	/* The states agree on their list (above): it must be this one. */
	if (check_list(d, a, err) < 0)
		goto out;
	/* Every part's count must be what this dataset gives it: same data. */
	for (size_t i = 0; i < n; i++) {
		const gk_shard_state *s = &st[i];
		uint64_t want = s->parts ? d->man.samples / s->parts : 0;
		if (s->nhist && remap(d, s->epoch, s->hist, s->nhist, s->parts, s->part, NULL,
				      &want, err) < 0)
			goto out;
		if (s->samples != want || s->pos > want) {
			gk_errf(err, "dataset states: part %u at %llu of %llu samples; this dataset gives it %llu",
				s->part, (unsigned long long)s->pos,
				(unsigned long long)s->samples, (unsigned long long)want);
			goto out;
		}
	}
	if (a->parts == d->parts) {
		/* The same world: every part resumes exactly where it was. */
		for (size_t i = 0; i < n; i++)
			if (st[i].part == d->part)
				rc = gk_shard_dataset_restore(d, &st[i], err);
		goto out;
	}
	/* Another world: one more generation, each old part at its position. */
	size_t nh = a->nhist + 2 + n;
	if (!(hist = malloc(nh * sizeof(*hist)))) {
		gk_err_sys(err, ENOMEM, "dataset states");
		goto out;
	}
	if (a->nhist)
		memcpy(hist, a->hist, a->nhist * sizeof(*hist));
	hist[a->nhist] = n;
	hist[a->nhist + 1] = a->window ? a->window : sh_dataset_window(d);
	for (size_t i = 0; i < n; i++)
		hist[a->nhist + 2 + st[i].part] = st[i].pos;
	if (remap(d, a->epoch, hist, nh, d->parts, d->part, &list, &len, err) < 0)
		goto out;
	sh_dataset_stop(d);
	if (sh_dataset_set_remap(d, hist, nh, list, len, err) < 0)
		goto out;
	rc = sh_dataset_go(d, a->epoch, 0, err);
out:
	free(have);
	free(hist);
	return rc;
}
