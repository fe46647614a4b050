/*
 * st_header.c - the safetensors header parser on arbitrary bytes (taken as
 * a whole file): it must return cleanly, and whatever it accepts must obey
 * the layout rules it claims to check.
 */
#include <stdlib.h>

#include "st/st.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gk_st_file *f;
	gk_err err;
	if (gk_st_parse(&f, data, size, size, "fuzz", &err) < 0)
		return 0;
	uint64_t at = 0;
	for (size_t i = 0; i < f->n; i++) {
		uint64_t nb;
		if (f->t[i].begin != at ||
		    gk_st_nbytes(f->t[i].dtype, gk_st_numel(&f->t[i]), &nb) ||
		    nb != f->t[i].end - f->t[i].begin)
			abort();
		at = f->t[i].end;
	}
	if (f->data_off + at != size)
		abort();
	gk_st_close(f);
	return 0;
}
