/*
 * step.c - training checkpoint directories: staged under a temp name,
 * COMMIT written last, renamed into place, `latest` swapped atomically.
 * A reader trusts a step directory only when COMMIT is there, so a crash
 * at any point leaves either the old state or the new one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/internal.h"

struct gk_ckpt_stage {
	char *root, *name; /* name: the staging directory's base name */
	uint64_t step;
	int owner;
};

static int stage_new(gk_ckpt_stage **out, const char *root, uint64_t step,
		     const char *name, int owner, gk_err *err)
{
	gk_ckpt_stage *s = calloc(1, sizeof(*s));
	if (!s || !(s->root = strdup(root)) || !(s->name = strdup(name))) {
		if (s)
			free(s->root);
		free(s);
		return gk_err_sys(err, ENOMEM, "checkpoint '%s'", root);
	}
	s->step = step;
	s->owner = owner;
	*out = s;
	return 0;
}

int gk_ckpt_stage_begin(gk_ckpt_stage **out, const char *root, uint64_t step,
			gk_err *err)
{
	char path[PATH_MAX];
	if (gk_mkdir_p(root, err))
		return -1;
	if (snprintf(path, sizeof(path), "%s/." GK_CKPT_STEP_FMT ".tmp-XXXXXX", root,
		     step) >= (int)sizeof(path))
		return gk_errf(err, "checkpoint '%s': path too long", root);
	if (ck_mkdtemp(path, NULL, err))
		return -1;
	return stage_new(out, root, step, strrchr(path, '/') + 1, 1, err);
}

int gk_ckpt_stage_join(gk_ckpt_stage **out, const char *root, uint64_t step,
		       const char *name, gk_err *err)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", root, name);
	if (strchr(name, '/') || stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return gk_errf(err, "checkpoint '%s': no staging directory '%s'", root,
			       name);
	return stage_new(out, root, step, name, 0, err);
}

const char *gk_ckpt_stage_name(const gk_ckpt_stage *s)
{
	return s->name;
}

char *gk_ckpt_stage_path(const gk_ckpt_stage *s, const char *file)
{
	char *p;
	if (asprintf(&p, "%s/%s/%s", s->root, s->name, file) < 0)
		return NULL;
	return p;
}

void gk_ckpt_stage_free(gk_ckpt_stage *s)
{
	if (!s)
		return;
	free(s->root);
	free(s->name);
	free(s);
}

/* Remove directory dir and the files in it (a staging directory is flat). */
static void remove_flat_dir(const char *dir)
{
	char path[2 * PATH_MAX];
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			unlink(path);
		}
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

void gk_ckpt_stage_abort(gk_ckpt_stage *s)
{
	if (!s)
		return;
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/%s", s->root, s->name);
	remove_flat_dir(dir);
	gk_ckpt_stage_free(s);
}

int gk_ckpt_lock(const char *root, gk_err *err)
{
	char path[PATH_MAX];
	if (gk_mkdir_p(root, err) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/" GK_CKPT_LOCK, root);
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return gk_err_sys(err, errno, "checkpoint directory '%s': create '%s'", root, path);
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		char who[32] = "";
		ssize_t n = pread(fd, who, sizeof(who) - 1, 0);
		who[n > 0 ? n : 0] = 0;
		who[strcspn(who, "\n")] = 0;
		if (e == EWOULDBLOCK) {
			close(fd);
			return gk_errf(err, "checkpoint directory '%s' is in use by another writer%s%s%s",
				       root, who[0] ? " (" : "", who, who[0] ? ")" : "");
		}
		/* a file system without flock (some NFS mounts): go on unlocked */
		return fd;
	}
	char who[64];
	char host[32] = "";
	gethostname(host, sizeof(host) - 1);
	int n = snprintf(who, sizeof(who), "pid %ld on %s\n", (long)getpid(), host);
	if (ftruncate(fd, 0) == 0 && pwrite(fd, who, (size_t)n, 0) < 0)
		errno = 0;
	/* what killed writers left: nobody else writes here now */
	DIR *d = opendir(root);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		uint64_t step;
		char *dot = strstr(e->d_name, ".tmp-");
		if (!dot || e->d_name[0] != '.')
			continue;
		char name[NAME_MAX + 1], stale[2 * PATH_MAX];
		snprintf(name, sizeof(name), "%.*s", (int)(dot - e->d_name - 1), e->d_name + 1);
		snprintf(stale, sizeof(stale), "%s/%s", root, e->d_name);
		if (ck_parse_step(name, &step) == 0)
			remove_flat_dir(stale);
		else if (!strcmp(name, GK_CKPT_LATEST))
			unlink(stale);
	}
	if (d)
		closedir(d);
	/*
	 * latest is replaced by a rename of a new link at every commit: a
	 * real directory there (a copy made with cp -rL, rsync -L or an
	 * object-store sync) would make every commit fail, after the steps
	 * before it were trained. Refuse it now, with the repair.
	 */
	struct stat st;
	snprintf(path, sizeof(path), "%s/" GK_CKPT_LATEST, root);
	if (lstat(path, &st) == 0 && !S_ISLNK(st.st_mode)) {
		close(fd);
		return gk_errf(err, "checkpoint directory '%s': '" GK_CKPT_LATEST "' is a %s, not a "
			       "symbolic link (a copy made with cp -rL or rsync -L?), and a commit "
			       "replaces it: remove it and link the step it copies (rm -r '%s' && "
			       "ln -s step-NNNNNNNN '%s')", root,
			       S_ISDIR(st.st_mode) ? "directory" : "file", path, path);
	}
	return fd;
}

void gk_ckpt_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int set_latest(const char *root, const char *name, gk_err *err)
{
	char tmp[2 * PATH_MAX], link[2 * PATH_MAX];
	snprintf(link, sizeof(link), "%s/latest", root);
	snprintf(tmp, sizeof(tmp), "%s/.latest.tmp-%ld", root, (long)getpid());
	unlink(tmp);
	if (symlink(name, tmp) < 0)
		return gk_err_sys(err, errno, "create symlink '%s'", tmp);
	/* rename(2) replaces the old link atomically: readers never miss it. */
	if (rename(tmp, link) < 0) {
		int e = errno;
		unlink(tmp);
		return gk_err_sys(err, e, "rename '%s' to '%s'", tmp, link);
	}
	return gk_fsync_parent(link, err);
}

/* ROOT/step-N/COMMIT's bytes (malloc'ed) and their XXH3. */
static int read_commit(const char *root, uint64_t step, char **buf, size_t *len,
		       uint64_t *hash, gk_err *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/" GK_CKPT_STEP_FMT "/" GK_CKPT_COMMIT, root, step);
	if (ck_read_regular(path, (size_t)64 << 20, buf, len, err))
		return -1;
	*hash = gk_xxh3(*buf, *len);
	return 0;
}

static int commit_hash(const char *root, uint64_t step, uint64_t *hash, gk_err *err)
{
	char *buf;
	size_t len;
	if (read_commit(root, step, &buf, &len, hash, err))
		return -1;
	free(buf);
	return 0;
}

/*
 * ROOT's inode number: the same directory wherever it is named from, and
 * after a rename within its filesystem; 0 if unknown. Not the device: a
 * job requeued on another node sees the same NFS or Lustre directory
 * under another device number, but with the same inode.
 */
static int root_id(const char *root, char *out, size_t len)
{
	struct stat st;
	if (stat(root, &st) < 0)
		return 0;
	snprintf(out, len, "%ju", (uintmax_t)st.st_ino);
	return 1;
}

int gk_ckpt_stage_commit(gk_ckpt_stage *s, gk_err *err)
{
	char dir[PATH_MAX], final[2 * PATH_MAX], path[2 * PATH_MAX], name[64];
	snprintf(dir, sizeof(dir), "%s/%s", s->root, s->name);
	snprintf(name, sizeof(name), GK_CKPT_STEP_FMT, s->step);
	snprintf(final, sizeof(final), "%s/%s", s->root, name);
	gk_strlist files = {0};
	json_t *j = json_object(), *fj = json_object();
	int rc = -1;
	DIR *d = opendir(dir);
	struct dirent *e;
	if (!d) {
		gk_err_sys(err, errno, "open directory '%s'", dir);
		goto out;
	}
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && strcmp(e->d_name, GK_CKPT_COMMIT) &&
		    gk_strlist_push(&files, e->d_name, err)) {
			closedir(d);
			goto out;
		}
	closedir(d);
	if (files.n)
		qsort(files.v, files.n, sizeof(char *), cmp_str);
	for (size_t i = 0; i < files.n; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files.v[i]);
		int fd = gk_open_regular(path, NULL, err);
		struct stat st;
		uint64_t h;
		char hex[17];
		if (fd < 0)
			goto out;
		if (fstat(fd, &st) < 0) {
			gk_err_sys(err, errno, "stat '%s'", path);
			close(fd);
			goto out;
		}
		/* Other ranks wrote these; make them durable before COMMIT says so. */
		if (fsync(fd) < 0) {
			gk_err_sys(err, errno, "fsync '%s'", path);
			close(fd);
			goto out;
		}
		if (gk_xxh3_fd(fd, 0, UINT64_MAX, &h, path, err)) {
			close(fd);
			goto out;
		}
		close(fd);
		json_t *o = json_object();
		json_object_set_new(o, "bytes", json_integer((json_int_t)st.st_size));
		json_object_set_new(o, "xxh3", json_string(gk_xxh3_hex(h, hex)));
		json_object_set_new(fj, files.v[i], o);
	}
	char when[32];
	time_t now = time(NULL);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	json_object_set_new(j, "step", json_integer((json_int_t)s->step));
	json_object_set_new(j, "time", json_string(when));
	json_object_set(j, "files", fj);
	/*
	 * The step this one continues: what latest names now (the step the
	 * writer resumed from or committed last; the writer holds ROOT).
	 * gk_ckpt_repair_latest follows these links.
	 */
	uint64_t parent, ph;
	char rid[48];
	if (gk_ckpt_latest(s->root, &parent, NULL) == 1 && parent < s->step &&
	    commit_hash(s->root, parent, &ph, NULL) == 0 && root_id(s->root, rid, sizeof(rid))) {
		char hex[17];
		json_t *pj = json_object();
		json_object_set_new(pj, "step", json_integer((json_int_t)parent));
		json_object_set_new(pj, "commit_xxh3", json_string(gk_xxh3_hex(ph, hex)));
		/* the directory it was committed in: a copy of the step (or of
		 * a whole run, forked) continues the same parent elsewhere */
		json_object_set_new(pj, "root", json_string(rid));
		json_object_set_new(j, "parent", pj);
	}
	snprintf(path, sizeof(path), "%s/COMMIT", dir);
	if (gk_json_write_file(path, j, err))
		goto out;
	if (rename(dir, final) < 0) {
		if (errno == ENOTEMPTY || errno == EEXIST)
			gk_errf(err, "checkpoint '%s': already exists", final);
		else
			gk_err_sys(err, errno, "rename '%s' to '%s'", dir, final);
		goto out;
	}
	if (gk_fsync_parent(final, err))
		goto out;
	/* latest only moves forward: committing an old step leaves it be. */
	uint64_t newest;
	int r = gk_ckpt_latest(s->root, &newest, err);
	if (r < 0 || (r == 1 && newest > s->step))
		rc = r < 0 ? -1 : 0;
	else
		rc = set_latest(s->root, name, err);
	if (!rc)
		gk_ckpt_stage_free(s);
out:
	/* On failure the caller still owns s (to abort it). */
	gk_strlist_free(&files);
	json_decref(fj);
	json_decref(j);
	return rc;
}

int ck_parse_step(const char *name, uint64_t *step)
{
	char canon[32];
	uint64_t v;
	if (strncmp(name, "step-", 5) != 0)
		return -1;
	const char *p = name + 5;
	size_t n = strspn(p, "0123456789");
	if (n < 8 || n > 20 || p[n] || gk_parse_u64(p, UINT64_MAX, &v, "step", NULL))
		return -1;
	/* One spelling per step: step-000000001 is not step 1's directory. */
	snprintf(canon, sizeof(canon), GK_CKPT_STEP_FMT, v);
	if (strcmp(canon, name) != 0)
		return -1;
	*step = v;
	return 0;
}

/* A real directory (not a symbolic link) holding a regular COMMIT. */
static int committed(const char *root, const char *name)
{
	char path[2 * PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", root, name);
	if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return 0;
	snprintf(path, sizeof(path), "%s/%s/COMMIT", root, name);
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

size_t ck_count_uncommitted(const char *root)
{
	DIR *d = opendir(root);
	struct dirent *e;
	size_t n = 0;
	while (d && (e = readdir(d))) {
		uint64_t st;
		char name[NAME_MAX + 1];
		const char *tmp = strstr(e->d_name, ".tmp-");
		if (e->d_name[0] == '.' && tmp > e->d_name) {
			/* a staging directory, .step-N.tmp-XXXXXX */
			snprintf(name, sizeof(name), "%.*s", (int)(tmp - e->d_name - 1), e->d_name + 1);
			n += ck_parse_step(name, &st) == 0;
		} else if (ck_parse_step(e->d_name, &st) == 0 && !committed(root, e->d_name)) {
			n++;
		}
	}
	if (d)
		closedir(d);
	return n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int gk_ckpt_list(const char *root, uint64_t **steps, size_t *n, gk_err *err)
{
	DIR *d = opendir(root);
	if (!d)
		return gk_err_sys(err, errno, "open directory '%s'", root);
	uint64_t *v = NULL;
	size_t cnt = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		uint64_t st;
		if (ck_parse_step(e->d_name, &st) || !committed(root, e->d_name))
			continue;
		if (GK_GROW(v, cap, cnt + 1, "list", err)) {
			free(v);
			closedir(d);
			return gk_err_prefix(err, "'%s'", root);
		}
		v[cnt++] = st;
	}
	closedir(d);
	if (cnt)
		qsort(v, cnt, sizeof(*v), cmp_u64);
	*steps = v;
	*n = cnt;
	return 0;
}

int gk_ckpt_next_after(const char *root, uint64_t after, uint64_t *step,
		       int *is_committed, gk_err *err)
{
	DIR *d = opendir(root);
	if (!d)
		return gk_err_sys(err, errno, "open directory '%s'", root);
	int found = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		uint64_t st;
		if (ck_parse_step(e->d_name, &st) || st <= after || (found && st >= *step))
			continue;
		*step = st;
		*is_committed = committed(root, e->d_name);
		found = 1;
	}
	closedir(d);
	return found;
}

int ck_latest_link(const char *root, uint64_t *step, char *target, size_t len)
{
	char link[2 * PATH_MAX], path[2 * PATH_MAX];
	struct stat ls, ts;
	snprintf(link, sizeof(link), "%s/latest", root);
	if (lstat(link, &ls) < 0)
		return CK_LATEST_NONE;
	if (!S_ISLNK(ls.st_mode))
		return CK_LATEST_NOT_LINK;
	ssize_t r = readlink(link, target, len - 1);
	target[r < 0 ? 0 : r] = '\0';
	if (stat(link, &ts) < 0 || !S_ISDIR(ts.st_mode))
		return CK_LATEST_ELSEWHERE;
	/*
	 * However the link is spelled (step-N, ./step-N/, an absolute path),
	 * it names the step directory with the same device and inode.
	 */
	DIR *d = opendir(root);
	struct dirent *e;
	int found = CK_LATEST_ELSEWHERE;
	while (d && found != CK_LATEST_STEP && (e = readdir(d))) {
		uint64_t st;
		struct stat ss;
		if (ck_parse_step(e->d_name, &st))
			continue;
		snprintf(path, sizeof(path), "%s/%s", root, e->d_name);
		if (lstat(path, &ss) == 0 && S_ISDIR(ss.st_mode) &&
		    ss.st_dev == ts.st_dev && ss.st_ino == ts.st_ino) {
			*step = st;
			found = CK_LATEST_STEP;
		}
	}
	if (d)
		closedir(d);
	return found;
}

int gk_ckpt_latest(const char *root, uint64_t *step, gk_err *err)
{
	char target[PATH_MAX], name[32];
	uint64_t st;
	if (ck_latest_link(root, &st, target, sizeof(target)) == CK_LATEST_STEP) {
		snprintf(name, sizeof(name), GK_CKPT_STEP_FMT, st);
		if (committed(root, name)) {
			*step = st;
			return 1;
		}
	}
	uint64_t *v;
	size_t n;
	if (gk_ckpt_list(root, &v, &n, err))
		return -1;
	int found = n > 0;
	if (found)
		*step = v[n - 1];
	free(v);
	return found;
}

/*
 * The parent COMMIT of step names (see gk_ckpt_stage_commit), as its step
 * and the XXH3 of its COMMIT's bytes, when it was committed in the
 * directory whose root_id is rid; 0, or -1 when there is none.
 */
static int parent_of(const char *buf, size_t len, const char *rid, uint64_t *step,
		     uint64_t *hash)
{
	json_t *j = gk_json_load_buf(buf, len, GK_CKPT_COMMIT, NULL);
	const json_t *p = json_object_get(j, "parent");
	int64_t ps;
	const char *hex, *root;
	int rc = -1;
	if (json_is_object(p) && gk_json_get_int(p, "step", &ps, NULL) == 0 && ps >= 0 &&
	    gk_json_get_str(p, "commit_xxh3", &hex, NULL) == 0 &&
	    gk_json_get_str(p, "root", &root, NULL) == 0 && strcmp(root, rid) == 0 &&
	    gk_xxh3_parse(hex, hash, NULL) == 0) {
		*step = (uint64_t)ps;
		rc = 0;
	}
	json_decref(j);
	return rc;
}

int gk_ckpt_repair_latest(const char *root, uint64_t *from, uint64_t *to,
			  gk_err *err)
{
	char target[PATH_MAX], name[32], rid[48];
	uint64_t latest, cur, next;
	struct link {
		uint64_t step, hash;
	} *chain = NULL;
	size_t n = 0, cap = 0;
	int is_committed, r;
	if (ck_latest_link(root, &latest, target, sizeof(target)) != CK_LATEST_STEP ||
	    !root_id(root, rid, sizeof(rid)))
		return 0; /* readers already take the highest committed step */
	snprintf(name, sizeof(name), GK_CKPT_STEP_FMT, latest);
	if (!committed(root, name))
		return 0;
	if (GK_GROW(chain, cap, 1, "latest", err))
		return -1;
	chain[n].step = latest;
	if (commit_hash(root, latest, &chain[n].hash, NULL)) {
		free(chain);
		return 0;
	}
	n++;
	/*
	 * Every step directory above latest must be committed and continue
	 * latest or one of the steps between: a run killed before it moved
	 * latest (once, or again after committing on past a failed move).
	 * Anything else there (another run's step, a copy without COMMIT) is
	 * left for the caller to refuse.
	 */
	for (cur = latest; (r = gk_ckpt_next_after(root, cur, &next, &is_committed, err)) == 1;
	     cur = next) {
		char *buf;
		size_t len;
		uint64_t ps, ph, h;
		int linked = 0;
		if (!is_committed || read_commit(root, next, &buf, &len, &h, NULL))
			break;
		if (parent_of(buf, len, rid, &ps, &ph) == 0)
			for (size_t i = 0; i < n && !linked; i++)
				linked = chain[i].step == ps && chain[i].hash == ph;
		free(buf);
		if (!linked)
			break;
		if (GK_GROW(chain, cap, n + 1, "latest", err)) {
			free(chain);
			return -1;
		}
		chain[n].step = next;
		chain[n++].hash = h;
	}
	free(chain);
	if (r < 0)
		return -1;
	if (r == 1 || n == 1)
		return 0;
	snprintf(name, sizeof(name), GK_CKPT_STEP_FMT, cur);
	if (set_latest(root, name, err) < 0)
		return gk_err_prefix(err, "checkpoint directory '%s'", root);
	*from = latest;
	*to = cur;
	return 1;
}

/*
 * After a file of the step directory opened as dfd was found missing: 1
 * when the directory itself is gone from path dir (removed, or renamed
 * away, as ckpt-prune does before deleting), so the reader was too slow,
 * not the checkpoint damaged.
 */
static int step_gone(int dfd, const char *dir)
{
	struct stat a, b;
	if (fstat(dfd, &a) < 0)
		return 0;
	return a.st_nlink == 0 || stat(dir, &b) < 0 || a.st_dev != b.st_dev ||
	       a.st_ino != b.st_ino;
}

static int missing(int dfd, const char *name)
{
	return faccessat(dfd, name, F_OK, 0) < 0 && errno == ENOENT;
}

static int gone_error(const char *dir, gk_err *err)
{
	return gk_errf(err, "checkpoint '%s': removed while being read (by ckpt-prune?)", dir);
}

/*
 * The files a step directory's readers take: its safetensors, their
 * index, config.json and trainer.json. Others are not read, so not
 * checked: tokenizer files or a generation_config.json added to make a
 * step loadable by Hugging Face stay allowed.
 */
static int read_kind(const char *name)
{
	size_t n = strlen(name);
	return (n > 12 && !strcmp(name + n - 12, ".safetensors")) ||
	       !strcmp(name, GK_CKPT_INDEX) || !strcmp(name, GK_CKPT_CONFIG) ||
	       !strcmp(name, GK_CKPT_TRAINER);
}

/* The step number in dir's last component when it is a step directory's name. */
static int dir_step(const char *dir, uint64_t *step)
{
	char name[64];
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	size_t b = n;
	while (b > 0 && dir[b - 1] != '/')
		b--;
	if (n - b >= sizeof(name))
		return -1;
	memcpy(name, dir + b, n - b);
	name[n - b] = '\0';
	return ck_parse_step(name, step);
}

/*
 * Step directory dfd's COMMIT (dir names it in messages), parsed and
 * checked against the directory without reading the files: "files" an
 * object of plain names; "step" the number in dir's name, when it is
 * step-N (a COMMIT copied from another step is not this one's); and
 * every file of the kinds readers take (read_kind) listed in it. The
 * writer lists every file it wrote, so one it does not list came later,
 * and checking only the listed ones would publish it unchecked. Returns the parsed COMMIT, or NULL.
 */
static json_t *commit_load(int dfd, const char *dir, gk_err *err)
{
	char path[2 * PATH_MAX], *buf;
	size_t len;
	struct stat st;
	uint64_t want;
	int64_t step;
	if (fstatat(dfd, GK_CKPT_COMMIT, &st, 0) < 0) {
		gk_errf(err, "checkpoint '%s': incomplete (no COMMIT)", dir);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/COMMIT", dir);
	if (ck_read_regular_at(dfd, GK_CKPT_COMMIT, path, (size_t)64 << 20, &buf, &len, err)) {
		if (missing(dfd, GK_CKPT_COMMIT) && step_gone(dfd, dir))
			gone_error(dir, err);
		return NULL;
	}
	json_t *j = gk_json_load_buf(buf, len, path, err);
	free(buf);
	if (!j)
		return NULL;
	const json_t *files = json_object_get(j, "files");
	const char *k;
	json_t *v;
	if (!json_is_object(files)) {
		gk_errf(err, "checkpoint '%s': COMMIT has no files object", dir);
		goto bad;
	}
	json_object_foreach((json_t *)files, k, v)
		if (!*k || strchr(k, '/') || !strcmp(k, ".") || !strcmp(k, "..")) {
			gk_errf(err, "checkpoint '%s': COMMIT entry '%s' is malformed", dir, k);
			goto bad;
		}
	if (dir_step(dir, &want) == 0) {
		if (gk_json_get_int(j, "step", &step, NULL) < 0 || step < 0) {
			gk_errf(err, "checkpoint '%s': COMMIT has no step", dir);
			goto bad;
		}
		if ((uint64_t)step != want) {
			gk_errf(err, "checkpoint '%s': COMMIT says step %" PRId64
				" (copied from another step?)", dir, step);
			goto bad;
		}
	}
	int fd = dup(dfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	if (!d) {
		if (fd >= 0)
			close(fd);
		gk_err_sys(err, errno, "read directory '%s'", dir);
		goto bad;
	}
	rewinddir(d); /* the dup shares dfd's offset */
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && read_kind(e->d_name) &&
		    !json_object_get(files, e->d_name)) {
			gk_errf(err, "checkpoint '%s': '%s' is not listed in COMMIT", dir,
				e->d_name);
			closedir(d);
			goto bad;
		}
	closedir(d);
	return j;
bad:
	json_decref(j);
	return NULL;
}

int gk_ckpt_verify_step(const char *dir, gk_err *err)
{
	char path[2 * PATH_MAX];
	struct stat st;
	/*
	 * One open of the directory, then every file through it: dir may be
	 * ROOT/latest, which a writer moves on at any time, and COMMIT and
	 * the files must come from the same step.
	 */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return gk_errf(err, "checkpoint '%s': incomplete (no COMMIT)", dir);
	json_t *j = commit_load(dfd, dir, err);
	if (!j) {
		close(dfd);
		return -1;
	}
	const json_t *files = json_object_get(j, "files");
	const char *k;
	json_t *v;
	int rc = 0;
	json_object_foreach((json_t *)files, k, v) {
		int64_t bytes;
		const char *hex;
		uint64_t want, got;
		if (gk_json_get_int(v, "bytes", &bytes, err) ||
		    gk_json_get_str(v, "xxh3", &hex, err) ||
		    gk_xxh3_parse(hex, &want, err)) {
			rc = gk_errf(err, "checkpoint '%s': COMMIT entry '%s' is malformed",
				     dir, k);
			break;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, k);
		int fd = gk_open_regular_at(dfd, k, path, &st, err);
		if (fd < 0) {
			if (missing(dfd, k) && step_gone(dfd, dir))
				rc = gone_error(dir, err);
			else if (missing(dfd, k))
				rc = gk_errf(err, "checkpoint '%s': incomplete: '%s', listed in its "
					     "COMMIT, is missing", dir, k);
			else
				rc = gk_err_prefix(err, "checkpoint '%s'", dir);
			break;
		}
		if (st.st_size != bytes) {
			close(fd);
			rc = gk_errf(err, "checkpoint '%s': '%s' has %lld bytes, COMMIT says %" PRId64,
				     dir, k, (long long)st.st_size, bytes);
			break;
		}
		rc = gk_xxh3_fd(fd, 0, UINT64_MAX, &got, path, err);
		close(fd);
		if (rc)
			break;
		if (got != want) {
			rc = gk_errf(err, "checkpoint '%s': '%s' does not match its XXH3 in COMMIT",
				     dir, k);
			break;
		}
	}
	json_decref(j);
	close(dfd);
	return rc;
}

int ck_step_files(const char *dir, gk_strlist *names, gk_err *err)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return gk_errf(err, "checkpoint '%s': incomplete (no COMMIT)", dir);
	json_t *j = commit_load(dfd, dir, err);
	close(dfd);
	if (!j)
		return -1;
	const char *k;
	json_t *v;
	int rc = 0;
	size_t first = names->n;
	json_object_foreach(json_object_get(j, "files"), k, v)
		if ((rc = gk_strlist_push(names, k, err)))
			break;
	if (!rc && names->n > first)
		qsort(names->v + first, names->n - first, sizeof(char *), cmp_str);
	json_decref(j);
	return rc;
}

/* A regular COMMIT in directory dir (followed however dir is spelled). */
static int has_commit(const char *dir)
{
	char path[2 * PATH_MAX];
	struct stat st;
	if (snprintf(path, sizeof(path), "%s/" GK_CKPT_COMMIT, dir) >= (int)sizeof(path))
		return 0;
	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A copy of p without trailing slashes ("/" stays), or NULL. */
static char *strip_slashes(const char *p)
{
	char *s = strdup(p);
	size_t n = s ? strlen(s) : 0;
	while (n > 1 && s[n - 1] == '/')
		s[--n] = '\0';
	return s;
}

int gk_ckpt_resolve(const char *in, char **out, gk_err *err)
{
	char target[PATH_MAX], *path = strip_slashes(in), *base;
	struct stat st;
	int followed = 0;
	if (!path)
		return gk_err_sys(err, ENOMEM, "open '%s'", in);
	/* Follow the links ourselves, once, as the kernel would. */
	for (int hops = 0; lstat(path, &st) == 0 && S_ISLNK(st.st_mode); hops++) {
		ssize_t r = hops < 40 ? readlink(path, target, sizeof(target) - 1) : -1;
		char *next = NULL, *slash = strrchr(path, '/');
		if (r <= 0)
			break; /* left to the reader to report */
		target[r] = '\0';
		if (target[0] == '/' || !slash)
			next = strip_slashes(target);
		else if (asprintf(&next, "%.*s%s", (int)(slash - path + 1), path, target) < 0)
			next = NULL;
		else {
			char *t = strip_slashes(next);
			free(next);
			next = t;
		}
		if (!next) {
			free(path);
			return gk_err_sys(err, ENOMEM, "open '%s'", in);
		}
		free(path);
		path = next;
		followed = 1;
	}
	base = followed ? path : (char *)in;
	if (stat(base, &st) < 0 || !S_ISDIR(st.st_mode)) {
		/* a file is opened once; what is not there is the reader's to report */
		base = (char *)in;
	} else if (!has_commit(base)) {
		const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
		uint64_t step;
		char step_name[32], index[PATH_MAX];
		snprintf(index, sizeof(index), "%s/%s", base, GK_CKPT_INDEX);
		if (!strncmp(name, "step-", 5) || !strncmp(name, ".step-", 6)) {
			/* an unfinished step: refused by the reader, as the user named it */
			base = (char *)in;
		} else if (access(index, F_OK) != 0 && gk_ckpt_latest(base, &step, NULL) == 1) {
			/* a checkpoint root: its latest committed step, named now
			 * (below path, which has no trailing '/') */
			char *p;
			snprintf(step_name, sizeof(step_name), GK_CKPT_STEP_FMT, step);
			if (asprintf(&p, "%s/%s", path, step_name) < 0) {
				free(path);
				return gk_err_sys(err, ENOMEM, "open '%s'", in);
			}
			free(path);
			*out = p;
			return 0;
		}
	}
	if (base == in) {
		free(path);
		if (!(path = strdup(in)))
			return gk_err_sys(err, ENOMEM, "open '%s'", in);
	}
	*out = path;
	return 0;
}

int gk_ckpt_verify_input(const char *in, gk_err *err)
{
	char *r;
	if (gk_ckpt_resolve(in, &r, err))
		return -1;
	int rc = 0;
	struct stat st;
	if (has_commit(r)) {
		rc = gk_ckpt_verify_step(r, err);
	} else if (stat(r, &st) == 0 && S_ISREG(st.st_mode)) {
		/* a file of a step directory is checked as its step: its
		 * bytes against COMMIT's hash, and the step's other files */
		char *slash = strrchr(r, '/');
		char *dir = slash ? strndup(r, slash == r ? 1 : (size_t)(slash - r)) : strdup(".");
		if (!dir)
			rc = gk_err_sys(err, ENOMEM, "check '%s'", in);
		else if (has_commit(dir))
			rc = gk_ckpt_verify_step(dir, err);
		free(dir);
	}
	free(r);
	return rc;
}

int gk_ckpt_verify_set(const gk_ckpt_set *s, gk_err *err)
{
	for (size_t i = 0; i < s->steps.n; i++)
		if (gk_ckpt_verify_step(s->steps.v[i], err))
			return -1;
	return 0;
}

char *gk_ckpt_step_path(const char *root, uint64_t step)
{
	char *p;
	return asprintf(&p, "%s/" GK_CKPT_STEP_FMT, root, step) < 0 ? NULL : p;
}

char *gk_ckpt_join(const char *dir, const char *file)
{
	char *p;
	return asprintf(&p, "%s/%s", dir, file) < 0 ? NULL : p;
}

char *gk_ckpt_optim_file(int sharded, int rank, int world)
{
	return sharded ? gk_ckpt_rank_file(GK_CKPT_OPTIM, rank, world)
		       : strdup(GK_CKPT_OPTIM ".safetensors");
}

int gk_ckpt_is_optim_file(const char *name)
{
	return !strncmp(name, GK_CKPT_OPTIM, strlen(GK_CKPT_OPTIM)) &&
	       strlen(name) > strlen(GK_CKPT_OPTIM ".safetensors") - 1 &&
	       gk_str_ends(name, ".safetensors");
}
