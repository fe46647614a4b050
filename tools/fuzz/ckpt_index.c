/*
 * ckpt_index.c - the Hugging Face index parser on arbitrary bytes: no
 * crash, and every file name it accepts is relative and free of "..".
 */
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gk_ckpt_index ix;
	gk_err err;
	if (gk_ckpt_index_parse(&ix, (const char *)data, size, "fuzz", &err) < 0)
		return 0;
	for (size_t i = 0; i < ix.files.n; i++) {
		const char *f = ix.files.v[i];
		if (!*f || f[0] == '/' || strcmp(f, "..") == 0 || strncmp(f, "../", 3) == 0 ||
		    strstr(f, "/../") || (strlen(f) >= 3 && strcmp(f + strlen(f) - 3, "/..") == 0))
			abort();
	}
	for (size_t i = 0; i < ix.names.n; i++)
		if (ix.file_of[i] >= ix.files.n)
			abort();
	gk_ckpt_index_free(&ix);
	return 0;
}
