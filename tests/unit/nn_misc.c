/*
 * nn_misc.c - the parts of lib/nn that need no Python: math.h against
 * double-precision formulas, config.json in and out (and mem-estimate's
 * reader of the same file), the parameter table against GPT-2's published
 * count, initialisation statistics, load errors, the schedules, the
 * gradient against finite differences of the loss, text in and out of a
 * model (bytes, ids, a tokenizer).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mem/mem.h"
#include "nn/math.h"
#include "nn/train.h"
#include "st/st.h"
#include "tap.h"
#include "tok/internal.h"

static double dgelu(double x)
{
	return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* d gelu_new / dx in double, by hand from the formula */
static double dgelu_grad(double x)
{
	double k = sqrt(2.0 / M_PI), u = k * (x + 0.044715 * x * x * x);
	double th = tanh(u);
	return 0.5 * (1 + th) +
	       0.5 * x * (1 - th * th) * k * (1 + 3 * 0.044715 * x * x);
}

static void math(void)
{
	/*
	 * At the float inputs, against double. The limits are absolute
	 * first: 1 + tanh(u) cancels for u near -3, so tanh's 3 ulp become
	 * ~7e-7 of gelu there (libm's tanhf gives 4.3e-7)
	 */
	double wg = 0, wd = 0;
	for (double x = -10; x <= 10; x += 1e-4) {
		float xf = (float)x;
		double r = dgelu(xf), d = dgelu_grad(xf);
		wg = fmax(wg, fabs(gk_nn_gelu(xf) - r) / (1e-6 + 1e-6 * fabs(r)));
		wd = fmax(wd, fabs(gk_nn_gelu_grad(xf) - d) /
				      (5e-6 + 1e-6 * fabs(d)));
	}
	ok(wg <= 1, "gelu_new within 1e-6 + 1e-6|ref| of double (%.2g of "
	   "the limit)", wg);
	ok(wd <= 1, "gelu_new' within 5e-6 + 1e-6|ref| of double (%.2g of "
	   "the limit)", wd);

	/* exp, against double over the range where the result is normal */
	double we = 0;
	for (double x = -87.3; x <= 88.7; x += 1e-4) {
		float xf = (float)x;
		double r = exp((double)xf);
		we = fmax(we, fabs(gk_nn_expf(xf) - r) / r);
	}
	ok(we <= 1e-7, "expf within 1e-7 relative of double (%.2g)", we);
	ok(gk_nn_expf(0.0f) == 1.0f && gk_nn_expf(-100.0f) == 0.0f &&
		   isinf(gk_nn_expf(100.0f)) && isnan(gk_nn_expf(NAN)) &&
		   gk_nn_expf(-87.33f) >= 0x1p-126f && gk_nn_expf(88.72f) < INFINITY,
	   "expf: 1 at 0, 0 below FLT_MIN, inf above FLT_MAX, NaN kept");

	/* softmax and logsumexp, with values that overflow a naive exp */
	float x[7] = {1000, 999, 998.5f, -5, 0, 1000, 3};
	float y[7];
	memcpy(y, x, sizeof(x));
	float lse = gk_nn_softmax_row(y, 7);
	double m = 1000, s = 0;
	for (int i = 0; i < 7; i++)
		s += exp(x[i] - m);
	double rlse = m + log(s);
	int good = fabs(lse - rlse) < 1e-4 &&
		   fabs(gk_nn_logsumexp(x, 7) - rlse) < 1e-4;
	for (int i = 0; i < 7; i++)
		good &= fabs(y[i] - exp(x[i] - rlse)) < 1e-6;
	ok(good, "softmax and logsumexp of large values match double");

	/* LayerNorm statistics of values far from 0: two passes */
	float r[64];
	double mu = 0, var = 0;
	for (int i = 0; i < 64; i++) {
		r[i] = 10000.0f + (float)((i * 37) % 11) * 0.01f;
		mu += r[i];
	}
	mu /= 64;
	for (int i = 0; i < 64; i++)
		var += (r[i] - mu) * (r[i] - mu);
	var /= 64;
	float fm, frs;
	gk_nn_ln_stats(r, 64, 1e-5f, &fm, &frs);
	double rrs = 1 / sqrt(var + 1e-5);
	ok(fabs(fm - mu) < 1e-3 && fabs(frs - rrs) < 1e-3 * rrs,
	   "LayerNorm rstd at mean 1e4 (%g, double %g)", frs, rrs);

	/* AdamW element against torch's formula in double */
	gk_nn_adamw_k k = {.one_m_b1 = 0.1f, .beta2 = 0.95f, .one_m_b2 = 0.05f,
			   .eps = 1e-8f};
	double lr = 1e-3, t = 3;
	k.step_size = (float)(lr / (1 - pow(0.9, t)));
	k.bc2_sqrt = (float)sqrt(1 - pow(0.95, t));
	float p = 0.5f, mm = 0.01f, vv = 0.002f, g = -0.3f;
	gk_nn_adamw_elem(&p, g, &mm, &vv, &k, (float)(1 - lr * 0.1));
	double dp = 0.5 * (1 - lr * 0.1), dm = 0.9 * 0.01 + 0.1 * g,
	       dv = 0.95 * 0.002 + 0.05 * g * g;
	dp -= lr / (1 - pow(0.9, t)) * dm /
	      (sqrt(dv) / sqrt(1 - pow(0.95, t)) + 1e-8);
	ok(fabs(p - dp) < 1e-7 && fabs(mm - dm) < 1e-8 && fabs(vv - dv) < 1e-9,
	   "AdamW element matches the double formula (%.9g, %.9g)", p, dp);
}

static void config(const char *top)
{
	char path[1024];
	gk_nn_config c;
	gk_err err = {0};
	snprintf(path, sizeof(path), "%s/tests/data/mem/gpt2.json", top);
	int rc = gk_nn_config_load(&c, path, &err);
	if (!ok(rc == 0, "GPT-2's config.json loads"))
		diag("%s", err.msg);
	ok(c.layers == 12 && c.hidden == 768 && c.heads == 12 &&
		   c.vocab == 50257 && c.positions == 1024 &&
		   c.vocab_pad == 50304 && c.ln_eps == 1e-5f,
	   "GPT-2's fields (vocab padded to %lld)", (long long)c.vocab_pad);

	char dir[] = "/tmp/gk-nn-misc-XXXXXX";
	if (!mkdtemp(dir))
		return;
	gk_nn_config o = {.layers = 3, .hidden = 48, .heads = 3, .vocab = 257,
			  .positions = 64, .ln_eps = 1e-6f};
	ok(gk_nn_config_finish(&o, &err) == 0 && o.vocab_pad == 384,
	   "byte vocab 257 pads to 384");
	snprintf(path, sizeof(path), "%s/config.json", dir);
	rc = gk_nn_config_save(&o, path, &err);
	gk_nn_config back;
	rc = rc ? rc : gk_nn_config_load(&back, path, &err);
	if (!ok(rc == 0 && memcmp(&back, &o, sizeof(o)) == 0,
		"config.json round trip"))
		diag("%s", err.msg);
	gk_mem_model mm;
	rc = gk_mem_model_from_config(&mm, path, 0, NULL, &err);
	if (!ok(rc == 0 && mm.layers == 3 && mm.hidden == 48 && mm.vocab == 257,
		"mem-estimate's reader takes our config.json, no unknown key"))
		diag("%s", err.msg);

	static const struct {
		const char *json, *msg;
	} bad[] = {
		{"{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":5,"
		 "\"vocab_size\":10,\"n_positions\":8}", "heads"},
		{"{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":3,"
		 "\"vocab_size\":10,\"n_positions\":8,\"activation_function\":"
		 "\"gelu\"}", "activation_function"},
		{"{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":3,"
		 "\"vocab_size\":10,\"n_positions\":8,"
		 "\"scale_attn_by_inverse_layer_idx\":true}",
		 "scale_attn_by_inverse_layer_idx"},
		{"{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":48,\"n_head\":3,"
		 "\"vocab_size\":10,\"n_positions\":8,\"n_inner\":100}", "n_inner"},
		{"{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":"
		 "48,\"num_attention_heads\":3,\"vocab_size\":10,"
		 "\"intermediate_size\":100}", "'llama': gpu-train builds gpt2 only"},
		{"{\"model_type\":\"bert\",\"num_hidden_layers\":2}",
		 "'bert': gpu-train builds gpt2 only"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(bad); i++) {
		FILE *f = fopen(path, "w");
		fputs(bad[i].json, f);
		fclose(f);
		gk_err_clear(&err);
		rc = gk_nn_config_load(&c, path, &err);
		ok(rc < 0 && strstr(err.msg, bad[i].msg) != NULL,
		   "refused config names '%s': %s", bad[i].msg, err.msg);
	}
	unlink(path);
	rmdir(dir);
}

static gk_nn_model *tiny(int L, int C, int NH, int V, int T, int B,
			 gk_nn_recompute r)
{
	/* GPT-2's 1024 positions for the 124M count; else just T */
	gk_nn_config c = {.layers = L, .hidden = C, .heads = NH, .vocab = V,
			  .positions = L == 12 ? 1024 : T, .ln_eps = 1e-5f};
	gk_nn_opts o = {.batch = B, .seq = T, .recompute = r, .threads = 2};
	gk_nn_model *m = NULL;
	gk_err err = {0};
	if (gk_nn_new(&m, &c, &o, &err) < 0)
		diag("%s", err.msg);
	return m;
}

static void table(void)
{
	/* GPT-2 124M: sum(p.numel()) of GPT2LMHeadModel is 124,439,808 */
	gk_nn_model *m = tiny(12, 768, 12, 50257, 8, 1, GK_NN_RECOMPUTE_NONE);
	if (!ok(m != NULL, "GPT-2 124M table"))
		return;
	size_t n, sum = 0, off = 0;
	const gk_nn_tensor *t = gk_nn_tensors(m, &n);
	int order = n == 4 + 12 * 12, decay = 1;
	for (size_t i = 0; i < n; i++) {
		sum += (size_t)t[i].shape[0] * (t[i].ndim == 2 ? t[i].shape[1] : 1);
		order &= t[i].off == off;
		off += t[i].numel;
		decay &= t[i].decay == (t[i].ndim == 2);
	}
	is_u64(sum, 124439808, "GPT-2 124M: published parameter count");
	is_u64(gk_nn_nparams(m), 124439808 + (50304 - 50257) * 768,
	       "flat buffer: the count plus wte's padded rows");
	ok(order && decay, "tensors contiguous in order; decay on 2-D only");
	is_str(t[0].name, "transformer.wte.weight", "first: wte");
	is_str(t[4].name, "transformer.h.0.attn.c_attn.weight", "h.0 c_attn");
	ok(t[4].shape[0] == 768 && t[4].shape[1] == 2304,
	   "c_attn is Conv1D (in, out) = (768, 2304)");
	is_str(t[n - 1].name, "transformer.ln_f.bias", "last: ln_f.bias");
	gk_nn_mem mem;
	gk_nn_memory(m, &mem);
	ok(mem.parameters >= gk_nn_nparams(m) * 4 &&
		   mem.parameters < gk_nn_nparams(m) * 4 + 64 &&
		   mem.gradients == mem.parameters,
	   "memory: parameters and gradients are the flat buffers");
	gk_nn_free(m);
}

static void init(void)
{
	gk_nn_model *a = tiny(4, 64, 4, 1000, 16, 1, GK_NN_RECOMPUTE_NONE);
	gk_nn_model *b = tiny(4, 64, 4, 1000, 16, 1, GK_NN_RECOMPUTE_NONE);
	if (!a || !b)
		return;
	gk_nn_init(a, 42);
	gk_nn_init(b, 42);
	size_t np = gk_nn_nparams(a), n;
	ok(memcmp(gk_nn_params(a), gk_nn_params(b), np * 4) == 0,
	   "init: same seed, same bits");
	gk_nn_init(b, 43);
	ok(memcmp(gk_nn_params(a), gk_nn_params(b), np * 4) != 0,
	   "init: another seed, other values");
	const gk_nn_tensor *t = gk_nn_tensors(a, &n);
	const float *p = gk_nn_params(a);
	int good = 1;
	for (size_t i = 0; i < n; i++) {
		size_t k = (size_t)t[i].shape[0] *
			   (t[i].ndim == 2 ? t[i].shape[1] : 1);
		const float *x = p + t[i].off;
		if (t[i].ndim == 1) {
			float want = strstr(t[i].name, ".weight") ? 1.0f : 0.0f;
			for (size_t j = 0; j < k; j++)
				good &= x[j] == want;
			continue;
		}
		double s = 0, s2 = 0;
		for (size_t j = 0; j < k; j++) {
			s += x[j];
			s2 += (double)x[j] * x[j];
		}
		double mean = s / k, sd = sqrt(s2 / k - mean * mean);
		double want = strstr(t[i].name, "c_proj.weight") ? 0.02 / sqrt(8.0)
								 : 0.02;
		/* the sample std of k normals is within 4/sqrt(2k) of std
		 * with probability 1 - 1e-4 */
		int g = fabs(sd - want) < want * 4 / sqrt(2.0 * k) &&
			fabs(mean) < 4 * want / sqrt((double)k);
		if (!g)
			diag("%s: mean %g std %g, want 0 and %g", t[i].name,
			     mean, sd, want);
		good &= g;
	}
	int pad = 1;
	for (size_t j = 1000 * 64; j < t[0].numel; j++)
		pad &= p[j] == 0.0f;
	ok(good, "init: N(0, 0.02), residual projections 0.02/sqrt(2L), "
	   "biases 0, LayerNorm weights 1");
	ok(pad, "init: padded wte rows are zero");
	gk_nn_free(a);
	gk_nn_free(b);
}

/* opts.flat_multiple: the flat buffers padded for ZeRO-1's in-place
 * collectives, the tail zero through init, a step and zero_grad */
static void flat_multiple(void)
{
	gk_nn_config c = {.layers = 1, .hidden = 16, .heads = 2, .vocab = 11,
			  .positions = 4, .ln_eps = 1e-5f};
	gk_err err = {0};
	gk_nn_model *m = NULL;
	gk_nn_opts bad = {.batch = 1, .seq = 4, .threads = 1, .flat_multiple = -3};
	ok(gk_nn_new(&m, &c, &bad, &err) < 0 && strstr(err.msg, "flat_multiple -3"),
	   "flat_multiple -3: refused (%s)", err.msg);
	int ks[] = {0, 1, 7, 1000};
	for (size_t i = 0; i < GK_ARRAY_SIZE(ks); i++) {
		gk_nn_opts o = {.batch = 1, .seq = 4, .threads = 1, .flat_multiple = ks[i]};
		if (!ok(gk_nn_new(&m, &c, &o, &err) == 0, "flat_multiple %d", ks[i])) {
			diag("%s", err.msg);
			continue;
		}
		size_t n = gk_nn_nparams(m), nf = gk_nn_nflat(m), k = ks[i] > 1 ? (size_t)ks[i] : 1;
		/* the least multiple of k at or above n */
		ok(nf % k == 0 && nf >= n && nf - n < k, "flat_multiple %d: %zu floats for %zu",
		   ks[i], nf, n);
		gk_nn_mem mem;
		gk_nn_memory(m, &mem);
		ok(mem.parameters >= nf * 4 && mem.gradients >= nf * 4,
		   "flat_multiple %d: the tail counted in memory", ks[i]);
		gk_nn_init(m, 5);
		int32_t tok[4] = {1, 2, 3, 4}, tgt[4] = {2, 3, 4, 5};
		float loss;
		float *p = gk_nn_params(m), *g = gk_nn_grads(m);
		int tail = 1, step = gk_nn_forward(m, tok, tgt, &loss, &err) == 0 &&
				     gk_nn_backward(m, 1.0f, NULL, NULL, &err) == 0;
		for (size_t j = n; j < nf; j++)
			tail &= p[j] == 0.0f && g[j] == 0.0f;
		gk_nn_zero_grad(m);
		for (size_t j = n; j < nf; j++)
			tail &= g[j] == 0.0f;
		ok(step && tail, "flat_multiple %d: the tail stays zero", ks[i]);
		gk_nn_free(m);
	}
}

/* The loss's gradient against central differences of the loss, in the
 * model's own float arithmetic: a few elements of every tensor. */
#ifndef FD_SCALE
#define FD_SCALE 1
#define FD_H 1e-3f
#endif
static void finite_differences(void)
{
	int B = 2, T = 5, V = 11;
	gk_nn_model *m = tiny(2, 8, 2, V, T, B, GK_NN_RECOMPUTE_NONE);
	if (!m)
		return;
	gk_nn_init(m, 7);
	size_t np = gk_nn_nparams(m), n;
	float *p = gk_nn_params(m);
	/* non-trivial biases and LayerNorm parameters, larger weights */
	for (size_t i = 0; i < np; i++)
		p[i] = p[i] * FD_SCALE + 0.1f * (float)((i * 7919) % 13) / 13.0f;
	const gk_nn_tensor *t = gk_nn_tensors(m, &n);
	for (size_t i = (size_t)V * 8; i < t[0].numel; i++)
		p[t[0].off + i] = 0; /* padded rows stay zero */
	int32_t tok[10] = {1, 5, 3, 10, 0, 7, 7, 2, 9, 4};
	int32_t tgt[10] = {5, 3, 10, 0, -1, 7, 2, 9, 4, 6};
	gk_err err = {0};
	float loss;
	gk_nn_forward(m, tok, tgt, &loss, &err);
	gk_nn_zero_grad(m);
	gk_nn_backward(m, 1.0f, NULL, NULL, &err);
	float *g = malloc(np * 4);
	memcpy(g, gk_nn_grads(m), np * 4);
	double worst = 0;
	int checked = 0;
	for (size_t i = 0; i < n; i++) {
		size_t k = (size_t)t[i].shape[0] *
			   (t[i].ndim == 2 ? t[i].shape[1] : 1);
		for (size_t j = 0; j < k; j += k / 3 + 1) {
			size_t at = t[i].off + j;
			float keep = p[at], h = FD_H, lp, lm;
			p[at] = keep + h;
			gk_nn_forward(m, tok, tgt, &lp, &err);
			p[at] = keep - h;
			gk_nn_forward(m, tok, tgt, &lm, &err);
			p[at] = keep;
			double fd = ((double)lp - lm) / (2 * h);
			/* float loss ~2e-7 absolute, over 2h: ~1e-4 */
			double e = fabs(fd - g[at]) / (5e-4 + 5e-3 * fabs(fd));
			if (e > worst) {
				worst = e;
				if (e > 1)
					diag("%s[%zu]: backward %g, differences %g",
					     t[i].name, j, g[at], fd);
			}
			checked++;
		}
	}
	ok(worst <= 1, "gradient of %d elements within 5e-4 + 5e-3|ref| of "
	   "central differences (%.2g of the limit)", checked, worst);
	free(g);

	/* bad tokens and targets are errors, not reads out of bounds */
	tok[3] = V;
	gk_err_clear(&err);
	ok(gk_nn_forward(m, tok, tgt, &loss, &err) < 0 &&
		   strstr(err.msg, "token 11"),
	   "token >= vocab refused: %s", err.msg);
	tok[3] = -2;
	ok(gk_nn_forward(m, tok, tgt, &loss, &err) < 0, "negative token refused");
	tok[3] = 1;
	tgt[0] = V;
	ok(gk_nn_forward(m, tok, tgt, &loss, &err) < 0, "target >= vocab refused");
	gk_nn_free(m);
}

static void load_errors(void)
{
	char dir[] = "/tmp/gk-nn-load-XXXXXX";
	if (!mkdtemp(dir))
		return;
	gk_nn_model *m = tiny(1, 16, 2, 300, 4, 1, GK_NN_RECOMPUTE_NONE);
	gk_nn_model *m2 = tiny(1, 16, 2, 300, 4, 1, GK_NN_RECOMPUTE_NONE);
	if (!m || !m2)
		return;
	gk_nn_init(m, 5);
	size_t n, np = gk_nn_nparams(m);
	const gk_nn_tensor *t = gk_nn_tensors(m, &n);
	gk_st_spec spec[32];
	const void *data[32];
	uint64_t shape[32][2];
	char names[32][64];
	uint16_t *bf = malloc(np * 2);
	gk_convert(bf, GK_DT_BF16, gk_nn_params(m), GK_DT_F32, np);
	char path[1024];
	snprintf(path, sizeof(path), "%s/model.safetensors", dir);
	gk_err err = {0};
	/* kind 0: bf16 without the "transformer." prefix; 1: one tensor
	 * missing; 2: a wrong shape; 3: an unknown tensor; 4: an untied head */
	for (int kind = 0; kind < 5; kind++) {
		size_t k = 0;
		for (size_t i = 0; i < n; i++) {
			if (kind == 1 && i == 5)
				continue;
			snprintf(names[k], 64, "%s",
				 kind == 0 ? t[i].name + 12 : t[i].name);
			shape[k][0] = (uint64_t)t[i].shape[0];
			shape[k][1] = (uint64_t)t[i].shape[1];
			if (kind == 2 && i == 6)
				shape[k][0] = 8;
			spec[k] = (gk_st_spec){names[k], kind ? GK_DT_F32 : GK_DT_BF16,
					       t[i].ndim, shape[k]};
			data[k] = kind ? (const void *)(gk_nn_params(m) + t[i].off)
				       : (const void *)(bf + t[i].off);
			k++;
		}
		if (kind == 3 || kind == 4) {
			snprintf(names[k], 64, "%s", kind == 3 ? "transformer.h.1.ln_1.weight"
							      : "lm_head.weight");
			shape[k][0] = kind == 3 ? 16 : 300;
			shape[k][1] = 16;
			spec[k] = (gk_st_spec){names[k], GK_DT_F32, kind == 3 ? 1 : 2,
					       shape[k]};
			data[k] = gk_nn_params(m) + (kind == 3 ? 0 : 16);
			k++;
		}
		if (gk_st_save(path, spec, data, k, NULL, 0, &err) < 0) {
			ok(0, "save: %s", err.msg);
			continue;
		}
		gk_err_clear(&err);
		int rc = gk_nn_load(m2, path, &err);
		if (kind == 0) {
			float *want = malloc(np * 4);
			gk_convert(want, GK_DT_F32, bf, GK_DT_BF16, np);
			ok(rc == 0 && memcmp(want, gk_nn_params(m2), np * 4) == 0,
			   "BF16 checkpoint without the transformer. prefix "
			   "loads, converted exactly %s", err.msg);
			free(want);
			continue;
		}
		static const char *want[] = {NULL, "h.0.attn.c_attn.bias': missing",
					     "shape [8, 16]", "not a parameter",
					     "differs from wte"};
		ok(rc < 0 && strstr(err.msg, want[kind]),
		   "load refuses: %s", err.msg);
	}
	free(bf);
	unlink(path);
	rmdir(dir);
	gk_nn_free(m);
	gk_nn_free(m2);
}

static void schedules(void)
{
	gk_nn_sched s = {GK_NN_SCHED_COSINE, 1e-3, 1e-4, 10, 110};
	ok(fabs(gk_nn_lr(&s, 1) - 1e-4) < 1e-12 && fabs(gk_nn_lr(&s, 10) - 1e-3) < 1e-12,
	   "warmup: lr/warmup at step 1, lr at step warmup");
	ok(fabs(gk_nn_lr(&s, 60) - 5.5e-4) < 1e-12, "cosine: halfway is the mean");
	ok(fabs(gk_nn_lr(&s, 35) - (1e-4 + 0.5 * 9e-4 * (1 + cos(M_PI / 4)))) < 1e-12,
	   "cosine: a quarter of the way");
	ok(gk_nn_lr(&s, 110) == 1e-4 && gk_nn_lr(&s, 500) == 1e-4,
	   "cosine: min_lr at and after the end");
	s.kind = GK_NN_SCHED_LINEAR;
	ok(fabs(gk_nn_lr(&s, 35) - (1e-3 - 0.25 * 9e-4)) < 1e-12, "linear");
	s.kind = GK_NN_SCHED_CONSTANT;
	ok(gk_nn_lr(&s, 11) == 1e-3 && gk_nn_lr(&s, 1000) == 1e-3, "constant");
	int names = 1;
	for (int k = GK_NN_SCHED_COSINE; k <= GK_NN_SCHED_CONSTANT; k++)
		names &= gk_nn_sched_parse(gk_nn_sched_name(k)) == k;
	ok(names && gk_nn_sched_parse("step") == -1, "schedule names");
}

static void sumsq(void)
{
	size_t n = 1000003;
	float *g = malloc(n * 4);
	double ref = 0;
	for (size_t i = 0; i < n; i++) {
		g[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
		ref += (double)g[i] * g[i];
	}
	double a = gk_nn_sumsq(g, n);
	ok(fabs(a - ref) < 1e-9 * ref, "sumsq matches a double sum (%.12g)", a);
	free(g);
}

/*
 * The key/value-cache decoder against full forwards: the logits after each
 * prefix, position by position; greedy sampling (through the cache while
 * the history fits, then sliding windows) against a greedy loop of full
 * forwards written here; the cache's limits.
 */
static void decoding(void)
{
	enum { L = 2, C = 32, NH = 4, V = 61, T = 16, B = 3 };
	gk_nn_model *m = tiny(L, C, NH, V, T, B, GK_NN_RECOMPUTE_NONE);
	gk_err err = {0};
	gk_nn_decoder *d = NULL;
	if (!ok(m && gk_nn_decoder_new(&d, m, &err) == 0, "decoder%s%s",
		err.msg[0] ? ": " : "", err.msg))
		return;
	gk_nn_init(m, 5);
	int32_t tok[B * T];
	uint64_t r = 99;
	for (int i = 0; i < B * T; i++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		tok[i] = (int32_t)((r >> 33) % V);
	}
	ok(gk_nn_forward(m, tok, NULL, NULL, &err) == 0, "full forward");
	double worst = 0;
	int fails = 0;
	const float *lg = NULL, *first = NULL;
	float keep[V];
	for (int t = 0; t < T; t++) {
		if (gk_nn_decode(d, tok[t], &lg, &err) < 0) {
			fails++;
			break;
		}
		const float *ref = gk_nn_logits(m, 0, t);
		for (int v = 0; v < V; v++) {
			double e = fabs(lg[v] - ref[v]) / (1e-5 + 1e-5 * fabs(ref[v]));
			worst = e > worst ? e : worst;
		}
		if (t == 0)
			memcpy(keep, lg, sizeof(keep));
	}
	ok(fails == 0 && worst <= 1.0,
	   "decoded logits = forward's at each of %d positions within 1e-5 + 1e-5|ref| (worst %.3f of it)",
	   T, worst);
	ok(gk_nn_decoder_len(d) == T, "the cache holds %d positions", T);
	ok(gk_nn_decode(d, tok[0], &lg, &err) < 0 && strstr(err.msg, "all 16 positions"),
	   "past the positions: refused (%s)", err.msg);
	gk_nn_decoder_reset(d);
	ok(gk_nn_decode(d, 61, &lg, &err) < 0, "a token outside the vocabulary: refused (%s)",
	   err.msg);
	ok(gk_nn_decode(d, tok[0], &first, &err) == 0 && memcmp(first, keep, sizeof(keep)) == 0,
	   "after a reset, position 0 again: the same logits, bit for bit");
	gk_nn_decoder_free(d);

	/* greedy: the sampler against full forwards over the last T tokens */
	enum { N = 24 };
	int32_t got[N], want[N], hist[N + 1], row[B * T];
	hist[0] = V - 1;
	int len = 1, rc = 0;
	for (int i = 0; i < N && rc == 0; i++) {
		int f = len > T ? len - T : 0, w = len - f;
		for (int k = 0; k < B * T; k++)
			row[k] = V - 1;
		memcpy(row, hist + f, (size_t)w * sizeof(int32_t));
		rc = gk_nn_forward(m, row, NULL, NULL, &err);
		const float *x = gk_nn_logits(m, 0, w - 1);
		int best = 0;
		for (int v = 1; v < V; v++)
			if (x[v] > x[best])
				best = v;
		want[i] = best;
		hist[len++] = best;
	}
	ok(rc == 0 && gk_nn_sample(m, B, T, V - 1, N, 0.0, 0, 1, got, &err) == 0 &&
	   memcmp(got, want, sizeof(got)) == 0,
	   "greedy sampling: %d tokens (%d through the cache) = full forwards'", N, T);
	/* one window as a batch of one: row 0's logits of the full forward */
	ok(gk_nn_forward(m, tok, NULL, NULL, &err) == 0, "full forward again");
	float ref[V];
	memcpy(ref, gk_nn_logits(m, 0, T - 1), sizeof(ref));
	double ww = 0;
	const float *wl = NULL;
	int wrc = gk_nn_forward_window(m, tok, T, &wl, &err);
	for (int v = 0; wrc == 0 && v < V; v++)
		ww = fmax(ww, fabs(wl[v] - ref[v]) / (1e-5 + 1e-5 * fabs(ref[v])));
	ok(wrc == 0 && ww <= 1.0, "one window's forward = the batch forward's row 0 within "
	   "1e-5 + 1e-5|ref| (worst %.3f of it)", ww);
	err.msg[0] = 0;
	ok(gk_nn_backward(m, 1.0f, NULL, NULL, &err) < 0 && strstr(err.msg, "no forward"),
	   "no backward of a one-window forward (%s)", err.msg);
	ok(gk_nn_forward_window(m, tok, T + 1, &wl, &err) < 0 && strstr(err.msg, "not 1..16"),
	   "a window longer than seq: refused (%s)", err.msg);

	int32_t a[N], b[N];
	ok(gk_nn_sample(m, B, T, V - 1, N, 0.9, 10, 42, a, &err) == 0 &&
	   gk_nn_sample(m, B, T, V - 1, N, 0.9, 10, 42, b, &err) == 0 &&
	   memcmp(a, b, sizeof(a)) == 0, "top-k sampling: the same seed, the same tokens");
	gk_nn_free(m);
}

/* dir/name holding len bytes of text */
static void put_file(const char *dir, const char *name, const char *text, size_t len)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (f) {
		fwrite(text, 1, len, f);
		fclose(f);
	}
}

/*
 * Text in and out of a model (gk_nn_prompt_encode, gk_nn_sample_text):
 * bytes for the byte vocabulary, ids for another without a tokenizer, and
 * a tokenizer of the 256 byte tokens (id = byte) and "hi" (256) from the
 * merge "h i".
 */
static void text(void)
{
	gk_err err = {0};
	gk_nn_config c = {.vocab = GK_NN_BYTE_VOCAB};
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int32_t bytes[] = {'h', 'i', GK_NN_BYTE_EOT, 0xff};
	ok(gk_nn_sample_text(&c, NULL, bytes, 4, &buf, &len, &cap, &err) == 0 && len == 4 &&
	   !memcmp(buf, "hi\n\xff", 4), "the byte vocabulary: each byte as it is, end-of-text a newline");
	c.vocab = 300;
	len = 0;
	int32_t ids[] = {1, 22, 299};
	ok(gk_nn_sample_text(&c, NULL, ids, 3, &buf, &len, &cap, &err) == 0 && len == 8 &&
	   !memcmp(buf, "1 22 299", 8), "another vocabulary without a tokenizer: the ids");
	int32_t *p = NULL;
	ok(gk_nn_prompt_encode(&c, NULL, "hi", 2, &p, &err) < 0 && strstr(err.msg, "need a tokenizer"),
	   "a prompt for it: refused (%s)", err.msg);

	char dir[] = "/tmp/gk-nn-text-XXXXXX", v[8192], *q = v;
	ok(mkdtemp(dir) != NULL, "a directory for the tokenizer");
	*q++ = '{';
	for (int b = 0; b < 256; b++) {
		uint32_t cp = gk_tok_byte_cp((uint8_t)b);
		q += sprintf(q, "\"");
		if (cp == '"' || cp == '\\')
			q += sprintf(q, "\\%c", (char)cp);
		else if (cp < 0x80)
			*q++ = (char)cp;
		else
			q += sprintf(q, "\\u%04x", cp);
		q += sprintf(q, "\": %d, ", b);
	}
	q += sprintf(q, "\"hi\": 256}");
	put_file(dir, "vocab.json", v, (size_t)(q - v));
	put_file(dir, "merges.txt", "h i\n", 4);
	gk_tok *t = NULL;
	err.msg[0] = '\0';
	ok(gk_tok_open(&t, dir, &err) == 0, "open it%s%s", err.msg[0] ? ": " : "", err.msg);
	int n = t ? gk_nn_prompt_encode(&c, t, "hi hi!", 6, &p, &err) : -1;
	ok(n == 4 && p[0] == 256 && p[1] == ' ' && p[2] == 256 && p[3] == '!',
	   "a prompt through the tokenizer: hi, space, hi, !");
	free(p);
	p = NULL;
	gk_nn_config small = {.vocab = 256};
	ok(t && gk_nn_prompt_encode(&small, t, "hi", 2, &p, &err) < 0 &&
	   strstr(err.msg, "token 256 of the prompt is not in the model's vocabulary of 256"),
	   "an id past the model's vocabulary: refused (%s)", err.msg);
	len = 0;
	int32_t gen[] = {256, 299, '!'};
	ok(t && gk_nn_sample_text(&c, t, gen, 3, &buf, &len, &cap, &err) == 0 && len == 6 &&
	   !memcmp(buf, "hi\xef\xbf\xbd!", 6), "the sample's text; an id the tokenizer lacks as U+FFFD");
	gk_tok_close(t);
	free(buf);
	char path[600];
	snprintf(path, sizeof(path), "%s/vocab.json", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/merges.txt", dir);
	unlink(path);
	rmdir(dir);
}

int main(void)
{
	const char *top = getenv("GK_TOP") ? getenv("GK_TOP") : ".";
	math();
	config(top);
	table();
	init();
	flat_multiple();
	finite_differences();
	load_errors();
	schedules();
	sumsq();
	decoding();
	text();
	return done_testing();
}
