// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// TensorFlow ops on libddp's engine: asynchronous kernels that submit their tensors by name
// through the C API (ddp/c_api.h) and finish when the engine calls back, so TensorFlow tensors get
// the same negotiation, fusion, response cache, timeline, join and error naming as torch ones,
// with no Python in the data path.
//
// Only ddp/c_api.h is included from libddp: this file is compiled with TensorFlow's headers and
// its own copy of Abseil, which libddp's C++ headers must not meet.
//
// The tensor's name is an input (a scalar string), not an attribute: in eager mode every call
// may carry a new name, and an attribute would make TensorFlow build and cache a kernel per name.
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ddp/c_api.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace ddp_tf {
namespace {

using tensorflow::AsyncOpKernel;
using tensorflow::DataType;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::InferenceContext;

// The context that ddp.tensorflow.init() handed over (a C reference of its own). A kernel takes
// a reference of its own for the submission (Context below), so that ddp_tf_set_context
// releasing this one meanwhile frees nothing under it.
std::mutex g_mu;
ddp_context* g_context = nullptr;  // guarded by g_mu

// This thread's reference to the context for one submission: released on the thread that
// submitted (never on the engine's: the last release of a context joins the engine's thread).
class Context {
 public:
  Context() {
    std::lock_guard<std::mutex> lock(g_mu);
    c_ = ddp_context_retain(g_context);
  }
  ~Context() { ddp_context_release(c_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ddp_context* get() const { return c_; }

 private:
  ddp_context* c_;
};

absl::Status StatusOf(int code, const char* message) {
  if (code == DDP_OK) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

absl::Status DtypeOf(DataType type, int* out) {
  // TensorFlow's types that libddp reduces, with their codes there.
  static constexpr std::pair<DataType, int> kTypes[] = {
      {tensorflow::DT_FLOAT, DDP_FLOAT32}, {tensorflow::DT_DOUBLE, DDP_FLOAT64},
      {tensorflow::DT_HALF, DDP_FLOAT16},  {tensorflow::DT_BFLOAT16, DDP_BFLOAT16},
      {tensorflow::DT_INT8, DDP_INT8},     {tensorflow::DT_UINT8, DDP_UINT8},
      {tensorflow::DT_INT32, DDP_INT32},   {tensorflow::DT_INT64, DDP_INT64}};
  for (const auto& [tf_type, ddp_type] : kTypes) {
    if (tf_type == type) {
      *out = ddp_type;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      "ddp.tensorflow: data type " + tensorflow::DataTypeString(type) +
      " is not supported (float16/32/64, bfloat16, int8, uint8, int32 and int64 are)");
}

std::vector<int64_t> Dims(const TensorShape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.dims(); ++i) dims.push_back(shape.dim_size(i));
  return dims;
}

const void* ReadPtr(const Tensor& t) { return t.NumElements() == 0 ? nullptr : t.data(); }
void* WritePtr(Tensor* t) { return t->NumElements() == 0 ? nullptr : t->data(); }

// One call of a kernel from its start: this thread's reference to the context, the tensor's (or
// group's) name, and for an op on one tensor, its libddp type and dimensions.
struct Call {
  Context held;
  ddp_context* context = nullptr;
  std::string name;
  int dtype = 0;
  std::vector<int64_t> dims;

  int ndim() const { return static_cast<int>(dims.size()); }
};

// What every kernel starts with: the context, and the name (input `name_index`).
absl::Status Begin(OpKernelContext* ctx, int name_index, Call* call) {
  call->context = call->held.get();
  if (call->context == nullptr) {
    return absl::FailedPreconditionError(
        "ddp.tensorflow: an operation ran before ddp.tensorflow.init() (or after shutdown())");
  }
  const Tensor& n = ctx->input(name_index);
  if (!tensorflow::TensorShapeUtils::IsScalar(n.shape()) || n.dtype() != tensorflow::DT_STRING) {
    return absl::InvalidArgumentError("ddp.tensorflow: the tensor name must be a scalar string");
  }
  call->name = std::string(n.scalar<tensorflow::tstring>()());
  return absl::OkStatus();
}

// An op on one tensor (input 0, its name input 1) starts with that, and the tensor's type and
// dimensions.
absl::Status BeginTensor(OpKernelContext* ctx, Call* call) {
  absl::Status s = Begin(ctx, 1, call);
  if (!s.ok()) return s;
  const Tensor& input = ctx->input(0);
  s = DtypeOf(input.dtype(), &call->dtype);
  if (!s.ok()) return s;
  call->dims = Dims(input.shape());
  return absl::OkStatus();
}

// An op whose result replaces the tensor (allreduce, broadcast) also takes output 0: the
// input's own buffer where TensorFlow lets it go, else a new one of its shape.
absl::Status BeginInPlace(OpKernelContext* ctx, Call* call, Tensor** output) {
  absl::Status s = BeginTensor(ctx, call);
  if (!s.ok()) return s;
  return ctx->forward_input_or_allocate_output({0}, 0, ctx->input(0).shape(), output);
}

// Waits for `handle` without blocking a TensorFlow thread: `finish` runs once it succeeded (to
// copy an engine-allocated output), then `done`. Failures become the op's status, with
// libddp's message (naming the tensor and the rank at fault). The completion comes in the
// engine's thread; with `kOffload` (a copy of the output to make), `finish` and `done` run in
// one of TensorFlow's CPU worker threads instead, so that the engine goes on with the next
// collective rather than copying.
template <bool kOffload = false, typename Finish>
void Await(OpKernelContext* ctx, ddp_handle* handle, AsyncOpKernel::DoneCallback done,
           Finish finish) {
  struct Pending {
    OpKernelContext* ctx;
    ddp_handle* handle;
    AsyncOpKernel::DoneCallback done;
    Finish finish;

    void Complete(absl::Status s) {
      if (s.ok()) s = finish(handle);
      if (!s.ok()) ctx->SetStatus(s);
      ddp_handle_release(handle);
      AsyncOpKernel::DoneCallback finished = std::move(done);
      delete this;
      finished();
    }
  };
  auto* pending = new Pending{ctx, handle, std::move(done), std::move(finish)};
  ddp_handle_on_complete(
      handle,
      [](void* user, int code, const char* message) {
        auto* p = static_cast<Pending*>(user);
        if (kOffload && code == DDP_OK) {
          const auto* workers = p->ctx->device()->tensorflow_cpu_worker_threads();
          if (workers != nullptr && workers->workers != nullptr) {
            workers->workers->Schedule([p] { p->Complete(absl::OkStatus()); });
            return;
          }
        }
        // Ranks that disagree on the tensor (shape, dtype, root...) are Horovod's
        // FailedPreconditionError in TensorFlow, where libddp says INVALID_ARGUMENT.
        if (code == DDP_ERR_INVALID_ARGUMENT && ddp_handle_disagreement(p->handle) != 0) {
          code = DDP_ERR_FAILED_PRECONDITION;
        }
        p->Complete(StatusOf(code, message));  // `message` lives only during this call
      },
      pending);
}

absl::Status Nothing(ddp_handle*) { return absl::OkStatus(); }

// Copies an engine-allocated output (allgather, alltoall, reduce-scatter) into output 0.
absl::Status CopyOut(OpKernelContext* ctx, ddp_handle* handle) {
  TensorShape shape;
  const int64_t* dims = ddp_handle_output_shape(handle);
  for (int i = 0; i < ddp_handle_output_ndim(handle); ++i) {
    absl::Status s = shape.AddDimWithStatus(dims[i]);
    if (!s.ok()) return s;
  }
  Tensor* out = nullptr;
  absl::Status s = ctx->allocate_output(0, shape, &out);
  if (!s.ok()) return s;
  const size_t bytes = ddp_handle_output_bytes(handle);
  if (bytes != out->TotalBytes()) {
    return absl::InternalError("ddp.tensorflow: the engine's output has " + std::to_string(bytes) +
                               " bytes, its shape " + std::to_string(out->TotalBytes()));
  }
  if (bytes > 0) std::memcpy(out->data(), ddp_handle_output(handle), bytes);
  return absl::OkStatus();
}

// ---- what the kernels and registrations share ----------------------------------------------

// The attributes a kernel reads when it is made: the process set, and for a reduction the op
// (DDP_SUM...) and the factors applied before and after.
enum class Attrs { kProcessSet, kReduction };

// The kernels' base: their ops' shared attributes, read once.
class Kernel : public AsyncOpKernel {
 protected:
  Kernel(OpKernelConstruction* c, Attrs attrs) : AsyncOpKernel(c) {
    if (attrs == Attrs::kReduction) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    }
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  int op_ = DDP_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int process_set_ = 0;
};

// An op on one tensor: T one of the types libddp reduces, the tensor and its name (see the top)
// in, `output` of type T out; a reduction's attributes as Kernel reads them. Each goes on with
// its own attributes, shape function and documentation.
#define DDP_TYPES_ATTR "T: {half, bfloat16, float, double, int8, uint8, int32, int64}"
#define DDP_TENSOR_OP(op, output)   \
  REGISTER_OP(op)                   \
      .Attr(DDP_TYPES_ATTR)         \
      .Input("tensor: T")           \
      .Input("tensor_name: string") \
      .Output(output ": T")
#define DDP_REDUCTION_OP(op, output)        \
  DDP_TENSOR_OP(op, output)                 \
      .Attr("reduce_op: int")               \
      .Attr("prescale_factor: float = 1.0") \
      .Attr("postscale_factor: float = 1.0")
#define DDP_CPU_KERNEL(op, kernel) \
  REGISTER_KERNEL_BUILDER(Name(op).Device(tensorflow::DEVICE_CPU), kernel)

absl::Status SameShape(InferenceContext* c) {
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

// The first dimension is only known at run time (it may differ per rank).
absl::Status FirstDimUnknown(InferenceContext* c) {
  tensorflow::shape_inference::ShapeHandle out;
  absl::Status s = c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out);
  if (!s.ok()) return s;
  c->set_output(0, out);
  return absl::OkStatus();
}

// ---- allreduce and grouped allreduce -------------------------------------------------------

// The compression an allreduce's attributes ask for (DDP_CODEC_*, PowerSGD's rank), read once.
class CompressedKernel : public Kernel {
 protected:
  explicit CompressedKernel(OpKernelConstruction* c) : Kernel(c, Attrs::kReduction) {
    OP_REQUIRES_OK(c, c->GetAttr("codec", &codec_));
    OP_REQUIRES_OK(c, c->GetAttr("codec_rank", &codec_rank_));
  }

  int codec_ = DDP_CODEC_NONE;
  int codec_rank_ = 0;
};

class AllreduceOp : public CompressedKernel {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : CompressedKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Call call;
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, BeginInPlace(ctx, &call, &output), done);
    ddp_handle* h = ddp_allreduce_compressed_async(
        call.context, call.name.c_str(), ReadPtr(ctx->input(0)), WritePtr(output), call.dtype,
        call.dims.data(), call.ndim(), op_, prescale_, postscale_, process_set_, DDP_CPU, nullptr,
        codec_, codec_rank_);
    Await(ctx, h, std::move(done), Nothing);
  }
};

class GroupedAllreduceOp : public CompressedKernel {
 public:
  explicit GroupedAllreduceOp(OpKernelConstruction* c) : CompressedKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs() - 1;
    Call call;
    OP_REQUIRES_OK_ASYNC(ctx, Begin(ctx, n, &call), done);
    OP_REQUIRES_ASYNC(ctx, n > 0,
                      absl::InvalidArgumentError("ddp.tensorflow: a group needs a tensor"), done);
    OP_REQUIRES_OK_ASYNC(ctx, DtypeOf(ctx->input(0).dtype(), &call.dtype), done);
    std::vector<std::string> names(static_cast<size_t>(n));
    std::vector<const char*> name_ptrs(static_cast<size_t>(n));
    std::vector<const void*> inputs(static_cast<size_t>(n));
    std::vector<void*> outputs(static_cast<size_t>(n));
    std::vector<std::vector<int64_t>> dims(static_cast<size_t>(n));
    std::vector<const int64_t*> shapes(static_cast<size_t>(n));
    std::vector<int> ndims(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(i);
      const Tensor& input = ctx->input(i);
      Tensor* output = nullptr;
      OP_REQUIRES_OK_ASYNC(
          ctx, ctx->forward_input_or_allocate_output({i}, i, input.shape(), &output), done);
      names[k] = call.name + "." + std::to_string(i);
      name_ptrs[k] = names[k].c_str();
      inputs[k] = ReadPtr(input);
      outputs[k] = WritePtr(output);
      dims[k] = Dims(input.shape());
      shapes[k] = dims[k].data();
      ndims[k] = static_cast<int>(dims[k].size());
    }
    ddp_handle* h = ddp_grouped_allreduce_compressed_async(
        call.context, call.name.c_str(), n, name_ptrs.data(), inputs.data(), outputs.data(),
        shapes.data(), ndims.data(), call.dtype, op_, prescale_, postscale_, process_set_, DDP_CPU,
        nullptr, codec_, codec_rank_);
    Await(ctx, h, std::move(done), Nothing);
  }
};

DDP_REDUCTION_OP("DdpAllreduce", "reduced")
    .Attr("process_set: int = 0")
    .Attr("codec: int = 0")       // DDP_CODEC_* (docs/compression.md)
    .Attr("codec_rank: int = 0")  // PowerSGD's
    .SetShapeFn(SameShape)
    .Doc(
        "Reduces the tensor over the ranks (libddp's engine: negotiated by name, fused; "
        "compressed on the wire by `codec`).");
DDP_CPU_KERNEL("DdpAllreduce", AllreduceOp);

REGISTER_OP("DdpGroupedAllreduce")
    .Attr(DDP_TYPES_ATTR)
    .Attr("N: int >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Attr("codec: int = 0")
    .Attr("codec_rank: int = 0")
    .Input("tensors: N * T")
    .Input("group_name: string")
    .Output("reduced: N * T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Reduces the tensors as one unit (one negotiation, one fused collective).");
DDP_CPU_KERNEL("DdpGroupedAllreduce", GroupedAllreduceOp);

// ---- allgather, alltoall, reduce-scatter: outputs the engine allocates ----------------------

enum class Kind { kAllgather, kAlltoall, kReducescatter };

template <Kind kind>
class AllocatingOp : public Kernel {
 public:
  explicit AllocatingOp(OpKernelConstruction* c)
      : Kernel(c, kind == Kind::kReducescatter ? Attrs::kReduction : Attrs::kProcessSet) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Call call;
    OP_REQUIRES_OK_ASYNC(ctx, BeginTensor(ctx, &call), done);
    OP_REQUIRES_ASYNC(ctx, call.ndim() >= 1,
                      absl::InvalidArgumentError("ddp.tensorflow: '" + call.name +
                                                 "' needs a tensor of at least one dimension"),
                      done);
    const void* input = ReadPtr(ctx->input(0));
    ddp_handle* h = nullptr;
    if (kind == Kind::kAllgather) {
      h = ddp_allgather_async(call.context, call.name.c_str(), input, call.dtype, call.dims.data(),
                              call.ndim(), process_set_, DDP_CPU, nullptr);
    } else if (kind == Kind::kAlltoall) {
      h = ddp_alltoall_async(call.context, call.name.c_str(), input, call.dtype, call.dims.data(),
                             call.ndim(), process_set_, DDP_CPU, nullptr);
    } else {
      h = ddp_reducescatter_async(call.context, call.name.c_str(), input, call.dtype,
                                  call.dims.data(), call.ndim(), op_, prescale_, postscale_,
                                  process_set_, DDP_CPU, nullptr);
    }
    Await</*kOffload=*/true>(ctx, h, std::move(done),
                             [ctx](ddp_handle* handle) { return CopyOut(ctx, handle); });
  }
};

DDP_TENSOR_OP("DdpAllgather", "gathered")
    .Attr("process_set: int = 0")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Concatenates every rank's tensor along the first dimension (which may differ).");
DDP_CPU_KERNEL("DdpAllgather", AllocatingOp<Kind::kAllgather>);

DDP_TENSOR_OP("DdpAlltoall", "exchanged")
    .Attr("process_set: int = 0")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Splits the first dimension in equal blocks, block j to rank j; gathers block i from i.");
DDP_CPU_KERNEL("DdpAlltoall", AllocatingOp<Kind::kAlltoall>);

DDP_REDUCTION_OP("DdpReducescatter", "scattered")
    .Attr("process_set: int = 0")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Reduces, then splits the first dimension across ranks; this rank's rows.");
DDP_CPU_KERNEL("DdpReducescatter", AllocatingOp<Kind::kReducescatter>);

// ---- broadcast ------------------------------------------------------------------------------

class BroadcastOp : public Kernel {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : Kernel(c, Attrs::kProcessSet) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Call call;
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, BeginInPlace(ctx, &call, &output), done);
    // In place on the output: the root sends its tensor, the others receive into theirs.
    const Tensor& input = ctx->input(0);
    if (output->data() != input.data() && input.TotalBytes() > 0) {
      std::memcpy(output->data(), input.data(), input.TotalBytes());
    }
    ddp_handle* h =
        ddp_broadcast_async(call.context, call.name.c_str(), WritePtr(output), call.dtype,
                            call.dims.data(), call.ndim(), root_, process_set_, DDP_CPU, nullptr);
    Await(ctx, h, std::move(done), Nothing);
  }

 private:
  int root_ = 0;
};

DDP_TENSOR_OP("DdpBroadcast", "broadcast")
    .Attr("root_rank: int")
    .Attr("process_set: int = 0")
    .SetShapeFn(SameShape)
    .Doc("Every rank receives the root rank's tensor.");
DDP_CPU_KERNEL("DdpBroadcast", BroadcastOp);

// ---- join and barrier -----------------------------------------------------------------------

// A barrier is an allreduce of a scalar of its own through the engine, so it is ordered with the
// operations submitted before it; stateful, so that TensorFlow never folds or merges it.
class BarrierOp : public Kernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : Kernel(c, Attrs::kProcessSet) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    Call call;
    OP_REQUIRES_OK_ASYNC(ctx, Begin(ctx, 0, &call), done);
    auto token = std::make_unique<int32_t>(0);
    int32_t* p = token.get();
    ddp_handle* h = ddp_allreduce_async(call.context, call.name.c_str(), p, p, DDP_INT32, nullptr,
                                        0, DDP_SUM, 1.0, 1.0, process_set_, DDP_CPU, nullptr);
    // The scalar lives as long as the wait (the lambda owns it).
    Await(ctx, h, std::move(done),
          [token = std::move(token)](ddp_handle*) { return absl::OkStatus(); });
  }
};

REGISTER_OP("DdpBarrier")
    .Attr("process_set: int = 0")
    .Input("barrier_name: string")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext*) { return absl::OkStatus(); })
    .Doc("Returns once every rank of the process set has reached it.");
DDP_CPU_KERNEL("DdpBarrier", BarrierOp);

// No attributes, and a context check of its own (its message says join()).
class JoinOp : public AsyncOpKernel {
 public:
  explicit JoinOp(OpKernelConstruction* c) : AsyncOpKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Context held;
    ddp_context* context = held.get();
    OP_REQUIRES_ASYNC(
        ctx, context != nullptr,
        absl::FailedPreconditionError("ddp.tensorflow: join() ran before ddp.tensorflow.init()"),
        done);
    ddp_handle* h = ddp_join_async(context);
    Await(ctx, h, std::move(done), [ctx](ddp_handle* handle) {
      Tensor* out = nullptr;
      absl::Status s = ctx->allocate_output(0, TensorShape({}), &out);
      if (s.ok()) out->scalar<int32_t>()() = ddp_handle_join_last_rank(handle);
      return s;
    });
  }
};

REGISTER_OP("DdpJoin")
    .Output("last_rank: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    })
    .Doc("This rank has no more data; finishes when every rank has joined (the last one).");
DDP_CPU_KERNEL("DdpJoin", JoinOp);

}  // namespace
}  // namespace ddp_tf

// Called by ddp.tensorflow (ctypes) with a C reference from ddp._ddp._c_context(), or 0 at
// shutdown; the previous reference is released.
extern "C" __attribute__((visibility("default"))) void ddp_tf_set_context(uintptr_t context) {
  ddp_context* old = nullptr;
  {
    std::lock_guard<std::mutex> lock(ddp_tf::g_mu);
    old = ddp_tf::g_context;
    ddp_tf::g_context = reinterpret_cast<ddp_context*>(context);
  }
  ddp_context_release(old);
}
