// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The C API (ddp/c_api.h): thin wrappers over Context and Engine that turn absl::Status into a
// code plus a message, and std::string/std::vector into pointers and counts.
#include "ddp/c_api.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "ddp/context.h"
#include "ddp/engine.h"
#include "ddp/errors.h"
#include "ddp/info.h"

struct ddp_context {
  std::shared_ptr<ddp::Context> context;
};

struct ddp_handle {
  ddp::Handle handle;    // invalid when the C layer refused the call itself
  absl::Status refusal;  // then: why
  std::once_flag message_once;
  std::string message;  // the final status's message, kept for ddp_handle_message
};

namespace {

thread_local std::string last_error;

int Code(const absl::Status& status) {
  if (status.ok()) {
    last_error.clear();
    return DDP_OK;
  }
  last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

absl::Status NoContext(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": the context is NULL"));
}

ddp_handle* Refused(absl::Status why) {
  auto* h = new ddp_handle;
  h->refusal = std::move(why);
  return h;
}

ddp_handle* Wrap(ddp::Handle handle) {
  auto* h = new ddp_handle;
  h->handle = std::move(handle);
  return h;
}

// The shape as a vector, or why it cannot be one.
absl::Status Shape(const char* what, const int64_t* shape, int ndim, std::vector<int64_t>* out) {
  if (ndim < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": ndim ", ndim, " < 0"));
  if (ndim > 0 && shape == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape is NULL with ndim ", ndim));
  }
  out->assign(shape, shape + ndim);
  return absl::OkStatus();
}

// Checks what every engine call shares: the context, the name and the data type (an int that
// must not wrap around into a valid ddp::DataType when cast to its uint8_t).
absl::Status Common(const char* what, const ddp_context* context, const char* name, int dtype) {
  if (context == nullptr || context->context == nullptr) return NoContext(what);
  if (name == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": name is NULL"));
  if (dtype < 0 || dtype >= ddp::kNumDataTypes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown data type ", dtype));
  }
  return absl::OkStatus();
}

// Common, then the shape into `dims`: what every single-tensor engine call checks first.
absl::Status Prepare(const char* what, const ddp_context* context, const char* name, int dtype,
                     const int64_t* shape, int ndim, std::vector<int64_t>* dims) {
  absl::Status s = Common(what, context, name, dtype);
  return s.ok() ? Shape(what, shape, ndim, dims) : s;
}

absl::Status CheckOp(const char* what, int op) {
  if (op < 0 || op >= ddp::kNumReduceOps) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown reduce op ", op));
  }
  return absl::OkStatus();
}

static_assert(DDP_CODEC_BF16 == static_cast<int>(ddp::Codec::kBf16) &&
                  DDP_CODEC_FP16 == static_cast<int>(ddp::Codec::kFp16) &&
                  DDP_CODEC_INT8 == static_cast<int>(ddp::Codec::kInt8) &&
                  DDP_CODEC_POWERSGD == static_cast<int>(ddp::Codec::kPowerSgd),
              "the C API's codecs are ddp::Codec's values");

// A codec of DDP_CODEC_* (ddp::Codec), and PowerSGD's rank (the engine checks it against the
// tensor's shape).
absl::Status CheckCodec(const char* what, int codec, int rank, ddp::Compression* out) {
  if (codec < DDP_CODEC_NONE || codec > DDP_CODEC_POWERSGD) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": unknown codec ", codec));
  }
  *out = ddp::Compression(static_cast<ddp::Codec>(codec));
  if (codec == DDP_CODEC_POWERSGD) {
    out->rank = rank;
  } else if (rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a rank (", rank, ") is PowerSGD's; ",
                                                   ddp::CodecName(out->codec), " takes none"));
  }
  return absl::OkStatus();
}

ddp::Device DeviceOf(int device, void* stream) {
  return device < 0 ? ddp::Device::Cpu() : ddp::Device::Cuda(device, stream);
}

absl::Status HandleStatus(const ddp_handle* h) {
  return h->handle.valid() ? h->handle.Wait() : h->refusal;
}

}  // namespace

namespace ddp {

ddp_context* NewCReference(std::shared_ptr<Context> context) {
  if (context == nullptr) return nullptr;
  return new ddp_context{std::move(context)};
}

}  // namespace ddp

extern "C" {

const char* ddp_last_error(void) { return last_error.c_str(); }

const char* ddp_version(void) { return ddp::Version(); }

int ddp_context_create(ddp_context** out) {
  if (out == nullptr) return Code(absl::InvalidArgumentError("ddp_context_create: out is NULL"));
  *out = nullptr;
  auto created = ddp::Context::CreateFromEnvironment();
  if (!created.ok()) return Code(created.status());
  *out = new ddp_context{std::shared_ptr<ddp::Context>(std::move(*created))};
  return Code(absl::OkStatus());
}

ddp_context* ddp_context_retain(ddp_context* context) {
  if (context == nullptr) return nullptr;
  return new ddp_context{context->context};
}

void ddp_context_release(ddp_context* context) { delete context; }

int ddp_context_shutdown(ddp_context* context) {
  if (context == nullptr) return Code(NoContext("ddp_context_shutdown"));
  return Code(context->context->Shutdown());
}

int ddp_rank(const ddp_context* c) { return c == nullptr ? -1 : c->context->rank(); }
int ddp_size(const ddp_context* c) { return c == nullptr ? -1 : c->context->size(); }
int ddp_local_rank(const ddp_context* c) { return c == nullptr ? -1 : c->context->local_rank(); }
int ddp_local_size(const ddp_context* c) { return c == nullptr ? -1 : c->context->local_size(); }
int ddp_cross_rank(const ddp_context* c) { return c == nullptr ? -1 : c->context->cross_rank(); }
int ddp_cross_size(const ddp_context* c) { return c == nullptr ? -1 : c->context->cross_size(); }

int ddp_health(const ddp_context* c) {
  if (c == nullptr) return Code(NoContext("ddp_health"));
  return Code(c->context->health());
}

int ddp_barrier(ddp_context* c) {
  if (c == nullptr) return Code(NoContext("ddp_barrier"));
  return Code(c->context->Barrier());
}

int ddp_add_process_set(ddp_context* c, const int* ranks, int n, int* id) {
  if (c == nullptr) return Code(NoContext("ddp_add_process_set"));
  if (id == nullptr || n < 0 || (n > 0 && ranks == nullptr)) {
    return Code(absl::InvalidArgumentError(
        "ddp_add_process_set: needs n >= 0 ranks (not NULL when n > 0) and an id to write"));
  }
  auto added = c->context->engine().AddProcessSet(std::vector<int>(ranks, ranks + n));
  if (!added.ok()) return Code(added.status());
  *id = *added;
  return Code(absl::OkStatus());
}

ddp_handle* ddp_allreduce_async(ddp_context* c, const char* name, const void* input, void* output,
                                int dtype, const int64_t* shape, int ndim, int op, double prescale,
                                double postscale, int process_set, int device, void* stream) {
  return ddp_allreduce_compressed_async(c, name, input, output, dtype, shape, ndim, op, prescale,
                                        postscale, process_set, device, stream, DDP_CODEC_NONE, 0);
}

ddp_handle* ddp_allreduce_compressed_async(ddp_context* c, const char* name, const void* input,
                                           void* output, int dtype, const int64_t* shape, int ndim,
                                           int op, double prescale, double postscale,
                                           int process_set, int device, void* stream, int codec,
                                           int rank) {
  constexpr const char* kWhat = "ddp_allreduce_async";
  std::vector<int64_t> dims;
  absl::Status s = Prepare(kWhat, c, name, dtype, shape, ndim, &dims);
  if (s.ok()) s = CheckOp(kWhat, op);
  ddp::Compression compression;
  if (s.ok()) s = CheckCodec(kWhat, codec, rank, &compression);
  if (!s.ok()) return Refused(std::move(s));
  return Wrap(c->context->engine().AllreduceAsync(
      name, input, output, static_cast<ddp::DataType>(dtype), std::move(dims),
      static_cast<ddp::ReduceOp>(op), prescale, postscale, process_set, DeviceOf(device, stream),
      compression));
}

ddp_handle* ddp_grouped_allreduce_async(ddp_context* c, const char* group, int n,
                                        const char* const* names, const void* const* inputs,
                                        void* const* outputs, const int64_t* const* shapes,
                                        const int* ndims, int dtype, int op, double prescale,
                                        double postscale, int process_set, int device,
                                        void* stream) {
  return ddp_grouped_allreduce_compressed_async(c, group, n, names, inputs, outputs, shapes, ndims,
                                                dtype, op, prescale, postscale, process_set, device,
                                                stream, DDP_CODEC_NONE, 0);
}

ddp_handle* ddp_grouped_allreduce_compressed_async(ddp_context* c, const char* group, int n,
                                                   const char* const* names,
                                                   const void* const* inputs, void* const* outputs,
                                                   const int64_t* const* shapes, const int* ndims,
                                                   int dtype, int op, double prescale,
                                                   double postscale, int process_set, int device,
                                                   void* stream, int codec, int rank) {
  constexpr const char* kWhat = "ddp_grouped_allreduce_async";
  absl::Status s = Common(kWhat, c, group, dtype);
  if (s.ok()) s = CheckOp(kWhat, op);
  ddp::Compression compression;
  if (s.ok()) s = CheckCodec(kWhat, codec, rank, &compression);
  if (s.ok() && (n < 0 || (n > 0 && (names == nullptr || inputs == nullptr || outputs == nullptr ||
                                     shapes == nullptr || ndims == nullptr)))) {
    s = absl::InvalidArgumentError(
        absl::StrCat(kWhat, ": ", n,
                     " members need non-NULL names, inputs, outputs, shapes and "
                     "ndims"));
  }
  std::vector<ddp::GroupMember> members(s.ok() ? static_cast<size_t>(n) : 0);
  for (size_t i = 0; s.ok() && i < members.size(); ++i) {
    if (names[i] == nullptr) {
      s = absl::InvalidArgumentError(absl::StrCat(kWhat, ": member ", i, " has a NULL name"));
      break;
    }
    members[i].name = names[i];
    members[i].input = inputs[i];
    members[i].output = outputs[i];
    s = Shape(kWhat, shapes[i], ndims[i], &members[i].shape);
  }
  if (!s.ok()) return Refused(std::move(s));
  return Wrap(c->context->engine().GroupedAllreduceAsync(
      group, std::move(members), static_cast<ddp::DataType>(dtype), static_cast<ddp::ReduceOp>(op),
      prescale, postscale, process_set, DeviceOf(device, stream), compression));
}

ddp_handle* ddp_allgather_async(ddp_context* c, const char* name, const void* input, int dtype,
                                const int64_t* shape, int ndim, int process_set, int device,
                                void* stream) {
  std::vector<int64_t> dims;
  absl::Status s = Prepare("ddp_allgather_async", c, name, dtype, shape, ndim, &dims);
  if (!s.ok()) return Refused(std::move(s));
  return Wrap(c->context->engine().AllgatherAsync(name, input, static_cast<ddp::DataType>(dtype),
                                                  std::move(dims), process_set,
                                                  DeviceOf(device, stream)));
}

ddp_handle* ddp_broadcast_async(ddp_context* c, const char* name, void* buffer, int dtype,
                                const int64_t* shape, int ndim, int root, int process_set,
                                int device, void* stream) {
  std::vector<int64_t> dims;
  absl::Status s = Prepare("ddp_broadcast_async", c, name, dtype, shape, ndim, &dims);
  if (!s.ok()) return Refused(std::move(s));
  return Wrap(c->context->engine().BroadcastAsync(name, buffer, static_cast<ddp::DataType>(dtype),
                                                  std::move(dims), root, process_set,
                                                  DeviceOf(device, stream)));
}

ddp_handle* ddp_alltoall_async(ddp_context* c, const char* name, const void* input, int dtype,
                               const int64_t* shape, int ndim, int process_set, int device,
                               void* stream) {
  std::vector<int64_t> dims;
  absl::Status s = Prepare("ddp_alltoall_async", c, name, dtype, shape, ndim, &dims);
  if (!s.ok()) return Refused(std::move(s));
  return Wrap(c->context->engine().AlltoallAsync(name, input, static_cast<ddp::DataType>(dtype),
                                                 std::move(dims), process_set,
                                                 DeviceOf(device, stream)));
}

ddp_handle* ddp_reducescatter_async(ddp_context* c, const char* name, const void* input, int dtype,
                                    const int64_t* shape, int ndim, int op, double prescale,
                                    double postscale, int process_set, int device, void* stream) {
  std::vector<int64_t> dims;
  absl::Status s = Prepare("ddp_reducescatter_async", c, name, dtype, shape, ndim, &dims);
  if (s.ok()) s = CheckOp("ddp_reducescatter_async", op);
  if (!s.ok()) return Refused(std::move(s));
  return Wrap(c->context->engine().ReduceScatterAsync(
      name, input, static_cast<ddp::DataType>(dtype), std::move(dims),
      static_cast<ddp::ReduceOp>(op), prescale, postscale, process_set, DeviceOf(device, stream)));
}

ddp_handle* ddp_join_async(ddp_context* c) {
  if (c == nullptr) return Refused(NoContext("ddp_join_async"));
  return Wrap(c->context->engine().JoinAsync());
}

int ddp_handle_poll(const ddp_handle* h) {
  return h == nullptr || !h->handle.valid() || h->handle.Poll() ? 1 : 0;
}

int ddp_handle_refused(const ddp_handle* h) {
  if (h == nullptr) return 1;
  return !h->handle.valid() || h->handle.refused() ? 1 : 0;
}

int ddp_handle_wait(ddp_handle* h) {
  if (h == nullptr) return Code(absl::InvalidArgumentError("ddp_handle_wait: handle is NULL"));
  return Code(HandleStatus(h));
}

int ddp_handle_wait_for(ddp_handle* h, double seconds) {
  if (h == nullptr) return Code(absl::InvalidArgumentError("ddp_handle_wait_for: handle is NULL"));
  if (!h->handle.valid()) return Code(h->refusal);
  const absl::Duration timeout =
      std::isfinite(seconds) ? absl::Seconds(seconds) : absl::InfiniteDuration();
  return Code(h->handle.WaitFor(timeout));
}

int ddp_handle_disagreement(const ddp_handle* h) {
  if (h == nullptr || !ddp_handle_poll(h)) return 0;
  return ddp::IsDisagreement(HandleStatus(h)) ? 1 : 0;
}

const char* ddp_handle_message(ddp_handle* h) {
  if (h == nullptr || !ddp_handle_poll(h)) return "";
  std::call_once(h->message_once, [h] { h->message = std::string(HandleStatus(h).message()); });
  return h->message.c_str();
}

void ddp_handle_on_complete(ddp_handle* h, ddp_done_fn done, void* user) {
  if (h == nullptr || done == nullptr) return;
  if (!h->handle.valid()) {
    const std::string message(h->refusal.message());
    done(user, static_cast<int>(h->refusal.code()), message.c_str());
    return;
  }
  h->handle.OnComplete([done, user](const absl::Status& status) {
    const std::string message(status.message());
    done(user, static_cast<int>(status.code()), message.c_str());
  });
}

int ddp_handle_output_ndim(const ddp_handle* h) {
  if (h == nullptr || !h->handle.valid()) return 0;
  return static_cast<int>(h->handle.output_shape().size());
}

const int64_t* ddp_handle_output_shape(const ddp_handle* h) {
  if (h == nullptr || !h->handle.valid()) return nullptr;
  return h->handle.output_shape().data();
}

const void* ddp_handle_output(const ddp_handle* h) {
  if (h == nullptr || !h->handle.valid()) return nullptr;
  return h->handle.output();
}

size_t ddp_handle_output_bytes(const ddp_handle* h) {
  if (h == nullptr || !h->handle.valid()) return 0;
  return h->handle.output_bytes();
}

int ddp_handle_output_device(const ddp_handle* h) {
  if (h == nullptr || !h->handle.valid()) return DDP_CPU;
  return h->handle.output_device();
}

int ddp_handle_join_last_rank(const ddp_handle* h) {
  if (h == nullptr || !h->handle.valid()) return -1;
  return h->handle.join_last_rank();
}

void ddp_handle_release(ddp_handle* h) { delete h; }

}  // extern "C"
