/*
 * data.c - the trainer's token stream: micro-batches of B rows of T+1
 * tokens from shards (.txt / .npy members) or from llm.c / nanoGPT .bin
 * token files, with the exact position kept for checkpoints.
 *
 * The windowing is described in gpu-train(1), "DATA"; in short, a rank
 * reads its stream from a head position h: row b of a micro-batch is
 * tokens [h + b*T, h + b*T + T + 1), inputs the first T, targets the last
 * T, and h then moves on by B*T (llm.c's dataloader: every token is a
 * target once).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "nn/data.h"
#include "shard/shard.h"

/* llm.c's token file header: 256 int32, magic, version, token count. */
#define LLMC_MAGIC 20240520
#define LLMC_HEADER 1024

/* ---- the stream ------------------------------------------------------------------ */

/* A .bin token file, mapped. */
typedef struct binfile {
	char *path;
	const unsigned char *map;
	size_t maplen;
	const uint16_t *tok; /* little-endian uint16 tokens */
	uint64_t n;
	int llmc;
	uint64_t hash;       /* XXH3 of the tokens */
} binfile;

/* A sample whose tokens are (partly) in the buffer: the dataset state
 * that re-reads it, and where its tokens start in buf (may be < 0 once
 * its head was compacted away). */
typedef struct pending {
	gk_shard_state st;
	int64_t start, len; /* len: tokens including the end-of-text */
	uint64_t shard, index; /* the sample, as gk_shard_sample names it */
} pending;

/*
 * A sample whose first `skip` tokens (end-of-text included) an earlier
 * world already trained on: a rank it is remapped to starts it there.
 */
typedef struct cut {
	uint64_t epoch, shard, index;
	int64_t skip;
} cut;

struct gk_nn_data {
	gk_nn_data_opts o;
	int bin;
	/* .bin */
	binfile *files;
	size_t nfiles;
	uint64_t total;   /* tokens in all files */
	uint64_t bin_id;  /* the files' token counts and contents, in order */
	uint64_t micro;   /* micro-batches this rank has taken in this epoch */
	uint64_t epoch;
	/* shards */
	gk_shard_dataset *ds;
	int32_t *buf;     /* tokens read and not yet passed by the head */
	size_t len, cap;  /* buf[0..len) */
	size_t head;      /* next window starts at buf[head] */
	pending *q;       /* samples in buf, oldest first */
	size_t nq, qcap;
	int ended;        /* no loop and the epoch ended */
	uint64_t bad;     /* samples skipped under skip_bad */
	uint64_t bad_run; /* skipped since the last usable sample */
	uint64_t bad_epoch; /* the epoch the run of skipped samples began in */
	cut *cuts;        /* this rank's partly used samples (remap) */
	size_t ncuts, cutcap;
	int listed;       /* the shards were named without their manifest */
	int npy_noted;    /* and their unchecked token ids were noted */
};

static cut *find_cut(const gk_nn_data *d, uint64_t epoch, uint64_t shard,
		     uint64_t index)
{
	for (size_t i = 0; i < d->ncuts; i++)
		if (d->cuts[i].epoch == epoch && d->cuts[i].shard == shard &&
		    d->cuts[i].index == index)
			return &d->cuts[i];
	return NULL;
}

static int64_t cut_of(const gk_nn_data *d, uint64_t epoch, uint64_t shard,
		      uint64_t index)
{
	const cut *c = find_cut(d, epoch, shard, index);
	return c ? c->skip : 0;
}

static void drop_cuts(gk_nn_data *d)
{
	free(d->cuts);
	d->cuts = NULL;
	d->ncuts = d->cutcap = 0;
}

/* A sample that cannot be used: fail with rc's message, or skip it (2). */
static int bad_sample(gk_nn_data *d, int rc)
{
	if (!d->o.skip_bad)
		return rc;
	d->bad++;
	return 2;
}

uint64_t gk_nn_data_bad(const gk_nn_data *d)
{
	return d ? d->bad : 0;
}

static int bin_map(binfile *f, const char *path, gk_err *err)
{
	struct stat sb;
	/* opened without blocking: a FIFO with no writer would wait forever */
	int fd = gk_open_regular(path, &sb, err);
	if (fd < 0)
		return -1;
	f->maplen = (size_t)sb.st_size;
	if (f->maplen) {
		void *m = mmap(NULL, f->maplen, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			int e = errno;
			close(fd);
			return gk_err_sys(err, e, "mmap '%s'", path);
		}
		f->map = m;
	}
	close(fd);
	if (!(f->path = strdup(path)))
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	if (f->map)
		gk_map_watch(f->map, f->maplen, f->path); /* truncated later: named */
	/*
	 * llm.c writes a 1024-byte header (int32 magic 20240520, version 1,
	 * token count) before uint16 tokens; nanoGPT's prepare.py writes the
	 * raw uint16 array. A file that starts with the magic is llm.c's,
	 * and must be exactly the header plus the count's tokens; anything
	 * else with an even size is nanoGPT's.
	 */
	if (f->maplen >= LLMC_HEADER) {
		int32_t h[3];
		memcpy(h, f->map, sizeof(h));
		if (h[0] == LLMC_MAGIC) {
			if (h[1] != 1)
				return gk_errf(err, "read '%s': llm.c token file version %d (only 1, uint16 tokens, is supported)",
					       path, h[1]);
			if (h[2] < 0 || (uint64_t)h[2] * 2 + LLMC_HEADER != f->maplen)
				return gk_errf(err, "read '%s': llm.c header says %d tokens, the file holds %zu bytes after the header",
					       path, h[2], f->maplen - LLMC_HEADER);
			f->llmc = 1;
			f->tok = (const uint16_t *)(f->map + LLMC_HEADER);
			f->n = (uint64_t)h[2];
			return 0;
		}
	}
	if (f->maplen % 2)
		return gk_errf(err, "read '%s': odd size %zu: not a uint16 token file",
			       path, f->maplen);
	f->tok = (const uint16_t *)f->map;
	f->n = f->maplen / 2;
	return 0;
}

static int bin_open(gk_nn_data *d, const gk_strlist *paths, gk_err *err)
{
	d->bin = 1;
	if (!(d->files = calloc(paths->n, sizeof(*d->files))))
		return gk_err_sys(err, ENOMEM, "open data");
	for (size_t i = 0; i < paths->n; i++) {
		d->nfiles++;
		if (bin_map(&d->files[i], paths->v[i], err) < 0)
			return -1;
		binfile *f = &d->files[i];
		for (uint64_t j = 0; j < f->n; j++)
			if (f->tok[j] >= d->o.vocab)
				return gk_errf(err, "token file '%s' token %" PRIu64 ": id %u is not below the vocabulary size %" PRId64,
					       f->path, j, f->tok[j], d->o.vocab);
		d->total += f->n;
		/* every token was just read: hashing them costs no more I/O */
		f->hash = gk_xxh3(f->tok, (size_t)f->n * 2);
	}
	d->bin_id = gk_xxh3(&d->nfiles, sizeof(d->nfiles));
	for (size_t i = 0; i < d->nfiles; i++) {
		uint64_t v[3] = {d->bin_id, d->files[i].n, d->files[i].hash};
		d->bin_id = gk_xxh3(v, sizeof(v));
	}
	uint64_t need = (uint64_t)d->o.batch * (uint64_t)d->o.seq * (uint64_t)d->o.world + 1;
	if (d->total < need)
		return gk_errf(err, "data '%s': %" PRIu64 " tokens, fewer than one global micro-batch needs (%" PRIu64 ")",
			       paths->v[0], d->total, need);
	return 0;
}

/* Token number i of the concatenated files. */
static int32_t bin_token(const gk_nn_data *d, uint64_t i)
{
	for (size_t k = 0; k < d->nfiles; k++) {
		if (i < d->files[k].n) {
			uint16_t t;
			memcpy(&t, d->files[k].tok + i, 2);
			return t;
		}
		i -= d->files[k].n;
	}
	return -1;
}

static int bin_next(gk_nn_data *d, int32_t *in, int32_t *tg, gk_err *err)
{
	uint64_t bt = (uint64_t)d->o.batch * (uint64_t)d->o.seq;
	uint64_t start = (d->micro * (uint64_t)d->o.world + (uint64_t)d->o.rank) * bt;
	/* A new epoch when the global micro-batch would not fit whole. */
	if ((d->micro * (uint64_t)d->o.world + (uint64_t)d->o.world) * bt + 1 > d->total) {
		if (!d->o.loop)
			return 0;
		d->epoch++;
		d->micro = 0;
		start = (uint64_t)d->o.rank * bt;
	}
	/* Sequential reads through the file list; rows overlap by one token. */
	for (int b = 0; b < d->o.batch; b++) {
		uint64_t p = start + (uint64_t)b * (uint64_t)d->o.seq;
		for (int t = 0; t < d->o.seq; t++) {
			in[b * d->o.seq + t] = bin_token(d, p + (uint64_t)t);
			tg[b * d->o.seq + t] = bin_token(d, p + (uint64_t)t + 1);
		}
	}
	d->micro++;
	(void)err;
	return 1;
}

/* Append the tokens of one sample (plus end-of-text) to the buffer. */
static int shard_fill(gk_nn_data *d, gk_err *err)
{
	const gk_shard_sample *s;
	gk_shard_state st;
	gk_shard_dataset_state(d->ds, &st);
	int r = gk_shard_dataset_next(d->ds, &s, err);
	if (r <= 0)
		return r;
	const gk_shard_member *npy = NULL, *txt = NULL;
	for (size_t i = 0; i < s->n; i++) {
		if (!strcmp(s->m[i].ext, "npy"))
			npy = &s->m[i];
		else if (!strcmp(s->m[i].ext, "txt"))
			txt = &s->m[i];
	}
	const gk_shard_manifest *man = gk_shard_dataset_manifest(d->ds);
	const char *shard = s->shard < man->n ? man->v[s->shard].path : "?";
	if (!npy && !txt)
		return bad_sample(d, gk_errf(err, "shard '%s' sample '%s': no .txt or .npy member",
					     shard, s->key));
	gk_shard_npy a = {0};
	uint64_t n;
	/*
	 * Token ids of shards named without their manifest, and none beside
	 * them records their tokenizer: said once (by the first rank), not
	 * refused.
	 */
	if (npy && d->listed && !man->tok.present && !d->npy_noted) {
		d->npy_noted = 1;
		if (d->o.rank == 0 && d->o.note)
			d->o.note(d->o.note_ctx, "the shards hold .npy token ids and no manifest beside them records their tokenizer: their vocabulary could not be checked against the model's (data-pack --tokenize --manifest writes one beside the shards)");
	}
	if (npy) {
		if (gk_shard_npy_parse(npy->data, npy->size, &a, err) < 0)
			return bad_sample(d, gk_err_prefix(err, "shard '%s' sample '%s'", shard,
							   s->key));
		n = a.count;
	} else {
		n = txt->size;
	}
	if (n > (uint64_t)INT64_MAX / 8)
		return gk_errf(err, "shard '%s' sample '%s': too many tokens", shard, s->key);
	if (GK_GROW(d->buf, d->cap, d->len + (size_t)n + 1, "token buffer", err) < 0 ||
	    GK_GROW(d->q, d->qcap, d->nq + 1, "token buffer", err) < 0)
		return -1;
	int32_t *o = d->buf + d->len;
	for (uint64_t i = 0; i < n; i++) {
		int64_t t;
		if (!npy) {
			t = ((const unsigned char *)txt->data)[i];
		} else if (a.itemsize == 2) {
			uint16_t v;
			memcpy(&v, a.data + 2 * i, 2);
			t = v;
		} else {
			int32_t v;
			memcpy(&v, a.data + 4 * i, 4);
			t = v;
		}
		if (t < 0 || t >= d->o.vocab)
			return bad_sample(d, gk_errf(err, "shard '%s' sample '%s': token %" PRIu64 " is %" PRId64 ", not in [0, %" PRId64 ") (the vocabulary)",
						     shard, s->key, i, t, d->o.vocab));
		o[i] = (int32_t)t;
	}
	/*
	 * One end-of-text token between documents: a sample packed with
	 * data-pack --tokenize (or nanoGPT's way) ends with it already.
	 */
	if (!npy || n == 0 || o[n - 1] != d->o.eot)
		o[n++] = d->o.eot;
	int64_t k = cut_of(d, s->epoch, s->shard, s->index);
	if (k > (int64_t)n)
		return gk_errf(err, "shard '%s' sample '%s': resumed %" PRId64
			       " tokens into it, but it has %" PRIu64
			       " (a data state of other data?)", shard, s->key, k, n);
	if (k == (int64_t)n)
		return 1; /* an earlier world trained all of it */
	memmove(o, o + k, (size_t)((int64_t)n - k) * sizeof(*o));
	d->q[d->nq++] = (pending){st, (int64_t)d->len, (int64_t)n - k, s->shard,
				  s->index};
	d->len += (size_t)((int64_t)n - k);
	return 1;
}

static int shard_next(gk_nn_data *d, int32_t *in, int32_t *tg, gk_err *err)
{
	size_t bt = (size_t)d->o.batch * (size_t)d->o.seq;
	while (d->len - d->head < bt + 1) {
		if (d->ended)
			return 0;
		gk_shard_state st;
		gk_shard_dataset_state(d->ds, &st);
		int r = shard_fill(d, err);
		if (r < 0)
			return -1;
		if (r == 0) {
			d->ended = 1;
			return 0;
		}
		/*
		 * Skipped samples: when a whole epoch of this rank's part has
		 * gone by without a usable one, looping would spin forever.
		 */
		if (r == 2 && d->bad_run++ == 0)
			d->bad_epoch = st.epoch;
		else if (r == 2 && st.epoch >= d->bad_epoch + 2)
			return gk_errf(err, "data: every sample of this rank's part of epoch %" PRIu64
				       " was skipped as unusable (%" PRIu64 " skipped in all): "
				       "nothing to train on", st.epoch - 1, d->bad);
		else if (r == 1)
			d->bad_run = 0;
	}
	for (int b = 0; b < d->o.batch; b++) {
		const int32_t *row = d->buf + d->head + (size_t)b * (size_t)d->o.seq;
		memcpy(in + (size_t)b * (size_t)d->o.seq, row, (size_t)d->o.seq * 4);
		memcpy(tg + (size_t)b * (size_t)d->o.seq, row + 1, (size_t)d->o.seq * 4);
	}
	d->head += bt;
	/* Forget samples wholly behind the head; compact when half is dead. */
	size_t drop = 0;
	while (drop < d->nq && d->q[drop].start + d->q[drop].len <= (int64_t)d->head)
		drop++;
	memmove(d->q, d->q + drop, (d->nq - drop) * sizeof(*d->q));
	d->nq -= drop;
	if (d->head > d->len / 2 && d->head > 4096) {
		size_t h = d->head;
		memmove(d->buf, d->buf + h, (d->len - h) * sizeof(*d->buf));
		d->len -= h;
		d->head = 0;
		for (size_t i = 0; i < d->nq; i++)
			d->q[i].start -= (int64_t)h;
	}
	return 1;
}

int gk_nn_data_open(gk_nn_data **out, const char *source,
		    const gk_nn_data_opts *o, gk_err *err)
{
	*out = NULL;
	gk_nn_data *d = calloc(1, sizeof(*d));
	if (!d)
		return gk_err_sys(err, ENOMEM, "open data '%s'", source);
	d->o = *o;
	if (d->o.world < 1)
		d->o.world = 1;
	if (d->o.eot < 0)
		d->o.eot = (int32_t)(d->o.vocab - 1);
	if (d->o.eot >= d->o.vocab) {
		int64_t v = d->o.vocab, e = d->o.eot;
		free(d);
		return gk_errf(err, "open data '%s': the end-of-text token %" PRId64
			       " is not below the vocabulary size %" PRId64, source, e, v);
	}
	if (d->o.batch < 1 || d->o.seq < 1 || d->o.vocab < 1) {
		free(d);
		return gk_errf(err, "open data '%s': bad batch, sequence or vocabulary", source);
	}
	gk_strlist paths = {0};
	/* The list as the dataset reads it (globs and directories too), to
	 * tell token files from shards. */
	int manifest = gk_str_ends(source, ".json");
	if (!manifest && gk_shard_list_expand(source, &paths, err) < 0) {
		gk_strlist_free(&paths);
		free(d);
		return -1;
	}
	int allbin = paths.n > 0;
	for (size_t i = 0; i < paths.n; i++)
		allbin &= gk_str_ends(paths.v[i], ".bin");
	int rc;
	if (allbin) {
		rc = bin_open(d, &paths, err);
	} else {
		gk_shard_dataset_opts so = {.rank = d->o.rank, .world = d->o.world,
					    .shuffle = d->o.shuffle, .seed = d->o.seed,
					    .prefetch = 64, .loop = d->o.loop,
					    .note = d->o.note, .note_ctx = d->o.note_ctx};
		rc = gk_shard_dataset_open(&d->ds, source, &so, err);
		d->listed = !manifest;
		if (rc == 0 && gk_shard_dataset_len(d->ds) == 0)
			rc = gk_errf(err, "data '%s': no samples for rank %d of %d",
				     source, d->o.rank, d->o.world);
		/*
		 * Tokenized shards end every document with their tokenizer's
		 * end-of-text id, which the manifest records: it is the
		 * stream's, unless another was asked for.
		 */
		const gk_shard_tok_info *tk = rc == 0 ? &gk_shard_dataset_manifest(d->ds)->tok : NULL;
		if (tk && tk->present && o->eot < 0 && tk->eot >= d->o.vocab)
			rc = gk_errf(err, "data '%s': the end-of-text token %" PRId64 " of its tokenizer is not below the vocabulary size %" PRId64,
				     source, tk->eot, d->o.vocab);
		else if (tk && tk->present && o->eot < 0)
			d->o.eot = (int32_t)tk->eot;
		else if (tk && tk->present && o->eot != tk->eot)
			rc = gk_errf(err, "data '%s': its documents end with token %" PRId64 " (its manifest's end-of-text token), not the %" PRId32 " asked for",
				     source, tk->eot, o->eot);
	}
	gk_strlist_free(&paths);
	if (rc < 0) {
		gk_nn_data_close(d);
		return -1;
	}
	*out = d;
	return 0;
}

int gk_nn_data_next(gk_nn_data *d, int32_t *inputs, int32_t *targets,
		    gk_err *err)
{
	return d->bin ? bin_next(d, inputs, targets, err)
		      : shard_next(d, inputs, targets, err);
}

int gk_nn_data_state(const gk_nn_data *d, char *buf, size_t len)
{
	if (d->bin)
		return snprintf(buf, len,
				"{\"kind\":\"bin\",\"epoch\":%" PRIu64 ",\"micro\":%" PRIu64
				",\"rank\":%d,\"world\":%d,\"tokens\":%" PRIu64
				",\"files\":%zu,\"total\":%" PRIu64 ",\"id\":\"%016" PRIx64 "\"}",
				d->epoch, d->micro, d->o.rank, d->o.world,
				d->micro * (uint64_t)d->o.world * (uint64_t)d->o.batch *
					(uint64_t)d->o.seq, d->nfiles, d->total, d->bin_id);
	gk_shard_state st;
	int64_t skip = 0;
	if (d->nq) {
		st = d->q[0].st;
		skip = (int64_t)d->head - d->q[0].start;
	} else {
		gk_shard_dataset_state(d->ds, &st);
		skip = (int64_t)d->head - (int64_t)d->len; /* 0: nothing pending */
	}
	/*
	 * "at": the sample skip counts into (after its cut, if any), so
	 * another world can start it where this rank left it; "cuts": the
	 * cuts of this epoch, which samples read again after a restore need.
	 * No bound on the length: a remapped epoch keeps every earlier rank's
	 * position, and a rank may hold the cut samples of many.
	 */
	size_t n = 0;
	int r;
	/* Like snprintf: the length it needs, whatever fits. */
#define PUT(call)                                                      \
	do {                                                           \
		r = (call);                                            \
		if (r < 0)                                             \
			return -1;                                     \
		n += (size_t)r;                                        \
	} while (0)
#define AT n < len ? buf + n : NULL, n < len ? len - n : 0
	PUT(snprintf(AT, "{\"kind\":\"shard\",\"shard\":"));
	PUT(gk_shard_state_format(&st, AT));
	PUT(snprintf(AT, ",\"skip\":%" PRId64, skip));
	if (d->nq)
		PUT(snprintf(AT, ",\"at\":[%" PRIu64 ",%" PRIu64 "]", d->q[0].shard,
			     d->q[0].index));
	int cuts = 0;
	for (size_t i = 0; i < d->ncuts; i++) {
		if (d->cuts[i].epoch != st.epoch)
			continue;
		PUT(snprintf(AT, "%s[%" PRIu64 ",%" PRIu64 ",%" PRId64 "]",
			     cuts++ ? "," : ",\"cuts\":[", d->cuts[i].shard, d->cuts[i].index,
			     d->cuts[i].skip));
	}
	if (cuts)
		PUT(snprintf(AT, "]"));
	PUT(snprintf(AT, "}"));
#undef AT
#undef PUT
	return n > INT_MAX ? -1 : (int)n;
}

/* Add a cut, keeping the larger skip of a sample named twice. */
static int add_cut(gk_nn_data *d, uint64_t epoch, uint64_t shard, uint64_t index,
		   int64_t skip, gk_err *err)
{
	cut *c = find_cut(d, epoch, shard, index);
	if (c) {
		if (skip > c->skip)
			c->skip = skip;
		return 0;
	}
	if (GK_GROW(d->cuts, d->cutcap, d->ncuts + 1, "data state", err) < 0)
		return -1;
	d->cuts[d->ncuts++] = (cut){epoch, shard, index, skip};
	return 0;
}

/* Add a saved state's "cuts" (of epoch) to d's. */
static int read_cuts(gk_nn_data *d, const json_t *j, uint64_t epoch, gk_err *err)
{
	const json_t *c = json_object_get(j, "cuts");
	if (!c)
		return 0;
	size_t i;
	const json_t *e;
	if (!json_is_array(c))
		return gk_errf(err, "data state: \"cuts\" is not an array");
	json_array_foreach(c, i, e) {
		const json_t *a = json_array_get(e, 0), *b = json_array_get(e, 1),
			     *k = json_array_get(e, 2);
		if (json_array_size(e) != 3 || !json_is_integer(a) || !json_is_integer(b) ||
		    !json_is_integer(k) || json_integer_value(a) < 0 ||
		    json_integer_value(b) < 0 || json_integer_value(k) < 0)
			return gk_errf(err, "data state: cut %zu is not [shard, sample, tokens]", i);
		if (add_cut(d, epoch, (uint64_t)json_integer_value(a),
			    (uint64_t)json_integer_value(b), json_integer_value(k), err) < 0)
			return -1;
	}
	return 0;
}

/* The sample named by "at" ([shard, sample]), or 0 when there is none. */
static int read_at(const json_t *j, uint64_t *shard, uint64_t *index, gk_err *err)
{
	const json_t *at = json_object_get(j, "at");
	if (!at)
		return 0;
	const json_t *a = json_array_get(at, 0), *b = json_array_get(at, 1);
	if (json_array_size(at) != 2 || !json_is_integer(a) || !json_is_integer(b) ||
	    json_integer_value(a) < 0 || json_integer_value(b) < 0)
		return gk_errf(err, "data state: \"at\" is not [shard, sample]");
	*shard = (uint64_t)json_integer_value(a);
	*index = (uint64_t)json_integer_value(b);
	return 1;
}

int gk_nn_data_restore(gk_nn_data *d, const char *json, gk_err *err)
{
	json_t *j = gk_json_load_buf(json, strlen(json), "data state", err);
	if (!j)
		return -1;
	int rc = -1;
	const char *kind;
	if (gk_json_get_str(j, "kind", &kind, err) < 0)
		goto out;
	if (!strcmp(kind, "bin") != !!d->bin) {
		gk_errf(err, "data state: saved for %s data, this run reads %s",
			kind, d->bin ? "token files" : "shards");
		goto out;
	}
	if (d->bin) {
		int64_t epoch, tokens;
		if (gk_json_get_int(j, "epoch", &epoch, err) < 0 ||
		    gk_json_get_int(j, "tokens", &tokens, err) < 0)
			goto out;
		if (epoch < 0 || tokens < 0) {
			gk_errf(err, "data state: negative position");
			goto out;
		}
		/* the same token files (checkpoints of earlier versions have no id) */
		const char *id = json_string_value(json_object_get(j, "id"));
		char mine[24];
		snprintf(mine, sizeof(mine), "%016" PRIx64, d->bin_id);
		if (id && strcmp(id, mine) != 0) {
			json_int_t nf = json_integer_value(json_object_get(j, "files"));
			json_int_t tot = json_integer_value(json_object_get(j, "total"));
			gk_errf(err, "data state: saved for other token files (%lld file%s, %lld tokens; "
				"this run reads %zu, %" PRIu64 " tokens%s): a resume continues the data "
				"it was trained on (start a new run from its weights with --init-from)",
				(long long)nf, nf == 1 ? "" : "s", (long long)tot, d->nfiles, d->total,
				(uint64_t)tot == d->total && (size_t)nf == d->nfiles ?
					", of other contents or in another order" : "");
			goto out;
		}
		/*
		 * The global position in tokens is what every world size
		 * shares: micro-batches of this world resume from it (rounded
		 * down to a whole global micro-batch when the shape changed).
		 */
		uint64_t g = (uint64_t)d->o.world * (uint64_t)d->o.batch * (uint64_t)d->o.seq;
		d->epoch = (uint64_t)epoch;
		d->micro = (uint64_t)tokens / g;
		rc = 0;
		goto out;
	}
	json_t *sj = json_object_get(j, "shard");
	int64_t skip;
	if (!json_is_object(sj)) {
		gk_errf(err, "data state: no shard state");
		goto out;
	}
	if (gk_json_get_int(j, "skip", &skip, err) < 0)
		goto out;
	char *s = json_dumps(sj, JSON_COMPACT);
	gk_shard_state st;
	int r = s ? gk_shard_state_parse(s, &st, err) : gk_errf(err, "data state: out of memory");
	free(s);
	if (r < 0)
		goto out;
	r = gk_shard_dataset_restore(d->ds, &st, err);
	uint64_t epoch = st.epoch;
	gk_shard_state_free(&st);
	if (r < 0)
		goto out;
	drop_cuts(d);
	if (skip < 0) {
		gk_errf(err, "data state: negative position");
		goto out;
	}
	if (read_cuts(d, j, epoch, err) < 0)
		goto out;
	d->len = d->head = d->nq = 0;
	d->ended = 0;
	/* Re-read the samples the saved head lay in, then skip to it. */
	while ((int64_t)d->len < skip + 1) {
		int f = shard_fill(d, err);
		if (f < 0)
			goto out;
		if (f == 0)
			break;
	}
	if ((int64_t)d->len < skip) {
		gk_errf(err, "data state: position past the end of the data");
		goto out;
	}
	d->head = (size_t)skip;
	rc = 0;
out:
	json_decref(j);
	return rc;
}

/*
 * Old rank state j's cuts, and its partly used sample ("at", "skip" tokens
 * into it, after the cut it had started it at, if any) as one more. The
 * old rank's next window would have started at that token, which its
 * last window had as a target: the new rank starts one token later, or
 * the token would be a target twice wherever the sample lands after
 * other tokens in the new rank's stream.
 */
static int old_rank_cuts(gk_nn_data *d, const json_t *j, uint64_t epoch,
			 gk_err *err)
{
	uint64_t shard = 0, index = 0;
	int64_t skip;
	int a = read_at(j, &shard, &index, err);
	if (a < 0 || read_cuts(d, j, epoch, err) < 0)
		return -1;
	if (a == 0)
		return 0;
	if (gk_json_get_int(j, "skip", &skip, err) < 0)
		return -1;
	if (skip < 0)
		return gk_errf(err, "data state: negative position");
	skip += cut_of(d, epoch, shard, index) + 1;
	return add_cut(d, epoch, shard, index, skip, err);
}

int gk_nn_data_restore_world(gk_nn_data *d, const char *const *json, size_t n,
			     gk_err *err)
{
	gk_shard_state *st = calloc(n ? n : 1, sizeof(*st));
	size_t got = 0;
	int rc = -1;

	if (d->bin) {
		free(st);
		return gk_errf(err, "data state: token files resume with gk_nn_data_restore");
	}
	if (!st)
		return gk_err_sys(err, ENOMEM, "data state");
	drop_cuts(d);
	for (; got < n; got++) {
		json_t *j = gk_json_load_buf(json[got], strlen(json[got]), "data state", err);
		json_t *sj = j ? json_object_get(j, "shard") : NULL;
		char *s = sj ? json_dumps(sj, JSON_COMPACT) : NULL;
		int r = s ? gk_shard_state_parse(s, &st[got], err)
			  : gk_errf(err, "data state of rank %zu: no shard state", got);
		free(s);
		/*
		 * Each old rank's state points before the sample its next
		 * tokens come from ("at"); the new rank that gets the sample
		 * starts it where the old one stopped (its skip, plus any cut
		 * the old rank had started it at).
		 */
		if (r == 0)
			r = old_rank_cuts(d, j, st[got].epoch, err);
		json_decref(j);
		if (r < 0) {
			gk_shard_state_free(&st[got]);
			goto out;
		}
	}
	if (gk_shard_dataset_restore_world(d->ds, st, n, err) < 0)
		goto out;
	/* Keep the cuts of samples this rank now reads. */
	size_t keep = 0;
	for (size_t i = 0; i < d->ncuts; i++)
		if (gk_shard_dataset_part_has(d->ds, d->cuts[i].shard, d->cuts[i].index))
			d->cuts[keep++] = d->cuts[i];
	d->ncuts = keep;
	d->len = d->head = d->nq = 0;
	d->ended = 0;
	rc = 0;
out:
	for (size_t i = 0; i < got; i++)
		gk_shard_state_free(&st[i]);
	free(st);
	return rc;
}

uint64_t gk_nn_data_epoch(const gk_nn_data *d)
{
	if (d->bin)
		return d->epoch;
	gk_shard_state st;
	if (d->nq)
		return d->q[0].st.epoch;
	gk_shard_dataset_state(d->ds, &st);
	return st.epoch;
}

uint64_t gk_nn_data_identity(const gk_nn_data *d)
{
	if (!d->bin) {
		gk_shard_state st;
		gk_shard_dataset_state(d->ds, &st);
		return st.list;
	}
	return d->bin_id;
}

int gk_nn_data_is_bin(const gk_nn_data *d)
{
	return d->bin;
}

void gk_nn_data_close(gk_nn_data *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nfiles; i++) {
		if (d->files[i].map) {
			gk_map_unwatch(d->files[i].map);
			munmap((void *)d->files[i].map, d->files[i].maplen);
		}
		free(d->files[i].path);
	}
	free(d->files);
	gk_shard_dataset_close(d->ds);
	free(d->buf);
	free(d->q);
	free(d->cuts);
	free(d);
}

int gk_nn_data_tokenized(const gk_nn_data *d)
{
	return d->ds && gk_shard_dataset_manifest(d->ds)->tok.present;
}

int gk_nn_data_check_tokenizer(const gk_nn_data *d, const uint64_t *fingerprint,
			       const char *name, int64_t vocab, gk_err *err)
{
	const gk_shard_tok_info *t = d->ds ? &gk_shard_dataset_manifest(d->ds)->tok : NULL;
	if (!t || !t->present)
		return 0;
	char files[1024] = "", mine[17], theirs[17];
	for (size_t i = 0, at = 0; i < t->nfiles && at < sizeof(files); i++) {
		int r = snprintf(files + at, sizeof(files) - at, "%s'%s'", i ? ", " : "",
				 t->files[i].path);
		at += r > 0 ? (size_t)r : 0;
	}
	gk_xxh3_hex(t->fingerprint, theirs);
	if (fingerprint && *fingerprint != t->fingerprint)
		return gk_errf(err, "tokenized with another tokenizer than the model's: the data's is %s (fingerprint %s, %" PRIu64 " ids), the model's %s (fingerprint %s, %" PRId64 " ids); pack the text again with the model's tokenizer",
			       files, theirs, t->vocab, name ? name : "?",
			       gk_xxh3_hex(*fingerprint, mine), vocab);
	if (t->vocab > (uint64_t)vocab)
		return gk_errf(err, "tokenized with a vocabulary of %" PRIu64 " ids (tokenizer %s, fingerprint %s), more than the model's %" PRId64 "%s%s; pack the text again with the model's tokenizer",
			       t->vocab, files, theirs, vocab, name ? " of tokenizer " : "",
			       name ? name : "");
	return 0;
}
