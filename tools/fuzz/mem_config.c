/*
 * mem_config.c - fuzz target: any bytes given to the config.json reader
 * either describe a model whose estimate is consistent or fail with a
 * message; never a crash, never a count that disagrees with its parts.
 */
#include <stdlib.h>

#include "mem/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gk_mem_model m;
	gk_err err;
	gk_strlist unk = {0};
	if (gk_mem_model_from_config_buf(&m, (const char *)data, size, "fuzz",
					 1, &unk, &err) == 0) {
		if (m.params != m.embed_params + m.layers * m.layer_params +
					m.norm_params + m.head_params)
			abort();
		gk_mem_run r;
		gk_mem_est e;
		gk_mem_run_default(&r);
		r.seq = 128;
		if (gk_mem_estimate(&m, &r, 1, &e, &err) == 0 &&
		    e.total < e.model_states)
			abort();
	}
	gk_strlist_free(&unk);
	return 0;
}
