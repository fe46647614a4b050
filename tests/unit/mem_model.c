/*
 * mem_model.c - exact parameter counts from Hugging Face config.json files
 * against the counts the model cards and papers publish, the same models
 * from architecture flags, count parsing, and refused configs.
 */
#include "mem/mem.h"
#include "tap.h"

static const struct {
	const char *file;
	uint64_t params; /* published */
} published[] = {
	/* sum(p.numel()) of transformers' GPT2LMHeadModel (tied head) */
	{"gpt2.json", 124439808},
	{"gpt2-medium.json", 354823168},
	{"gpt2-large.json", 774030080},
	{"gpt2-xl.json", 1557611200},
	/* Llama 2 paper's 7B; Mistral 7B model card; Pythia's "total params" */
	{"llama-2-7b.json", 6738415616},
	{"mistral-7b.json", 7241732096},
	{"pythia-160m.json", 162322944},
};

static void configs(const char *dir)
{
	for (size_t i = 0; i < GK_ARRAY_SIZE(published); i++) {
		char path[1024];
		snprintf(path, sizeof(path), "%s/%s", dir, published[i].file);
		gk_mem_model m;
		gk_err err = {0};
		int rc = gk_mem_model_from_config(&m, path, 0, NULL, &err);
		if (!ok(rc == 0, "%s loads", published[i].file))
			diag("%s", err.msg);
		is_u64(m.params, published[i].params, published[i].file);
	}
}

/* The same models described by flags, as a user would type them. */
static void flags(void)
{
	gk_err err;
	gk_mem_model g = {.arch = GK_MEM_ARCH_GPT2, .layers = 12, .hidden = 768,
			  .heads = 12, .vocab = 50257, .positions = 1024,
			  .tied = 1, .bias = 1};
	ok(gk_mem_model_finish(&g, &err) == 0, "gpt2 from flags");
	is_u64(g.params, 124439808, "gpt2 from flags: 124,439,808");
	/* 12h^2 + 13h per block (GPT-2 paper's layout with biases) */
	is_u64(g.layer_params, 12ULL * 768 * 768 + 13 * 768, "gpt2 block 12h^2+13h");

	gk_mem_model l = {.arch = GK_MEM_ARCH_LLAMA, .layers = 32, .hidden = 4096,
			  .heads = 32, .kv_heads = 8, .ffn = 14336,
			  .vocab = 32000};
	ok(gk_mem_model_finish(&l, &err) == 0, "mistral from flags");
	is_u64(l.params, 7241732096, "mistral from flags: GQA k/v are 1024 wide");
	/* tying removes exactly the head */
	l.tied = 1;
	gk_mem_model_finish(&l, &err);
	is_u64(l.params, 7241732096 - 32000ULL * 4096, "tied head drops V*h");

	gk_mem_model bad = {.arch = GK_MEM_ARCH_LLAMA, .layers = 2, .hidden = 100,
			    .heads = 3, .ffn = 10, .vocab = 10};
	ok(gk_mem_model_finish(&bad, &err) < 0 &&
	   strstr(err.msg, "must divide the hidden size 100"),
	   "heads not dividing hidden: %s", err.msg);
	gk_mem_model kv = {.arch = GK_MEM_ARCH_LLAMA, .layers = 2, .hidden = 64,
			   .heads = 8, .kv_heads = 3, .ffn = 10, .vocab = 10};
	ok(gk_mem_model_finish(&kv, &err) < 0 && strstr(err.msg, "must divide"),
	   "kv heads not dividing heads: %s", err.msg);
	gk_mem_model huge = {.arch = GK_MEM_ARCH_GPT2, .layers = 100000,
			     .hidden = 1000000, .heads = 1, .vocab = 10,
			     .positions = 1};
	ok(gk_mem_model_finish(&huge, &err) < 0 && strstr(err.msg, "more than"),
	   "absurd size is refused, not overflowed: %s", err.msg);
}

static void counts(void)
{
	uint64_t v = 0;
	gk_err err;
	ok(gk_mem_parse_count("7B", &v, "--params", &err) == 0 && v == 7000000000,
	   "7B");
	ok(gk_mem_parse_count("1.5T", &v, "--params", &err) == 0 &&
	   v == 1500000000000, "1.5T");
	ok(gk_mem_parse_count("124439808", &v, "--params", &err) == 0 &&
	   v == 124439808, "plain");
	ok(gk_mem_parse_count("0", &v, "--params", &err) < 0, "zero refused");
	ok(gk_mem_parse_count("-7B", &v, "--params", &err) < 0, "negative refused");
	ok(gk_mem_parse_count("7X", &v, "--params", &err) < 0 &&
	   strstr(err.msg, "--params '7X'"), "bad unit: %s", err.msg);
}

static void bad_configs(void)
{
	static const struct {
		const char *json, *msg;
	} cases[] = {
		{"[1]", "not a JSON object"},
		{"{\"n_layer\": 2}", "no 'model_type' key"},
		{"{\"model_type\": \"t5\"}", "model_type 't5': not one of"},
		{"{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_embd\": 768, "
		 "\"n_head\": 12, \"vocab_size\": 50257}",
		 "missing key 'n_positions' for model_type 'gpt2'"},
		{"{\"model_type\": \"gpt2\", \"n_lyer\": 12}",
		 "unknown key 'n_lyer' for model_type 'gpt2'"},
		{"{\"model_type\": \"llama\", \"hidden_size\": -4096}",
		 "key 'hidden_size': not a positive integer"},
		{"{\"model_type\": \"llama\", \"hidden_size\": 4096.5}",
		 "key 'hidden_size': not a positive integer"},
		{"{\"model_type\": \"gpt2\", \"tie_word_embeddings\": 1}",
		 "key 'tie_word_embeddings': not true or false"},
		{"{\"model_type\": \"gpt2\"", "parse 'x.json': line 1"},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(cases); i++) {
		gk_mem_model m;
		gk_err err = {0};
		int rc = gk_mem_model_from_config_buf(&m, cases[i].json,
						      strlen(cases[i].json),
						      "x.json", 0, NULL, &err);
		ok(rc < 0 && strstr(err.msg, cases[i].msg), "refused: %s",
		   err.msg);
	}
	/* allow_unknown collects the unknown keys instead */
	const char *j = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 8,"
			"\"n_head\": 2, \"vocab_size\": 10, \"n_positions\": 4,"
			"\"new_knob\": 1}";
	gk_strlist unk = {0};
	gk_mem_model m;
	gk_err err;
	ok(gk_mem_model_from_config_buf(&m, j, strlen(j), "x", 1, &unk, &err) == 0 &&
	   unk.n == 1 && strcmp(unk.v[0], "new_knob") == 0,
	   "allow_unknown lists the key");
	gk_strlist_free(&unk);
}

int main(int argc, char **argv)
{
	const char *top = getenv("GK_TOP");
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/tests/data/mem", top ? top : ".");
	configs(dir);
	flags();
	counts();
	bad_configs();
	return done_testing();
}
