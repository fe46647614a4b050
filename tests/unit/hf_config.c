/*
 * hf_config.c - Hugging Face config.json files read into the architecture
 * they state: the published configs of GPT-2, Llama 2, Mistral and Pythia
 * field by field (the values in the files, and transformers' config-class
 * defaults for what they leave out), the unknown-key policy, refused types
 * and model_types with their exact messages, the keys read as stated, and
 * the shape rules.
 */
#include <math.h>

#include "hf/hf.h"
#include "tap.h"

typedef struct want {
	const char *file, *model_type;
	gk_hf_arch arch;
	int64_t layers, hidden, heads, kv_heads, ffn, head_dim, vocab, positions;
	int tied, bias;
	double ln_eps;
	const char *activation;
} want;

static const want published[] = {
	/* GPT2Config: n_inner null -> 4 * n_embd, tie_word_embeddings true */
	{"gpt2.json", "gpt2", GK_HF_GPT2, 12, 768, 12, 12, 3072, 64, 50257,
	 1024, 1, 1, 1e-5, "gelu_new"},
	/* no biases (attention_bias false by default), untied head */
	{"llama-2-7b.json", "llama", GK_HF_LLAMA, 32, 4096, 32, 32, 11008, 128,
	 32000, 4096, 0, 0, 1e-5, "silu"},
	/* grouped-query attention: 8 key/value heads */
	{"mistral-7b.json", "mistral", GK_HF_LLAMA, 32, 4096, 32, 8, 14336, 128,
	 32000, 32768, 0, 0, 1e-5, "silu"},
	/* GPTNeoXConfig: attention_bias true */
	{"pythia-160m.json", "gpt_neox", GK_HF_NEOX, 12, 768, 12, 12, 3072, 64,
	 50304, 2048, 0, 1, 1e-5, "gelu"},
};

static void check_fields(const gk_hf_config *c, const want *w)
{
	char name[128];
	snprintf(name, sizeof(name), "%s: model_type", w->file);
	is_str(c->model_type, w->model_type, name);
	ok(c->arch == w->arch &&
	   c->layers == w->layers && c->hidden == w->hidden &&
	   c->heads == w->heads && c->kv_heads == w->kv_heads &&
	   c->ffn == w->ffn && c->head_dim == w->head_dim &&
	   c->vocab == w->vocab && c->positions == w->positions,
	   "%s: arch %d; %lld layers, hidden %lld, heads %lld (kv %lld, "
	   "dim %lld), ffn %lld, vocab %lld, positions %lld", w->file,
	   (int)c->arch, (long long)c->layers, (long long)c->hidden,
	   (long long)c->heads, (long long)c->kv_heads, (long long)c->head_dim,
	   (long long)c->ffn, (long long)c->vocab, (long long)c->positions);
	ok(c->tied == w->tied && c->bias == w->bias, "%s: tied %d, bias %d",
	   w->file, c->tied, c->bias);
	ok(c->ln_eps == w->ln_eps && strcmp(c->activation, w->activation) == 0 &&
	   c->scale_attn_weights == 1 && c->scale_attn_by_inverse_layer_idx == 0,
	   "%s: eps %g, activation '%s', attention scaled by 1/sqrt(d) only",
	   w->file, c->ln_eps, c->activation);
}

static void configs(const char *dir)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(published); i++) {
		char path[1024];
		snprintf(path, sizeof(path), "%s/%s", dir, published[i].file);
		gk_hf_config c;
		gk_err err = {0};
		/* unknown keys refused: every key of these files is known */
		if (!ok(gk_hf_config_load(&c, path, 0, NULL, &err) == 0,
			"%s loads", published[i].file))
			diag("%s", err.msg);
		check_fields(&c, &published[i]);
	}
}

static int parse(gk_hf_config *c, const char *json, int allow_unknown,
		 gk_strlist *unknown, gk_err *err)
{
	gk_err_clear(err);
	return gk_hf_config_parse(c, json, strlen(json), "x.json",
				  allow_unknown, unknown, err);
}

#define GPT2_MIN "\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 8, " \
		 "\"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4"
#define LLAMA_MIN "\"model_type\": \"llama\", \"num_hidden_layers\": 2, "      \
		  "\"hidden_size\": 8, \"num_attention_heads\": 2, "           \
		  "\"vocab_size\": 10, \"intermediate_size\": 24"
#define NEOX_MIN "\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, "    \
		 "\"hidden_size\": 8, \"num_attention_heads\": 2, "            \
		 "\"vocab_size\": 10, \"intermediate_size\": 24"

/* What the config classes give the keys a file leaves out. */
static void defaults(void)
{
	gk_hf_config c;
	gk_err err;
	ok(parse(&c, "{" GPT2_MIN ", \"n_inner\": null}", 0, NULL, &err) == 0 &&
	   c.ffn == 32 && c.kv_heads == 2 && c.head_dim == 4 && c.tied == 1 &&
	   c.bias == 1 && c.ln_eps == 1e-5 &&
	   strcmp(c.activation, "gelu_new") == 0 && c.scale_attn_weights == 1 &&
	   c.scale_attn_by_inverse_layer_idx == 0,
	   "gpt2: n_inner null is 4 * n_embd; tied, biases, 1e-5, gelu_new");
	ok(parse(&c, "{" LLAMA_MIN "}", 0, NULL, &err) == 0 && c.tied == 0 &&
	   c.bias == 0 && c.kv_heads == 2 && c.positions == 0 &&
	   c.ln_eps == 1e-6 && strcmp(c.activation, "silu") == 0,
	   "llama: untied, no biases, kv heads = heads, no positions, 1e-6, silu");
	ok(parse(&c, "{" LLAMA_MIN ", \"attention_bias\": true, \"head_dim\": 6,"
		 "\"rms_norm_eps\": 1e-5, \"hidden_act\": \"gelu\"}",
		 0, NULL, &err) == 0 && c.bias == 1 && c.head_dim == 6 &&
	   c.ln_eps == 1e-5 && strcmp(c.activation, "gelu") == 0,
	   "llama: attention_bias, head_dim (need not divide), eps, activation "
	   "as stated");
	ok(parse(&c, "{" NEOX_MIN "}", 0, NULL, &err) == 0 && c.tied == 0 &&
	   c.bias == 1 && c.ln_eps == 1e-5 && strcmp(c.activation, "gelu") == 0,
	   "gpt_neox: untied, biases, 1e-5, gelu");
	ok(parse(&c, "{" GPT2_MIN ", \"tie_word_embeddings\": false, "
		 "\"pruned_heads\": {}, \"add_cross_attention\": false}",
		 0, NULL, &err) == 0 && c.tied == 0,
	   "gpt2: untied as stated; features off are accepted");
}

/* Unknown keys are refused, or listed when allowed. */
static void unknown_keys(void)
{
	const char *j = "{" GPT2_MIN ", \"new_knob\": 1, \"other\": null}";
	gk_hf_config c;
	gk_err err;
	ok(parse(&c, j, 0, NULL, &err) < 0 &&
	   strcmp(err.msg, "config 'x.json': unknown key 'new_knob' for "
		  "model_type 'gpt2'") == 0,
	   "unknown key refused: %s", err.msg);
	gk_strlist unk = {0};
	ok(parse(&c, j, 1, &unk, &err) == 0 && unk.n == 2 &&
	   strcmp(unk.v[0], "new_knob") == 0 && strcmp(unk.v[1], "other") == 0 &&
	   c.layers == 2 && c.positions == 4,
	   "allowed: listed in file order, the rest read");
	gk_strlist_free(&unk);
	ok(parse(&c, j, 1, NULL, &err) == 0, "allowed without a list");
	/* a key of another architecture is unknown to this one */
	ok(parse(&c, "{" LLAMA_MIN ", \"n_layer\": 2}", 0, NULL, &err) < 0 &&
	   strstr(err.msg, "unknown key 'n_layer' for model_type 'llama'"),
	   "GPT-2's key in a llama config: %s", err.msg);
}

/* Each refusal with its exact message ("config 'x.json': " in front). */
static void refused(void)
{
	static const struct {
		const char *json, *msg;
	} cases[] = {
		{"[1]", "not a JSON object"},
		{"{\"n_layer\": 2}", "no 'model_type' key"},
		{"{\"model_type\": 2}", "key 'model_type': not a string"},
		{"{\"model_type\": \"t5\"}",
		 "model_type 't5': not one of gpt2, llama, mistral, gpt_neox"},
		{"{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_embd\": 768, "
		 "\"n_head\": 12, \"vocab_size\": 50257}",
		 "missing key 'n_positions' for model_type 'gpt2'"},
		{"{\"model_type\": \"llama\", \"hidden_size\": -4096}",
		 "key 'hidden_size': not a positive integer"},
		{"{\"model_type\": \"llama\", \"hidden_size\": 4096.5}",
		 "key 'hidden_size': not a positive integer"},
		{"{\"model_type\": \"llama\", \"hidden_size\": \"4096\"}",
		 "key 'hidden_size': not a positive integer"},
		{"{\"model_type\": \"gpt2\", \"n_layer\": null}",
		 "key 'n_layer': not a positive integer"},
		{"{\"model_type\": \"gpt2\", \"n_layer\": 0}",
		 "key 'n_layer': not a positive integer"},
		{"{\"model_type\": \"gpt2\", \"tie_word_embeddings\": 1}",
		 "key 'tie_word_embeddings': not true or false"},
		{"{\"model_type\": \"llama\", \"attention_bias\": null}",
		 "key 'attention_bias': not true or false"},
		{"{\"model_type\": \"gpt2\", \"add_cross_attention\": true}",
		 "key 'add_cross_attention': only false is supported"},
		{"{\"model_type\": \"gpt2\", \"pruned_heads\": {\"0\": [1]}}",
		 "key 'pruned_heads': only false is supported"},
		{"{\"model_type\": \"llama\", \"mlp_bias\": true}",
		 "key 'mlp_bias': only false is supported"},
		/* the shape rules, after every key was read */
		{"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 8, "
		 "\"n_head\": 3, \"vocab_size\": 10, \"n_positions\": 4}",
		 "attention heads '3': must divide the hidden size 8"},
		{"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 8, "
		 "\"n_head\": 16, \"vocab_size\": 10, \"n_positions\": 4}",
		 "attention heads '16': must be in 1..8"},
		{"{\"model_type\": \"gpt2\", \"n_layer\": 100001, \"n_embd\": 8, "
		 "\"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4}",
		 "layers '100001': must be in 1..100000"},
		{"{\"model_type\": \"mistral\", \"num_hidden_layers\": 2, "
		 "\"hidden_size\": 8, \"num_attention_heads\": 4, "
		 "\"num_key_value_heads\": 3, \"vocab_size\": 10, "
		 "\"intermediate_size\": 24}",
		 "key/value heads '3': must divide the 4 attention heads"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(cases); i++) {
		gk_hf_config c;
		gk_err err;
		char msg[512];
		snprintf(msg, sizeof(msg), "config 'x.json': %s", cases[i].msg);
		int rc = parse(&c, cases[i].json, 0, NULL, &err);
		if (!ok(rc < 0 && strcmp(err.msg, msg) == 0, "refused: %s",
			cases[i].msg))
			diag("got '%s'", err.msg);
	}

	gk_hf_config c;
	gk_err err;
	ok(parse(&c, "{\"model_type\": \"gpt2\"", 0, NULL, &err) < 0 &&
	   strncmp(err.msg, "parse 'x.json': line 1", 22) == 0,
	   "not JSON: %s", err.msg);
	ok(parse(&c, "{" GPT2_MIN ", \"n_layer\": 3}", 0, NULL, &err) < 0 &&
	   strstr(err.msg, "duplicate"), "duplicate key: %s", err.msg);
	/* a reader that builds one architecture names the one it was given */
	ok(parse(&c, "{\"model_type\": \"bert\", \"num_hidden_layers\": 2}", 0,
		 NULL, &err) < 0 && strcmp(c.model_type, "bert") == 0 &&
	   c.arch == GK_HF_OTHER,
	   "an unknown model_type is kept when refused");
	ok(parse(&c, "{\"model_type\": \"\"}", 0, NULL, &err) < 0 &&
	   c.model_type[0] == '\0' && c.arch == GK_HF_OTHER,
	   "an empty one too: GK_HF_OTHER, not GK_HF_NONE");
	ok(parse(&c, "{\"model_type\": \"llama\", \"hidden_size\": 0}", 0, NULL,
		 &err) < 0 && strcmp(c.model_type, "llama") == 0,
	   "and a known one when its keys are refused");
	ok(parse(&c, "[]", 0, NULL, &err) < 0 && c.model_type[0] == '\0' &&
	   c.arch == GK_HF_NONE, "not an object: no model_type");
	ok(parse(&c, "{\"model_type\": [\"gpt2\"]}", 0, NULL, &err) < 0 &&
	   c.arch == GK_HF_NONE, "not a string: no model_type");

	ok(gk_hf_config_load(&c, "no-such-config.json", 0, NULL, &err) < 0 &&
	   strcmp(err.msg, "open 'no-such-config.json': No such file or "
		  "directory") == 0 && c.arch == GK_HF_NONE,
	   "missing file: %s", err.msg);
}

/* Keys that leave the shapes alone are read as stated, never refused. */
static void stated(void)
{
	gk_hf_config c;
	gk_err err;
	ok(parse(&c, "{" GPT2_MIN ", \"layer_norm_epsilon\": 1e-6, "
		 "\"activation_function\": \"relu\", \"scale_attn_weights\": "
		 "false, \"scale_attn_by_inverse_layer_idx\": true}",
		 0, NULL, &err) == 0 && c.ln_eps == 1e-6 &&
	   strcmp(c.activation, "relu") == 0 && c.scale_attn_weights == 0 &&
	   c.scale_attn_by_inverse_layer_idx == 1,
	   "values as stated");
	ok(parse(&c, "{" GPT2_MIN ", \"layer_norm_epsilon\": 1}", 0, NULL,
		 &err) == 0 && c.ln_eps == 1.0, "an integer epsilon is a number");
	ok(parse(&c, "{" GPT2_MIN ", \"layer_norm_epsilon\": \"1e-5\", "
		 "\"activation_function\": 5, \"scale_attn_weights\": 3, "
		 "\"scale_attn_by_inverse_layer_idx\": \"no\"}",
		 0, NULL, &err) == 0 && isnan(c.ln_eps) && c.activation[0] == '\0' &&
	   c.scale_attn_weights == -1 && c.scale_attn_by_inverse_layer_idx == -1,
	   "other types: NAN, \"\", -1, not an error");
	ok(parse(&c, "{" GPT2_MIN ", \"layer_norm_epsilon\": null, "
		 "\"activation_function\": null, \"scale_attn_weights\": null}",
		 0, NULL, &err) == 0 && isnan(c.ln_eps) && c.activation[0] == '\0' &&
	   c.scale_attn_weights == 1,
	   "null: not a number or a name; for a boolean, the default");
	char j[512];
	snprintf(j, sizeof(j), "{" GPT2_MIN ", \"activation_function\": \"%0*d\"}",
		 GK_HF_NAME_MAX, 0);
	ok(parse(&c, j, 0, NULL, &err) == 0 && c.activation[0] == '\0',
	   "an activation too long to be a name: \"\"");
}

/* The rules directly, as a reader with a shape from flags uses them. */
static void finish(void)
{
	gk_err err;
	gk_hf_config c;
	gk_hf_config_init(&c, GK_HF_GPT2);
	c.layers = 2, c.hidden = 8, c.heads = 2, c.vocab = 10;
	ok(gk_hf_config_finish(&c, &err) < 0 &&
	   strcmp(err.msg, "positions '0': GPT-2 learns a position embedding "
		  "and needs its size") == 0,
	   "GPT-2 without positions: %s", err.msg);
	c.positions = 4;
	ok(gk_hf_config_finish(&c, &err) == 0 && c.ffn == 32 &&
	   c.kv_heads == 2 && c.head_dim == 4, "derived: ffn, kv heads, head_dim");
	gk_hf_config_init(&c, GK_HF_LLAMA);
	c.layers = 2, c.hidden = 8, c.heads = 2, c.vocab = 10;
	ok(gk_hf_config_finish(&c, &err) < 0 &&
	   strcmp(err.msg, "MLP size '0': must be in 1..10000000") == 0,
	   "Llama's MLP size is not derived: %s", err.msg);
	gk_hf_config_init(&c, GK_HF_NONE);
	ok(c.arch == GK_HF_NONE && c.tied == 0 && c.activation[0] == '\0' &&
	   c.ln_eps == 0, "GK_HF_NONE only zeroes");
}

int main(int argc, char **argv)
{
	const char *top = getenv("GK_TOP");
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/tests/data/mem", top ? top : ".");
	configs(dir);
	defaults();
	unknown_keys();
	refused();
	stated();
	finish();
	return done_testing();
}
