// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
/* A C program on libddp's C API (ddp/c_api.h): joins the job from the DDP_* variables (ddprun or
 * mpirun set them), averages a gradient through the fusion engine, gathers every rank's count of
 * rows, and prints "rank R: ok". Build against an installed libddp (--cflags-only-I: ddp.pc's
 * other flags are for C++, such as -std=c++20):
 *
 *   cc -std=c11 allreduce.c $(pkg-config --cflags-only-I --libs ddp) -o allreduce_c
 *   ddprun -np 4 ./allreduce_c
 */
#include <ddp/c_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char* what, int code, const char* message) {
  fprintf(stderr, "%s failed (code %d): %s\n", what, code, message);
  return 1;
}

int main(void) {
  ddp_context* ctx = NULL;
  int code = ddp_context_create(&ctx);
  if (code != DDP_OK) return fail("ddp_context_create", code, ddp_last_error());
  const int rank = ddp_rank(ctx);
  const int size = ddp_size(ctx);

  /* Average a gradient of 1000 floats, in place: rank r contributes r + 1 everywhere. */
  enum { kCount = 1000 };
  float* grad = malloc(kCount * sizeof(float));
  for (int i = 0; i < kCount; ++i) grad[i] = (float)(rank + 1);
  const int64_t shape[1] = {kCount};
  ddp_handle* h = ddp_allreduce_async(ctx, "grad.w", grad, grad, DDP_FLOAT32, shape, 1,
                                      DDP_AVERAGE, 1.0, 1.0, DDP_WORLD, DDP_CPU, NULL);
  code = ddp_handle_wait(h);
  if (code != DDP_OK) return fail("allreduce", code, ddp_handle_message(h));
  ddp_handle_release(h);
  const float mean = (float)(size + 1) / 2.0f;
  for (int i = 0; i < kCount; ++i) {
    if (grad[i] != mean) return fail("allreduce", DDP_ERR_INTERNAL, "wrong average");
  }

  /* Allgather rows of different counts: rank r sends r + 1 rows of one int64 (its rank). */
  int64_t* rows = malloc((size_t)(rank + 1) * sizeof(int64_t));
  for (int i = 0; i <= rank; ++i) rows[i] = rank;
  const int64_t rows_shape[1] = {rank + 1};
  h = ddp_allgather_async(ctx, "rows", rows, DDP_INT64, rows_shape, 1, DDP_WORLD, DDP_CPU, NULL);
  code = ddp_handle_wait(h);
  if (code != DDP_OK) return fail("allgather", code, ddp_handle_message(h));
  const int64_t* all = ddp_handle_output(h);
  int64_t at = 0;
  for (int r = 0; r < size; ++r) {
    for (int i = 0; i <= r; ++i, ++at) {
      if (all[at] != r) return fail("allgather", DDP_ERR_INTERNAL, "wrong rows");
    }
  }
  if (ddp_handle_output_shape(h)[0] != at) return fail("allgather", DDP_ERR_INTERNAL, "shape");
  ddp_handle_release(h);

  code = ddp_barrier(ctx);
  if (code != DDP_OK) return fail("barrier", code, ddp_last_error());
  free(rows);
  free(grad);
  ddp_context_release(ctx); /* the last reference: leaves the job */
  printf("rank %d: ok\n", rank);
  return 0;
}
