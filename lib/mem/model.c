/*
 * model.c - transformer architectures, their exact parameter counts, and
 * reading them from Hugging Face config.json files.
 */
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

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
 * Bounds that keep every product below in uint64 (hidden^2 * 12 * layers
 * < 2^64) and still admit any model anyone trains.
 */
#define MAX_LAYERS 100000
#define MAX_HIDDEN 1000000
#define MAX_FFN 10000000
#define MAX_VOCAB 100000000
#define MAX_POS 100000000
#define MAX_PARAMS 100000000000000ULL /* 1e14 */

static int check_range(int64_t v, int64_t lo, int64_t hi, const char *what,
		       gk_err *err)
{
	if (v < lo || v > hi)
		return gk_errf(err, "%s '%lld': must be in %lld..%lld", what,
			       (long long)v, (long long)lo, (long long)hi);
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
	if (check_range(m->layers, 1, MAX_LAYERS, "layers", err) ||
	    check_range(m->hidden, 1, MAX_HIDDEN, "hidden size", err) ||
	    check_range(m->heads, 1, m->hidden, "attention heads", err) ||
	    check_range(m->vocab, 1, MAX_VOCAB, "vocabulary size", err) ||
	    check_range(m->positions, 0, MAX_POS, "positions", err))
		return -1;
	if (m->kv_heads == 0)
		m->kv_heads = m->heads;
	if (m->ffn == 0 && m->arch != GK_MEM_ARCH_LLAMA)
		m->ffn = 4 * m->hidden;
	if (check_range(m->kv_heads, 1, m->heads, "key/value heads", err) ||
	    check_range(m->ffn, 1, MAX_FFN, "MLP size", err) ||
	    check_range(m->head_dim, 0, MAX_HIDDEN, "head dimension", err))
		return -1;
	if (m->heads % m->kv_heads)
		return gk_errf(err, "key/value heads '%lld': must divide the "
			       "%lld attention heads", (long long)m->kv_heads,
			       (long long)m->heads);
	if (m->head_dim == 0) {
		if (m->hidden % m->heads)
			return gk_errf(err, "attention heads '%lld': must divide "
				       "the hidden size %lld",
				       (long long)m->heads, (long long)m->hidden);
		m->head_dim = m->hidden / m->heads;
	}
	if (m->arch == GK_MEM_ARCH_GPT2 && m->positions == 0)
		return gk_errf(err, "positions '0': GPT-2 learns a position "
			       "embedding and needs its size");

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
	/* GPT2Config, LlamaConfig, GPTNeoXConfig defaults */
	m->bias = arch != GK_MEM_ARCH_LLAMA;
	m->tied = tied >= 0 ? !!tied : arch == GK_MEM_ARCH_GPT2;
	if (!m->vocab)
		m->vocab = GK_MEM_DEFAULT_VOCAB;
	/* a model trained at seq tokens has at least that many positions */
	if (!m->positions && arch == GK_MEM_ARCH_GPT2)
		m->positions = seq > 0 ? seq : GK_MEM_DEFAULT_POSITIONS;
	return gk_mem_model_finish(m, err);
}

/* ---- config.json ------------------------------------------------------------ */

/*
 * REQ, OPT: positive integers into the model (OPT may be null); OPT_BOOL:
 * true or false into the model; FALSE: a feature we do not count, accepted
 * only when off (false, null, an empty object or list); IGNORE: no effect
 * on the shapes.
 */
enum kind { REQ, OPT, OPT_BOOL, FALSE, IGNORE };

typedef struct key {
	const char *name;
	enum kind kind;
	size_t off; /* offsetof(gk_mem_model, field) for REQ/OPT/OPT_BOOL */
} key;

#define F(field) offsetof(gk_mem_model, field)

/*
 * Keys every transformers config may carry (PretrainedConfig and, before
 * transformers 5, its generation defaults): they describe training,
 * generation, fine-tuning heads or the file, not the shapes we count.
 * reference: transformers/configuration_utils.py (4.x and 5.x)
 */
#define COMMON_IGNORED                                                       \
	{"_name_or_path", IGNORE, 0}, {"architectures", IGNORE, 0},          \
	{"model_type", IGNORE, 0}, {"bos_token_id", IGNORE, 0},              \
	{"eos_token_id", IGNORE, 0}, {"pad_token_id", IGNORE, 0},            \
	{"sep_token_id", IGNORE, 0}, {"decoder_start_token_id", IGNORE, 0},  \
	{"initializer_range", IGNORE, 0}, {"torch_dtype", IGNORE, 0},        \
	{"dtype", IGNORE, 0}, {"transformers_version", IGNORE, 0},           \
	{"use_cache", IGNORE, 0}, {"hidden_act", IGNORE, 0},                 \
	{"rope_scaling", IGNORE, 0}, {"rope_theta", IGNORE, 0},              \
	{"rope_parameters", IGNORE, 0}, /* transformers 5: theta, scaling */ \
	{"attention_dropout", IGNORE, 0}, {"quantization_config", IGNORE, 0}, \
	{"output_hidden_states", IGNORE, 0}, {"output_attentions", IGNORE, 0}, \
	{"return_dict", IGNORE, 0}, {"torchscript", IGNORE, 0},              \
	{"use_bfloat16", IGNORE, 0}, {"tf_legacy_loss", IGNORE, 0},          \
	{"chunk_size_feed_forward", IGNORE, 0},                              \
	{"is_encoder_decoder", FALSE, 0}, {"is_decoder", IGNORE, 0},         \
	{"add_cross_attention", FALSE, 0}, {"cross_attention_hidden_size", IGNORE, 0}, \
	{"tie_encoder_decoder", IGNORE, 0}, {"pruned_heads", FALSE, 0},      \
	{"id2label", IGNORE, 0}, {"label2id", IGNORE, 0},                    \
	{"problem_type", IGNORE, 0}, {"finetuning_task", IGNORE, 0},         \
	{"num_labels", IGNORE, 0}, {"tokenizer_class", IGNORE, 0},           \
	{"prefix", IGNORE, 0}, {"task_specific_params", IGNORE, 0},          \
	{"max_length", IGNORE, 0}, {"min_length", IGNORE, 0},                \
	{"do_sample", IGNORE, 0}, {"early_stopping", IGNORE, 0},             \
	{"num_beams", IGNORE, 0}, {"num_beam_groups", IGNORE, 0},            \
	{"diversity_penalty", IGNORE, 0}, {"temperature", IGNORE, 0},        \
	{"top_k", IGNORE, 0}, {"top_p", IGNORE, 0}, {"typical_p", IGNORE, 0}, \
	{"repetition_penalty", IGNORE, 0}, {"length_penalty", IGNORE, 0},    \
	{"no_repeat_ngram_size", IGNORE, 0},                                 \
	{"encoder_no_repeat_ngram_size", IGNORE, 0},                         \
	{"bad_words_ids", IGNORE, 0}, {"num_return_sequences", IGNORE, 0},   \
	{"output_scores", IGNORE, 0}, {"return_dict_in_generate", IGNORE, 0}, \
	{"forced_bos_token_id", IGNORE, 0}, {"forced_eos_token_id", IGNORE, 0}, \
	{"remove_invalid_values", IGNORE, 0},                                \
	{"exponential_decay_length_penalty", IGNORE, 0},                     \
	{"suppress_tokens", IGNORE, 0}, {"begin_suppress_tokens", IGNORE, 0}

/* reference: transformers/models/gpt2/configuration_gpt2.py */
static const key gpt2_keys[] = {
	{"n_layer", REQ, F(layers)}, {"n_embd", REQ, F(hidden)},
	{"n_head", REQ, F(heads)}, {"vocab_size", REQ, F(vocab)},
	{"n_positions", REQ, F(positions)}, {"n_inner", OPT, F(ffn)},
	{"tie_word_embeddings", OPT_BOOL, F(tied)},
	{"n_ctx", IGNORE, 0}, {"activation_function", IGNORE, 0},
	{"attn_pdrop", IGNORE, 0}, {"embd_pdrop", IGNORE, 0},
	{"resid_pdrop", IGNORE, 0}, {"layer_norm_epsilon", IGNORE, 0},
	{"summary_activation", IGNORE, 0}, {"summary_first_dropout", IGNORE, 0},
	{"summary_proj_to_labels", IGNORE, 0}, {"summary_type", IGNORE, 0},
	{"summary_use_proj", IGNORE, 0}, {"task_specific_params", IGNORE, 0},
	{"scale_attn_weights", IGNORE, 0}, {"output_past", IGNORE, 0},
	{"scale_attn_by_inverse_layer_idx", IGNORE, 0},
	{"reorder_and_upcast_attn", IGNORE, 0},
	{"gradient_checkpointing", IGNORE, 0}, {"n_special", IGNORE, 0},
	{"predict_special_tokens", IGNORE, 0},
	COMMON_IGNORED, {NULL, 0, 0}};

/* reference: transformers/models/llama/configuration_llama.py (and mistral) */
static const key llama_keys[] = {
	{"num_hidden_layers", REQ, F(layers)}, {"hidden_size", REQ, F(hidden)},
	{"num_attention_heads", REQ, F(heads)}, {"vocab_size", REQ, F(vocab)},
	{"intermediate_size", REQ, F(ffn)},
	{"num_key_value_heads", OPT, F(kv_heads)},
	{"max_position_embeddings", OPT, F(positions)},
	{"head_dim", OPT, F(head_dim)},
	{"tie_word_embeddings", OPT_BOOL, F(tied)},
	{"attention_bias", OPT_BOOL, F(bias)},
	{"mlp_bias", FALSE, 0},
	{"rms_norm_eps", IGNORE, 0}, {"pretraining_tp", IGNORE, 0},
	{"sliding_window", IGNORE, 0}, {"max_window_layers", IGNORE, 0},
	{"use_sliding_window", IGNORE, 0},
	COMMON_IGNORED, {NULL, 0, 0}};

/* reference: transformers/models/gpt_neox/configuration_gpt_neox.py */
static const key neox_keys[] = {
	{"num_hidden_layers", REQ, F(layers)}, {"hidden_size", REQ, F(hidden)},
	{"num_attention_heads", REQ, F(heads)}, {"vocab_size", REQ, F(vocab)},
	{"intermediate_size", REQ, F(ffn)},
	{"max_position_embeddings", OPT, F(positions)},
	{"tie_word_embeddings", OPT_BOOL, F(tied)},
	{"attention_bias", OPT_BOOL, F(bias)},
	{"layer_norm_eps", IGNORE, 0}, {"rotary_emb_base", IGNORE, 0},
	{"rotary_pct", IGNORE, 0}, {"use_parallel_residual", IGNORE, 0},
	{"hidden_dropout", IGNORE, 0}, {"classifier_dropout", IGNORE, 0},
	COMMON_IGNORED, {NULL, 0, 0}};

static const key *find_key(const key *keys, const char *name)
{
	for (; keys->name; keys++)
		if (strcmp(keys->name, name) == 0)
			return keys;
	return NULL;
}

int gk_mem_model_from_config_buf(gk_mem_model *m, const char *buf, size_t len,
				 const char *name, int allow_unknown,
				 gk_strlist *unknown, gk_err *err)
{
	json_t *j = gk_json_load_buf(buf, len, name, err);
	if (!j)
		return -1;
	int rc = -1;
	const char *type;
	const key *keys;
	memset(m, 0, sizeof(*m));
	if (!json_is_object(j)) {
		gk_errf(err, "config '%s': not a JSON object", name);
		goto out;
	}
	json_t *t = json_object_get(j, "model_type");
	if (!t) {
		gk_errf(err, "config '%s': no 'model_type' key", name);
		goto out;
	}
	if (!json_is_string(t)) {
		gk_errf(err, "config '%s': key 'model_type': not a string", name);
		goto out;
	}
	type = json_string_value(t);
	if (strcmp(type, "gpt2") == 0) {
		m->arch = GK_MEM_ARCH_GPT2;
		keys = gpt2_keys;
		m->tied = 1; /* GPT2Config default */
		m->bias = 1;
	} else if (strcmp(type, "llama") == 0 || strcmp(type, "mistral") == 0) {
		m->arch = GK_MEM_ARCH_LLAMA;
		keys = llama_keys;
	} else if (strcmp(type, "gpt_neox") == 0) {
		m->arch = GK_MEM_ARCH_NEOX;
		keys = neox_keys;
		m->bias = 1; /* GPTNeoXConfig attention_bias default */
	} else {
		gk_errf(err, "config '%s': model_type '%s': not one of gpt2, "
			"llama, mistral, gpt_neox", name, type);
		goto out;
	}

	const char *k;
	json_t *v;
	json_object_foreach(j, k, v) {
		const key *d = find_key(keys, k);
		if (!d) {
			if (!allow_unknown) {
				gk_errf(err, "config '%s': unknown key '%s' for "
					"model_type '%s'", name, k, type);
				goto out;
			}
			if (unknown && gk_strlist_push(unknown, k, err))
				goto out;
			continue;
		}
		char *field = (char *)m + d->off;
		if (d->kind == IGNORE)
			continue;
		if (d->kind == FALSE) {
			/* pruned_heads: {} when none; the rest: false */
			if (json_is_false(v) || json_is_null(v) ||
			    (json_is_object(v) && !json_object_size(v)) ||
			    (json_is_array(v) && !json_array_size(v)))
				continue;
			gk_errf(err, "config '%s': key '%s': only false is "
				"supported", name, k);
			goto out;
		}
		if (d->kind == OPT_BOOL) {
			if (!json_is_boolean(v)) {
				gk_errf(err, "config '%s': key '%s': not true or "
					"false", name, k);
				goto out;
			}
			*(int *)field = json_is_true(v);
			continue;
		}
		if (json_is_null(v) && d->kind == OPT)
			continue; /* n_inner: null means 4 * n_embd */
		if (!json_is_integer(v) || json_integer_value(v) <= 0) {
			gk_errf(err, "config '%s': key '%s': not a positive "
				"integer", name, k);
			goto out;
		}
		*(int64_t *)field = json_integer_value(v);
	}
	for (const key *d = keys; d->name; d++)
		if (d->kind == REQ && !json_object_get(j, d->name)) {
			gk_errf(err, "config '%s': missing key '%s' for "
				"model_type '%s'", name, d->name, type);
			goto out;
		}
	if (gk_mem_model_finish(m, err)) {
		gk_err_prefix(err, "config '%s'", name);
		goto out;
	}
	rc = 0;
out:
	json_decref(j);
	return rc;
}

int gk_mem_model_from_config(gk_mem_model *m, const char *path,
			     int allow_unknown, gk_strlist *unknown,
			     gk_err *err)
{
	char *buf;
	size_t len;
	if (gk_read_file(path, 16 << 20, &buf, &len, err))
		return -1;
	int rc = gk_mem_model_from_config_buf(m, buf, len, path, allow_unknown,
					      unknown, err);
	free(buf);
	return rc;
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
