/*
 * util.c - byte buffers and string sets for lib/shard.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "shard/internal.h"

int sh_buf_reserve(sh_buf *b, size_t extra)
{
	gk_err ignored; /* callers report ENOMEM in their own words */
	if (extra > SIZE_MAX - b->len)
		return -1;
	return GK_GROW(b->p, b->cap, b->len + extra, "buffer", &ignored);
}

int sh_buf_append(sh_buf *b, const void *p, size_t n)
{
	if (sh_buf_reserve(b, n) < 0)
		return -1;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

static size_t slot_of(const sh_set *s, const char *str, size_t len)
{
	size_t i = (size_t)gk_xxh3(str, len) & (s->cap - 1);
	while (s->slot[i] && (strlen(s->slot[i]) != len || memcmp(s->slot[i], str, len)))
		i = (i + 1) & (s->cap - 1);
	return i;
}

int sh_set_has(const sh_set *s, const char *str, size_t len)
{
	return s->cap && s->slot[slot_of(s, str, len)] != NULL;
}

int sh_set_add(sh_set *s, const char *str, size_t len)
{
	if ((s->n + 1) * 2 > s->cap) {
		sh_set big = {calloc(s->cap ? s->cap * 2 : 64, sizeof(char *)), 0,
			      s->cap ? s->cap * 2 : 64};
		if (!big.slot)
			return -1;
		for (size_t i = 0; i < s->cap; i++)
			if (s->slot[i])
				big.slot[slot_of(&big, s->slot[i], strlen(s->slot[i]))] = s->slot[i];
		big.n = s->n;
		free(s->slot);
		*s = big;
	}
	size_t i = slot_of(s, str, len);
	if (s->slot[i])
		return 0;
	if (!(s->slot[i] = strndup(str, len)))
		return -1;
	s->n++;
	return 1;
}

void sh_set_clear(sh_set *s)
{
	for (size_t i = 0; i < s->cap; i++)
		free(s->slot[i]);
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

sh_map *sh_map_ref(sh_map *m)
{
	__atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
	return m;
}

void sh_map_unref(sh_map *m)
{
	if (m && __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		gk_map_unwatch(m->p);
		munmap(m->p, m->len);
		free(m->path);
		free(m);
	}
}

void sh_sample_free(sh_sample *x)
{
	if (!x)
		return;
	sh_map_unref(x->map);
	free(x->m);
	free(x->data.p);
	free(x->names.p);
	free(x->ext_off);
	free(x->data_off);
	free(x);
}
