/*
 * mma.h - nvcuda::wmma (the warp matrix functions of the CUDA C++
 * Programming Guide, "Warp Matrix Functions") for the CPU emulation of
 * CUDA: found first on the include path of the emulated build only,
 * where the toolkit's mma.h gives a host compiler nothing.
 *
 * What the guide guarantees, and no more:
 *   - a fragment of 16 x 16 elements, num_elements of them a thread (8,
 *     none repeated), whose mapping to threads and to x[i] is
 *     unspecified: here a permutation drawn per run from CUEMU_SEED, one
 *     for each kind of fragment (matrix_a or matrix_b in each layout, the
 *     accumulator), the same for every fragment of a kind. Code that
 *     assumes a mapping (an element's row from the lane number) gets
 *     other results from run to run; code that only combines the same
 *     x[i] of fragments of one type, or learns a position by loading
 *     a matrix of positions, does not;
 *   - load_matrix_sync, store_matrix_sync and mma_sync are collectives
 *     of the warp: all 32 lanes must call them together with the same
 *     arguments (pointer, ldm, layout), else the run stops naming the
 *     kernel, as for a divergent shuffle; fill_fragment is not (each
 *     thread fills its own elements);
 *   - mptr 256-bit (32-byte) aligned, ldm a multiple of 16 bytes (8
 *     elements of 16 bits, 4 floats); checked, a violation stops the run.
 * m16n16k16 only, matrix_a and matrix_b of __nv_bfloat16 and an fp32
 * accumulator: what lib/ uses. The products of two bf16 values are
 * exact in fp32; the sum over k is the CPU's fp32 in order k = 0..15,
 * added to the accumulator last (a tensor core's order and internal
 * precision are its own: the tests' tolerances cover either).
 */
#ifndef CUEMU_MMA_H
#define CUEMU_MMA_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
	static_assert(M == 16 && N == 16 && K == 16,
		      "the CUDA emulation has the m16n16k16 fragments only");
	static_assert(std::is_same<Use, accumulator>::value
			      ? std::is_same<T, float>::value && std::is_void<Layout>::value
			      : std::is_same<T, __nv_bfloat16>::value &&
					(std::is_same<Layout, row_major>::value ||
					 std::is_same<Layout, col_major>::value),
		      "the CUDA emulation has bf16 matrix_a and matrix_b (row_major or "
		      "col_major) and an fp32 accumulator only");
	typedef T element_type;
	typedef T storage_element_type;
	enum { num_elements = 8 };
	T x[num_elements];
	/* the kind of this run's layout (cuemu::wmma_layout) */
	static constexpr unsigned kind = std::is_same<Use, accumulator>::value ? 4
					 : (std::is_same<Use, matrix_b>::value ? 2 : 0) +
						   (std::is_same<Layout, col_major>::value ? 1 : 0);
};

} /* namespace wmma */
} /* namespace nvcuda */

namespace cuemu {
namespace wm {

inline float bf(const __nv_bfloat16 &v)
{
	uint16_t h;
	memcpy(&h, &v, 2);
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}
inline float value(const __nv_bfloat16 &v) { return bf(v); }
inline float value(const float &v) { return v; }

/* one lane's part of a load or a store */
struct mem_arg {
	void *frag;
	const void *mptr;
	unsigned ldm;
	int col; /* column major in memory */
};

/* The arguments every lane of the warp must agree on, and the rules on
 * them: mptr 32-byte aligned, ldm a multiple of 16 bytes. */
inline void check_mem(void *const *args, const char *what, size_t esize)
{
	const mem_arg *a0 = (const mem_arg *)args[0];
	for (int l = 1; l < 32; l++) {
		const mem_arg *a = (const mem_arg *)args[l];
		if (a->mptr != a0->mptr || a->ldm != a0->ldm || a->col != a0->col)
			kernel_fail("%s: lane %d passes mptr %p, ldm %u, %s major while lane 0 "
				    "passes %p, %u, %s major (all lanes of the warp must pass the "
				    "same)", what, l, a->mptr, a->ldm, a->col ? "column" : "row",
				    a0->mptr, a0->ldm, a0->col ? "column" : "row");
	}
	if ((uintptr_t)a0->mptr % 32)
		kernel_fail("%s: mptr %p is not 256-bit (32-byte) aligned", what, a0->mptr);
	if (a0->ldm * esize % 16)
		kernel_fail("%s: ldm %u (%zu-byte elements) is not a multiple of 16 bytes", what,
			    a0->ldm, esize);
}

/* element (r, c) of a matrix in memory */
inline size_t at(const mem_arg *a, int r, int c)
{
	return a->col ? (size_t)c * a->ldm + r : (size_t)r * a->ldm + c;
}

template <typename F> void load_all(void *const *args)
{
	typedef typename std::remove_reference<decltype(((F *)0)->x[0])>::type E;
	check_mem(args, "wmma::load_matrix_sync", sizeof(E));
	const uint16_t *tab = wmma_layout(F::kind);
	const E *m = (const E *)((const mem_arg *)args[0])->mptr;
	for (int l = 0; l < 32; l++) {
		const mem_arg *a = (const mem_arg *)args[l];
		F *f = (F *)a->frag;
		for (int i = 0; i < 8; i++) {
			int pos = tab[l * 8 + i];
			f->x[i] = m[at(a, pos / 16, pos % 16)];
		}
	}
}

template <typename F> void store_all(void *const *args)
{
	typedef typename std::remove_reference<decltype(((F *)0)->x[0])>::type E;
	check_mem(args, "wmma::store_matrix_sync", sizeof(E));
	const uint16_t *tab = wmma_layout(F::kind);
	E *m = (E *)((const mem_arg *)args[0])->mptr;
	for (int l = 0; l < 32; l++) {
		const mem_arg *a = (const mem_arg *)args[l];
		const F *f = (const F *)a->frag;
		for (int i = 0; i < 8; i++) {
			int pos = tab[l * 8 + i];
			m[at(a, pos / 16, pos % 16)] = f->x[i];
		}
	}
}

/* a fragment of the warp as its 16 x 16 matrix */
template <typename F> void gather(float *mat, F *const *lanes)
{
	const uint16_t *tab = wmma_layout(F::kind);
	for (int l = 0; l < 32; l++)
		for (int i = 0; i < 8; i++)
			mat[tab[l * 8 + i]] = value(lanes[l]->x[i]);
}

template <typename A, typename B> struct mma_arg {
	void *d;
	const A *a;
	const B *b;
	const void *c;
};

template <typename D, typename A, typename B, typename C> void mma_all(void *const *args)
{
	float ma[256], mb[256], mc[256], md[256];
	const A *fa[32];
	const B *fb[32];
	const C *fc[32];
	for (int l = 0; l < 32; l++) {
		const mma_arg<A, B> *x = (const mma_arg<A, B> *)args[l];
		fa[l] = x->a;
		fb[l] = x->b;
		fc[l] = (const C *)x->c;
	}
	gather<const A>(ma, fa);
	gather<const B>(mb, fb);
	gather<const C>(mc, fc);
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++) {
			float s = 0.0f;
			for (int k = 0; k < 16; k++)
				s += ma[r * 16 + k] * mb[k * 16 + c];
			md[r * 16 + c] = mc[r * 16 + c] + s;
		}
	/* d may be c: written once every lane's c has been read */
	const uint16_t *tab = wmma_layout(D::kind);
	for (int l = 0; l < 32; l++) {
		D *d = (D *)((const mma_arg<A, B> *)args[l])->d;
		for (int i = 0; i < 8; i++)
			d->x[i] = md[tab[l * 8 + i]];
	}
}

} /* namespace wm */
} /* namespace cuemu */

namespace nvcuda {
namespace wmma {

template <typename Use, typename T, typename L>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, const T &v)
{
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] = v;
}

/* matrix_a and matrix_b: the layout is the fragment's */
template <typename Use, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, L> &f,
			     const __nv_bfloat16 *mptr, unsigned ldm)
{
	typedef fragment<Use, 16, 16, 16, __nv_bfloat16, L> F;
	cuemu::wm::mem_arg a = {&f, mptr, ldm, std::is_same<L, col_major>::value};
	cuemu::warp_all("wmma::load_matrix_sync", &a, &cuemu::wm::load_all<F>);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *mptr,
			     unsigned ldm, layout_t layout)
{
	typedef fragment<accumulator, 16, 16, 16, float> F;
	cuemu::wm::mem_arg a = {&f, mptr, ldm, layout == mem_col_major};
	cuemu::warp_all("wmma::load_matrix_sync", &a, &cuemu::wm::load_all<F>);
}

inline void store_matrix_sync(float *mptr, const fragment<accumulator, 16, 16, 16, float> &f,
			      unsigned ldm, layout_t layout)
{
	typedef fragment<accumulator, 16, 16, 16, float> F;
	cuemu::wm::mem_arg a = {(void *)&f, mptr, ldm, layout == mem_col_major};
	cuemu::warp_all("wmma::store_matrix_sync", &a, &cuemu::wm::store_all<F>);
}

template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
		     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
		     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
		     const fragment<accumulator, 16, 16, 16, float> &c)
{
	typedef fragment<accumulator, 16, 16, 16, float> D;
	typedef fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> A;
	typedef fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> B;
	cuemu::wm::mma_arg<A, B> x = {&d, &a, &b, &c};
	cuemu::warp_all("wmma::mma_sync", &x, &cuemu::wm::mma_all<D, A, B, D>);
}

} /* namespace wmma */
} /* namespace nvcuda */

#endif
