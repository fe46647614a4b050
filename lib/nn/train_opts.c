/*
 * train_opts.c - what a trainer's options leave to be computed, computed
 * once: the schedule's defaults, the model's shape from a config.json and
 * the shape flags (over GPT-2 small), the sequence length, and the data
 * reader's options. gpu-train's command line and the trainer both call
 * these.
 */
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
