/*
 * internal.h - what the files of lib/cuda share. Not installed.
 */
#ifndef GK_CUDA_INTERNAL_H
#define GK_CUDA_INTERNAL_H

#include "cuda/cuda.h"

/*
 * The accounting behind gk_cuda_alloc (account.c): device_*.c records
 * each allocation after cudaMalloc and forgets it before cudaFree. Plain
 * C, so the unit tests drive it with made-up pointers on any machine.
 * record fails (ENOMEM) only when the table cannot grow; forget returns
 * 0 and does nothing for a pointer it does not know.
 */
int gk_cuda_account_record(const void *p, uint64_t bytes, gk_cuda_mem_kind kind,
			   gk_err *err);
int gk_cuda_account_forget(const void *p);
void gk_cuda_account_pinned(int64_t delta);

/* Names of cuBLAS and NCCL statuses (their enums are stable ABI). */
const char *gk_cuda_cublas_name(int status);
const char *gk_cuda_nccl_name(int status);

#endif
