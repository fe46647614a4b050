/*
 * cublaslt.cc - a strict fake of the part of cuBLASLt that lib/nn uses,
 * for the CUDA emulation: every descriptor, layout and preference it is
 * given is checked against the cuBLASLt documentation (attribute value
 * sizes, leading dimensions, the data type combinations of
 * cublasLtMatmul's table, the bias epilogue, matching shapes and batch
 * counts, operands inside device allocations and as aligned as the
 * heuristic was told), then the GEMM runs on the stream as a plain triple
 * loop in fp32 (TF32 compute rounds the inputs to TF32 first).
 *
 * The GELU epilogues (GELU, GELU_BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU,
 * DGELU_BGRAD) as cublasLt.h documents them: the aux ones need
 * CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER and _AUX_LD, the leading
 * dimension a multiple of 8 and no less than D's rows, the aux matrix of
 * D's type (EPILOGUE_AUX_DATA_TYPE's default; another type is for fp8
 * only), inside one device allocation and as aligned as the pointer the
 * heuristic saw; DGELU_BGRAD writes the bias gradient, of D's type
 * (BIAS_DATA_TYPE another: refused), to the bias pointer: D's row sums
 * of the epilogue's fp32 values, written, not added. The bias pointer,
 * whose alignment the heuristic too reads from the descriptor
 * (cublasLt.h, BIAS_POINTER), must be as aligned at the matmul as it was
 * there. The fake has no batched aux (AUX_BATCH_STRIDE) and refuses a
 * batched GELU epilogue.
 *
 * The GELU is the tanh approximation GPT-2 uses (gelu_new). cuBLASLt
 * does not document which formula its epilogue computes (tanh form, erf
 * form, or its own approximation of either): the emulation cannot tell,
 * and the real-GPU suite (tools/gpu-suite.sh, nn_cuda there) is where
 * the epilogue's values are checked against the CPU's within the tests'
 * tolerances.
 *
 * A rejected call returns the status cuBLASLt documents and says why on
 * stderr. CUEMU_GEMM_LOG=FILE appends one line per GEMM issued (shape,
 * types, batch), the manifest of the shapes a model runs;
 * CUEMU_LT_HEURISTIC_LOG=FILE one line per heuristic query (the problem,
 * the alignments it was told and read from the aux and bias pointers,
 * and the workspace), for the tests that count them.
 *
 * reference: cuBLAS documentation, "cublasLtMatmul", "cublasLtMatmulDescAttributes_t",
 * "cublasLtMatrixLayoutAttribute_t", "cublasLtMatmulPreferenceAttributes_t".
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "internal.h"

namespace {

struct desc {
	cublasComputeType_t compute;
	cudaDataType_t scale;
	int32_t transa, transb;
	uint32_t epilogue;
	const void *bias;
	int32_t bias_type;
	const void *aux;
	int64_t aux_ld;
	int32_t aux_type;
	int64_t aux_stride;
};

struct layout {
	cudaDataType_t type;
	uint64_t rows, cols;
	int64_t ld;
	int32_t batch;
	int64_t stride;
};

struct pref {
	uint64_t ws;
	uint32_t align[4]; /* A B C D */
};

const uint64_t MAGIC = 0x63756c74616c676full;

cublasStatus_t reject(cublasStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t reject(cublasStatus_t st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("cuemu: cuBLASLt: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return st;
}

size_t type_size(cudaDataType_t t)
{
	switch (t) {
	case CUDA_R_32F: return 4;
	case CUDA_R_16BF: case CUDA_R_16F: return 2;
	default: return 0;
	}
}

const char *type_name(cudaDataType_t t)
{
	switch (t) {
	case CUDA_R_32F: return "32F";
	case CUDA_R_16BF: return "16BF";
	case CUDA_R_16F: return "16F";
	default: return "unsupported";
	}
}

/* The epilogues the fake knows, by what they do. */
enum { EP_BIAS = 1, EP_GELU = 2, EP_AUX_OUT = 4, EP_DGELU = 8, EP_BGRAD = 16 };

int epilogue_does(uint32_t e)
{
	switch (e) {
	case CUBLASLT_EPILOGUE_DEFAULT: return 0;
	case CUBLASLT_EPILOGUE_BIAS: return EP_BIAS;
	case CUBLASLT_EPILOGUE_GELU: return EP_GELU;
	case CUBLASLT_EPILOGUE_GELU_BIAS: return EP_BIAS | EP_GELU;
	case CUBLASLT_EPILOGUE_GELU_AUX: return EP_GELU | EP_AUX_OUT;
	case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return EP_BIAS | EP_GELU | EP_AUX_OUT;
	case CUBLASLT_EPILOGUE_DGELU: return EP_DGELU;
	case CUBLASLT_EPILOGUE_DGELU_BGRAD: return EP_DGELU | EP_BGRAD;
	default: return -1;
	}
}

const char *epilogue_name(uint32_t e)
{
	switch (e) {
	case CUBLASLT_EPILOGUE_DEFAULT: return "DEFAULT";
	case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
	case CUBLASLT_EPILOGUE_GELU: return "GELU";
	case CUBLASLT_EPILOGUE_GELU_BIAS: return "GELU_BIAS";
	case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
	case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
	case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
	case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
	default: return "unknown";
	}
}

/* gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its
 * derivative (see the file's comment on what the real library computes). */
const float GELU_S = 0.7978845608028654f; /* sqrt(2 / pi) */

float gelu(float x)
{
	return 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
}

float gelu_grad(float x)
{
	float t = tanhf(GELU_S * (x + 0.044715f * x * x * x));
	return 0.5f * (1.0f + t) +
	       0.5f * x * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
}

/* Largest power of two, up to 256, dividing a. */
uint64_t align_of(uintptr_t a)
{
	uint64_t r = 256;
	while (r > 1 && a % r)
		r >>= 1;
	return r;
}

/* cublasLtMatmul's table of supported types, the rows we can meet. */
int types_ok(cublasComputeType_t c, cudaDataType_t s, cudaDataType_t ab, cudaDataType_t cd)
{
	if (s != CUDA_R_32F)
		return 0;
	switch (c) {
	case CUBLAS_COMPUTE_32F:
	case CUBLAS_COMPUTE_32F_PEDANTIC:
		return (ab == CUDA_R_32F && cd == CUDA_R_32F) ||
		       ((ab == CUDA_R_16BF || ab == CUDA_R_16F) && (cd == ab || cd == CUDA_R_32F));
	case CUBLAS_COMPUTE_32F_FAST_TF32:
	case CUBLAS_COMPUTE_32F_FAST_16BF:
	case CUBLAS_COMPUTE_32F_FAST_16F:
		return ab == CUDA_R_32F && cd == CUDA_R_32F;
	default:
		return 0;
	}
}

float load(const void *p, cudaDataType_t t, size_t i)
{
	uint32_t u;
	float f;
	switch (t) {
	case CUDA_R_32F:
		return ((const float *)p)[i];
	case CUDA_R_16BF:
		u = (uint32_t)((const uint16_t *)p)[i] << 16;
		memcpy(&f, &u, 4);
		return f;
	default:
		cuemu::fail("cuBLASLt: a type the fake does not compute");
	}
}

void store(void *p, cudaDataType_t t, size_t i, float f)
{
	if (t == CUDA_R_32F) {
		((float *)p)[i] = f;
		return;
	}
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		u |= 0x00400000u; /* quiet NaN, sign and top payload kept */
	else
		u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
	((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}

/* Round to TF32 (10 mantissa bits), nearest even. */
float tf32(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7f800000u) != 0x7f800000u)
		u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
	memcpy(&f, &u, 4);
	return f;
}

/* Elements from the first to one past the last of a layout. */
uint64_t extent(const layout &l)
{
	if (!l.rows || !l.cols)
		return 0;
	uint64_t one = (l.cols - 1) * (uint64_t)l.ld + l.rows;
	return one + (l.batch > 1 ? (uint64_t)(l.batch - 1) * (uint64_t)l.stride : 0);
}

uint64_t problem_hash(const desc *d, const layout *a, const layout *b, const layout *c,
		      const layout *dd)
{
	uint64_t h = 1469598103934665603ull;
	auto mix = [&h](const void *p, size_t n) {
		for (size_t i = 0; i < n; i++)
			h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
	};
	mix(&d->compute, sizeof d->compute);
	mix(&d->transa, 8);
	mix(&d->epilogue, sizeof d->epilogue);
	mix(&d->aux_ld, sizeof d->aux_ld);
	for (const layout *l : {a, b, c, dd}) {
		mix(&l->type, sizeof l->type);
		mix(&l->rows, 16);
		mix(&l->ld, 8);
		mix(&l->batch, 4);
		mix(&l->stride, 8);
	}
	return h;
}

/* The whole problem, as cublasLtMatmulAlgoGetHeuristic and
 * cublasLtMatmul both check it. */
cublasStatus_t check(const desc *d, const layout *a, const layout *b, const layout *c,
		     const layout *dd)
{
	if (!types_ok(d->compute, d->scale, a->type, dd->type) || a->type != b->type ||
	    c->type != dd->type)
		return reject(CUBLAS_STATUS_NOT_SUPPORTED,
			      "types A %s B %s C %s D %s with compute type %d: not in "
			      "cublasLtMatmul's table", type_name(a->type), type_name(b->type),
			      type_name(c->type), type_name(dd->type), (int)d->compute);
	uint64_t m = dd->rows, n = dd->cols;
	uint64_t am = d->transa ? a->cols : a->rows, ak = d->transa ? a->rows : a->cols;
	uint64_t bk = d->transb ? b->cols : b->rows, bn = d->transb ? b->rows : b->cols;
	if (am != m || bn != n || ak != bk || c->rows != m || c->cols != n)
		return reject(CUBLAS_STATUS_INVALID_VALUE,
			      "shapes: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu",
			      (unsigned long long)am, (unsigned long long)ak,
			      (unsigned long long)bk, (unsigned long long)bn,
			      (unsigned long long)c->rows, (unsigned long long)c->cols,
			      (unsigned long long)m, (unsigned long long)n);
	if (a->batch != dd->batch || b->batch != dd->batch || c->batch != dd->batch)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "batch counts A %d B %d C %d D %d differ",
			      a->batch, b->batch, c->batch, dd->batch);
	int ep = epilogue_does(d->epilogue);
	if (ep < 0)
		return reject(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u: the fake knows DEFAULT, "
			      "BIAS and the GELU ones", d->epilogue);
	const char *en = epilogue_name(d->epilogue);
	if (ep & (EP_BIAS | EP_BGRAD)) {
		if (!d->bias)
			return reject(CUBLAS_STATUS_INVALID_VALUE,
				      "%s epilogue without CUBLASLT_MATMUL_DESC_BIAS_POINTER", en);
		/* a bias gradient is of the output's type (cublasLt.h) */
		if (d->bias_type != -1 && d->bias_type != (int32_t)dd->type)
			return reject(CUBLAS_STATUS_NOT_SUPPORTED, "bias type %d with D of type %s",
				      d->bias_type, type_name(dd->type));
		if (dd->batch > 1)
			return reject(CUBLAS_STATUS_NOT_SUPPORTED,
				      "%s epilogue over a batch of %d without a bias batch stride",
				      en, dd->batch);
	}
	if (ep & (EP_AUX_OUT | EP_DGELU)) {
		if (!d->aux)
			return reject(CUBLAS_STATUS_INVALID_VALUE, "%s epilogue without "
				      "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER", en);
		if (d->aux_ld % 8 || d->aux_ld < (int64_t)dd->rows)
			return reject(CUBLAS_STATUS_INVALID_VALUE, "%s epilogue: aux leading "
				      "dimension %lld (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD) must be a "
				      "multiple of 8 and no less than D's %llu rows", en,
				      (long long)d->aux_ld, (unsigned long long)dd->rows);
		if (d->aux_type != -1 && d->aux_type != (int32_t)dd->type)
			return reject(CUBLAS_STATUS_INVALID_VALUE, "%s epilogue: aux type %d with D "
				      "of type %s (another type than D's is for fp8 only)", en,
				      d->aux_type, type_name(dd->type));
		if (dd->batch > 1)
			return reject(CUBLAS_STATUS_NOT_SUPPORTED, "%s epilogue over a batch of %d: "
				      "the fake has no batched aux matrix", en, dd->batch);
	}
	return CUBLAS_STATUS_SUCCESS;
}

} /* namespace */

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
	*h = (cublasLtHandle_t)malloc(16);
	return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out, cublasComputeType_t c,
					cudaDataType_t scale)
{
	desc *d = new desc();
	d->compute = c;
	d->scale = scale;
	d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
	d->bias_type = -1;
	d->aux_type = -1;
	*out = (cublasLtMatmulDesc_t)d;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
	delete (desc *)d;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t dp,
					      cublasLtMatmulDescAttributes_t attr,
					      const void *buf, size_t size)
{
	desc *d = (desc *)dp;
	size_t want;
	void *field;
	switch (attr) {
	case CUBLASLT_MATMUL_DESC_TRANSA: want = 4, field = &d->transa; break;
	case CUBLASLT_MATMUL_DESC_TRANSB: want = 4, field = &d->transb; break;
	case CUBLASLT_MATMUL_DESC_EPILOGUE: want = 4, field = &d->epilogue; break;
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER: want = sizeof(void *), field = &d->bias; break;
	case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: want = 4, field = &d->bias_type; break;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: want = sizeof(void *), field = &d->aux; break;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: want = 8, field = &d->aux_ld; break;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: want = 4, field = &d->aux_type; break;
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: want = 8, field = &d->aux_stride; break;
	default:
		return reject(CUBLAS_STATUS_NOT_SUPPORTED, "matmul descriptor attribute %d: "
			      "not one the fake checks", (int)attr);
	}
	if (size != want || !buf)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul descriptor attribute %d: %zu "
			      "bytes given, the attribute is %zu", (int)attr, size, want);
	memcpy(field, buf, size);
	if ((attr == CUBLASLT_MATMUL_DESC_TRANSA || attr == CUBLASLT_MATMUL_DESC_TRANSB) &&
	    *(int32_t *)field != CUBLAS_OP_N && *(int32_t *)field != CUBLAS_OP_T)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "transpose %d", *(int32_t *)field);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type,
					  uint64_t rows, uint64_t cols, int64_t ld)
{
	*out = NULL;
	if (!type_size(type))
		return reject(CUBLAS_STATUS_NOT_SUPPORTED, "layout of type %d", (int)type);
	/* column order: ld >= rows (and at least 1) */
	if (ld < 1 || (uint64_t)ld < rows || rows > INT32_MAX || cols > INT32_MAX)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "layout %llux%llu with ld %lld",
			      (unsigned long long)rows, (unsigned long long)cols, (long long)ld);
	layout *l = new layout();
	l->type = type;
	l->rows = rows;
	l->cols = cols;
	l->ld = ld;
	l->batch = 1;
	*out = (cublasLtMatrixLayout_t)l;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
	delete (layout *)l;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t lp,
						cublasLtMatrixLayoutAttribute_t attr,
						const void *buf, size_t size)
{
	layout *l = (layout *)lp;
	size_t want;
	void *field;
	switch (attr) {
	case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: want = 4, field = &l->batch; break;
	case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: want = 8, field = &l->stride; break;
	default:
		return reject(CUBLAS_STATUS_NOT_SUPPORTED, "layout attribute %d: not one the "
			      "fake checks", (int)attr);
	}
	if (size != want || !buf)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "layout attribute %d: %zu bytes given, "
			      "the attribute is %zu", (int)attr, size, want);
	memcpy(field, buf, size);
	if (l->batch < 1)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "batch count %d", l->batch);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out)
{
	pref *p = new pref();
	for (int i = 0; i < 4; i++)
		p->align[i] = 256; /* what the heuristic assumes unless told */
	*out = (cublasLtMatmulPreference_t)p;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
	delete (pref *)p;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pp,
						    cublasLtMatmulPreferenceAttributes_t attr,
						    const void *buf, size_t size)
{
	pref *p = (pref *)pp;
	size_t want;
	void *field;
	switch (attr) {
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: want = 8, field = &p->ws; break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: want = 4, field = &p->align[0]; break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: want = 4, field = &p->align[1]; break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: want = 4, field = &p->align[2]; break;
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: want = 4, field = &p->align[3]; break;
	default:
		return reject(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d: not one the "
			      "fake checks", (int)attr);
	}
	if (size != want || !buf)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "preference attribute %d: %zu bytes "
			      "given, the attribute is %zu", (int)attr, size, want);
	memcpy(field, buf, size);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t dp,
					      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
					      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
					      cublasLtMatmulPreference_t pp, int requested,
					      cublasLtMatmulHeuristicResult_t *res, int *found)
{
	*found = 0;
	if (!h || !dp || !a || !b || !c || !d || !pp || requested < 1 || !res)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "heuristic: a NULL argument or %d "
			      "algorithms requested", requested);
	const desc *de = (const desc *)dp;
	cublasStatus_t st = check(de, (layout *)a, (layout *)b, (layout *)c, (layout *)d);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	const pref *p = (const pref *)pp;
	for (int i = 0; i < 4; i++)
		if (!p->align[i] || (p->align[i] & (p->align[i] - 1)))
			return reject(CUBLAS_STATUS_INVALID_VALUE, "minimum alignment %u", p->align[i]);
	if (const char *log = getenv("CUEMU_LT_HEURISTIC_LOG")) {
		if (FILE *f = fopen(log, "a")) {
			const layout *la = (const layout *)a, *ld = (const layout *)d;
			fprintf(f, "m %llu n %llu k %llu transa %d transb %d batch %d A %s D %s "
				"bias %d align %u %u %u %u aux %llu bias %llu workspace %llu "
				"epilogue %s\n",
				(unsigned long long)ld->rows, (unsigned long long)ld->cols,
				(unsigned long long)(de->transa ? la->rows : la->cols), de->transa,
				de->transb, ld->batch, type_name(la->type), type_name(ld->type),
				de->epilogue == CUBLASLT_EPILOGUE_BIAS, p->align[0], p->align[1],
				p->align[2], p->align[3],
				(unsigned long long)(de->aux ? align_of((uintptr_t)de->aux) : 0),
				(unsigned long long)(de->bias ? align_of((uintptr_t)de->bias) : 0),
				(unsigned long long)p->ws, epilogue_name(de->epilogue));
			fclose(f);
		}
	}
	memset(res, 0, sizeof *res);
	res->algo.data[0] = MAGIC;
	res->algo.data[1] = problem_hash(de, (layout *)a, (layout *)b, (layout *)c, (layout *)d);
	for (int i = 0; i < 4; i++)
		res->algo.data[2 + i] = p->align[i];
	/* some workspace when allowed, so that its pointer gets checked */
	res->workspaceSize = p->ws < (1u << 20) ? p->ws : (1u << 20);
	res->algo.data[6] = res->workspaceSize;
	/* the aux and bias pointers' alignments, as the heuristic reads them
	 * from the descriptor (cublasLt.h, EPILOGUE_AUX_POINTER, BIAS_POINTER) */
	res->algo.data[7] = (de->aux ? align_of((uintptr_t)de->aux) : 1) |
			    (uint64_t)(de->bias ? align_of((uintptr_t)de->bias) : 1) << 32;
	res->state = CUBLAS_STATUS_SUCCESS;
	res->wavesCount = 1.0f;
	*found = 1;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t dp, const void *alpha_p,
			      const void *A, cublasLtMatrixLayout_t ap, const void *B,
			      cublasLtMatrixLayout_t bp, const void *beta_p, const void *C,
			      cublasLtMatrixLayout_t cp, void *D, cublasLtMatrixLayout_t dlp,
			      const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
			      cudaStream_t s)
{
	if (!h || !dp || !alpha_p || !beta_p || !ap || !bp || !cp || !dlp || !algo)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: a NULL argument (the fake "
			      "wants an algorithm from the heuristic)");
	desc de = *(const desc *)dp;
	layout a = *(layout *)ap, b = *(layout *)bp, c = *(layout *)cp, d = *(layout *)dlp;
	cublasStatus_t st = check(&de, &a, &b, &c, &d);
	if (st != CUBLAS_STATUS_SUCCESS)
		return st;
	if (algo->data[0] != MAGIC || algo->data[1] != problem_hash(&de, &a, &b, &c, &d))
		return reject(CUBLAS_STATUS_INVALID_VALUE,
			      "matmul: the algorithm is not the heuristic's for this problem");
	float alpha = *(const float *)alpha_p, beta = *(const float *)beta_p;
	if (beta != 0.0f && !C)
		return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: beta %g without C", beta);
	const void *ptr[4] = {A, B, C ? C : D, D};
	const layout *lay[4] = {&a, &b, &c, &d};
	static const char *const nm[4] = {"A", "B", "C", "D"};
	for (int i = 0; i < 4; i++) {
		size_t es = type_size(lay[i]->type);
		uint64_t n = extent(*lay[i]);
		if (n && !cuemu::device_range(ptr[i], n * es))
			return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: %s (%p, %llu elements "
				      "of %zu bytes) is not inside one device allocation", nm[i],
				      ptr[i], (unsigned long long)n, es);
		uintptr_t where = (uintptr_t)ptr[i] |
				  (lay[i]->batch > 1 ? (uintptr_t)lay[i]->stride * es : 0);
		if (where % algo->data[2 + i])
			return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: %s at %p (batch stride "
				      "%lld) is not aligned to the %llu bytes the heuristic was told",
				      nm[i], ptr[i], (long long)lay[i]->stride,
				      (unsigned long long)algo->data[2 + i]);
		if (where % es)
			return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: %s at %p is not aligned "
				      "to its %zu-byte elements", nm[i], ptr[i], es);
	}
	int ep = epilogue_does(de.epilogue);
	uint64_t aux_align = algo->data[7] & 0xffffffffu, bias_align = algo->data[7] >> 32;
	if (ep & (EP_BIAS | EP_BGRAD)) {
		size_t es = type_size(d.type);
		if (!cuemu::device_range(de.bias, d.rows * es) || (uintptr_t)de.bias % es)
			return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: the bias (%p, %llu values) "
				      "is not an aligned piece of one device allocation", de.bias,
				      (unsigned long long)d.rows);
		if ((uintptr_t)de.bias % bias_align)
			return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: the bias at %p is not "
				      "aligned to the %llu bytes of the pointer the heuristic saw",
				      de.bias, (unsigned long long)bias_align);
	}
	layout aux = d;
	aux.ld = de.aux_ld;
	if (ep & (EP_AUX_OUT | EP_DGELU)) {
		size_t es = type_size(d.type);
		if (!cuemu::device_range(de.aux, extent(aux) * es))
			return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: the aux matrix (%p, "
				      "%llux%llu, ld %lld) is not inside one device allocation",
				      de.aux, (unsigned long long)d.rows, (unsigned long long)d.cols,
				      (long long)de.aux_ld);
		if ((uintptr_t)de.aux % es || (uintptr_t)de.aux % aux_align)
			return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: the aux matrix at %p is "
				      "not aligned to its %zu-byte elements and the %llu bytes of the "
				      "pointer the heuristic saw", de.aux, es,
				      (unsigned long long)aux_align);
	}
	if (ws_bytes < algo->data[6])
		return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: %zu bytes of workspace, the "
			      "algorithm needs %llu", ws_bytes, (unsigned long long)algo->data[6]);
	if (ws_bytes && !cuemu::device_range(ws, ws_bytes))
		return reject(CUBLAS_STATUS_INVALID_VALUE, "matmul: workspace %p of %zu bytes is "
			      "not inside one device allocation", ws, ws_bytes);
	if (const char *log = getenv("CUEMU_GEMM_LOG")) {
		if (FILE *f = fopen(log, "a")) {
			fprintf(f, "m %llu n %llu k %llu transa %d transb %d batch %d A %s D %s "
				"compute %d bias %d beta %g epilogue %s\n", (unsigned long long)d.rows,
				(unsigned long long)d.cols,
				(unsigned long long)(de.transa ? a.rows : a.cols), de.transa,
				de.transb, d.batch, type_name(a.type), type_name(d.type),
				(int)de.compute, (ep & EP_BIAS) != 0, beta, epilogue_name(de.epilogue));
			fclose(f);
		}
	}
	int tf = de.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
	std::vector<cuemu::access> touch;
	for (int i = 0; i < 4; i++) {
		if (i == 2 && beta == 0.0f)
			continue;
		uintptr_t lo = (uintptr_t)ptr[i];
		touch.push_back({lo, lo + extent(*lay[i]) * type_size(lay[i]->type), i == 3});
	}
	if (ep & (EP_BIAS | EP_BGRAD))
		touch.push_back({(uintptr_t)de.bias, (uintptr_t)de.bias + d.rows * type_size(d.type),
				 (ep & EP_BGRAD) != 0});
	if (ep & (EP_AUX_OUT | EP_DGELU))
		touch.push_back({(uintptr_t)de.aux, (uintptr_t)de.aux + extent(aux) * type_size(d.type),
				 (ep & EP_AUX_OUT) != 0});
	cudaError_t e = cuemu::enqueue(s, [=]() {
		uint64_t m = d.rows, n = d.cols, k = de.transa ? a.rows : a.cols;
		size_t ea = type_size(a.type), ec = type_size(c.type), ed = type_size(d.type);
		std::vector<float> bgrad((ep & EP_BGRAD) ? m : 0, 0.0f);
		for (int bt = 0; bt < d.batch; bt++) {
			const char *pa = (const char *)A + (size_t)bt * a.stride * ea;
			const char *pb = (const char *)B + (size_t)bt * b.stride * ea;
			const char *pc = C ? (const char *)C + (size_t)bt * c.stride * ec : NULL;
			char *pd = (char *)D + (size_t)bt * d.stride * ed;
			for (uint64_t j = 0; j < n; j++)
				for (uint64_t i = 0; i < m; i++) {
					float acc = 0.0f;
					for (uint64_t p = 0; p < k; p++) {
						float x = load(pa, a.type, de.transa ? p + i * a.ld : i + p * a.ld);
						float y = load(pb, b.type, de.transb ? j + p * b.ld : p + j * b.ld);
						if (tf)
							x = tf32(x), y = tf32(y);
						acc += x * y;
					}
					float r = alpha * acc;
					if (beta != 0.0f)
						r += beta * load(pc, c.type, i + j * c.ld);
					if (ep & EP_BIAS)
						r += load(de.bias, d.type, i);
					if (ep & EP_AUX_OUT)
						store((void *)de.aux, d.type, i + j * de.aux_ld, r);
					if (ep & EP_GELU)
						r = gelu(r);
					if (ep & EP_DGELU)
						r *= gelu_grad(load(de.aux, d.type, i + j * de.aux_ld));
					if (ep & EP_BGRAD)
						bgrad[i] += r;
					store(pd, d.type, i + j * d.ld, r);
				}
		}
		for (uint64_t i = 0; i < bgrad.size(); i++)
			store((void *)de.bias, d.type, i, bgrad[i]);
	}, "cublasLtMatmul", touch);
	return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS
				: reject(CUBLAS_STATUS_EXECUTION_FAILED, "matmul on a dead stream");
}

} /* extern "C" */
