/*
 * matmul_cuda.c - the backend's matmuls through cuBLASLt: row-major
 * GEMMs (Conv1D weights, attention's batched products) with the bias
 * epilogue and the residual as the C operand, in bf16 (fp32
 * accumulation), TF32 or fp32.
 *
 * libcublasLt.so.N is opened with dlopen, not linked: the toolkit ships
 * it only as a shared library, and a linked one would stop every binary
 * from starting on a machine without it (the reason lib/comm loads NCCL
 * and lib/topo loads NVML this way). N is the major version of the
 * toolkit built with (its cublas_api.h): a CUDA 12 build loads
 * libcublasLt.so.12, whose ABI its header describes.
 *
 * Row-major to cuBLASLt's column-major is gk_nn_lt_shape_of (launch.c,
 * tested on the host); the bias (one value per column of our D) is per
 * row of cuBLASLt's D, which is what CUBLASLT_EPILOGUE_BIAS adds.
 *
 * The MLP's GELU runs in the epilogue where the model asks
 * (gk_nn_gelu_epilogue): c_fc's forward with GELU_AUX_BIAS (D the GELU's
 * output, the aux matrix its input, which backward needs), c_proj's
 * input gradient with DGELU (the product times gelu' of the aux), or
 * DGELU_BGRAD, which also writes the column sums of our D (the rows of
 * cuBLASLt's, what its bias gradient sums) to the bias pointer: c_fc's
 * bias gradient, of D's type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER:
 * "Bias gradient vector elements are the same type as the output
 * elements"). The aux matrix has D's type, layout and shape (cuBLASLt's
 * default EPILOGUE_AUX_DATA_TYPE), its leading dimension a multiple of 8
 * no less than D's rows (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD). The aux
 * and bias pointers are given before the heuristic, which reads their
 * alignment from them (cublasLt.h, both attributes), so the alignments
 * are part of the cached problem.
 *
 * reference: llm.c llmc/matmul.cuh (matmul_cublaslt), the cuBLASLt API
 * documentation (cublasLtMatmul, "Epilogue", "Data types").
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include <cublasLt.h>

#include "nn/cuda_internal.h"

#define LT_STR_(v) #v
#define LT_STR(v) LT_STR_(v)
#define LT_SO "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)

static struct lt_api {
	__typeof__(cublasLtCreate) *Create;
	__typeof__(cublasLtDestroy) *Destroy;
	__typeof__(cublasLtMatmulDescCreate) *DescCreate;
	__typeof__(cublasLtMatmulDescDestroy) *DescDestroy;
	__typeof__(cublasLtMatmulDescSetAttribute) *DescSet;
	__typeof__(cublasLtMatrixLayoutCreate) *LayoutCreate;
	__typeof__(cublasLtMatrixLayoutDestroy) *LayoutDestroy;
	__typeof__(cublasLtMatrixLayoutSetAttribute) *LayoutSet;
	__typeof__(cublasLtMatmulPreferenceCreate) *PrefCreate;
	__typeof__(cublasLtMatmulPreferenceDestroy) *PrefDestroy;
	__typeof__(cublasLtMatmulPreferenceSetAttribute) *PrefSet;
	__typeof__(cublasLtMatmulAlgoGetHeuristic) *Heuristic;
	__typeof__(cublasLtMatmul) *Matmul;
	void *so;
	char why[256];
} lt;

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

/* Once per process; the library stays loaded (as NCCL's does) because
 * handles made from it may live until exit. */
static void lt_load(void)
{
	lt.so = dlopen(LT_SO, RTLD_NOW | RTLD_LOCAL);
	if (!lt.so) {
		snprintf(lt.why, sizeof(lt.why), "cannot load '%s': %s", LT_SO,
			 dlerror());
		return;
	}
#define SYM(field, name)                                                     \
	if (!(*(void **)&lt.field = dlsym(lt.so, #name))) {                  \
		snprintf(lt.why, sizeof(lt.why), "'%s' lacks %s", LT_SO,     \
			 #name);                                             \
		dlclose(lt.so);                                              \
		lt.so = NULL;                                                \
		return;                                                      \
	}
	SYM(Create, cublasLtCreate)
	SYM(Destroy, cublasLtDestroy)
	SYM(DescCreate, cublasLtMatmulDescCreate)
	SYM(DescDestroy, cublasLtMatmulDescDestroy)
	SYM(DescSet, cublasLtMatmulDescSetAttribute)
	SYM(LayoutCreate, cublasLtMatrixLayoutCreate)
	SYM(LayoutDestroy, cublasLtMatrixLayoutDestroy)
	SYM(LayoutSet, cublasLtMatrixLayoutSetAttribute)
	SYM(PrefCreate, cublasLtMatmulPreferenceCreate)
	SYM(PrefDestroy, cublasLtMatmulPreferenceDestroy)
	SYM(PrefSet, cublasLtMatmulPreferenceSetAttribute)
	SYM(Heuristic, cublasLtMatmulAlgoGetHeuristic)
	SYM(Matmul, cublasLtMatmul)
#undef SYM
}

/*
 * The heuristic's choice, cached per problem: everything the query is
 * given (the shapes, types, strides, transposes and epilogue, the
 * workspace and the operands' alignments; the compute type is the
 * handle's). A model issues a few dozen distinct GEMMs a step, each
 * queried once per handle instead of every step (the query is host
 * work of microseconds to milliseconds), and a run keeps one algorithm
 * per shape, so its steps run the same kernels.
 */
typedef struct algo_key {
	int32_t dt, ddt, trans_a, trans_b, bias, batch, epi;
	uint64_t a_rows, a_cols, b_rows, b_cols, d_rows, d_cols;
	int64_t lda, ldb, ldd, ldaux;
	long long sa, sb, sd;
	uint64_t ws;
	uint32_t align[6]; /* A B C D, the GELU's aux, the bias (or its gradient) */
} algo_key;

#define ALGO_CACHE_MAX 256

typedef struct algo_entry {
	algo_key key;
	cublasLtMatmulAlgo_t algo;
} algo_entry;

struct gk_nn_blas {
	cublasLtHandle_t h;
	cublasComputeType_t compute;
	void *ws;
	size_t ws_bytes;
	cudaStream_t s;
	algo_entry *algos;     /* the heuristic's answers so far */
	size_t nalgos, cap;
};

int gk_nn_blas_new(gk_nn_blas **out, gk_nn_precision prec, void *ws,
		   size_t ws_bytes, gk_cuda_stream s, gk_err *err)
{
	*out = NULL;
	pthread_once(&lt_once, lt_load);
	if (!lt.so)
		return gk_errf(err, "cuBLASLt: %s", lt.why);
	gk_nn_blas *b = calloc(1, sizeof(*b));
	if (!b)
		return gk_err_sys(err, ENOMEM, "cuBLASLt handle");
	if (GK_CUBLAS_CHECK(lt.Create(&b->h), err) < 0) {
		free(b);
		return -1;
	}
	b->compute = prec == GK_NN_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
					: CUBLAS_COMPUTE_32F;
	b->ws = ws;
	b->ws_bytes = ws_bytes;
	b->s = s;
	*out = b;
	return 0;
}

void gk_nn_blas_free(gk_nn_blas *b)
{
	if (!b)
		return;
	lt.Destroy(b->h);
	free(b->algos);
	free(b);
}

static cudaDataType_t cuda_type(gk_dtype dt)
{
	return dt == GK_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* A stored (rows, cols) column-major matrix of `batch` entries `stride`
 * elements apart. */
static int layout(cublasLtMatrixLayout_t *l, gk_dtype dt, uint64_t rows,
		  uint64_t cols, int64_t ld, int batch, long long stride,
		  gk_err *err)
{
	if (GK_CUBLAS_CHECK(lt.LayoutCreate(l, cuda_type(dt), rows, cols, ld),
			    err) < 0)
		return -1;
	if (batch > 1) {
		int32_t n = batch;
		int64_t st = stride;
		if (GK_CUBLAS_CHECK(lt.LayoutSet(*l,
						 CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
						 &n, sizeof(n)),
				    err) < 0 ||
		    GK_CUBLAS_CHECK(lt.LayoutSet(*l,
				    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
						 &st, sizeof(st)),
				    err) < 0)
			return -1;
	}
	return 0;
}

/* Largest power of two, up to 256, dividing the address (or'ed with the
 * batch stride in bytes, which every batch entry's address must keep). */
static uint32_t align_of(uintptr_t a)
{
	uint32_t r = 256;
	while (r > 1 && a % r)
		r >>= 1;
	return r;
}

int gk_nn_blas_gemm(gk_nn_blas *b, const gk_nn_gemm *g, gk_err *err)
{
	cublasLtMatmulDesc_t desc = NULL;
	cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
	cublasLtMatmulPreference_t pref = NULL;
	int rc = -1, batch = g->batch > 0 ? g->batch : 1;
	gk_nn_lt_shape sh;
	gk_nn_lt_shape_of(g, &sh);
	cublasOperation_t opa = sh.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasOperation_t opb = sh.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
	cublasLtEpilogue_t epi = g->bias ? CUBLASLT_EPILOGUE_BIAS
					 : CUBLASLT_EPILOGUE_DEFAULT;
	if (g->gelu == GK_NN_GEMM_GELU)
		epi = g->bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
			      : CUBLASLT_EPILOGUE_GELU_AUX;
	else if (g->gelu == GK_NN_GEMM_DGELU)
		epi = g->dbias ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;

	if (g->bias && batch > 1)
		return gk_errf(err, "matmul: a bias with a batch of %d", batch);
	/* (16 bytes: as a bias, below) */
	if (g->dbias && (g->gelu != GK_NN_GEMM_DGELU || (uintptr_t)g->dbias & 15))
		return gk_errf(err, "matmul: a bias gradient comes with the DGELU epilogue only, "
			       "at a 16-byte boundary");
	if (g->gelu != GK_NN_GEMM_PLAIN) {
		size_t es = gk_dtype_bits(g->ddt) / 8;
		if (g->gelu != GK_NN_GEMM_GELU && g->gelu != GK_NN_GEMM_DGELU)
			return gk_errf(err, "matmul: GELU epilogue %d unknown", g->gelu);
		if (batch > 1 || g->dt != g->ddt || (g->gelu == GK_NN_GEMM_DGELU && g->bias))
			return gk_errf(err, "matmul: the GELU epilogue takes one "
				       "matrix, D of the operands' type and (in "
				       "backward) no bias");
		if (!g->aux || (uintptr_t)g->aux % es || g->ldaux < g->N ||
		    g->ldaux % 8)
			return gk_errf(err, "matmul: the GELU epilogue's aux matrix "
				       "(%d columns, leading dimension %d) must be "
				       "aligned to its elements, its leading "
				       "dimension a multiple of 8 no less than its "
				       "columns (GK_CUDA_GELU=kernel runs the GELU "
				       "as a kernel)", g->N, g->ldaux);
	}
	/* cuBLASLt takes no alignment preference for the bias and may pick
	 * a kernel that assumes 16 bytes; a bias at an odd place in the flat
	 * parameters (C * element size not a multiple of 16) is copied to
	 * the workspace's end first, on the same stream */
	const void *bias = g->bias;
	size_t ws_bytes = b->ws_bytes;
	if (bias && ((uintptr_t)bias & 15)) {
		size_t nb = (size_t)g->N * (gk_dtype_bits(g->dt) / 8);
		size_t room = (nb + 255) / 256 * 256;
		if (room > ws_bytes / 2)
			return gk_errf(err, "matmul: a bias of %d values does "
				       "not fit the workspace", g->N);
		ws_bytes -= room;
		void *dst = (char *)b->ws + ws_bytes;
		if (GK_CUDA_CHECK(cudaMemcpyAsync(dst, bias, nb,
						  cudaMemcpyDeviceToDevice,
						  b->s), err) < 0)
			return -1;
		bias = dst;
	}
	if (GK_CUBLAS_CHECK(lt.DescCreate(&desc, b->compute, CUDA_R_32F), err) < 0)
		return -1;
	if (GK_CUBLAS_CHECK(lt.DescSet(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa,
				       sizeof(opa)), err) < 0 ||
	    GK_CUBLAS_CHECK(lt.DescSet(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb,
				       sizeof(opb)), err) < 0 ||
	    GK_CUBLAS_CHECK(lt.DescSet(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
				       sizeof(epi)), err) < 0)
		goto out;
	if (g->dbias)
		bias = g->dbias;
	if (bias &&
	    GK_CUBLAS_CHECK(lt.DescSet(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
				       &bias, sizeof(bias)), err) < 0)
		goto out;
	int64_t ldaux = g->ldaux;
	if (g->gelu != GK_NN_GEMM_PLAIN &&
	    (GK_CUBLAS_CHECK(lt.DescSet(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
					&g->aux, sizeof(g->aux)), err) < 0 ||
	     GK_CUBLAS_CHECK(lt.DescSet(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
					&ldaux, sizeof(ldaux)), err) < 0))
		goto out;
	if (layout(&la, g->dt, sh.a_rows, sh.a_cols, sh.lda, batch, sh.sa,
		   err) < 0 ||
	    layout(&lb, g->dt, sh.b_rows, sh.b_cols, sh.ldb, batch, sh.sb,
		   err) < 0 ||
	    layout(&ld, g->ddt, sh.d_rows, sh.d_cols, sh.ldd, batch, sh.sd,
		   err) < 0)
		goto out;
	if (GK_CUBLAS_CHECK(lt.PrefCreate(&pref), err) < 0)
		goto out;
	uint64_t wsb = ws_bytes;
	if (GK_CUBLAS_CHECK(lt.PrefSet(pref,
				       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
				       &wsb, sizeof(wsb)), err) < 0)
		goto out;
	/* the heuristic assumes 256-byte aligned operands unless told; an
	 * attention batch or a carved buffer may be less */
	static const cublasLtMatmulPreferenceAttributes_t al[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
	size_t es = gk_dtype_bits(g->dt) / 8, eds = gk_dtype_bits(g->ddt) / 8;
	uintptr_t ptr[4] = {
		(uintptr_t)g->B | (batch > 1 ? (uintptr_t)g->sB * es : 0),
		(uintptr_t)g->A | (batch > 1 ? (uintptr_t)g->sA * es : 0),
		(uintptr_t)(g->C ? g->C : g->D) |
			(batch > 1 ? (uintptr_t)g->sD * eds : 0),
		(uintptr_t)g->D | (batch > 1 ? (uintptr_t)g->sD * eds : 0)};
	algo_key key;
	memset(&key, 0, sizeof key); /* the padding too: keys compare bytewise */
	key.dt = g->dt, key.ddt = g->ddt, key.trans_a = sh.trans_a, key.trans_b = sh.trans_b;
	key.bias = bias != NULL, key.batch = batch, key.epi = (int32_t)epi;
	key.a_rows = sh.a_rows, key.a_cols = sh.a_cols, key.b_rows = sh.b_rows;
	key.b_cols = sh.b_cols, key.d_rows = sh.d_rows, key.d_cols = sh.d_cols;
	key.lda = sh.lda, key.ldb = sh.ldb, key.ldd = sh.ldd;
	key.ldaux = g->gelu != GK_NN_GEMM_PLAIN ? ldaux : 0;
	key.sa = batch > 1 ? sh.sa : 0, key.sb = batch > 1 ? sh.sb : 0;
	key.sd = batch > 1 ? sh.sd : 0;
	key.ws = ws_bytes;
	for (int i = 0; i < 4; i++)
		key.align[i] = align_of(ptr[i]);
	key.align[4] = g->gelu != GK_NN_GEMM_PLAIN ? align_of((uintptr_t)g->aux) : 0;
	key.align[5] = bias ? align_of((uintptr_t)bias) : 0;
	const cublasLtMatmulAlgo_t *algo = NULL;
	cublasLtMatmulHeuristicResult_t heur;
	for (size_t i = 0; i < b->nalgos && !algo; i++)
		if (!memcmp(&b->algos[i].key, &key, sizeof key))
			algo = &b->algos[i].algo;
	if (!algo) {
		for (int i = 0; i < 4; i++)
			if (GK_CUBLAS_CHECK(lt.PrefSet(pref, al[i], &key.align[i],
						       sizeof(key.align[i])), err) < 0)
				goto out;
		int found = 0;
		if (GK_CUBLAS_CHECK(lt.Heuristic(b->h, desc, la, lb, ld, ld, pref, 1,
						 &heur, &found), err) < 0)
			goto out;
		if (found == 0) {
			gk_errf(err, "matmul (%d x %d x %d, batch %d, %s): cuBLASLt has "
				"no algorithm for it", g->M, g->N, g->K, batch,
				gk_dtype_name(g->dt));
			goto out;
		}
		algo = &heur.algo;
		/* kept while there are few (sampling's growing sequence
		 * would add its attention shapes at every length) */
		if (b->nalgos == b->cap && b->cap < ALGO_CACHE_MAX) {
			size_t cap = b->cap ? 2 * b->cap : 32;
			algo_entry *e = realloc(b->algos, cap * sizeof *e);
			if (e)
				b->algos = e, b->cap = cap;
		}
		if (b->nalgos < b->cap) {
			b->algos[b->nalgos] = (algo_entry){key, heur.algo};
			algo = &b->algos[b->nalgos++].algo;
		}
	}
	float alpha = g->alpha, beta = g->C ? 1.0f : 0.0f;
	const void *c = g->C ? g->C : g->D;
	rc = GK_CUBLAS_CHECK(lt.Matmul(b->h, desc, &alpha, sh.a, la, sh.b, lb,
				       &beta, c, ld, g->D, ld, algo, b->ws,
				       ws_bytes, b->s), err);
out:
	if (pref)
		lt.PrefDestroy(pref);
	if (la)
		lt.LayoutDestroy(la);
	if (lb)
		lt.LayoutDestroy(lb);
	if (ld)
		lt.LayoutDestroy(ld);
	lt.DescDestroy(desc);
	return rc;
}
