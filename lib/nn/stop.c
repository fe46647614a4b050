/*
 * stop.c - the stop protocol of a training process's signals (stop.h):
 * the handlers, the grace alarm after the first SIGTERM or SIGINT, and
 * their installation.
 */
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include "nn/stop.h"

static volatile sig_atomic_t stop_flag, stop_seen, nothing_to_save, first_sig;
/* the run failed and is exiting with its own status: a launcher's SIGTERM
 * to the other ranks, once one has exited, changes nothing and says nothing */
static volatile sig_atomic_t failing;
static volatile sig_atomic_t quiet_rank = 0; /* not rank 0: rank 0 says it for the job */
static volatile sig_atomic_t tracing; /* --trace-dir: a signal dumps the flight recorder */

/* SIGUSR2: dump the flight recorder and go on (the dump is async-signal-safe). */
static void on_usr2(int sig)
{
	(void)sig;
	gk_comm_trace_dump_all("SIGUSR2");
}

/* how long a step may take to reach the boundary (stop.h) */
static unsigned stop_grace = GK_NN_STOP_GRACE_S;

/* async-signal-safe: write(2) of a constant string */
#define SAY(s) ((void)!write(STDERR_FILENO, s, sizeof(s) - 1))

/*
 * Under Open MPI a SIGTERM from the rank's parent (mpirun, or orted on
 * another node) is mpirun ending the job, on its own SIGTERM or after a
 * rank died: it never forwards one. It sends SIGKILL odls_base_sigkill_timeout
 * seconds later, so the first signal's note says that rather than a stop
 * at the end of the step it cannot promise. Written when the handlers are
 * installed; empty outside Open MPI.
 */
static char launcher_note[400];
static size_t launcher_note_len;

/*
 * SIGTERM/SIGUSR1 ask for a checkpoint at the next step boundary, SIGINT
 * for a stop without one. The handler only sets the flag the trainer
 * polls between steps, and after SIGTERM or SIGINT arms an alarm: a step
 * that has not reached that boundary within stop_grace seconds (the
 * trainer sets stop_seen when it acts) ends the process, and a second
 * SIGTERM or SIGINT ends it at once; either way the steps since the last
 * checkpoint are lost, and the exit status is 128 + the first signal.
 * Outside training (--eval-only, --sample after the run) there is
 * nothing to save, and any of them ends the process at once.
 */
static void on_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (failing)
		return;
	/* a launcher's SIGTERM, once another rank died, may be all this rank gets */
	if (tracing && (sig == SIGTERM || sig == SIGINT))
		gk_comm_trace_dump_all(sig == SIGTERM ? "SIGTERM" : "SIGINT");
	if (sig == SIGALRM) {
		/* the trainer is stopping (its checkpoint may take long), or done */
		if (stop_seen || !first_sig || nothing_to_save)
			return;
		SAY("gpu-train: the step did not reach its end within the grace period after "
		    "the signal: exiting without a checkpoint; the steps since the last one "
		    "are lost\n");
		gk_cleanup_now();
		_exit(128 + first_sig);
	}
	if (nothing_to_save)
		_exit(128 + sig);
	if (sig == SIGINT || sig == SIGTERM) {
		if (first_sig) {
			SAY("gpu-train: a second signal: exiting now, without a checkpoint; the "
			    "steps since the last one are lost\n");
			gk_cleanup_now();
			_exit(128 + first_sig);
		}
		first_sig = sig;
		alarm(stop_grace);
		int launcher = sig == SIGTERM && launcher_note_len && si &&
			       si->si_pid == getppid();
		if (!quiet_rank && launcher)
			(void)!write(STDERR_FILENO, launcher_note, launcher_note_len);
		else if (!quiet_rank)
			SAY("gpu-train: stopping at the end of the step; a second signal, or a step "
			    "that does not end within the grace period, ends the process without a "
			    "checkpoint\n");
	}
	if (sig == SIGINT)
		stop_flag = 2;
	else if (stop_flag == 0)
		stop_flag = 1;
}

/*
 * lib/core removes temp files when a signal kills the process, with
 * handlers it installs on first use; install them now and ours over
 * them, so a signal always reaches the trainer (which stops cleanly and
 * leaves no temp files). A shell starts background jobs with SIGINT
 * ignored: a handler undoes that too.
 */
int gk_nn_stop_catch(gk_nn_train_opts *o, gk_err *err)
{
	gk_cleanup_forget(gk_cleanup_on_signal("/nonexistent"));
	/* SA_RESTART: the handler only sets flags the trainer polls, and a
	 * write it interrupts must go on. Under mpirun a rank's stdout is a
	 * pipe or pty its daemon drains when it can; on a loaded machine a
	 * line's write blocks there, and without SA_RESTART the forwarded
	 * signal failed it with EINTR: the line was lost and the run ended
	 * with "write standard output" and exit 1 instead of its checkpoint.
	 * Waits that must see the signal poll the flags (nanosleep, pause()
	 * return EINTR whatever the flag says). */
	gk_rank_info ri;
	if (gk_rank_discover(&ri, NULL) == 0 && ri.kill_after >= 0) {
		/* (a malformed environment is the trainer's error to report) */
		int n = snprintf(launcher_note, sizeof(launcher_note),
				 "gpu-train: SIGTERM from mpirun, which is ending the job: it kills "
				 "the ranks %d s after this signal (odls_base_sigkill_timeout); the "
				 "step and its checkpoint are kept only if they end before that; "
				 "SIGUSR1 to mpirun (which forwards it) waits for them\n",
				 ri.kill_after);
		launcher_note_len = n > 0 && (size_t)n < sizeof(launcher_note) ? (size_t)n : 0;
	}
	struct sigaction sa = {.sa_sigaction = on_signal, .sa_flags = SA_RESTART | SA_SIGINFO};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	if (o->trace_dir) {
		if (gk_comm_trace_dir_check(o->trace_dir, err) < 0)
			return gk_err_prefix(err, "--trace-dir");
		struct sigaction su = {.sa_handler = on_usr2, .sa_flags = SA_RESTART};
		sigemptyset(&su.sa_mask);
		sigaction(SIGUSR2, &su, NULL);
		tracing = 1;
	}
	gk_ignore_sigxfsz(); /* a write past `ulimit -f` fails: --ckpt-error handles it */
	o->stop = &stop_flag;
	o->stop_seen = &stop_seen;
	return 0;
}

void gk_nn_stop_grace(unsigned seconds)
{
	stop_grace = seconds;
}

void gk_nn_stop_quiet(int quiet)
{
	quiet_rank = quiet;
}

void gk_nn_stop_nothing_to_save(void)
{
	nothing_to_save = 1;
}

void gk_nn_stop_failing(void)
{
	failing = 1;
}
