/*
 * math.h - the per-element and per-row arithmetic of the GPT-2 step,
 * shared by the CPU backend (ops_cpu.c) and CUDA kernels (GK_HD is
 * __host__ __device__ under nvcc). Keeping one definition means a kernel
 * and the CPU reference it is tested against round the same way per
 * element (the host builds with -ffp-contract=off and nvcc with
 * --fmad=false, so neither fuses what the source does not). What still
 * differs: the order of the sums across a row or a column (warps on the
 * device, lanes and threads on the CPU), logf, and the matmuls; so the
 * device tests compare within tolerances they state per kernel.
 *
 * references: transformers' activations.py NewGELUActivation (gelu_new),
 * torch.nn.LayerNorm (biased variance), torch.optim.AdamW
 * (_single_tensor_adamw), llm.c train_gpt2.c for the backward formulas.
 */
#ifndef GK_NN_MATH_H
#define GK_NN_MATH_H

#include <math.h>

#include "core/half.h"

/* sqrt(2/pi), the constant of gelu_new's tanh approximation */
#define GK_NN_GELU_K 0.7978845608028654f
#define GK_NN_GELU_C 0.044715f

/*
 * tanh as a rational function of odd degree 13 over even degree 6 on
 * [-7.905, 7.905] and exactly +-1 beyond (1 - tanh < 2.7e-7 there), with the
 * coefficients of Eigen's generic_fast_tanh_float. Pure arithmetic, so a
 * loop of it vectorises where libm's tanhf is a call per element (it was
 * a fifth of the CPU step). Relative error below 2.8e-7 (3 ulp) against
 * double tanh over [-12, 12] in steps of 1e-5; libm's tanhf: 1.6e-7.
 * In gelu_new, where 1 + tanh cancels, that is up to 8.3e-7 absolute
 * (libm's: 4.3e-7); tests/unit/nn_misc.c holds both to 1e-6.
 */
GK_HD float gk_nn_tanh(float x)
{
	const float lim = 7.90531110763549805f;
	float c = x > lim ? lim : x;
	c = c < -lim ? -lim : c;
	float x2 = c * c;
	/* Horner steps as explicit fmaf: one rounding each, the same on the
	 * host (FMA instructions in the AVX2 and AVX-512 clones) and the
	 * device, where nvcc would fuse a * b + c anyway */
	float p = -2.76076847742355e-16f;
	p = fmaf(p, x2, 2.00018790482477e-13f);
	p = fmaf(p, x2, -8.60467152213735e-11f);
	p = fmaf(p, x2, 5.12229709037114e-08f);
	p = fmaf(p, x2, 1.48572235717979e-05f);
	p = fmaf(p, x2, 6.37261928875436e-04f);
	p = fmaf(p, x2, 4.89352455891786e-03f);
	p = p * c;
	float q = 1.19825839466702e-06f;
	q = fmaf(q, x2, 1.18534705686654e-04f);
	q = fmaf(q, x2, 2.26843463243900e-03f);
	q = fmaf(q, x2, 4.89352518554385e-03f);
	/* no branch for tiny x (p/q is x within 2e-8 there), so the loops
	 * calling this stay branch-free and vectorise; beyond the clamp the
	 * result is exactly +-1 (p/q is an ulp off it there), so gelu_new's
	 * 0.5 x (1 + tanh(u)) is 0 for large negative x, not x times an ulp */
	float t = p / q;
	t = x >= lim ? 1.0f : t;
	return x <= -lim ? -1.0f : t;
}

/* gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
GK_HD float gk_nn_gelu(float x)
{
	float u = GK_NN_GELU_K * (x + GK_NN_GELU_C * x * x * x);
	return 0.5f * x * (1.0f + gk_nn_tanh(u));
}

/* d gelu_new / dx at x, given th = tanh(u(x)) (llm.c gelu_backward) */
GK_HD float gk_nn_gelu_grad_th(float x, float th)
{
	float sech2 = 1.0f - th * th;
	return 0.5f * (1.0f + th) +
	       0.5f * x * sech2 * GK_NN_GELU_K *
		       (1.0f + 3.0f * GK_NN_GELU_C * x * x);
}

/* d gelu_new / dx at x */
GK_HD float gk_nn_gelu_grad(float x)
{
	float u = GK_NN_GELU_K * (x + GK_NN_GELU_C * x * x * x);
	return gk_nn_gelu_grad_th(x, gk_nn_tanh(u));
}

/* gelu_new(x), and its derivative in *grad from the same tanh: the bits
 * of gk_nn_gelu and gk_nn_gelu_grad */
GK_HD float gk_nn_gelu_and_grad(float x, float *grad)
{
	float u = GK_NN_GELU_K * (x + GK_NN_GELU_C * x * x * x);
	float th = gk_nn_tanh(u);
	*grad = gk_nn_gelu_grad_th(x, th);
	return 0.5f * x * (1.0f + th);
}

/*
 * Row reductions in GK_NN_LANES interleaved partial sums (element i into
 * lane i % GK_NN_LANES), added in a fixed order at the end: vectorisable
 * at any SIMD width, and the same bits at every one.
 */
#define GK_NN_LANES 16

GK_HD float gk_nn_lanes_sum(const float *acc)
{
	float s = 0.0f;
	for (int l = 0; l < GK_NN_LANES; l++)
		s += acc[l];
	return s;
}

/*
 * The same lanes combined pairwise (lane l with l + 8, then + 4, + 2,
 * + 1): four dependent steps at the end of a row rather than fifteen,
 * for short rows where that chain is a large part of the row's time
 * (attention's). The sum rounds differently from gk_nn_lanes_sum; the
 * maximum is the same value (a NaN lane may be lost, as in a scan).
 */
typedef char gk_nn_pairwise_needs_16_lanes[GK_NN_LANES == 16 ? 1 : -1];
#define GK_NN_PAIRWISE(acc, OP)                                               \
	float a8_[8], a4_[4], a2_[2];                                         \
	for (int l = 0; l < 8; l++)                                           \
		a8_[l] = OP(acc[l], acc[l + 8]);                              \
	for (int l = 0; l < 4; l++)                                           \
		a4_[l] = OP(a8_[l], a8_[l + 4]);                              \
	for (int l = 0; l < 2; l++)                                           \
		a2_[l] = OP(a4_[l], a4_[l + 2]);                              \
	return OP(a2_[0], a2_[1])
#define GK_NN_ADD_(x, y) ((x) + (y))
#define GK_NN_MAX_(x, y) ((y) > (x) ? (y) : (x))

GK_HD float gk_nn_lanes_sum_pairwise(const float *acc)
{
	GK_NN_PAIRWISE(acc, GK_NN_ADD_);
}

GK_HD float gk_nn_lanes_max(const float *acc)
{
	GK_NN_PAIRWISE(acc, GK_NN_MAX_);
}

/*
 * Mean and reciprocal standard deviation of a row of n values, biased
 * variance as torch.nn.LayerNorm: rstd = 1/sqrt(var + eps). Two passes
 * (mean, then squared deviations) rather than E[x^2]-E[x]^2, which loses
 * everything when |mean| >> std.
 */
GK_HD void gk_nn_ln_stats(const float *x, int n, float eps, float *mean,
			  float *rstd)
{
	float acc[GK_NN_LANES] = {0}, acc2[GK_NN_LANES] = {0};
	int i = 0;
	for (; i + GK_NN_LANES <= n; i += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++)
			acc[l] += x[i + l];
	for (; i < n; i++)
		acc[i % GK_NN_LANES] += x[i];
	float m = gk_nn_lanes_sum(acc) / (float)n;
	for (i = 0; i + GK_NN_LANES <= n; i += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++) {
			float d = x[i + l] - m;
			acc2[l] += d * d;
		}
	for (; i < n; i++) {
		float d = x[i] - m;
		acc2[i % GK_NN_LANES] += d * d;
	}
	float v = gk_nn_lanes_sum(acc2) / (float)n;
	*mean = m;
	*rstd = 1.0f / sqrtf(v + eps);
}

/* One normalised, scaled and shifted LayerNorm output. */
GK_HD float gk_nn_ln_apply(float x, float mean, float rstd, float w, float b)
{
	return (x - mean) * rstd * w + b;
}

/*
 * d LayerNorm / d input of one element, given dn = w * dout, the
 * normalised input nrm = (x - mean) * rstd, and the row means of dn (s1)
 * and of dn * nrm (s2) (llm.c layernorm_backward).
 */
GK_HD float gk_nn_ln_dinp(float dn, float nrm, float s1, float s2, float rstd)
{
	return (dn - s1 - nrm * s2) * rstd;
}

/*
 * exp(x) in float as arithmetic, so loops of it vectorise (libm's expf is
 * a call per element). Cephes' expf: x = n ln2 + r with |r| <= ln2/2 (ln2
 * in two parts, Cody-Waite), a degree-7 polynomial for exp(r), then 2^n
 * in two factors so n = 128 still reaches inf. Relative error below
 * 8.3e-8 (1 ulp) against double exp over [-87.3, 88.7] in steps of 1e-4;
 * results below FLT_MIN (x < -87.34) are 0, not subnormal; +inf above
 * 88.72; NaN stays NaN.
 * reference: Moshier, Cephes Math Library, single/expf.c.
 */
GK_HD float gk_nn_expf(float x)
{
	const float lo = -87.3365479f, hi = 88.7228394f;
	float c = x > lo ? x : lo; /* NaN becomes lo here; put back below */
	c = c < hi ? c : hi;
	/* n = round(c / ln2): adding 1.5 * 2^23 rounds to an integer */
	float n = fmaf(c, 1.44269504088896341f, 12582912.0f) - 12582912.0f;
	float r = fmaf(n, -0.693359375f, c);
	r = fmaf(n, 2.12194440e-4f, r);
	float p = 1.9875691500e-4f;
	p = fmaf(p, r, 1.3981999507e-3f);
	p = fmaf(p, r, 8.3334519073e-3f);
	p = fmaf(p, r, 4.1665795894e-2f);
	p = fmaf(p, r, 1.6666665459e-1f);
	p = fmaf(p, r, 5.0000001201e-1f);
	float y = fmaf(p, r * r, r) + 1.0f;
	int32_t e = (int32_t)n, e1 = e / 2;
	y *= gk_bits_f32((uint32_t)(e1 + 127) << 23);
	y *= gk_bits_f32((uint32_t)(e - e1 + 127) << 23);
	y = x < lo ? 0.0f : y;
	y = x > hi ? INFINITY : y;
	return x == x ? y : x;
}

GK_HD float gk_nn_row_max(const float *x, int n)
{
	float acc[GK_NN_LANES];
	for (int l = 0; l < GK_NN_LANES; l++)
		acc[l] = -INFINITY;
	int i = 0;
	for (; i + GK_NN_LANES <= n; i += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++)
			acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
	for (; i < n; i++)
		acc[i % GK_NN_LANES] = x[i] > acc[i % GK_NN_LANES] ?
					       x[i] : acc[i % GK_NN_LANES];
	return gk_nn_lanes_max(acc);
}

/*
 * Softmax in place over x[0..n), subtracting the maximum first so exp
 * never overflows. Returns the log of the sum of exponentials, max
 * included (logsumexp), which the cross-entropy needs.
 */
GK_HD float gk_nn_softmax_row(float *x, int n)
{
	float mx = gk_nn_row_max(x, n);
	float acc[GK_NN_LANES] = {0};
	int i = 0;
	for (; i + GK_NN_LANES <= n; i += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++) {
			x[i + l] = gk_nn_expf(x[i + l] - mx);
			acc[l] += x[i + l];
		}
	for (; i < n; i++) {
		x[i] = gk_nn_expf(x[i] - mx);
		acc[i % GK_NN_LANES] += x[i];
	}
	float s = gk_nn_lanes_sum(acc);
	float inv = 1.0f / s;
	for (i = 0; i < n; i++)
		x[i] *= inv;
	return mx + logf(s);
}

/*
 * Softmax backward of one element of a row, folded with the attention
 * scale: d pre-softmax = a (da - sum_j a_j da_j) * scale, where a is the
 * softmax output, da its gradient and s the row's sum of a_j da_j.
 */
GK_HD float gk_nn_softmax_dpre(float a, float da, float s, float scale)
{
	return a * (da - s) * scale;
}

/*
 * The online softmax of the fused attention (attention.cu's flash
 * kernels; FlashAttention-2, Dao 2023, Algorithm 1): a row's scores
 * arrive a tile at a time; m is the largest so far, l the sum of
 * exp(score - m) so far, o the sum of exp(score - m) v so far. A tile
 * whose largest score lifts m to m2 multiplies l and o by
 * gk_nn_attn_rescale(m, m2) before adding its own terms, exp(s - m2)
 * each (gk_nn_attn_p, 0 for a key the causal mask hides). At the end
 * the row's output is o / l and its logsumexp m + log l, which is all
 * the backward keeps: there p = exp(s - lse) is the softmax itself.
 */
GK_HD float gk_nn_attn_rescale(float m, float m2)
{
	return m == -INFINITY ? 0.0f : gk_nn_expf(m - m2);
}
GK_HD float gk_nn_attn_p(float s, float m, int visible)
{
	return visible ? gk_nn_expf(s - m) : 0.0f;
}
GK_HD float gk_nn_attn_lse(float m, float l)
{
	return m + logf(l);
}

/*
 * logsumexp of a row of logits, leaving them unchanged: the forward half
 * of the fused classifier. The loss of target y is lse - x[y].
 */
GK_HD float gk_nn_logsumexp(const float *x, int n)
{
	float mx = gk_nn_row_max(x, n);
	float acc[GK_NN_LANES] = {0};
	int i = 0;
	for (; i + GK_NN_LANES <= n; i += GK_NN_LANES)
		for (int l = 0; l < GK_NN_LANES; l++)
			acc[l] += gk_nn_expf(x[i + l] - mx);
	for (; i < n; i++)
		acc[i % GK_NN_LANES] += gk_nn_expf(x[i] - mx);
	return mx + logf(gk_nn_lanes_sum(acc));
}

/*
 * Online softmax, the forward half in one pass over a row: the state is
 * (m, s), the largest value seen and the sum of exp(x - m) over the
 * values seen. A chunk of values takes one exp each and one rescale of
 * the sum (gk_nn_msum_chunk), and the states of parts of a row merge
 * (gk_nn_msum_merge): the CUDA classifier's threads each take a strided
 * part of a row in 16-byte chunks and merge in a fixed tree, so the
 * result is the same bits every run. logsumexp = m + log(s).
 */
typedef struct gk_nn_msum {
	float m, s;
} gk_nn_msum;

GK_HD gk_nn_msum gk_nn_msum_empty(void)
{
	gk_nn_msum r = {-INFINITY, 0.0f};
	return r;
}

GK_HD gk_nn_msum gk_nn_msum_chunk(gk_nn_msum a, const float *x, int n)
{
	float m = a.m;
	for (int i = 0; i < n; i++)
		m = x[i] > m ? x[i] : m;
	/* an empty state has no sum to rescale (exp(-inf - -inf) is NaN) */
	float s = a.m == -INFINITY ? 0.0f : a.s * gk_nn_expf(a.m - m);
	for (int i = 0; i < n; i++)
		s += gk_nn_expf(x[i] - m);
	gk_nn_msum r = {m, s};
	return r;
}

GK_HD gk_nn_msum gk_nn_msum_merge(gk_nn_msum a, gk_nn_msum b)
{
	if (b.m > a.m) {
		gk_nn_msum t = a;
		a = b;
		b = t;
	}
	if (b.m != -INFINITY)
		a.s += b.s * gk_nn_expf(b.m - a.m);
	return a;
}

GK_HD float gk_nn_msum_lse(gk_nn_msum a)
{
	return a.m + logf(a.s);
}

/*
 * Tensor parallelism's vocabulary-parallel cross-entropy (tp.c): a rank's
 * state of its columns of a row, its sum rescaled to the group's max M
 * (the ranks' m allreduced by MAX) so that the group's sum of these is
 * the row's sum of exp(x - M); 0 from a rank with none of the row's
 * columns. The group's (M, that sum) is the row's state.
 */
GK_HD float gk_nn_msum_at(gk_nn_msum a, float M)
{
	return a.m == -INFINITY ? 0.0f : a.s * gk_nn_expf(a.m - M);
}

/*
 * A row-parallel layer's end under tensor parallelism: its output from
 * the residual, the bias (added once) and the product summed over the
 * group, in the unsplit layer's order, (res + bias) + the product.
 */
GK_HD float gk_nn_tp_finish(float res, float bias, float sum)
{
	return (res + bias) + sum;
}

/*
 * Sequence parallelism's order (tp.c): row i = (b, t) of (B,T,C) is row
 * (r, b, t - r Tl) of (tp,B,Tl,C), Tl = T/tp and r = t / Tl, the order in
 * which the group's collectives put each rank's positions together.
 */
GK_HD size_t gk_nn_sp_row(size_t i, int B, int T, int tp)
{
	size_t Tl = (size_t)(T / tp), b = i / (size_t)T, t = i % (size_t)T, r = t / Tl;
	return (r * (size_t)B + b) * Tl + (t - r * Tl);
}

/*
 * The backward half: d loss / d logit i = (softmax_i - [i == y]) * dloss,
 * with softmax_i = exp(x_i - lse), so the probabilities are never stored.
 */
GK_HD float gk_nn_xent_grad(float x, float lse, int is_target, float dloss)
{
	return (gk_nn_expf(x - lse) - (is_target ? 1.0f : 0.0f)) * dloss;
}

/*
 * Step constants of AdamW for 1-based step t, computed in double as
 * torch does in Python and rounded to float once, where torch's scalar
 * arguments are rounded.
 */
typedef struct gk_nn_adamw_k {
	float decay;     /* 1 - lr * weight_decay (1 on tensors without decay) */
	float one_m_b1;  /* 1 - beta1: lerp weight of the first moment */
	float beta2, one_m_b2;
	float step_size; /* lr / (1 - beta1^t) */
	float bc2_sqrt;  /* sqrt(1 - beta2^t) */
	float eps;
} gk_nn_adamw_k;

/*
 * One element of torch.optim.AdamW (foreach=False, the CPU default):
 *   p *= 1 - lr*wd
 *   m = lerp(m, g, 1-beta1)            (torch's lerp: w < 0.5 form)
 *   v = v*beta2 + (1-beta2)*g*g
 *   p += -step_size * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
 */
GK_HD void gk_nn_adamw_elem(float *p, float g, float *m, float *v,
			    const gk_nn_adamw_k *k, float decay)
{
	float pp = *p * decay;
	float mm = *m + k->one_m_b1 * (g - *m);
	float vv = *v * k->beta2 + k->one_m_b2 * g * g;
	float denom = sqrtf(vv) / k->bc2_sqrt + k->eps;
	*p = pp + (-k->step_size) * (mm / denom);
	*m = mm;
	*v = vv;
}

#endif
