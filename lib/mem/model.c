/*
 * model.c - transformer architectures and their exact parameter counts,
 * from a shape or from a Hugging Face config.json (read by lib/hf).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"
#include "mem/mem.h"

static const char *arch_names[] = {"params", "gpt2", "llama", "neox"};

const char *gk_mem_arch_name(gk_mem_arch a)
{
	return (unsigned)a < GK_ARRAY_SIZE(arch_names) ? arch_names[a] : "?";
}

int gk_mem_arch_parse(const char *s)
{
	for (size_t i = 1; i < GK_ARRAY_SIZE(arch_names); i++)
		if (strcmp(s, arch_names[i]) == 0)
			return (int)i;
	return -1;
}

/*
 * The bound on a parameter count. The shape's are lib/hf's (GK_HF_MAX_*),
 * low enough that every product below stays in uint64.
 */
#define MAX_PARAMS 100000000000000ULL /* 1e14 */

/* lib/hf's name of an architecture; anything else counts as NeoX does. */
static gk_hf_arch hf_arch(gk_mem_arch a)
{
	return a == GK_MEM_ARCH_GPT2 ? GK_HF_GPT2 :
	       a == GK_MEM_ARCH_LLAMA ? GK_HF_LLAMA : GK_HF_NEOX;
}

/*
 * lib/hf's shape rules on m's fields, and the fields they derive
 * (kv_heads, ffn, head_dim) back into m.
 */
static int check_shape(gk_mem_model *m, gk_err *err)
{
	gk_hf_config c = {.arch = hf_arch(m->arch), .layers = m->layers,
			  .hidden = m->hidden, .heads = m->heads,
			  .kv_heads = m->kv_heads, .ffn = m->ffn,
			  .head_dim = m->head_dim, .vocab = m->vocab,
			  .positions = m->positions};
	if (gk_hf_config_finish(&c, err))
		return -1;
	m->kv_heads = c.kv_heads;
	m->ffn = c.ffn;
	m->head_dim = c.head_dim;
	return 0;
}

int gk_mem_model_finish(gk_mem_model *m, gk_err *err)
{
	if (m->arch == GK_MEM_ARCH_PARAMS) {
		if (m->params == 0 || m->params > MAX_PARAMS)
			return gk_errf(err, "parameter count '%llu': must be in "
				       "1..%llu", (unsigned long long)m->params,
				       MAX_PARAMS);
		return 0;
	}
	if (check_shape(m, err))
		return -1;

	uint64_t h = m->hidden, f = m->ffn, V = m->vocab, P = m->positions;
	uint64_t q = m->heads * m->head_dim, kv = m->kv_heads * m->head_dim;
	uint64_t attn, mlp, norms, bias = 0, repl, fact, largest;
	if (m->arch == GK_MEM_ARCH_LLAMA) {
		/* q, k, v, o; gate, up, down; two RMSNorm weights */
		attn = h * q + 2 * h * kv + q * h;
		mlp = 3 * h * f;
		norms = 2 * h;
		if (m->bias) /* attention_bias: q k v o */
			bias += q + 2 * kv + h;
		repl = norms + (m->bias ? h : 0);
		fact = (h + q) + 2 * (h + kv) + (q + h) + 3 * (h + f) + norms;
		largest = h * f > h * q ? h * f : h * q;
		m->norm_params = h;
		m->embed_repl = 0;
	} else {
		/* c_attn (h, 3h) + b, c_proj (h, h) + b, c_fc (h, f) + b,
		 * c_proj (f, h) + b, two LayerNorms (weight, bias) */
		attn = h * q + 2 * h * kv + q * h;
		mlp = 2 * h * f;
		norms = 4 * h;
		bias = (m->bias ? q + 2 * kv + h : 0) + f + h;
		repl = norms + (m->bias ? h : 0) + h;
		fact = (h + q + 2 * kv) + (q + h) + (h + f) + (f + h) + norms +
		       bias;
		largest = h * f + f;
		m->norm_params = 2 * h;
		m->embed_repl = m->arch == GK_MEM_ARCH_GPT2 ? P * h : 0;
	}
	m->layer_params = attn + mlp + norms + bias;
	m->layer_repl = repl;
	m->embed_params = V * h + m->embed_repl;
	m->head_params = m->tied ? 0 : V * h;
	if (V * h > largest)
		largest = V * h;
	m->largest = largest;
	m->factored = (uint64_t)m->layers * fact + (V + h) +
		      (m->embed_repl ? P + h : 0) + m->norm_params +
		      (m->tied ? 0 : V + h);
	m->params = m->embed_params + (uint64_t)m->layers * m->layer_params +
		    m->norm_params + m->head_params;
	if (m->params > MAX_PARAMS)
		return gk_errf(err, "parameter count '%llu': more than %llu",
			       (unsigned long long)m->params, MAX_PARAMS);
	return 0;
}

int gk_mem_model_from_shape(gk_mem_model *m, gk_mem_arch arch, int tied,
			    int64_t seq, gk_err *err)
{
	if (arch != GK_MEM_ARCH_GPT2 && arch != GK_MEM_ARCH_LLAMA &&
	    arch != GK_MEM_ARCH_NEOX)
		return gk_errf(err, "architecture '%d': not gpt2, llama or neox",
			       (int)arch);
	if (!m->layers || !m->hidden || !m->heads)
		return gk_errf(err, "architecture %s: needs layers, hidden size "
			       "and heads", gk_mem_arch_name(arch));
	if (arch == GK_MEM_ARCH_LLAMA && !m->ffn)
		return gk_errf(err, "architecture llama: needs the MLP size "
			       "(intermediate_size)");
	m->arch = arch;
	/* biases and tying as config.json would imply them */
	gk_hf_config d;
	gk_hf_config_init(&d, hf_arch(arch));
	m->bias = d.bias;
	m->tied = tied >= 0 ? !!tied : d.tied;
	if (!m->vocab)
		m->vocab = GK_MEM_DEFAULT_VOCAB;
	/* a model trained at seq tokens has at least that many positions */
	if (!m->positions && arch == GK_MEM_ARCH_GPT2)
		m->positions = seq > 0 ? seq : GK_MEM_DEFAULT_POSITIONS;
	return gk_mem_model_finish(m, err);
}

/* ---- config.json ------------------------------------------------------------ */

static gk_mem_arch mem_arch(gk_hf_arch a)
{
	return a == GK_HF_GPT2 ? GK_MEM_ARCH_GPT2 :
	       a == GK_HF_LLAMA ? GK_MEM_ARCH_LLAMA : GK_MEM_ARCH_NEOX;
}

/* The model lib/hf read (its shape already checked), counted. */
static int from_hf(gk_mem_model *m, const gk_hf_config *c, const char *name,
		   gk_err *err)
{
	m->arch = mem_arch(c->arch);
	m->layers = c->layers;
	m->hidden = c->hidden;
	m->heads = c->heads;
	m->kv_heads = c->kv_heads;
	m->ffn = c->ffn;
	m->vocab = c->vocab;
	m->head_dim = c->head_dim;
	m->positions = c->positions;
	m->tied = c->tied;
	m->bias = c->bias;
	if (gk_mem_model_finish(m, err))
		return gk_err_prefix(err, "config '%s'", name);
	return 0;
}

int gk_mem_model_from_config_buf(gk_mem_model *m, const char *buf, size_t len,
				 const char *name, int allow_unknown,
				 gk_strlist *unknown, gk_err *err)
{
	gk_hf_config c;
	memset(m, 0, sizeof(*m));
	if (gk_hf_config_parse(&c, buf, len, name, allow_unknown, unknown, err))
		return -1;
	return from_hf(m, &c, name, err);
}

int gk_mem_model_from_config(gk_mem_model *m, const char *path,
			     int allow_unknown, gk_strlist *unknown,
			     gk_err *err)
{
	gk_hf_config c;
	memset(m, 0, sizeof(*m));
	if (gk_hf_config_load(&c, path, allow_unknown, unknown, err))
		return -1;
	return from_hf(m, &c, path, err);
}

int gk_mem_parse_count(const char *s, uint64_t *out, const char *what,
		       gk_err *err)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	double scale = 1;
	if (end == s || errno || !(v > 0))
		goto bad;
	switch (*end) {
	case 'k': case 'K': scale = 1e3; end++; break;
	case 'm': case 'M': scale = 1e6; end++; break;
	case 'b': case 'B': case 'g': case 'G': scale = 1e9; end++; break;
	case 't': case 'T': scale = 1e12; end++; break;
	}
	if (*end || v * scale > 1e15 || v * scale < 1)
		goto bad;
	*out = (uint64_t)(v * scale + 0.5);
	return 0;
bad:
	return gk_errf(err, "%s '%s': not a count from 1 to 1e15 (like "
		       "124439808, 124M, 7B, 1.5T)", what, s);
}
