/*
 * beside.c - the tokenizer of shards named without their manifest (a
 * brace pattern, a glob, a directory, a list): data-pack writes the
 * manifest beside its shards, so the manifests in each directory the
 * shards come from that record a tokenizer are read, every shard must be
 * one they list (the same file, of the size they give), and they must
 * agree on the tokenizer. The dataset then carries that record as a
 * manifest source does.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shard/dataset_internal.h"

/* A shard a manifest beside the list lists: its file and size there. */
typedef struct listed {
	dev_t dev;
	ino_t ino;
	uint64_t bytes;
	size_t man; /* index into the manifests read */
} listed;

typedef struct beside {
	char **dirs;   /* directories looked in */
	size_t ndirs, dcap;
	char **paths;  /* manifests read that record a tokenizer */
	gk_shard_manifest *mans;
	size_t nmans, mcap, pcap;
	listed *v;
	size_t n, cap;
} beside;

static int cmp_listed(const void *a, const void *b)
{
	const listed *x = a, *y = b;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->man < y->man ? -1 : x->man > y->man;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * 1 when a .json file is a gpukit-shards manifest (data-pack writes its
 * "format" first): its first 4 KiB name the format. Other JSON beside
 * the shards (a config.json, a large JSON Lines file) is not parsed.
 */
static int looks_like_manifest(const char *path)
{
	char buf[4097];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t r = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (r <= 0)
		return 0;
	buf[r] = '\0';
	return memchr(buf, '\0', (size_t)r) == NULL && strstr(buf, "\"gpukit-shards\"") != NULL;
}

/* Read the manifests in dir that record a tokenizer (in name order). */
static int read_dir(gk_shard_dataset *d, beside *b, const char *dir, gk_err *err)
{
	DIR *dp = opendir(*dir ? dir : ".");
	if (!dp)
		return 0; /* the shards' own open says what is wrong */
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	int rc = 0;
	while ((e = readdir(dp))) {
		if (!gk_str_ends(e->d_name, ".json"))
			continue;
		if (GK_GROW(names, cap, n + 1, "manifests", err) < 0) {
			rc = -1;
			break;
		}
		if (asprintf(&names[n], "%s%s%s", dir, *dir && dir[strlen(dir) - 1] != '/' ? "/" : "",
			     e->d_name) < 0) {
			rc = gk_err_sys(err, ENOMEM, "manifests");
			break;
		}
		n++;
	}
	closedir(dp);
	if (rc == 0 && n)
		qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct stat st;
		if (stat(names[i], &st) < 0 || !S_ISREG(st.st_mode) || !looks_like_manifest(names[i]))
			continue;
		gk_shard_manifest m;
		gk_err why;
		if (gk_shard_manifest_load(names[i], &m, &why) < 0) {
			sh_dataset_note(d, "%s: its shards' tokenizer is not checked from it", why.msg);
			continue;
		}
		if (!m.tok.present) {
			gk_shard_manifest_free(&m);
			continue;
		}
		if (GK_GROW(b->mans, b->mcap, b->nmans + 1, "manifests", err) < 0 ||
		    GK_GROW(b->paths, b->pcap, b->nmans + 1, "manifests", err) < 0) {
			gk_shard_manifest_free(&m);
			rc = -1;
			break;
		}
		b->mans[b->nmans] = m;
		b->paths[b->nmans] = names[i];
		names[i] = NULL;
		size_t k = b->nmans++;
		for (size_t j = 0; j < b->mans[k].n; j++) {
			char *f = gk_shard_manifest_file(&b->mans[k], j);
			if (!f) {
				rc = gk_err_sys(err, ENOMEM, "manifests");
				break;
			}
			int ok = stat(f, &st) == 0;
			free(f);
			if (!ok)
				continue;
			if (GK_GROW(b->v, b->cap, b->n + 1, "manifests", err) < 0) {
				rc = -1;
				break;
			}
			b->v[b->n++] = (listed){.dev = st.st_dev, .ino = st.st_ino,
						.bytes = b->mans[k].v[j].bytes, .man = k};
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

/* dirname of path ("" for the current directory); malloc'ed. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup("");
	return strndup(path, slash == path ? 1 : (size_t)(slash - path));
}

static int same_tok(const gk_shard_tok_info *a, const gk_shard_tok_info *b)
{
	return a->fingerprint == b->fingerprint && a->eot == b->eot;
}

/* "fingerprint HEX, V ids, end-of-text E" */
static const char *tok_words(const gk_shard_tok_info *t, char *buf, size_t len)
{
	char hex[17];
	snprintf(buf, len, "fingerprint %s, %" PRIu64 " ids, end-of-text %" PRId64,
		 gk_xxh3_hex(t->fingerprint, hex), t->vocab, t->eot);
	return buf;
}

static int tok_copy(gk_shard_tok_info *to, const gk_shard_tok_info *from, gk_err *err)
{
	*to = *from;
	to->files = NULL;
	to->nfiles = 0;
	if (from->nfiles && !(to->files = calloc(from->nfiles, sizeof(*to->files))))
		return gk_err_sys(err, ENOMEM, "manifests");
	for (size_t i = 0; i < from->nfiles; i++) {
		to->files[i].xxh3 = from->files[i].xxh3;
		if (!(to->files[i].path = strdup(from->files[i].path))) {
			gk_shard_tok_info_free(to);
			return gk_err_sys(err, ENOMEM, "manifests");
		}
		to->nfiles++;
	}
	return 0;
}

static int check(gk_shard_dataset *d, beside *b, gk_err *err)
{
	char w1[128], w2[128];
	size_t first = SIZE_MAX, fman = 0; /* a shard with a record, and its manifest */
	size_t none = SIZE_MAX; /* the first shard without */
	size_t changed = 0, nman = SIZE_MAX; /* the first listed at another size, where */
	uint64_t nbytes = 0, nsize = 0;
	for (size_t i = 0; i < d->man.n; i++) {
		struct stat st;
		if (stat(d->files[i], &st) < 0)
			return gk_err_sys(err, errno, "shard '%s'", d->files[i]);
		/* the first entry of this file (they are sorted by file) */
		size_t lo = 0, hi = b->n;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (b->v[mid].dev < st.st_dev ||
			    (b->v[mid].dev == st.st_dev && b->v[mid].ino < st.st_ino))
				lo = mid + 1;
			else
				hi = mid;
		}
		size_t mine = SIZE_MAX, other = SIZE_MAX;
		uint64_t obytes = 0;
		for (size_t j = lo; j < b->n && b->v[j].dev == st.st_dev && b->v[j].ino == st.st_ino;
		     j++) {
			const listed *l = &b->v[j];
			if (l->bytes != (uint64_t)st.st_size) {
				other = l->man;
				obytes = l->bytes;
			} else if (mine == SIZE_MAX) {
				mine = l->man;
			} else if (!same_tok(&b->mans[mine].tok, &b->mans[l->man].tok)) {
				return gk_errf(err, "shard '%s' is listed by manifests '%s' (%s) and '%s' (%s), of different tokenizers: remove the one that is not its own",
					       d->files[i], b->paths[mine],
					       tok_words(&b->mans[mine].tok, w1, sizeof(w1)),
					       b->paths[l->man],
					       tok_words(&b->mans[l->man].tok, w2, sizeof(w2)));
			}
		}
		if (mine == SIZE_MAX) {
			if (none == SIZE_MAX)
				none = i;
			if (other != SIZE_MAX && nman == SIZE_MAX) {
				changed = i;
				nman = other;
				nbytes = obytes;
				nsize = (uint64_t)st.st_size;
			}
		} else if (first == SIZE_MAX) {
			first = i;
			fman = mine;
		} else if (!same_tok(&b->mans[fman].tok, &b->mans[mine].tok)) {
			return gk_errf(err, "shards '%s' and '%s' were tokenized with different tokenizers: manifest '%s' records %s, manifest '%s' %s; train on shards of one tokenizer",
				       d->files[first], d->files[i], b->paths[fman],
				       tok_words(&b->mans[fman].tok, w1, sizeof(w1)), b->paths[mine],
				       tok_words(&b->mans[mine].tok, w2, sizeof(w2)));
		}
	}
	if (nman != SIZE_MAX)
		return gk_errf(err, "shard '%s' is %" PRIu64 " bytes, manifest '%s' beside it lists it with %" PRIu64 ": it changed since it was packed, and its tokenizer is unknown (data-pack --verify '%s' says more)",
			       d->files[changed], nsize, b->paths[nman], nbytes, b->paths[nman]);
	if (first == SIZE_MAX)
		return 0;
	if (none != SIZE_MAX)
		return gk_errf(err, "shard '%s' is in no manifest beside it that records a tokenizer, while '%s' was tokenized with %s (manifest '%s'): its vocabulary cannot be checked; pack it with that tokenizer and --manifest, or leave it out",
			       d->files[none], d->files[first],
			       tok_words(&b->mans[fman].tok, w1, sizeof(w1)), b->paths[fman]);
	return tok_copy(&d->man.tok, &b->mans[fman].tok, err);
}

int sh_dataset_beside(gk_shard_dataset *d, gk_err *err)
{
	beside b = {0};
	int rc = 0;
	for (size_t i = 0; i < d->man.n && rc == 0; i++) {
		char *dir = dir_of(d->files[i]);
		if (!dir) {
			rc = gk_err_sys(err, ENOMEM, "manifests");
			break;
		}
		int seen = 0;
		/* lists come a directory at a time: the last one first */
		for (size_t k = b.ndirs; k-- > 0 && !seen;)
			seen = strcmp(b.dirs[k], dir) == 0;
		if (seen || GK_GROW(b.dirs, b.dcap, b.ndirs + 1, "manifests", err) < 0) {
			free(dir);
			rc = seen ? 0 : -1;
			continue;
		}
		b.dirs[b.ndirs++] = dir;
		rc = read_dir(d, &b, dir, err);
	}
	if (rc == 0 && b.nmans) {
		qsort(b.v, b.n, sizeof(*b.v), cmp_listed);
		rc = check(d, &b, err);
	}
	for (size_t i = 0; i < b.ndirs; i++)
		free(b.dirs[i]);
	for (size_t i = 0; i < b.nmans; i++) {
		free(b.paths[i]);
		gk_shard_manifest_free(&b.mans[i]);
	}
	free(b.dirs);
	free(b.paths);
	free(b.mans);
	free(b.v);
	return rc;
}
