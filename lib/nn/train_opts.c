/*
 * train_opts.c - what a trainer's options leave to be computed, computed
 * once: the schedule's defaults, the model's shape from a config.json and
 * the shape flags (over GPT-2 small), the sequence length, and the data
 * reader's options. gpu-train's command line and the trainer both call
 * these. And the tests' hooks, from the environment.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/train_internal.h"

int gk_nn_train_resolve(gk_nn_train_opts *o, const char *config_path, gk_err *err)
{
	const gk_nn_config *f = &o->shape;
	int flags = f->layers || f->hidden || f->heads || f->vocab || f->positions;
	int ckpt = o->init_from || o->resume;
	if (o->sched.min_lr < 0)
		o->sched.min_lr = o->sched.lr / 10;
	o->sched.steps = o->steps;
	if (config_path && gk_nn_config_load(&o->cfg, config_path, err) < 0)
		return -1;
	int seq_set = o->seq > 0;
	if (config_path || flags || !o->init_from) {
		if (!config_path)
			o->cfg = gk_nn_gpt2_small;
		gk_nn_config_over(&o->cfg, f);
		o->have_config = 1;
		/* a checkpoint's config.json goes under the flags instead */
		o->cfg_from_flags = !config_path;
		if (!(o->cfg_from_flags && ckpt) && gk_nn_config_finish(&o->cfg, err) < 0)
			return config_path ? -1 : -2;
	}
	/* 0: the trainer takes the model's positions, once it has the shape */
	if (!seq_set)
		o->seq = o->have_config && !(o->cfg_from_flags && ckpt) ? (int)o->cfg.positions : 0;
	return 0;
}

void gk_nn_train_data_opts(const gk_nn_train_opts *o, int64_t vocab, gk_nn_data_opts *d)
{
	*d = (gk_nn_data_opts){.rank = 0, .world = 1, .shuffle = o->shuffle, .seed = o->seed,
			       .vocab = vocab, .eot = o->eot, .batch = o->batch, .seq = o->seq,
			       .skip_bad = o->skip_bad, .note = o->data_note,
			       .note_ctx = o->data_note_ctx};
}

/*
 * Which parallelism and offload settings go together, stated once. A
 * device given on the command line is said as given; one --device auto
 * chose, as the run's.
 */
int gk_nn_train_check(const gk_nn_train_opts *o, int cuda, gk_err *err)
{
	int given = o->device != GK_NN_AUTO;
	if (o->ckpt_gather && o->zero != 3)
		return gk_errf(err, "--ckpt-gather: only --zero 3 shards the model in its checkpoints "
			       "(--zero %d writes model.safetensors whole): leave it out", o->zero);
	/*
	 * ZeRO-2 and 3 partition on both backends (a GPU's over NCCL: dp.c
	 * refuses --comm mpi there, zero3.c gathers the units, over a tensor
	 * group and a pipeline too), with --compress too (each bucket's
	 * reduce-scatter the compressed ring, over MPI or NCCL; ZeRO-3's
	 * gradients are ZeRO-2's).
	 */
	if (o->offload_host && cuda == 0)
		return gk_errf(err, "--offload optimizer moves a GPU's optimizer state to host "
			       "memory, %s: give optimizer:DIR for files under DIR",
			       given ? "where the CPU backend already keeps it" :
			       "and this run is on the CPU, which keeps it there");
	if (o->offload_dir && cuda == 1)
		return gk_errf(err, "%s runs on the CPU backend only (on a GPU the moments stay "
			       "in device memory)", given ? "--offload optimizer:DIR" :
			       "optimizer offload to a directory");
	if (o->offload_chunk && !o->offload_dir)
		return gk_errf(err, "--offload-chunk sizes the reads of --offload optimizer:DIR: "
			       "give that too");
	if (o->seq_par) {
		/* the sequence splits over the tensor group: a length that
		 * divides (0: the model's positions, checked once known) */
		if (o->tp < 2)
			return gk_errf(err, "--sequence-parallel splits the sequence over a "
				       "tensor group: give --tp N (2 or more) too");
		int lo = o->seq / o->tp * o->tp;
		char alt[24] = "";
		if (lo > 0)
			snprintf(alt, sizeof(alt), "%d or ", lo);
		if (o->seq > 0 && o->seq % o->tp)
			return gk_errf(err, "--sequence-parallel with --tp %d: the sequence length "
				       "%d does not divide by %d (each rank keeps %d/%d positions "
				       "of each sequence): --seq %s%d", o->tp, o->seq, o->tp,
				       o->seq, o->tp, alt, lo + o->tp);
	}
	if (o->pp_chunks > 1 && o->pp_sched != GK_NN_PP_INTERLEAVED)
		return gk_errf(err, "--pp-chunks %d: the chunks of --pp-schedule interleaved (give "
			       "that too, or leave --pp-chunks out)", o->pp_chunks);
	if (o->pp_sched == GK_NN_PP_INTERLEAVED) {
		/* the schedule's shape, said before any work (the layers' count
		 * is checked once the model's shape is known: gk_nn_pp_chunk_layers) */
		int S = o->pp, M = o->grad_accum;
		if (S < 2)
			return gk_errf(err, "--pp-schedule interleaved: give --pp N (2 or more) too");
		if (o->pp_chunks < 2)
			return gk_errf(err, "--pp-schedule interleaved: give --pp-chunks V, the model "
				       "chunks a stage (2 or more; one chunk is --pp-schedule 1f1b)");
		/* a chunk takes its micro-batches S or more at a time
		 * (gk_mem_pp_group); evaluation, a batch at a time */
		if (M < S && !o->eval_only && o->steps > 0)
			return gk_errf(err, "--pp-schedule interleaved with --pp %d: --grad-accum %d is "
				       "fewer micro-batches than the %d stages (each chunk takes them %d "
				       "or more at a time): --grad-accum %d or more", S, M, S, S, S);
	}
	return 0;
}

/*
 * tests: GK_TEST_STRAGGLER=RANK:PART:MS, that rank spends MS more in that
 * part (data, compute, comm, optimizer, checkpoint) of every step;
 * GK_TEST_GPU_BUS=BUS,BUS,..., the GPU each rank of a CPU run reports
 * (through NVML, the fake one of the tests).
 */
static int test_straggler(gk_nn_train_opts *o, gk_err *err)
{
	const char *s = getenv("GK_TEST_STRAGGLER");
	o->test_gpu_bus = getenv("GK_TEST_GPU_BUS");
	if (!s)
		return 0;
	char part[32];
	int n = 0;
	if (sscanf(s, "%d:%31[a-z]:%d%n", &o->test_slow_rank, part, &o->test_slow_ms, &n) != 3 ||
	    s[n] || o->test_slow_rank < 0 || o->test_slow_ms < 0 ||
	    (o->test_slow_part = gk_nn_part_parse(part)) < 0)
		return gk_errf(err, "GK_TEST_STRAGGLER '%s': not RANK:PART:MS (PART data, compute, "
			       "comm, optimizer or checkpoint)", s);
	return 0;
}

int gk_nn_train_test_env(gk_nn_train_opts *o, int *grace_s, gk_err *err)
{
	/* tests: a slow disk (writing, checking), a commit held until a file
	 * exists, a step that never ends, a shorter grace, a wait for a
	 * signal after MICRO micro-steps of step STEP, the tree the memory
	 * check reads /proc and /sys under, a small pinned staging */
	const char *delay = getenv("GK_TEST_CKPT_DELAY_MS");
	const char *check = getenv("GK_TEST_CKPT_CHECK_DELAY_MS");
	const char *block = getenv("GK_TEST_BLOCK_STEP");
	const char *grace = getenv("GK_TEST_STOP_GRACE_S");
	const char *wait = getenv("GK_TEST_WAIT_SIGNAL");
	const char *pin = getenv("GK_TEST_PIN_BYTES");
	int g = *grace_s;
	if (delay) {
		/* WRITE[:COMMIT] milliseconds; COMMIT defaults to WRITE */
		char write[32];
		const char *commit = strchr(delay, ':');
		size_t n = commit ? (size_t)(commit - delay) : strlen(delay);
		snprintf(write, sizeof(write), "%.*s", (int)(n < sizeof(write) ? n : 0), delay);
		if (n >= sizeof(write) ||
		    gk_parse_int(write, 0, 3600000, &o->ckpt_delay_ms, "GK_TEST_CKPT_DELAY_MS", err) < 0 ||
		    gk_parse_int(commit ? commit + 1 : write, 0, 3600000, &o->ckpt_commit_delay_ms,
				 "GK_TEST_CKPT_DELAY_MS", err) < 0)
			return gk_errf(err, "GK_TEST_CKPT_DELAY_MS '%s': not MS or WRITE_MS:COMMIT_MS "
				       "(each 0 to 3600000)", delay);
	}
	if ((check && gk_parse_int(check, 0, 3600000, &o->ckpt_check_delay_ms,
				   "GK_TEST_CKPT_CHECK_DELAY_MS", err) < 0) ||
	    (block && gk_parse_int(block, 1, INT_MAX, &o->test_block_step,
				   "GK_TEST_BLOCK_STEP", err) < 0) ||
	    (grace && gk_parse_int(grace, 1, 3600, &g, "GK_TEST_STOP_GRACE_S", err) < 0) ||
	    (pin && gk_parse_u64(pin, (uint64_t)1 << 40, &o->test_staging, "GK_TEST_PIN_BYTES",
				 err) < 0))
		return -1;
	if (pin && o->test_staging < 4)
		return gk_errf(err, "GK_TEST_PIN_BYTES %s: 4 bytes at least", pin);
	int n = 0;
	if (wait && (sscanf(wait, "%" SCNd64 ":%d%n", &o->test_wait_step, &o->test_wait_micro, &n) != 2 ||
		     wait[n] || o->test_wait_step < 1 || o->test_wait_micro < 1))
		return gk_errf(err, "GK_TEST_WAIT_SIGNAL '%s': not STEP:MICRO (both 1 or more)", wait);
	*grace_s = g;
	o->mem_root = getenv("GK_TEST_MEM_ROOT");
	o->ckpt_commit_wait = getenv("GK_TEST_CKPT_COMMIT_WAIT");
	return test_straggler(o, err);
}
