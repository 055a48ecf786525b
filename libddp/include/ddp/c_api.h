// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
/* libddp's C API: the job and the fusion engine through plain C types, for C programs and for
 * plugins that cannot include the C++ headers. A framework plugin built against its own copy of
 * Abseil (TensorFlow's wheel ships one) cannot include ddp/engine.h, whose absl::Status would be
 * the wrong one; through this header it shares the engine that the Python package started.
 *
 * Conventions:
 *  - A call that can fail returns a status code: 0 for success, otherwise one of the DDP_ERR_*
 *    codes below (Abseil's canonical codes). The message of the last failed call of this thread
 *    is ddp_last_error().
 *  - A ddp_context is a counted reference to a job's context: every reference is released with
 *    ddp_context_release; the context shuts down when the last one is (or explicitly, with
 *    ddp_context_shutdown, for every reference at once).
 *  - The engine calls return a ddp_handle at once (never NULL) that tells when the operation is
 *    finished and how; a refused submission (bad argument, name in flight, ...) is a handle that
 *    is finished already. Input and output buffers must stay valid until the handle finishes,
 *    even when the handle is released before (ddp_handle_release never cancels).
 *  - Names, shapes and arrays passed in are copied: they need not outlive the call.
 */
#ifndef DDP_C_API_H_
#define DDP_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Data types (ddp::DataType) and reduction ops (ddp::ReduceOp), same values. */
enum {
  DDP_FLOAT32 = 0,
  DDP_FLOAT64 = 1,
  DDP_FLOAT16 = 2,
  DDP_BFLOAT16 = 3,
  DDP_INT8 = 4,
  DDP_UINT8 = 5,
  DDP_INT32 = 6,
  DDP_INT64 = 7
};
enum { DDP_SUM = 0, DDP_AVERAGE = 1, DDP_MIN = 2, DDP_MAX = 3, DDP_PRODUCT = 4 };
/* Compression codecs (ddp::Codec, same values; docs/compression.md). */
enum {
  DDP_CODEC_NONE = 0,
  DDP_CODEC_BF16 = 1,
  DDP_CODEC_FP16 = 2,
  DDP_CODEC_INT8 = 3,
  DDP_CODEC_POWERSGD = 4
};

/* Status codes (absl::StatusCode). */
enum {
  DDP_OK = 0,
  DDP_ERR_CANCELLED = 1,
  DDP_ERR_UNKNOWN = 2,
  DDP_ERR_INVALID_ARGUMENT = 3,
  DDP_ERR_DEADLINE_EXCEEDED = 4,
  DDP_ERR_NOT_FOUND = 5,
  DDP_ERR_ALREADY_EXISTS = 6,
  DDP_ERR_PERMISSION_DENIED = 7,
  DDP_ERR_RESOURCE_EXHAUSTED = 8,
  DDP_ERR_FAILED_PRECONDITION = 9,
  DDP_ERR_ABORTED = 10,
  DDP_ERR_OUT_OF_RANGE = 11,
  DDP_ERR_UNIMPLEMENTED = 12,
  DDP_ERR_INTERNAL = 13,
  DDP_ERR_UNAVAILABLE = 14,
  DDP_ERR_DATA_LOSS = 15,
  DDP_ERR_UNAUTHENTICATED = 16
};

/* The process set of all ranks; the CPU as a device. */
#define DDP_WORLD 0
#define DDP_CPU (-1)

typedef struct ddp_context ddp_context;
typedef struct ddp_handle ddp_handle;

/* The message of this thread's last failed call ("" if none): valid until its next call. */
const char* ddp_last_error(void);
/* The library's version, e.g. "0.1.0". */
const char* ddp_version(void);

/* ---- the job ---------------------------------------------------------------------------- */

/* Joins the job described by the DDP_* variables (as ddp::Context::CreateFromEnvironment). */
int ddp_context_create(ddp_context** out);
/* Another reference to the same context. */
ddp_context* ddp_context_retain(ddp_context* context);
/* Releases a reference (NULL is ignored); the last one shuts the context down and frees it. */
void ddp_context_release(ddp_context* context);
/* Leaves the job now: pending operations fail, later calls fail with FAILED_PRECONDITION. The
 * references stay valid until released. Idempotent. */
int ddp_context_shutdown(ddp_context* context);

int ddp_rank(const ddp_context* context);
int ddp_size(const ddp_context* context);
int ddp_local_rank(const ddp_context* context);
int ddp_local_size(const ddp_context* context);
int ddp_cross_rank(const ddp_context* context);
int ddp_cross_size(const ddp_context* context);
/* OK while no peer has failed; else the first failure. */
int ddp_health(const ddp_context* context);

/* Blocking: returns once every rank has entered it. */
int ddp_barrier(ddp_context* context);
/* Creates a process set of these job ranks (every rank calls it alike); its id in *id. */
int ddp_add_process_set(ddp_context* context, const int* ranks, int n, int* id);

/* ---- the engine (ddp/engine.h): asynchronous, named, negotiated, fused ------------------- */
/* `shape` holds `ndim` dimensions (ndim 0: a scalar). `device`: DDP_CPU or a CUDA ordinal,
 * with `stream` the cudaStream_t that produced the inputs (NULL: the legacy default stream). */

ddp_handle* ddp_allreduce_async(ddp_context* context, const char* name, const void* input,
                                void* output, int dtype, const int64_t* shape, int ndim, int op,
                                double prescale, double postscale, int process_set, int device,
                                void* stream);
/* `n` members reduced as one unit: names[i], inputs[i], outputs[i], shapes[i] of ndims[i]. */
ddp_handle* ddp_grouped_allreduce_async(ddp_context* context, const char* group, int n,
                                        const char* const* names, const void* const* inputs,
                                        void* const* outputs, const int64_t* const* shapes,
                                        const int* ndims, int dtype, int op, double prescale,
                                        double postscale, int process_set, int device,
                                        void* stream);
/* The two above with compression on the wire (docs/compression.md): `codec` one of DDP_CODEC_*,
 * `rank` PowerSGD's (0 for the other codecs). Floating-point data, sum or average; every rank
 * must compress a tensor alike (a disagreement names the ranks). */
ddp_handle* ddp_allreduce_compressed_async(ddp_context* context, const char* name,
                                           const void* input, void* output, int dtype,
                                           const int64_t* shape, int ndim, int op, double prescale,
                                           double postscale, int process_set, int device,
                                           void* stream, int codec, int rank);
ddp_handle* ddp_grouped_allreduce_compressed_async(ddp_context* context, const char* group, int n,
                                                   const char* const* names,
                                                   const void* const* inputs, void* const* outputs,
                                                   const int64_t* const* shapes, const int* ndims,
                                                   int dtype, int op, double prescale,
                                                   double postscale, int process_set, int device,
                                                   void* stream, int codec, int rank);
/* Output allocated by the engine: ddp_handle_output* once finished. */
ddp_handle* ddp_allgather_async(ddp_context* context, const char* name, const void* input,
                                int dtype, const int64_t* shape, int ndim, int process_set,
                                int device, void* stream);
ddp_handle* ddp_broadcast_async(ddp_context* context, const char* name, void* buffer, int dtype,
                                const int64_t* shape, int ndim, int root, int process_set,
                                int device, void* stream);
ddp_handle* ddp_alltoall_async(ddp_context* context, const char* name, const void* input, int dtype,
                               const int64_t* shape, int ndim, int process_set, int device,
                               void* stream);
ddp_handle* ddp_reducescatter_async(ddp_context* context, const char* name, const void* input,
                                    int dtype, const int64_t* shape, int ndim, int op,
                                    double prescale, double postscale, int process_set, int device,
                                    void* stream);
ddp_handle* ddp_join_async(ddp_context* context);

/* ---- handles ------------------------------------------------------------------------------ */

/* 1 once finished (OK or not), else 0. Never blocks. */
int ddp_handle_poll(const ddp_handle* handle);
/* 1 when the engine refused the submission itself (then finished, and the status says why). */
int ddp_handle_refused(const ddp_handle* handle);
/* Blocks until finished; its status (the message: ddp_handle_message). */
int ddp_handle_wait(ddp_handle* handle);
/* Like ddp_handle_wait, at most `seconds`: DDP_ERR_DEADLINE_EXCEEDED if still running. */
int ddp_handle_wait_for(ddp_handle* handle, double seconds);
/* Once finished: the final status's message ("" when OK, or while running), naming the
 * tensor, the operation and the rank(s) responsible. Valid while the handle is; any thread. */
const char* ddp_handle_message(ddp_handle* handle);
/* 1 once finished with an error that says the ranks disagreed on the operation's description
 * (shape, dtype, op, root, ...; its code is DDP_ERR_INVALID_ARGUMENT), else 0. Never blocks. */
int ddp_handle_disagreement(const ddp_handle* handle);
/* Calls done(user, code, message) once finished: at once in this thread if it already is,
 * otherwise in the engine's thread (keep it short; it must not wait on another handle).
 * `message` is valid during the call only. */
typedef void (*ddp_done_fn)(void* user, int code, const char* message);
void ddp_handle_on_complete(ddp_handle* handle, ddp_done_fn done, void* user);

/* Allgather, alltoall and reduce-scatter: the output the engine allocated, once finished OK
 * (owned by the handle: copy it out before releasing). */
int ddp_handle_output_ndim(const ddp_handle* handle);
const int64_t* ddp_handle_output_shape(const ddp_handle* handle);
const void* ddp_handle_output(const ddp_handle* handle);
size_t ddp_handle_output_bytes(const ddp_handle* handle);
/* Where the output lives: DDP_CPU or a CUDA ordinal. */
int ddp_handle_output_device(const ddp_handle* handle);
/* Join: the rank that joined last. */
int ddp_handle_join_last_rank(const ddp_handle* handle);
/* Releases the handle (NULL is ignored); the operation goes on. */
void ddp_handle_release(ddp_handle* handle);

#ifdef __cplusplus
} /* extern "C" */

#include <memory>

namespace ddp {
class Context;
/* A C reference to a context that C++ code owns (the Python package hands its own to framework
 * plugins this way). Releasing the last C reference does not shut down a context that C++ still
 * holds. */
ddp_context* NewCReference(std::shared_ptr<Context> context);
}  // namespace ddp
#endif

#endif /* DDP_C_API_H_ */
