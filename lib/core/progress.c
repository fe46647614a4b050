/*
 * progress.c - the progress of a job of known or unknown size: on a
 * terminal, the status line (status.c) redrawn at most every
 * GK_PROGRESS_REDRAW seconds; in a log, a plain line every so often.
 */
#include <inttypes.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

double gk_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void format_duration(double s, char *buf, size_t len)
{
	uint64_t t = s < 0 ? 0 : (uint64_t)(s + 0.5);
	if (t >= 3600)
		snprintf(buf, len, "%" PRIu64 ":%02" PRIu64 ":%02" PRIu64, t / 3600,
			 t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%" PRIu64 ":%02" PRIu64, t / 60, t % 60);
}

char *gk_progress_format(const gk_progress *p, uint64_t done, double elapsed,
			 char *buf, size_t len)
{
	char d[32], t[32], r[32], eta[32];
	double rate = elapsed > 0 ? (double)done / elapsed : 0;
	size_t n;

	if (p->bytes) {
		gk_format_size(done, 0, d, sizeof(d));
		gk_format_size(p->total, 0, t, sizeof(t));
		gk_format_size((uint64_t)rate, 0, r, sizeof(r));
	} else {
		snprintf(d, sizeof(d), "%" PRIu64, done);
		snprintf(t, sizeof(t), "%" PRIu64, p->total);
		snprintf(r, sizeof(r), "%.0f", rate);
	}
	n = (size_t)snprintf(buf, len, "%s: %s", p->label, d);
	if (n < len && p->total)
		n += (size_t)snprintf(buf + n, len - n, " / %s", t);
	if (n < len && !p->bytes && p->unit)
		n += (size_t)snprintf(buf + n, len - n, " %s", p->unit);
	if (n < len && p->total)
		n += (size_t)snprintf(buf + n, len - n, "  %3d%%",
				      (int)(done >= p->total ? 100 : done * 100 / p->total));
	if (n < len)
		n += (size_t)snprintf(buf + n, len - n, "  %s/s", r);
	if (n < len && p->total && rate > 0 && done < p->total) {
		format_duration((double)(p->total - done) / rate, eta, sizeof(eta));
		snprintf(buf + n, len - n, "  ETA %s", eta);
	}
	return buf;
}

void gk_progress_start(gk_progress *p, const char *label, uint64_t total,
		       int bytes, const char *unit, int enabled)
{
	p->label = label;
	p->unit = unit;
	p->total = total;
	p->done = 0;
	p->bytes = bytes;
	/* The process's one status line: started here unless the tool has it
	 * on already, and then left to the tool at finish. */
	p->own = enabled && !gk_status_on();
	if (p->own)
		gk_status_start(1);
	p->on = enabled && gk_status_on() ? GK_PROGRESS_TTY : 0;
	p->start = gk_now();
	p->last = p->start;
	p->every = GK_PROGRESS_REDRAW;
	p->drawn = 0;
	p->out = NULL;
}

void gk_progress_lines(gk_progress *p, int enabled, double every)
{
	if (!enabled || p->on == GK_PROGRESS_TTY)
		return;
	p->on = GK_PROGRESS_LINES;
	p->every = every;
}

static void draw(gk_progress *p, uint64_t done, double now)
{
	char line[256];
	gk_progress_format(p, done, now - p->start, line, sizeof(line));
	if (p->on == GK_PROGRESS_TTY && !p->out)
		gk_status_draw(line);
	else if (p->on == GK_PROGRESS_TTY)
		fprintf(p->out, "\r%s\033[K", line); /* as the status line draws it */
	else
		fprintf(p->out ? p->out : stderr, "%s\n", line);
	p->last = now;
	p->drawn++;
}

void gk_progress_update_at(gk_progress *p, uint64_t done, double now)
{
	p->done = done;
	/*
	 * A redraw per update flooded terminals (one per sample: thousands a
	 * second) and, captured, logs: the clock alone decides, also when
	 * the total is unknown. A terminal sees the first state at once.
	 */
	if (p->on && (now - p->last >= p->every || (p->on == GK_PROGRESS_TTY && !p->drawn)))
		draw(p, done, now);
}

void gk_progress_update(gk_progress *p, uint64_t done)
{
	if (p->on)
		gk_progress_update_at(p, done, gk_now());
	else
		p->done = done;
}

void gk_progress_finish(gk_progress *p)
{
	/* Plain lines end with the final state only when a line was
	 * printed: a short run leaves a log empty. */
	if (p->on == GK_PROGRESS_TTY || (p->on == GK_PROGRESS_LINES && p->drawn)) {
		draw(p, p->done, gk_now());
		if (p->on == GK_PROGRESS_TTY && p->own) {
			gk_status_end();
			gk_status_stop();
		}
	}
	p->on = 0;
}
