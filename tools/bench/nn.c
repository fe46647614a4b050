/*
 * nn.c - time gpu-train's full CPU training step (forward, backward,
 * AdamW) and OpenBLAS sgemm alone at the step's matmul shapes:
 *
 *   build/tools/bench/nn L C NH T B V THREADS STEPS [RECOMPUTE]
 *
 * The timed steps are followed by as many replays of their matmuls as
 * plain sgemm calls, and both are summarised alike (on a shared machine
 * the best of a few replays against the median step understated the
 * step). Prints one line of key=value: tok_s (median step), gflops (the
 * model's gk_nn_flops over the median step), sgemm_gflops (the replay's
 * FLOPs over its median), best_gflops and sgemm_best_gflops (the same
 * over the fastest of each), the step's median and min ms, and cpu_*
 * (per CPU second of the process), and blas_core (the kernels OpenBLAS
 * picked for this CPU). Data: random windows of a random
 * byte stream (tokens < V), constant lr, AdamW betas 0.9/0.95, weight
 * decay 0.1 on the 2-D tensors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "core/core.h"
#include "nn/nn.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* CPU seconds of the whole process: on a shared machine, the time the
 * step really ran, where the wall clock also counts the other tenants */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/*
 * The sgemm calls of one step (the model's matmuls, forward and
 * backward, with ops_cpu.c's shapes, transposes and beta), made once;
 * returns their FLOPs. beta matters: OpenBLAS zeroes C before a beta-0
 * product, a pass over C that is part of that call's cost; with beta 1
 * it adds onto C (a bias or a gradient already there).
 */
typedef struct shape {
	int ta, tb, M, N, K, beta;
} shape;

typedef struct replay {
	int L, C, V, Ntok, T, NH, B;
	float *a, *b, *c;
} replay;

static void replay_init(replay *r, int L, int C, int V, int Ntok, int T,
			int NH, int B)
{
	*r = (replay){L, C, V, Ntok, T, NH, B, NULL, NULL, NULL};
	size_t big = (size_t)Ntok * 4 * C;
	if ((size_t)V * C > big)
		big = (size_t)V * C;
	if ((size_t)Ntok * V > big)
		big = (size_t)Ntok * V;
	r->a = calloc(big, 4), r->b = calloc(big, 4), r->c = calloc(big, 4);
	for (size_t i = 0; i < big; i++) {
		r->a[i] = (float)(next() % 1000) * 1e-3f;
		r->b[i] = (float)(next() % 1000) * 1e-3f;
	}
}

static double replay_step(const replay *r)
{
	int C = r->C, V = r->V, Ntok = r->Ntok, T = r->T, hs = C / r->NH;
	shape s[] = {
		/* per block, forward: qkv, attn proj, fc, fc proj (onto
		 * the bias, except fc, whose GeLU pass adds it) */
		{0, 0, Ntok, 3 * C, C, 1}, {0, 0, Ntok, C, C, 1},
		{0, 0, Ntok, 4 * C, C, 0}, {0, 0, Ntok, C, 4 * C, 1},
		/* backward: dinp (fresh) and dW (accumulated) of each */
		{0, 1, Ntok, C, 3 * C, 0}, {1, 0, C, 3 * C, Ntok, 1},
		{0, 1, Ntok, C, C, 0}, {1, 0, C, C, Ntok, 1},
		{0, 1, Ntok, C, 4 * C, 0}, {1, 0, C, 4 * C, Ntok, 1},
		{0, 1, Ntok, 4 * C, C, 0}, {1, 0, 4 * C, C, Ntok, 1},
	};
	shape head[] = {{0, 1, Ntok, V, C, 0},
			{0, 0, Ntok, C, V, 0},
			{1, 0, V, C, Ntok, 1}};
	/* attention per (b, h): q k^T, att v; backward four of them */
	shape att[] = {{0, 1, T, T, hs, 0}, {0, 0, T, hs, T, 0},
		       {0, 1, T, T, hs, 0}, {1, 0, T, hs, T, 0},
		       {0, 0, T, hs, T, 0}, {1, 0, T, hs, T, 0}};
	double fl = 0;
#define RUN(sh)                                                                \
	do {                                                                   \
		const shape *x = &(sh);                                        \
		cblas_sgemm(CblasRowMajor, x->ta ? CblasTrans : CblasNoTrans,  \
			    x->tb ? CblasTrans : CblasNoTrans, x->M, x->N,     \
			    x->K, 1.0f, r->a, x->ta ? x->M : x->K, r->b,       \
			    x->tb ? x->K : x->N, (float)x->beta, r->c, x->N);  \
		fl += 2.0 * x->M * x->N * x->K;                                \
	} while (0)
	for (int l = 0; l < r->L; l++) {
		for (size_t i = 0; i < GK_ARRAY_SIZE(s); i++)
			RUN(s[i]);
		for (int k = 0; k < r->B * r->NH; k++)
			for (size_t i = 0; i < GK_ARRAY_SIZE(att); i++)
				RUN(att[i]);
	}
	for (size_t i = 0; i < GK_ARRAY_SIZE(head); i++)
		RUN(head[i]);
#undef RUN
	return fl;
}

int main(int argc, char **argv)
{
	if (argc < 9) {
		fprintf(stderr, "usage: nn L C NH T B V THREADS STEPS "
			"[none|gelu|layer]\n");
		return 2;
	}
	int v[8];
	gk_err err = {0};
	for (int i = 0; i < 8; i++)
		if (gk_parse_int(argv[i + 1], 1, 1 << 24, &v[i], "argument",
				 &err) < 0) {
			fprintf(stderr, "nn: %s\n", err.msg);
			return 2;
		}
	gk_nn_recompute rc = GK_NN_RECOMPUTE_NONE;
	if (argc > 9)
		rc = strcmp(argv[9], "gelu") == 0    ? GK_NN_RECOMPUTE_GELU
		     : strcmp(argv[9], "layer") == 0 ? GK_NN_RECOMPUTE_LAYER
						     : GK_NN_RECOMPUTE_NONE;
	gk_nn_config c = {.layers = v[0], .hidden = v[1], .heads = v[2],
			  .positions = v[3], .vocab = v[5], .ln_eps = 1e-5f};
	gk_nn_opts o = {.batch = v[4], .seq = v[3], .threads = v[6],
			.recompute = rc};
	int steps = v[7], B = v[4], T = v[3], V = v[5];
	gk_nn_model *m;
	if (gk_nn_new(&m, &c, &o, &err) < 0) {
		fprintf(stderr, "nn: %s\n", err.msg);
		return 1;
	}
	gk_nn_init(m, 1);
	size_t np = gk_nn_nparams(m);
	/* the optimizer state as gpu-train allocates it */
	float *mo = gk_alloc_big(np * 4), *vo = gk_alloc_big(np * 4);
	size_t ndata = 1 << 20;
	int32_t *data = malloc(ndata * sizeof(int32_t));
	for (size_t i = 0; i < ndata; i++)
		data[i] = (int32_t)(next() % (uint64_t)V);
	int32_t *x = malloc((size_t)B * T * 4), *y = malloc((size_t)B * T * 4);
	gk_nn_adamw ac = {0.9f, 0.95f, 1e-8f, 0.1f};
	double fl = gk_nn_flops(m), sfl = 0;
	double *t = malloc((steps + 1) * sizeof(double));
	double *ct = malloc((steps + 1) * sizeof(double));
	double *st = malloc((steps + 1) * sizeof(double));
	double *sct = malloc((steps + 1) * sizeof(double));
	float loss = 0;
	for (int s = 0; s <= steps; s++) { /* step 0: warm-up, not timed */
		for (int b = 0; b < B; b++) {
			size_t at = next() % (ndata - T - 1);
			memcpy(x + b * T, data + at, T * 4);
			memcpy(y + b * T, data + at + 1, T * 4);
		}
		double t0 = gk_now(), c0 = cpu_now();
		gk_nn_zero_grad(m);
		if (gk_nn_forward(m, x, y, &loss, &err) < 0 ||
		    gk_nn_backward(m, 1.0f, NULL, NULL, &err) < 0) {
			fprintf(stderr, "nn: %s\n", err.msg);
			return 1;
		}
		gk_nn_adamw_step(m, &ac, 1e-3f, s + 1, 0, np, gk_nn_params(m),
				 gk_nn_grads(m), 1.0f, mo, vo);
		t[s] = gk_now() - t0;
		ct[s] = cpu_now() - c0;
	}
	/* the ceiling: OpenBLAS with its own threads at these shapes, as
	 * many times (the first not counted). Not one after each step:
	 * with 2 threads, each side's pool would still be spinning when
	 * the other's starts. */
	replay rp;
	replay_init(&rp, v[0], v[1], V, B * T, T, v[2], B);
	openblas_set_num_threads(v[6]);
	for (int s = 0; s <= steps; s++) {
		double t0 = gk_now(), c0 = cpu_now();
		sfl = replay_step(&rp);
		st[s] = gk_now() - t0;
		sct[s] = cpu_now() - c0;
	}
	qsort(t + 1, steps, sizeof(double), cmp);
	qsort(ct + 1, steps, sizeof(double), cmp);
	qsort(st + 1, steps, sizeof(double), cmp);
	qsort(sct + 1, steps, sizeof(double), cmp);
	int mid = 1 + steps / 2;
	double med = t[mid], best = t[1], cmed = ct[mid];
	gk_nn_mem mem;
	gk_nn_memory(m, &mem);
	/* cpu_*: per CPU second of all threads, times the threads */
	int nt = v[6];
	printf("tok_s=%.0f gflops=%.1f sgemm_gflops=%.1f best_gflops=%.1f "
	       "sgemm_best_gflops=%.1f step_ms=%.2f min_ms=%.2f "
	       "cpu_tok_s=%.0f cpu_gflops=%.1f cpu_sgemm_gflops=%.1f "
	       "loss=%.4f mem_mib=%.1f blas_core=%s\n",
	       B * T / med, fl / med / 1e9, sfl / st[mid] / 1e9,
	       fl / best / 1e9, sfl / st[1] / 1e9, med * 1e3, best * 1e3,
	       B * T / cmed * nt, fl / cmed / 1e9 * nt,
	       sfl / sct[mid] / 1e9 * nt, loss,
	       (mem.parameters + mem.gradients + mem.activations +
		mem.workspace) / 1048576.0,
	       openblas_get_corename());
	gk_nn_free(m);
	return 0;
}
