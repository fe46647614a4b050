/*
 * core_metrics.c - the Prometheus text writer: exact output, escaping,
 * naming rules, atomic replacement. t8000 checks the same files with
 * promtool and a real node_exporter.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "tap.h"

static char *format(const gk_metrics *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&buf, &len);
	gk_metrics_format(m, fp);
	fclose(fp);
	return buf;
}

int main(void)
{
	gk_err err;
	gk_metrics *m;
	const char *common[] = {"job", "train \"a\"\\b\nc", NULL};
	const char *r0[] = {"rank", "0", NULL}, *r1[] = {"rank", "1", NULL};

	ok(gk_metrics_new(&m, common, &err) == 0, "new with common labels");
	ok(gk_metrics_set(m, "gpukit_train_tokens_total", GK_METRIC_COUNTER,
			  "Tokens trained on.", r0, 4096, &err) == 0, "counter");
	ok(gk_metrics_set(m, "gpukit_train_loss", GK_METRIC_GAUGE,
			  "Loss of the last step.\nsecond \\ line", NULL, 2.5, &err) == 0,
	   "gauge without labels");
	ok(gk_metrics_set(m, "gpukit_train_tokens_total", GK_METRIC_COUNTER,
			  "Tokens trained on.", r1, 1e20, &err) == 0, "second sample");
	ok(gk_metrics_set(m, "gpukit_train_tokens_total", GK_METRIC_COUNTER,
			  "Tokens trained on.", r0, 8192, &err) == 0, "replace");
	ok(gk_metrics_set(m, "gpukit_train_grad_norm", GK_METRIC_GAUGE, "x",
			  NULL, NAN, &err) == 0, "NaN gauge");
	ok(gk_metrics_set(m, "gpukit_train_lr", GK_METRIC_GAUGE, "y",
			  NULL, -INFINITY, &err) == 0, "-Inf gauge");
	char *got = format(m);
	is_str(got,
	       "# HELP gpukit_train_tokens_total Tokens trained on.\n"
	       "# TYPE gpukit_train_tokens_total counter\n"
	       "gpukit_train_tokens_total{job=\"train \\\"a\\\"\\\\b\\nc\",rank=\"0\"} 8192\n"
	       "gpukit_train_tokens_total{job=\"train \\\"a\\\"\\\\b\\nc\",rank=\"1\"} 1e+20\n"
	       "# HELP gpukit_train_loss Loss of the last step.\\nsecond \\\\ line\n"
	       "# TYPE gpukit_train_loss gauge\n"
	       "gpukit_train_loss{job=\"train \\\"a\\\"\\\\b\\nc\"} 2.5\n"
	       "# HELP gpukit_train_grad_norm x\n"
	       "# TYPE gpukit_train_grad_norm gauge\n"
	       "gpukit_train_grad_norm{job=\"train \\\"a\\\"\\\\b\\nc\"} NaN\n"
	       "# HELP gpukit_train_lr y\n"
	       "# TYPE gpukit_train_lr gauge\n"
	       "gpukit_train_lr{job=\"train \\\"a\\\"\\\\b\\nc\"} -Inf\n",
	       "exposition text: families together, labels escaped, replaced value");
	free(got);

	ok(gk_metrics_set(m, "gpukit_train_loss", GK_METRIC_COUNTER, "", NULL, 1,
			  &err) == -1, "a name keeps its type");
	is_str(err.msg, "metric 'gpukit_train_loss': set as a gauge and a counter",
	       "type clash message");
	ok(gk_metrics_set(m, "gpukit_steps", GK_METRIC_COUNTER, "", NULL, 1,
			  &err) == -1, "counter without _total refused");
	is_str(err.msg, "metric 'gpukit_steps': a counter's name ends in _total",
	       "counter name message");
	ok(gk_metrics_set(m, "gpukit_x_total", GK_METRIC_GAUGE, "", NULL, 1,
			  &err) == -1, "gauge with _total refused");
	ok(gk_metrics_set(m, "9lives", GK_METRIC_GAUGE, "", NULL, 1, &err) == -1,
	   "name starting with a digit refused");
	ok(gk_metrics_set(m, "a-b", GK_METRIC_GAUGE, "", NULL, 1, &err) == -1,
	   "name with '-' refused");
	const char *bad[] = {"__name__", "x", NULL}, *bad2[] = {"a:b", "x", NULL};
	ok(gk_metrics_set(m, "gpukit_y", GK_METRIC_GAUGE, "", bad, 1, &err) == -1,
	   "reserved label name refused");
	ok(gk_metrics_set(m, "gpukit_y", GK_METRIC_GAUGE, "", bad2, 1, &err) == -1,
	   "label name with ':' refused");
	ok(gk_metrics_set(m, "gpukit_z_total", GK_METRIC_COUNTER, "", NULL, -1,
			  &err) == -1, "negative counter refused");

	char dir[] = "/tmp/gk-metrics-XXXXXX", path[64];
	ok(mkdtemp(dir) != NULL, "temp dir");
	snprintf(path, sizeof(path), "%s/train.prom", dir);
	ok(gk_metrics_write(m, path, &err) == 0, "write");
	char *file = NULL;
	size_t len;
	ok(gk_read_file(path, 1 << 20, &file, &len, &err) == 0 &&
	   strstr(file, "gpukit_train_tokens_total{run=\"train\",job=") &&
	   strstr(file, "gpukit_train_lr{run=\"train\",job="),
	   "the file labels every sample run=\"train\" (its name less .prom)");
	free(file);

	/* run's value is escaped; it joins a sample's own labels, or stands alone */
	gk_metrics *m2;
	char p2[96];
	snprintf(p2, sizeof(p2), "%s/a\"b.prom.bak", dir);
	ok(gk_metrics_new(&m2, NULL, &err) == 0 &&
	   gk_metrics_set(m2, "gpukit_x", GK_METRIC_GAUGE, "h", NULL, 1, &err) == 0 &&
	   gk_metrics_set(m2, "gpukit_y", GK_METRIC_GAUGE, "h", r1, 2, &err) == 0 &&
	   gk_metrics_write(m2, p2, &err) == 0, "write a second file");
	ok(gk_read_file(p2, 1 << 20, &file, &len, &err) == 0, "read it");
	is_str(file,
	       "# HELP gpukit_x h\n# TYPE gpukit_x gauge\ngpukit_x{run=\"a\\\"b.prom.bak\"} 1\n"
	       "# HELP gpukit_y h\n# TYPE gpukit_y gauge\ngpukit_y{run=\"a\\\"b.prom.bak\",rank=\"1\"} 2\n",
	       "run escaped, first; only a final .prom is taken off");
	free(file);
	got = format(m2);
	ok(!strstr(got, "run="), "gk_metrics_format adds no run label");
	free(got);
	gk_metrics_free(m2);
	unlink(p2);
	ok(gk_metrics_write(m, "/nonexistent-dir/x.prom", &err) == -1,
	   "write into a missing directory fails");
	unlink(path);
	rmdir(dir);
	gk_metrics_free(m);
	return done_testing();
}
