/*
 * internal.h - helpers shared by the lib/ckpt sources; not public.
 */
#ifndef GK_CKPT_INTERNAL_H
#define GK_CKPT_INTERNAL_H

#include "ckpt/ckpt.h"

#include <sys/stat.h>

/* gk_open_regular, then read all of it (at most max bytes), NUL-terminated. */
int ck_read_regular(const char *path, size_t max, char **out, size_t *len,
		    gk_err *err);
/*
 * The same for name in the directory dfd (gk_open_regular_at, so a reader
 * that opened a step directory once reads every file of that one
 * directory, wherever `latest` points meanwhile); path names the file in
 * messages.
 */
int ck_read_regular_at(int dfd, const char *name, const char *path, size_t max,
		       char **out, size_t *len, gk_err *err);

/*
 * pieces.c: the entries of s (s->e, s->n, s->bytes) from the tensors of
 * its files, grouped by name: copies checked identical, row and flat
 * slices checked to cover each tensor exactly once; in the order each
 * name first appears.
 */
int ck_group(gk_ckpt_set *s, gk_err *err);

/*
 * mkdtemp(3) makes the directory 0700; a staging directory renamed into
 * place must end up as mkdir(2) would have made it: 0777 & ~umask. With
 * slot, the directory is registered for removal on a signal as it is made
 * (gk_cleanup_on_signal's handle, for gk_cleanup_forget).
 */
int ck_mkdtemp(char *tmpl, int *slot, gk_err *err);

/*
 * A step directory's name, spelled as the writer spells it: "step-%08llu"
 * (8 digits, more from step 10^8 on). The step, or -1 for other names.
 */
int ck_parse_step(const char *name, uint64_t *step);

/*
 * The files step directory dir's COMMIT lists, appended to names, sorted:
 * what a reader of the step takes, and no more. Fails when COMMIT is
 * missing or malformed, names another step, or the directory holds a
 * *.safetensors, index, config.json or trainer.json it does not list (gk_ckpt_verify_step
 * makes the same checks, then hashes the files).
 */
int ck_step_files(const char *dir, gk_strlist *names, gk_err *err);

/*
 * Step directories of ROOT without COMMIT (step-N without it, staging
 * directories .step-N.tmp-*): written now, or left by a killed writer.
 */
size_t ck_count_uncommitted(const char *root);

/* What ROOT/latest is (ck_latest_link's result). */
enum {
	CK_LATEST_NONE,      /* no such entry */
	CK_LATEST_NOT_LINK,  /* not a symbolic link */
	CK_LATEST_ELSEWHERE, /* resolves to no step directory of ROOT */
	CK_LATEST_STEP       /* the step directory *step, committed or not */
};
/* target receives the link's text (for messages). */
int ck_latest_link(const char *root, uint64_t *step, char *target, size_t len);

#endif
