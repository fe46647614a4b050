/*
 * config.c - reading a Hugging Face config.json: the key tables of each
 * architecture, the dispatch on model_type, and the shape rules.
 */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hf/hf.h"

void gk_hf_config_init(gk_hf_config *c, gk_hf_arch arch)
{
	memset(c, 0, sizeof(*c));
	c->arch = arch;
	if (arch == GK_HF_NONE || arch == GK_HF_OTHER)
		return;
	/* GPT2Config, LlamaConfig (and MistralConfig), GPTNeoXConfig */
	c->tied = arch == GK_HF_GPT2;
	c->bias = arch != GK_HF_LLAMA;
	c->ln_eps = arch == GK_HF_LLAMA ? 1e-6 : 1e-5;
	snprintf(c->activation, sizeof(c->activation), "%s",
		 arch == GK_HF_GPT2 ? "gelu_new" :
		 arch == GK_HF_LLAMA ? "silu" : "gelu");
	c->scale_attn_weights = 1;
	c->scale_attn_by_inverse_layer_idx = 0;
}

/* ---- the shape rules ------------------------------------------------------- */

static int check_range(int64_t v, int64_t lo, int64_t hi, const char *what,
		       gk_err *err)
{
	if (v < lo || v > hi)
		return gk_errf(err, "%s '%lld': must be in %lld..%lld", what,
			       (long long)v, (long long)lo, (long long)hi);
	return 0;
}

int gk_hf_config_finish(gk_hf_config *c, gk_err *err)
{
	if (check_range(c->layers, 1, GK_HF_MAX_LAYERS, "layers", err) ||
	    check_range(c->hidden, 1, GK_HF_MAX_HIDDEN, "hidden size", err) ||
	    check_range(c->heads, 1, c->hidden, "attention heads", err) ||
	    check_range(c->vocab, 1, GK_HF_MAX_VOCAB, "vocabulary size", err) ||
	    check_range(c->positions, 0, GK_HF_MAX_POSITIONS, "positions", err))
		return -1;
	if (c->kv_heads == 0)
		c->kv_heads = c->heads;
	if (c->ffn == 0 && c->arch != GK_HF_LLAMA)
		c->ffn = 4 * c->hidden;
	if (check_range(c->kv_heads, 1, c->heads, "key/value heads", err) ||
	    check_range(c->ffn, 1, GK_HF_MAX_FFN, "MLP size", err) ||
	    check_range(c->head_dim, 0, GK_HF_MAX_HIDDEN, "head dimension", err))
		return -1;
	if (c->heads % c->kv_heads)
		return gk_errf(err, "key/value heads '%lld': must divide the "
			       "%lld attention heads", (long long)c->kv_heads,
			       (long long)c->heads);
	if (c->head_dim == 0) {
		if (c->hidden % c->heads)
			return gk_errf(err, "attention heads '%lld': must divide "
				       "the hidden size %lld",
				       (long long)c->heads, (long long)c->hidden);
		c->head_dim = c->hidden / c->heads;
	}
	if (c->arch == GK_HF_GPT2 && c->positions == 0)
		return gk_errf(err, "positions '0': GPT-2 learns a position "
			       "embedding and needs its size");
	return 0;
}

/* ---- the keys --------------------------------------------------------------- */

/*
 * How a key is read. The shape: REQ, OPT positive integers (OPT may be
 * null: the config class derives it); OPT_BOOL true or false. FALSE: a
 * feature no reader here builds, accepted only when off (false, null, an
 * empty object or list). STATED_NUM, STATED_STR, STATED_BOOL: keys that
 * leave the shapes alone, recorded as stated and never refused (hf.h).
 * IGNORE: no effect on the architecture.
 */
enum kind { REQ, OPT, OPT_BOOL, FALSE, STATED_NUM, STATED_STR, STATED_BOOL,
	    IGNORE };

typedef struct key {
	const char *name;
	enum kind kind;
	size_t off; /* offsetof(gk_hf_config, field) unless IGNORE or FALSE */
} key;

#define F(field) offsetof(gk_hf_config, field)

/*
 * Keys every transformers config may carry (PretrainedConfig and, before
 * transformers 5, its generation defaults): they describe training,
 * generation, fine-tuning heads or the file, not the architecture.
 * reference: transformers/configuration_utils.py (4.x and 5.x)
 */
#define COMMON_IGNORED                                                       \
	{"_name_or_path", IGNORE, 0}, {"architectures", IGNORE, 0},          \
	{"model_type", IGNORE, 0}, {"bos_token_id", IGNORE, 0},              \
	{"eos_token_id", IGNORE, 0}, {"pad_token_id", IGNORE, 0},            \
	{"sep_token_id", IGNORE, 0}, {"decoder_start_token_id", IGNORE, 0},  \
	{"initializer_range", IGNORE, 0}, {"torch_dtype", IGNORE, 0},        \
	{"dtype", IGNORE, 0}, {"transformers_version", IGNORE, 0},           \
	{"use_cache", IGNORE, 0},                                            \
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
	{"layer_norm_epsilon", STATED_NUM, F(ln_eps)},
	{"activation_function", STATED_STR, F(activation)},
	{"scale_attn_weights", STATED_BOOL, F(scale_attn_weights)},
	{"scale_attn_by_inverse_layer_idx", STATED_BOOL,
	 F(scale_attn_by_inverse_layer_idx)},
	/* GPT-2's activation is activation_function, not hidden_act */
	{"hidden_act", IGNORE, 0},
	{"n_ctx", IGNORE, 0},
	{"attn_pdrop", IGNORE, 0}, {"embd_pdrop", IGNORE, 0},
	{"resid_pdrop", IGNORE, 0},
	{"summary_activation", IGNORE, 0}, {"summary_first_dropout", IGNORE, 0},
	{"summary_proj_to_labels", IGNORE, 0}, {"summary_type", IGNORE, 0},
	{"summary_use_proj", IGNORE, 0}, {"task_specific_params", IGNORE, 0},
	{"output_past", IGNORE, 0},
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
	{"rms_norm_eps", STATED_NUM, F(ln_eps)},
	{"hidden_act", STATED_STR, F(activation)},
	{"pretraining_tp", IGNORE, 0},
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
	{"layer_norm_eps", STATED_NUM, F(ln_eps)},
	{"hidden_act", STATED_STR, F(activation)},
	{"rotary_emb_base", IGNORE, 0},
	{"rotary_pct", IGNORE, 0}, {"use_parallel_residual", IGNORE, 0},
	{"hidden_dropout", IGNORE, 0}, {"classifier_dropout", IGNORE, 0},
	COMMON_IGNORED, {NULL, 0, 0}};

static const struct {
	const char *model_type;
	gk_hf_arch arch;
	const key *keys;
} types[] = {
	{"gpt2", GK_HF_GPT2, gpt2_keys},
	{"llama", GK_HF_LLAMA, llama_keys},
	{"mistral", GK_HF_LLAMA, llama_keys}, /* Llama's shapes and keys */
	{"gpt_neox", GK_HF_NEOX, neox_keys},
};

static const key *find_key(const key *keys, const char *name)
{
	for (; keys->name; keys++)
		if (strcmp(keys->name, name) == 0)
			return keys;
	return NULL;
}

/*
 * One key's value into c. The stated kinds never fail: they record what
 * they cannot hold as NAN, "" or -1 (hf.h).
 */
static int read_key(gk_hf_config *c, const key *d, const char *k,
		    const json_t *v, const char *name, gk_err *err)
{
	char *field = (char *)c + d->off;
	switch (d->kind) {
	case IGNORE:
		return 0;
	case FALSE:
		/* pruned_heads: {} when none; the rest: false */
		if (json_is_false(v) || json_is_null(v) ||
		    (json_is_object(v) && !json_object_size(v)) ||
		    (json_is_array(v) && !json_array_size(v)))
			return 0;
		return gk_errf(err, "config '%s': key '%s': only false is "
			       "supported", name, k);
	case OPT_BOOL:
		if (!json_is_boolean(v))
			return gk_errf(err, "config '%s': key '%s': not true or "
				       "false", name, k);
		*(int *)field = json_is_true(v);
		return 0;
	case STATED_NUM:
		*(double *)field = json_is_number(v) ? json_number_value(v) : NAN;
		return 0;
	case STATED_STR:
		if (json_is_string(v) &&
		    strlen(json_string_value(v)) < GK_HF_NAME_MAX)
			strcpy(field, json_string_value(v));
		else
			field[0] = '\0';
		return 0;
	case STATED_BOOL:
		if (!json_is_null(v))
			*(int *)field = json_is_boolean(v) ? json_is_true(v) : -1;
		return 0;
	case REQ:
	case OPT:
		break;
	}
	if (json_is_null(v) && d->kind == OPT)
		return 0; /* n_inner: null means 4 * n_embd */
	if (!json_is_integer(v) || json_integer_value(v) <= 0)
		return gk_errf(err, "config '%s': key '%s': not a positive "
			       "integer", name, k);
	*(int64_t *)field = json_integer_value(v);
	return 0;
}

static int parse(gk_hf_config *c, json_t *j, const char *name,
		 int allow_unknown, gk_strlist *unknown, gk_err *err)
{
	if (!json_is_object(j))
		return gk_errf(err, "config '%s': not a JSON object", name);
	const json_t *t = json_object_get(j, "model_type");
	if (!t)
		return gk_errf(err, "config '%s': no 'model_type' key", name);
	if (!json_is_string(t))
		return gk_errf(err, "config '%s': key 'model_type': not a string",
			       name);
	const char *type = json_string_value(t);
	size_t i = 0;
	while (i < GK_ARRAY_SIZE(types) && strcmp(types[i].model_type, type))
		i++;
	gk_hf_config_init(c, i < GK_ARRAY_SIZE(types) ? types[i].arch : GK_HF_OTHER);
	snprintf(c->model_type, sizeof(c->model_type), "%s", type);
	if (c->arch == GK_HF_OTHER)
		return gk_errf(err, "config '%s': model_type '%s': not one of "
			       "gpt2, llama, mistral, gpt_neox", name, type);
	const key *keys = types[i].keys;

	const char *k;
	json_t *v;
	json_object_foreach(j, k, v) {
		const key *d = find_key(keys, k);
		if (d) {
			if (read_key(c, d, k, v, name, err))
				return -1;
			continue;
		}
		if (!allow_unknown)
			return gk_errf(err, "config '%s': unknown key '%s' for "
				       "model_type '%s'", name, k, type);
		if (unknown && gk_strlist_push(unknown, k, err))
			return -1;
	}
	for (const key *d = keys; d->name; d++)
		if (d->kind == REQ && !json_object_get(j, d->name))
			return gk_errf(err, "config '%s': missing key '%s' for "
				       "model_type '%s'", name, d->name, type);
	if (gk_hf_config_finish(c, err))
		return gk_err_prefix(err, "config '%s'", name);
	return 0;
}

int gk_hf_config_parse(gk_hf_config *c, const char *buf, size_t len,
		       const char *name, int allow_unknown, gk_strlist *unknown,
		       gk_err *err)
{
	gk_hf_config_init(c, GK_HF_NONE);
	json_t *j = gk_json_load_buf(buf, len, name, err);
	if (!j)
		return -1;
	int rc = parse(c, j, name, allow_unknown, unknown, err);
	json_decref(j);
	return rc;
}

int gk_hf_config_load(gk_hf_config *c, const char *path, int allow_unknown,
		      gk_strlist *unknown, gk_err *err)
{
	char *buf;
	size_t len;
	gk_hf_config_init(c, GK_HF_NONE);
	if (gk_read_file(path, 16 << 20, &buf, &len, err))
		return -1;
	int rc = gk_hf_config_parse(c, buf, len, path, allow_unknown, unknown,
				    err);
	free(buf);
	return rc;
}
