/*
 * straggler.c - which rank slows the job down, and why (gpu-train
 * --straggler-every, gpu-train(1) "STRAGGLERS").
 *
 * Every rank adds up what its steps spent in each part (train.c measures
 * them); every straggler_every steps, the same steps on every rank since
 * steps are counted alike, the ranks allgather their means since the
 * last exchange with their GPU's clocks, and rank 0 states the spread
 * and judges. A run with --straggler-every 0, or a world of one, never
 * exchanges: no collective is added to any step.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cuda/cuda.h"
#include "nn/train_internal.h"
#include "topo/topo.h"

static const char *const part_names[GK_NN_NPARTS] = {
	[GK_NN_PART_DATA] = "data", [GK_NN_PART_COMPUTE] = "compute",
	[GK_NN_PART_COMM] = "comm", [GK_NN_PART_OPTIMIZER] = "optimizer",
	[GK_NN_PART_CHECKPOINT] = "checkpoint", [GK_NN_PART_BUSY] = "busy",
	[GK_NN_PART_STEP] = "step",
};

const char *gk_nn_part_name(int part)
{
	return part >= 0 && part < GK_NN_NPARTS ? part_names[part] : "?";
}

int gk_nn_part_parse(const char *s)
{
	for (int p = 0; p < GK_NN_PART_BUSY; p++)
		if (!strcmp(s, part_names[p]))
			return p;
	return -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void gk_nn_spread_of(const double *v, int n, size_t stride, gk_nn_spread *s)
{
	double *sorted = malloc((size_t)n * sizeof(*sorted));
	*s = (gk_nn_spread){.min = v[0], .max = v[0]};
	for (int r = 0; r < n; r++) {
		double x = v[(size_t)r * stride];
		if (x < s->min)
			s->min = x, s->min_rank = r;
		if (x > s->max)
			s->max = x, s->max_rank = r;
		if (sorted)
			sorted[r] = x;
	}
	if (!sorted) {
		s->median = NAN; /* no memory for it; the extremes stand */
		return;
	}
	qsort(sorted, (size_t)n, sizeof(*sorted), cmp_double);
	s->median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
	free(sorted);
}

void gk_nn_straggler_judge(gk_nn_straggler_report *r, const gk_nn_rank_times *t, int world,
			   int *run, double factor, int reports)
{
	size_t stride = sizeof(*t) / sizeof(double);
	_Static_assert(sizeof(gk_nn_rank_times) % sizeof(double) == 0,
		       "gk_nn_rank_times is a whole number of doubles");
	r->world = world;
	r->factor = factor;
	for (int p = 0; p < GK_NN_NPARTS; p++)
		gk_nn_spread_of(&t[0].part[p], world, stride, &r->part[p]);
	r->run = run;
	r->slow = -1;
	r->slow_part = -1;
	double med = r->part[GK_NN_PART_BUSY].median;
	for (int k = 0; k < world; k++) {
		/* a median of 0 (nothing measured) finds nobody slow */
		int slow = med > 0 && t[k].part[GK_NN_PART_BUSY] >= factor * med;
		run[k] = slow ? run[k] + 1 : 0;
		if (run[k] == reports && r->slow < 0)
			r->slow = k;
	}
	if (r->slow < 0)
		return;
	/* the part that puts it furthest above the others' */
	double most = -INFINITY;
	for (int p = 0; p < GK_NN_PART_BUSY; p++) {
		if (p == GK_NN_PART_COMM)
			continue; /* not busy time: a straggler's is the smallest */
		double over = t[r->slow].part[p] - r->part[p].median;
		if (over > most)
			most = over, r->slow_part = p;
	}
}

char *gk_nn_straggler_warning(const gk_nn_straggler_report *r, char *buf, size_t len)
{
	int k = r->slow;
	if (k < 0) {
		snprintf(buf, len, "no straggler");
		return buf;
	}
	const gk_nn_rank_times *t = &r->ranks[k];
	double busy = t->part[GK_NN_PART_BUSY], med = r->part[GK_NN_PART_BUSY].median;
	int p = r->slow_part;
	size_t n = (size_t)snprintf(buf, len, "rank %d on host %s: busy %.2fx the median (%.1f ms a "
				    "step against %.1f ms) for %d exchanges in a row, most of it in "
				    "%s (+%.1f ms)", k, r->hosts[k], busy / med, busy * 1e3, med * 1e3,
				    r->run[k], gk_nn_part_name(p),
				    (t->part[p] - r->part[p].median) * 1e3);
	if (t->gpu >= 0 && n < len) {
		char why[160] = "";
		if (t->have_reasons)
			gk_topo_slowdown_text(t->reasons, why, sizeof(why));
		n += (size_t)snprintf(buf + n, len - n, "; GPU %d %s%s", (int)t->gpu,
				      why[0] ? "is " : "",
				      why[0] ? why : t->have_reasons ? "reports no slowdown" :
				      "(no clock event reasons from the driver)");
		if (n < len && !isnan(t->sm_hz))
			n += (size_t)snprintf(buf + n, len - n, " (SM %.0f MHz", t->sm_hz / 1e6);
		if (n < len && !isnan(t->sm_hz))
			n += (size_t)snprintf(buf + n, len - n, isnan(t->temp_c) ? ")" : ", %.0f C)",
					      t->temp_c);
	}
	return buf;
}

int gk_nn_straggler_metrics(gk_metrics *m, const gk_nn_straggler_report *r, gk_err *err)
{
	static const char *const stat[] = {"min", "median", "max"};
	for (int p = 0; p < GK_NN_NPARTS; p++) {
		const gk_nn_spread *s = &r->part[p];
		double v[] = {s->min, s->median, s->max};
		for (int i = 0; i < 3; i++) {
			const char *lab[] = {"part", part_names[p], "stat", stat[i], NULL};
			if (gk_metrics_set(m, "gpukit_train_straggler_seconds", GK_METRIC_GAUGE,
					   "Seconds a step spent in a part, over the ranks (mean of the "
					   "steps since the last exchange).", lab, v[i], err) < 0)
				return -1;
		}
		for (int i = 0; i < 3; i += 2) {
			const char *lab[] = {"part", part_names[p], "stat", stat[i], NULL};
			if (gk_metrics_set(m, "gpukit_train_straggler_rank", GK_METRIC_GAUGE,
					   "The rank with the least (min) or most (max) time in a part.",
					   lab, i ? s->max_rank : s->min_rank, err) < 0)
				return -1;
		}
		const char *lab[] = {"part", part_names[p], NULL};
		if (gk_metrics_set(m, "gpukit_train_straggler_skew_ratio", GK_METRIC_GAUGE,
				   "The most time a rank spent in a part over the median rank's "
				   "(1: balanced).", lab, s->median > 0 ? s->max / s->median : 1,
				   err) < 0)
			return -1;
	}
	int slow = 0, gpus = 0, slowed = 0;
	double *hz = malloc((size_t)r->world * sizeof(*hz));
	if (!hz)
		return gk_err_sys(err, ENOMEM, "metrics");
	for (int k = 0; k < r->world; k++) {
		const gk_nn_rank_times *t = &r->ranks[k];
		slow += r->run[k] > 0;
		slowed += t->have_reasons && (t->reasons & GK_TOPO_SLOWDOWN_BITS);
		if (t->gpu >= 0 && !isnan(t->sm_hz))
			hz[gpus++] = t->sm_hz;
	}
	int rc = 0;
	if (gk_metrics_set(m, "gpukit_train_straggler_slow_ranks", GK_METRIC_GAUGE,
			   "Ranks whose busy time was --straggler-factor times the median's or "
			   "more at the last exchange.", NULL, slow, err) < 0 ||
	    gk_metrics_set(m, "gpukit_train_straggler_reports_total", GK_METRIC_COUNTER,
			   "Exchanges of the step's parts, this run.", NULL, (double)r->reports,
			   err) < 0 ||
	    gk_metrics_set(m, "gpukit_train_straggler_warnings_total", GK_METRIC_COUNTER,
			   "Warnings of a rank slow for several exchanges in a row, this run.", NULL,
			   (double)r->warnings, err) < 0)
		rc = -1;
	if (!rc && gpus > 0) {
		gk_nn_spread s;
		gk_nn_spread_of(hz, gpus, 1, &s);
		double v[] = {s.min, s.median, s.max};
		for (int i = 0; i < 3 && !rc; i++) {
			const char *lab[] = {"stat", stat[i], NULL};
			rc = gk_metrics_set(m, "gpukit_train_gpu_sm_clock_hertz", GK_METRIC_GAUGE,
					    "SM clock of the ranks' GPUs at the last exchange.", lab,
					    v[i], err);
		}
		if (!rc)
			rc = gk_metrics_set(m, "gpukit_train_gpu_slowed_ranks", GK_METRIC_GAUGE,
					    "Ranks whose GPU a power cap or brake, or a thermal or "
					    "hardware slowdown held down at the last exchange.", NULL,
					    slowed, err);
	}
	free(hz);
	return rc;
}

/* NaN is no JSON number: null */
static json_t *num(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

/* rank k as the JSON line names it, with its GPU */
static json_t *rank_json(const gk_nn_straggler_report *r, int k)
{
	const gk_nn_rank_times *t = &r->ranks[k];
	double med = r->part[GK_NN_PART_BUSY].median;
	json_t *o = json_pack("{s:i,s:s,s:o,s:i}", "rank", k, "host", r->hosts[k], "busy_ratio",
			      num(med > 0 ? t->part[GK_NN_PART_BUSY] / med : NAN), "exchanges",
			      r->run[k]);
	if (o && t->gpu >= 0) {
		char why[160] = "";
		json_object_set_new(o, "gpu", json_integer(t->gpu));
		json_object_set_new(o, "sm_clock_hz", num(t->sm_hz));
		json_object_set_new(o, "temperature_c", num(t->temp_c));
		if (t->have_reasons) {
			json_object_set_new(o, "clock_event_reasons", json_integer((json_int_t)t->reasons));
			json_object_set_new(o, "slowdown", json_string(gk_topo_slowdown_text(
						   t->reasons, why, sizeof(why))));
		}
	}
	return o;
}

json_t *gk_nn_straggler_json(const gk_nn_straggler_report *r)
{
	json_t *o = json_pack("{s:s,s:I,s:I,s:i,s:f}", "event", "stragglers", "step",
			      (json_int_t)r->step, "steps", (json_int_t)r->steps, "world", r->world,
			      "factor", r->factor);
	json_t *parts = json_object(), *slow = json_array();
	if (!o || !parts || !slow) {
		json_decref(o), json_decref(parts), json_decref(slow);
		return NULL;
	}
	json_object_set_new(o, "parts", parts);
	json_object_set_new(o, "slow", slow);
	for (int p = 0; p < GK_NN_NPARTS; p++) {
		const gk_nn_spread *s = &r->part[p];
		json_object_set_new(parts, part_names[p],
				    json_pack("{s:o,s:i,s:s,s:o,s:o,s:i,s:s,s:o}", "min_ms",
					      num(s->min * 1e3), "min_rank", s->min_rank, "min_host",
					      r->hosts[s->min_rank], "median_ms", num(s->median * 1e3),
					      "max_ms", num(s->max * 1e3), "max_rank", s->max_rank,
					      "max_host", r->hosts[s->max_rank], "skew",
					      num(s->median > 0 ? s->max / s->median : 1)));
	}
	for (int k = 0; k < r->world; k++)
		if (r->run[k] > 0)
			json_array_append_new(slow, rank_json(r, k));
	if (r->slow >= 0) {
		char w[512];
		json_t *s = rank_json(r, r->slow);
		if (s) {
			json_object_set_new(s, "part", json_string(gk_nn_part_name(r->slow_part)));
			json_object_set_new(s, "warning",
					    json_string(gk_nn_straggler_warning(r, w, sizeof(w))));
			json_object_set_new(o, "straggler", s);
		}
	}
	return o;
}

/* ---- the trainer's side ------------------------------------------------------------------ */

struct gk_nn_straggler {
	double sum[GK_NN_NPARTS];   /* this rank's, since the last exchange */
	int64_t steps;
	gk_nn_rank_times *all;      /* world */
	const char **hostp;         /* world, into the trainer's hosts */
	int *run;                   /* rank 0: world */
	int64_t reports, warnings;
	gk_topo_gpu *gpu;           /* this rank's GPU, or NULL */
};

/* This rank's GPU: the device it trains on, or the tests' list. */
static void open_gpu(gk_nn_trainer *t, gk_nn_straggler *s)
{
	char bus[64] = "";
	gk_err why;
	if (t->cuda) {
		if (gk_cuda_pci_bus_id(t->dev, bus, sizeof(bus), &why) < 0)
			return;
	} else if (t->o.test_gpu_bus) {
		const char *p = t->o.test_gpu_bus;
		for (int k = 0; k < t->rank && p; k++)
			p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
		if (!p)
			return;
		snprintf(bus, sizeof(bus), "%.*s", (int)strcspn(p, ","), p);
	}
	/* no driver, no NVML: the report goes without clocks */
	if (bus[0] && gk_topo_gpu_open(&s->gpu, bus, &why) < 0)
		s->gpu = NULL;
}

int gk_nn_tr_straggler_open(gk_nn_trainer *t, gk_err *err)
{
	if (t->o.straggler_every <= 0 || t->world < 2 || !t->hosts)
		return 0;
	/*
	 * A rank without memory for this fails alone, as place.c's does (the
	 * job ends through the launcher): agreeing on it would cost every
	 * run one more collective.
	 */
	gk_nn_straggler *s = calloc(1, sizeof(*s));
	size_t w = (size_t)t->world;
	t->strag = s;
	if (!s || !(s->all = calloc(w, sizeof(*s->all))) ||
	    !(s->hostp = calloc(w, sizeof(*s->hostp))) || !(s->run = calloc(w, sizeof(*s->run))))
		return gk_err_sys(err, ENOMEM, "straggler reports");
	for (size_t k = 0; k < w; k++)
		s->hostp[k] = t->hosts[k];
	open_gpu(t, s);
	return 0;
}

void gk_nn_tr_straggler_free(gk_nn_trainer *t)
{
	gk_nn_straggler *s = t->strag;
	if (!s)
		return;
	gk_topo_gpu_close(s->gpu);
	free(s->all);
	free(s->hostp);
	free(s->run);
	free(s);
	t->strag = NULL;
}

void gk_nn_tr_straggler_step(gk_nn_trainer *t, const double part[GK_NN_NPARTS])
{
	gk_nn_straggler *s = t->strag;
	if (!s)
		return;
	for (int p = 0; p < GK_NN_NPARTS; p++)
		s->sum[p] += part[p];
	s->steps++;
}

int gk_nn_tr_straggler_exchange(gk_nn_trainer *t, int64_t step, gk_nn_train_hooks *h,
				gk_err *err)
{
	gk_nn_straggler *s = t->strag;
	if (!s || step % t->o.straggler_every != 0)
		return 0;
	gk_nn_rank_times me;
	memset(&me, 0, sizeof(me)); /* padding too: the bytes go to every rank */
	for (int p = 0; p < GK_NN_NPARTS; p++)
		me.part[p] = s->steps ? s->sum[p] / (double)s->steps : 0;
	me.gpu = -1;
	me.sm_hz = me.temp_c = NAN;
	gk_topo_gpu_clocks c;
	gk_err why;
	if (s->gpu && gk_topo_gpu_read(s->gpu, &c, &why) == 0) {
		me.gpu = c.index;
		me.sm_hz = c.sm_hz;
		me.temp_c = c.temp_c;
		me.reasons = c.reasons;
		me.have_reasons = c.have_reasons;
	}
	if (gk_nn_tr_gather(t, &me, s->all, sizeof(me), err) < 0)
		return -1;
	gk_nn_straggler_report r = {.step = step, .steps = s->steps};
	memset(s->sum, 0, sizeof(s->sum));
	s->steps = 0;
	if (t->rank != 0)
		return 0;
	double factor = t->o.straggler_factor > 1 ? t->o.straggler_factor : GK_NN_STRAGGLER_FACTOR;
	gk_nn_straggler_judge(&r, s->all, t->world, s->run, factor, GK_NN_STRAGGLER_REPORTS);
	r.ranks = s->all;
	r.hosts = s->hostp;
	r.reports = ++s->reports;
	r.warnings = s->warnings += r.slow >= 0;
	if (h && h->stragglers)
		h->stragglers(&r, h->ctx);
	return 0;
}
