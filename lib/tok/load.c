/*
 * load.c - reading vocab.json + merges.txt or tokenizer.json into a gk_tok.
 *
 * Both formats say the same three things: the vocabulary (token name ->
 * id, names spelled with GPT-2's byte map, see pretok.c), the merges in
 * rank order ("left right", the names of two tokens whose concatenation
 * is a token too), and special tokens. References: Hugging Face
 * tokenizers, tokenizers/src/models/bpe/model.rs (BPE::from_file,
 * read_file) and the serialization of tokenizer.json (tokenizer/serialization.rs).
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tok/internal.h"

#define MAX_FILE ((size_t)1 << 30)

/* ---- name -> id --------------------------------------------------------- */

typedef struct name_slot {
	const char *name; /* NULL: free */
	size_t len;
	uint32_t id;
} name_slot;

typedef struct name_map {
	name_slot *v;
	size_t mask;
} name_map;

static uint64_t fnv(const void *p, size_t n)
{
	const uint8_t *s = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return h;
}

static name_slot *name_find(const name_map *m, const char *name, size_t len)
{
	size_t i = (size_t)fnv(name, len) & m->mask;
	for (;; i = (i + 1) & m->mask) {
		name_slot *s = &m->v[i];
		if (!s->name || (s->len == len && !memcmp(s->name, name, len)))
			return s;
	}
}

static int name_lookup(const name_map *m, const char *name, size_t len, uint32_t *id)
{
	name_slot *s = name_find(m, name, len);
	if (!s->name)
		return -1;
	*id = s->id;
	return 0;
}

/* ---- building ------------------------------------------------------------ */

typedef struct merge_src {
	const char *a, *b;
	size_t alen, blen;
	size_t where; /* line of merges.txt, or index in tokenizer.json */
} merge_src;

typedef struct build {
	const char *vocab_name, *merges_name; /* for messages */
	int merges_lines;                     /* 1: where is a line number */
	json_t *vocab;                        /* object name -> id */
	merge_src *merges;
	size_t nmerges, cap;
	json_t *added; /* tokenizer.json's added_tokens, or NULL */
} build;

static void put_utf8(char **p, uint32_t cp)
{
	uint8_t *s = (uint8_t *)*p;
	if (cp < 0x80) {
		*s++ = (uint8_t)cp;
	} else if (cp < 0x800) {
		*s++ = (uint8_t)(0xC0 | cp >> 6);
		*s++ = (uint8_t)(0x80 | (cp & 0x3F));
	} else {
		*s++ = (uint8_t)(0xE0 | cp >> 12);
		*s++ = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
		*s++ = (uint8_t)(0x80 | (cp & 0x3F));
	}
	*p = (char *)s;
}

/*
 * The bytes a vocabulary name stands for: each character through the byte
 * map. A name with a character outside the map (an added token such as
 * "<|endoftext|>" is inside it, but "<pad token>" has a space) stands for
 * its own UTF-8 text. Returns the length written to out (room for len).
 */
static size_t name_bytes(const char *name, size_t len, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		int c;
		size_t l = gk_tok_char((const uint8_t *)name + i, len - i, &c);
		uint32_t cp = (uint8_t)name[i];
		if (l == 2)
			cp = (cp & 0x1F) << 6 | ((uint8_t)name[i + 1] & 0x3F);
		else if (l > 2)
			cp = 0x110000; /* past the map */
		int b = gk_tok_cp_byte(cp);
		if (b < 0) {
			memcpy(out, name, len);
			return len;
		}
		out[o++] = (char)b;
		i += l;
	}
	return o;
}

static int id_of(json_t *v, uint32_t *id)
{
	if (!json_is_integer(v))
		return -1;
	json_int_t x = json_integer_value(v);
	if (x < 0 || x > GK_TOK_MAX_ID)
		return -1;
	*id = (uint32_t)x;
	return 0;
}

static int add_special(gk_tok *t, const char *text, size_t len, uint32_t id, gk_err *err)
{
	gk_tok_special_tok *v = realloc(t->special, (t->nspecial + 1) * sizeof(*v));
	if (!v)
		return gk_err_sys(err, ENOMEM, "special tokens");
	t->special = v;
	char *s = malloc(len + 1);
	if (!s)
		return gk_err_sys(err, ENOMEM, "special tokens");
	memcpy(s, text, len);
	s[len] = '\0';
	v[t->nspecial++] = (gk_tok_special_tok){s, len, id};
	if (len > t->special_max)
		t->special_max = len;
	t->special_first[(uint8_t)text[0]] = 1;
	return 0;
}

static int merge_insert(gk_tok *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t id,
			uint32_t *dup)
{
	uint64_t key = (uint64_t)a << 32 | b;
	uint64_t h = key * 0x9E3779B97F4A7C15ull;
	size_t i = (size_t)(h >> 32) & t->merge_mask;
	for (;; i = (i + 1) & t->merge_mask) {
		gk_tok_merge *m = &t->merges[i];
		if (m->pair == key) {
			*dup = m->rank;
			return -1;
		}
		if (m->pair == UINT64_MAX) {
			*m = (gk_tok_merge){key, rank, id};
			return 0;
		}
	}
}

static void fp_u32(gk_hash *h, uint32_t x)
{
	gk_hash_update(h, &x, sizeof(x));
}

static int finish(gk_tok *t, build *b, gk_err *err)
{
	size_t nvocab = json_object_size(b->vocab);
	size_t nadded = b->added ? json_array_size(b->added) : 0;
	name_map names = {0};
	char *tmp = NULL;
	gk_hash *fp = NULL;
	int rc = -1;

	/* ids: the vocabulary's and the added tokens' */
	uint32_t maxid = 0;
	const char *key;
	json_t *val;
	json_object_foreach(b->vocab, key, val) {
		uint32_t id;
		if (id_of(val, &id) < 0) {
			gk_errf(err, "vocabulary '%s': token '%.100s' has id %.40s, not an integer in [0, %d]",
				b->vocab_name, key, json_is_integer(val) ? "out of range" : "of another type",
				GK_TOK_MAX_ID);
			goto out;
		}
		if (id > maxid)
			maxid = id;
	}
	for (size_t i = 0; i < nadded; i++) {
		json_t *a = json_array_get(b->added, i), *idv = json_object_get(a, "id");
		const char *content = json_string_value(json_object_get(a, "content"));
		uint32_t id;
		if (!json_is_object(a) || !content || !*content || id_of(idv, &id) < 0) {
			gk_errf(err, "tokenizer '%s': added_tokens[%zu] needs a non-empty \"content\" and an \"id\" in [0, %d]",
				b->vocab_name, i, GK_TOK_MAX_ID);
			goto out;
		}
		static const char *const unsupported[] = {"lstrip", "rstrip", "single_word"};
		for (size_t k = 0; k < GK_ARRAY_SIZE(unsupported); k++)
			if (json_is_true(json_object_get(a, unsupported[k]))) {
				gk_errf(err, "tokenizer '%s': added token '%.100s' sets \"%s\", which gpukit does not implement",
					b->vocab_name, content, unsupported[k]);
				goto out;
			}
		if (id > maxid)
			maxid = id;
	}
	if (!nvocab) {
		gk_errf(err, "vocabulary '%s': no tokens", b->vocab_name);
		goto out;
	}
	t->nids = maxid + 1;

	/* names -> ids, and each id's bytes */
	size_t slots = 16;
	while (slots < 2 * (nvocab + nadded))
		slots *= 2;
	names.v = calloc(slots, sizeof(*names.v));
	names.mask = slots - 1;
	const char **idname = calloc(t->nids, sizeof(*idname));
	size_t *idlen = calloc(t->nids, sizeof(*idlen));
	t->present = calloc(t->nids, 1);
	t->off = calloc((size_t)t->nids + 1, sizeof(*t->off));
	if (!names.v || !idname || !idlen || !t->present || !t->off) {
		free(idname);
		free(idlen);
		gk_err_sys(err, ENOMEM, "vocabulary '%s'", b->vocab_name);
		goto out;
	}
	size_t total = 0;
	json_object_foreach(b->vocab, key, val) {
		uint32_t id = 0;
		id_of(val, &id);
		size_t len = json_object_iter_key_len(json_object_key_to_iter(key));
		if (!len) {
			gk_errf(err, "vocabulary '%s': the empty string is not a token", b->vocab_name);
			goto out_ids;
		}
		if (idname[id]) {
			gk_errf(err, "vocabulary '%s': tokens '%.100s' and '%.100s' both have id %u",
				b->vocab_name, idname[id], key, id);
			goto out_ids;
		}
		idname[id] = key;
		idlen[id] = len;
		*name_find(&names, key, len) = (name_slot){key, len, id};
		total += len;
	}
	for (size_t i = 0; i < nadded; i++) {
		json_t *a = json_array_get(b->added, i);
		const char *content = json_string_value(json_object_get(a, "content"));
		size_t len = json_string_length(json_object_get(a, "content"));
		uint32_t id = 0;
		id_of(json_object_get(a, "id"), &id);
		name_slot *s = name_find(&names, content, len);
		if (idname[id] && !(s->name && s->id == id)) {
			gk_errf(err, "tokenizer '%s': added token '%.100s' has id %u, which is '%.100s' already",
				b->vocab_name, content, id, idname[id]);
			goto out_ids;
		}
		if (!idname[id]) {
			if (s->name) {
				gk_errf(err, "tokenizer '%s': added token '%.100s' has id %u but the vocabulary gives it %u",
					b->vocab_name, content, id, s->id);
				goto out_ids;
			}
			idname[id] = content;
			idlen[id] = len;
			*s = (name_slot){content, len, id};
			total += len;
		}
		if (add_special(t, content, len, id, err) < 0)
			goto out_ids;
	}
	if (!b->added)
		json_object_foreach(b->vocab, key, val) {
			size_t len = strlen(key);
			uint32_t id = 0;
			id_of(val, &id);
			if (len > 4 && !memcmp(key, "<|", 2) && !memcmp(key + len - 2, "|>", 2) &&
			    add_special(t, key, len, id, err) < 0)
				goto out_ids;
		}
	t->bytes = malloc(total + 1);
	if (!t->bytes) {
		gk_err_sys(err, ENOMEM, "vocabulary '%s'", b->vocab_name);
		goto out_ids;
	}
	size_t o = 0;
	for (uint32_t id = 0; id < t->nids; id++) {
		t->off[id] = (uint32_t)o;
		if (idname[id]) {
			t->present[id] = 1;
			o += name_bytes(idname[id], idlen[id], t->bytes + o);
		}
	}
	t->off[t->nids] = (uint32_t)o;
	free(idname);
	free(idlen);
	idname = NULL;

	/* the 256 byte tokens */
	for (unsigned c = 0; c < 256; c++) {
		char nm[4], *p = nm;
		put_utf8(&p, gk_tok_byte_cp((uint8_t)c));
		if (name_lookup(&names, nm, (size_t)(p - nm), &t->byte_id[c]) < 0) {
			gk_errf(err, "vocabulary '%s': no token for byte 0x%02X (named '%.*s'): not a byte-level BPE vocabulary",
				b->vocab_name, c, (int)(p - nm), nm);
			goto out;
		}
	}

	/* merges */
	slots = 16;
	while (slots < 2 * b->nmerges)
		slots *= 2;
	t->merges = malloc(slots * sizeof(*t->merges));
	size_t tmpcap = 0;
	for (size_t i = 0; i < b->nmerges; i++)
		if (b->merges[i].alen + b->merges[i].blen > tmpcap)
			tmpcap = b->merges[i].alen + b->merges[i].blen;
	tmp = malloc(tmpcap + 1);
	if (!t->merges || !tmp) {
		gk_err_sys(err, ENOMEM, "merges '%s'", b->merges_name);
		goto out;
	}
	memset(t->merges, 0xFF, slots * sizeof(*t->merges));
	t->merge_mask = slots - 1;
	const char *unit = b->merges_lines ? "line" : "merge";
	for (size_t i = 0; i < b->nmerges; i++) {
		merge_src *m = &b->merges[i];
		uint32_t a, bb, id, dup;
		if (name_lookup(&names, m->a, m->alen, &a) < 0 ||
		    name_lookup(&names, m->b, m->blen, &bb) < 0) {
			int left = name_lookup(&names, m->a, m->alen, &a) < 0;
			gk_errf(err, "merges '%s' %s %zu: '%.*s' is not in the vocabulary",
				b->merges_name, unit, m->where, (int)(left ? m->alen : m->blen) > 200 ? 200 : (int)(left ? m->alen : m->blen),
				left ? m->a : m->b);
			goto out;
		}
		memcpy(tmp, m->a, m->alen);
		memcpy(tmp + m->alen, m->b, m->blen);
		if (name_lookup(&names, tmp, m->alen + m->blen, &id) < 0) {
			gk_errf(err, "merges '%s' %s %zu: the merged token '%.*s' is not in the vocabulary",
				b->merges_name, unit, m->where, (int)(m->alen + m->blen) > 200 ? 200 : (int)(m->alen + m->blen), tmp);
			goto out;
		}
		if (merge_insert(t, a, bb, (uint32_t)i, id, &dup) < 0) {
			gk_errf(err, "merges '%s' %s %zu: '%.*s %.*s' repeats %s %zu",
				b->merges_name, unit, m->where, (int)(m->alen > 100 ? 100 : m->alen), m->a,
				(int)(m->blen > 100 ? 100 : m->blen), m->b, unit, b->merges[dup].where);
			goto out;
		}
	}
	t->nmerges = b->nmerges;

	/* fingerprint: ids' bytes, merges by rank, specials */
	fp = gk_hash_new();
	if (!fp) {
		gk_err_sys(err, ENOMEM, "tokenizer");
		goto out;
	}
	fp_u32(fp, t->nids);
	for (uint32_t id = 0; id < t->nids; id++) {
		fp_u32(fp, t->present[id] ? t->off[id + 1] - t->off[id] : UINT32_MAX);
		gk_hash_update(fp, t->bytes + t->off[id], t->off[id + 1] - t->off[id]);
	}
	for (size_t i = 0; i < b->nmerges; i++) {
		uint32_t a = 0, bb = 0;
		name_lookup(&names, b->merges[i].a, b->merges[i].alen, &a);
		name_lookup(&names, b->merges[i].b, b->merges[i].blen, &bb);
		fp_u32(fp, a);
		fp_u32(fp, bb);
	}
	for (size_t i = 0; i < t->nspecial; i++)
		fp_u32(fp, t->special[i].id);
	fp_u32(fp, (uint32_t)t->add_prefix_space);
	t->fingerprint = gk_hash_digest(fp);
	rc = 0;
	goto out;
out_ids:
	free(idname);
	free(idlen);
out:
	gk_hash_free(fp);
	free(tmp);
	free(names.v);
	return rc;
}

/* ---- the files ------------------------------------------------------------ */

static int push_merge(build *b, const char *a, size_t alen, const char *bb, size_t blen,
		      size_t where, gk_err *err)
{
	if (GK_GROW(b->merges, b->cap, b->nmerges + 1, "merges", err) < 0)
		return -1;
	b->merges[b->nmerges++] = (merge_src){a, bb, alen, blen, where};
	return 0;
}

/*
 * merges.txt: an optional "#version" first line, then one merge per line,
 * "left right" split at its one space (two parts exactly, as
 * tokenizers' read_file requires; a token holding a space cannot be
 * written in this format).
 */
static int parse_merges_txt(build *b, char *buf, size_t len, gk_err *err)
{
	size_t line = 0;
	for (size_t i = 0; i < len;) {
		char *s = buf + i, *nl = memchr(s, '\n', len - i);
		size_t n = nl ? (size_t)(nl - s) : len - i;
		i += n + (nl != NULL);
		line++;
		if (n && s[n - 1] == '\r')
			n--;
		if (n >= 8 && !memcmp(s, "#version", 8))
			continue;
		char *sp = memchr(s, ' ', n);
		if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
			return gk_errf(err, "merges '%s' line %zu: '%.*s' is not two tokens separated by one space",
				       b->merges_name, line, (int)(n > 100 ? 100 : n), s);
		if (memchr(s, '\0', n))
			return gk_errf(err, "merges '%s' line %zu: a NUL byte", b->merges_name, line);
		if (push_merge(b, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1), line, err) < 0)
			return -1;
	}
	return 0;
}

static int parse_merges_json(build *b, json_t *merges, gk_err *err)
{
	if (!json_is_array(merges))
		return gk_errf(err, "tokenizer '%s': model.merges is not an array", b->merges_name);
	size_t i;
	json_t *m;
	json_array_foreach(merges, i, m) {
		if (json_is_string(m)) {
			const char *s = json_string_value(m);
			size_t n = json_string_length(m);
			const char *sp = memchr(s, ' ', n);
			if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
				return gk_errf(err, "tokenizer '%s': model.merges[%zu] '%.100s' is not two tokens separated by one space",
					       b->merges_name, i, s);
			if (push_merge(b, s, (size_t)(sp - s), sp + 1, (size_t)(s + n - sp - 1), i, err) < 0)
				return -1;
		} else if (json_is_array(m) && json_array_size(m) == 2 &&
			   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
			json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
			if (push_merge(b, json_string_value(x), json_string_length(x), json_string_value(y),
				       json_string_length(y), i, err) < 0)
				return -1;
		} else {
			return gk_errf(err, "tokenizer '%s': model.merges[%zu] is neither \"left right\" nor [left, right]",
				       b->merges_name, i);
		}
	}
	return 0;
}

static int add_path(gk_tok *t, const char *path, gk_err *err)
{
	return gk_strlist_push(&t->paths, path, err);
}

int gk_tok_open_files(gk_tok **out, const char *vocab_json, const char *merges_txt, gk_err *err)
{
	gk_tok *t = calloc(1, sizeof(*t));
	build b = {.vocab_name = vocab_json, .merges_name = merges_txt, .merges_lines = 1};
	char *mbuf = NULL;
	size_t mlen;
	if (!t)
		return gk_err_sys(err, ENOMEM, "tokenizer");
	b.vocab = gk_json_load_file(vocab_json, MAX_FILE, err);
	if (!b.vocab)
		goto fail;
	if (!json_is_object(b.vocab)) {
		gk_errf(err, "vocabulary '%s': not a JSON object of token -> id", vocab_json);
		goto fail;
	}
	if (gk_read_file(merges_txt, MAX_FILE, &mbuf, &mlen, err) < 0 ||
	    parse_merges_txt(&b, mbuf, mlen, err) < 0 || add_path(t, vocab_json, err) < 0 ||
	    add_path(t, merges_txt, err) < 0 || finish(t, &b, err) < 0)
		goto fail;
	json_decref(b.vocab);
	free(b.merges);
	free(mbuf);
	*out = t;
	return 0;
fail:
	json_decref(b.vocab);
	free(b.merges);
	free(mbuf);
	gk_tok_close(t);
	return -1;
}

/* A member that must be null, false, or absent (or an empty string). */
static int must_be_off(const json_t *obj, const char *key, const char *where, const char *path,
		       gk_err *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v) || json_is_false(v) || (json_is_string(v) && !*json_string_value(v)))
		return 0;
	return gk_errf(err, "tokenizer '%s': %s.%s is set, which a byte-level BPE does not use (gpukit reads GPT-2-style tokenizers only)",
		       path, where, key);
}

static int check_pretok(json_t *pre, const char *path, int *prefix, gk_err *err)
{
	const char *type = json_string_value(json_object_get(pre, "type"));
	if (!type || strcmp(type, "ByteLevel"))
		return gk_errf(err, "tokenizer '%s': pre_tokenizer is %s, not ByteLevel (gpukit reads GPT-2-style tokenizers only)",
			       path, type ? type : "missing");
	json_t *re = json_object_get(pre, "use_regex");
	if (re && !json_is_true(re))
		return gk_errf(err, "tokenizer '%s': pre_tokenizer.use_regex is false; gpukit implements GPT-2's pattern only",
			       path);
	*prefix = json_is_true(json_object_get(pre, "add_prefix_space"));
	return 0;
}

static int open_json(gk_tok *t, const char *path, gk_err *err)
{
	build b = {.vocab_name = path, .merges_name = path};
	json_t *root = gk_json_load_file(path, MAX_FILE, err);
	int rc = -1;
	if (!root)
		return -1;
	json_t *model = json_object_get(root, "model");
	const char *type = json_string_value(json_object_get(model, "type"));
	if (!json_is_object(model)) {
		gk_errf(err, "tokenizer '%s': no \"model\" object (is it a tokenizer.json?)", path);
		goto out;
	}
	if (type && strcmp(type, "BPE")) {
		gk_errf(err, "tokenizer '%s': model.type is %s, not BPE", path, type);
		goto out;
	}
	static const char *const off[] = {"dropout", "unk_token", "continuing_subword_prefix",
					  "end_of_word_suffix", "fuse_unk", "byte_fallback",
					  "ignore_merges"};
	for (size_t i = 0; i < GK_ARRAY_SIZE(off); i++)
		if (must_be_off(model, off[i], "model", path, err) < 0)
			goto out;
	if (must_be_off(root, "normalizer", "tokenizer", path, err) < 0)
		goto out;
	if (check_pretok(json_object_get(root, "pre_tokenizer"), path, &t->add_prefix_space, err) < 0)
		goto out;
	b.vocab = json_object_get(model, "vocab");
	if (!json_is_object(b.vocab)) {
		gk_errf(err, "tokenizer '%s': model.vocab is not an object of token -> id", path);
		goto out;
	}
	b.added = json_object_get(root, "added_tokens");
	if (b.added && !json_is_array(b.added)) {
		if (!json_is_null(b.added)) {
			gk_errf(err, "tokenizer '%s': added_tokens is not an array", path);
			goto out;
		}
		b.added = NULL;
	}
	if (parse_merges_json(&b, json_object_get(model, "merges"), err) < 0 ||
	    add_path(t, path, err) < 0 || finish(t, &b, err) < 0)
		goto out;
	rc = 0;
out:
	free(b.merges);
	json_decref(root);
	return rc;
}

static char *join(const char *dir, const char *name)
{
	size_t a = strlen(dir), n = strlen(name);
	char *s = malloc(a + n + 2);
	if (s) {
		memcpy(s, dir, a);
		s[a] = '/';
		memcpy(s + a + 1, name, n + 1);
	}
	return s;
}

int gk_tok_open(gk_tok **out, const char *path, gk_err *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return gk_err_sys(err, errno, "tokenizer '%s'", path);
	if (!S_ISDIR(st.st_mode)) {
		gk_tok *t = calloc(1, sizeof(*t));
		if (!t)
			return gk_err_sys(err, ENOMEM, "tokenizer");
		if (open_json(t, path, err) < 0) {
			gk_tok_close(t);
			return -1;
		}
		*out = t;
		return 0;
	}
	char *tj = join(path, "tokenizer.json"), *vj = join(path, "vocab.json"),
	     *mt = join(path, "merges.txt");
	int rc;
	if (!tj || !vj || !mt)
		rc = gk_err_sys(err, ENOMEM, "tokenizer");
	else if (access(tj, F_OK) == 0)
		rc = gk_tok_open(out, tj, err);
	else if (access(vj, F_OK) == 0 || access(mt, F_OK) == 0)
		rc = gk_tok_open_files(out, vj, mt, err);
	else
		rc = gk_errf(err, "tokenizer '%s': no tokenizer.json, nor vocab.json and merges.txt, in the directory",
			     path);
	free(tj);
	free(vj);
	free(mt);
	return rc;
}

void gk_tok_close(gk_tok *t)
{
	if (!t)
		return;
	free(t->off);
	free(t->present);
	free(t->bytes);
	free(t->merges);
	for (size_t i = 0; i < t->nspecial; i++)
		free(t->special[i].text);
	free(t->special);
	gk_strlist_free(&t->paths);
	free(t);
}

uint32_t gk_tok_vocab_size(const gk_tok *t)
{
	return t->nids;
}

int64_t gk_tok_special(const gk_tok *t, const char *text)
{
	size_t len = strlen(text);
	for (size_t i = 0; i < t->nspecial; i++)
		if (t->special[i].len == len && !memcmp(t->special[i].text, text, len))
			return t->special[i].id;
	return -1;
}

const char *const *gk_tok_paths(const gk_tok *t)
{
	return (const char *const *)t->paths.v;
}

uint64_t gk_tok_fingerprint(const gk_tok *t)
{
	return t->fingerprint;
}

const char *gk_tok_token(const gk_tok *t, uint32_t id, size_t *len)
{
	if (id >= t->nids || !t->present[id])
		return NULL;
	*len = t->off[id + 1] - t->off[id];
	return t->bytes + t->off[id];
}

int gk_tok_decode(const gk_tok *t, const uint32_t *ids, size_t n, char **buf, size_t *len,
		  size_t *cap, gk_err *err)
{
	for (size_t i = 0; i < n; i++) {
		size_t l;
		const char *s = gk_tok_token(t, ids[i], &l);
		if (!s)
			return gk_errf(err, "decode: id %u at position %zu is no token of the vocabulary (size %u)",
				       ids[i], i, t->nids);
		if (gk_grow(buf, cap, *len + l, 1, "decoded text", err) < 0)
			return -1;
		memcpy(*buf + *len, s, l);
		*len += l;
	}
	return 0;
}
