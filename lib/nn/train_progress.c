/*
 * train_progress.c - the one line a training run shows on a terminal
 * (gpu-train draws it on stderr; here only its text and its timing).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/train.h"

void gk_nn_progress_start(gk_nn_progress *p, int64_t end, uint64_t step_tokens, double interval,
			  double now)
{
	memset(p, 0, sizeof(*p));
	p->end = end;
	p->step_tokens = step_tokens;
	p->interval = interval;
	p->start = now;
}

void gk_nn_progress_step(gk_nn_progress *p, const gk_nn_train_log *l)
{
	double s = l->step_ms / 1e3;
	p->steps++;
	if (p->steps == 1) {
		p->first = s;
		return;
	}
	p->recent[p->next] = s;
	p->next = (p->next + 1) % GK_NN_PROGRESS_WINDOW;
	if (p->n < GK_NN_PROGRESS_WINDOW)
		p->n++;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double gk_nn_progress_step_seconds(const gk_nn_progress *p)
{
	if (p->n == 0)
		return p->steps ? p->first : NAN;
	double v[GK_NN_PROGRESS_WINDOW];
	memcpy(v, p->recent, (size_t)p->n * sizeof(double));
	qsort(v, (size_t)p->n, sizeof(double), cmp_double);
	return p->n % 2 ? v[p->n / 2] : (v[p->n / 2 - 1] + v[p->n / 2]) / 2;
}

int gk_nn_progress_due(gk_nn_progress *p, int64_t step, double now)
{
	if (step < p->end && p->drawn > 0 && now - p->drawn < p->interval)
		return 0;
	p->drawn = now;
	return 1;
}

/* h:mm:ss past an hour, else m:ss (data-pack's meter writes the same) */
static void duration(double s, char *buf, size_t len)
{
	uint64_t t = isfinite(s) && s > 0 ? (uint64_t)(s + 0.5) : 0;
	if (t >= 3600)
		snprintf(buf, len, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, t / 3600, t / 60 % 60,
			 t % 60);
	else
		snprintf(buf, len, "%" PRIu64 ":%02" PRIu64, t / 60, t % 60);
}

char *gk_nn_progress_line(const gk_nn_progress *p, const gk_nn_train_log *l, double now,
			  char *buf, size_t len)
{
	char el[32], eta[32] = "-", loss[32];
	double per = gk_nn_progress_step_seconds(p);
	int64_t left = p->end > l->step ? p->end - l->step : 0;
	duration(now - p->start, el, sizeof(el));
	if (isfinite(per))
		duration((double)left * per, eta, sizeof(eta));
	snprintf(loss, sizeof(loss), isfinite(l->loss) ? "%.4f" : "%f", l->loss);
	int pct = p->end > 0 && l->step < p->end ? (int)(100 * l->step / p->end) : 100;
	snprintf(buf, len, "step %" PRId64 "/%" PRId64 "  %d%%  loss %s  %.0f tok/s  elapsed %s  "
		 "ETA %s", l->step, p->end, pct, loss,
		 isfinite(per) && per > 0 ? (double)p->step_tokens / per : 0.0, el, eta);
	return buf;
}
