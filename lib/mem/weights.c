/*
 * weights.c - a model's exact parameter count and dtypes from a checkpoint:
 * whatever gk_ckpt_open accepts (a safetensors file, a Hugging Face index,
 * a directory of either, a training step directory or its root). Counting
 * needs only the headers, and one validating reader serves every tool;
 * row slices of rank shards count as the whole tensor they form.
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "mem/mem.h"

/*
 * Integer and bool tensors are never trained: masks, position ids. The
 * small float formats (F8, F6, F4) hold weights, and count.
 */
static int int_or_bool(gk_dtype dt)
{
	switch (dt) {
	case GK_DT_BOOL: case GK_DT_U8: case GK_DT_I8: case GK_DT_I16:
	case GK_DT_U16: case GK_DT_I32: case GK_DT_U32: case GK_DT_I64:
	case GK_DT_U64:
		return 1;
	default:
		return 0;
	}
}

/* "model.layers.12.mlp..." or "transformer.h.3.attn..." -> 12, 3; else -1. */
static long layer_index(const char *name)
{
	static const char *marks[] = {".layers.", ".h.", "layers.", "h."};
	for (size_t i = 0; i < GK_ARRAY_SIZE(marks); i++) {
		const char *p = strstr(name, marks[i]);
		if (!p || (i >= 2 && p != name))
			continue;
		p += strlen(marks[i]);
		char *end;
		long v = strtol(p, &end, 10);
		if (end != p && *end == '.' && v >= 0 && v < 1000000)
			return v;
	}
	return -1;
}

int gk_mem_model_from_safetensors(gk_mem_model *m, const char *path,
				  gk_err *err)
{
	memset(m, 0, sizeof(*m));
	m->arch = GK_MEM_ARCH_PARAMS;
	gk_ckpt_set *s;
	char *in[] = {(char *)path};
	if (gk_ckpt_open(&s, in, 1, err))
		return -1;
	uint64_t *layer = NULL;
	size_t nlayer = 0, cap = 0;
	int rc = -1;
	for (size_t i = 0; i < s->n; i++) {
		const gk_ckpt_entry *e = &s->e[i];
		uint64_t n = 1;
		for (int d = 0; d < e->ndim; d++)
			n *= e->shape[d]; /* bounded: gk_ckpt_open sized it */
		if (gk_ckpt_is_buffer(e->name) || int_or_bool(e->dtype)) {
			m->left_out++;
			m->left_out_elems += n;
			continue;
		}
		if (gk_add_overflow(m->params, n, &m->params)) {
			gk_errf(err, "checkpoint '%s': parameter count overflows",
				path);
			goto out;
		}
		m->dtype_params[e->dtype] += n;
		/* Adafactor keeps row and column statistics of matrices. */
		m->factored += e->ndim == 2 ? e->shape[0] + e->shape[1] : n;
		if (n > m->largest)
			m->largest = n;
		long li = layer_index(e->name);
		if (li >= 0 && (size_t)li >= nlayer) {
			if (GK_GROW(layer, cap, (size_t)li + 1, "checkpoint layers",
				    err) < 0)
				goto out;
			memset(layer + nlayer, 0, ((size_t)li + 1 - nlayer) *
			       sizeof(*layer));
			nlayer = (size_t)li + 1;
		}
		if (li >= 0)
			layer[li] += n;
	}
	if (m->params == 0) {
		if (!s->n)
			gk_errf(err, "checkpoint '%s': no tensors", path);
		else
			gk_errf(err, "checkpoint '%s': no parameters (every tensor is empty%s)",
				path, m->left_out ? ", a buffer or not floating point" : "");
		goto out;
	}
	uint64_t best = 0;
	for (int d = 0; d < GK_DT_COUNT; d++)
		if (m->dtype_params[d] > best) {
			best = m->dtype_params[d];
			m->dtype = d;
		}
	for (size_t i = 0; i < nlayer; i++)
		if (layer[i] > m->layer_params)
			m->layer_params = layer[i];
	m->layers = (int64_t)nlayer;
	rc = gk_mem_model_finish(m, err);
out:
	free(layer);
	gk_ckpt_close(s);
	return rc;
}

int gk_mem_model_add_checkpoint(gk_mem_model *m, const char *path,
				gk_err *err)
{
	gk_mem_model st;
	if (gk_mem_model_from_safetensors(&st, path, err))
		return -1;
	if (m->arch != GK_MEM_ARCH_PARAMS && m->params != st.params)
		return gk_errf(err, "checkpoint '%s': %llu parameters, but the "
			       "architecture has %llu", path,
			       (unsigned long long)st.params,
			       (unsigned long long)m->params);
	/* the checkpoint knows more than a bare count: its layers, dtypes */
	if (m->arch == GK_MEM_ARCH_PARAMS)
		*m = st;
	memcpy(m->dtype_params, st.dtype_params, sizeof(m->dtype_params));
	m->dtype = st.dtype;
	m->left_out = st.left_out;
	m->left_out_elems = st.left_out_elems;
	return 0;
}
