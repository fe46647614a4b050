/*
 * nn_straggler.c - straggler.c's judgement against a plain reference:
 * min, median and max of each part by another algorithm (the median by
 * counting, not sorting; the extremes' ranks by a scan that keeps the
 * lowest), the exchanges in a row recomputed from the whole history, the
 * warning's words, the metrics, and the slowdown reasons' text.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/train.h"
#include "topo/topo.h"
#include "tap.h"

/* The median by counting: x is a middle value when fewer than half lie
 * below it and fewer than half above; for an even n the two middle
 * values are the (n/2)-th and (n/2+1)-th smallest. */
static double ref_median(const double *v, int n)
{
	double lo = NAN, hi = NAN;
	for (int i = 0; i < n; i++) {
		int below = 0, equal = 0;
		for (int j = 0; j < n; j++)
			below += v[j] < v[i], equal += v[j] == v[i];
		/* v[i] takes the sorted places below .. below + equal - 1 */
		int a = n % 2 ? n / 2 : n / 2 - 1, b = n / 2;
		if (below <= a && a < below + equal)
			lo = v[i];
		if (below <= b && b < below + equal)
			hi = v[i];
	}
	return (lo + hi) / 2;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

static void spread(void)
{
	int bad = 0;
	for (int trial = 0; trial < 2000; trial++) {
		int n = 1 + trial % 9;
		double v[9];
		for (int i = 0; i < n; i++) /* few distinct values: ties are common */
			v[i] = trial % 2 ? floor(uniform() * 4) : uniform();
		gk_nn_spread s;
		gk_nn_spread_of(v, n, 1, &s);
		int lo = 0, hi = 0;
		for (int i = 1; i < n; i++) {
			if (v[i] < v[lo])
				lo = i;
			if (v[i] > v[hi])
				hi = i;
		}
		if (s.min != v[lo] || s.max != v[hi] || s.min_rank != lo || s.max_rank != hi ||
		    s.median != ref_median(v, n)) {
			if (!bad++)
				diag("trial %d (n %d): min %g@%d max %g@%d median %g, want %g@%d %g@%d %g",
				     trial, n, s.min, s.min_rank, s.max, s.max_rank, s.median, v[lo], lo,
				     v[hi], hi, ref_median(v, n));
		}
	}
	is_int(bad, 0, "2000 random spreads: min, median, max and the extremes' ranks");
	double even[] = {4, 1, 3, 2};
	gk_nn_spread s;
	gk_nn_spread_of(even, 4, 1, &s);
	ok(s.median == 2.5, "an even count's median is the middle two's mean (%g)", s.median);
	/* a stride: one part of records of three */
	double rec[] = {9, 5, 9, 9, 1, 9, 9, 3, 9};
	gk_nn_spread_of(rec + 1, 3, 3, &s);
	ok(s.min == 1 && s.min_rank == 1 && s.median == 3 && s.max == 5 && s.max_rank == 0,
	   "a strided spread reads every stride-th value");
}

enum { W = 5, K = GK_NN_STRAGGLER_REPORTS, E = 400 };

/* rank k at exchange e: busy time, and its parts */
static void fill(gk_nn_rank_times *t, double busy, int slow_part)
{
	memset(t, 0, sizeof(*t));
	t->gpu = -1;
	t->sm_hz = t->temp_c = NAN;
	for (int p = 0; p < GK_NN_PART_BUSY; p++)
		t->part[p] = p == GK_NN_PART_COMM ? 0.01 : busy / 4;
	/* the slow part takes what the others give up */
	if (slow_part >= 0) {
		for (int p = 0; p < GK_NN_PART_BUSY; p++)
			if (p != GK_NN_PART_COMM)
				t->part[p] = p == slow_part ? busy * 0.7 : busy * 0.1;
	}
	t->part[GK_NN_PART_BUSY] = busy;
	t->part[GK_NN_PART_STEP] = busy + t->part[GK_NN_PART_COMM];
}

static void runs(void)
{
	static double busy[E][W];
	int run[W] = {0}, bad = 0, warned = 0;
	const double f = 1.3;
	static const int parts[] = {GK_NN_PART_DATA, GK_NN_PART_COMPUTE, GK_NN_PART_OPTIMIZER,
				    GK_NN_PART_CHECKPOINT};
	for (int e = 0; e < E; e++) {
		gk_nn_rank_times t[W];
		/* mostly 1.0-1.2; now and then a rank at 1.2-2.0 for a while */
		for (int k = 0; k < W; k++) {
			busy[e][k] = 1 + 0.2 * uniform();
			if ((e / 7 + k) % 4 == 0 && uniform() < 0.8)
				busy[e][k] = 1.2 + 0.8 * uniform();
			fill(&t[k], busy[e][k], parts[(e + k) % 4]);
		}
		gk_nn_straggler_report r = {0};
		gk_nn_straggler_judge(&r, t, W, run, f, K);
		/* the reference: each rank's exchanges in a row, from the history */
		int want_slow = -1;
		for (int k = 0; k < W; k++) {
			int n = 0;
			for (int x = e; x >= 0; x--) {
				if (!(busy[x][k] >= f * ref_median(busy[x], W)))
					break;
				n++;
			}
			if (run[k] != n && !bad++)
				diag("exchange %d rank %d: %d in a row, want %d", e, k, run[k], n);
			if (n == K && want_slow < 0)
				want_slow = k;
		}
		if (r.slow != want_slow && !bad++)
			diag("exchange %d: slow %d, want %d", e, r.slow, want_slow);
		if (r.slow >= 0) {
			warned++;
			/* the part furthest above its median: the one made slow, as
			 * the others are at most 0.25 x 2.0 where it is 0.7 x 1.3 */
			int want = parts[(e + r.slow) % 4];
			if (r.slow_part != want && !bad++)
				diag("exchange %d: part %s, want %s", e, gk_nn_part_name(r.slow_part),
				     gk_nn_part_name(want));
		}
	}
	is_int(bad, 0, "400 exchanges of 5 ranks: runs, the slow rank and its part as the reference has them");
	ok(warned > 5, "the random history has warnings to check (%d)", warned);
}

static void warning(void)
{
	gk_nn_rank_times t[3];
	int run[3] = {0};
	for (int k = 0; k < 3; k++)
		fill(&t[k], 0.1, -1);
	fill(&t[1], 0.3, GK_NN_PART_DATA);
	t[1].gpu = 3;
	t[1].sm_hz = 1410e6;
	t[1].temp_c = 81;
	t[1].reasons = 0x4 | 0x1;
	t[1].have_reasons = 1;
	const char *hosts[] = {"a", "b", "c"};
	gk_nn_straggler_report r = {0};
	for (int x = 0; x < K; x++) {
		gk_nn_straggler_judge(&r, t, 3, run, 1.3, K);
		is_int(r.slow, x == K - 1 ? 1 : -1, x == K - 1 ? "the K-th exchange in a row warns"
								: "an exchange before the K-th does not");
	}
	r.ranks = t;
	r.hosts = hosts;
	char w[512];
	/* busy 0.3 against a median of 0.1; data 0.21 against 0.025 */
	is_str(gk_nn_straggler_warning(&r, w, sizeof(w)),
	       "rank 1 on host b: busy 3.00x the median (300.0 ms a step against 100.0 ms) for 3 "
	       "exchanges in a row, most of it in data (+185.0 ms); GPU 3 is power-capped "
	       "(SM 1410 MHz, 81 C)", "the warning names rank, host, part and the GPU's slowdown");
	gk_nn_straggler_judge(&r, t, 3, run, 1.3, K);
	is_int(r.slow, -1, "once warned, a rank still slow is not warned again");
	fill(&t[1], 0.1, -1);
	gk_nn_straggler_judge(&r, t, 3, run, 1.3, K);
	is_int(run[1], 0, "a rank back to the median's time starts its count again");

	gk_metrics *m;
	gk_err err;
	/* times a double holds exactly, for the text's sake */
	fill(&t[0], 0.125, -1);
	fill(&t[2], 0.125, -1);
	fill(&t[1], 0.5, GK_NN_PART_DATA);
	t[1].gpu = 3, t[1].sm_hz = 1410e6, t[1].reasons = 0x4, t[1].have_reasons = 1;
	t[0].gpu = 0, t[0].sm_hz = 1980e6;
	gk_nn_straggler_judge(&r, t, 3, run, 1.3, K);
	r.ranks = t, r.hosts = hosts, r.reports = 7, r.warnings = 1;
	char *text = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&text, &len);
	ok(gk_metrics_new(&m, NULL, &err) == 0 && gk_nn_straggler_metrics(m, &r, &err) == 0 &&
	   gk_metrics_format(m, fp) == 0, "the metrics of a report");
	fclose(fp);
	ok(text && strstr(text, "gpukit_train_straggler_seconds{part=\"busy\",stat=\"max\"} 0.5\n") &&
	   strstr(text, "gpukit_train_straggler_rank{part=\"busy\",stat=\"max\"} 1\n") &&
	   strstr(text, "gpukit_train_straggler_skew_ratio{part=\"busy\"} 4\n") &&
	   strstr(text, "gpukit_train_straggler_slow_ranks 1\n") &&
	   strstr(text, "gpukit_train_straggler_reports_total 7\n") &&
	   strstr(text, "gpukit_train_gpu_sm_clock_hertz{stat=\"min\"} 1410000000\n") &&
	   strstr(text, "gpukit_train_gpu_slowed_ranks 1\n"),
	   "the metrics carry the spread, the extremes' ranks, the skew and the GPUs");
	if (text && !strstr(text, "gpukit_train_straggler_skew_ratio{part=\"busy\"} 4\n"))
		diag("%s", text);
	free(text);
	gk_metrics_free(m);
}

static void names(void)
{
	int bad = 0;
	for (int p = 0; p < GK_NN_PART_BUSY; p++)
		bad += gk_nn_part_parse(gk_nn_part_name(p)) != p;
	is_int(bad, 0, "every part a test hook names reads back");
	ok(gk_nn_part_parse("busy") < 0 && gk_nn_part_parse("Data") < 0,
	   "busy and step are no part a hook slows");
	char b[256];
	is_str(gk_topo_slowdown_text(0x1 | 0x2 | 0x10 | 0x100, b, sizeof(b)), "",
	       "idling and clock settings are no slowdown");
	is_str(gk_topo_slowdown_text(0x4 | 0x40, b, sizeof(b)),
	       "power-capped, thermally slowed (hardware)", "a power cap and a thermal slowdown");
}

int main(void)
{
	spread();
	runs();
	warning();
	names();
	return done_testing();
}
