/*
 * core_io.c - full reads/writes under EINTR, atomic outputs (including a
 * writer killed midway), whole-file reads, mkdir -p, a mapped file
 * truncated under its reader.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "tap.h"

static char dir[] = "/tmp/gk-core-io-XXXXXX";

static int count_entries(const char *d)
{
	DIR *dp = opendir(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dp)))
		if (e->d_name[0] != '.' || (e->d_name[1] && e->d_name[1] != '.'))
			n++;
	closedir(dp);
	return n;
}

static void on_alarm(int sig) { (void)sig; }

/* A child writes 1 MiB in 64 pieces with pauses; the parent reads it all
 * at once while a timer interrupts read() with EINTR many times. */
static void test_read_full_eintr(void)
{
	int p[2];
	enum { PIECE = 16384, PIECES = 64 };
	if (pipe(p) < 0)
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		char buf[PIECE];
		for (int i = 0; i < PIECES; i++) {
			memset(buf, 'a' + i % 26, sizeof(buf));
			gk_write_full(p[1], buf, sizeof(buf));
			usleep(2000);
		}
		_exit(0);
	}
	close(p[1]);
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm; /* no SA_RESTART: read() returns EINTR */
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {{0, 1000}, {0, 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
	static char got[PIECE * PIECES + 10];
	ssize_t n = gk_read_full(p[0], got, sizeof(got));
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	int good = n == PIECE * PIECES;
	for (int i = 0; good && i < PIECES; i++)
		good = got[i * PIECE] == 'a' + i % 26 && got[i * PIECE + PIECE - 1] == 'a' + i % 26;
	ok(good, "read_full collects 1 MiB across EINTRs and short reads (got %zd)", n);
	close(p[0]);
	waitpid(pid, NULL, 0);
}

static void test_atomic(void)
{
	char path[256], buf[64];
	gk_err err = {0};
	gk_atomic *a;

	snprintf(path, sizeof(path), "%s/out.bin", dir);
	ok(gk_atomic_open(&a, path, 0644, &err) == 0, "atomic open");
	ok(access(path, F_OK) < 0, "no final file before commit");
	const char *tmp = gk_atomic_tmppath(a);
	ok(strncmp(tmp, dir, strlen(dir)) == 0 && strstr(tmp, "/.out.bin.tmp-"),
	   "temp file is beside the target: %s", tmp);
	gk_write_full(gk_atomic_fd(a), "hello", 5);
	ok(gk_atomic_commit(a, &err) == 0, "commit");
	int fd = open(path, O_RDONLY);
	ok(fd >= 0 && read(fd, buf, sizeof(buf)) == 5 && memcmp(buf, "hello", 5) == 0,
	   "committed content");
	close(fd);
	struct stat st;
	mode_t mask = umask(0);
	umask(mask);
	ok(stat(path, &st) == 0 && (st.st_mode & 0777) == (0644 & ~mask),
	   "mode 0644 minus umask");
	is_int(count_entries(dir), 1, "only the final file in the directory");

	/* Abort leaves the old file as it was and no temp. */
	ok(gk_atomic_open(&a, path, 0644, &err) == 0, "open over an existing file");
	gk_write_full(gk_atomic_fd(a), "XXXXXXXX", 8);
	gk_atomic_abort(a);
	fd = open(path, O_RDONLY);
	ok(read(fd, buf, sizeof(buf)) == 5, "abort keeps the old content");
	close(fd);
	is_int(count_entries(dir), 1, "abort removes the temp");

	/* A file replaced keeps its permission bits, not 0644 & ~umask. */
	for (int i = 0; i < 2; i++) {
		mode_t m = i ? 0600 : 0751;
		chmod(path, m);
		ok(gk_atomic_write_file(path, "new", 3, 0644, &err) == 0 &&
		   stat(path, &st) == 0 && (st.st_mode & 07777) == m,
		   "replacing a %03o file keeps %03o", (unsigned)m, (unsigned)m);
	}
	unlink(path);

	/* stdio stream */
	snprintf(path, sizeof(path), "%s/text.txt", dir);
	gk_atomic_open(&a, path, 0644, &err);
	FILE *fp = gk_atomic_fp(a, &err);
	fprintf(fp, "line %d\n", 42);
	ok(gk_atomic_commit(a, &err) == 0, "commit through FILE*");
	char *text;
	ok(gk_read_file(path, 1024, &text, NULL, &err) == 0 && strcmp(text, "line 42\n") == 0,
	   "FILE* content");
	free(text);
	unlink(path);

	/* A directory that does not exist. */
	snprintf(path, sizeof(path), "%s/nope/out", dir);
	ok(gk_atomic_open(&a, path, 0644, &err) == -1, "open in a missing directory fails");
	ok(strstr(err.msg, "create '") && strstr(err.msg, "No such file or directory"),
	   "  message: %s", err.msg);

	/* A path under something that is not a directory. */
	ok(gk_atomic_write_file("/dev/null/x", "a", 1, 0644, &err) == -1,
	   "write under a non-directory fails: %s", err.msg);
}

/*
 * What the path names: a FIFO (as a device or /dev/stdout would be) is
 * written through and stays a FIFO; a symbolic link keeps pointing at
 * the file, which gets the new content; a directory is refused.
 */
static void test_atomic_targets(void)
{
	char fifo[256], file[256], link[256], buf[64];
	gk_err err = {0};
	struct stat st;
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(file, sizeof(file), "%s/real.txt", dir);
	snprintf(link, sizeof(link), "%s/link.txt", dir);
	if (mkfifo(fifo, 0600) < 0)
		abort();
	int rd = open(fifo, O_RDONLY | O_NONBLOCK);
	ok(rd >= 0 && gk_atomic_write_file(fifo, "through", 7, 0644, &err) == 0,
	   "a FIFO is written through%s%s", err.msg[0] ? ": " : "", err.msg);
	ok(read(rd, buf, sizeof(buf)) == 7 && memcmp(buf, "through", 7) == 0 &&
		   lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode),
	   "the reader got the bytes and the FIFO is still a FIFO");
	close(rd);
	unlink(fifo);

	gk_atomic_write_file(file, "old", 3, 0644, &err);
	if (symlink("real.txt", link) < 0)
		abort();
	ok(gk_atomic_write_file(link, "new!", 4, 0644, &err) == 0, "write to a symbolic link");
	char *text = NULL;
	ok(lstat(link, &st) == 0 && S_ISLNK(st.st_mode) &&
		   gk_read_file(file, 64, &text, NULL, &err) == 0 && strcmp(text, "new!") == 0,
	   "the link stays a link and the file it names has the new content");
	free(text);
	is_int(count_entries(dir), 2, "no temp left beside either");
	unlink(link);
	unlink(file);
	/* a link to a file not there yet: the file is created */
	if (symlink("later.txt", link) < 0)
		abort();
	snprintf(file, sizeof(file), "%s/later.txt", dir);
	ok(gk_atomic_write_file(link, "x", 1, 0644, &err) == 0 && lstat(link, &st) == 0 &&
		   S_ISLNK(st.st_mode) && stat(file, &st) == 0 && st.st_size == 1,
	   "a dangling link: the file it names is created, the link kept");
	unlink(link);
	unlink(file);

	err.msg[0] = 0;
	ok(gk_atomic_write_file(dir, "x", 1, 0644, &err) < 0 && strstr(err.msg, "Is a directory"),
	   "a directory is refused: %s", err.msg);
}

/*
 * Kill a writer between writes: neither the final file nor the temp
 * remain. (main gives the signals their default actions first; an alarm
 * ends a child that outlives the kill, so the test fails, not hangs.)
 */
static void test_atomic_killed(int sig, const char *name)
{
	char path[256];
	int p[2];
	snprintf(path, sizeof(path), "%s/killed-%s.tar", dir, name);
	if (pipe(p) < 0)
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		gk_atomic *a;
		gk_err err;
		close(p[0]);
		alarm(60);
		if (gk_atomic_open(&a, path, 0644, &err) < 0)
			_exit(3);
		char block[4096] = {0};
		gk_write_full(gk_atomic_fd(a), block, sizeof(block));
		gk_write_full(p[1], "w", 1); /* tell the parent we are midway */
		for (;;)
			pause();
	}
	close(p[1]);
	char c;
	ok(read(p[0], &c, 1) == 1, "child is midway through its write (%s)", name);
	ok(count_entries(dir) == 1, "  temp file exists while writing");
	kill(pid, sig);
	int status;
	waitpid(pid, &status, 0);
	ok(WIFSIGNALED(status) && WTERMSIG(status) == sig, "  child died of %s", name);
	ok(access(path, F_OK) < 0, "  no final file after %s", name);
	is_int(count_entries(dir), 0, "  no temp file left after kill");
	close(p[0]);
}

/*
 * A file truncated while mapped: reading a page past its new end is
 * SIGBUS. In a watched region (gk_map_watch) the guard names the file,
 * removes the atomic output being written and exits 1; unwatched, the
 * fault keeps its default action (the guard hides no bug). watch 2: a
 * file deep in directories (1.5 KB of path), named whole all the same;
 * 3: a library's handler installed over the guard (UCX's, in MPI_Init),
 * then the guard put back with gk_map_guard(NULL).
 */
static void library_handler(int sig)
{
	(void)sig;
	_exit(9);
}

static void test_map_guard(int watch)
{
	char in[2048], out[256], msg[4096] = "", sub[2048];
	int p[2];
	gk_err err;
	snprintf(sub, sizeof(sub), "%s", dir);
	for (int i = 0; watch == 2 && i < 6; i++) {
		size_t l = strlen(sub);
		sub[l] = '/';
		memset(sub + l + 1, 'd' + i, 240);
		sub[l + 241] = 0;
	}
	if (gk_mkdir_p(sub, &err) < 0)
		abort();
	snprintf(in, sizeof(in), "%s/mapped-%d.bin", sub, watch);
	snprintf(out, sizeof(out), "%s/out-%d", dir, watch);
	if (pipe(p) < 0)
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		dup2(p[1], STDERR_FILENO);
		gk_map_guard("core_io");
		if (watch == 3) {
			signal(SIGBUS, library_handler);
			gk_map_guard(NULL);
		}
		gk_atomic *a;
		char block[3 * 4096];
		memset(block, 7, sizeof(block));
		int fd = open(in, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || gk_write_full(fd, block, sizeof(block)) < 0 ||
		    gk_atomic_open(&a, out, 0644, &err) < 0)
			_exit(3);
		volatile const char *m = mmap(NULL, sizeof(block), PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED || m[8192] != 7)
			_exit(4);
		if (watch)
			gk_map_watch((const void *)m, sizeof(block), in);
		if (ftruncate(fd, 100) < 0)
			_exit(5);
		(void)m[8192]; /* past the new end: SIGBUS */
		_exit(6);
	}
	close(p[1]);
	ssize_t n = gk_read_full(p[0], msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = 0;
	close(p[0]);
	int status;
	waitpid(pid, &status, 0);
	if (watch) {
		char want[4096];
		snprintf(want, sizeof(want),
			 "core_io: '%s' changed or failed while it was being read "
			 "(truncated or rewritten in place, or an I/O error)\n", in);
		ok(WIFEXITED(status) && WEXITSTATUS(status) == 1,
		   "a watched file truncated under its map: exit 1 (status %#x)", status);
		is_str(msg, want, "  the message names the file");
		is_int(count_entries(dir), 1, "  the atomic output being written is removed");
	} else {
		ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
		   "an unwatched mapping truncated: still SIGBUS (status %#x)", status);
		is_str(msg, "", "  and nothing said");
	}
	unlink(in);
	unlink(out);
	if (watch == 2) {
		char cmd[2100];
		snprintf(cmd, sizeof(cmd), "rm -r '%s/%.240s'", dir, sub + strlen(dir) + 1);
		if (system(cmd) != 0)
			abort();
	}
	/* the unwatched child died with its temp file: remove it */
	DIR *dp = opendir(dir);
	struct dirent *e;
	while (dp && (e = readdir(dp))) {
		char x[512];
		snprintf(x, sizeof(x), "%s/%s", dir, e->d_name);
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlink(x);
	}
	if (dp)
		closedir(dp);
}

/*
 * More mapped files than 1024 (a run over llm.c's FineWeb-Edu token
 * files maps about a thousand, its shuffle window up to a thousand
 * shards): the last one watched is named like the first.
 */
static void test_map_guard_many(void)
{
	enum { MAPS = 1500 };
	char in[256];
	int p[2], status;
	snprintf(in, sizeof(in), "%s/many.bin", dir);
	if (pipe(p) < 0)
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		dup2(p[1], STDERR_FILENO);
		gk_map_guard("core_io");
		char block[2 * 4096];
		memset(block, 7, sizeof(block));
		int fd = open(in, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || gk_write_full(fd, block, sizeof(block)) < 0)
			_exit(3);
		volatile const char *m = NULL;
		for (int i = 0; i < MAPS; i++) {
			m = mmap(NULL, sizeof(block), PROT_READ, MAP_PRIVATE, fd, 0);
			if (m == MAP_FAILED || m[4096] != 7)
				_exit(4);
			gk_map_watch((const void *)m, sizeof(block), in);
		}
		if (ftruncate(fd, 100) < 0)
			_exit(5);
		(void)m[4096];
		_exit(6);
	}
	close(p[1]);
	char msg[512] = "", want[512];
	ssize_t n = gk_read_full(p[0], msg, sizeof(msg) - 1);
	msg[n > 0 ? n : 0] = 0;
	close(p[0]);
	waitpid(pid, &status, 0);
	snprintf(want, sizeof(want),
		 "core_io: '%s' changed or failed while it was being read "
		 "(truncated or rewritten in place, or an I/O error)\n", in);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 1,
	   "the %dth of %d watched maps truncated: exit 1 (status %#x)", MAPS, MAPS, status);
	is_str(msg, want, "  the message names the file");
	unlink(in);
}

/*
 * A SIGBUS that is not a fault (kill -BUS, sigqueue) has no address to
 * look up and would not come again if the guard returned: it keeps its
 * default action, now, and the guard stays installed.
 */
static void test_map_guard_sent(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		struct sigaction sa;
		gk_map_guard("core_io");
		kill(getpid(), SIGBUS);
		sigaction(SIGBUS, NULL, &sa);
		_exit(sa.sa_handler == SIG_DFL ? 7 : 6);
	}
	int status;
	waitpid(pid, &status, 0);
	ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS,
	   "a SIGBUS sent with kill: still its default action (status %#x)", status);
}

/*
 * A full disk, played by RLIMIT_FSIZE (write fails with EFBIG once the
 * file would pass the limit): the write fails, the caller aborts, and
 * nothing is left behind.
 */
static void test_atomic_disk_full(void)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/full.bin", dir);
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit rl = {8192, 8192};
		gk_atomic *a;
		gk_err err;
		signal(SIGXFSZ, SIG_IGN);
		setrlimit(RLIMIT_FSIZE, &rl);
		if (gk_atomic_open(&a, path, 0644, &err) < 0)
			_exit(3);
		char block[4096] = {0};
		for (int i = 0; i < 4; i++) {
			if (gk_write_full(gk_atomic_fd(a), block, sizeof(block)) < 0) {
				gk_atomic_abort(a);
				_exit(errno == EFBIG ? 0 : 4);
			}
		}
		_exit(5);
	}
	int status;
	waitpid(pid, &status, 0);
	ok(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	   "a write past the file size limit fails with EFBIG");
	ok(access(path, F_OK) < 0, "  no final file");
	is_int(count_entries(dir), 0, "  no temp file");
}

static void test_misc(void)
{
	char path[256], *buf;
	gk_err err;
	size_t len;

	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	ok(gk_mkdir_p(path, &err) == 0, "mkdir -p a/b/c");
	ok(gk_mkdir_p(path, &err) == 0, "mkdir -p again is fine");
	struct stat st;
	ok(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "  is a directory");
	snprintf(path, sizeof(path), "%s/a/file", dir);
	gk_atomic_write_file(path, "0123456789", 10, 0644, &err);
	ok(gk_read_file(path, 100, &buf, &len, &err) == 0 && len == 10 &&
	   buf[10] == '\0', "read_file reads and terminates");
	free(buf);
	ok(gk_read_file(path, 5, &buf, &len, &err) == -1, "read_file enforces max");
	ok(strstr(err.msg, "larger than 5 bytes") != NULL, "  message: %s", err.msg);
	char small[20];
	int fd = open(path, O_RDONLY);
	ok(gk_read_exact(fd, small, 20, "a/file", &err) == -1, "read_exact of a short file fails");
	is_str(err.msg, "read 'a/file': truncated (wanted 20 bytes, got 10)", "  message");
	close(fd);
	char sub[256];
	snprintf(sub, sizeof(sub), "%s/a/file/x", dir);
	ok(gk_mkdir_p(sub, &err) == -1, "mkdir -p through a file fails");
	snprintf(sub, sizeof(sub), "rm -rf %s/a", dir);
	if (system(sub) != 0)
		abort();
}

int main(void)
{
	/* A run started in the background by a shell inherits SIGINT
	 * ignored (nohup: SIGHUP), and gk_cleanup_on_signal leaves an
	 * ignored signal ignored: the kill tests need the default actions
	 * a foreground run has. */
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (!mkdtemp(dir))
		abort();
	test_read_full_eintr();
	test_atomic();
	test_atomic_targets();
	test_atomic_killed(SIGTERM, "SIGTERM");
	test_atomic_killed(SIGINT, "SIGINT");
	test_atomic_killed(SIGHUP, "SIGHUP");
	test_atomic_disk_full();
	test_map_guard(1);
	test_map_guard(0);
	test_map_guard(2);
	test_map_guard(3);
	test_map_guard_many();
	test_map_guard_sent();
	test_misc();
	rmdir(dir);
	return done_testing();
}
