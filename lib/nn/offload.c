/*
 * offload.c - the optimizer state in a file (gpu-train --offload
 * optimizer:DIR): AdamW's two moments of this rank's range live in one
 * file under DIR, and the update streams them through a buffer of a
 * fixed size instead of holding them in memory. The range is what the
 * rank would hold in memory without offload: under data parallelism its
 * ZeRO range (or the whole model), in a pipeline stage or a tensor group
 * its pieces of the stage's (or its tensor slice's) segments over its
 * data-parallel group, in the layout of dp.c's moments (the range's
 * pieces, then wte's).
 *
 * reference: ZeRO-Infinity (Rajbhandari et al., SC 2021), which keeps the
 * optimizer state on NVMe and swaps it in chunks during the step
 * (DeepSpeed's runtime/swap_tensor/partitioned_optimizer_swapper.py).
 *
 * Layout of the file: m (n floats) then v (n floats), n the range's
 * length; element i of the range is at byte 4 i of each (a stage's
 * pieces one after the other, as in memory). The file is the
 * run's scratch, never a record: it is created under a temporary name
 * (lib/core's atomic output, ".NAME.tmp-XXXXXX"), removed by the signal
 * handlers lib/core registers and by gk_nn_offload_close, and never
 * committed, so nothing a killed run leaves behind is ever read. The
 * whole size is allocated up front (posix_fallocate), so that a disk too
 * small or a file-size limit is refused before step 1 and the writes of
 * the update do not meet a full disk (they can still fail: an I/O error,
 * which names the file).
 *
 * The update takes chunk floats of each moment at a time: pread m and v,
 * AdamW on the chunk in memory (gk_nn_adamw_step on the chunk's range,
 * which walks tensors and threads as over the whole range: each element's
 * arithmetic is independent of the others, so the result is the same bit
 * for bit), pwrite both back. The buffer is 2 chunk floats. The I/O
 * overlaps the arithmetic through the page cache rather than a second
 * buffer and a thread: before a chunk is computed the next one's reads
 * are announced (POSIX_FADV_WILLNEED starts them in the background), and
 * the writes return once the data is in the cache, which writes it back
 * behind (the file is scratch: nothing needs it on the disk before the
 * run ends).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "nn/train_internal.h"

struct gk_nn_offload {
	gk_atomic *file;  /* the temporary file, never committed */
	int fd;
	char *path;       /* its name, for messages */
	size_t n;         /* floats of each moment */
	size_t chunk;     /* floats of each moment a chunk */
	float *buf;       /* 2 chunk floats: m then v */
};

size_t gk_nn_offload_chunk(size_t chunk_bytes, size_t n)
{
	size_t c = (chunk_bytes ? chunk_bytes : GK_NN_OFFLOAD_CHUNK) / sizeof(float);
	if (c < 1)
		c = 1;
	return c < n ? c : n ? n : 1;
}

uint64_t gk_nn_offload_buffer_bytes(size_t chunk_bytes, size_t n)
{
	return (uint64_t)2 * gk_nn_offload_chunk(chunk_bytes, n) * sizeof(float);
}

int gk_nn_offload_open(gk_nn_offload **out, const char *dir, int rank, size_t n,
		       size_t chunk_bytes, gk_err *err)
{
	*out = NULL;
	struct stat st;
	if (stat(dir, &st) < 0)
		return gk_err_sys(err, errno, "optimizer offload directory '%s'", dir);
	if (!S_ISDIR(st.st_mode))
		return gk_errf(err, "optimizer offload directory '%s': not a directory", dir);
	if (access(dir, W_OK | X_OK) < 0)
		return gk_err_sys(err, errno, "optimizer offload directory '%s'", dir);
	uint64_t need = (uint64_t)2 * n * sizeof(float);
	struct statvfs vf;
	if (statvfs(dir, &vf) == 0 && (uint64_t)vf.f_bavail * vf.f_frsize < need) {
		char a[32], b[32];
		return gk_errf(err, "optimizer offload directory '%s': %s free, and this rank's "
			       "optimizer state needs %s (free space there, or name another directory)", dir,
			       gk_format_size((uint64_t)vf.f_bavail * vf.f_frsize, 0, a, sizeof(a)),
			       gk_format_size(need, 0, b, sizeof(b)));
	}
	gk_nn_offload *o = calloc(1, sizeof(*o));
	if (!o || asprintf(&o->path, "%s/gpu-train-optim-rank-%05d", dir, rank) < 0) {
		free(o);
		return gk_err_sys(err, ENOMEM, "optimizer offload");
	}
	o->n = n;
	o->chunk = gk_nn_offload_chunk(chunk_bytes, n);
	o->fd = -1;
	if (gk_atomic_open(&o->file, o->path, 0600, err) < 0) {
		free(o->path);
		free(o);
		return -1;
	}
	/* messages name the file that exists: the temporary one */
	free(o->path);
	o->fd = gk_atomic_fd(o->file);
	if (!(o->path = strdup(gk_atomic_tmppath(o->file))) ||
	    !(o->buf = gk_alloc_big(2 * o->chunk * sizeof(float)))) {
		gk_nn_offload_close(o);
		return gk_err_sys(err, ENOMEM, "optimizer offload");
	}
	/* zeros, every block allocated now: a full disk or `ulimit -f` is
	 * met here, before training, rather than in step N's update */
	int e = need ? posix_fallocate(o->fd, 0, (off_t)need) : 0;
	if (e) {
		char b[32];
		gk_err_sys(err, e, "optimizer offload: allocate %s in '%s'",
			   gk_format_size(need, 0, b, sizeof(b)), o->path);
		gk_nn_offload_close(o);
		return -1;
	}
	*out = o;
	return 0;
}

void gk_nn_offload_close(gk_nn_offload *o)
{
	if (!o)
		return;
	if (o->file)
		gk_atomic_abort(o->file); /* closes and removes it */
	free(o->path);
	free(o->buf);
	free(o);
}

const char *gk_nn_offload_path(const gk_nn_offload *o)
{
	return o->path;
}

uint64_t gk_nn_offload_file_bytes(const gk_nn_offload *o)
{
	return (uint64_t)2 * o->n * sizeof(float);
}

static off_t where(const gk_nn_offload *o, int k, size_t a)
{
	return (off_t)(((uint64_t)k * o->n + a) * sizeof(float));
}

int gk_nn_offload_read(gk_nn_offload *o, int k, size_t a, size_t n, float *dst, gk_err *err)
{
	if (a > o->n || n > o->n - a)
		return gk_errf(err, "optimizer offload '%s': [%zu, %zu) past its %zu values",
			       o->path, a, a + n, o->n);
	ssize_t r = gk_pread_full(o->fd, dst, n * sizeof(float), where(o, k, a));
	if (r < 0)
		return gk_err_sys(err, errno, "optimizer offload: read '%s'", o->path);
	if ((size_t)r != n * sizeof(float))
		return gk_errf(err, "optimizer offload: read '%s': truncated (changed by "
			       "something else?)", o->path);
	return 0;
}

int gk_nn_offload_write(gk_nn_offload *o, int k, size_t a, size_t n, const float *src,
			gk_err *err)
{
	if (a > o->n || n > o->n - a)
		return gk_errf(err, "optimizer offload '%s': [%zu, %zu) past its %zu values",
			       o->path, a, a + n, o->n);
	if (gk_pwrite_full(o->fd, src, n * sizeof(float), where(o, k, a)) < 0)
		return gk_err_sys(err, errno, "optimizer offload: write '%s'", o->path);
	return 0;
}

int gk_nn_offload_update(gk_nn_offload *o, gk_nn_model *m, const gk_nn_adamw *c, float lr,
			 int64_t t, float grad_scale, size_t lo, size_t hi, size_t at,
			 const float *g, gk_err *err)
{
	float *mm = o->buf, *vv = o->buf + o->chunk;
	for (size_t a = lo; a < hi; a += o->chunk) {
		size_t n = hi - a < o->chunk ? hi - a : o->chunk;
		/* the next chunk, read ahead while this one computes (advice:
		 * nothing to check) */
		size_t a2 = a + n, n2 = hi - a2 < o->chunk ? hi - a2 : o->chunk;
		for (int k = 0; k < 2 && a2 < hi; k++)
			(void)posix_fadvise(o->fd, where(o, k, at + (a2 - lo)),
					    (off_t)(n2 * sizeof(float)), POSIX_FADV_WILLNEED);
		size_t f = at + (a - lo);
		if (gk_nn_offload_read(o, 0, f, n, mm, err) < 0 ||
		    gk_nn_offload_read(o, 1, f, n, vv, err) < 0 ||
		    gk_nn_update(m, c, lr, t, grad_scale, a, a + n, g ? g + (a - lo) : NULL, mm, vv,
				 err) < 0 ||
		    gk_nn_offload_write(o, 0, f, n, mm, err) < 0 ||
		    gk_nn_offload_write(o, 1, f, n, vv, err) < 0)
			return -1;
	}
	return 0;
}

/*
 * Every chunk is broadcast even after this rank failed to read or write
 * one (the others are in the same collectives); the failure is returned
 * at the end, for the ranks to agree on.
 */
int gk_nn_offload_broadcast(gk_nn_offload *o, gk_comm *comm, int root, gk_err *err)
{
	int me = gk_comm_rank(comm), rc = 0;
	gk_err mine = {0};
	for (int k = 0; k < 2; k++)
		for (size_t a = 0; a < o->n; a += o->chunk) {
			size_t n = o->n - a < o->chunk ? o->n - a : o->chunk;
			if (rc == 0 && me == root && gk_nn_offload_read(o, k, a, n, o->buf, &mine) < 0)
				rc = -1;
			if (gk_comm_broadcast(comm, o->buf, o->buf, n, GK_DT_F32, root, err) < 0)
				return -1;
			if (rc == 0 && me != root && gk_nn_offload_write(o, k, a, n, o->buf, &mine) < 0)
				rc = -1;
		}
	if (rc < 0 && err)
		*err = mine;
	return rc;
}

float *gk_nn_offload_buffer(gk_nn_offload *o, size_t *floats)
{
	*floats = 2 * o->chunk;
	return o->buf;
}
