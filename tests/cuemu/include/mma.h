/*
 * mma.h - nvcuda::wmma (the warp matrix functions of the CUDA C++
 * Programming Guide, "Warp Matrix Functions") for the CPU emulation of
 * CUDA: found first on the include path of the emulated build only,
 * where the toolkit's mma.h gives a host compiler nothing.
 *
 * What the guide guarantees, and no more:
 *   - a fragment of its matrix's elements (16 x 16; tf32's operands 16 x
 *     8 and 8 x 16), num_elements of them a thread (8; 4), none
 *     repeated, whose mapping to threads and to x[i] is
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
 * What lib/ uses: m16n16k16 with matrix_a and matrix_b of __nv_bfloat16,
 * and m16n16k8 with matrix_a and matrix_b of precision::tf32 (loaded from
 * float, 4 elements a thread: the 16 x 8 and 8 x 16 operands), each with
 * an fp32 accumulator. The products of two bf16 values, or of two tf32
 * values (11-bit significands), are exact in fp32; the sum over k is the
 * CPU's fp32 in order k = 0..K-1, added to the accumulator last (a tensor
 * core's order and internal precision are its own: the tests' tolerances
 * cover either).
 *
 * tf32: a load keeps the floats as they are; __float_to_tf32 rounds one
 * to tf32's 10 fraction bits as PTX's cvt.rna.tf32.f32 does (to nearest,
 * ties away from zero; the low 13 bits of the result zero; inf and NaN
 * as they are), and mma_sync reads only an operand's sign, exponent and
 * top 10 fraction bits as the tensor core does, so an operand that was
 * not converted is truncated (toward zero), not rounded.
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

namespace precision {
struct tf32 {};
} /* namespace precision */

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
	static constexpr bool acc = std::is_same<Use, accumulator>::value;
	static constexpr bool tf32 = std::is_same<T, precision::tf32>::value;
	static_assert(M == 16 && N == 16 && (K == 16 || K == 8),
		      "the CUDA emulation has the m16n16k16 and m16n16k8 fragments only");
	static_assert(acc ? std::is_same<T, float>::value && std::is_void<Layout>::value
			  : (K == 16 ? std::is_same<T, __nv_bfloat16>::value : tf32) &&
				    (std::is_same<Layout, row_major>::value ||
				     std::is_same<Layout, col_major>::value),
		      "the CUDA emulation has bf16 (m16n16k16) and precision::tf32 "
		      "(m16n16k8) matrix_a and matrix_b, row_major or col_major, and an "
		      "fp32 accumulator only");
	/* precision::tf32's elements are floats */
	typedef typename std::conditional<tf32, float, T>::type element_type;
	typedef element_type storage_element_type;
	/* the matrix the fragment holds */
	static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
	static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
	enum { num_elements = rows * cols / 32 };
	element_type x[num_elements];
	/* the kind of this run's layout (cuemu::wmma_layout): the m16n16k8
	 * accumulator is a type of its own, its mapping may differ */
	static constexpr unsigned kind = acc ? (K == 16 ? 4 : 5)
					 : (tf32 ? 8 : 0) +
						   (std::is_same<Use, matrix_b>::value ? 2 : 0) +
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

/* what a tensor core reads of a tf32 operand: sign, exponent and the top
 * 10 fraction bits (the low 13 bits ignored) */
inline float tf32_bits(float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	if ((u & 0x7f800000u) != 0x7f800000u)
		u &= 0xffffe000u;
	memcpy(&v, &u, 4);
	return v;
}

/* An operand of the product as the tensor core reads it. */
template <typename F> inline float operand(const typename F::element_type &v)
{
	return F::tf32 ? tf32_bits(value(v)) : value(v);
}

/* F's layout: element i of lane l is at position tab[l * n + i] of its
 * rows x cols matrix (row-major), a permutation of 0 .. rows * cols - 1:
 * the run's permutation of 256 with the positions past the fragment's
 * size left out */
template <typename F> const uint16_t *layout()
{
	constexpr int n = F::rows * F::cols;
	struct tab {
		uint16_t v[n];
		tab()
		{
			const uint16_t *all = wmma_layout(F::kind);
			int k = 0;
			for (int e = 0; e < 256; e++)
				if (all[e] < n)
					v[k++] = all[e];
		}
	};
	static const tab t;
	return t.v;
}

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
	typedef typename F::element_type E;
	constexpr int ne = F::num_elements;
	check_mem(args, "wmma::load_matrix_sync", sizeof(E));
	const uint16_t *tab = layout<F>();
	const E *m = (const E *)((const mem_arg *)args[0])->mptr;
	for (int l = 0; l < 32; l++) {
		const mem_arg *a = (const mem_arg *)args[l];
		F *f = (F *)a->frag;
		for (int i = 0; i < ne; i++) {
			int pos = tab[l * ne + i];
			f->x[i] = m[at(a, pos / F::cols, pos % F::cols)];
		}
	}
}

template <typename F> void store_all(void *const *args)
{
	typedef typename F::element_type E;
	constexpr int ne = F::num_elements;
	check_mem(args, "wmma::store_matrix_sync", sizeof(E));
	const uint16_t *tab = layout<F>();
	E *m = (E *)((const mem_arg *)args[0])->mptr;
	for (int l = 0; l < 32; l++) {
		const mem_arg *a = (const mem_arg *)args[l];
		const F *f = (const F *)a->frag;
		for (int i = 0; i < ne; i++) {
			int pos = tab[l * ne + i];
			m[at(a, pos / F::cols, pos % F::cols)] = f->x[i];
		}
	}
}

/* a fragment of the warp as its rows x cols matrix (row-major), the
 * operands as the tensor core reads them */
template <typename F> void gather(float *mat, const F *const *lanes)
{
	constexpr int ne = F::num_elements;
	const uint16_t *tab = layout<F>();
	for (int l = 0; l < 32; l++)
		for (int i = 0; i < ne; i++)
			mat[tab[l * ne + i]] = operand<F>(lanes[l]->x[i]);
}

template <typename A, typename B> struct mma_arg {
	void *d;
	const A *a;
	const B *b;
	const void *c;
};

template <typename D, typename A, typename B, typename C> void mma_all(void *const *args)
{
	constexpr int K = A::cols;
	float ma[16 * K], mb[K * 16], mc[256], md[256];
	const A *fa[32];
	const B *fb[32];
	const C *fc[32];
	for (int l = 0; l < 32; l++) {
		const mma_arg<A, B> *x = (const mma_arg<A, B> *)args[l];
		fa[l] = x->a;
		fb[l] = x->b;
		fc[l] = (const C *)x->c;
	}
	gather<A>(ma, fa);
	gather<B>(mb, fb);
	gather<C>(mc, fc);
	for (int r = 0; r < 16; r++)
		for (int c = 0; c < 16; c++) {
			float s = 0.0f;
			for (int k = 0; k < K; k++)
				s += ma[r * K + k] * mb[k * 16 + c];
			md[r * 16 + c] = mc[r * 16 + c] + s;
		}
	/* d may be c: written once every lane's c has been read */
	const uint16_t *tab = layout<D>();
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

template <typename Use, int K, typename T, typename L, typename V>
inline void fill_fragment(fragment<Use, 16, 16, K, T, L> &f, const V &v)
{
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] = v;
}

/* cvt.rna.tf32.f32: to nearest, ties away from zero, in a float's bits */
inline float __float_to_tf32(float in)
{
	uint32_t u;
	memcpy(&u, &in, 4);
	if ((u & 0x7f800000u) != 0x7f800000u)
		u = (u + 0x1000u) & 0xffffe000u;
	memcpy(&in, &u, 4);
	return in;
}

/* matrix_a and matrix_b: the layout is the fragment's */
template <typename Use, int K, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, K, T, L> &f,
			     const typename fragment<Use, 16, 16, K, T, L>::element_type *mptr,
			     unsigned ldm)
{
	typedef fragment<Use, 16, 16, K, T, L> F;
	static_assert(!F::acc, "an accumulator's load names its layout");
	cuemu::wm::mem_arg a = {&f, mptr, ldm, std::is_same<L, col_major>::value};
	cuemu::warp_all("wmma::load_matrix_sync", &a, &cuemu::wm::load_all<F>);
}

template <int K>
inline void load_matrix_sync(fragment<accumulator, 16, 16, K, float> &f, const float *mptr,
			     unsigned ldm, layout_t layout)
{
	typedef fragment<accumulator, 16, 16, K, float> F;
	cuemu::wm::mem_arg a = {&f, mptr, ldm, layout == mem_col_major};
	cuemu::warp_all("wmma::load_matrix_sync", &a, &cuemu::wm::load_all<F>);
}

template <int K>
inline void store_matrix_sync(float *mptr, const fragment<accumulator, 16, 16, K, float> &f,
			      unsigned ldm, layout_t layout)
{
	typedef fragment<accumulator, 16, 16, K, float> F;
	cuemu::wm::mem_arg a = {(void *)&f, mptr, ldm, layout == mem_col_major};
	cuemu::warp_all("wmma::store_matrix_sync", &a, &cuemu::wm::store_all<F>);
}

template <int K, typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, K, float> &d,
		     const fragment<matrix_a, 16, 16, K, T, LA> &a,
		     const fragment<matrix_b, 16, 16, K, T, LB> &b,
		     const fragment<accumulator, 16, 16, K, float> &c)
{
	typedef fragment<accumulator, 16, 16, K, float> D;
	typedef fragment<matrix_a, 16, 16, K, T, LA> A;
	typedef fragment<matrix_b, 16, 16, K, T, LB> B;
	cuemu::wm::mma_arg<A, B> x = {&d, &a, &b, &c};
	cuemu::warp_all("wmma::mma_sync", &x, &cuemu::wm::mma_all<D, A, B, D>);
}

} /* namespace wmma */
} /* namespace nvcuda */

#endif
