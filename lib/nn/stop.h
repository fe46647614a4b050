/*
 * stop.h - the stop protocol of a training process's signals (prefix
 * gk_nn_stop_, stop.c), gpu-train's: SIGTERM and SIGUSR1 ask the trainer
 * for a checkpoint at the next step boundary, SIGINT for a stop without
 * one, through the flags gk_nn_train_opts' stop and stop_seen point at.
 * A step that does not reach the boundary within the grace period after
 * the first SIGTERM or SIGINT, or a second one, ends the process with
 * 128 + the first signal; with nothing to save any of them ends it at
 * once. SIGUSR2 dumps the flight recorder (--trace-dir).
 *
 * Unlike train.h's, the handlers write to stderr and end the process
 * (_exit) when the protocol says so; they are async-signal-safe.
 */
#ifndef GK_NN_STOP_H
#define GK_NN_STOP_H

#include "nn/train.h"

/*
 * How long a step may take, after SIGTERM or SIGINT, to reach the
 * boundary where the trainer stops (and checkpoints, for SIGTERM). A step
 * that cannot finish (an allocator failing forever under RLIMIT_AS, a
 * hung library call) would otherwise ignore the signal until the
 * launcher's SIGKILL. Long enough for a step of a large model on the CPU
 * (one step of GPT-2 small at --seq 1024, batch 4, on 2 cores: about
 * 20 s); a preemption's grace period is usually longer (Slurm's
 * --signal 60 to 120 s, Kubernetes' 30 s end with SIGKILL anyway).
 */
enum { GK_NN_STOP_GRACE_S = 60 };

/*
 * The handlers of SIGINT, SIGTERM, SIGUSR1 and SIGALRM (SA_RESTART), and
 * of SIGUSR2 with o->trace_dir (the directory checked: an error names
 * --trace-dir); SIGXFSZ ignored; o->stop and o->stop_seen set. The grace
 * period is GK_NN_STOP_GRACE_S until gk_nn_stop_grace. Under Open MPI the
 * first signal's note for a SIGTERM from the parent (mpirun ending the
 * job) says when mpirun's SIGKILL comes (gk_rank_info's kill_after).
 */
int gk_nn_stop_catch(gk_nn_train_opts *o, gk_err *err);
/* The grace period, in seconds (tests shorten it). */
void gk_nn_stop_grace(unsigned seconds);
/* Not the rank that speaks for the job: the first signal's note is its. */
void gk_nn_stop_quiet(int quiet);
/* Outside training (evaluation, sampling): a signal ends the process at once. */
void gk_nn_stop_nothing_to_save(void);
/* The run failed and exits with its own status: a signal changes nothing. */
void gk_nn_stop_failing(void);

#endif
