// The MPI transport's wire (DDP_TRANSPORT=mpi), part of libddp_mpi.so: control messages on one
// duplicate of MPI_COMM_WORLD (taken with MPI_Improbe/MPI_Mrecv, any source, exact size), data
// messages on another with MPI_Isend/MPI_Irecv straight from and into the caller's buffers.
// Optionally MPI_Allreduce itself, on communicators of its own (DDP_MPI_ALLREDUCE=1).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reduce/reduce.h"
#include "transport/mpi/mpi_impl.h"

namespace ddp::transport::mpi::impl {
namespace {

std::string MpiText(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

absl::Status MpiError(int code, const char* what) {
  return absl::InternalError(absl::StrCat(what, " failed: ", MpiText(code)));
}

#define DDP_MPI_CHECK(expr, what)                                     \
  do {                                                                \
    const int ddp_mpi_rc = (expr);                                    \
    if (ddp_mpi_rc != MPI_SUCCESS) return MpiError(ddp_mpi_rc, what); \
  } while (0)

// The largest message MPI's int counts carry comfortably.
constexpr size_t kMaxData = size_t{1} << 30;

class MpiWire final : public wire::Wire {
 public:
  MpiWire(MPI_Comm control, MPI_Comm data, uint64_t tag_mask, std::string version)
      : control_(control), data_(data), tag_mask_(tag_mask), version_(std::move(version)) {}
  ~MpiWire() override {
    Cancel();
    Abandon();
    // MPI_Comm_free is collective in spirit; the communicators die with MPI_Finalize.
  }

  std::string Name() const override { return absl::StrCat("mpi (", version_, ")"); }
  size_t max_data_bytes() const override { return kMaxData; }
  size_t max_control_bytes() const override { return size_t{1} << 20; }

  absl::Status PostControl(int peer, const std::string& payload, bool /*tracked*/) override {
    auto buffer = std::make_unique<std::string>(payload);
    MPI_Request request = MPI_REQUEST_NULL;
    DDP_MPI_CHECK(MPI_Isend(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE, peer, 0,
                            control_, &request),
                  "MPI_Isend");
    control_requests_.push_back(request);
    control_buffers_.push_back(std::move(buffer));
    control_peers_.push_back(peer);
    return absl::OkStatus();
  }

  absl::Status PostSend(int peer, uint64_t data_tag, const void* data, size_t bytes,
                        uint64_t token) override {
    MPI_Request request = MPI_REQUEST_NULL;
    DDP_MPI_CHECK(
        MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, Tag(data_tag), data_, &request),
        "MPI_Isend");
    data_requests_.push_back(request);
    tokens_.push_back(token);
    is_receive_.push_back(false);
    return absl::OkStatus();
  }

  absl::Status PostRecv(int peer, uint64_t data_tag, void* data, size_t bytes,
                        uint64_t token) override {
    MPI_Request request = MPI_REQUEST_NULL;
    DDP_MPI_CHECK(
        MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, Tag(data_tag), data_, &request),
        "MPI_Irecv");
    data_requests_.push_back(request);
    tokens_.push_back(token);
    is_receive_.push_back(true);
    return absl::OkStatus();
  }

  absl::Status Poll(std::vector<wire::Event>* events) override {
    // Control messages, in arrival order (MPI does not let messages overtake on one tag).
    for (;;) {
      int flag = 0;
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Status status;
      DDP_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, 0, control_, &flag, &message, &status),
                    "MPI_Improbe");
      if (!flag) break;
      int count = 0;
      DDP_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
      wire::Event e;
      e.kind = wire::Event::Kind::kControl;
      e.peer = status.MPI_SOURCE;
      e.payload.resize(static_cast<size_t>(count));
      DDP_MPI_CHECK(MPI_Mrecv(e.payload.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE),
                    "MPI_Mrecv");
      events->push_back(std::move(e));
    }
    if (!data_requests_.empty()) {
      int done = 0;
      indices_.resize(data_requests_.size());
      statuses_.resize(data_requests_.size());
      const int rc = MPI_Testsome(static_cast<int>(data_requests_.size()), data_requests_.data(),
                                  &done, indices_.data(), statuses_.data());
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return MpiError(rc, "MPI_Testsome");
      if (done != MPI_UNDEFINED && done > 0) {
        for (int i = 0; i < done; ++i) {
          const auto k = static_cast<size_t>(indices_[static_cast<size_t>(i)]);
          wire::Event e;
          e.token = tokens_[k];
          const int err =
              rc == MPI_ERR_IN_STATUS ? statuses_[static_cast<size_t>(i)].MPI_ERROR : MPI_SUCCESS;
          if (err != MPI_SUCCESS) e.status = absl::UnavailableError(MpiText(err));
          int cancelled = 0;
          MPI_Test_cancelled(&statuses_[static_cast<size_t>(i)], &cancelled);
          if (cancelled && e.status.ok()) e.status = absl::CancelledError("cancelled");
          events->push_back(std::move(e));
        }
        // Completed requests are MPI_REQUEST_NULL now: drop them, keeping the order.
        size_t w = 0;
        for (size_t k = 0; k < data_requests_.size(); ++k) {
          if (data_requests_[k] == MPI_REQUEST_NULL) continue;
          data_requests_[w] = data_requests_[k];
          tokens_[w] = tokens_[k];
          is_receive_[w] = is_receive_[k];
          ++w;
        }
        data_requests_.resize(w);
        tokens_.resize(w);
        is_receive_.resize(w);
      }
    }
    if (!control_requests_.empty()) {
      // Finished control sends free their buffers; a failed one is reported with its peer.
      int done = 0;
      indices_.resize(control_requests_.size());
      statuses_.resize(control_requests_.size());
      const int rc =
          MPI_Testsome(static_cast<int>(control_requests_.size()), control_requests_.data(), &done,
                       indices_.data(), statuses_.data());
      if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return MpiError(rc, "MPI_Testsome");
      if (done != MPI_UNDEFINED && done > 0) {
        for (int i = 0; i < done; ++i) {
          const int err =
              rc == MPI_ERR_IN_STATUS ? statuses_[static_cast<size_t>(i)].MPI_ERROR : MPI_SUCCESS;
          if (err == MPI_SUCCESS) continue;
          wire::Event e;
          e.token = 0;
          e.peer = control_peers_[static_cast<size_t>(indices_[static_cast<size_t>(i)])];
          e.status = absl::UnavailableError(MpiText(err));
          events->push_back(std::move(e));
        }
        size_t w = 0;
        for (size_t k = 0; k < control_requests_.size(); ++k) {
          if (control_requests_[k] == MPI_REQUEST_NULL) continue;
          control_requests_[w] = control_requests_[k];
          control_buffers_[w] = std::move(control_buffers_[k]);
          control_peers_[w] = control_peers_[k];
          ++w;
        }
        control_requests_.resize(w);
        control_buffers_.resize(w);
        control_peers_.resize(w);
      }
    }
    return absl::OkStatus();
  }

  void Cancel() override {
    // Receives are cancelled; they (and the sends) still complete through MPI_Testsome, which
    // tells the transport when MPI has let go of each buffer.
    for (size_t k = 0; k < data_requests_.size(); ++k) {
      if (data_requests_[k] != MPI_REQUEST_NULL && is_receive_[k]) MPI_Cancel(&data_requests_[k]);
    }
  }

  void Abandon() override {
    // MPI has no way to take back a started send: the requests are freed and MPI finishes them
    // on its own (a receive that was matched may still be written; see the README).
    for (MPI_Request& r : data_requests_) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    data_requests_.clear();
    tokens_.clear();
    is_receive_.clear();
  }

  bool Busy() const override { return !data_requests_.empty() || !control_requests_.empty(); }

 private:
  int Tag(uint64_t data_tag) const { return static_cast<int>(data_tag & tag_mask_); }

  MPI_Comm control_;
  MPI_Comm data_;
  uint64_t tag_mask_;
  std::string version_;
  std::vector<MPI_Request> control_requests_;
  std::vector<std::unique_ptr<std::string>> control_buffers_;
  std::vector<int> control_peers_;
  std::vector<MPI_Request> data_requests_;
  std::vector<uint64_t> tokens_;
  std::vector<bool> is_receive_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
};

// ---- MPI_Allreduce ---------------------------------------------------------------------------

std::map<int, MPI_Comm>& NativeComms() {
  static auto* comms = new std::map<int, MPI_Comm>();
  return *comms;
}

// f16 and bf16 have no MPI type: they travel as MPI_UINT16_T with libddp's own kernels.
template <DataType T, ReduceOp O>
void HalfOp(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  reduce::Combine(T, O, inout, in, inout, static_cast<size_t>(*len));
}

absl::StatusOr<MPI_Op> HalfOpFor(DataType type, ReduceOp op) {
  // The context's and the engine's allreduces run in different threads.
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  static std::map<std::pair<int, int>, MPI_Op>* ops = new std::map<std::pair<int, int>, MPI_Op>();
  const auto key = std::make_pair(static_cast<int>(type), static_cast<int>(op));
  if (auto it = ops->find(key); it != ops->end()) return it->second;
  MPI_User_function* fn = nullptr;
  const bool f16 = type == DataType::kFloat16;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kSum>
               : HalfOp<DataType::kBFloat16, ReduceOp::kSum>;
      break;
    case ReduceOp::kMin:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kMin>
               : HalfOp<DataType::kBFloat16, ReduceOp::kMin>;
      break;
    case ReduceOp::kMax:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kMax>
               : HalfOp<DataType::kBFloat16, ReduceOp::kMax>;
      break;
    case ReduceOp::kProduct:
      fn = f16 ? HalfOp<DataType::kFloat16, ReduceOp::kProduct>
               : HalfOp<DataType::kBFloat16, ReduceOp::kProduct>;
      break;
  }
  MPI_Op created = MPI_OP_NULL;
  DDP_MPI_CHECK(MPI_Op_create(fn, /*commute=*/1, &created), "MPI_Op_create");
  (*ops)[key] = created;
  return created;
}

}  // namespace

absl::StatusOr<std::unique_ptr<wire::Wire>> CreateWire(const std::vector<int>& native_ids) {
  int initialized = 0;
  DDP_MPI_CHECK(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    return absl::FailedPreconditionError(
        "DDP_TRANSPORT=mpi needs MPI initialised: launch with mpirun (the MPI bootstrap "
        "initialises it)");
  }
  int level = 0;
  DDP_MPI_CHECK(MPI_Query_thread(&level), "MPI_Query_thread");
  if (level < MPI_THREAD_MULTIPLE) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DDP_TRANSPORT=mpi needs MPI_THREAD_MULTIPLE but MPI was initialised with thread level ",
        level,
        " (initialise it with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...), or let "
        "libddp initialise it)"));
  }
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm data = MPI_COMM_NULL;
  DDP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &control), "MPI_Comm_dup");
  DDP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &data), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  for (int id : native_ids) {
    if (NativeComms().count(id) != 0) continue;
    MPI_Comm c = MPI_COMM_NULL;
    DDP_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    NativeComms()[id] = c;
  }
  // Data tags wrap at the largest power of two MPI allows (at least 2^15 by the standard).
  void* value = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
  uint64_t tag_ub = flag ? static_cast<uint64_t>(*static_cast<int*>(value)) : 32767;
  uint64_t mask = 1;
  while (mask * 2 - 1 <= tag_ub && mask < (uint64_t{1} << 30)) mask *= 2;
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<size_t>(length));
  version = version.substr(0, version.find_first_of("\r\n,"));
  return std::unique_ptr<wire::Wire>(new MpiWire(control, data, mask - 1, version));
}

bool HasAllreduce(int comm_id) { return NativeComms().count(comm_id) != 0; }

absl::Status Allreduce(int comm_id, const void* send, void* recv, size_t count, DataType type,
                       ReduceOp op) {
  auto it = NativeComms().find(comm_id);
  if (it == NativeComms().end()) return absl::InternalError("no MPI communicator for this id");
  MPI_Datatype dt = MPI_DATATYPE_NULL;
  switch (type) {
    case DataType::kFloat32:
      dt = MPI_FLOAT;
      break;
    case DataType::kFloat64:
      dt = MPI_DOUBLE;
      break;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      dt = MPI_UINT16_T;
      break;
    case DataType::kInt8:
      dt = MPI_INT8_T;
      break;
    case DataType::kUInt8:
      dt = MPI_UINT8_T;
      break;
    case DataType::kInt32:
      dt = MPI_INT32_T;
      break;
    case DataType::kInt64:
      dt = MPI_INT64_T;
      break;
  }
  MPI_Op mop = MPI_SUM;
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) {
    auto half = HalfOpFor(type, op);
    if (!half.ok()) return half.status();
    mop = *half;
  } else {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        mop = MPI_SUM;
        break;
      case ReduceOp::kMin:
        mop = MPI_MIN;
        break;
      case ReduceOp::kMax:
        mop = MPI_MAX;
        break;
      case ReduceOp::kProduct:
        mop = MPI_PROD;
        break;
    }
  }
  const size_t es = DataTypeSize(type);
  if (send != recv && count > 0) std::memcpy(recv, send, count * es);
  // In place, in pieces that MPI's int counts can carry.
  constexpr size_t kPiece = size_t{1} << 30;
  auto* out = static_cast<char*>(recv);
  size_t done = 0;
  do {
    const size_t n = std::min(kPiece, count - done);
    DDP_MPI_CHECK(
        MPI_Allreduce(MPI_IN_PLACE, out + done * es, static_cast<int>(n), dt, mop, it->second),
        "MPI_Allreduce");
    done += n;
  } while (done < count);
  if (op == ReduceOp::kAverage) {
    int size = 1;
    MPI_Comm_size(it->second, &size);
    reduce::DivideBy(type, recv, count, size);
  }
  return absl::OkStatus();
}

}  // namespace ddp::transport::mpi::impl
