/*
 * half.h - fp32 <-> bf16 / fp16 conversion, shared by the CPU path and the
 * CUDA kernels (GK_HD is __host__ __device__ under nvcc). Checkpoint dtype
 * conversion and compressed allreduce both stand on these.
 *
 * Rounding is round-to-nearest-even, as IEEE 754 and torch's .to() do.
 * NaN stays NaN (quiet, sign kept); fp16 overflow becomes infinity;
 * fp16 subnormals are produced and read exactly.
 * reference: IEEE 754-2008 section 4.3.1 (roundTiesToEven); bfloat16 is the
 * upper half of a binary32.
 */
#ifndef GK_HALF_H
#define GK_HALF_H

#include <stdint.h>
#include <string.h>

/* Always inlined, on the host as under nvcc: a caller built for AVX-512
 * (a target_clones copy) then compiles the arithmetic for AVX-512 too,
 * where an out-of-line copy would be built for the baseline. */
#ifdef __CUDACC__
#define GK_HD __host__ __device__ __forceinline__
#else
#define GK_HD static inline __attribute__((always_inline))
#endif

GK_HD uint32_t gk_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

GK_HD float gk_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

GK_HD uint16_t gk_f32_to_bf16(float f)
{
	uint32_t u = gk_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	/* Add half an ulp of bf16, minus one unless the kept lsb is odd. */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

GK_HD float gk_bf16_to_f32(uint16_t h)
{
	return gk_bits_f32((uint32_t)h << 16);
}

GK_HD uint16_t gk_f32_to_f16(float f)
{
	uint32_t u = gk_f32_bits(f);
	uint32_t sign = (u >> 16) & 0x8000u;
	uint32_t a = u & 0x7fffffffu;

	if (a > 0x7f800000u) /* NaN: quiet, keep the top payload bits */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520 rounds past the largest half: inf */
		return (uint16_t)(sign | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14: fp16 subnormal or zero */
		if (a < 0x33000000u) /* below 2^-25: rounds to zero */
			return (uint16_t)sign;
		uint32_t e = a >> 23;
		uint32_t m = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126 - e; /* 14..24 */
		uint32_t h = m >> shift;
		uint32_t rem = m & ((1u << shift) - 1);
		uint32_t halfway = 1u << (shift - 1);
		if (rem > halfway || (rem == halfway && (h & 1u)))
			h++;
		return (uint16_t)(sign | h);
	}
	/* Normal: rebias the exponent (127 -> 15), round 13 bits away. */
	uint32_t h = ((a - 0x38000000u) + 0xfffu + ((a >> 13) & 1u)) >> 13;
	return (uint16_t)(sign | h);
}

GK_HD float gk_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;

	if (e == 0x1f) /* inf or NaN */
		return gk_bits_f32(sign | 0x7f800000u | (m << 13));
	if (e == 0) {
		if (m == 0)
			return gk_bits_f32(sign);
		/* Subnormal: m * 2^-24, exact in fp32. */
		float f = (float)m * 5.9604644775390625e-8f;
		return sign ? -f : f;
	}
	return gk_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
