/*
 * tok.c - encode a list of documents with lib/tok, for tools/bench/tok.sh:
 *
 *   build/tools/bench/tok TOKENIZER THREADS RUNS LIST
 *
 * LIST names one document per line. Every document is read into memory
 * first; then each run encodes all of them, documents shared out among
 * THREADS threads (one gk_tok_enc each, a fresh one per run, so every run
 * starts with an empty cache). Prints "bytes tokens seconds" of the
 * fastest run.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tok/tok.h"

typedef struct doc {
	char *buf;
	size_t len;
} doc;

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: tok TOKENIZER THREADS RUNS LIST\n");
		return 2;
	}
	gk_err err;
	gk_tok *t;
	int threads, runs;
	if (gk_parse_int(argv[2], 1, 1024, &threads, "THREADS", &err) < 0 ||
	    gk_parse_int(argv[3], 1, 1000, &runs, "RUNS", &err) < 0 ||
	    gk_tok_open(&t, argv[1], &err) < 0) {
		fprintf(stderr, "tok: %s\n", err.msg);
		return 1;
	}
	FILE *f = fopen(argv[4], "r");
	if (!f) {
		perror(argv[4]);
		return 1;
	}
	doc *docs = NULL;
	size_t n = 0, cap = 0, bytes = 0;
	char line[4096];
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (GK_GROW(docs, cap, n + 1, "documents", &err) < 0 ||
		    gk_read_file(line, (size_t)1 << 30, &docs[n].buf, &docs[n].len, &err) < 0) {
			fprintf(stderr, "tok: %s\n", err.msg);
			return 1;
		}
		bytes += docs[n++].len;
	}
	fclose(f);

	double best = 1e30;
	uint64_t tokens = 0;
	for (int r = 0; r < runs; r++) {
		uint64_t count = 0;
		int failed = 0;
		double t0 = gk_now();
#pragma omp parallel num_threads(threads) reduction(+ : count, failed)
		{
			gk_tok_enc *e = gk_tok_enc_new(t);
			gk_tok_ids ids = {0};
			gk_err terr;
#pragma omp for schedule(dynamic, 16)
			for (size_t i = 0; i < n; i++) {
				ids.n = 0;
				if (!e || gk_tok_encode(e, docs[i].buf, docs[i].len, 0, &ids, &terr) < 0)
					failed++;
				count += ids.n;
			}
			free(ids.v);
			gk_tok_enc_free(e);
		}
		double s = gk_now() - t0;
		if (failed) {
			fprintf(stderr, "tok: %d documents failed to encode\n", failed);
			return 1;
		}
		if (s < best)
			best = s;
		tokens = count;
	}
	printf("%zu %llu %.6f\n", bytes, (unsigned long long)tokens, best);
	for (size_t i = 0; i < n; i++)
		free(docs[i].buf);
	free(docs);
	gk_tok_close(t);
	return 0;
}
