/*
 * report.c - what gpu-train says of a run at its start and its end: the
 * notes and warnings before it starts, the model, its grid and device,
 * the memory per rank and where the parameters came from; the summary
 * once training ends. Each is a --json event (a new object for the
 * caller to print and release) or lines for a person on the stream the
 * caller gives (the notes are lines only). Which rank speaks, and when,
 * is the caller's: the trainer's accessors (train.h) are all this reads.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "nn/train.h"

/* JSON has no NaN or infinity: those become null. */
static json_t *jnum(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

void gk_nn_report_mem(FILE *out, const gk_nn_train_mem *m, json_t *into)
{
	char b[32];
	if (into) {
		json_t *o = json_object();
		for (int c = 0; c < GK_MEM_NCAT; c++)
			json_object_set_new(o, gk_mem_cat_name(c), json_integer((json_int_t)m->bytes[c]));
		json_object_set_new(o, "total", json_integer((json_int_t)m->total));
		json_object_set_new(into, "memory", o);
		if (m->host_total) {
			json_t *h = json_object();
			for (int i = 0; i < GK_MEM_NHOST; i++)
				if (m->host[i])
					json_object_set_new(h, gk_mem_host_name(i),
							    json_integer((json_int_t)m->host[i]));
			json_object_set_new(h, "total", json_integer((json_int_t)m->host_total));
			json_object_set_new(into, "host_memory", h);
		}
		if (m->offload_file)
			json_object_set_new(into, "offload",
					    json_pack("{s:s, s:s, s:I, s:I, s:I}", "where", "file",
						      "file", m->offload_path,
						      "state", (json_int_t)m->offload_state,
						      "file_bytes", (json_int_t)m->offload_file,
						      "buffer", (json_int_t)m->offload_buffer));
		else if (m->offload_state)
			json_object_set_new(into, "offload",
					    json_pack("{s:s, s:I}", "where", "host",
						      "state", (json_int_t)m->offload_state));
		return;
	}
	fprintf(out, "memory per rank:");
	for (int c = 0; c < GK_MEM_NCAT; c++)
		fprintf(out, "%s %s %s", c ? "," : "", gk_mem_cat_name(c),
			     gk_format_size(m->bytes[c], 0, b, sizeof(b)));
	fprintf(out, ", total %s\n", gk_format_size(m->total, 0, b, sizeof(b)));
	if (m->host_total) {
		const char *sep = "";
		fprintf(out, "host memory per rank:");
		for (int i = 0; i < GK_MEM_NHOST; i++) {
			if (!m->host[i])
				continue;
			fprintf(out, "%s %s %s", sep, gk_mem_host_name(i),
				gk_format_size(m->host[i], 0, b, sizeof(b)));
			sep = ",";
		}
		fprintf(out, ", total %s\n",
			gk_format_size(m->host_total, 0, b, sizeof(b)));
	}
	if (m->offload_file) {
		char f[32];
		fprintf(out, "optimizer state offloaded: %s in '%s', through a buffer of %s\n",
			     gk_format_size(m->offload_file, 0, f, sizeof(f)), m->offload_path,
			     gk_format_size(m->offload_buffer, 0, b, sizeof(b)));
	} else if (m->offload_state) {
		fprintf(out, "optimizer state offloaded: %s in host memory, the update on the CPU\n",
			     gk_format_size(m->offload_state, 0, b, sizeof(b)));
	}
}

/* What both forms of the start line say, read once from the trainer. */
typedef struct start_facts {
	const gk_nn_config *cfg;
	const gk_nn_train_mem *mem;
	gk_nn_model *m;
	const gk_nn_train_opts *r;
	const char *device, *precision;
	const char *from; /* resumed or --init-from */
	const char *tok;
	size_t np;
} start_facts;

static start_facts start_of(gk_nn_trainer *t)
{
	start_facts f = {.cfg = gk_nn_trainer_config(t), .mem = gk_nn_trainer_mem(t),
			 .m = gk_nn_trainer_model(t), .r = gk_nn_trainer_opts(t),
			 .device = gk_nn_trainer_device(t, NULL),
			 .from = gk_nn_trainer_model_from(t),
			 .tok = gk_nn_trainer_tok_from(t, NULL)};
	f.precision = strcmp(f.device, "cpu") ? gk_nn_precision_name(f.r->precision) : "fp32";
	f.np = gk_nn_param_count(f.m);
	return f;
}

json_t *gk_nn_report_start_json(gk_nn_trainer *t)
{
	start_facts f = start_of(t);
	const gk_nn_config *cfg = f.cfg;
	const gk_nn_train_mem *mem = f.mem;
	gk_nn_model *m = f.m;
	const gk_nn_train_opts *r = f.r;
	const char *device = f.device, *precision = f.precision, *from = f.from, *tok = f.tok;
	size_t np = f.np;
	const char *comm = gk_nn_trainer_comm(t, NULL);
	int tp = r->tp > 1 ? r->tp : 1, pp = r->pp > 1 ? r->pp : 1;
	json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:i,s:i,s:i,s:i,s:i}",
			      "event", "start", "device", device, "precision", precision,
			      "comm", comm,
			      "layers", (json_int_t)cfg->layers,
			      "hidden", (json_int_t)cfg->hidden, "heads",
			      (json_int_t)cfg->heads, "vocab", (json_int_t)cfg->vocab,
			      "positions", (json_int_t)cfg->positions, "params",
			      (json_int_t)np, "world", gk_nn_trainer_world(t), "batch",
			      r->batch, "seq", r->seq, "grad_accum", r->grad_accum, "zero", r->zero);
	/* the flat buffer, with the padded vocabulary rows */
	json_object_set_new(j, "params_padded", json_integer((json_int_t)gk_nn_nparams(m)));
	json_object_set_new(j, "threads", json_integer(r->threads));
	/* the grid: world = dp x tp */
	json_object_set_new(j, "tp", json_integer(tp));
	if (tp > 1)
		json_object_set_new(j, "sequence_parallel",
				    json_boolean(r->seq_par != 0));
	json_object_set_new(j, "pp", json_integer(pp));
	json_object_set_new(j, "dp", json_integer(gk_nn_trainer_world(t) / tp / pp));
	if (pp > 1) {
		json_object_set_new(j, "pp_schedule",
				    json_string(gk_nn_pp_sched_name(r->pp_sched)));
		int V = r->pp_sched == GK_NN_PP_INTERLEAVED ? r->pp_chunks : 1;
		if (V > 1) {
			json_object_set_new(j, "pp_chunks", json_integer(V));
			json_object_set_new(j, "pp_group",
					    json_integer(gk_mem_pp_group(r->grad_accum, pp)));
		}
		json_object_set_new(j, "pp_bubble",
				    json_real((double)(pp - 1) / ((double)V * r->grad_accum)));
	}
	if (gk_nn_trainer_device_desc(t))
		json_object_set_new(j, "gpu", json_string(gk_nn_trainer_device_desc(t)));
	json_object_set_new(j, "overlap", json_boolean(r->overlap));
	if (r->zero == 3)
		json_object_set_new(j, "reshard_after_forward",
				    json_boolean(!r->keep_gathered));
	if (gk_nn_trainer_ckpt_sharded(t))
		json_object_set_new(j, "ckpt_sharded", json_true());
	if (tok)
		json_object_set_new(j, "tokenizer", json_string(tok));
	if (from) {
		json_object_set_new(j, "from", json_string(from));
		json_object_set_new(j, "from_step",
				    json_integer(gk_nn_trainer_step(t)));
	}
	gk_nn_report_mem(NULL, mem, j);
	return j;
}

void gk_nn_report_start_text(FILE *out, gk_nn_trainer *t)
{
	start_facts f = start_of(t);
	const gk_nn_config *cfg = f.cfg;
	const gk_nn_train_mem *mem = f.mem;
	const gk_nn_train_opts *r = f.r;
	const char *device = f.device, *precision = f.precision, *from = f.from, *tok = f.tok;
	size_t np = f.np;
	char grid[320];
	gk_nn_grid_describe(grid, sizeof(grid), gk_nn_trainer_world(t), cfg->layers, r);
	/* what text is to the model: its tokenizer, or bytes */
	fprintf(out, "gpu-train: %" PRId64 " layers, hidden %" PRId64 ", %" PRId64
		     " heads, vocab %" PRId64 ", %" PRId64 " positions: %zu parameters; %d rank%s%s on %s (%s), "
		     "%d thread%s%s%s; %s%s\n",
		     cfg->layers, cfg->hidden, cfg->heads, cfg->vocab, cfg->positions, np,
		     gk_nn_trainer_world(t), gk_nn_trainer_world(t) > 1 ? "s" : "", grid, device,
		     precision, r->threads, r->threads > 1 ? "s" : "",
		     gk_nn_trainer_world(t) > 1 ? " each" : "",
		     gk_nn_trainer_world(t) == 1 ? "" :
		     /* a pipeline's reduction follows its schedule; ZeRO-3's
		      * gathers are what overlaps there */
		     r->pp > 1 && r->overlap ? "; gathers prefetched, reduction after the schedule" :
		     r->overlap ? "; allreduce during backward" : "; allreduce after backward",
		     tok ? "tokenizer " : "no tokenizer: ",
		     tok ? tok : cfg->vocab == GK_NN_BYTE_VOCAB ? "bytes" : "token ids");
	if (gk_nn_trainer_device_desc(t))
		fprintf(out, "%s: %s\n", device, gk_nn_trainer_device_desc(t));
	gk_nn_report_mem(out, mem, NULL);
	if (from && r->resume && gk_nn_trainer_step(t) > 0)
		fprintf(out, "resumed from step %" PRId64 " of %s\n", gk_nn_trainer_step(t),
			     from);
	else if (from)
		fprintf(out, "parameters from %s\n", from);
	if (gk_nn_trainer_ckpt_sharded(t))
		fprintf(out, "checkpoints: each rank writes its shard of the model (--zero 3); "
			     "transformers loads what 'ckpt-merge %s/latest -o DIR' makes\n",
			     r->ckpt_dir);
}

void gk_nn_report_notes(FILE *out, const gk_nn_trainer *t)
{
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	const char *note, *comm_note;
	gk_nn_trainer_device(t, &note);
	gk_nn_trainer_comm(t, &comm_note);
	if (note)
		fprintf(out, "gpu-train: %s\n", note);
	if (comm_note)
		fprintf(out, "gpu-train: %s\n", comm_note);
	const char *tok_note;
	gk_nn_trainer_tok_from(t, &tok_note);
	if (tok_note)
		fprintf(out, "gpu-train: note: %s\n", tok_note);
	if (gk_nn_trainer_ckpt_note(t))
		fprintf(out, "gpu-train: %s\n", gk_nn_trainer_ckpt_note(t));
	/* what changed since the checkpoint's run, a line each (for a run
	 * that trains) */
	const char *rn = r->steps > 0 ? gk_nn_trainer_resume_notes(t) : NULL;
	for (const char *nl; rn; rn = nl ? nl + 1 : NULL) {
		nl = strchr(rn, '\n');
		fprintf(out, "gpu-train: note: %.*s\n",
			nl ? (int)(nl - rn) : (int)strlen(rn), rn);
	}
	const gk_nn_placement *pl = gk_nn_trainer_placement(t);
	int tp = r->tp > 1 ? r->tp : 1;
	char warn[256];
	if (gk_nn_pp_warning(warn, sizeof(warn), r))
		fprintf(out, "gpu-train: warning: %s\n", warn);
	if (pl->tp_span > 0)
		fprintf(out, "gpu-train: warning: %d of the %d tensor groups span hosts: each "
			"layer's allreduces cross the network every step (a group is %d consecutive "
			"ranks: place them on one host)\n", pl->tp_span, gk_nn_trainer_world(t) / tp,
			tp);
	if (r->threads > pl->share) {
		char quota[64] = "";
		if (pl->quota > 0)
			snprintf(quota, sizeof(quota), ", its cgroup's CPU quota %.3g", pl->quota);
		if (pl->sharing > 1)
			fprintf(out, "gpu-train: warning: --threads %d is more than this rank's share "
				"of its CPUs, %d (%d CPUs%s, shared by %d ranks of the host); threads "
				"that share a CPU make every step slower\n",
				r->threads, pl->share, pl->cpus, quota, pl->sharing);
		else
			fprintf(out, "gpu-train: warning: --threads %d is more than the %d CPU%s this "
				"rank may use%s; threads that share a CPU make every step slower\n",
				r->threads, pl->cpus, pl->cpus > 1 ? "s" : "", quota);
	}
}

/* the summary's "stopped": how the run ended */
static const char *stopped(const gk_nn_train_opts *r, const gk_nn_train_summary *s)
{
	/* step 0: stopped before a first step, nothing to keep */
	return s->stopped == 1 ? (r->ckpt_dir && !s->ckpt_lost && s->step > 0 ?
				  "signal (checkpointed)" : "signal") :
	       s->stopped == 2 ? "interrupt" : s->steps == 0 ? "already done" : "done";
}

json_t *gk_nn_report_summary_json(const gk_nn_trainer *t, const gk_nn_train_summary *s)
{
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	const char *why = stopped(r, s);
	json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:f,s:o,s:s,s:I}", "event",
			      "summary", "step", (json_int_t)s->step, "steps",
			      (json_int_t)s->steps, "tokens", (json_int_t)s->tokens,
			      "seconds", s->seconds, "loss", jnum(s->last_loss), "stopped",
			      why, "skipped", (json_int_t)s->skipped);
	if (!isnan(s->min_loss))
		json_object_set_new(j, "min_loss", jnum(s->min_loss));
	if (s->val_loss != 0)
		json_object_set_new(j, "val_loss", jnum(s->val_loss));
	if (s->data_note)
		json_object_set_new(j, "note", json_string(s->data_note));
	if (r->skip_bad)
		json_object_set_new(j, "bad_samples", json_integer(s->bad_samples));
	if (s->dropped)
		json_object_set_new(j, "dropped_micro_batches",
				    json_integer(s->dropped));
	return j;
}

void gk_nn_report_summary_text(FILE *out, const gk_nn_trainer *t, const gk_nn_train_summary *s)
{
	const gk_nn_train_opts *r = gk_nn_trainer_opts(t);
	const char *why = stopped(r, s);
	char loss[32] = "-"; /* no step this run, no loss */
	if (s->steps > 0)
		snprintf(loss, sizeof(loss), "%.4f", s->last_loss);
	fprintf(out, "summary: %" PRId64 " steps (to step %" PRId64 ") in %.1f s, %.0f tok/s, "
		     "loss %s, skipped %" PRId64 ", %s\n", s->steps, s->step, s->seconds,
		     s->tokens_per_s, loss, s->skipped, why);
	if (s->val_loss != 0)
		fprintf(out, "val loss %.4f\n", s->val_loss);
	if (s->data_note)
		fprintf(out, "note: %s\n", s->data_note);
	if (s->dropped)
		fprintf(out, "step %" PRId64 " stopped after %d of %d micro-batches: "
			     "dropped, to be trained again on resume\n", s->step + 1,
			     s->dropped, r->grad_accum);
	if (s->bad_samples)
		fprintf(out, "skipped %" PRId64 " corrupt samples\n", s->bad_samples);
}
