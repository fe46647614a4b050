/*
 * train_metrics.c - a training step's log and the run's checkpoints as
 * Prometheus samples (gpu-train --metrics).
 */
#include <math.h>
#include <stdio.h>

#include "nn/train.h"

/*
 * Model parallelism's figures of the last step: what rank 0 put into its
 * tensor group's collectives, and under --pp its pipeline's bubble and
 * each stage's (gk_nn_pp_stage), labelled by stage.
 */
static int pp_metrics(gk_metrics *m, const gk_nn_train_log *l, gk_err *err)
{
	if (l->tp_bytes &&
	    gk_metrics_set(m, "gpukit_train_tp_comm_bytes", GK_METRIC_GAUGE,
			   "Bytes rank 0 put into its tensor group's collectives in the last step.",
			   NULL, (double)l->tp_bytes, err) < 0)
		return -1;
	if (l->pp_stages == 0)
		return 0;
	if (gk_metrics_set(m, "gpukit_train_pp_bubble_ratio", GK_METRIC_GAUGE,
			   "Pipeline bubble of the last step: the stages' idle time over their busy time.",
			   NULL, l->pp_bubble, err) < 0)
		return -1;
	for (int k = 0; k < l->pp_stages; k++) {
		const gk_nn_pp_stage *g = &l->pp_stage[k];
		char s[16];
		snprintf(s, sizeof(s), "%d", k);
		const char *lab[] = {"stage", s, NULL};
		if (gk_metrics_set(m, "gpukit_train_pp_stage_bubble_ratio", GK_METRIC_GAUGE,
				   "A pipeline stage's idle time over its busy time, the last step.",
				   lab, g->bubble, err) < 0 ||
		    gk_metrics_set(m, "gpukit_train_pp_stage_idle_seconds", GK_METRIC_GAUGE,
				   "A pipeline stage's idle time in the last step's schedule.",
				   lab, g->idle_ms / 1e3, err) < 0 ||
		    gk_metrics_set(m, "gpukit_train_pp_comm_bytes", GK_METRIC_GAUGE,
				   "Bytes a pipeline stage sent to its neighbours in the last step.",
				   lab, (double)g->pp_bytes, err) < 0)
			return -1;
		if (l->tp_bytes &&
		    gk_metrics_set(m, "gpukit_train_pp_stage_tp_comm_bytes", GK_METRIC_GAUGE,
				   "Bytes a pipeline stage put into its tensor group's collectives, "
				   "the last step.", lab, (double)g->tp_bytes, err) < 0)
			return -1;
	}
	return 0;
}

/*
 * Names by Prometheus' conventions (https://prometheus.io/docs/practices/naming/):
 * base units (seconds, bytes), _total on counters only. steps_total and
 * tokens_total count from the start of training, across resumes, so a
 * rate() over them is the throughput. Memory has no "total" category: a
 * sum() over the label would count it twice.
 */
int gk_nn_train_metrics(gk_metrics *m, const gk_nn_train_log *l,
			const gk_nn_train_mem *mem, int world, double now,
			gk_err *err)
{
	const struct {
		const char *name, *help;
		gk_metric_type type;
		double v;
	} g[] = {
		{"gpukit_train_steps_total", "Optimizer steps done, across resumes.",
		 GK_METRIC_COUNTER, (double)l->step},
		{"gpukit_train_tokens_total", "Tokens trained on by all ranks, across resumes.",
		 GK_METRIC_COUNTER, (double)l->tokens},
		{"gpukit_train_loss", "Training loss of the last step (mean over ranks).",
		 GK_METRIC_GAUGE, l->loss},
		{"gpukit_train_learning_rate", "Learning rate of the last step.",
		 GK_METRIC_GAUGE, l->lr},
		{"gpukit_train_grad_norm", "Global gradient norm of the last step, before clipping.",
		 GK_METRIC_GAUGE, l->grad_norm},
		{"gpukit_train_step_seconds", "Wall time of the last step.",
		 GK_METRIC_GAUGE, l->step_ms / 1e3},
		{"gpukit_train_comm_seconds", "Gradient communication time of the last step.",
		 GK_METRIC_GAUGE, l->comm_ms / 1e3},
		{"gpukit_train_exposed_comm_seconds",
		 "Communication of the last step not hidden behind compute.",
		 GK_METRIC_GAUGE, l->exposed_comm_ms / 1e3},
		{"gpukit_train_tokens_per_second", "Throughput of the last step, all ranks.",
		 GK_METRIC_GAUGE, l->tokens_per_s},
		{"gpukit_train_step_skipped", "1 when the last step's update was skipped (non-finite).",
		 GK_METRIC_GAUGE, l->skipped ? 1 : 0},
		{"gpukit_train_world_size", "Ranks training.", GK_METRIC_GAUGE, world},
		{"gpukit_train_last_step_timestamp_seconds", "When the last step ended, in Unix time.",
		 GK_METRIC_GAUGE, now},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(g); i++)
		if (gk_metrics_set(m, g[i].name, g[i].type, g[i].help, NULL, g[i].v, err) < 0)
			return -1;
	/* kept from the last evaluation until the next */
	if (!isnan(l->val_loss) &&
	    gk_metrics_set(m, "gpukit_train_val_loss", GK_METRIC_GAUGE,
			   "Loss on the validation data at the last evaluation.", NULL,
			   l->val_loss, err) < 0)
		return -1;
	if (pp_metrics(m, l, err) < 0)
		return -1;
	for (int c = 0; c < GK_MEM_NCAT; c++) {
		const char *lab[] = {"category", gk_mem_cat_name(c), NULL};
		if (gk_metrics_set(m, "gpukit_train_memory_bytes", GK_METRIC_GAUGE,
				   "Memory rank 0 allocated, by category.", lab,
				   (double)mem->bytes[c], err) < 0)
			return -1;
	}
	/* on GPUs: the host terms the start line's host_memory lists, no total */
	for (int h = 0; h < GK_MEM_NHOST; h++) {
		const char *lab[] = {"term", gk_mem_host_name(h), NULL};
		if (mem->host[h] &&
		    gk_metrics_set(m, "gpukit_train_host_memory_bytes", GK_METRIC_GAUGE,
				   "Host memory rank 0 allocated for the model on GPUs, by term.",
				   lab, (double)mem->host[h], err) < 0)
			return -1;
	}
	return 0;
}

int gk_nn_train_ckpt_metrics(gk_metrics *m, const gk_nn_ckpt_stats *s, gk_err *err)
{
	if (gk_metrics_set(m, "gpukit_train_checkpoints_failed_total", GK_METRIC_COUNTER,
			   "Checkpoints not written (--ckpt-error continue), this run.", NULL,
			   (double)s->failed, err) < 0)
		return -1;
	if (s->step <= 0)
		return 0;
	const struct {
		const char *name, *help;
		double v;
	} g[] = {
		{"gpukit_train_checkpoint_step", "Step of the last checkpoint committed.",
		 (double)s->step},
		{"gpukit_train_checkpoint_seconds",
		 "Time of the last checkpoint, from the copy of the state to its commit.",
		 s->seconds},
		{"gpukit_train_checkpoint_timestamp_seconds",
		 "When the last checkpoint was committed, in Unix time.", s->when},
	};
	for (size_t i = 0; i < GK_ARRAY_SIZE(g); i++)
		if (gk_metrics_set(m, g[i].name, GK_METRIC_GAUGE, g[i].help, NULL, g[i].v,
				   err) < 0)
			return -1;
	return 0;
}
