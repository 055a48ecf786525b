// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp_ofi.so: the libfabric wire. One FI_EP_RDM endpoint with tagged messages, one
// completion queue, an address vector filled from the bootstrap.
//
// Tags (60 bits, so that providers reserving the top bits still fit):
//   control: bit 59 clear, the sender's rank in bits 0..23 (receives ignore those bits, and the
//            completion's tag tells who sent it, with no need for FI_SOURCE);
//   data:    bit 59 set, the sender's rank in bits 35..58, the data id (WireTransport's per-pair
//            counter, wrapping at 2^35) in bits 0..34: unique among a pair's messages in flight.
//
// Memory registration follows the provider's mr_mode: with FI_MR_LOCAL every buffer handed to
// the provider carries a descriptor. Our own buffers (control pools) are registered once; the
// caller's buffers through a registration cache that keeps long-lived regions (the collectives'
// scratch memory, which libddp declares with Remember/Forget) registered for good, and shares a
// registration among the operations in flight on the same pages otherwise. Per-operation
// registrations of other memory are closed when the operation completes: an address may be
// unmapped and reused by then, and a stale registration would send the wrong pages.
// FI_MR_ENDPOINT binds each registration to the endpoint; without FI_MR_PROV_KEY we choose
// unique keys; FI_MR_VIRT_ADDR and FI_MR_ALLOCATED need nothing more for two-sided messages.
//
// -FI_EAGAIN from any post puts the operation on a retry queue, retried in order after the next
// completion-queue read; it is never an error. Sends queue per destination and receives on
// their own, so that a peer that stopped taking data (dead, stopped, cut off) holds up nothing
// but the sends to it: the heartbeats to every other peer still go. Completion errors are read with
// fi_cq_readerr and reported with the provider's own text (fi_cq_strerror).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <list>
#include <map>
#include <memory>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ofi/ofi_wire.h"

namespace ddp::ofi {

namespace wire = transport::wire;
namespace {

constexpr uint64_t kDataBit = uint64_t{1} << 59;
constexpr uint64_t kRankMask = (uint64_t{1} << 24) - 1;
constexpr int kDataRankShift = 35;
constexpr uint64_t kDataIdMask = (uint64_t{1} << kDataRankShift) - 1;
constexpr size_t kControlBytes = 16 * 1024;

absl::Status FiError(int rc, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, " failed: ", fi_strerror(-rc), " (", rc, ")"));
}

#define DDP_FI_CHECK(expr, what)                           \
  do {                                                     \
    const int ddp_fi_rc = static_cast<int>(expr);          \
    if (ddp_fi_rc != 0) return FiError(ddp_fi_rc, (what)); \
  } while (0)

// libfabric's shm provider names an endpoint's region in /dev/shm after the process id
// ("PID:0:0") unless told otherwise. A killed rank leaves its region behind, and pids come round
// again (pid_max is often 32768): a later process given that pid failed fi_enable with EBUSY.
// Our endpoints get names of their own that never collide, "ddp-ofi-PID-RANDOM", and regions so
// named whose process is gone are removed before a new one is made.
constexpr char kShmRegionPrefix[] = "ddp-ofi-";

std::string ShmRegionName() {
  uint64_t salt = 0;
  if (FILE* f = std::fopen("/dev/urandom", "rb"); f != nullptr) {
    if (std::fread(&salt, sizeof(salt), 1, f) != 1) salt = 0;
    std::fclose(f);
  }
  if (salt == 0)
    salt = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return absl::StrCat(kShmRegionPrefix, ::getpid(), "-", absl::Hex(salt, absl::kZeroPad16));
}

void SweepDeadShmRegions() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return;
  const size_t prefix = std::strlen(kShmRegionPrefix);
  while (const dirent* entry = ::readdir(dir)) {
    const char* name = entry->d_name;
    if (std::strncmp(name, kShmRegionPrefix, prefix) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name + prefix, &end, 10);
    if (pid <= 0 || end == nullptr || *end != '-') continue;
    // Only a process that no longer exists: a live one (ours, or another that got the pid)
    // keeps its region.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::shm_unlink(name);
  }
  ::closedir(dir);
}

std::string MrModeText(int mode) {
  std::vector<std::string> bits;
  if (mode & FI_MR_LOCAL) bits.push_back("FI_MR_LOCAL");
  if (mode & FI_MR_VIRT_ADDR) bits.push_back("FI_MR_VIRT_ADDR");
  if (mode & FI_MR_ALLOCATED) bits.push_back("FI_MR_ALLOCATED");
  if (mode & FI_MR_PROV_KEY) bits.push_back("FI_MR_PROV_KEY");
  if (mode & FI_MR_ENDPOINT) bits.push_back("FI_MR_ENDPOINT");
  if (mode & FI_MR_RAW) bits.push_back("FI_MR_RAW");
  if (mode & FI_MR_HMEM) bits.push_back("FI_MR_HMEM");
  return bits.empty() ? "none" : absl::StrJoin(bits, "|");
}

#define DDP_RETURN_IF(expr)          \
  do {                               \
    absl::Status ddp_s_ = (expr);    \
    if (!ddp_s_.ok()) return ddp_s_; \
  } while (0)

struct Registration;

// One operation handed to the provider; the context libfabric gives back.
struct Op {
  fi_context2 context;  // first: libfabric's op_context points here
  enum class Kind { kControlSend, kControlRecv, kDataSend, kDataRecv } kind;
  uint64_t token = 0;
  int peer = -1;
  uint64_t tag = 0;
  char* buffer = nullptr;  // control: a pool buffer; data: the caller's
  size_t bytes = 0;
  void* desc = nullptr;
  struct Registration* registration = nullptr;
  bool posted = false;
};

struct Registration {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  fid_mr* mr = nullptr;
  void* desc = nullptr;
  int users = 0;            // operations in flight using it
  bool remembered = false;  // a long-lived region: kept until forgotten
};

class OfiWireImpl final : public OfiWire {
 public:
  ~OfiWireImpl() override { Close(); }

  absl::Status Open(const OfiConfig& config) {
    config_ = config;
    // Tests: treat every Nth post as refused with -FI_EAGAIN, to run the retry queue on
    // providers that rarely push back.
    if (const char* e = std::getenv("DDP_OFI_TEST_EAGAIN_EVERY"); e != nullptr) {
      eagain_every_ = std::strtoull(e, nullptr, 10);
    }
    DDP_RETURN_IF(FindProvider(config));
    DDP_RETURN_IF(OpenEndpoint(config));
    return PostControlReceives(config);
  }

  std::string address() const override {
    return absl::BytesToHexString(absl::string_view(address_.data(), address_.size()));
  }

  absl::Status Connect(const std::vector<std::string>& addresses) override {
    if (addresses.size() != static_cast<size_t>(config_.size)) {
      return absl::InvalidArgumentError("libfabric: one address per rank expected");
    }
    std::string all;
    size_t each = 0;
    for (size_t r = 0; r < addresses.size(); ++r) {
      const std::string& hex = addresses[r];
      const bool is_hex =
          !hex.empty() && hex.size() % 2 == 0 && std::all_of(hex.begin(), hex.end(), [](char c) {
            return std::isxdigit(static_cast<unsigned char>(c)) != 0;
          });
      const std::string raw = is_hex ? absl::HexStringToBytes(hex) : std::string();
      if (raw.empty() || (each != 0 && raw.size() != each)) {
        return absl::InvalidArgumentError(
            absl::StrCat("libfabric: rank ", r, " published a bad endpoint address"));
      }
      each = raw.size();
      all += raw;
    }
    peers_.assign(addresses.size(), FI_ADDR_NOTAVAIL);
    const int n = fi_av_insert(av_, all.data(), addresses.size(), peers_.data(), 0, nullptr);
    if (n != static_cast<int>(addresses.size())) {
      return absl::UnavailableError(
          absl::StrCat("fi_av_insert took ", n, " of ", addresses.size(),
                       " addresses: ", n < 0 ? fi_strerror(-n) : "some were refused"));
    }
    return absl::OkStatus();
  }

  std::string mr_mode() const override {
    return MrModeText(static_cast<int>(mr_mode_ & (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                                   FI_MR_PROV_KEY | FI_MR_ENDPOINT)));
  }

  std::string Name() const override {
    return absl::StrCat("ofi (", provider_, ", ", domain_name_, register_ ? ", registered" : "",
                        ")");
  }
  size_t max_data_bytes() const override { return max_data_; }
  size_t max_control_bytes() const override { return control_bytes_; }

  absl::Status PostControl(int peer, std::string payload) override {
    if (payload.size() > control_bytes_) return absl::InternalError("control message too large");
    // Always fi_tsend with a context of ours (never fi_tinject, whose failures come back without
    // one): a failed control message then names its peer.
    if (ep_ == nullptr) return absl::UnavailableError("the endpoint was closed");
    const uint64_t tag = static_cast<uint64_t>(config_.rank) & kRankMask;
    Op* op = NewOp();
    op->kind = Op::Kind::kControlSend;
    op->peer = peer;
    op->tag = tag;
    auto buffer = TakeControlBuffer(&op->desc);
    if (!buffer.ok()) {
      free_ops_.push_back(op);
      return buffer.status();
    }
    op->buffer = *buffer;
    op->bytes = payload.size();
    std::memcpy(op->buffer, payload.data(), payload.size());
    return PostOrQueue(op);
  }

  absl::Status PostSend(int peer, uint64_t data_tag, const void* data, size_t bytes,
                        uint64_t token) override {
    if (ep_ == nullptr) return absl::UnavailableError("the endpoint was closed");
    Op* op = NewOp();
    op->kind = Op::Kind::kDataSend;
    op->peer = peer;
    op->token = token;
    op->tag = kDataBit | ((static_cast<uint64_t>(config_.rank) & kRankMask) << kDataRankShift) |
              (data_tag & kDataIdMask);
    op->buffer = static_cast<char*>(const_cast<void*>(data));
    op->bytes = bytes;
    DDP_RETURN_IF(Attach(op));
    return PostOrQueue(op);
  }

  absl::Status PostRecv(int peer, uint64_t data_tag, void* data, size_t bytes,
                        uint64_t token) override {
    if (ep_ == nullptr) return absl::UnavailableError("the endpoint was closed");
    Op* op = NewOp();
    op->kind = Op::Kind::kDataRecv;
    op->peer = peer;
    op->token = token;
    op->tag = kDataBit | ((static_cast<uint64_t>(peer) & kRankMask) << kDataRankShift) |
              (data_tag & kDataIdMask);
    op->buffer = static_cast<char*>(data);
    op->bytes = bytes;
    DDP_RETURN_IF(Attach(op));
    return PostOrQueue(op);
  }

  absl::Status Poll(std::vector<wire::Event>* events) override {
    for (uint64_t token : dropped_) {
      events->push_back(
          {wire::Event::Kind::kDone, token, absl::CancelledError("cancelled"), -1, {}});
    }
    dropped_.clear();
    if (ep_ == nullptr) return absl::OkStatus();
    fi_cq_tagged_entry entries[64];
    for (;;) {
      const ssize_t n = fi_cq_read(cq_, entries, 64);
      if (n == -FI_EAGAIN) break;
      if (n == -FI_EAVAIL) {
        DDP_RETURN_IF(ReadError(events));
        continue;
      }
      if (n < 0) return FiError(static_cast<int>(n), "fi_cq_read");
      for (ssize_t i = 0; i < n; ++i) {
        DDP_RETURN_IF(Completed(static_cast<Op*>(entries[i].op_context), entries[i], events));
      }
      if (n < 64) break;
    }
    // Retry what the provider could not take before, in order within each queue; a queue that
    // empties goes, so that `retry_` is empty whenever nothing waits.
    for (auto it = retry_.begin(); it != retry_.end();) {
      std::deque<Op*>& ops = it->second;
      while (!ops.empty()) {
        Op* op = ops.front();
        const ssize_t rc = Post(op);
        if (rc == -FI_EAGAIN) break;
        ops.pop_front();
        if (rc != 0) return FiError(static_cast<int>(rc), PostName(op));
      }
      it = ops.empty() ? retry_.erase(it) : std::next(it);
    }
    return absl::OkStatus();
  }

  bool eager_data() const override { return false; }

  void Abandon() override {
    // Closing the endpoint is the one way to make the provider let go of posted buffers.
    if (ep_ != nullptr) {
      fi_close(&ep_->fid);
      ep_ = nullptr;
    }
    retry_.clear();
  }

  void Cancel() override {
    if (ep_ == nullptr) return;
    for (auto& op : ops_) {
      if (op->posted && op->kind == Op::Kind::kDataRecv) fi_cancel(&ep_->fid, &op->context);
    }
    // Data not yet handed to the provider is dropped; control messages (aborts) still go.
    for (auto it = retry_.begin(); it != retry_.end();) {
      std::deque<Op*> keep;
      for (Op* op : it->second) {
        if (op->kind == Op::Kind::kControlSend || op->kind == Op::Kind::kControlRecv) {
          keep.push_back(op);
        } else {
          ReleaseOp(op);
        }
      }
      it->second.swap(keep);
      it = it->second.empty() ? retry_.erase(it) : std::next(it);
    }
  }

  void CancelPeer(int peer) override {
    if (ep_ == nullptr) return;
    for (auto& op : ops_) {
      if (op->posted && op->peer == peer && op->kind == Op::Kind::kDataRecv && !Queued(op.get())) {
        fi_cancel(&ep_->fid, &op->context);
      }
    }
    // Its data not yet handed to the provider goes, reported as cancelled at the next poll.
    for (auto it = retry_.begin(); it != retry_.end();) {
      std::deque<Op*> keep;
      for (Op* op : it->second) {
        const bool data = op->kind == Op::Kind::kDataSend || op->kind == Op::Kind::kDataRecv;
        if (data && op->peer == peer) {
          dropped_.push_back(op->token);
          ReleaseOp(op);
        } else {
          keep.push_back(op);
        }
      }
      it->second.swap(keep);
      it = it->second.empty() ? retry_.erase(it) : std::next(it);
    }
  }

  bool Busy() const override {
    return !dropped_.empty() || !retry_.empty() ||
           std::any_of(ops_.begin(), ops_.end(), [](const auto& op) {
             return op->posted && op->kind != Op::Kind::kControlRecv;
           });
  }

 private:
  // What Open asks of a provider: reliable tagged messages (FI_EP_RDM), the mr_mode bits this
  // code honours, and the provider, domain and (socket providers) source address configured.
  static fi_info* MakeHints(const OfiConfig& config) {
    fi_info* hints = fi_allocinfo();
    if (hints == nullptr) return nullptr;
    hints->caps = FI_TAGGED | FI_SEND | FI_RECV;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    // Every mr_mode bit this code honours: the provider keeps those it needs.
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;  // WireTransport serialises every call
    if (!config.provider.empty()) hints->fabric_attr->prov_name = strdup(config.provider.c_str());
    if (!config.domain.empty()) hints->domain_attr->name = strdup(config.domain.c_str());
    const bool socket_provider = config.provider.rfind("tcp", 0) == 0 ||
                                 config.provider.rfind("sockets", 0) == 0 ||
                                 config.provider.rfind("udp", 0) == 0;
    if (socket_provider && !config.source_ip.empty() && config.domain.empty()) {
      auto* sin = static_cast<sockaddr_in*>(calloc(1, sizeof(sockaddr_in)));
      sin->sin_family = AF_INET;
      if (inet_pton(AF_INET, config.source_ip.c_str(), &sin->sin_addr) == 1) {
        hints->addr_format = FI_SOCKADDR_IN;
        hints->src_addr = sin;
        hints->src_addrlen = sizeof(sockaddr_in);
      } else {
        free(sin);
      }
    }
    return hints;
  }

  // Open's steps: the provider (info_) and what it allows; the fabric, domain, completion
  // queue, address vector and endpoint, named; the control receives posted.
  absl::Status FindProvider(const OfiConfig& config) {
    fi_info* hints = MakeHints(config);
    if (hints == nullptr) return absl::ResourceExhaustedError("fi_allocinfo");
    fi_info* info = nullptr;
    const int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &info);
    fi_freeinfo(hints);
    if (rc != 0 || info == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "no libfabric provider offers reliable tagged messages (FI_EP_RDM, FI_TAGGED)",
          config.provider.empty() ? "" : absl::StrCat(" as DDP_OFI_PROVIDER=", config.provider),
          ": ", fi_strerror(-rc), ". `fi_info -t FI_EP_RDM` lists what this host has"));
    }
    info_ = info;
    mr_mode_ = info->domain_attr->mr_mode;
    register_ = (mr_mode_ & FI_MR_LOCAL) != 0 || config.force_mr_local;
    provider_ = info->fabric_attr->prov_name != nullptr ? info->fabric_attr->prov_name : "?";
    domain_name_ = info->domain_attr->name != nullptr ? info->domain_attr->name : "?";
    size_t max = info->ep_attr->max_msg_size;
    if (max == 0) max = size_t{1} << 30;
    max_data_ = std::min<size_t>(max, size_t{1} << 30);
    if (config.max_message_bytes > 0) max_data_ = std::min(max_data_, config.max_message_bytes);
    control_bytes_ = std::min(kControlBytes, max_data_);
    return absl::OkStatus();
  }

  absl::Status OpenEndpoint(const OfiConfig& config) {
    DDP_FI_CHECK(fi_fabric(info_->fabric_attr, &fabric_, nullptr), "fi_fabric");
    DDP_FI_CHECK(fi_domain(fabric_, info_, &domain_, nullptr), "fi_domain");
    fi_cq_attr cq_attr = {};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = 4096;
    DDP_FI_CHECK(fi_cq_open(domain_, &cq_attr, &cq_, nullptr), "fi_cq_open");
    fi_av_attr av_attr = {};
    av_attr.type = FI_AV_TABLE;
    av_attr.count = static_cast<size_t>(config.size);
    DDP_FI_CHECK(fi_av_open(domain_, &av_attr, &av_, nullptr), "fi_av_open");
    DDP_FI_CHECK(fi_endpoint(domain_, info_, &ep_, nullptr), "fi_endpoint");
    DDP_FI_CHECK(fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    DDP_FI_CHECK(fi_ep_bind(ep_, &av_->fid, 0), "fi_ep_bind(av)");
    if (provider_ == "shm") {
      SweepDeadShmRegions();
      const std::string region = ShmRegionName();
      DDP_FI_CHECK(fi_setname(&ep_->fid, const_cast<char*>(region.c_str()), region.size() + 1),
                   "fi_setname");
    }
    DDP_FI_CHECK(fi_enable(ep_), "fi_enable");
    char name[256];
    size_t length = sizeof(name);
    DDP_FI_CHECK(fi_getname(&ep_->fid, name, &length), "fi_getname");
    address_.assign(name, length);
    return absl::OkStatus();
  }

  // Control receives: a pool posted for any sender, reposted as each completes.
  absl::Status PostControlReceives(const OfiConfig& config) {
    const size_t posted = std::clamp<size_t>(static_cast<size_t>(config.size) * 16, 64, 1024);
    control_pool_.resize(posted * control_bytes_);
    Registration* pool_reg = nullptr;
    if (register_) {
      auto r = RegisterRange(control_pool_.data(), control_pool_.size(), /*remembered=*/true);
      if (!r.ok()) return r.status();
      pool_reg = *r;
    }
    control_recvs_.resize(posted);
    for (size_t i = 0; i < posted; ++i) {
      Op& op = control_recvs_[i];
      op.kind = Op::Kind::kControlRecv;
      op.buffer = control_pool_.data() + i * control_bytes_;
      op.bytes = control_bytes_;
      op.desc = pool_reg != nullptr ? pool_reg->desc : nullptr;
      DDP_RETURN_IF(PostOrQueue(&op));
    }
    return absl::OkStatus();
  }

  fi_addr_t Addr(int peer) const { return peers_[static_cast<size_t>(peer)]; }

  Op* NewOp() {
    if (free_ops_.empty()) {
      ops_.push_back(std::make_unique<Op>());
      return ops_.back().get();
    }
    Op* op = free_ops_.back();
    free_ops_.pop_back();
    *op = Op{};
    return op;
  }

  void ReleaseOp(Op* op) {
    op->posted = false;
    if (op->registration != nullptr) Unuse(op->registration);
    op->registration = nullptr;
    if (op->kind == Op::Kind::kControlSend) control_free_.push_back({op->buffer, op->desc});
    free_ops_.push_back(op);
  }

  absl::StatusOr<char*> TakeControlBuffer(void** desc) {
    if (control_free_.empty()) {
      // A slab of send buffers, registered once and kept.
      constexpr size_t kSlab = 32;
      send_slabs_.emplace_back(kSlab * control_bytes_);
      char* base = send_slabs_.back().data();
      Registration* reg = nullptr;
      if (register_) {
        auto r = RegisterRange(base, kSlab * control_bytes_, /*remembered=*/true);
        if (!r.ok()) {
          send_slabs_.pop_back();
          return r.status();
        }
        reg = *r;
      }
      for (size_t i = 0; i < kSlab; ++i) {
        control_free_.push_back({base + i * control_bytes_, reg != nullptr ? reg->desc : nullptr});
      }
    }
    const auto [buffer, buffer_desc] = control_free_.back();
    control_free_.pop_back();
    *desc = buffer_desc;
    return buffer;
  }

  // Whether `op` waits in a retry queue (not yet with the provider).
  bool Queued(const Op* op) const {
    for (const auto& [queue, ops] : retry_) {
      if (std::find(ops.begin(), ops.end(), op) != ops.end()) return true;
    }
    return false;
  }

  static bool IsSend(const Op* op) {
    return op->kind == Op::Kind::kControlSend || op->kind == Op::Kind::kDataSend;
  }
  static const char* PostName(const Op* op) { return IsSend(op) ? "fi_tsend" : "fi_trecv"; }

  ssize_t Post(Op* op) {
    if (eagain_every_ > 0 && ++posts_ % eagain_every_ == 0) return -FI_EAGAIN;
    switch (op->kind) {
      case Op::Kind::kControlSend:
      case Op::Kind::kDataSend:
        return fi_tsend(ep_, op->buffer, op->bytes, op->desc, Addr(op->peer), op->tag,
                        &op->context);
      case Op::Kind::kControlRecv:
        return fi_trecv(ep_, op->buffer, op->bytes, op->desc, FI_ADDR_UNSPEC, 0, kRankMask,
                        &op->context);
      case Op::Kind::kDataRecv:
        return fi_trecv(ep_, op->buffer, op->bytes, op->desc, FI_ADDR_UNSPEC, op->tag, 0,
                        &op->context);
    }
    return -FI_EINVAL;
  }

  // Posts now, or queues behind earlier operations of its queue (sends to the same peer, or
  // receives) that the provider refused with -FI_EAGAIN.
  absl::Status PostOrQueue(Op* op) {
    op->posted = true;
    const int queue = IsSend(op) ? op->peer : kReceiveQueue;
    if (retry_.count(queue) == 0) {
      const ssize_t rc = Post(op);
      if (rc == 0) return absl::OkStatus();
      if (rc != -FI_EAGAIN) return FiError(static_cast<int>(rc), PostName(op));
    }
    retry_[queue].push_back(op);
    return absl::OkStatus();
  }

  absl::Status Completed(Op* op, const fi_cq_tagged_entry& entry,
                         std::vector<wire::Event>* events) {
    switch (op->kind) {
      case Op::Kind::kControlRecv: {
        wire::Event e;
        e.kind = wire::Event::Kind::kControl;
        e.peer = static_cast<int>(entry.tag & kRankMask);
        e.payload.assign(op->buffer, entry.len);
        events->push_back(std::move(e));
        return PostOrQueue(op);  // the same buffer, posted again
      }
      case Op::Kind::kControlSend:
        ReleaseOp(op);
        return absl::OkStatus();
      case Op::Kind::kDataSend:
      case Op::Kind::kDataRecv: {
        wire::Event e;
        e.token = op->token;
        if (op->kind == Op::Kind::kDataRecv && entry.len != op->bytes) {
          e.status =
              absl::DataLossError(absl::StrCat("received ", entry.len, " bytes of ", op->bytes));
        }
        events->push_back(std::move(e));
        ReleaseOp(op);
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadError(std::vector<wire::Event>* events) {
    fi_cq_err_entry err = {};
    const ssize_t rc = fi_cq_readerr(cq_, &err, 0);
    if (rc == -FI_EAGAIN) return absl::OkStatus();
    if (rc < 0) return FiError(static_cast<int>(rc), "fi_cq_readerr");
    auto* op = static_cast<Op*>(err.op_context);
    char text[256] = {};
    const char* provider_text =
        fi_cq_strerror(cq_, err.prov_errno, err.err_data, text, sizeof(text));
    const std::string why =
        absl::StrCat(fi_strerror(err.err), " (", provider_, ": ",
                     provider_text != nullptr ? provider_text : "no detail", ")");
    if (op == nullptr) return absl::UnavailableError(why);
    if (err.err == FI_ECANCELED && op->kind == Op::Kind::kControlRecv) return absl::OkStatus();
    if (op->kind == Op::Kind::kControlRecv) {
      return absl::UnavailableError(absl::StrCat("receiving a control message: ", why));
    }
    wire::Event e;
    e.token = op->token;  // 0 for control messages
    e.peer = op->peer;
    e.status = absl::UnavailableError(why);
    events->push_back(std::move(e));
    ReleaseOp(op);
    return absl::OkStatus();
  }

  // ---- registration cache -------------------------------------------------------------------

  absl::Status Attach(Op* op) {
    if (!register_ || op->bytes == 0) return absl::OkStatus();
    const auto begin = reinterpret_cast<uintptr_t>(op->buffer);
    const uintptr_t end = begin + op->bytes;
    // A registration that covers the whole buffer, long-lived or in use by another operation.
    auto it = registrations_.upper_bound(begin);
    if (it != registrations_.begin()) {
      --it;
      Registration* r = it->second.get();
      if (r->begin <= begin && end <= r->end) {
        ++r->users;
        op->registration = r;
        op->desc = r->desc;
        return absl::OkStatus();
      }
    }
    auto r = RegisterRange(op->buffer, op->bytes, /*remembered=*/false);
    if (!r.ok()) return r.status();
    ++(*r)->users;
    op->registration = *r;
    op->desc = (*r)->desc;
    return absl::OkStatus();
  }

  void Unuse(Registration* r) {
    if (--r->users > 0 || r->remembered) return;
    Drop(r);
  }

  void Drop(Registration* r) {
    fi_close(&r->mr->fid);
    auto it = registrations_.find(r->begin);
    if (it != registrations_.end() && it->second.get() == r) {
      registrations_.erase(it);
    } else {
      private_.remove_if([r](const auto& p) { return p.get() == r; });
    }
  }

  absl::StatusOr<Registration*> RegisterRange(const void* data, size_t bytes, bool remembered) {
    static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes + page - 1) & ~(page - 1);
    if (registrations_.count(begin) != 0) {
      // Another registration starts on the same page (e.g. a smaller one): replace it if unused.
      Registration* old = registrations_[begin].get();
      if (old->users > 0 || old->remembered) {
        // Keep it; register this range privately under a unique key instead.
        return RegisterPrivate(begin, end, remembered);
      }
      Drop(old);
    }
    auto r = RegisterPrivate(begin, end, remembered);
    if (!r.ok()) return r.status();
    return *r;
  }

  absl::StatusOr<Registration*> RegisterPrivate(uintptr_t begin, uintptr_t end, bool remembered) {
    auto reg = std::make_unique<Registration>();
    reg->begin = begin;
    reg->end = end;
    reg->remembered = remembered;
    const uint64_t key = (mr_mode_ & FI_MR_PROV_KEY) ? 0 : next_key_++;
    const int rc = fi_mr_reg(domain_, reinterpret_cast<void*>(begin), end - begin,
                             FI_SEND | FI_RECV, 0, key, 0, &reg->mr, nullptr);
    if (rc != 0) return FiError(rc, absl::StrCat("fi_mr_reg of ", end - begin, " bytes"));
    if (mr_mode_ & FI_MR_ENDPOINT) {
      DDP_FI_CHECK(fi_mr_bind(reg->mr, &ep_->fid, 0), "fi_mr_bind");
      DDP_FI_CHECK(fi_mr_enable(reg->mr), "fi_mr_enable");
    }
    reg->desc = fi_mr_desc(reg->mr);
    Registration* raw = reg.get();
    if (registrations_.count(begin) == 0) {
      registrations_[begin] = std::move(reg);
    } else {
      private_.push_back(std::move(reg));
    }
    return raw;
  }

 public:
  void Remember(const void* data, size_t bytes) override {
    if (!register_ || bytes == 0) return;
    auto r = RegisterRange(data, bytes, /*remembered=*/true);
    if (r.ok()) remembered_[data] = *r;
  }
  void Forget(const void* data) override {
    auto it = remembered_.find(data);
    if (it == remembered_.end()) return;
    Registration* r = it->second;
    remembered_.erase(it);
    r->remembered = false;
    if (r->users == 0) Drop(r);
  }

 private:
  void Close() {
    if (ep_ != nullptr) {
      Cancel();
      fi_close(&ep_->fid);
      ep_ = nullptr;
    }
    for (auto& [begin, r] : registrations_) fi_close(&r->mr->fid);
    registrations_.clear();
    for (auto& r : private_) fi_close(&r->mr->fid);
    private_.clear();
    if (av_ != nullptr) fi_close(&av_->fid);
    if (cq_ != nullptr) fi_close(&cq_->fid);
    if (domain_ != nullptr) fi_close(&domain_->fid);
    if (fabric_ != nullptr) fi_close(&fabric_->fid);
    av_ = nullptr;
    cq_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    if (info_ != nullptr) fi_freeinfo(info_);
    info_ = nullptr;
  }

  OfiConfig config_;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  uint64_t mr_mode_ = 0;
  bool register_ = false;
  std::string provider_;
  std::string domain_name_;
  size_t max_data_ = 0;
  size_t control_bytes_ = kControlBytes;
  std::string address_;
  std::vector<fi_addr_t> peers_;
  std::vector<uint64_t> dropped_;  // tokens of operations dropped by CancelPeer, to report
  std::vector<char> control_pool_;
  std::vector<Op> control_recvs_;
  std::list<std::vector<char>> send_slabs_;
  std::vector<std::pair<char*, void*>> control_free_;  // send buffers and their descriptors
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<Op*> free_ops_;
  // Operations refused with -FI_EAGAIN: per destination rank for sends, kReceiveQueue for
  // receives (from any source). Only queues with something waiting are present.
  static constexpr int kReceiveQueue = -1;
  std::map<int, std::deque<Op*>> retry_;
  std::map<uintptr_t, std::unique_ptr<Registration>> registrations_;
  std::list<std::unique_ptr<Registration>> private_;
  std::map<const void*, Registration*> remembered_;
  uint64_t next_key_ = 1;
  uint64_t eagain_every_ = 0;
  uint64_t posts_ = 0;
};

absl::StatusOr<std::unique_ptr<OfiWire>> Create(const OfiConfig& config) {
  auto wire = std::make_unique<OfiWireImpl>();
  absl::Status s = wire->Open(config);
  if (!s.ok()) return s;
  return std::unique_ptr<OfiWire>(std::move(wire));
}

std::string Version() {
  const uint32_t v = fi_version();
  return absl::StrCat("libfabric ", FI_MAJOR(v), ".", FI_MINOR(v));
}

constexpr OfiPluginApi kApi = {kOfiPluginAbi, Create, Version};

}  // namespace
}  // namespace ddp::ofi

extern "C" __attribute__((visibility("default"))) const void* ddp_ofi_plugin() {
  return &ddp::ofi::kApi;
}
