/*
 * hf.h - a transformer's architecture as its Hugging Face config.json
 * states it (prefix gk_hf_).
 *
 * Two modules read config.json: lib/mem, whose estimator counts the bytes
 * of any architecture below, and lib/nn, whose model is GPT-2 built from
 * the file it also writes. Neither owns the file. If lib/nn read it
 * through lib/mem, the model would depend on the memory estimator to know
 * its own shape; if each read it, the two would drift apart on the same
 * file. So the reading sits here, below both, on lib/core and jansson
 * only: the JSON, the model_type dispatch, each architecture's keys, the
 * policy on keys we do not know, and the rules any shape must meet.
 * What a reader then does with the shape (count its bytes, refuse what it
 * does not build) stays in that reader.
 *
 * reference: transformers/configuration_utils.py (the keys every config
 * may carry), models/gpt2/configuration_gpt2.py,
 * models/llama/configuration_llama.py, models/mistral/configuration_mistral.py,
 * models/gpt_neox/configuration_gpt_neox.py (each architecture's keys
 * and defaults).
 *
 * Errors: functions returning int give 0, or -1 with a message in err.
 * Nothing here prints or exits.
 */
#ifndef GK_HF_H
#define GK_HF_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

typedef enum gk_hf_arch {
	GK_HF_NONE,  /* no model_type read: a zeroed config, not JSON, ... */
	GK_HF_GPT2,  /* gpt2: 4h GeLU MLP, learned positions, biases, LayerNorm */
	GK_HF_LLAMA, /* llama, mistral: SwiGLU MLP, RoPE, RMSNorm, GQA */
	GK_HF_NEOX,  /* gpt_neox: GPT-2's blocks with RoPE, untied head */
	GK_HF_OTHER  /* a model_type this reader does not know (refused) */
} gk_hf_arch;

/* Room for a model_type or an activation name, with its terminating NUL. */
#define GK_HF_NAME_MAX 64

/*
 * Bounds on a shape, checked by gk_hf_config_finish: past any model
 * anyone trains, and low enough that a reader's products of them stay in
 * 64 bits (lib/mem's 12 * hidden^2 * layers is below 2^61).
 */
#define GK_HF_MAX_LAYERS 100000
#define GK_HF_MAX_HIDDEN 1000000
#define GK_HF_MAX_FFN 10000000
#define GK_HF_MAX_VOCAB 100000000
#define GK_HF_MAX_POSITIONS 100000000

/*
 * The architecture, under GPT-2's key names / Llama's and NeoX's. The
 * integers are as stated, 0 when a key is absent (or null, where the
 * config class derives the value) until gk_hf_config_finish derives them.
 */
typedef struct gk_hf_config {
	gk_hf_arch arch;
	/* as stated ("mistral" reads as GK_HF_LLAMA); cut at NAME_MAX - 1 */
	char model_type[GK_HF_NAME_MAX];
	int64_t layers;    /* n_layer / num_hidden_layers */
	int64_t hidden;    /* n_embd / hidden_size */
	int64_t heads;     /* n_head / num_attention_heads */
	int64_t kv_heads;  /* - / num_key_value_heads (Llama); derived: heads */
	int64_t ffn;       /* n_inner / intermediate_size (required for
			    * Llama and NeoX); derived: 4 * hidden, but not
			    * for Llama */
	int64_t head_dim;  /* - / head_dim (Llama); derived: hidden / heads */
	int64_t vocab;     /* vocab_size */
	int64_t positions; /* n_positions / max_position_embeddings: learned
			    * position embeddings (GPT-2, required) or the
			    * longest context (0: not stated) */
	/* as stated, else the config class's default */
	int tied; /* tie_word_embeddings (GPT-2 true, Llama and NeoX false) */
	int bias; /* the linear layers have biases: GPT-2 always; Llama's
		   * attention_bias (false), NeoX's (true) */
	/*
	 * Keys that leave the shapes alone, as stated, else the config class's
	 * default. They are never refused here: the estimator counts the same
	 * bytes whatever they say and the model refuses what it does not
	 * build. A value of another JSON type reads as NAN, "" or -1, which
	 * no reader builds.
	 */
	double ln_eps; /* layer_norm_epsilon / rms_norm_eps / layer_norm_eps
			* (1e-5, 1e-6, 1e-5); NAN: not a number, null included */
	/* activation_function / hidden_act / hidden_act ("gelu_new", "silu",
	 * "gelu"); "": not a string, or one too long to be a name */
	char activation[GK_HF_NAME_MAX];
	/* GPT-2's attention scaling, true / false elsewhere; null reads as
	 * not stated, -1: neither true, false nor null */
	int scale_attn_weights;              /* by 1/sqrt(head_dim) (true) */
	int scale_attn_by_inverse_layer_idx; /* also by 1/(layer + 1) (false) */
} gk_hf_config;

/*
 * Zero c and give it arch's config-class defaults (tied, bias, ln_eps,
 * activation, the attention scaling) and arch; GK_HF_NONE and GK_HF_OTHER
 * only zero the rest.
 * A reader that takes a shape from elsewhere (command-line flags) starts
 * here, so its defaults are the ones config.json would imply.
 */
void gk_hf_config_init(gk_hf_config *c, gk_hf_arch arch);

/*
 * The rules any shape meets, checked in this order, each failure naming
 * the value ("attention heads '5': must divide the hidden size 48"):
 * layers, hidden, heads (up to hidden), vocab in 1..their bound and
 * positions in 0..its bound; then kv_heads and ffn are derived when 0
 * (above); kv_heads in 1..heads, ffn in 1..its bound, head_dim in
 * 0..GK_HF_MAX_HIDDEN; kv_heads dividing heads; when head_dim is 0, heads
 * dividing hidden, and head_dim derived; GPT-2's positions not 0.
 * Messages have no "config" prefix: the caller says what it read.
 */
int gk_hf_config_finish(gk_hf_config *c, gk_err *err);

/*
 * The vocabulary as gpukit's trainer holds it: the rows of the embedding
 * and the tied LM head padded to whole tiles of GK_HF_VOCAB_TILE (llm.c's
 * padded vocabulary: whole SIMD and tensor-core tiles). lib/nn builds its
 * model by this rule and lib/mem prices it by the same one.
 */
#define GK_HF_VOCAB_TILE 128
static inline int64_t gk_hf_vocab_padded(int64_t vocab)
{
	return (vocab + GK_HF_VOCAB_TILE - 1) / GK_HF_VOCAB_TILE * GK_HF_VOCAB_TILE;
}

/*
 * Read a config.json from buf (len bytes; name is what messages call it)
 * into c: model_type gpt2, llama, mistral or gpt_neox, with its config
 * class's keys. Refused, each with its own message: JSON that does not
 * parse (duplicate keys included), not an object, no model_type or
 * another one, a required key missing, a shape key that is not a positive
 * integer or a boolean that is not true or false, a feature no reader
 * here builds that is not off (add_cross_attention, is_encoder_decoder,
 * pruned_heads, Llama's mlp_bias), and a key this reader does not know,
 * so that a config whose meaning we would guess is refused. With
 * allow_unknown the unknown keys are appended to *unknown instead (owned
 * by the caller; may be NULL). Then gk_hf_config_finish, its message
 * prefixed "config 'NAME'".
 *
 * On failure c->arch and c->model_type still say what the document gave
 * as model_type (GK_HF_NONE: none, or not a string), so a reader that
 * builds one architecture can name the one it was given instead.
 */
int gk_hf_config_parse(gk_hf_config *c, const char *buf, size_t len,
		       const char *name, int allow_unknown, gk_strlist *unknown,
		       gk_err *err);
/* The same from the file at path (at most 16 MiB). */
int gk_hf_config_load(gk_hf_config *c, const char *path, int allow_unknown,
		      gk_strlist *unknown, gk_err *err);

#endif
