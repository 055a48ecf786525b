// EngineImpl: submission checks, the background thread, sleeping and waking, process sets.
#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/status.h"
#include "engine/engine_impl.h"

namespace ddp::engine {
namespace {

constexpr int kFirstCommunicatorId = 1;  // 0 is the context's blocking collectives
constexpr int kDoorbellCommunicatorId = 255;

uint64_t DoorbellTag(uint32_t epoch) {
  return collectives::Communicator::Tag(
      (uint32_t{kDoorbellCommunicatorId} << 16) | (epoch & 0xFFFF), 0, 0);
}

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool IsFloating(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

absl::Status CheckShape(absl::string_view what, const std::vector<int64_t>& shape, DataType type,
                        bool needs_first_dim) {
  if (needs_first_dim && shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": needs at least one dimension"));
  }
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": negative dimension in shape ", ShapeString(shape)));
    }
    if (d > 0 && n > (uint64_t{1} << 60) / static_cast<uint64_t>(d) / DataTypeSize(type)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", ShapeString(shape), " overflows"));
    }
    n *= static_cast<uint64_t>(d);
  }
  return absl::OkStatus();
}

// What a negotiation message can carry (see message.cc); beyond it the description could not be
// sent, so the submission fails here, alone.
absl::Status CheckLimits(const LocalOp& op, absl::string_view what) {
  if (op.name.size() > (1u << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the name is longer than 1 MiB"));
  }
  if (op.meta.shapes.size() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": more than 65536 grouped tensors"));
  }
  for (const auto& shape : op.meta.shapes) {
    if (shape.size() > 64) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": more than 64 dimensions"));
    }
  }
  return absl::OkStatus();
}

uint64_t Elements(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

absl::Status CheckCommon(absl::string_view what, DataType type, ReduceOp op, double prescale,
                         double postscale) {
  if (!IsValid(type)) return absl::InvalidArgumentError(absl::StrCat(what, ": invalid dtype"));
  if (!IsValid(op)) return absl::InvalidArgumentError(absl::StrCat(what, ": invalid op"));
  if ((prescale != 1.0 || postscale != 1.0) && !IsFloating(type)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": scale factors need a floating-point dtype, not ", DataTypeName(type)));
  }
  return absl::OkStatus();
}

}  // namespace

EngineImpl::EngineImpl(const Options& options, transport::Transport* transport,
                       const collectives::Tuning& tuning)
    : options_(options),
      transport_(transport),
      tuning_(tuning),
      rank_(options.rank),
      size_(options.size) {
  params_.fusion_threshold = options.fusion_threshold;
  // As carried in negotiation records (f32), so that the first round changes nothing.
  params_.cycle_time_ms = static_cast<float>(options.cycle_time_ms);
  proposal_ = params_;
  stats_.fusion_threshold = params_.fusion_threshold;
  stats_.cycle_time_ms = params_.cycle_time_ms;
}

EngineImpl::~EngineImpl() { Shutdown(absl::CancelledError("the engine was shut down")); }

std::unique_ptr<ProcessSet> EngineImpl::MakeSet(int id, std::vector<int> members) {
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
  set->comm = std::make_unique<collectives::Communicator>(set->my_index, n, t, tuning_,
                                                          kFirstCommunicatorId + id);
  set->was_joined.assign(static_cast<size_t>(n), false);
  return set;
}

absl::Status EngineImpl::Start() {
  std::vector<int> all(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) all[static_cast<size_t>(r)] = r;
  set_members_.push_back(all);
  sets_.push_back(MakeSet(0, all));
  if (!options_.timeline.empty()) {
    DDP_ASSIGN_OR_RETURN(timeline_, Timeline::Open(options_.timeline, rank_));
  }
  if (options_.autotune && rank_ == 0) {
    AutotuneConfig config;
    config.csv_path = options_.autotune_log;
    DDP_ASSIGN_OR_RETURN(Autotuner tuner, Autotuner::Create(params_, config));
    autotuner_.emplace(std::move(tuner));
  }
  next_cycle_ = absl::Now();
  thread_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void EngineImpl::Shutdown(const absl::Status& reason) {
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    stop_ = true;
    if (failed_.ok()) failed_ = reason;
  }
  wake_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  FailEverything(reason);
  timeline_.reset();
}

Handle EngineImpl::Failed(const std::string& name, absl::Status status) {
  auto state = std::make_shared<HandleState>(name);
  state->Finish(std::move(status));
  return Handle(state);
}

absl::Status EngineImpl::CheckSet(int process_set, absl::string_view what) const {
  if (process_set < 0 || process_set >= static_cast<int>(set_members_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": there is no process set ", process_set));
  }
  const auto& m = set_members_[static_cast<size_t>(process_set)];
  if (std::find(m.begin(), m.end(), rank_) == m.end()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rank ", rank_,
                                                   " is not a member of process set ", process_set,
                                                   " (ranks ", absl::StrJoin(m, ", "), ")"));
  }
  return absl::OkStatus();
}

Handle EngineImpl::Submit(std::unique_ptr<LocalOp> op) {
  const size_t align = DataTypeSize(op->meta.type);
  std::vector<const void*> buffers(op->inputs);
  buffers.insert(buffers.end(), op->outputs.begin(), op->outputs.end());
  for (const void* p : buffers) {
    if (reinterpret_cast<uintptr_t>(p) % align != 0) {
      return Failed(op->name,
                    absl::InvalidArgumentError(absl::StrCat(
                        OpKindName(op->meta.kind), " '", op->name, "': a buffer is not aligned to ",
                        align, " bytes as ", DataTypeName(op->meta.type), " requires")));
    }
  }
  std::unique_lock<std::mutex> lock(wake_->mu);
  if (op->name.empty()) {
    op->name = absl::StrCat(OpKindName(op->meta.kind), ".noname.", noname_++);
  }
  const std::string what = absl::StrCat(OpKindName(op->meta.kind), " '", op->name, "'");
  if (!failed_.ok()) return Failed(op->name, Annotate(failed_, what));
  if (join_handle_ != nullptr) {
    return Failed(op->name, absl::FailedPreconditionError(absl::StrCat(
                                what,
                                ": this rank has joined; it submits nothing until every "
                                "rank has joined")));
  }
  if (absl::Status s = CheckLimits(*op, what); !s.ok()) return Failed(op->name, s);
  if (absl::Status s = CheckSet(op->process_set, what); !s.ok()) return Failed(op->name, s);
  if (op->meta.kind == OpKind::kBroadcast) {
    const int n = static_cast<int>(set_members_[static_cast<size_t>(op->process_set)].size());
    if (op->meta.root < 0 || op->meta.root >= n) {
      return Failed(op->name, absl::InvalidArgumentError(absl::StrCat(
                                  what, ": root rank ", op->meta.root,
                                  " is out of range for a process set of ", n, " ranks")));
    }
  }
  if (op->meta.kind == OpKind::kAlltoall) {
    const int64_t n =
        static_cast<int64_t>(set_members_[static_cast<size_t>(op->process_set)].size());
    if (op->meta.shapes[0][0] % n != 0) {
      return Failed(op->name, absl::InvalidArgumentError(absl::StrCat(
                                  what, ": the first dimension (", op->meta.shapes[0][0],
                                  ") must be a multiple of the number of ranks (", n, ")")));
    }
  }
  const std::string key = absl::StrCat(op->process_set, "/", op->name);
  if (!in_flight_.emplace(key, true).second) {
    return Failed(op->name, absl::InvalidArgumentError(absl::StrCat(
                                what,
                                " was submitted again while the first submission is still "
                                "in flight (names must be unique among pending operations)")));
  }
  op->handle = std::make_shared<HandleState>(op->name);
  op->submitted = absl::Now();
  if (timeline_ != nullptr) op->submitted_us = timeline_->NowMicros();
  Handle handle(op->handle);
  queue_.push_back(std::move(op));
  lock.unlock();
  wake_->cv.notify_all();
  return handle;
}

Handle EngineImpl::AllreduceAsync(std::string name, const void* input, void* output, DataType type,
                                  std::vector<int64_t> shape, ReduceOp op, double prescale,
                                  double postscale, int process_set) {
  GroupMember member{std::move(name), input, output, std::move(shape)};
  std::string group = member.name;
  auto op_ = std::make_unique<LocalOp>();
  const std::string what = absl::StrCat("allreduce '", group, "'");
  absl::Status s = CheckCommon(what, type, op, prescale, postscale);
  if (s.ok()) s = CheckShape(what, member.shape, type, false);
  const uint64_t bytes = s.ok() ? Elements(member.shape) * DataTypeSize(type) : 0;
  if (s.ok() && bytes > 0 && (input == nullptr || output == nullptr)) {
    s = absl::InvalidArgumentError(absl::StrCat(what, ": null buffer"));
  }
  if (!s.ok()) return Failed(group, s);
  op_->name = std::move(group);
  op_->process_set = process_set;
  op_->meta = TensorMeta{OpKind::kAllreduce,       type, op, -1, -1, prescale, postscale,
                         {std::move(member.shape)}};
  op_->inputs = {input};
  op_->outputs = {output};
  return Submit(std::move(op_));
}

Handle EngineImpl::GroupedAllreduceAsync(std::string group, std::vector<GroupMember> members,
                                         DataType type, ReduceOp op, double prescale,
                                         double postscale, int process_set) {
  const std::string what = absl::StrCat("grouped allreduce '", group, "'");
  absl::Status s = CheckCommon(what, type, op, prescale, postscale);
  if (s.ok() && members.empty()) s = absl::InvalidArgumentError(what + ": no members");
  auto op_ = std::make_unique<LocalOp>();
  op_->meta = TensorMeta{OpKind::kAllreduce, type, op, -1, -1, prescale, postscale, {}};
  for (auto& m : members) {
    if (!s.ok()) break;
    s = CheckShape(absl::StrCat(what, " member '", m.name, "'"), m.shape, type, false);
    if (s.ok() && Elements(m.shape) > 0 && (m.input == nullptr || m.output == nullptr)) {
      s = absl::InvalidArgumentError(absl::StrCat(what, " member '", m.name, "': null buffer"));
    }
    op_->meta.shapes.push_back(m.shape);
    op_->inputs.push_back(m.input);
    op_->outputs.push_back(m.output);
  }
  if (!s.ok()) return Failed(group, s);
  op_->name = std::move(group);
  op_->process_set = process_set;
  return Submit(std::move(op_));
}

Handle EngineImpl::AllgatherAsync(std::string name, const void* input, DataType type,
                                  std::vector<int64_t> shape, int process_set) {
  const std::string what = absl::StrCat("allgather '", name, "'");
  absl::Status s = CheckCommon(what, type, ReduceOp::kSum, 1, 1);
  if (s.ok()) s = CheckShape(what, shape, type, true);
  if (s.ok() && Elements(shape) > 0 && input == nullptr)
    s = absl::InvalidArgumentError(what + ": null buffer");
  if (!s.ok()) return Failed(name, s);
  auto op = std::make_unique<LocalOp>();
  op->name = std::move(name);
  op->process_set = process_set;
  op->meta = TensorMeta{OpKind::kAllgather, type, ReduceOp::kSum, -1, -1, 1, 1, {std::move(shape)}};
  op->inputs = {input};
  return Submit(std::move(op));
}

Handle EngineImpl::BroadcastAsync(std::string name, void* buffer, DataType type,
                                  std::vector<int64_t> shape, int root, int process_set) {
  const std::string what = absl::StrCat("broadcast '", name, "'");
  absl::Status s = CheckCommon(what, type, ReduceOp::kSum, 1, 1);
  if (s.ok()) s = CheckShape(what, shape, type, false);
  if (s.ok() && Elements(shape) > 0 && buffer == nullptr)
    s = absl::InvalidArgumentError(what + ": null buffer");
  if (!s.ok()) return Failed(name, s);
  auto op = std::make_unique<LocalOp>();
  op->name = std::move(name);
  op->process_set = process_set;
  op->meta =
      TensorMeta{OpKind::kBroadcast, type, ReduceOp::kSum, root, -1, 1, 1, {std::move(shape)}};
  op->inputs = {buffer};
  op->outputs = {buffer};
  return Submit(std::move(op));
}

Handle EngineImpl::AlltoallAsync(std::string name, const void* input, DataType type,
                                 std::vector<int64_t> shape, int process_set) {
  const std::string what = absl::StrCat("alltoall '", name, "'");
  absl::Status s = CheckCommon(what, type, ReduceOp::kSum, 1, 1);
  if (s.ok()) s = CheckShape(what, shape, type, true);
  if (s.ok() && Elements(shape) > 0 && input == nullptr)
    s = absl::InvalidArgumentError(what + ": null buffer");
  if (!s.ok()) return Failed(name, s);
  auto op = std::make_unique<LocalOp>();
  op->name = std::move(name);
  op->process_set = process_set;
  op->meta = TensorMeta{OpKind::kAlltoall, type, ReduceOp::kSum, -1, -1, 1, 1, {std::move(shape)}};
  op->inputs = {input};
  return Submit(std::move(op));
}

Handle EngineImpl::ReduceScatterAsync(std::string name, const void* input, DataType type,
                                      std::vector<int64_t> shape, ReduceOp op, double prescale,
                                      double postscale, int process_set) {
  const std::string what = absl::StrCat("reducescatter '", name, "'");
  absl::Status s = CheckCommon(what, type, op, prescale, postscale);
  if (s.ok()) s = CheckShape(what, shape, type, true);
  if (s.ok() && Elements(shape) > 0 && input == nullptr)
    s = absl::InvalidArgumentError(what + ": null buffer");
  if (!s.ok()) return Failed(name, s);
  auto op_ = std::make_unique<LocalOp>();
  op_->name = std::move(name);
  op_->process_set = process_set;
  op_->meta =
      TensorMeta{OpKind::kReduceScatter, type, op, -1, -1, prescale, postscale, {std::move(shape)}};
  op_->inputs = {input};
  return Submit(std::move(op_));
}

Handle EngineImpl::JoinAsync() {
  std::unique_lock<std::mutex> lock(wake_->mu);
  if (!failed_.ok()) return Failed("join", Annotate(failed_, "join"));
  if (join_handle_ != nullptr) {
    return Failed("join", absl::FailedPreconditionError("join: this rank has already joined"));
  }
  join_handle_ = std::make_shared<HandleState>("join");
  join_requested_ = true;
  Handle handle(join_handle_);
  lock.unlock();
  wake_->cv.notify_all();
  return handle;
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
                        -1,
                        1,
                        1,
                        {std::vector<int64_t>(ranks.begin(), ranks.end())}};
  Handle handle = Submit(std::move(op));
  DDP_RETURN_IF_ERROR(handle.Wait());
  return handle.join_last_rank();
}

EngineStats EngineImpl::stats() const {
  std::lock_guard<std::mutex> lock(wake_->mu);
  return stats_;
}

// --- the background thread ---

void EngineImpl::Loop() {
  if (size_ > 1) PostDoorbells();
  while (WaitForWork()) {
    absl::Status s = RunCycle();
    if (s.code() == absl::StatusCode::kCancelled) {  // an agreed stop, not a failure
      FailEverything(s);
      return;
    }
    if (!s.ok()) {
      // Tell the peers, so that none waits for this engine (not needed when it was asked to
      // stop: then the transport is closed gracefully right after).
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(wake_->mu);
        stopping = stop_;
      }
      if (transport_ != nullptr && !stopping) transport_->Abort(s);
      FailEverything(s);
      return;
    }
  }
}

bool EngineImpl::WaitForWork() {
  std::unique_lock<std::mutex> lock(wake_->mu);
  if (asleep_) {
    wake_->cv.wait(lock,
                   [&] { return stop_ || !queue_.empty() || join_requested_ || wake_->doorbell; });
    if (stop_) return false;
    wake_->doorbell = false;
    lock.unlock();
    absl::Status s = Wake();
    if (!s.ok()) {
      // A peer left (or this rank is shutting down): the engine is over, the transport is not.
      FailEverything(s);
      return false;
    }
    asleep_ = false;
    return true;
  }
  // Stopping while awake: leaving at once would strand the others in the next round, so take
  // part in one more, which tells them (RunCycle), and leave with them after it.
  if (stop_) return true;
  // Awake: gather submissions for the rest of the cycle time before the next round.
  wake_->cv.wait_until(lock, absl::ToChronoTime(next_cycle_), [&] { return stop_; });
  return true;
}

void EngineImpl::PostDoorbells() {
  doorbells_.clear();
  const transport::Descriptor descriptor{};
  const uint32_t epoch = epoch_;
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    wake_->sleep_epoch = epoch;
    // Rings of the previous epoch that came after this rank woke by itself are not news.
    wake_->doorbell = false;
  }
  std::shared_ptr<Wakeup> wake = wake_;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    auto request = transport_->Irecv(peer, DoorbellTag(epoch), descriptor, nullptr, 0);
    request->OnComplete([wake, epoch] {
      {
        std::lock_guard<std::mutex> lock(wake->mu);
        if (wake->sleep_epoch == epoch) wake->doorbell = true;
      }
      wake->cv.notify_all();
    });
    doorbells_.push_back(std::move(request));
  }
}

// A rank that wakes (for local work or a peer's doorbell) rings every peer, so that all ranks
// come to the next round. It does not wait for the others' rings: the round itself is an
// ordinary collective, with the usual timeouts naming a rank that does not come.
absl::Status EngineImpl::Wake() {
  if (size_ == 1) return absl::OkStatus();
  for (auto& bell : doorbells_) {
    if (bell->Test() && !bell->status().ok()) {
      return Annotate(bell->status(), "engine: a rank left the job");
    }
  }
  const transport::Descriptor descriptor{};
  const uint64_t tag = DoorbellTag(epoch_);
  std::vector<transport::RequestPtr> sends;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) sends.push_back(transport_->Isend(peer, tag, descriptor, nullptr, 0));
  }
  for (auto& request : sends) {
    absl::Status s = transport_->Wait(request.get());
    if (!s.ok()) return Annotate(s, "engine: waking the other ranks");
  }
  ++epoch_;
  return absl::OkStatus();
}

void EngineImpl::TakeQueue() {
  std::lock_guard<std::mutex> lock(wake_->mu);
  while (!queue_.empty()) {
    std::unique_ptr<LocalOp> op = std::move(queue_.front());
    queue_.pop_front();
    ProcessSet& set = *sets_[static_cast<size_t>(op->process_set)];
    set.fresh.push_back(op.get());
    set.pending[op->name] = std::move(op);
  }
  // Join takes effect once this rank's own operations are done: from then on it only lends its
  // identity to the others' allreduces, and every average counts exactly the ranks that
  // contributed data.
  bool idle = true;
  for (const auto& set : sets_) idle = idle && set->pending.empty();
  if (join_requested_ && idle) {
    join_requested_ = false;
    joined_ = true;
    active_join_ = join_handle_;
  }
}

absl::Status EngineImpl::RunCycle() {
  const absl::Time start = absl::Now();
  ++cycle_;
  if (timeline_ != nullptr && options_.timeline_mark_cycles) {
    timeline_->Marker("CYCLE_START", timeline_->NowMicros());
  }
  TakeQueue();
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    stopping_ = stop_;
  }
  executed_bytes_ = 0;
  DDP_ASSIGN_OR_RETURN(RoundOutcome world, Negotiate(*sets_[0]));
  if (!world.stopping.empty()) {
    // Every rank sees this in the same round and finishes it together with the leaving ones.
    DDP_RETURN_IF_ERROR(Execute(*sets_[0], world.responses, world.active_members));
    return absl::CancelledError(
        absl::StrCat("the engine stopped: ", world.stopping.size() == 1 ? "rank " : "ranks ",
                     absl::StrJoin(world.stopping, ", "), " shut down"));
  }
  bool ran_something = !world.responses.empty();
  DDP_RETURN_IF_ERROR(Execute(*sets_[0], world.responses, world.active_members));
  for (size_t id = 1; id < world.set_pending.size(); ++id) {
    ProcessSet& set = *sets_[id];
    if (world.set_pending[id] == 0 || set.my_index < 0) continue;
    DDP_ASSIGN_OR_RETURN(RoundOutcome round, Negotiate(set));
    DDP_RETURN_IF_ERROR(Execute(set, round.responses, round.active_members));
    ran_something = ran_something || !round.responses.empty();
  }
  if (autotuner_ && executed_bytes_ > 0 &&
      autotuner_->RecordCycle(executed_bytes_, SteadySeconds())) {
    proposal_ = autotuner_->current();
  }
  if (timeline_ != nullptr) timeline_->Flush();
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    ++stats_.cycles;
    if (autotuner_) stats_.autotune_converged = autotuner_->converged();
    if (!world.anything_pending) ++stats_.sleeps;
  }
  if (!world.anything_pending && size_ > 1) {
    // Nobody has anything: every rank reached the same conclusion in the same round.
    asleep_ = true;
    PostDoorbells();
  } else if (!world.anything_pending) {
    asleep_ = true;
  }
  // A round that ran something is followed at once by the next (every rank knows it did, so
  // all come together): a burst of submissions is not held back by the cycle time, and while
  // collectives run, the next gradients queue up and fuse by themselves. The cycle time paces
  // only rounds that found nothing to run.
  next_cycle_ = ran_something ? start : start + absl::Milliseconds(params_.cycle_time_ms);
  return absl::OkStatus();
}

void EngineImpl::FailEverything(const absl::Status& status) {
  std::vector<std::pair<std::shared_ptr<HandleState>, std::string>> to_fail;
  {
    std::lock_guard<std::mutex> lock(wake_->mu);
    if (failed_.ok()) failed_ = status;
    for (auto& op : queue_) to_fail.emplace_back(op->handle, OpKindName(op->meta.kind));
    queue_.clear();
    in_flight_.clear();
    if (join_handle_ != nullptr && !join_handle_->done.load()) {
      to_fail.emplace_back(join_handle_, "join");
    }
    join_handle_.reset();
    join_requested_ = false;
  }
  for (auto& set : sets_) {
    for (auto& [name, op] : set->pending)
      to_fail.emplace_back(op->handle, OpKindName(op->meta.kind));
    set->pending.clear();
    set->fresh.clear();
  }
  active_join_.reset();
  for (auto& [handle, kind] : to_fail) {
    if (handle == nullptr || handle->done.load()) continue;
    handle->Finish(
        Annotate(status, kind == "join" ? "join" : absl::StrCat(kind, " '", handle->name, "'")));
  }
}

}  // namespace ddp::engine
