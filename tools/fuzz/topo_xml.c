/*
 * topo_xml.c - fuzz target: any bytes given to gk_topo_load_buf either fail
 * with a message or give a topology on which every link, the warnings, the
 * binding and every output format work without a crash.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo.h"

/*
 * hwloc 2.9's XML reader leaks objects on some malformed inputs (inside
 * libhwloc, after our hwloc_topology_destroy); only ours should fail a run.
 */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libhwloc.so\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	gk_topo *t;
	gk_err err;
	if (gk_topo_load_buf(&t, buf, size, "fuzz", &err) == 0) {
		FILE *null = fopen("/dev/null", "w");
		int n = gk_topo_ngpus(t) + gk_topo_nnics(t);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				gk_strlist path = {0};
				gk_topo_explain(t, i, j, &path, &err);
				gk_strlist_free(&path);
			}
		gk_topo_bind *b;
		if (gk_topo_binding(t, 1 + (int)(size % 9), &b, &err) == 0) {
			if (null)
				gk_topo_print_binding(null, t, b, 0, 1 + (int)(size % 9), GK_BIND_ENV);
			free(b);
		}
		if (null) {
			gk_topo_print_matrix(null, t);
			gk_topo_print_pairs(null, t);
			gk_topo_print_json(null, t, &err);
			fclose(null);
		}
		gk_topo_free(t);
	}
	free(buf);
	return 0;
}
