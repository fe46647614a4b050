/*
 * core.h - the helpers every gpukit module and tool needs (prefix gk_).
 *
 * Errors: a function that can fail returns 0 on success and -1 on failure
 * and, when given a gk_err, leaves a message in it of the form
 * "what 'subject': why" (no tool name, no final period). The library never
 * prints to the user and never exits; the gk_cli_* functions at the end of
 * this header are the one exception, and only a tool's main() calls them.
 */
#ifndef GK_CORE_H
#define GK_CORE_H

#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "core/dtype.h"

#ifndef GK_VERSION
#define GK_VERSION "0.0.0"
#endif

#if defined(__GNUC__)
#define GK_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GK_PRINTF(f, a)
#endif

#ifdef __cplusplus
#define GK_NORETURN [[noreturn]]
#else
#define GK_NORETURN _Noreturn
#endif

#define GK_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors ---------------------------------------------------------------- */

typedef struct gk_err {
	int sys;        /* errno of the failure, 0 when it was not a system error */
	char msg[1024]; /* "what 'subject': why" */
} gk_err;

/* Set the message (err may be NULL). Always returns -1, so `return gk_errf(...)`. */
int gk_errf(gk_err *err, const char *fmt, ...) GK_PRINTF(2, 3);
/* Like gk_errf, appending ": strerror(errnum)" and keeping errnum in err->sys. */
int gk_err_sys(gk_err *err, int errnum, const char *fmt, ...) GK_PRINTF(3, 4);
/* Put "prefix: " in front of the message already in err (for context). */
int gk_err_prefix(gk_err *err, const char *fmt, ...) GK_PRINTF(2, 3);
void gk_err_clear(gk_err *err);

/* ---- memory and strings ------------------------------------------------------ */

/* A growable list of owned strings, NULL-terminated at v[n]. */
typedef struct gk_strlist {
	char **v;
	size_t n, cap;
} gk_strlist;

int gk_strlist_push(gk_strlist *l, const char *s, gk_err *err);
/* Takes ownership of s (a malloc'ed string). */
int gk_strlist_push_owned(gk_strlist *l, char *s, gk_err *err);
void gk_strlist_free(gk_strlist *l);

/* 1 when s ends with suffix (s equal to suffix too; every s ends with ""). */
int gk_str_ends(const char *s, const char *suffix);

/*
 * The n bytes of buf as UTF-8, each ill-formed part replaced by U+FFFD as
 * Unicode's "maximal subpart" practice and Python's errors="replace" do:
 * malloc'ed and NUL-terminated (the text may hold NULs: use *len), or
 * NULL when out of memory.
 */
char *gk_utf8_lossy(const char *buf, size_t n, size_t *len);

/*
 * Growing arrays (git's ALLOC_GROW): make room for at least need elements
 * in the array *pp of *cap elements of size bytes each. The capacity grows
 * by half again (at least to need, at least 16), so pushing n elements
 * costs O(n). On failure (out of memory, or need*size overflowing) *pp and
 * *cap are unchanged and err says ENOMEM naming what.
 *
 *   if (GK_GROW(v, cap, n + 1, "index", err) < 0) return -1;
 *   v[n++] = x;
 */
int gk_grow(void *pp, size_t *cap, size_t need, size_t size, const char *what,
	    gk_err *err);
#define GK_GROW(p, cap, need, what, err) \
	gk_grow(&(p), &(cap), (need), sizeof(*(p)), (what), (err))

/*
 * n zeroed bytes for a large buffer that lives as long as the program
 * (a model's parameters, gradients, activations, optimizer state), or
 * NULL without memory; free() frees it. From 2 MiB up it is aligned to
 * 2 MiB and offered to the kernel for transparent huge pages
 * (MADV_HUGEPAGE; Linux's default THP mode is "madvise", which gives a
 * process none unless it asks): a training step sweeps 100 MB of
 * activations, and 4 KiB pages cost it TLB misses (2-3 % of a CPU step,
 * measured with tools/bench/nn.sh). Where THP is off this is a plain
 * aligned allocation.
 */
void *gk_alloc_big(size_t n);

/* a*b and a+b into *out, returning -1 (no error message) on overflow. */
static inline int gk_mul_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int gk_add_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* ---- numbers and sizes ------------------------------------------------------ */

/*
 * Checked parsing: the whole string must be the number, in [min, max];
 * what names the value in the message ("--jobs", "header length").
 */
int gk_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out,
		 const char *what, gk_err *err);
int gk_parse_u64(const char *s, uint64_t max, uint64_t *out, const char *what,
		 gk_err *err);
int gk_parse_int(const char *s, int min, int max, int *out, const char *what,
		 gk_err *err);
int gk_parse_double(const char *s, double min, double max, double *out,
		    const char *what, gk_err *err);

/*
 * Sizes: "4096", "4K", "256M", "1G", "2T", "1P", "4KiB", "1GiB", "1PiB"
 * are powers of 1024; "5KB", "5MB", "5GB", "5TB", "5PB" are powers of 1000
 * (Hugging Face's "5GB" is 5e9); "B" alone means bytes. Units are
 * case-insensitive throughout: "1b" is one byte and "5gb" is 5e9 bytes
 * (no size in gpukit counts bits). One space may separate number and unit.
 * A decimal fraction is allowed with a unit ("1.5G"); the result is
 * rounded down to a whole byte. Overflow past UINT64_MAX is an error.
 */
int gk_parse_size(const char *s, uint64_t *out, const char *what, gk_err *err);

/*
 * Format n for people: "512 B", "1.50 KiB", "256 MiB", "5.00 GB". si selects
 * powers of 1000 (kB, MB, GB ...) instead of 1024 (KiB, MiB, GiB ...).
 * Three significant digits. Returns buf.
 */
char *gk_format_size(uint64_t n, int si, char *buf, size_t len);

/* ---- files ----------------------------------------------------------------- */

/*
 * Read up to n bytes, retrying on EINTR and short reads. Returns the count
 * read (less than n only at end of file), or -1 with errno set.
 */
ssize_t gk_read_full(int fd, void *buf, size_t n);
ssize_t gk_pread_full(int fd, void *buf, size_t n, off_t off);
/* Write all n bytes, retrying on EINTR and short writes: 0 or -1 with errno. */
int gk_write_full(int fd, const void *buf, size_t n);
int gk_pwrite_full(int fd, const void *buf, size_t n, off_t off);

/* Read exactly n bytes of `name` or fail with "truncated" or the I/O error. */
int gk_read_exact(int fd, void *buf, size_t n, const char *name, gk_err *err);
/*
 * Open an input read-only, refusing anything but a regular file ("read
 * 'PATH': not a regular file"): a FIFO, a device or a socket would block
 * or never end. The open itself does not block (O_NONBLOCK, cleared after
 * the check). Returns the fd or -1; *st (may be NULL) gets its stat.
 */
int gk_open_regular(const char *path, struct stat *st, gk_err *err);
/* The same for name relative to the directory open as dfd (AT_FDCWD: the
 * working directory); messages name path. */
int gk_open_regular_at(int dfd, const char *name, const char *path,
		       struct stat *st, gk_err *err);
/* Read a whole file (at most max bytes) into a NUL-terminated malloc'ed buffer. */
int gk_read_file(const char *path, size_t max, char **out, size_t *len,
		 gk_err *err);
/* fsync the directory holding path (for renames and creations to last). */
int gk_fsync_parent(const char *path, gk_err *err);
/* mkdir -p, mode 0777 & ~umask. */
int gk_mkdir_p(const char *path, gk_err *err);

/*
 * Atomic output. gk_atomic_open creates a temporary file next to path
 * (".NAME.tmp-XXXXXX" in the same directory, so the rename cannot cross
 * file systems). gk_atomic_commit flushes, fsyncs, renames it over path and
 * fsyncs the directory; gk_atomic_abort removes it. Until one of those is
 * called the temp file is removed if the process dies of SIGINT, SIGTERM,
 * SIGHUP or SIGPIPE, so a killed run never leaves anything under the final
 * name and no litter beside it. Both functions free the handle.
 * The file gets mode & ~umask, or, when it replaces a regular file, that
 * file's permission bits.
 * The path "-" means standard output: no temp file, commit only flushes.
 */
typedef struct gk_atomic gk_atomic;

int gk_atomic_open(gk_atomic **out, const char *path, int mode, gk_err *err);
int gk_atomic_fd(const gk_atomic *a);
/* A stdio stream on the fd, created on first call; commit flushes it. */
FILE *gk_atomic_fp(gk_atomic *a, gk_err *err);
const char *gk_atomic_tmppath(const gk_atomic *a);
int gk_atomic_commit(gk_atomic *a, gk_err *err);
void gk_atomic_abort(gk_atomic *a);
/* Write a whole buffer to path atomically. */
int gk_atomic_write_file(const char *path, const void *buf, size_t n, int mode,
			 gk_err *err);

/*
 * Remove path when the process dies of a signal (as the atomic files are);
 * for temp directories and other outputs built in place. Returns a handle
 * for gk_cleanup_forget, or -1 when the table is full.
 */
int gk_cleanup_on_signal(const char *path);
void gk_cleanup_forget(int handle);
/*
 * A temp path created and then registered leaves a window in which a
 * signal kills the process with the path left behind: create and register
 * it between gk_cleanup_hold and gk_cleanup_release, which hold back the
 * signals that remove registered paths (SIGINT, SIGTERM, SIGHUP, SIGPIPE)
 * and then deliver any that came. The pairs nest, per thread.
 * Registered directories are removed after registered files, so the
 * order of registration does not matter.
 */
void gk_cleanup_hold(void);
void gk_cleanup_release(void);
/* Remove them now: for a signal handler of the caller's own that ends
 * the process with _exit (async-signal-safe: unlink and rmdir only). */
void gk_cleanup_now(void);

/*
 * Past the file size limit (`ulimit -f`, RLIMIT_FSIZE) a write fails with
 * EFBIG only while SIGXFSZ is ignored; by default the signal kills the
 * process without a word and leaves its temporary output behind. A tool
 * that writes outputs calls this before it writes, so that the limit is
 * an error like a full disk: the temp file (or staging directory)
 * removed and the error named. A tool's main() only: it changes the
 * disposition for the whole process.
 */
void gk_ignore_sigxfsz(void);

/*
 * Mapped files that may shrink or fail while they are read. A file
 * truncated (or rewritten in place) under a mapping turns the next read of
 * a page past its new end into SIGBUS, as does an I/O error behind a
 * mapped page; either kills the process without a word and leaves its
 * outputs half-made. gk_map_guard (gk_cli_init calls it) installs a
 * SIGBUS handler: a fault inside a region given to gk_map_watch prints
 * "TOOL: 'path' changed or failed while it was being read (truncated or
 * rewritten in place, or an I/O error)", removes what
 * gk_cleanup_on_signal holds and exits 1; a fault anywhere else keeps the
 * default action (a bug: a core, as before), and so does a SIGBUS sent
 * with kill(2).
 * gk_map_guard(NULL) puts the handler back, if the tool installed it,
 * over one a library installed since (UCX's, under Open MPI's MPI_Init).
 * path must live until gk_map_unwatch(p), which comes before the munmap.
 * Up to 65536 regions at once (the mappings a process may hold by
 * default); more are not named.
 */
void gk_map_guard(const char *tool);
void gk_map_watch(const void *p, size_t len, const char *path);
void gk_map_unwatch(const void *p);

/* ---- progress ----------------------------------------------------------------- */

/*
 * A one-line progress meter on stderr, the status line below, redrawn at
 * most 4 times a second, whatever the number of updates (GK_PROGRESS_REDRAW):
 *   "data-pack: 1.20 GiB / 4.00 GiB  30%  512 MiB/s  ETA 0:06"
 * Enabled only when `enabled` (the tool passes !quiet) and stderr is a tty.
 * total 0 means unknown (no percentage or ETA). bytes selects size units,
 * else items ("1200 / 4000 samples").
 */
enum { GK_PROGRESS_TTY = 1, GK_PROGRESS_LINES = 2 };
#define GK_PROGRESS_REDRAW 0.25 /* seconds between redraws on a terminal */
typedef struct gk_progress {
	const char *label, *unit; /* unit for items, e.g. "samples" */
	uint64_t total, done;
	int bytes, on;            /* on: 0, GK_PROGRESS_TTY or GK_PROGRESS_LINES */
	double start, last;
	double every;             /* GK_PROGRESS_LINES: seconds between lines */
	int drawn;                /* lines or redraws so far */
	int own;                  /* started the status line (gk_status_*) */
	FILE *out;                /* NULL: the status line, or stderr; tests set a file */
} gk_progress;

void gk_progress_start(gk_progress *p, const char *label, uint64_t total,
		       int bytes, const char *unit, int enabled);
/*
 * After start: when stderr is not a terminal (a log, a pipe), print the
 * same text as plain lines, one every `every` seconds at most (the first
 * after `every`), and a last one at finish when any was printed: a long
 * job shows in its log, a short one leaves stderr empty. Nothing when
 * start was not enabled.
 */
void gk_progress_lines(gk_progress *p, int enabled, double every);
void gk_progress_update(gk_progress *p, uint64_t done);
/* update at the given time (gk_now()'s clock); for tests. */
void gk_progress_update_at(gk_progress *p, uint64_t done, double now);
void gk_progress_finish(gk_progress *p);
/* The text of the line for the given state (what update draws); for tests. */
char *gk_progress_format(const gk_progress *p, uint64_t done, double elapsed,
			 char *buf, size_t len);
double gk_now(void); /* monotonic seconds */

/* ---- the status line ---------------------------------------------------------- */

/*
 * The terminal's status line: one line on stderr redrawn in place (what a
 * long run is doing, then its progress), for one process. gk_status_start
 * turns it on when enabled (the tool passes !quiet) and stderr is a
 * terminal; every other call does nothing while it is off. Around any other
 * message to the terminal, gk_status_pause takes the line off and holds its
 * lock, and gk_status_resume puts it back: safe from several threads.
 * gk_status_clear removes it for good, gk_status_end leaves the last line
 * with its newline. gk_status_out_tty: stdout is that terminal too, so
 * printing there needs the same care.
 */
void gk_status_start(int enabled);
void gk_status_stop(void);
int gk_status_on(void);
int gk_status_out_tty(void);
void gk_status_draw(const char *s);
void gk_status_clear(void);
void gk_status_pause(void);
void gk_status_resume(void);
void gk_status_end(void);

/* ---- brace expansion ---------------------------------------------------------- */

/*
 * Expand shell/webdataset brace patterns into out (appended):
 * "train-{000000..000031}.tar" (zero padding kept, as bash and Python's
 * braceexpand do), "{0..10..2}", "{9..0}", "{a..e}", "{train,val}-{0..3}"
 * (the cartesian product, left to right), nested "{a,b{1,2}}", "\{" for a
 * literal brace. A brace with no comma or range stays literal ("{}" and
 * "{x}"), as in bash. Unbalanced braces and more than `max` results (0: the
 * default of 10,000,000) are errors.
 */
int gk_brace_expand(const char *pattern, size_t max, gk_strlist *out,
		    gk_err *err);

/*
 * Expand a host list: comma-separated names, each with brace patterns
 * ("node{01..04}") or Slurm's bracket syntax ("node[01-04,07]",
 * "rack[1-2]-n[1-3]"), as in SLURM_JOB_NODELIST. Appends to out; empty
 * names, unbalanced brackets, brackets holding anything but numbers and
 * ascending ranges, names that are not RFC 1123 host names, a name given
 * twice (ignoring case) and more than max names (0: 100,000) are errors.
 */
int gk_hostlist_expand(const char *list, size_t max, gk_strlist *out,
		       gk_err *err);

/* ---- ranks ------------------------------------------------------------------- */

/*
 * Where this process stands, from the launcher's environment: Open MPI
 * (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), then Slurm in an
 * srun step (SLURM_STEP_ID set; SLURM_PROCID, SLURM_STEP_NUM_TASKS or
 * SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE or
 * SLURM_TASKS_PER_NODE with SLURM_NODEID; an sbatch script outside any
 * step is a world of 1), then torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE). With none of them: rank 0 of a world of 1.
 * Inconsistent values (rank >= world, non-numbers) are errors. This is the
 * only reader of the launcher's environment: lib/comm opens MPI when mpi
 * is set and checks that MPI's world is this one.
 */
typedef struct gk_rank_info {
	int rank, world;
	int local_rank, local_world; /* on this node */
	int node;                    /* node index, -1 when unknown */
	const char *launcher;        /* "openmpi", "slurm", "torchrun", "none" */
	int mpi;                     /* 1 when the launcher can start MPI (mpirun, srun) */
	/* openmpi: seconds from the SIGTERM mpirun (or its orted) sends the
	 * ranks when it ends the job to its SIGKILL, odls_base_sigkill_timeout
	 * (OMPI_MCA_odls_base_sigkill_timeout, 1 by default); -1 otherwise */
	int kill_after;
} gk_rank_info;

int gk_rank_discover(gk_rank_info *ri, gk_err *err);

/*
 * The CPUs this process may compute on (cpus.c): the count of its
 * affinity set (every online CPU when that cannot be read), at most its
 * cgroup's CPU quota rounded up (a container's CPU limit: cgroup v2
 * cpu.max, v1 cpu.cfs_quota_us over cpu.cfs_period_us, the smallest on
 * the way from its cgroup to the root), at least 1. *quota (if not NULL)
 * gets the quota in CPUs, 0 when there is none.
 */
int gk_cpus_usable(double *quota);
/* The affinity set itself (every online CPU when it cannot be read). */
void gk_cpu_set(cpu_set_t *set);
/* The quota alone, with every path read under root ("" for this system;
 * tests give a tree holding proc/self/cgroup, proc/self/mountinfo and
 * the cgroup files); 0 when there is none or nothing can be read. */
double gk_cgroup_cpu_quota(const char *root);
/*
 * Each cgroup directory of the process's hierarchy for the v1 controller
 * ctrl ("cpu", "memory") and of the v2 hierarchy, from the process's own
 * cgroup up to the mount (paths under root, as above), to fn(root, dir,
 * v2, ctx) until it returns non-zero, which is returned; 0 when it never
 * did or nothing could be read.
 */
int gk_cgroup_walk(const char *root, const char *ctrl,
		   int (*fn)(const char *root, const char *dir, int v2, void *ctx), void *ctx);

/*
 * What the host lets this process have (memlimit.c), every path read
 * under root ("" for this system; tests give a tree holding
 * proc/self/cgroup, proc/self/mountinfo, proc/self/limits,
 * proc/self/status, proc/meminfo and the cgroup files). 0 in a field:
 * no limit, or it could not be read.
 *
 * cgroup_max: the memory cgroup's limit (v2 memory.max, v1
 *   memory.limit_in_bytes; "max" and v1's page-rounded LONG_MAX are no
 *   limit) whose headroom is the smallest on the way from the process's
 *   cgroup to the root, and cgroup_used that cgroup's usage (memory.current,
 *   v1 memory.usage_in_bytes) less its page cache (memory.stat's file, v1
 *   total_cache), which the kernel reclaims before it kills.
 * cgroup_id: the inode of the process's own memory cgroup directory, to
 *   tell which processes of one kernel share that limit.
 * available: /proc/meminfo's MemAvailable.
 * as_max: RLIMIT_AS's soft limit (/proc/self/limits' "Max address space");
 *   as_used: the address space mapped now (/proc/self/status VmSize).
 */
typedef struct gk_host_mem {
	uint64_t cgroup_max, cgroup_used, cgroup_id;
	uint64_t available;
	uint64_t as_max, as_used;
} gk_host_mem;
void gk_host_mem_read(const char *root, gk_host_mem *m);

/* ---- hashing ----------------------------------------------------------------- */

/* XXH3-64 (seed 0), as `xxhsum -H3` prints it: 16 lowercase hex digits. */
uint64_t gk_xxh3(const void *buf, size_t n);
typedef struct gk_hash gk_hash;
gk_hash *gk_hash_new(void); /* NULL when out of memory */
void gk_hash_update(gk_hash *h, const void *buf, size_t n);
uint64_t gk_hash_digest(const gk_hash *h);
void gk_hash_free(gk_hash *h);
/* Hash bytes [off, off+len) of fd (len UINT64_MAX: to end of file). */
int gk_xxh3_fd(int fd, uint64_t off, uint64_t len, uint64_t *out,
	       const char *name, gk_err *err);
char *gk_xxh3_hex(uint64_t h, char buf[17]);
int gk_xxh3_parse(const char *hex, uint64_t *out, gk_err *err);

/* ---- JSON (jansson) ------------------------------------------------------------ */

struct json_t;
/* Load a JSON document; errors read "'path' line L column C: why". */
struct json_t *gk_json_load_file(const char *path, size_t max, gk_err *err);
struct json_t *gk_json_load_buf(const char *buf, size_t len, const char *name,
				gk_err *err);
/* Dump in insertion order (indent 2 when pretty, compact otherwise) + "\n". */
int gk_json_dump(FILE *fp, const struct json_t *j, int pretty, gk_err *err);
int gk_json_write_file(const char *path, const struct json_t *j, gk_err *err);
/* Typed member access: missing or mistyped members are errors naming key. */
int gk_json_get_int(const struct json_t *obj, const char *key, int64_t *out,
		    gk_err *err);
int gk_json_get_str(const struct json_t *obj, const char *key,
		    const char **out, gk_err *err);
int gk_json_get_num(const struct json_t *obj, const char *key, double *out,
		    gk_err *err);

/* ---- Prometheus metrics ------------------------------------------------------ */

/*
 * Metrics in Prometheus' text format (0.0.4) for node_exporter's textfile
 * collector (--metrics FILE in the long-running tools): written atomically,
 * because the collector reads its directory on every scrape. Names follow
 * Prometheus conventions: gpukit_TOOL_what_UNIT, units in the name
 * (_seconds, _bytes), counters and only counters end in _total; invalid
 * names and labels are errors. labels are NULL-terminated key, value
 * pairs ({"rank", "0", NULL}); values are escaped here. Labels given to
 * gk_metrics_new go on every sample. Setting a (name, labels) pair again
 * replaces its value, so a tool updates its metrics and rewrites the file.
 * gk_metrics_write labels every sample run="NAME", NAME being the file's
 * name less ".prom": the collector merges every file of its directory,
 * and two runs' files (unique names in one directory) then never carry
 * the same series, which it would reject. "run" is reserved for it.
 */
typedef struct gk_metrics gk_metrics;
typedef enum gk_metric_type { GK_METRIC_GAUGE, GK_METRIC_COUNTER } gk_metric_type;

int gk_metrics_new(gk_metrics **out, const char *const *labels, gk_err *err);
int gk_metrics_set(gk_metrics *m, const char *name, gk_metric_type type,
		   const char *help, const char *const *labels, double v,
		   gk_err *err);
/* The exposition text (families in the order first set); -1 on a write error. */
int gk_metrics_format(const gk_metrics *m, FILE *fp);
/*
 * 0 when path may be replaced by a metrics file: it does not exist, is not
 * a regular file (a pipe, /dev/stdout: written through), is empty, or is
 * a metrics file (it starts with "# HELP " or "# TYPE "). Anything else is
 * an error (a directory too: no write to it could succeed), so that a
 * typo naming the training data or a checkpoint's file does not destroy
 * it; gk_metrics_write checks each time, and a
 * tool checks at its start too.
 */
int gk_metrics_check(const char *path, gk_err *err);
int gk_metrics_write(const gk_metrics *m, const char *path, gk_err *err);
void gk_metrics_free(gk_metrics *m);

/* ---- the tools' command line (prints and exits: main() only) ------------------- */

/*
 * Every tool: -h/--help (usage on stdout, exit 0), --version
 * ("TOOL (gpukit) X.Y.Z"), -q, -v, and --json where it prints data. Usage
 * errors: one line, the SYNOPSIS lines of the usage (the "usage:" line and
 * those indented by three spaces or more after it) and "Try 'TOOL --help'
 * for the options." on stderr, exit 2. Runtime errors:
 * "tool: what 'subject': why" on stderr, exit 1. EPIPE on stdout is silent.
 */
enum {
	GK_OPT_VERSION = 0x1000, /* long-only option values start here */
	GK_OPT_JSON,
	GK_OPT_FIRST_TOOL = 0x1100 /* a tool's own long-only options */
};

#define GK_CLI_LONGOPTS                                        \
	{"help", no_argument, NULL, 'h'},                      \
	{"version", no_argument, NULL, GK_OPT_VERSION},        \
	{"quiet", no_argument, NULL, 'q'},                     \
	{"verbose", no_argument, NULL, 'v'}
#define GK_CLI_LONGOPT_JSON {"json", no_argument, NULL, GK_OPT_JSON}

typedef struct gk_cli {
	const char *name;  /* the tool's name */
	const char *usage; /* the SYNOPSIS lines plus option summary */
	int quiet, verbose, json;
	int silent_usage;  /* not the launcher's first rank: usage errors exit 2 unprinted */
	int out_errno;     /* the first failed gk_cli_flush's errno */
} gk_cli;

/*
 * Set the program name, line-buffer stderr, leave SIGPIPE to kill quietly.
 * Under a launcher (gk_rank_discover), only rank 0 prints usage errors.
 */
void gk_cli_init(gk_cli *cli, const char *name, const char *usage);
/* Handle -h -q -v --version --json and '?' from getopt; 1 when handled. */
int gk_cli_common(gk_cli *cli, int opt);
/*
 * A rank other than the first (cli->silent_usage) that leaves the report
 * of an error every rank shares to the first: wait a moment so the
 * launcher does not end the job before that report is printed; returns
 * status. At once for the first rank, and without a launcher.
 */
int gk_cli_defer(const gk_cli *cli, int status);
/* fflush(stdout) during a run (a line per step), keeping the first error's
 * errno for gk_cli_finish's message. */
void gk_cli_flush(gk_cli *cli);
GK_NORETURN void gk_cli_usage_error(const gk_cli *cli, const char *fmt, ...)
	GK_PRINTF(2, 3);
/* "tool: <err->msg>" on stderr; returns 1 (the runtime-failure exit code). */
int gk_cli_fail(const gk_cli *cli, const gk_err *err);
/* Like gk_cli_fail with a formatted message. */
int gk_cli_failf(const gk_cli *cli, const char *fmt, ...) GK_PRINTF(2, 3);
void gk_cli_warn(const gk_cli *cli, const char *fmt, ...) GK_PRINTF(2, 3);
/* Parse an option's number or size or exit 2 naming the option. */
int64_t gk_cli_i64(const gk_cli *cli, const char *opt, const char *s,
		   int64_t min, int64_t max);
uint64_t gk_cli_size(const gk_cli *cli, const char *opt, const char *s);
/*
 * Flush and close stdout; return status unchanged if that worked, 1 (with a
 * message) when it failed, and exit quietly (141) on EPIPE. The last call in
 * main: return gk_cli_finish(&cli, status);
 */
int gk_cli_finish(const gk_cli *cli, int status);

/*
 * An option table: one row per long option, which drives getopt_long's
 * option list, the option summary of --help, the parsing of the argument
 * into a field of one struct, and (its .agree) the settings every rank of a
 * job must share, which the caller collects from the rows. A row's field
 * is at `off` in the struct the caller parses into, `size` bytes (GK_OPTF
 * gives both).
 *
 *   GK_OPTK_FLAG    no argument: the field (int) is set to `set`
 *   GK_OPTK_INT     an integer in [imin, imax] (an int, int32_t, int64_t or uint64_t)
 *   GK_OPTK_UINT    an unsigned integer up to max (a uint64_t)
 *   GK_OPTK_NUM     a number in [min, max] (a double or a float)
 *   GK_OPTK_SIZE    a size with a suffix (gk_parse_size) (a uint64_t or size_t)
 *   GK_OPTK_STR     the argument itself (const char *); not empty when set
 *   GK_OPTK_ENUM    a name that parse() maps to an int >= 0 (-1: unknown;
 *                   `names` lists the accepted ones for the message)
 *   GK_OPTK_CUSTOM  custom() parses and checks the argument into the field
 *
 * A row of kind GK_OPTK_SECTION starts a section of the summary (its help
 * is the section's title); the table ends with a row of kind GK_OPTK_END.
 * A row's def, when set, is its default: parsed into the field by
 * gk_optable_defaults as an argument would be, and shown in the summary.
 * A row without help is left out of the summary (another tool's spelling
 * that the tool refuses with a reason, such as tar's -z).
 *
 * A row with optional set takes its argument only attached (--lz4=9,
 * -L9; the summary shows --lz4[=LEVEL]): without one the field keeps its
 * value, and args (gk_optable_parse) records the row as given.
 * Rows with the same excl > 0 exclude each other (a tool's modes): at
 * most one of them is given, the same row any number of times.
 */
typedef enum gk_optkind {
	GK_OPTK_END, GK_OPTK_SECTION, GK_OPTK_FLAG, GK_OPTK_INT, GK_OPTK_UINT, GK_OPTK_NUM,
	GK_OPTK_SIZE, GK_OPTK_STR, GK_OPTK_ENUM, GK_OPTK_CUSTOM
} gk_optkind;

typedef struct gk_optdef {
	gk_optkind kind;
	const char *name;  /* long name without the dashes */
	char short_name;   /* or 0 */
	const char *arg;   /* the argument's name in the summary: "N", "LR" */
	size_t off, size;  /* the field (GK_OPTF) */
	int64_t imin, imax; /* GK_OPTK_INT */
	double min, max;    /* GK_OPTK_UINT (max), GK_OPTK_NUM */
	int set;           /* GK_OPTK_FLAG's value; GK_OPTK_STR: 1 refuses "" */
	int (*parse)(const char *s);       /* GK_OPTK_ENUM */
	const char *names; /* GK_OPTK_ENUM: "cpu, cuda or auto" */
	int (*custom)(const char *opt, const char *s, void *field, gk_err *err);
	int agree;         /* every rank must be started with the same value */
	int resume;        /* GK_OPT_RESUME_*: what a run that continues
			    * another may do with it */
	const char *def;   /* the default, as an argument, or NULL */
	const char *help;  /* one line; "\n" continues it on the next; NULL: not
			    * in the summary */
	int optional;      /* the argument may be left out (see above) */
	int excl;          /* rows of the same excl > 0 exclude each other */
} gk_optdef;

/* A row's resume column: a run that continues a checkpoint may change the
 * option freely, change it with a note naming the old and the new value,
 * or must keep it. */
enum { GK_OPT_RESUME_FREE, GK_OPT_RESUME_NOTE, GK_OPT_RESUME_SAME };

/* A row's field, for designated initialisers: {..., GK_OPTF(args, o.batch), ...} */
#define GK_OPTF(type, member) .off = offsetof(type, member), .size = sizeof(((type *)0)->member)

/* The option whose getopt value is opt (see gk_optable_longopts), or NULL. */
const gk_optdef *gk_optable_find(const gk_optdef *t, int opt);
/*
 * getopt_long's list for table t: the common options (GK_CLI_LONGOPTS,
 * and --json when json), then the rows, each with val = its short name or
 * GK_OPT_FIRST_TOOL + its index; and the short options string in *shorts
 * ("hqv" and each short name with ':' when it takes an argument, "::"
 * when optionally).
 * malloc'ed both, NULL without memory.
 */
struct option *gk_optable_longopts(const gk_optdef *t, int json, char **shorts);
/* The usage: synopsis, then the summary of the table, then tail;
 * malloc'ed, NULL without memory. */
char *gk_optable_usage(const gk_optdef *t, const char *synopsis, const char *tail);
/*
 * A tool's whole option parsing: every row's default (gk_optable_defaults),
 * then getopt_long over argv with the table's list: the common options
 * through gk_cli_common (--json among them), each row's argument through
 * gk_optable_set into the struct at base. A bad argument is a usage error
 * (exit 2); no memory, or a default that does not parse (a defect of the
 * table), exit 1. An unknown option names the nearest ones
 * (gk_optable_suggest). With GK_OPTABLE_SHORT_NAMES a message names a
 * row by its short name when it has one and the user typed it ("-b
 * '12Q': ..."). args, when not NULL, gets each row's argument as given,
 * by row index ("" for a flag; untouched for a row not given). Returns
 * the index of the first operand.
 */
enum { GK_OPTABLE_SHORT_NAMES = 1 };
int gk_optable_parse(gk_cli *cli, const gk_optdef *t, int flags, void *base, int argc,
		     char **argv, const char **args);
/*
 * What an unknown option was probably meant to be: given as typed
 * ("--batch_size=8"); the names (without dashes, from the table and the
 * common options) go to names, at most max; returns how many, 0 when
 * nothing is near. The first rule that finds a name decides:
 *   1. the same name once '_' is '-' and case is ignored (--grad_accum)
 *   2. the names it abbreviates (an abbreviation of several: --s)
 *   3. a name other tools (PyTorch, Hugging Face, Megatron-LM, nanoGPT,
 *      llm.c) give the option, where the table has it (--learning-rate:
 *      --lr; --n-embd: --hidden; --train-iters: --steps)
 *   4. the longest name that is a whole run of its dash-separated words,
 *      or its start (--batch-size: --batch; --num-layers: --layers;
 *      --lr-rate: --lr; --micro-batch-size: --micro-batch)
 *   5. the nearest names by edit distance (a letter inserted, deleted,
 *      replaced, or two neighbours swapped), within 1 edit for up to 4
 *      letters and 2 beyond, and fewer edits than the name has letters
 * gk_optable_parse says them after an unknown option ("unrecognized option
 * '--batch_size'; did you mean --batch?").
 */
int gk_optable_suggest(const gk_optdef *t, const char *given, const char **names, int max);
/*
 * Rows of the same excl group: when row d is given after a row of its
 * group that args (as gk_optable_parse fills it) records as given, that
 * row; else NULL. gk_optable_parse refuses the pair ("only one of -c, -t,
 * --verify").
 */
const gk_optdef *gk_optable_excluded(const gk_optdef *t, const char *const *args,
				     const gk_optdef *d);
/*
 * The names of group excl's rows in table order, each as the user
 * types it (its short name when it has one: "-c", else "--verify"),
 * separated by ", " and the last by last (" or ", or ", "), into buf
 * (truncated to n); returns buf.
 */
char *gk_optable_group(const gk_optdef *t, int excl, const char *last, char *buf, size_t n);
/* Every row's default into the struct at base (-1 when one does not parse:
 * a defect of the table). */
int gk_optable_defaults(const gk_optdef *t, void *base, gk_err *err);
/* Parse the argument s of option d into the struct at base. */
int gk_optable_set(const gk_optdef *d, void *base, const char *s, gk_err *err);
/*
 * The value of row d's field in the struct at base, as 64 bits that ranks
 * can compare: an integer or flag as it is, a number's bits (as a
 * double), a string's XXH3 (NULL 0; NULL and "" differ).
 */
uint64_t gk_optable_value(const gk_optdef *d, const void *base);

#endif
