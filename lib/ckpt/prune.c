/*
 * prune.c - removing old checkpoints from a checkpoint root (the policy
 * is described in ckpt.h). Everything inside ROOT is reached through its
 * directory fd with O_NOFOLLOW / AT_SYMLINK_NOFOLLOW, so no symbolic link
 * in it is ever followed, whoever may write to ROOT.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/internal.h"

#define LOCK_NAME ".ckpt-prune.lock"
#define DELETING ".deleting-"

char *gk_ckpt_duration_str(uint64_t secs, char *buf, size_t len)
{
	static const struct {
		char unit;
		uint64_t secs;
	} u[] = {{'d', 86400}, {'h', 3600}, {'m', 60}, {'s', 1}};
	size_t at = 0;
	int parts = 0;
	if (len)
		buf[0] = '\0';
	for (size_t i = 0; i < GK_ARRAY_SIZE(u) && at < len; i++) {
		uint64_t n = secs / u[i].secs;
		if (n > 0 || (parts == 0 && u[i].secs == 1)) {
			at += (size_t)snprintf(buf + at, len - at, "%" PRIu64 "%c", n,
					       u[i].unit);
			secs -= n * u[i].secs;
			if (++parts == 2)
				break;
		} else if (parts) {
			break; /* "1h", not "1h0m" */
		}
	}
	return buf;
}

/* ---- walking a tree without following links -------------------------------- */

typedef struct usage {
	dev_t dev;          /* the tree's file system: du -x */
	uint64_t blocks;    /* 512-byte blocks */
	int64_t newest;     /* newest ctime or mtime, seconds */
	struct {
		dev_t dev;
		ino_t ino;
	} *seen;            /* hard links counted once, as du does */
	size_t nseen, cap;
} usage;

/* Names in the directory fd, read before anything in it changes. */
static int names_of(int fd, gk_strlist *out)
{
	int dup_fd = dup(fd);
	DIR *d = dup_fd < 0 ? NULL : fdopendir(dup_fd);
	struct dirent *e;
	if (!d) {
		if (dup_fd >= 0)
			close(dup_fd);
		return -1;
	}
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    gk_strlist_push(out, e->d_name, NULL)) {
			closedir(d);
			errno = ENOMEM;
			return -1;
		}
	closedir(d);
	return 0;
}

static void tree_usage(int dfd, const char *name, usage *u)
{
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	if (st.st_ctim.tv_sec > u->newest)
		u->newest = st.st_ctim.tv_sec;
	if (st.st_mtim.tv_sec > u->newest)
		u->newest = st.st_mtim.tv_sec;
	if (st.st_dev != u->dev)
		return;
	if (!S_ISDIR(st.st_mode) && st.st_nlink > 1) {
		for (size_t i = 0; i < u->nseen; i++)
			if (u->seen[i].dev == st.st_dev && u->seen[i].ino == st.st_ino)
				return;
		if (!GK_GROW(u->seen, u->cap, u->nseen + 1, "usage", NULL)) {
			u->seen[u->nseen].dev = st.st_dev;
			u->seen[u->nseen++].ino = st.st_ino;
		}
	}
	u->blocks += (uint64_t)st.st_blocks;
	if (!S_ISDIR(st.st_mode))
		return;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	gk_strlist l = {0};
	if (fd < 0)
		return;
	if (names_of(fd, &l) == 0)
		for (size_t i = 0; i < l.n; i++)
			tree_usage(fd, l.v[i], u);
	gk_strlist_free(&l);
	close(fd);
}

/* Disk usage in KiB (du -skx) and the newest change time of dfd/name. */
static void measure(int dfd, const char *name, uint64_t *kib, int64_t *newest)
{
	struct stat st;
	usage u = {0};
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		u.dev = st.st_dev;
	u.newest = INT64_MIN;
	tree_usage(dfd, name, &u);
	free(u.seen);
	if (kib)
		*kib = (u.blocks + 1) / 2;
	if (newest)
		*newest = u.newest;
}

/*
 * rm -rf --one-file-system: remove what can be removed, keep the first
 * errno. A directory on another file system (a mount point) is left.
 */
static void rm_tree(int dfd, const char *name, dev_t dev, int *first)
{
	struct stat st;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT && !*first)
			*first = errno;
		return;
	}
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT && !*first)
			*first = errno;
		return;
	}
	if (st.st_dev != dev) {
		if (!*first)
			*first = EXDEV;
		return;
	}
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	gk_strlist l = {0};
	if (fd < 0 || names_of(fd, &l) < 0) {
		if (!*first)
			*first = errno;
		if (fd >= 0)
			close(fd);
		gk_strlist_free(&l);
		return;
	}
	for (size_t i = 0; i < l.n; i++)
		rm_tree(fd, l.v[i], dev, first);
	gk_strlist_free(&l);
	close(fd);
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && !*first)
		*first = errno;
}

/* ---- one run ------------------------------------------------------------------ */

typedef struct entry {
	char *name;
	uint64_t step;
	int committed, skip; /* skip: a symbolic link or not a directory */
} entry;

typedef struct run {
	const char *root;
	const gk_ckpt_prune_opts *o;
	int dfd;
	dev_t dev;
	int64_t now;
	void (*fn)(void *ctx, const gk_ckpt_prune_event *ev);
	void *ctx;
	gk_ckpt_prune_stats *st;
} run;

static void emit(run *r, gk_ckpt_prune_kind kind, const char *name,
		 const char *why, uint64_t kib, const char *msg)
{
	gk_ckpt_prune_event ev = {kind, name, why, kib, msg};
	if (kind == GK_CKPT_PRUNE_KEPT)
		r->st->kept++;
	else if (kind == GK_CKPT_PRUNE_REMOVED) {
		r->st->removed++;
		r->st->freed_kib += kib;
	} else if (kind == GK_CKPT_PRUNE_FAILED)
		r->st->failed++;
	if (r->fn)
		r->fn(r->ctx, &ev);
}

static void fail(run *r, const char *name, int e)
{
	char msg[PATH_MAX + 256];
	snprintf(msg, sizeof(msg), "remove '%s': %s", name, strerror(e));
	emit(r, GK_CKPT_PRUNE_FAILED, name, NULL, 0, msg);
}

static void remove_entry(run *r, const char *name, const char *why)
{
	uint64_t kib;
	char tmp[NAME_MAX + 64];
	const char *t = name;
	int e = 0;
	measure(r->dfd, name, &kib, NULL);
	if (!r->o->dry_run) {
		if (strncmp(name, DELETING, strlen(DELETING)) != 0) {
			struct stat st;
			size_t n = (size_t)snprintf(tmp, sizeof(tmp), DELETING "%s.%ld",
						    name, (long)getpid());
			while (n + 1 < sizeof(tmp) &&
			       fstatat(r->dfd, tmp, &st, AT_SYMLINK_NOFOLLOW) == 0) {
				tmp[n++] = 'x';
				tmp[n] = '\0';
			}
			if (renameat(r->dfd, name, r->dfd, tmp) < 0) {
				fail(r, name, errno);
				return;
			}
			/* The rename is what makes it safe: make it durable first. */
			fsync(r->dfd);
			t = tmp;
		}
		rm_tree(r->dfd, t, r->dev, &e);
		if (e) {
			fail(r, name, e);
			return;
		}
	}
	emit(r, GK_CKPT_PRUNE_REMOVED, name, why, kib, NULL);
}

/* No COMMIT: in progress while it changes, abandoned after grace. */
static void pending(run *r, const char *name)
{
	int64_t newest;
	char why[128], a[32], g[32];
	measure(r->dfd, name, NULL, &newest);
	int64_t age = newest == INT64_MIN ? 0 : r->now - newest;
	gk_ckpt_duration_str(age < 0 ? 0 : (uint64_t)age, a, sizeof(a));
	if (age < 0 || (uint64_t)age < r->o->grace) {
		snprintf(why, sizeof(why), "no COMMIT, changed %s ago, grace %s", a,
			 gk_ckpt_duration_str(r->o->grace, g, sizeof(g)));
		emit(r, GK_CKPT_PRUNE_KEPT, name, why, 0, NULL);
	} else {
		snprintf(why, sizeof(why), "no COMMIT, unchanged for %s", a);
		remove_entry(r, name, why);
	}
}

static int take_lock(run *r, int *lfd, gk_err *err)
{
	char shown[PATH_MAX + 32];
	const char *lock = r->o->lock;
	struct stat st;
	int fd;
	if (!lock) {
		snprintf(shown, sizeof(shown), "%s/" LOCK_NAME, r->root);
		lock = shown;
		/* ROOT may be writable by others: its lock name is not theirs to redirect. */
		fd = openat(r->dfd, LOCK_NAME,
			    O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
		if (fd < 0 && errno == ELOOP)
			return gk_errf(err, "lock '%s': a symbolic link; refusing to follow it",
				       lock);
	} else {
		fd = open(lock, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0666);
	}
	if (fd < 0)
		return gk_err_sys(err, errno, "lock '%s'", lock);
	/* O_NONBLOCK kept a FIFO from hanging the open; refuse it here. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return gk_errf(err, "lock '%s': not a regular file", lock);
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(fd);
		if (e == EWOULDBLOCK)
			return 1;
		return gk_err_sys(err, e, "lock '%s'", lock);
	}
	*lfd = fd;
	return 0;
}

static int by_step(const void *a, const void *b)
{
	const entry *x = a, *y = b;
	return x->step < y->step ? -1 : x->step > y->step;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ".step-" + a step name's digits + "." + anything: a writer's staging. */
static int staging_name(const char *name)
{
	char tmp[NAME_MAX + 1];
	uint64_t step;
	const char *dot;
	if (strncmp(name, ".step-", 6) != 0 || !(dot = strchr(name + 6, '.')) ||
	    (size_t)(dot - name) >= sizeof(tmp))
		return 0;
	snprintf(tmp, sizeof(tmp), "%.*s", (int)(dot - name - 1), name + 1);
	return ck_parse_step(tmp, &step) == 0;
}

static int contains(const uint64_t *v, size_t n, uint64_t x)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid] == x)
			return 1;
		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

int gk_ckpt_prune(const char *root, const gk_ckpt_prune_opts *o,
		  void (*fn)(void *ctx, const gk_ckpt_prune_event *ev),
		  void *ctx, gk_ckpt_prune_stats *st, gk_err *err)
{
	run r = {root, o, -1, 0, 0, fn, ctx, st};
	gk_strlist names = {0}, deleting = {0}, staging = {0};
	entry *steps = NULL;
	size_t nsteps = 0, cap = 0, ncommitted = 0;
	uint64_t *committed = NULL, latest = 0;
	char target[PATH_MAX], msg[2 * PATH_MAX + 128];
	struct stat sb;
	int lfd = -1, rc = -1;

	memset(st, 0, sizeof(*st));
	/* ROOT itself may be a symbolic link (ckpt -> /scratch/run/ckpt). */
	r.dfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r.dfd < 0 || fstat(r.dfd, &sb) < 0)
		return gk_err_sys(err, errno, "open '%s'", root);
	r.dev = sb.st_dev;
	if (!o->dry_run && (rc = take_lock(&r, &lfd, err)) != 0)
		goto out;
	rc = -1;
	r.now = (int64_t)time(NULL);
	if (names_of(r.dfd, &names) < 0) {
		gk_err_sys(err, errno, "open '%s'", root);
		goto out;
	}
	if (gk_ckpt_list(root, &committed, &ncommitted, err))
		goto out;
	for (size_t i = 0; i < names.n; i++) {
		const char *n = names.v[i];
		uint64_t step;
		struct stat es;
		if (strncmp(n, DELETING, strlen(DELETING)) == 0) {
			if (gk_strlist_push(&deleting, n, err))
				goto out;
		} else if (ck_parse_step(n, &step) == 0) {
			if (GK_GROW(steps, cap, nsteps + 1, "prune", err))
				goto out;
			entry *e = &steps[nsteps];
			if (!(e->name = strdup(n))) {
				gk_err_sys(err, ENOMEM, "prune");
				goto out;
			}
			nsteps++;
			e->step = step;
			e->committed = contains(committed, ncommitted, step);
			e->skip = fstatat(r.dfd, n, &es, AT_SYMLINK_NOFOLLOW) < 0 ? 2
				  : S_ISLNK(es.st_mode)                     ? 1
				  : !S_ISDIR(es.st_mode)                    ? 2
									    : 0;
		} else if (staging_name(n) &&
			   fstatat(r.dfd, n, &es, AT_SYMLINK_NOFOLLOW) == 0 &&
			   S_ISDIR(es.st_mode)) {
			if (gk_strlist_push(&staging, n, err))
				goto out;
		}
	}
	if (nsteps)
		qsort(steps, nsteps, sizeof(*steps), by_step);
	if (deleting.n)
		qsort(deleting.v, deleting.n, sizeof(char *), by_name);
	if (staging.n)
		qsort(staging.v, staging.n, sizeof(char *), by_name);

	for (size_t i = 0; i < nsteps; i++)
		if (steps[i].skip) {
			snprintf(msg, sizeof(msg), "skipping '%s': %s", steps[i].name,
				 steps[i].skip == 1 ? "a symbolic link, not a checkpoint directory"
						    : "not a directory");
			emit(&r, GK_CKPT_PRUNE_WARNING, steps[i].name, NULL, 0, msg);
		}
	int have_latest = 0;
	switch (ck_latest_link(root, &latest, target, sizeof(target))) {
	case CK_LATEST_NOT_LINK:
		emit(&r, GK_CKPT_PRUNE_WARNING, "latest", NULL, 0,
		     "'latest' is not a symbolic link; ignoring it");
		break;
	case CK_LATEST_ELSEWHERE:
		snprintf(msg, sizeof(msg), "'latest' points to '%s', not a checkpoint directory in '%s'",
			 target, root);
		emit(&r, GK_CKPT_PRUNE_WARNING, "latest", NULL, 0, msg);
		break;
	case CK_LATEST_STEP:
		have_latest = 1;
		if (!contains(committed, ncommitted, latest)) {
			snprintf(msg, sizeof(msg), "'latest' points to '" GK_CKPT_STEP_FMT "', which has no COMMIT; keeping it",
				 latest);
			emit(&r, GK_CKPT_PRUNE_WARNING, "latest", NULL, 0, msg);
		}
		break;
	}

	/* Leftovers of an interrupted run: already out of sight, only disk to free. */
	for (size_t i = 0; i < deleting.n; i++)
		remove_entry(&r, deleting.v[i], "left by an interrupted ckpt-prune");

	size_t k = 0; /* rank among committed steps */
	for (size_t i = 0; i < nsteps; i++) {
		entry *e = &steps[i];
		int is_latest = have_latest && e->step == latest;
		if (e->skip)
			continue;
		if (!e->committed) {
			if (is_latest)
				emit(&r, GK_CKPT_PRUNE_KEPT, e->name, "latest, no COMMIT", 0, NULL);
			else
				pending(&r, e->name);
			continue;
		}
		char why[256] = "";
		size_t at = 0;
#define REASON(...) \
	at += (size_t)snprintf(why + at, sizeof(why) - at, __VA_ARGS__)
		if (k + 1 == ncommitted)
			REASON("%snewest", at ? ", " : "");
		if (is_latest)
			REASON("%slatest", at ? ", " : "");
		if (k + o->keep_last >= ncommitted)
			REASON("%skeep-last %" PRIu64, at ? ", " : "", o->keep_last);
		if (o->keep_every && e->step % o->keep_every == 0)
			REASON("%skeep-every %" PRIu64, at ? ", " : "", o->keep_every);
#undef REASON
		k++;
		if (at)
			emit(&r, GK_CKPT_PRUNE_KEPT, e->name, why, 0, NULL);
		else
			remove_entry(&r, e->name, "");
	}
	for (size_t i = 0; i < staging.n; i++)
		pending(&r, staging.v[i]);
	rc = 0;
out:
	for (size_t i = 0; i < nsteps; i++)
		free(steps[i].name);
	free(steps);
	free(committed);
	gk_strlist_free(&names);
	gk_strlist_free(&deleting);
	gk_strlist_free(&staging);
	if (lfd >= 0)
		close(lfd);
	close(r.dfd);
	return rc;
}
