/*
 * flash.cuh - what the fused attention's two files share (not installed;
 * CUDA C++ only): flash.cu, the entry points and the CUDA cores' fp32
 * kernels, and flash_tc.cu, the tensor cores' kernels (bf16, tf32). The
 * layout of q, k, v and the output, the grid and its order of row
 * tiles, the compiled head widths.
 */
#ifndef GK_NN_FLASH_CUH
#define GK_NN_FLASH_CUH

#include "nn/kernels.cuh"

/* nvcc unrolls the loops over a warp's rows and a lane's head
 * dimensions, so their arrays stay in registers */
#ifdef __CUDACC__
#define FL_UNROLL _Pragma("unroll")
#else
#define FL_UNROLL
#endif

/* Row t of head h in the (B,T,ld) layout at column off. */
__device__ static inline size_t fl_at(int b, int t, int T_, int ld, int off,
				      int h, int hs)
{
	return ((size_t)b * T_ + t) * ld + off + (size_t)h * hs;
}

/* blockIdx: x the (b, h) pair, y the tile of rows, last tiles first (they
 * have the most keys: the longest blocks start first) */
#define FL_TILE() ((int)(gridDim.y - 1 - blockIdx.y))

/* The grid of a kernel of br rows a block: (b, h) pairs by row tiles. */
static inline dim3 fl_grid(int B, int T_, int NH, int br)
{
	return dim3((unsigned)(B * NH), (unsigned)((T_ + br - 1) / br));
}

/* Run the statements with HSP the compiled width for hs: lo, 32, 64 or
 * 128, the smallest that holds hs (up to 128, GK_NN_FLASH_MAX_HS). The
 * scalar kernels' widths are 32 to 128, the tensor cores' 16 to 128 (hs
 * a multiple of 16 up to the width, the columns past it zeros); with lo
 * 32 the second branch is never taken. */
#define WITH_HSP(lo, hs, ...)                                                \
	do {                                                                 \
		if ((hs) <= (lo)) {                                          \
			enum { HSP = (lo) };                                 \
			__VA_ARGS__;                                         \
		} else if ((hs) <= 32) {                                     \
			enum { HSP = 32 };                                   \
			__VA_ARGS__;                                         \
		} else if ((hs) <= 64) {                                     \
			enum { HSP = 64 };                                   \
			__VA_ARGS__;                                         \
		} else {                                                     \
			enum { HSP = 128 };                                  \
			__VA_ARGS__;                                         \
		}                                                            \
	} while (0)

/*
 * flash_tc.cu: the tensor cores' kernels on activations of prec's type
 * (bf16 bits, or fp32 for tf32), where gk_nn_flash_tc(prec, hs) and the
 * tensors are 16-byte aligned (gk_nn_cu_flash_fwd and _bwd check); the
 * arguments are theirs, checked by them, scale 1 / sqrt(hs).
 */
int gk_nn_cu_flash_tc_fwd(void *out, float *lse, const void *qkv, int prec, int B, int T_,
			  int NH, int hs, float scale, gk_cuda_stream s, gk_err *err);
int gk_nn_cu_flash_tc_bwd(void *dqkv, float *dsum, const void *dout, const void *qkv,
			  const void *out, const float *lse, int prec, int B, int T_, int NH,
			  int hs, float scale, gk_cuda_stream s, gk_err *err);

#endif
