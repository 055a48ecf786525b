// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The MPI transport's wire (DDP_TRANSPORT=mpi), part of libddp_mpi.so: control messages on one
// duplicate of MPI_COMM_WORLD (taken with MPI_Improbe/MPI_Mrecv, any source, exact size), data
// messages on another with MPI_Isend/MPI_Irecv straight from and into the caller's buffers.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "mpi/plugin_impl.h"

namespace ddp::mpi::impl {
namespace {

using transport::wire::Event;
using transport::wire::Wire;

// The largest message MPI's int counts carry comfortably.
constexpr size_t kMaxData = size_t{1} << 30;

// Requests in flight, each with what the wire needs to know of it.
template <class Info>
class InFlight {
 public:
  void Add(MPI_Request request, Info info) {
    requests_.push_back(request);
    info_.push_back(std::move(info));
  }
  bool empty() const { return requests_.empty(); }

  // Tests them all; calls done(info, error) for each that finished (error: MPI_SUCCESS, an MPI
  // error code, or -1 when it was cancelled), then forgets those, keeping the order.
  template <class Done>
  absl::Status Reap(Done&& done) {
    if (requests_.empty()) return absl::OkStatus();
    int count = 0;
    indices_.resize(requests_.size());
    statuses_.resize(requests_.size());
    const int rc = MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &count,
                                indices_.data(), statuses_.data());
    if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return MpiError(rc, "MPI_Testsome");
    if (count == MPI_UNDEFINED || count == 0) return absl::OkStatus();
    for (int i = 0; i < count; ++i) {
      MPI_Status& status = statuses_[static_cast<size_t>(i)];
      int error = rc == MPI_ERR_IN_STATUS ? status.MPI_ERROR : MPI_SUCCESS;
      int cancelled = 0;
      MPI_Test_cancelled(&status, &cancelled);
      if (cancelled && error == MPI_SUCCESS) error = -1;
      done(info_[static_cast<size_t>(indices_[static_cast<size_t>(i)])], error);
    }
    // Finished requests are MPI_REQUEST_NULL now.
    size_t w = 0;
    for (size_t k = 0; k < requests_.size(); ++k) {
      if (requests_[k] == MPI_REQUEST_NULL) continue;
      requests_[w] = requests_[k];
      info_[w] = std::move(info_[k]);
      ++w;
    }
    requests_.resize(w);
    info_.resize(w);
    return absl::OkStatus();
  }

  // Calls fn(request, info) for each in flight.
  template <class Fn>
  void ForEach(Fn&& fn) {
    for (size_t k = 0; k < requests_.size(); ++k) fn(requests_[k], info_[k]);
  }
  void Clear() {
    requests_.clear();
    info_.clear();
  }

 private:
  std::vector<MPI_Request> requests_;
  std::vector<Info> info_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
};

class MpiWire final : public Wire {
 public:
  MpiWire(MPI_Comm control, MPI_Comm data, uint64_t tag_mask, std::string version)
      : control_comm_(control),
        data_comm_(data),
        tag_mask_(tag_mask),
        version_(std::move(version)) {}
  ~MpiWire() override {
    Cancel();
    Abandon();
    // MPI_Comm_free is collective in spirit; the communicators die with MPI_Finalize.
  }

  std::string Name() const override { return absl::StrCat("mpi (", version_, ")"); }
  size_t max_data_bytes() const override { return kMaxData; }
  size_t max_control_bytes() const override { return size_t{1} << 20; }

  absl::Status PostControl(int peer, std::string payload) override {
    auto buffer = std::make_unique<std::string>(std::move(payload));
    MPI_Request request = MPI_REQUEST_NULL;
    DDP_MPI_CHECK(MPI_Isend(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE, peer, 0,
                            control_comm_, &request),
                  "MPI_Isend");
    control_.Add(request, ControlSend{peer, std::move(buffer)});
    return absl::OkStatus();
  }

  absl::Status PostSend(int peer, uint64_t data_tag, const void* data, size_t bytes,
                        uint64_t token) override {
    return PostData(peer, data_tag, const_cast<void*>(data), bytes, token, /*receive=*/false);
  }

  absl::Status PostRecv(int peer, uint64_t data_tag, void* data, size_t bytes,
                        uint64_t token) override {
    return PostData(peer, data_tag, data, bytes, token, /*receive=*/true);
  }

  absl::Status Poll(std::vector<Event>* events) override {
    // Control messages, in arrival order (MPI does not let messages overtake on one tag).
    for (;;) {
      int flag = 0;
      MPI_Message message = MPI_MESSAGE_NULL;
      MPI_Status status;
      DDP_MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, 0, control_comm_, &flag, &message, &status),
                    "MPI_Improbe");
      if (!flag) break;
      int count = 0;
      DDP_MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
      Event e;
      e.kind = Event::Kind::kControl;
      e.peer = status.MPI_SOURCE;
      e.payload.resize(static_cast<size_t>(count));
      DDP_MPI_CHECK(MPI_Mrecv(e.payload.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE),
                    "MPI_Mrecv");
      events->push_back(std::move(e));
    }
    absl::Status s = data_.Reap([events](const Transfer& t, int error) {
      Event e;
      e.token = t.token;
      if (error == -1) {
        e.status = absl::CancelledError("cancelled");
      } else if (error != MPI_SUCCESS) {
        e.status = absl::UnavailableError(MpiText(error));
      }
      events->push_back(std::move(e));
    });
    if (!s.ok()) return s;
    // Finished control sends free their buffers; a failed one is reported with its peer.
    return control_.Reap([events](const ControlSend& c, int error) {
      if (error == MPI_SUCCESS || error == -1) return;
      Event e;
      e.token = 0;
      e.peer = c.peer;
      e.status = absl::UnavailableError(MpiText(error));
      events->push_back(std::move(e));
    });
  }

  void Cancel() override {
    // Receives are cancelled; they (and the sends) still complete through MPI_Testsome, which
    // tells the transport when MPI has let go of each buffer.
    data_.ForEach([](MPI_Request& r, const Transfer& t) {
      if (r != MPI_REQUEST_NULL && t.receive) MPI_Cancel(&r);
    });
  }

  void CancelPeer(int peer) override {
    // Receives from it are cancelled (MPI cannot take back a started send).
    data_.ForEach([peer](MPI_Request& r, const Transfer& t) {
      if (r != MPI_REQUEST_NULL && t.receive && t.peer == peer) MPI_Cancel(&r);
    });
  }

  void Abandon() override {
    // MPI has no way to take back a started send: the requests are freed and MPI finishes them
    // on its own (a receive that was matched may still be written; see docs/transports.md).
    data_.ForEach([](MPI_Request& r, const Transfer&) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    });
    data_.Clear();
  }

  bool Busy() const override { return !data_.empty() || !control_.empty(); }

 private:
  // One data transfer with `peer` on the data communicator: MPI_Irecv or MPI_Isend.
  absl::Status PostData(int peer, uint64_t data_tag, void* data, size_t bytes, uint64_t token,
                        bool receive) {
    MPI_Request request = MPI_REQUEST_NULL;
    const int count = static_cast<int>(bytes);
    const int rc =
        receive ? MPI_Irecv(data, count, MPI_BYTE, peer, Tag(data_tag), data_comm_, &request)
                : MPI_Isend(data, count, MPI_BYTE, peer, Tag(data_tag), data_comm_, &request);
    DDP_MPI_CHECK(rc, receive ? "MPI_Irecv" : "MPI_Isend");
    data_.Add(request, Transfer{token, receive, peer});
    return absl::OkStatus();
  }

  struct ControlSend {
    int peer = -1;
    std::unique_ptr<std::string> buffer;  // what MPI sends from
  };
  struct Transfer {
    uint64_t token = 0;
    bool receive = false;
    int peer = -1;
  };

  int Tag(uint64_t data_tag) const { return static_cast<int>(data_tag & tag_mask_); }

  MPI_Comm control_comm_;
  MPI_Comm data_comm_;
  uint64_t tag_mask_;
  std::string version_;
  InFlight<ControlSend> control_;
  InFlight<Transfer> data_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Wire>> CreateWire(int allreduce_slots) {
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
  absl::Status comms = CreateAllreduceComms(allreduce_slots);
  if (!comms.ok()) return comms;
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
  return std::unique_ptr<Wire>(new MpiWire(control, data, mask - 1, version));
}

}  // namespace ddp::mpi::impl
