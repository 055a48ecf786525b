// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// EngineImpl: construction, submission and its checks (callers' threads), join, process sets.
#include <algorithm>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "engine/engine_impl.h"

namespace ddp::engine {
namespace {

absl::Status CheckShape(absl::FunctionRef<std::string()> what, const std::vector<int64_t>& shape,
                        DataType type, bool needs_first_dim) {
  if (needs_first_dim && shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": needs at least one dimension"));
  }
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what(), ": negative dimension in shape ", ShapeString(shape)));
    }
    if (d > 0 && n > (uint64_t{1} << 60) / static_cast<uint64_t>(d) / DataTypeSize(type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what(), ": shape ", ShapeString(shape), " overflows"));
    }
    n *= static_cast<uint64_t>(d);
  }
  return absl::OkStatus();
}

// What a negotiation message can carry (see message.cc); beyond it the description could not be
// sent, so the submission fails here, alone.
absl::Status CheckLimits(const LocalOp& op, absl::FunctionRef<std::string()> what) {
  if (op.name.size() > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": the name is longer than 1 MiB"));
  }
  if (op.meta.shapes.size() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": more than 65536 grouped tensors"));
  }
  for (const auto& shape : op.meta.shapes) {
    if (shape.size() > 64) {
      return absl::InvalidArgumentError(absl::StrCat(what(), ": more than 64 dimensions"));
    }
  }
  return absl::OkStatus();
}

// "0 f32, 1 f64, ...": what a message about an unknown code lists.
template <typename Enum>
std::string Codes(int count, absl::string_view (*name)(Enum)) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", i, " ", name(static_cast<Enum>(i)));
  }
  return out;
}

// The engine is where a dtype or op code is checked: the bindings pass on what their callers gave
// (the Python layers convert their enums and tensors' dtypes to codes, nothing more), so the
// message names the code and the ones libddp has. Scale factors apply to every dtype: integers are
// scaled in f64 and truncated (Horovod's rule, reduce::Scale).
// What an allreduce with `compression` takes (codec.h's codecs are for floating-point values,
// summed).
absl::Status CheckCompression(absl::FunctionRef<std::string()> what, DataType type, ReduceOp op,
                              Compression compression) {
  if (compression == Codec::kNone) return absl::OkStatus();
  if (!IsValid(compression.codec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": unknown compression code ", static_cast<int>(compression.codec),
                     " (libddp's: ", Codes(kNumCodecs, &CodecName), ")"));
  }
  const std::string codec(CompressionName(compression));
  if ((compression.codec == Codec::kPowerSgd) != (compression.rank != 0) || compression.rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": ", codec, ": ",
                                                   compression.codec == Codec::kPowerSgd
                                                       ? "PowerSGD needs a rank of 1 or more"
                                                       : "a rank is PowerSGD's alone"));
  }
  if (!IsFloating(type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what(), ": ", codec, " compression is for floating-point tensors; this one is ",
        DataTypeName(type), " (integers are reduced exactly: submit it without compression)"));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kAverage) {
    return absl::InvalidArgumentError(absl::StrCat(
        what(), ": ", codec, " compression sums (sum or average), not ", ReduceOpName(op)));
  }
  return absl::OkStatus();
}

// PowerSGD approximates matrices: a tensor of two or more dimensions (its first by the rest),
// whose rank allows the one asked for.
absl::Status CheckLowRank(absl::FunctionRef<std::string()> what, const std::vector<int64_t>& shape,
                          const Compression& compression) {
  if (compression.codec != Codec::kPowerSgd) return absl::OkStatus();
  const std::string codec = CompressionName(compression);
  if (shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        what(), ": ", codec, " approximates matrices; this tensor has shape ", ShapeString(shape),
        " (submit vectors and scalars without compression: they are small)"));
  }
  const int64_t rows = shape[0];
  const int64_t cols = static_cast<int64_t>(ElementCount(shape)) / std::max<int64_t>(rows, 1);
  if (compression.rank > std::min(rows, cols)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": ", codec, " is more than the matrix allows: shape ",
                     ShapeString(shape), " is ", rows, " x ", cols, ", whose rank is at most ",
                     std::min(rows, cols), " (a lower rank, or no compression for it)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCommon(absl::FunctionRef<std::string()> what, DataType type, ReduceOp op) {
  if (!IsValid(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": unknown dtype code ", static_cast<int>(type),
                     " (libddp's: ", Codes(kNumDataTypes, &DataTypeName), ")"));
  }
  if (!IsValid(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": unknown reduce op ", static_cast<int>(op),
                     " (libddp's: ", Codes(kNumReduceOps, &ReduceOpName), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

nccl::BackendOptions CudaOptions(const Options& options, transport::Transport* transport) {
  nccl::BackendOptions o;
  o.timeout = options.timeout;
  o.default_device = std::max(options.local_rank, 0);
  if (transport != nullptr) {
    o.health = [transport] { return transport->health(); };
    o.on_failure = [transport](const absl::Status& s) { transport->Abort(s); };
  }
  return o;
}

NegotiationSettings Negotiation(const Options& options) {
  NegotiationSettings s;
  s.stall_check = options.stall_check;
  s.stall_shutdown = options.stall_shutdown;
  s.cache_capacity = static_cast<uint32_t>(options.cache_capacity);
  return s;
}

}  // namespace

EngineImpl::EngineImpl(const Options& options, transport::Transport* transport,
                       const collectives::Tuning& tuning, collectives::CommIds* ids,
                       collectives::BackendResources backends)
    : options_(options),
      transport_(transport),
      tuning_(tuning),
      comm_ids_(ids),
      backends_(std::move(backends)),
      rank_(options.rank),
      size_(options.size),
      recorder_(static_cast<size_t>(options.flight_recorder_entries)),
      cuda_(CudaOptions(options, transport)),
      negotiator_(Negotiation(options)) {
  params_.fusion_threshold = options.fusion_threshold;
  // As carried in negotiation records (f32), so that the first round changes nothing.
  params_.cycle_time_ms = static_cast<float>(options.cycle_time_ms);
  proposal_ = params_;
  stats_.Update([&](EngineStats& s) {
    s.fusion_threshold = params_.fusion_threshold;
    s.cycle_time_ms = params_.cycle_time_ms;
  });
  Register();
}

EngineImpl::~EngineImpl() {
  Unregister();  // before anything goes: no other engine's record reads this one from now on
  Shutdown(absl::CancelledError("the engine was shut down"));
}

absl::StatusOr<std::unique_ptr<ProcessSet>> EngineImpl::MakeSet(int id, std::vector<int> members) {
  // Every rank allocates an id for every set, member or not, so that all agree on them.
  DDP_ASSIGN_OR_RETURN(const collectives::CommId comm_id,
                       comm_ids_->Allocate(id == 0 ? collectives::CommRange::kEngine
                                                   : collectives::CommRange::kProcessSet));
  auto set = std::make_unique<ProcessSet>();
  set->id = id;
  set->members = std::move(members);
  auto it = std::find(set->members.begin(), set->members.end(), rank_);
  if (it == set->members.end()) return set;
  set->my_index = static_cast<int>(it - set->members.begin());
  const int n = static_cast<int>(set->members.size());
  transport::Transport* t = nullptr;
  if (n > 1) {
    set->subset =
        std::make_unique<transport::SubsetTransport>(*transport_, set->members, set->my_index);
    t = set->subset.get();
  }
  // The hierarchical allreduce needs the hosts of the set's own ranks.
  collectives::Tuning tuning = tuning_;
  tuning.hosts.clear();
  if (tuning_.hosts.size() == static_cast<size_t>(size_)) {
    for (int m : set->members) tuning.hosts.push_back(tuning_.hosts[static_cast<size_t>(m)]);
  }
  // The world set spans the whole job: it can use the job's collective backends.
  std::vector<std::unique_ptr<collectives::AllreduceBackend>> backends;
  if (id == 0) backends = collectives::WholeJobBackends(backends_, collectives::kEngineSlot);
  set->comm = std::make_unique<collectives::Communicator>(set->my_index, n, t, tuning, comm_id,
                                                          std::move(backends));
  set->was_joined.assign(static_cast<size_t>(n), false);
  return set;
}

absl::Status EngineImpl::Start() {
  std::vector<int> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[static_cast<size_t>(r)] = r;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->set_members.push_back(all);
  }
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<ProcessSet> world, MakeSet(0, all));
  sets_.push_back(std::move(world));
  DDP_ASSIGN_OR_RETURN(const collectives::CommId doorbells,
                       comm_ids_->Allocate(collectives::CommRange::kNotification));
  doorbell_tag_base_ =
      collectives::Communicator::Tag(collectives::Communicator::Seq(doorbells, 0), 0, 0);
  // Always there (ddp.start_timeline may start it later); writes nothing until started.
  timeline_ = std::make_unique<Timeline>(rank_);
  if (!options_.timeline.empty()) {
    // '{rank}' in the path gives each rank a file. One path for every rank (DDP_TIMELINE
    // exported to all, as with mpirun -x): the first rank to lock the file writes it, the others
    // go on without one.
    absl::Status s = timeline_->Start(options_.timeline, options_.timeline_mark_cycles);
    if (absl::IsAlreadyExists(s)) {
      DDP_LOG(kWarning, "no timeline on this rank: %s", s.message());
    } else {
      DDP_RETURN_IF_ERROR(s);
    }
  }
  if (options_.autotune && rank_ == 0) {
    AutotuneConfig config;
    config.csv_path = options_.autotune_log;
    DDP_ASSIGN_OR_RETURN(Autotuner tuner, Autotuner::Create(params_, config));
    autotuner_.emplace(std::move(tuner));
  }
  std::shared_ptr<Inbox> inbox = inbox_;
  executor_ =
      std::make_unique<Executor>(timeline_.get(), &stats_, &recorder_, params_.fusion_threshold,
                                 [inbox](int set, const std::string& name) {
                                   std::lock_guard<std::mutex> lock(inbox->mu);
                                   inbox->in_flight.erase(absl::StrCat(set, "/", name));
                                 });
  executor_->SetOperations(
      kCpuMemory,
      MakeCpuOperations(*executor_, transport_ != nullptr ? transport_->name() : "none", cuda_));
  executor_->SetOperations(kCudaMemory, MakeCudaOperations(*executor_, cuda_));
  next_cycle_ = absl::Now();
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void EngineImpl::Shutdown(const absl::Status& reason) {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    inbox_->stop = true;
    if (inbox_->failed.ok()) inbox_->failed = reason;
  }
  inbox_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  FailEverything(reason);
  executor_.reset();
  if (timeline_ != nullptr) timeline_->Stop();  // kept: a late StopTimeline is harmless
  cuda_.Close(reason);  // after the thread; a late submission gets the error
}

Handle EngineImpl::Failed(const std::string& name, absl::Status status) {
  auto state = std::make_shared<HandleState>(name);
  state->refused = true;
  state->Finish(WithTensor(std::move(status), name));
  return Handle(state);
}

absl::Status EngineImpl::CheckSet(int process_set, absl::FunctionRef<std::string()> what) const {
  if (process_set < 0 || process_set >= static_cast<int>(inbox_->set_members.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what(), ": there is no process set ", process_set));
  }
  const auto& m = inbox_->set_members[static_cast<size_t>(process_set)];
  if (std::find(m.begin(), m.end(), rank_) == m.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what(), ": rank ", rank_,
                                                   " is not a member of process set ", process_set,
                                                   " (ranks ", absl::StrJoin(m, ", "), ")"));
  }
  return absl::OkStatus();
}

Handle EngineImpl::Submit(std::unique_ptr<LocalOp> op) {
  const size_t align = DataTypeSize(op->meta.type);
  auto aligned = [align](const void* p) { return reinterpret_cast<uintptr_t>(p) % align == 0; };
  if (!std::all_of(op->inputs.begin(), op->inputs.end(), aligned) ||
      !std::all_of(op->outputs.begin(), op->outputs.end(), aligned)) {
    return Failed(op->name,
                  absl::InvalidArgumentError(absl::StrCat(
                      OpKindName(op->meta.kind), " '", op->name, "': a buffer is not aligned to ",
                      align, " bytes as ", DataTypeName(op->meta.type), " requires")));
  }
  std::unique_lock<std::mutex> lock(inbox_->mu);
  if (op->name.empty()) {
    op->name = absl::StrCat(OpKindName(op->meta.kind), ".noname.", inbox_->noname++);
  }
  // How errors name the submission; made only for one (a submission costs ~1 us in all).
  auto what = [&op] { return absl::StrCat(OpKindName(op->meta.kind), " '", op->name, "'"); };
  if (absl::Status s = CheckLimits(*op, what); !s.ok()) return Failed(op->name, s);
  if (absl::Status s = CheckSet(op->process_set, what); !s.ok()) return Failed(op->name, s);
  if (op->meta.kind == OpKind::kBroadcast) {
    const int n =
        static_cast<int>(inbox_->set_members[static_cast<size_t>(op->process_set)].size());
    if (op->meta.root < 0 || op->meta.root >= n) {
      return Failed(op->name, absl::InvalidArgumentError(absl::StrCat(
                                  what(), ": root rank ", op->meta.root,
                                  " is out of range for a process set of ", n, " ranks")));
    }
  }
  if (op->meta.kind == OpKind::kAlltoall) {
    const int64_t n =
        static_cast<int64_t>(inbox_->set_members[static_cast<size_t>(op->process_set)].size());
    if (op->meta.shapes[0][0] % n != 0) {
      return Failed(op->name, absl::InvalidArgumentError(absl::StrCat(
                                  what(), ": the first dimension (", op->meta.shapes[0][0],
                                  ") must be a multiple of the number of ranks (", n, ")")));
    }
  }
  // Argument errors above come first, whatever state the engine is in.
  if (!inbox_->failed.ok()) return Failed(op->name, Annotate(inbox_->failed, what()));
  if (inbox_->join_handle != nullptr) {
    return Failed(op->name, absl::FailedPreconditionError(absl::StrCat(
                                what(),
                                ": this rank has joined; it submits nothing until every "
                                "rank has joined")));
  }
  const std::string key = absl::StrCat(op->process_set, "/", op->name);
  if (!inbox_->in_flight.emplace(key, true).second) {
    return Failed(op->name, absl::InvalidArgumentError(absl::StrCat(
                                what(),
                                " was submitted again while the first submission is still "
                                "in flight (names must be unique among pending operations)")));
  }
  op->handle = std::make_shared<HandleState>(op->name);
  op->submitted = absl::Now();
  if (timeline_->active()) op->submitted_us = timeline_->NowMicros();
  op->flight_id = recorder_.Scheduled(op->process_set, op->name, op->meta, op->submitted);
  Handle handle(op->handle);
  inbox_->queue.push_back(std::move(op));
  const bool wake = inbox_->idle;
  lock.unlock();
  if (wake) inbox_->cv.notify_all();
  return handle;
}

Handle EngineImpl::SubmitOne(OpKind kind, std::string name, const void* input, void* output,
                             DataType type, std::vector<int64_t> shape, ReduceOp op, int root,
                             double prescale, double postscale, int process_set,
                             const Device& device, std::optional<size_t> into_bytes,
                             Compression compression) {
  auto what = [kind, &name] { return absl::StrCat(OpKindName(kind), " '", name, "'"); };
  // The operations that split or concatenate along the first dimension need one.
  const bool needs_first_dim = kind != OpKind::kAllreduce && kind != OpKind::kBroadcast;
  absl::Status s = CheckCommon(what, type, op);
  if (s.ok()) s = CheckCompression(what, type, op, compression);
  if (s.ok()) s = CheckShape(what, shape, type, needs_first_dim);
  if (s.ok()) s = CheckLowRank(what, shape, compression);
  // Allreduce writes its output where its input is non-empty; an `into` call wherever its result
  // is (which may be non-empty for an empty input: the other ranks' rows).
  const bool needs_output =
      kind == OpKind::kAllreduce ? ElementCount(shape) > 0 : into_bytes.value_or(0) > 0;
  if (s.ok() &&
      ((ElementCount(shape) > 0 && input == nullptr) || (needs_output && output == nullptr))) {
    s = absl::InvalidArgumentError(absl::StrCat(what(), ": null buffer"));
  }
  if (!s.ok()) return Failed(name, s);
  auto local = std::make_unique<LocalOp>();
  local->name = std::move(name);
  local->process_set = process_set;
  local->meta = TensorMeta{kind, type, op, root, kCpuMemory, prescale, postscale, {}};
  local->meta.compression = compression;
  local->meta.shapes.reserve(1);
  local->meta.shapes.push_back(std::move(shape));  // (moved: a braced list would copy it)
  local->inputs.assign(1, input);
  // Allreduce and broadcast write to the caller's buffer (which may be null when it is empty);
  // the other kinds get an output allocated by the engine.
  if (kind == OpKind::kAllreduce || kind == OpKind::kBroadcast) local->outputs.assign(1, output);
  if (into_bytes.has_value()) {  // allgather or reduce-scatter into the caller's output
    local->outputs.assign(1, output);
    local->into_bytes = into_bytes;
  }
  if (device.is_cuda()) {
    if (absl::Status d = cuda_.Prepare(*local, device); !d.ok()) {
      return Failed(local->name,
                    Annotate(d, absl::StrCat(OpKindName(kind), " '", local->name, "'")));
    }
  }
  return Submit(std::move(local));
}

Handle EngineImpl::AllreduceAsync(std::string name, const void* input, void* output, DataType type,
                                  std::vector<int64_t> shape, ReduceOp op, double prescale,
                                  double postscale, int process_set, Device device,
                                  Compression compression) {
  return SubmitOne(OpKind::kAllreduce, std::move(name), input, output, type, std::move(shape), op,
                   -1, prescale, postscale, process_set, device, std::nullopt, compression);
}

Handle EngineImpl::GroupedAllreduceAsync(std::string group, std::vector<GroupMember> members,
                                         DataType type, ReduceOp op, double prescale,
                                         double postscale, int process_set, Device device,
                                         Compression compression) {
  const std::string what = absl::StrCat("grouped allreduce '", group, "'");
  auto whole = [&what] { return what; };
  absl::Status s = CheckCommon(whole, type, op);
  if (s.ok()) s = CheckCompression(whole, type, op, compression);
  if (s.ok() && members.empty()) s = absl::InvalidArgumentError(what + ": no members");
  auto op_ = std::make_unique<LocalOp>();
  op_->meta = TensorMeta{OpKind::kAllreduce, type, op, -1, kCpuMemory, prescale, postscale, {}};
  op_->meta.compression = compression;
  for (auto& m : members) {
    if (!s.ok()) break;
    s = CheckShape([&] { return absl::StrCat(what, " member '", m.name, "'"); }, m.shape, type,
                   false);
    if (s.ok()) {
      s = CheckLowRank([&] { return absl::StrCat(what, " member '", m.name, "'"); }, m.shape,
                       compression);
    }
    if (s.ok() && ElementCount(m.shape) > 0 && (m.input == nullptr || m.output == nullptr)) {
      s = absl::InvalidArgumentError(absl::StrCat(what, " member '", m.name, "': null buffer"));
    }
    op_->meta.shapes.push_back(m.shape);
    op_->inputs.push_back(m.input);
    op_->outputs.push_back(m.output);
  }
  if (s.ok() && device.is_cuda()) s = Annotate(cuda_.Prepare(*op_, device), what);
  if (!s.ok()) return Failed(group, s);
  op_->name = std::move(group);
  op_->process_set = process_set;
  return Submit(std::move(op_));
}

Handle EngineImpl::AllgatherAsync(std::string name, const void* input, DataType type,
                                  std::vector<int64_t> shape, int process_set, Device device) {
  return SubmitOne(OpKind::kAllgather, std::move(name), input, nullptr, type, std::move(shape),
                   ReduceOp::kSum, -1, 1.0, 1.0, process_set, device);
}

Handle EngineImpl::BroadcastAsync(std::string name, void* buffer, DataType type,
                                  std::vector<int64_t> shape, int root, int process_set,
                                  Device device) {
  return SubmitOne(OpKind::kBroadcast, std::move(name), buffer, buffer, type, std::move(shape),
                   ReduceOp::kSum, root, 1.0, 1.0, process_set, device);
}

Handle EngineImpl::AlltoallAsync(std::string name, const void* input, DataType type,
                                 std::vector<int64_t> shape, int process_set, Device device) {
  return SubmitOne(OpKind::kAlltoall, std::move(name), input, nullptr, type, std::move(shape),
                   ReduceOp::kSum, -1, 1.0, 1.0, process_set, device);
}

Handle EngineImpl::ReduceScatterAsync(std::string name, const void* input, DataType type,
                                      std::vector<int64_t> shape, ReduceOp op, double prescale,
                                      double postscale, int process_set, Device device) {
  return SubmitOne(OpKind::kReduceScatter, std::move(name), input, nullptr, type, std::move(shape),
                   op, -1, prescale, postscale, process_set, device);
}

Handle EngineImpl::AllgatherIntoAsync(std::string name, const void* input, void* output,
                                      size_t output_bytes, DataType type,
                                      std::vector<int64_t> shape, int process_set) {
  return SubmitOne(OpKind::kAllgather, std::move(name), input, output, type, std::move(shape),
                   ReduceOp::kSum, -1, 1.0, 1.0, process_set, Device{}, output_bytes);
}

Handle EngineImpl::ReduceScatterIntoAsync(std::string name, const void* input, void* output,
                                          size_t output_bytes, DataType type,
                                          std::vector<int64_t> shape, ReduceOp op, double prescale,
                                          double postscale, int process_set) {
  return SubmitOne(OpKind::kReduceScatter, std::move(name), input, output, type, std::move(shape),
                   op, -1, prescale, postscale, process_set, Device{}, output_bytes);
}

Handle EngineImpl::JoinAsync() {
  std::unique_lock<std::mutex> lock(inbox_->mu);
  if (!inbox_->failed.ok()) return Failed("join", Annotate(inbox_->failed, "join"));
  if (inbox_->join_handle != nullptr) {
    return Failed("join", absl::FailedPreconditionError("join: this rank has already joined"));
  }
  inbox_->join_handle = std::make_shared<HandleState>("join");
  inbox_->join_requested = true;
  Handle handle(inbox_->join_handle);
  lock.unlock();
  inbox_->cv.notify_all();
  return handle;
}

absl::Status EngineImpl::StartTimeline(const std::string& path, bool mark_cycles) {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    if (inbox_->stop)
      return absl::FailedPreconditionError("start_timeline: the engine has stopped");
  }
  return timeline_->Start(path, mark_cycles);
}

absl::StatusOr<int> EngineImpl::AddProcessSet(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty() || ranks.front() < 0 || ranks.back() >= size_ ||
      std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("add_process_set: ranks [", absl::StrJoin(ranks, ", "),
                     "] must be distinct ranks of the job (size ", size_, ")"));
  }
  auto op = std::make_unique<LocalOp>();
  op->name = absl::StrCat("ddp.process_set[", absl::StrJoin(ranks, ","), "]");
  op->meta = TensorMeta{OpKind::kAddProcessSet,
                        DataType::kInt64,
                        ReduceOp::kSum,
                        -1,
                        kCpuMemory,
                        1,
                        1,
                        {std::vector<int64_t>(ranks.begin(), ranks.end())}};
  Handle handle = Submit(std::move(op));
  DDP_RETURN_IF_ERROR(handle.Wait());
  return handle.join_last_rank();
}

}  // namespace ddp::engine
