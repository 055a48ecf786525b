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
  switch (type) {
    case tensorflow::DT_FLOAT:
      *out = DDP_FLOAT32;
      return absl::OkStatus();
    case tensorflow::DT_DOUBLE:
      *out = DDP_FLOAT64;
      return absl::OkStatus();
    case tensorflow::DT_HALF:
      *out = DDP_FLOAT16;
      return absl::OkStatus();
    case tensorflow::DT_BFLOAT16:
      *out = DDP_BFLOAT16;
      return absl::OkStatus();
    case tensorflow::DT_INT8:
      *out = DDP_INT8;
      return absl::OkStatus();
    case tensorflow::DT_UINT8:
      *out = DDP_UINT8;
      return absl::OkStatus();
    case tensorflow::DT_INT32:
      *out = DDP_INT32;
      return absl::OkStatus();
    case tensorflow::DT_INT64:
      *out = DDP_INT64;
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          "ddp.tensorflow: data type " + tensorflow::DataTypeString(type) +
          " is not supported (float16/32/64, bfloat16, int8, uint8, int32 and int64 are)");
  }
}

std::vector<int64_t> Dims(const TensorShape& shape) {
  std::vector<int64_t> dims;
  for (int i = 0; i < shape.dims(); ++i) dims.push_back(shape.dim_size(i));
  return dims;
}

const void* ReadPtr(const Tensor& t) { return t.NumElements() == 0 ? nullptr : t.data(); }
void* WritePtr(Tensor* t) { return t->NumElements() == 0 ? nullptr : t->data(); }

// What every kernel starts with: the context, the tensor's name (input `index`) and its type.
absl::Status Begin(OpKernelContext* ctx, int name_index, const Context& held, ddp_context** context,
                   std::string* name) {
  *context = held.get();
  if (*context == nullptr) {
    return absl::FailedPreconditionError(
        "ddp.tensorflow: an operation ran before ddp.tensorflow.init() (or after shutdown())");
  }
  const Tensor& n = ctx->input(name_index);
  if (!tensorflow::TensorShapeUtils::IsScalar(n.shape()) || n.dtype() != tensorflow::DT_STRING) {
    return absl::InvalidArgumentError("ddp.tensorflow: the tensor name must be a scalar string");
  }
  *name = std::string(n.scalar<tensorflow::tstring>()());
  return absl::OkStatus();
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

// ---- allreduce ----------------------------------------------------------------------------

class AllreduceOp : public AsyncOpKernel {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Context held;
    ddp_context* context = nullptr;
    std::string name;
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(ctx, Begin(ctx, 1, held, &context, &name), done);
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, DtypeOf(input.dtype(), &dtype), done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output),
                         done);
    const std::vector<int64_t> dims = Dims(input.shape());
    ddp_handle* h = ddp_allreduce_async(context, name.c_str(), ReadPtr(input), WritePtr(output),
                                        dtype, dims.data(), static_cast<int>(dims.size()), op_,
                                        prescale_, postscale_, process_set_, DDP_CPU, nullptr);
    Await(ctx, h, std::move(done), Nothing);
  }

 private:
  int op_ = DDP_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int process_set_ = 0;
};

REGISTER_OP("DdpAllreduce")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int32, int64}")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("reduced: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("Reduces the tensor over the ranks (libddp's engine: negotiated by name, fused).");
REGISTER_KERNEL_BUILDER(Name("DdpAllreduce").Device(tensorflow::DEVICE_CPU), AllreduceOp);

// ---- grouped allreduce ----------------------------------------------------------------------

class GroupedAllreduceOp : public AsyncOpKernel {
 public:
  explicit GroupedAllreduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
    OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
    OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = ctx->num_inputs() - 1;
    const Context held;
    ddp_context* context = nullptr;
    std::string group;
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(ctx, Begin(ctx, n, held, &context, &group), done);
    OP_REQUIRES_ASYNC(ctx, n > 0,
                      absl::InvalidArgumentError("ddp.tensorflow: a group needs a tensor"), done);
    OP_REQUIRES_OK_ASYNC(ctx, DtypeOf(ctx->input(0).dtype(), &dtype), done);
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
      names[k] = group + "." + std::to_string(i);
      name_ptrs[k] = names[k].c_str();
      inputs[k] = ReadPtr(input);
      outputs[k] = WritePtr(output);
      dims[k] = Dims(input.shape());
      shapes[k] = dims[k].data();
      ndims[k] = static_cast<int>(dims[k].size());
    }
    ddp_handle* h = ddp_grouped_allreduce_async(
        context, group.c_str(), n, name_ptrs.data(), inputs.data(), outputs.data(), shapes.data(),
        ndims.data(), dtype, op_, prescale_, postscale_, process_set_, DDP_CPU, nullptr);
    Await(ctx, h, std::move(done), Nothing);
  }

 private:
  int op_ = DDP_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
  int process_set_ = 0;
};

REGISTER_OP("DdpGroupedAllreduce")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int32, int64}")
    .Attr("N: int >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensors: N * T")
    .Input("group_name: string")
    .Output("reduced: N * T")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
      return absl::OkStatus();
    })
    .Doc("Reduces the tensors as one unit (one negotiation, one fused collective).");
REGISTER_KERNEL_BUILDER(Name("DdpGroupedAllreduce").Device(tensorflow::DEVICE_CPU),
                        GroupedAllreduceOp);

// ---- allgather, alltoall, reduce-scatter: outputs the engine allocates ----------------------

enum class Kind { kAllgather, kAlltoall, kReducescatter };

template <Kind kind>
class AllocatingOp : public AsyncOpKernel {
 public:
  explicit AllocatingOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
    if (kind == Kind::kReducescatter) {
      OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &op_));
      OP_REQUIRES_OK(c, c->GetAttr("prescale_factor", &prescale_));
      OP_REQUIRES_OK(c, c->GetAttr("postscale_factor", &postscale_));
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Context held;
    ddp_context* context = nullptr;
    std::string name;
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(ctx, Begin(ctx, 1, held, &context, &name), done);
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, DtypeOf(input.dtype(), &dtype), done);
    OP_REQUIRES_ASYNC(ctx, input.dims() >= 1,
                      absl::InvalidArgumentError("ddp.tensorflow: '" + name +
                                                 "' needs a tensor of at least one dimension"),
                      done);
    const std::vector<int64_t> dims = Dims(input.shape());
    const int ndim = static_cast<int>(dims.size());
    ddp_handle* h = nullptr;
    if (kind == Kind::kAllgather) {
      h = ddp_allgather_async(context, name.c_str(), ReadPtr(input), dtype, dims.data(), ndim,
                              process_set_, DDP_CPU, nullptr);
    } else if (kind == Kind::kAlltoall) {
      h = ddp_alltoall_async(context, name.c_str(), ReadPtr(input), dtype, dims.data(), ndim,
                             process_set_, DDP_CPU, nullptr);
    } else {
      h = ddp_reducescatter_async(context, name.c_str(), ReadPtr(input), dtype, dims.data(), ndim,
                                  op_, prescale_, postscale_, process_set_, DDP_CPU, nullptr);
    }
    Await</*kOffload=*/true>(ctx, h, std::move(done),
                             [ctx](ddp_handle* handle) { return CopyOut(ctx, handle); });
  }

 private:
  int process_set_ = 0;
  int op_ = DDP_SUM;
  float prescale_ = 1.0f;
  float postscale_ = 1.0f;
};

// The first dimension is only known at run time (it may differ per rank).
absl::Status FirstDimUnknown(InferenceContext* c) {
  tensorflow::shape_inference::ShapeHandle out;
  absl::Status s = c->ReplaceDim(c->input(0), 0, c->UnknownDim(), &out);
  if (!s.ok()) return s;
  c->set_output(0, out);
  return absl::OkStatus();
}

REGISTER_OP("DdpAllgather")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int32, int64}")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("gathered: T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Concatenates every rank's tensor along the first dimension (which may differ).");
REGISTER_KERNEL_BUILDER(Name("DdpAllgather").Device(tensorflow::DEVICE_CPU),
                        AllocatingOp<Kind::kAllgather>);

REGISTER_OP("DdpAlltoall")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int32, int64}")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("exchanged: T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Splits the first dimension in equal blocks, block j to rank j; gathers block i from i.");
REGISTER_KERNEL_BUILDER(Name("DdpAlltoall").Device(tensorflow::DEVICE_CPU),
                        AllocatingOp<Kind::kAlltoall>);

REGISTER_OP("DdpReducescatter")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int32, int64}")
    .Attr("reduce_op: int")
    .Attr("prescale_factor: float = 1.0")
    .Attr("postscale_factor: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("scattered: T")
    .SetShapeFn(FirstDimUnknown)
    .Doc("Reduces, then splits the first dimension across ranks; this rank's rows.");
REGISTER_KERNEL_BUILDER(Name("DdpReducescatter").Device(tensorflow::DEVICE_CPU),
                        AllocatingOp<Kind::kReducescatter>);

// ---- broadcast ------------------------------------------------------------------------------

class BroadcastOp : public AsyncOpKernel {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_));
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Context held;
    ddp_context* context = nullptr;
    std::string name;
    int dtype = 0;
    OP_REQUIRES_OK_ASYNC(ctx, Begin(ctx, 1, held, &context, &name), done);
    const Tensor& input = ctx->input(0);
    OP_REQUIRES_OK_ASYNC(ctx, DtypeOf(input.dtype(), &dtype), done);
    Tensor* output = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output),
                         done);
    // In place on the output: the root sends its tensor, the others receive into theirs.
    if (output->data() != input.data() && input.TotalBytes() > 0) {
      std::memcpy(output->data(), input.data(), input.TotalBytes());
    }
    const std::vector<int64_t> dims = Dims(input.shape());
    ddp_handle* h =
        ddp_broadcast_async(context, name.c_str(), WritePtr(output), dtype, dims.data(),
                            static_cast<int>(dims.size()), root_, process_set_, DDP_CPU, nullptr);
    Await(ctx, h, std::move(done), Nothing);
  }

 private:
  int root_ = 0;
  int process_set_ = 0;
};

REGISTER_OP("DdpBroadcast")
    .Attr("T: {half, bfloat16, float, double, int8, uint8, int32, int64}")
    .Attr("root_rank: int")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("broadcast: T")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    })
    .Doc("Every rank receives the root rank's tensor.");
REGISTER_KERNEL_BUILDER(Name("DdpBroadcast").Device(tensorflow::DEVICE_CPU), BroadcastOp);

// ---- join and barrier -----------------------------------------------------------------------

// A barrier is an allreduce of a scalar of its own through the engine, so it is ordered with the
// operations submitted before it; stateful, so that TensorFlow never folds or merges it.
class BarrierOp : public AsyncOpKernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const Context held;
    ddp_context* context = nullptr;
    std::string name;
    OP_REQUIRES_OK_ASYNC(ctx, Begin(ctx, 0, held, &context, &name), done);
    auto token = std::make_unique<int32_t>(0);
    int32_t* p = token.get();
    ddp_handle* h = ddp_allreduce_async(context, name.c_str(), p, p, DDP_INT32, nullptr, 0, DDP_SUM,
                                        1.0, 1.0, process_set_, DDP_CPU, nullptr);
    // The scalar lives as long as the wait (the lambda owns it).
    Await(ctx, h, std::move(done),
          [token = std::move(token)](ddp_handle*) { return absl::OkStatus(); });
  }

 private:
  int process_set_ = 0;
};

REGISTER_OP("DdpBarrier")
    .Attr("process_set: int = 0")
    .Input("barrier_name: string")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext*) { return absl::OkStatus(); })
    .Doc("Returns once every rank of the process set has reached it.");
REGISTER_KERNEL_BUILDER(Name("DdpBarrier").Device(tensorflow::DEVICE_CPU), BarrierOp);

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
REGISTER_KERNEL_BUILDER(Name("DdpJoin").Device(tensorflow::DEVICE_CPU), JoinOp);

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
