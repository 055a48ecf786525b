// EngineImpl: the fusion engine behind ddp::Engine.
//
// One background thread per context runs negotiation rounds ("cycles"). In a round each rank of
// a process set contributes, in one small max-allreduce, a "not ready" byte per response-cache
// slot (so cached tensors are agreed without describing them), an "invalidate" byte per slot, and
// a fixed record of its own (bytes of announcements, flags, and the parameters it proposes); only
// when some rank has tensors the cache does not know does an allgatherv of their descriptions
// follow. Every rank then runs the same deterministic bookkeeping, so all agree on which tensors
// are ready, in which order, without a coordinator on the critical path (the set's first rank
// only decides stall failures and, with autotune, parameters, both carried by the same round).
//
// When a round shows that no rank has anything pending, every rank goes to sleep until a local
// submission or a peer's doorbell (a zero-byte message) wakes it: no cycling while idle.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/backend.h"
#include "collectives/comm_ids.h"
#include "collectives/communicator.h"
#include "ddp/engine.h"
#include "ddp/options.h"
#include "engine/autotune.h"
#include "engine/handle_state.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "engine/timeline.h"
#include "nccl/device.h"
#include "transport/subset.h"
#include "transport/transport.h"

namespace ddp::engine {

// Per-rank element counts of an allgather or reduce-scatter, and this rank's output shape: the
// same for the CPU and the CUDA path.
struct SplitLayout {
  std::vector<size_t> counts;
  std::vector<int64_t> output_shape;
};
// Every member's first dimension concatenated (first_dims from the negotiation).
SplitLayout AllgatherLayout(const TensorMeta& meta, const std::vector<int64_t>& first_dims);
// The first dimension split over n ranks, the first dim % n ranks one row more; `me`'s rows.
SplitLayout ReduceScatterLayout(const TensorMeta& meta, int n, int me);

// One submission waiting on this rank.
struct LocalOp {
  enum class State { kNew, kAnnounced, kCached, kReady };
  std::string name;
  int process_set = 0;
  TensorMeta meta;
  std::vector<const void*> inputs;  // one per shape
  std::vector<void*> outputs;       // allreduce/broadcast: one per shape
  std::shared_ptr<HandleState> handle;
  nccl::ReadyPtr ready;  // CUDA tensors: when the inputs are ready on their stream
  absl::Time submitted;
  int64_t submitted_us = 0;  // timeline clock
  State state = State::kNew;
  int slot = -1;
};

// A tensor every rank of the set has agreed to run now (or to fail, when error is set).
struct Response {
  std::string name;
  TensorMeta meta;
  std::vector<int64_t> first_dims;  // allgather: each member's first dimension
  absl::Status error;
  bool cached = false;
  int64_t ready_us = 0;
};

// What one rank said about a tensor not (yet) agreed: kept identically on every rank.
struct TableEntry {
  std::vector<std::optional<TensorMeta>> metas;  // per set member
  absl::Time first_seen;
  absl::Time last_warned;
  bool stall_fail_sent = false;
  // An entry exists because some member described the tensor: the first such description.
  const TensorMeta& FirstMeta() const {
    for (const auto& m : metas) {
      if (m) return *m;
    }
    return *metas.front();  // unreachable
  }
};

struct ProcessSet {
  int id = 0;
  std::vector<int> members;  // job ranks, increasing
  int my_index = -1;         // -1: this rank is not a member
  std::unique_ptr<transport::SubsetTransport> subset;
  std::unique_ptr<collectives::Communicator> comm;
  ResponseCache cache;
  bool capacity_agreed = false;
  // This rank's submissions, by name, and those not yet described to the others.
  absl::flat_hash_map<std::string, std::unique_ptr<LocalOp>> pending;
  std::vector<LocalOp*> fresh;
  // Agreed state, identical on every member.
  std::vector<std::string> table_order;
  absl::flat_hash_map<std::string, TableEntry> table;
  std::vector<bool> was_joined;
  std::vector<std::string> stall_fail_outbox;  // coordinator only
};

// The per-member record of a negotiation round (see engine_impl.h's top comment).
struct MemberRecord {
  uint32_t announce_bytes = 0;
  uint8_t flags = 0;  // kHasPending | kJoined
  int64_t fusion_threshold = 0;
  float cycle_time_ms = 0;
  uint32_t cache_capacity = 0;
  static constexpr uint8_t kHasPending = 1;
  static constexpr uint8_t kJoined = 2;
  static constexpr uint8_t kStopping = 4;  // this rank's engine is shutting down
  static constexpr size_t kBytes = 21;
};

// What a round decided beyond the responses.
struct RoundOutcome {
  std::vector<Response> responses;
  std::vector<int> stopping;         // job ranks whose engine is shutting down (world round)
  bool anything_pending = false;     // some member has a submission or a join waiting
  std::vector<uint8_t> set_pending;  // world round: per process set, someone has work there
  int active_members = 0;            // members that have not joined
  std::vector<bool> joined;
};

class EngineImpl final : public Engine {
 public:
  // `transport` is the job's (null for a single rank). The engine's collectives and doorbells
  // use communicator ids of their own from `ids` (the world set's from the engine range, other
  // sets' from the process-set range), apart from the context's blocking calls; its world set
  // gets the job's whole-job collective backends (`backends`).
  EngineImpl(const Options& options, transport::Transport* transport,
             const collectives::Tuning& tuning, collectives::CommIds* ids,
             collectives::BackendResources backends);
  ~EngineImpl() override;

  absl::Status Start();
  // Stops the thread; pending operations fail with `reason`.
  void Shutdown(const absl::Status& reason);

  Handle AllreduceAsync(std::string name, const void* input, void* output, DataType type,
                        std::vector<int64_t> shape, ReduceOp op, double prescale, double postscale,
                        int process_set, Device device) override;
  Handle GroupedAllreduceAsync(std::string group, std::vector<GroupMember> members, DataType type,
                               ReduceOp op, double prescale, double postscale, int process_set,
                               Device device) override;
  Handle AllgatherAsync(std::string name, const void* input, DataType type,
                        std::vector<int64_t> shape, int process_set, Device device) override;
  Handle BroadcastAsync(std::string name, void* buffer, DataType type, std::vector<int64_t> shape,
                        int root, int process_set, Device device) override;
  Handle AlltoallAsync(std::string name, const void* input, DataType type,
                       std::vector<int64_t> shape, int process_set, Device device) override;
  Handle ReduceScatterAsync(std::string name, const void* input, DataType type,
                            std::vector<int64_t> shape, ReduceOp op, double prescale,
                            double postscale, int process_set, Device device) override;
  Handle JoinAsync() override;
  absl::StatusOr<int> AddProcessSet(std::vector<int> ranks) override;
  EngineStats stats() const override;

 private:
  // --- submission (engine.cc) ---
  Handle Submit(std::unique_ptr<LocalOp> op);
  // Checks and submits a single-tensor operation (output null: the engine allocates it).
  Handle SubmitOne(OpKind kind, std::string name, const void* input, void* output, DataType type,
                   std::vector<int64_t> shape, ReduceOp op, int root, double prescale,
                   double postscale, int process_set, const Device& device);
  static Handle Failed(const std::string& name, absl::Status status);
  absl::Status CheckSet(int process_set, absl::string_view what) const;

  // --- the thread (engine.cc) ---
  void Loop();
  bool WaitForWork();  // false: stop
  absl::Status Wake();
  void PostDoorbells();
  uint64_t DoorbellTag(uint32_t epoch) const;
  absl::Status RunCycle();
  void TakeQueue();
  bool HasLocalWork() const;  // this rank has submissions pending in some process set
  void FailEverything(const absl::Status& why);
  // A world round said ranks `gone` are shutting down: fail this rank's work that needs them
  // (world, join, process sets with them), identically on every rank.
  void FailWorkNeeding(const std::vector<int>& gone);
  absl::StatusOr<std::unique_ptr<ProcessSet>> MakeSet(int id, std::vector<int> members);

  // --- negotiation (negotiation.cc) ---
  absl::StatusOr<RoundOutcome> Negotiate(ProcessSet& set);
  std::string PrepareAnnouncements(ProcessSet& set, std::vector<uint8_t>& vec, size_t bound);
  absl::Status ProcessRound(ProcessSet& set, const std::vector<uint8_t>& vec,
                            const std::string& gathered, const std::vector<size_t>& counts,
                            size_t bound, RoundOutcome& out);
  void CompleteTableEntries(ProcessSet& set, const RoundOutcome& out,
                            std::vector<Response>& responses);
  void CheckStalls(ProcessSet& set);
  // How long a tensor may wait before the stall inspector looks at it (the smaller non-zero of
  // DDP_STALL_CHECK_SECONDS and DDP_STALL_SHUTDOWN_SECONDS; zero: never).
  absl::Duration StallProbe() const;
  void RequeueSlot(ProcessSet& set, int slot);
  void FinishJoin(ProcessSet& set, const RoundOutcome& out);
  void ApplyParameters(const MemberRecord& coordinator);

  // --- execution (execution.cc) ---
  absl::Status Execute(ProcessSet& set, std::vector<Response>& responses, int active);
  absl::Status RunFused(ProcessSet& set, const std::vector<Response*>& batch, int active);
  absl::Status RunAlone(ProcessSet& set, Response& response, int active);
  absl::Status RunOther(ProcessSet& set, Response& response);
  void Finish(ProcessSet& set, const std::string& name, absl::Status status);
  // A non-allreduce collective finished OK: its timeline phase, stats, bytes and handle.
  void FinishOther(ProcessSet& set, const Response& r, const std::string& phase, int64_t start,
                   const std::string& transport, uint64_t bytes);

  // --- CUDA tensors (device_execution.cc) ---
  // The NCCL backend, created by the first CUDA submission (or a joined rank's first CUDA
  // collective); its creation error is kept and given to every later CUDA submission.
  absl::StatusOr<std::shared_ptr<nccl::Backend>> DeviceBackend();
  // Checks a CUDA submission and records its inputs' ready event.
  absl::Status PrepareDeviceOp(LocalOp& op, const Device& device);
  absl::Status EnsureDeviceComm(ProcessSet& set);
  absl::Status RunDeviceAllreduce(ProcessSet& set, const std::vector<Response*>& batch, int active);
  absl::Status RunDeviceOther(ProcessSet& set, Response& response, LocalOp& op);
  // NEGOTIATE (submitted to agreed) and QUEUE (agreed to started) of a local submission.
  void TimelineWaited(const LocalOp& op, const Response& r, int64_t started);
  void TimelinePhase(const std::string& name, const char* phase, int64_t start, int64_t end,
                     std::vector<std::pair<std::string, std::string>> args = {});

  const Options options_;
  transport::Transport* const transport_;
  const std::string transport_name_;  // as the timeline shows it ("none" for a job of one)
  const collectives::Tuning tuning_;
  collectives::CommIds* const comm_ids_;
  const collectives::BackendResources backends_;
  uint64_t doorbell_tag_base_ = 0;  // the doorbells' communicator, as a tag (epoch added)
  const int rank_;
  const int size_;

  // Shared with doorbell callbacks, which may run after the engine is gone.
  struct Wakeup {
    std::mutex mu;  // guards the engine fields below up to `param_history_`
    std::condition_variable cv;
    bool doorbell = false;
    uint32_t sleep_epoch = 0;  // doorbells of other epochs are stale
  };
  const std::shared_ptr<Wakeup> wake_ = std::make_shared<Wakeup>();
  std::deque<std::unique_ptr<LocalOp>> queue_;        // submitted, not yet taken by the thread
  absl::flat_hash_map<std::string, bool> in_flight_;  // "set/name" submitted and unfinished
  bool join_requested_ = false;
  std::shared_ptr<HandleState> join_handle_;
  bool stop_ = false;
  absl::Status failed_;  // first fatal error
  EngineStats stats_;
  std::vector<std::pair<uint64_t, TunedParams>> param_history_;
  std::vector<std::vector<int>> set_members_;  // for argument checks in callers' threads
  uint64_t noname_ = 0;

  // Owned by the thread.
  std::thread thread_;
  std::vector<std::unique_ptr<ProcessSet>> sets_;  // index = id; [0] is the world
  bool joined_ = false;                            // thread's copy of the join state
  std::shared_ptr<HandleState> active_join_;
  bool asleep_ = true;
  uint32_t epoch_ = 0;
  std::vector<transport::RequestPtr> doorbells_;
  TunedParams params_;    // in effect: the world coordinator's proposal
  TunedParams proposal_;  // what this rank proposes (its options, or autotune's choice)
  absl::Time next_cycle_;
  bool stopping_ = false;  // thread's copy of stop_, taken at the start of each cycle
  absl::Time stop_deadline_ = absl::InfiniteFuture();
  std::optional<Autotuner> autotuner_;
  std::unique_ptr<Timeline> timeline_;
  std::vector<char> fusion_buffer_;
  std::mutex device_mu_;  // guards the two below
  std::shared_ptr<nccl::Backend> device_backend_;
  absl::Status device_backend_error_;
  uint64_t executed_bytes_ = 0;  // in the current cycle, for autotune
  uint64_t cycle_ = 0;
};

}  // namespace ddp::engine
