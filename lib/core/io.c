/*
 * io.c - full reads and writes, whole files, directories, atomic outputs
 * and their removal when the process is killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"

/*
 * The loops behind gk_read_full and gk_pread_full, gk_write_full and
 * gk_pwrite_full: at 0 reads or writes at the file offset (read, write),
 * at 1 at off (pread, pwrite), retrying EINTR and short transfers.
 */
static ssize_t read_loop(int fd, void *buf, size_t n, int at, off_t off)
{
	size_t got = 0;
	while (got < n) {
		char *p = (char *)buf + got;
		ssize_t r = at ? pread(fd, p, n - got, off + (off_t)got)
			       : read(fd, p, n - got);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static int write_loop(int fd, const void *buf, size_t n, int at, off_t off)
{
	while (n > 0) {
		ssize_t w = at ? pwrite(fd, buf, n, off) : write(fd, buf, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf = (const char *)buf + w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

ssize_t gk_read_full(int fd, void *buf, size_t n)
{
	return read_loop(fd, buf, n, 0, 0);
}

ssize_t gk_pread_full(int fd, void *buf, size_t n, off_t off)
{
	return read_loop(fd, buf, n, 1, off);
}

int gk_write_full(int fd, const void *buf, size_t n)
{
	return write_loop(fd, buf, n, 0, 0);
}

int gk_pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
	return write_loop(fd, buf, n, 1, off);
}

int gk_read_exact(int fd, void *buf, size_t n, const char *name, gk_err *err)
{
	ssize_t r = gk_read_full(fd, buf, n);
	if (r < 0)
		return gk_err_sys(err, errno, "read '%s'", name);
	if ((size_t)r < n)
		return gk_errf(err, "read '%s': truncated (wanted %zu bytes, got %zd)",
			       name, n, r);
	return 0;
}

int gk_read_file(const char *path, size_t max, char **out, size_t *len,
		 gk_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return gk_err_sys(err, errno, "open '%s'", path);
	/* One byte past max tells a file of exactly max bytes from a larger one. */
	size_t cap = max < 4096 ? max + 1 : 4096, n = 0;
	char *buf = malloc(cap + 1);
	if (!buf) {
		close(fd);
		return gk_err_sys(err, ENOMEM, "read '%s'", path);
	}
	for (;;) {
		if (n == cap) {
			if (cap > max) {
				free(buf);
				close(fd);
				return gk_errf(err, "read '%s': larger than %zu bytes",
					       path, max);
			}
			cap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			char *nb = realloc(buf, cap + 1);
			if (!nb) {
				free(buf);
				close(fd);
				return gk_err_sys(err, ENOMEM, "read '%s'", path);
			}
			buf = nb;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			close(fd);
			return gk_err_sys(err, e, "read '%s'", path);
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return 0;
}

static int fsync_dir(const char *dir, gk_err *err)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return gk_err_sys(err, errno, "open directory '%s'", dir);
	/* Some file systems refuse fsync on directories; that is not a loss. */
	if (fsync(fd) < 0 && errno != EINVAL && errno != ENOTSUP) {
		int e = errno;
		close(fd);
		return gk_err_sys(err, e, "fsync directory '%s'", dir);
	}
	close(fd);
	return 0;
}

int gk_fsync_parent(const char *path, gk_err *err)
{
	char tmp[PATH_MAX];
	if (strlen(path) >= sizeof(tmp))
		return gk_errf(err, "path '%s': too long", path);
	strcpy(tmp, path);
	return fsync_dir(dirname(tmp), err);
}

int gk_mkdir_p(const char *path, gk_err *err)
{
	char tmp[PATH_MAX];
	if (strlen(path) >= sizeof(tmp))
		return gk_errf(err, "path '%s': too long", path);
	strcpy(tmp, path);
	for (char *p = tmp + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(tmp, 0777) < 0 && errno != EEXIST)
			return gk_err_sys(err, errno, "create directory '%s'", tmp);
		*p = c;
		if (!c)
			break;
	}
	struct stat st;
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
		return gk_errf(err, "create directory '%s': not a directory", path);
	return 0;
}

/*
 * Paths to remove when a signal kills us. The handler may run at any
 * moment, so slots are plain pointers set and cleared with the signals
 * blocked, and the handler only calls unlink() and rmdir(), which are
 * async-signal-safe (see signal-safety(7)).
 */
#define CLEANUP_SLOTS 256
static char *volatile cleanup_paths[CLEANUP_SLOTS];
static const int cleanup_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

/*
 * Files first, then directories: a directory registered before the files
 * it holds (it is created first) is empty by the second pass, whatever
 * the order of the slots.
 */
static void remove_cleanup_paths(void)
{
	for (int i = 0; i < CLEANUP_SLOTS; i++) {
		char *p = cleanup_paths[i];
		if (p)
			unlink(p);
	}
	for (int i = 0; i < CLEANUP_SLOTS; i++) {
		char *p = cleanup_paths[i];
		if (p)
			rmdir(p);
	}
}

static void cleanup_handler(int sig)
{
	int saved = errno;
	remove_cleanup_paths();
	/* Die of the same signal, so the parent sees what happened. */
	signal(sig, SIG_DFL);
	raise(sig);
	errno = saved;
}

static _Thread_local int hold_depth;
static _Thread_local sigset_t hold_mask;

void gk_cleanup_hold(void)
{
	if (hold_depth++)
		return;
	sigset_t set;
	sigemptyset(&set);
	for (size_t i = 0; i < GK_ARRAY_SIZE(cleanup_signals); i++)
		sigaddset(&set, cleanup_signals[i]);
	pthread_sigmask(SIG_BLOCK, &set, &hold_mask);
}

void gk_cleanup_release(void)
{
	if (hold_depth > 0 && --hold_depth == 0)
		pthread_sigmask(SIG_SETMASK, &hold_mask, NULL);
}

/*
 * The watched mappings: a slot is claimed (1) by a compare-and-swap, filled,
 * then published (2); the handler reads only published slots, and only
 * calls write(), unlink(), rmdir() and _exit(), which are
 * async-signal-safe. As many slots as a process may hold mappings by
 * default (vm.max_map_count, 65530): a run may read thousands of token
 * files, or keep a thousand shards mapped in its shuffle window.
 */
#define MAP_SLOTS 65536
static struct {
	atomic_int state; /* 0 free, 1 being filled, 2 watched */
	uintptr_t lo, hi;
	const char *path;
} map_slots[MAP_SLOTS];
static const char *volatile guard_tool = "gpukit";
static int guard_on;

/* Append s to buf (cap bytes, n used), as much as fits. */
static size_t cat(char *buf, size_t cap, size_t n, const char *s)
{
	while (*s && n + 1 < cap)
		buf[n++] = *s++;
	return n;
}

static void sigbus_handler(int sig, siginfo_t *si, void *ctx)
{
	(void)ctx;
	uintptr_t a = (uintptr_t)si->si_addr;
	/* si_code <= 0: sent (kill, sigqueue), not a fault; no address */
	for (int i = 0; si->si_code > 0 && i < MAP_SLOTS; i++) {
		if (atomic_load_explicit(&map_slots[i].state, memory_order_acquire) != 2 ||
		    a < map_slots[i].lo || a >= map_slots[i].hi)
			continue;
		/*
		 * One write, so that ranks sharing a terminal do not
		 * interleave; room for any path open(2) takes.
		 */
		char msg[PATH_MAX + 128];
		size_t n = cat(msg, sizeof(msg), 0, guard_tool);
		n = cat(msg, sizeof(msg), n, ": '");
		n = cat(msg, sizeof(msg), n, map_slots[i].path);
		n = cat(msg, sizeof(msg), n,
			"' changed or failed while it was being read (truncated or "
			"rewritten in place, or an I/O error)\n");
		(void)!write(STDERR_FILENO, msg, n);
		remove_cleanup_paths();
		_exit(1);
	}
	/*
	 * Not a watched file: the default action. A fault would come again
	 * on return, but a SIGBUS someone sent would not; raised here, it
	 * is pending until the handler returns, and kills either way. (Not
	 * to a handler the guard went over: UCX's hands the fault back to
	 * the one it found, this one, and the two would pass it back and
	 * forth forever.)
	 */
	signal(sig, SIG_DFL);
	raise(sig);
}

void gk_map_guard(const char *tool)
{
	struct sigaction sa;
	if (tool)
		guard_tool = tool;
	else if (!guard_on)
		return;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = sigbus_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
	guard_on = 1;
}

void gk_map_watch(const void *p, size_t len, const char *path)
{
	for (int i = 0; i < MAP_SLOTS; i++) {
		int want = 0;
		if (!atomic_compare_exchange_strong(&map_slots[i].state, &want, 1))
			continue;
		map_slots[i].lo = (uintptr_t)p;
		map_slots[i].hi = (uintptr_t)p + len;
		map_slots[i].path = path;
		atomic_store_explicit(&map_slots[i].state, 2, memory_order_release);
		return;
	}
}

void gk_map_unwatch(const void *p)
{
	for (int i = 0; i < MAP_SLOTS; i++)
		if (atomic_load_explicit(&map_slots[i].state, memory_order_acquire) == 2 &&
		    map_slots[i].lo == (uintptr_t)p) {
			atomic_store_explicit(&map_slots[i].state, 0, memory_order_release);
			return;
		}
}

int gk_cleanup_on_signal(const char *path)
{
	static int installed;
	char *copy = strdup(path);
	int slot = -1;

	if (!copy)
		return -1;
	gk_cleanup_hold();
	if (!installed) {
		for (size_t i = 0; i < GK_ARRAY_SIZE(cleanup_signals); i++) {
			struct sigaction sa, prev;
			sigaction(cleanup_signals[i], NULL, &prev);
			/* An ignored signal stays ignored (nohup, a shell's trap). */
			if (prev.sa_handler == SIG_IGN)
				continue;
			memset(&sa, 0, sizeof(sa));
			sa.sa_handler = cleanup_handler;
			sigemptyset(&sa.sa_mask);
			sigaction(cleanup_signals[i], &sa, NULL);
		}
		installed = 1;
	}
	for (int i = 0; i < CLEANUP_SLOTS; i++) {
		if (!cleanup_paths[i]) {
			cleanup_paths[i] = copy;
			slot = i;
			break;
		}
	}
	gk_cleanup_release();
	if (slot < 0)
		free(copy);
	return slot;
}

void gk_cleanup_now(void)
{
	int saved = errno;
	remove_cleanup_paths();
	errno = saved;
}

void gk_cleanup_forget(int handle)
{
	if (handle < 0 || handle >= CLEANUP_SLOTS)
		return;
	gk_cleanup_hold();
	char *p = cleanup_paths[handle];
	cleanup_paths[handle] = NULL;
	gk_cleanup_release();
	free(p);
}

void gk_ignore_sigxfsz(void)
{
	signal(SIGXFSZ, SIG_IGN);
}

struct gk_atomic {
	char *path, *tmp;
	int fd, slot;
	int direct; /* 1: standard output; 2: a device or FIFO written through */
	FILE *fp;
};

/* The file a symbolic link names, existing or not yet (malloc'ed), or NULL. */
static char *link_target(const char *path)
{
	char *real = realpath(path, NULL);
	if (real)
		return real;
	char t[PATH_MAX];
	ssize_t n = readlink(path, t, sizeof(t) - 1);
	if (n <= 0)
		return NULL;
	t[n] = 0;
	const char *slash = strrchr(path, '/');
	if (t[0] == '/' || !slash)
		return strdup(t);
	size_t dl = (size_t)(slash - path) + 1;
	char *j = malloc(dl + (size_t)n + 1);
	if (j)
		snprintf(j, dl + (size_t)n + 1, "%.*s%s", (int)dl, path, t);
	return j;
}

int gk_atomic_open(gk_atomic **out, const char *path, int mode, gk_err *err)
{
	gk_atomic *a = calloc(1, sizeof(*a));
	if (!a)
		return gk_err_sys(err, ENOMEM, "create '%s'", path);
	a->slot = -1;
	if (strcmp(path, "-") == 0) {
		a->direct = 1;
		a->fd = STDOUT_FILENO;
		a->path = strdup("-");
		if (!a->path)
			goto nomem;
		*out = a;
		return 0;
	}
	/*
	 * A device, FIFO or socket (/dev/null, /dev/stdout, a pipe) is
	 * written through, as cp and sort -o do: renaming over it would
	 * replace the device node itself. A symbolic link is followed, so
	 * the file it names is replaced and the link stays a link.
	 */
	struct stat st;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (S_ISDIR(st.st_mode)) {
			free(a);
			return gk_err_sys(err, EISDIR, "create '%s'", path);
		}
		a->direct = 2;
		a->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
		a->path = strdup(path);
		if (a->fd < 0) {
			int e = errno;
			free(a->path);
			free(a);
			return gk_err_sys(err, e, "open '%s'", path);
		}
		if (!a->path) {
			close(a->fd);
			goto nomem;
		}
		*out = a;
		return 0;
	}
	char *real = NULL;
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
		real = link_target(path);
	if (real)
		path = real;
	a->path = strdup(path);
	free(real);
	path = a->path ? a->path : "";
	size_t len = strlen(path);
	a->tmp = malloc(len + 32);
	if (!a->path || !a->tmp)
		goto nomem;
	const char *slash = strrchr(path, '/');
	size_t dirlen = slash ? (size_t)(slash - path) + 1 : 0;
	snprintf(a->tmp, len + 32, "%.*s.%s.tmp-XXXXXX", (int)dirlen, path,
		 path + dirlen);
	/*
	 * A signal between creating the temp file and registering it for
	 * removal would leave it behind: the signals that remove it wait
	 * until it is registered.
	 */
	gk_cleanup_hold();
	a->fd = mkostemp(a->tmp, O_CLOEXEC);
	int e = errno;
	if (a->fd >= 0)
		a->slot = gk_cleanup_on_signal(a->tmp);
	gk_cleanup_release();
	if (a->fd < 0) {
		gk_err_sys(err, e, "create '%s'", path);
		free(a->path);
		free(a->tmp);
		free(a);
		return -1;
	}
	/*
	 * mkostemp makes 0600. A file replaced keeps its permission bits, as
	 * with sed -i and editors: a checkpoint someone made private stays
	 * private. A new one gets the mode open(2) would give it.
	 */
	mode_t perm;
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		perm = st.st_mode & 0777;
	} else {
		mode_t mask = umask(0);
		umask(mask);
		perm = (mode_t)mode & ~mask;
	}
	if (fchmod(a->fd, perm) < 0) {
		gk_err_sys(err, errno, "chmod '%s'", a->tmp);
		gk_atomic_abort(a);
		return -1;
	}
	*out = a;
	return 0;
nomem:
	free(a->path);
	free(a->tmp);
	free(a);
	return gk_err_sys(err, ENOMEM, "create '%s'", path);
}

int gk_atomic_fd(const gk_atomic *a)
{
	return a->fd;
}

const char *gk_atomic_tmppath(const gk_atomic *a)
{
	return a->direct ? a->path : a->tmp;
}

FILE *gk_atomic_fp(gk_atomic *a, gk_err *err)
{
	if (a->fp)
		return a->fp;
	if (a->direct == 1) {
		a->fp = stdout;
		return a->fp;
	}
	int fd = dup(a->fd);
	if (fd < 0 || !(a->fp = fdopen(fd, "w"))) {
		gk_err_sys(err, errno, "open '%s'", a->tmp);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	return a->fp;
}

int gk_atomic_commit(gk_atomic *a, gk_err *err)
{
	int rc = 0;
	if (a->direct == 1) {
		if (a->fp && fflush(a->fp) != 0)
			rc = gk_err_sys(err, errno, "write '-'");
		free(a->path);
		free(a);
		return rc;
	}
	if (a->direct == 2) {
		if (a->fp && fclose(a->fp) != 0)
			rc = gk_err_sys(err, errno, "write '%s'", a->path);
		if (close(a->fd) < 0 && rc == 0)
			rc = gk_err_sys(err, errno, "close '%s'", a->path);
		free(a->path);
		free(a);
		return rc;
	}
	if (a->fp) {
		/* fclose closes the dup, never the fd we fsync below. */
		FILE *fp = a->fp;
		a->fp = NULL;
		if (fclose(fp) != 0) {
			gk_err_sys(err, errno, "write '%s'", a->path);
			gk_atomic_abort(a);
			return -1;
		}
	}
	if (fsync(a->fd) < 0) {
		gk_err_sys(err, errno, "fsync '%s'", a->path);
		gk_atomic_abort(a);
		return -1;
	}
	if (close(a->fd) < 0) {
		a->fd = -1;
		gk_err_sys(err, errno, "close '%s'", a->path);
		gk_atomic_abort(a);
		return -1;
	}
	a->fd = -1;
	if (rename(a->tmp, a->path) < 0) {
		gk_err_sys(err, errno, "rename '%s' to '%s'", a->tmp, a->path);
		gk_atomic_abort(a);
		return -1;
	}
	gk_cleanup_forget(a->slot);
	rc = gk_fsync_parent(a->path, err);
	free(a->path);
	free(a->tmp);
	free(a);
	return rc;
}

void gk_atomic_abort(gk_atomic *a)
{
	if (!a)
		return;
	if (a->fp && a->direct != 1)
		fclose(a->fp);
	if (a->fd >= 0 && a->direct != 1)
		close(a->fd);
	if (!a->direct)
		unlink(a->tmp);
	gk_cleanup_forget(a->slot);
	free(a->path);
	free(a->tmp);
	free(a);
}

int gk_atomic_write_file(const char *path, const void *buf, size_t n, int mode,
			 gk_err *err)
{
	gk_atomic *a;
	if (gk_atomic_open(&a, path, mode, err))
		return -1;
	if (gk_write_full(a->fd, buf, n) < 0) {
		gk_err_sys(err, errno, "write '%s'", path);
		gk_atomic_abort(a);
		return -1;
	}
	return gk_atomic_commit(a, err);
}

int gk_open_regular_at(int dfd, const char *name, const char *path,
		       struct stat *out, gk_err *err)
{
	struct stat st;
	int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return gk_err_sys(err, errno, "open '%s'", path);
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return gk_err_sys(err, e, "stat '%s'", path);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return gk_errf(err, "read '%s': not a regular file", path);
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	if (out)
		*out = st;
	return fd;
}

int gk_open_regular(const char *path, struct stat *out, gk_err *err)
{
	return gk_open_regular_at(AT_FDCWD, path, path, out, err);
}
