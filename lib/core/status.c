/*
 * status.c - the terminal's status line (core.h, "status line").
 *
 * One line on stderr redrawn in place, for a long-running tool on a
 * terminal: what the run is doing, then its progress, instead of a scroll
 * of lines. Whatever else is said while it shows clears it first
 * (gk_status_pause), then puts it back (gk_status_resume); messages may
 * come from other threads (a data reader's notes), hence the lock. Logs
 * and pipes see none of it.
 */
#include <pthread.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/core.h"

static struct {
	int on;          /* drawing */
	int out_tty;     /* stdout is a terminal too (the same one, in practice) */
	int shown;       /* a line is on the terminal, without its newline */
	int paused;      /* ... taken off by gk_status_pause, to put back */
	char line[512];  /* the line drawn last */
	pthread_mutex_t mu;
} st = {.mu = PTHREAD_MUTEX_INITIALIZER};

void gk_status_start(int enabled)
{
	st.on = enabled && isatty(STDERR_FILENO);
	st.out_tty = st.on && isatty(STDOUT_FILENO);
}

void gk_status_stop(void)
{
	st.on = 0;
}

int gk_status_on(void)
{
	return st.on;
}

int gk_status_out_tty(void)
{
	return st.out_tty;
}

/* s in place of the line, cut to the terminal's width (a line that wraps
 * is not redrawn by a carriage return) */
static void put(const char *s)
{
	struct winsize ws;
	int w = ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 ? ws.ws_col - 1 : 511;
	fprintf(stderr, "\r%.*s\033[K", w, s);
	fflush(stderr);
}

void gk_status_draw(const char *s)
{
	if (!st.on)
		return;
	pthread_mutex_lock(&st.mu);
	snprintf(st.line, sizeof(st.line), "%s", s);
	put(st.line);
	st.shown = 1;
	pthread_mutex_unlock(&st.mu);
}

void gk_status_clear(void)
{
	if (!st.on)
		return;
	pthread_mutex_lock(&st.mu);
	if (st.shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
	st.shown = 0;
	pthread_mutex_unlock(&st.mu);
}

void gk_status_pause(void)
{
	if (!st.on)
		return;
	pthread_mutex_lock(&st.mu);
	st.paused = st.shown;
	if (st.shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
	}
}

void gk_status_resume(void)
{
	if (!st.on)
		return;
	fflush(stdout);
	if (st.paused)
		put(st.line);
	st.paused = 0;
	pthread_mutex_unlock(&st.mu);
}

void gk_status_end(void)
{
	if (!st.on)
		return;
	pthread_mutex_lock(&st.mu);
	if (st.shown)
		fputc('\n', stderr);
	fflush(stderr);
	st.shown = 0;
	pthread_mutex_unlock(&st.mu);
}
