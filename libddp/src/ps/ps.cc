// ddp/ps.h: roles, registration and placement, the worker's side of the protocol (protocol.h),
// and the server's thread (server.h).
#include "ddp/ps.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bootstrap/job.h"
#include "common/env.h"
#include "common/log.h"
#include "common/status.h"
#include "common/thread_priority.h"
#include "ddp/errors.h"
#include "ps/protocol.h"
#include "ps/server.h"

namespace ddp::ps {

absl::StatusOr<PsOptions> PsOptions::FromEnvironment() {
  PsOptions o;
  DDP_ASSIGN_OR_RETURN(auto servers, env::GetInt("DDP_PS_SERVERS", 0, 1 << 20));
  if (servers) o.num_servers = static_cast<int>(*servers);
  DDP_ASSIGN_OR_RETURN(auto part, env::GetBytes("DDP_PS_PARTITION_BYTES", 1024, 1LL << 30));
  if (part) o.partition_bytes = *part;
  DDP_ASSIGN_OR_RETURN(auto credit, env::GetBytes("DDP_PS_CREDIT_BYTES", 0, 1LL << 40));
  if (credit) o.credit_bytes = *credit;
  if (auto dir = env::Get("DDP_PS_CHECKPOINT_DIR")) o.checkpoint_dir = *dir;
  DDP_ASSIGN_OR_RETURN(auto steps, env::GetInt("DDP_PS_CHECKPOINT_STEPS", 0, INT64_MAX));
  if (steps) o.checkpoint_steps = *steps;
  DDP_ASSIGN_OR_RETURN(auto seconds, env::GetDouble("DDP_PS_CHECKPOINT_SECONDS", 0, 1e9));
  if (seconds) o.checkpoint_seconds = *seconds;
  DDP_ASSIGN_OR_RETURN(auto loss, env::GetChoice("DDP_PS_ON_WORKER_LOSS", {"fail", "continue"}));
  if (loss) o.on_worker_loss = *loss == 1 ? WorkerLossPolicy::kContinue : WorkerLossPolicy::kFail;
  DDP_ASSIGN_OR_RETURN(auto restart, env::GetDouble("DDP_PS_SERVER_RESTART_SECONDS", 0, 1e6));
  if (restart) o.server_restart_seconds = *restart;
  return o;
}

class ParameterServerImpl;

// One operation: a transfer (or a local request) per partition and part.
class HandleState : public std::enable_shared_from_this<HandleState> {
 public:
  transport::Transport* transport = nullptr;
  ParameterServerImpl* impl = nullptr;
  // Per partition: where it went, for sending it again to a restarted server.
  struct Slot {
    int server = -1;
    const char* payload = nullptr;
    char* out = nullptr;
    uint64_t incarnation = 0;  // the server's process it was sent to (transport's count)
    int resent = 0;
  };
  std::vector<Slot> slots;
  std::vector<transport::RequestPtr> requests;
  std::vector<bool> local;
  std::vector<size_t> of;  // which partition each request belongs to
  std::unique_ptr<RequestHeader[]> sent;
  std::unique_ptr<ResponseHeader[]> answers;
  std::vector<std::string> what;  // per partition: "push of key 'w' (partition 1 of 2) on ..."
  absl::Status failed;            // refused before anything was sent

  std::mutex mu;
  std::condition_variable posted;  // signalled as the pacer posts this operation's requests
  size_t deferred = 0;             // requests waiting in the pacer for a server's credit
  bool finished = false;
  absl::Status status;
  int64_t version = 0;
  int contributors = 0;

  absl::Status Finish();
};

absl::Status Handle::Wait() { return state_ == nullptr ? absl::OkStatus() : state_->Finish(); }

bool Handle::Test() const {
  if (state_ == nullptr) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->deferred != 0) return false;
  for (auto& r : state_->requests) {
    if (!r->Test()) return false;
  }
  return true;
}

int64_t Handle::version() const { return state_ == nullptr ? 0 : state_->version; }
int Handle::contributors() const { return state_ == nullptr ? 0 : state_->contributors; }

namespace {

Handle Refused(absl::Status status) {
  auto state = std::make_shared<HandleState>();
  state->failed = std::move(status);
  return Handle(std::move(state));
}

}  // namespace

class ParameterServerImpl {
 public:
  struct PartitionInfo {
    uint32_t id = 0;
    int server = 0;
    size_t offset = 0;  // bytes into the key
    size_t bytes = 0;
    uint64_t pushes = 0;     // this worker's pushes (the next push is pushes + 1)
    PartitionConfig config;  // as registered (sent again to a restarted server)
  };
  struct Key {
    std::string name;
    DataType type = DataType::kFloat32;
    size_t count = 0;
    KeyOptions options;
    std::vector<PartitionInfo> parts;
  };

  // Answers that returned credit, from the transport's callbacks to the pacer's thread
  // (declared before the transport, which may still run callbacks as it is destroyed).
  std::mutex freed_mu;
  std::condition_variable freed_cv;
  // (server, request) whose credit comes back: answered, or held (a notice).
  struct Freed {
    int server = 0;
    uint64_t request = 0;
    bool notice = false;       // a held notice arrived (or its receive failed): repost if it did
    uint64_t incarnation = 0;  // the server's process it concerns (stale after a restart)
  };
  std::vector<Freed> freed;
  bool pacer_stop = false;
  std::thread pacer;

  Options options;
  PsOptions ps;
  bootstrap::Job job;
  int workers = 1;
  int servers = 1;
  bool worker = true;
  bool server = true;
  std::unique_ptr<ServerLoop> loop;
  std::thread loop_thread;  // colocated
  absl::Status loop_status;

  std::mutex mu;  // guards everything below
  std::vector<Key> keys;
  std::vector<int64_t> server_bytes;
  uint32_t next_partition = 0;
  std::vector<uint64_t> next_request;  // per server
  bool finished = false;
  bool spans_hosts = false;  // some ranks of the job are on another host than others
  // The pacer (credit > 0 for a server): per server, the requests in flight (sent, neither
  // answered nor announced held) with their bytes, and those waiting for credit, in order.
  struct Waiting {
    std::shared_ptr<HandleState> state;
    size_t slot = 0;
    const char* payload = nullptr;
    char* out = nullptr;
    // Its operation no longer waits for it: sent (or parked again), or failed with `why`.
    void Release(const absl::Status& why = absl::OkStatus()) const {
      {
        std::lock_guard<std::mutex> lock(state->mu);
        if (!why.ok() && state->failed.ok()) state->failed = why;
        --state->deferred;
      }
      state->posted.notify_all();
    }
  };
  std::vector<std::map<uint64_t, int64_t>> credited;  // per server: request -> its bytes
  std::vector<int64_t> outstanding;                   // per server: credited's bytes in all
  // Per server: the standing receive of its next held notice (Part::kHeld), into notice_body.
  std::vector<uint64_t> next_notice;
  std::unique_ptr<uint64_t[]> notice_body;
  std::vector<transport::RequestPtr> notice_receive;
  int64_t deferred_total = 0;
  std::vector<std::deque<Waiting>> waiting;
  // Two requests may always be in flight at a server, whatever their size (one answered while the
  // next arrives); more while their bytes stay within the credit (many small keys).
  std::vector<int64_t> credit;  // per server; 0 = no limit
  bool HasCredit(size_t s, int64_t cost) const {
    return credited[s].size() < 2 || outstanding[s] + cost <= credit[s];
  }

  // Server restarts (ps.server_restart_seconds > 0, servers of their own). Per server: the
  // process this worker talks to (the transport's count of its incarnations), whether it is down
  // (a new process awaited, or being registered with), what was posted to it meanwhile, and why
  // it is gone for good.
  bool restarts = false;
  std::vector<uint64_t> incarnation;
  std::vector<bool> down;
  std::vector<std::deque<Waiting>> parked;
  std::vector<absl::Status> lost_server;
  int64_t recovered = 0;
  int64_t lost_pushes = 0;
  std::map<uint32_t, int64_t> lost_by_partition;
  bool recover_stop = false;
  std::condition_variable recover_cv;  // with mu
  std::thread recoverer;
  // Per partition id: this worker's pushes acknowledged (answered without error).
  std::mutex acked_mu;
  std::vector<uint64_t> acked;

  ~ParameterServerImpl() {
    StopPacer();
    StopRecoverer();
  }

  int Rank() const { return options.rank; }
  int ServerRank(int s) const { return ps.num_servers == 0 ? s : workers + s; }
  int WorkerIndex() const { return worker ? Rank() : -1; }
  int ServerIndex() const {
    if (!server) return -1;
    return ps.num_servers == 0 ? Rank() : Rank() - workers;
  }
  bool Local(int s) const { return server && ServerIndex() == s; }
  std::string PeerName(int rank) const {
    if (rank == Rank() || job.transport == nullptr) return absl::StrCat("rank ", rank);
    return job.transport->PeerName(rank);
  }
  std::string ServerName(int s) const {
    return absl::StrCat("server ", s, " (", PeerName(ServerRank(s)), ")");
  }

  absl::Status Init();
  // A fresh operation of `n` requests.
  std::shared_ptr<HandleState> NewState(size_t n) const;
  // Sends request state->sent[slot] to server `s` with `payload` (its header.bytes bytes; null
  // for none) behind it, and posts the receive of its answer into state->answers[slot] and, when
  // `out` is given, of the pulled header.bytes bytes into `out`. To this process's own server
  // through its thread. Caller holds mu.
  void Post(const std::shared_ptr<HandleState>& state, size_t slot, int s, const char* payload,
            char* out);
  // Post's transfers to a remote server; `cost` bytes of its credit come back with the answer
  // or a held notice, whichever comes first.
  void Send(const std::shared_ptr<HandleState>& state, size_t slot, int s, const char* payload,
            char* out, int64_t cost);
  void PostNoticeReceive(int s);
  void Return(int s, uint64_t request);
  // Sends what waited for server s's credit, while there is credit. Caller holds mu.
  void SendWaiting(int s);
  // Whether partition slot `slot` failed with its server's process and goes again to the next.
  bool Restartable(const HandleState::Slot& slot) const;
  void Resend(const std::shared_ptr<HandleState>& state, size_t slot);
  // The recoverer's thread: waits for a failed server's new process, registers every key again
  // with it, then sends what was parked.
  void Recover();
  absl::Status RecoverServer(int s, int64_t* lost, std::map<uint32_t, int64_t>* by_partition);
  void StopRecoverer();
  // The pacer's thread: returns credit and sends what waited for it.
  void Pace();
  void StopPacer();
  Handle Submit(int key, Op op, const void* gradient, void* out);
  absl::Status Finish();
};

absl::Status ParameterServerImpl::Init() {
  DDP_RETURN_IF_ERROR(options.Validate());
  log::SetLevel(options.log_level);
  log::SetRank(options.rank);
  if (ps.num_servers < 0 || ps.num_servers >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DDP_PS_SERVERS=", ps.num_servers, " leaves no worker in a job of ", options.size,
        " ranks (servers are the last ranks; 0 = every rank serves and works)"));
  }
  if (ps.partition_bytes < 1024) {
    return absl::InvalidArgumentError("DDP_PS_PARTITION_BYTES must be at least 1024");
  }
  if (ps.num_servers == 0) {
    workers = servers = options.size;
  } else {
    servers = ps.num_servers;
    workers = options.size - servers;
    worker = options.rank < workers;
    server = !worker;
  }
  DDP_ASSIGN_OR_RETURN(job, bootstrap::AssembleJob(&options, 0));
  if (job.transport) {
    job.transport->SetPeerFailurePolicy(transport::Transport::PeerFailurePolicy::kIsolatePeer);
  }
  next_request.assign(static_cast<size_t>(servers), 0);
  server_bytes.assign(static_cast<size_t>(servers), 0);
  outstanding.assign(static_cast<size_t>(servers), 0);
  waiting.resize(static_cast<size_t>(servers));
  if (ps.credit_bytes < PsOptions::kCreditAcrossHosts) {
    return absl::InvalidArgumentError("DDP_PS_CREDIT_BYTES must be >= 0");
  }
  credit.assign(static_cast<size_t>(servers), 0);
  credited.resize(static_cast<size_t>(servers));
  next_notice.assign(static_cast<size_t>(servers), 0);
  notice_body.reset(new uint64_t[static_cast<size_t>(servers)]());
  notice_receive.resize(static_cast<size_t>(servers));
  for (int s = 0; s < servers; ++s) {
    const bool other_host =
        job.hosts.size() == static_cast<size_t>(options.size) &&
        job.hosts[static_cast<size_t>(ServerRank(s))] != job.hosts[static_cast<size_t>(Rank())];
    credit[static_cast<size_t>(s)] = ps.credit_bytes != PsOptions::kCreditAcrossHosts
                                         ? ps.credit_bytes
                                     : other_host ? int64_t{512} << 10
                                                  : 0;
  }
  spans_hosts = job.hosts.size() == static_cast<size_t>(options.size) &&
                std::any_of(job.hosts.begin(), job.hosts.end(),
                            [this](const std::string& h) { return h != job.hosts[0]; });
  restarts = worker && ps.num_servers > 0 && ps.server_restart_seconds > 0 && job.transport;
  incarnation.assign(static_cast<size_t>(servers), 0);
  down.assign(static_cast<size_t>(servers), false);
  parked.resize(static_cast<size_t>(servers));
  lost_server.resize(static_cast<size_t>(servers));
  if (restarts) {
    recoverer = std::thread([this] {
      NameThisThread("ddp-ps-recover");
      Recover();
    });
  }
  if (worker && std::any_of(credit.begin(), credit.end(), [](int64_t c) { return c > 0; })) {
    std::lock_guard<std::mutex> lock(mu);
    for (int s = 0; s < servers; ++s) {
      if (credit[static_cast<size_t>(s)] > 0 && !Local(s)) PostNoticeReceive(s);
    }
    pacer = std::thread([this] {
      NameThisThread("ddp-ps-pacer");
      Pace();
    });
  }
  if (server) {
    CoreConfig c;
    c.num_workers = workers;
    c.server_index = ServerIndex();
    c.num_servers = servers;
    for (int w = 0; w < workers; ++w) c.worker_ranks.push_back(w);
    c.worker_name = [this](int w) { return absl::StrCat("worker ", w, " (", PeerName(w), ")"); };
    c.on_worker_loss = ps.on_worker_loss;
    c.wait_limit = options.timeout * 0.8;
    c.checkpoint_dir = ps.checkpoint_dir;
    c.checkpoint_steps = ps.checkpoint_steps;
    c.checkpoint_seconds = ps.checkpoint_seconds;
    loop = std::make_unique<ServerLoop>(std::move(c), job.transport.get(), worker ? Rank() : -1);
    if (worker) {
      loop_thread = std::thread([this] {
        NameThisThread("ddp-ps-server");
        loop_status = loop->Run();
        if (!loop_status.ok()) {
          DDP_LOG(kError, "parameter server %d: %s", ServerIndex(), loop_status.message());
        }
      });
    }
  }
  DDP_LOG(kInfo, "parameter-server job: rank %d of %d, %s; %d workers, %d servers%s", Rank(),
          options.size,
          worker && server ? "worker and server"
          : worker         ? "worker"
                           : "server",
          workers, servers, ps.num_servers == 0 ? " (colocated)" : "");
  return absl::OkStatus();
}

std::shared_ptr<HandleState> ParameterServerImpl::NewState(size_t n) const {
  auto state = std::make_shared<HandleState>();
  state->transport = job.transport.get();
  state->impl = const_cast<ParameterServerImpl*>(this);
  state->slots.resize(n);
  state->sent.reset(new RequestHeader[n]);
  state->answers.reset(new ResponseHeader[n]);
  return state;
}

void ParameterServerImpl::Post(const std::shared_ptr<HandleState>& state, size_t slot, int s,
                               const char* payload, char* out) {
  const RequestHeader& h = state->sent[slot];
  const auto add = [&](transport::RequestPtr r, bool local) {
    state->requests.push_back(std::move(r));
    state->local.push_back(local);
    state->of.push_back(slot);
  };
  if (Local(s)) {
    LocalRequest r;
    r.header = h;
    r.payload = payload;
    r.out = out;
    r.response = &state->answers[slot];
    r.done = std::make_shared<transport::Request>();
    r.keep = state;
    add(r.done, true);
    loop->SubmitLocal(std::move(r));
    return;
  }
  const auto si = static_cast<size_t>(s);
  HandleState::Slot& where = state->slots[slot];
  where.server = s;
  where.payload = payload;
  where.out = out;
  if (restarts) {
    if (!lost_server[si].ok()) {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->failed.ok()) state->failed = Annotate(lost_server[si], state->what[slot]);
      return;
    }
    const int rank = ServerRank(s);
    if (down[si] || job.transport->peer_incarnation(rank) != incarnation[si] ||
        job.transport->peer_state(rank) != transport::Transport::PeerState::kAlive) {
      // Its process failed: this waits for the next one (Recover).
      if (!down[si]) {
        down[si] = true;
        recover_cv.notify_all();
      }
      parked[si].push_back(Waiting{state, slot, payload, out});
      std::lock_guard<std::mutex> lock(state->mu);
      ++state->deferred;
      return;
    }
  }
  int64_t cost = 0;
  if (credit[static_cast<size_t>(s)] > 0) {
    const auto i = static_cast<size_t>(s);
    state->sent[slot].flags |= kWantsHeldNotice;
    cost = static_cast<int64_t>(h.bytes);
    if (!waiting[i].empty() || !HasCredit(i, cost)) {
      waiting[i].push_back(Waiting{state, slot, payload, out});
      ++deferred_total;
      std::lock_guard<std::mutex> lock(state->mu);
      ++state->deferred;
      return;
    }
  }
  Send(state, slot, s, payload, out, cost);
}

void ParameterServerImpl::Send(const std::shared_ptr<HandleState>& state, size_t slot, int s,
                               const char* payload, char* out, int64_t cost) {
  const RequestHeader& h = state->sent[slot];
  const auto add = [&](transport::RequestPtr r) {
    state->requests.push_back(std::move(r));
    state->local.push_back(false);
    state->of.push_back(slot);
  };
  const int rank = ServerRank(s);
  const uint64_t req = next_request[static_cast<size_t>(s)]++;
  const uint64_t inc = incarnation[static_cast<size_t>(s)];
  state->slots[slot].incarnation = inc;
  transport::Transport& t = *job.transport;
  transport::RequestPtr answer = t.Irecv(rank, Tag(req, Part::kResponse), transport::Descriptor{},
                                         &state->answers[slot], sizeof(ResponseHeader));
  const bool credited_request = credit[static_cast<size_t>(s)] > 0;
  // A push's acknowledgement is counted, for a restarted server to tell what it lost.
  const uint64_t seq = restarts && (h.op == static_cast<uint32_t>(Op::kPush) ||
                                    h.op == static_cast<uint32_t>(Op::kPushPull))
                           ? h.seq
                           : 0;
  if (credited_request) {
    credited[static_cast<size_t>(s)][req] = cost;
    outstanding[static_cast<size_t>(s)] += cost;
  }
  if (credited_request || seq > 0) {
    // Answered or failed, the credit comes back (the callback may run here, at once).
    transport::Request* done = answer.get();
    const ResponseHeader* got = &state->answers[slot];
    const uint32_t id = h.partition;
    answer->OnComplete([this, s, req, inc, credited_request, seq, done, got, id] {
      if (seq > 0 && done->status().ok() && got->magic == kMagic && got->code == 0) {
        std::lock_guard<std::mutex> lock(acked_mu);
        if (id < acked.size()) acked[id] = std::max(acked[id], seq);
      }
      if (!credited_request) return;
      {
        std::lock_guard<std::mutex> lock(freed_mu);
        freed.push_back(Freed{s, req, false, inc});
      }
      freed_cv.notify_one();
    });
  }
  add(std::move(answer));
  if (out != nullptr) {
    add(t.Irecv(rank, Tag(req, Part::kResponsePayload), transport::Descriptor{}, out, h.bytes));
  }
  add(t.Isend(rank, Tag(req, Part::kRequest), transport::Descriptor{}, &h, sizeof(h)));
  if (payload != nullptr) {
    add(t.Isend(rank, Tag(req, Part::kRequestPayload), transport::Descriptor{}, payload, h.bytes));
  }
}

void ParameterServerImpl::PostNoticeReceive(int s) {
  const auto i = static_cast<size_t>(s);
  notice_receive[i] =
      job.transport->Irecv(ServerRank(s), Tag(next_notice[i]++, Part::kHeld),
                           transport::Descriptor{}, &notice_body[i], sizeof(uint64_t));
  const uint64_t inc = incarnation[i];
  notice_receive[i]->OnComplete([this, s, inc] {
    {
      std::lock_guard<std::mutex> lock(freed_mu);
      freed.push_back(Freed{s, 0, true, inc});
    }
    freed_cv.notify_one();
  });
}

void ParameterServerImpl::Return(int s, uint64_t request) {
  const auto i = static_cast<size_t>(s);
  auto it = credited[i].find(request);
  if (it == credited[i].end()) return;  // returned already (held, then answered)
  outstanding[i] -= it->second;
  credited[i].erase(it);
}

void ParameterServerImpl::Pace() {
  for (;;) {
    std::vector<Freed> got;
    {
      std::unique_lock<std::mutex> lock(freed_mu);
      freed_cv.wait(lock, [this] { return pacer_stop || !freed.empty(); });
      if (freed.empty()) return;  // stopping, and nothing left to return
      got.swap(freed);
    }
    std::lock_guard<std::mutex> lock(mu);
    for (const Freed& f : got) {
      const int s = f.server;
      const auto i = static_cast<size_t>(s);
      if (f.incarnation != incarnation[i]) continue;  // the server's previous process
      if (!f.notice) {
        Return(s, f.request);
      } else {
        if (!notice_receive[i]->status().ok()) continue;  // the server left, or failed
        Return(s, notice_body[i]);
        if (!finished || !waiting[i].empty() || !credited[i].empty()) PostNoticeReceive(s);
      }
      SendWaiting(s);
    }
  }
}

void ParameterServerImpl::SendWaiting(int s) {
  const auto i = static_cast<size_t>(s);
  while (!waiting[i].empty()) {
    Waiting w = waiting[i].front();
    const auto cost = static_cast<int64_t>(w.state->sent[w.slot].bytes);
    if (!HasCredit(i, cost)) break;
    waiting[i].pop_front();
    Send(w.state, w.slot, s, w.payload, w.out, cost);
    w.Release();
  }
}

void ParameterServerImpl::StopPacer() {
  {
    std::lock_guard<std::mutex> lock(freed_mu);
    pacer_stop = true;
  }
  freed_cv.notify_one();
  if (pacer.joinable()) pacer.join();
  // What still waits will never be sent (a request to a failed server is refused at once, so
  // its queue drains before the pacer stops; this is for anything else): its operation fails
  // rather than wait forever.
  std::lock_guard<std::mutex> lock(mu);
  for (auto& queue : waiting) {
    for (Waiting& w : queue) {
      w.Release(absl::CancelledError(absl::StrCat(
          w.state->what[w.slot], ": never sent (the worker finished before its turn)")));
    }
    queue.clear();
  }
}

absl::Status HandleState::Finish() {
  std::unique_lock<std::mutex> lock(mu);
  if (finished) return status;
  std::vector<absl::Status> transfer(what.size());
  size_t begin = 0;
  for (;;) {
    posted.wait(lock, [this] { return deferred == 0; });
    const size_t end = requests.size();
    for (size_t i = begin; i < end; ++i) {
      absl::Status s = local[i] || transport == nullptr ? requests[i]->Wait()
                                                        : transport->Wait(requests[i].get());
      if (!s.ok() && transfer[of[i]].ok()) transfer[of[i]] = s;
    }
    begin = end;
    if (impl == nullptr || !failed.ok()) break;
    // Partitions whose server's process failed go again, to its next one (a restart).
    std::vector<size_t> again;
    for (size_t p = 0; p < transfer.size(); ++p) {
      if (!transfer[p].ok() && impl->Restartable(slots[p])) again.push_back(p);
    }
    if (again.empty()) break;
    lock.unlock();
    for (size_t p : again) impl->Resend(shared_from_this(), p);
    lock.lock();
    for (size_t p : again) transfer[p] = absl::OkStatus();
  }
  status = failed;
  version = INT64_MAX;
  contributors = INT32_MAX;
  for (size_t p = 0; p < what.size() && status.ok(); ++p) {
    if (!transfer[p].ok()) {
      status = Annotate(transfer[p], what[p]);
      break;
    }
    const ResponseHeader& r = answers[p];
    absl::Status s = CheckResponse(r);
    if (s.ok()) s = ResponseStatus(r);
    if (!s.ok()) {
      status = Annotate(s, what[p]);
      break;
    }
    version = std::min(version, r.version);
    contributors = std::min(contributors, static_cast<int>(r.contributors));
  }
  if (what.empty()) version = contributors = 0;
  finished = true;
  return status;
}

bool ParameterServerImpl::Restartable(const HandleState::Slot& slot) const {
  if (!restarts || slot.server < 0 || Local(slot.server) || slot.resent >= 4) return false;
  const int rank = ServerRank(slot.server);
  return job.transport->peer_incarnation(rank) != slot.incarnation ||
         job.transport->peer_state(rank) != transport::Transport::PeerState::kAlive;
}

void ParameterServerImpl::Resend(const std::shared_ptr<HandleState>& state, size_t slot) {
  std::lock_guard<std::mutex> lock(mu);
  HandleState::Slot& where = state->slots[slot];
  ++where.resent;
  Post(state, slot, where.server, where.payload, where.out);
}

void ParameterServerImpl::StopRecoverer() {
  {
    std::lock_guard<std::mutex> lock(mu);
    recover_stop = true;
  }
  recover_cv.notify_all();
  if (recoverer.joinable()) recoverer.join();
  // What is still parked will never be sent: its operations fail rather than wait forever.
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i = 0; i < parked.size(); ++i) {
    for (Waiting& w : parked[i]) {
      w.Release(absl::CancelledError(
          absl::StrCat(w.state->what[w.slot], ": never sent (the worker finished while ",
                       ServerName(static_cast<int>(i)), " was restarting)")));
    }
    parked[i].clear();
  }
}

void ParameterServerImpl::Recover() {
  for (;;) {
    int s = -1;
    {
      std::unique_lock<std::mutex> lock(mu);
      recover_cv.wait(lock, [&] {
        if (recover_stop) return true;
        for (size_t i = 0; i < down.size(); ++i) {
          if (down[i] && lost_server[i].ok()) {
            s = static_cast<int>(i);
            return true;
          }
        }
        return false;
      });
      if (recover_stop) return;
    }
    int64_t lost = 0;
    std::map<uint32_t, int64_t> by_partition;
    const absl::Status status = RecoverServer(s, &lost, &by_partition);
    std::vector<Waiting> release;
    {
      std::lock_guard<std::mutex> lock(mu);
      const auto i = static_cast<size_t>(s);
      if (!status.ok()) {
        lost_server[i] = status;
        DDP_LOG(kError, "parameter server: %s", status.message());
      } else {
        down[i] = false;
        ++recovered;
        lost_pushes += lost;
        for (const auto& [id, n] : by_partition) lost_by_partition[id] += n;
        DDP_LOG(kWarning,
                "parameter server: %s restarted; this worker registered its keys again, and "
                "%d of its acknowledged pushes were lost (after the server's last checkpoint)",
                ServerName(s), lost);
        SendWaiting(s);
      }
      release.assign(parked[i].begin(), parked[i].end());
      parked[i].clear();
      for (Waiting& w : release) {
        // Sent now (or failed with the server); parked again if it already failed once more.
        Post(w.state, w.slot, s, w.payload, w.out);
      }
    }
    for (Waiting& w : release) w.Release();
  }
}

absl::Status ParameterServerImpl::RecoverServer(int s, int64_t* lost,
                                                std::map<uint32_t, int64_t>* by_partition) {
  const int rank = ServerRank(s);
  const auto i = static_cast<size_t>(s);
  transport::Transport& t = *job.transport;
  const absl::Time deadline = absl::Now() + absl::Seconds(ps.server_restart_seconds);
  const absl::Status why = t.peer_error(rank);
  DDP_LOG(kWarning, "parameter server: %s failed (%s); waiting up to %s for its new process",
          ServerName(s), why.message(), absl::FormatDuration(deadline - absl::Now()));
  for (;;) {
    uint64_t old;
    {
      std::lock_guard<std::mutex> lock(mu);
      old = incarnation[i];
    }
    while (t.peer_incarnation(rank) == old ||
           t.peer_state(rank) != transport::Transport::PeerState::kAlive) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (recover_stop) return absl::CancelledError("the worker finished");
      }
      if (absl::Now() > deadline) {
        return WithRanks(
            absl::UnavailableError(absl::StrCat(
                ServerName(s), " failed (", t.peer_error(rank).message(),
                ") and no new process took its place within ",
                absl::FormatDuration(absl::Seconds(ps.server_restart_seconds)),
                " (DDP_PS_SERVER_RESTART_SECONDS; ddprun --restart-servers restarts servers)")),
            {rank});
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    // Its new process: numbering starts afresh, and every key goes to it again (kInitRejoin)
    // before anything else, with this worker's acknowledged pushes.
    std::vector<std::shared_ptr<HandleState>> inits;
    uint64_t now_serving;
    // The old process's answers all completed when it failed: this count is final. Copied, as
    // the answers' callbacks take acked_mu inside the transport's lock, which Send takes.
    std::vector<uint64_t> acked_now;
    {
      std::lock_guard<std::mutex> ack_lock(acked_mu);
      acked_now = acked;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      now_serving = incarnation[i] = t.peer_incarnation(rank);
      next_request[i] = 0;
      credited[i].clear();
      outstanding[i] = 0;
      next_notice[i] = 0;
      if (credit[i] > 0) PostNoticeReceive(s);
      for (const Key& key : keys) {
        for (size_t p = 0; p < key.parts.size(); ++p) {
          const PartitionInfo& part = key.parts[p];
          if (part.server != s) continue;
          auto state = NewState(1);
          state->impl = nullptr;  // a failure here is handled below, not resent
          RequestHeader& h = state->sent[0];
          h.op = static_cast<uint32_t>(Op::kInit);
          h.partition = part.id;
          h.config = part.config;
          h.flags = kInitRejoin;
          h.seq = part.id < acked_now.size() ? acked_now[part.id] : 0;
          state->what.push_back(
              absl::StrCat("register key '", key.name, "'",
                           key.parts.size() > 1 ? absl::StrCat(" (partition ", p, ")") : "",
                           " again with restarted ", ServerName(s)));
          state->slots[0].server = s;
          Send(state, 0, s, nullptr, nullptr, 0);
          inits.push_back(std::move(state));
        }
      }
    }
    absl::Status first;
    int64_t gone = 0;
    for (auto& state : inits) {
      absl::Status r = state->Finish();
      if (r.ok()) {
        gone += static_cast<int64_t>(state->answers[0].lost);
        (*by_partition)[state->sent[0].partition] += static_cast<int64_t>(state->answers[0].lost);
      }
      if (!r.ok() && first.ok()) first = r;
    }
    if (first.ok()) {
      *lost = gone;
      return absl::OkStatus();
    }
    // The new process failed too: wait for the next one; an answer from it is final.
    if (t.peer_incarnation(rank) == now_serving &&
        t.peer_state(rank) == transport::Transport::PeerState::kAlive) {
      return first;
    }
  }
}

Handle ParameterServerImpl::Submit(int key_id, Op op, const void* gradient, void* out) {
  std::lock_guard<std::mutex> lock(mu);
  if (!worker) return Refused(absl::FailedPreconditionError("this rank is a server, not a worker"));
  if (finished) {
    return Refused(absl::FailedPreconditionError(
        absl::StrCat(OpName(op), " after Finish(): this worker has left the job")));
  }
  if (key_id < 0 || static_cast<size_t>(key_id) >= keys.size()) {
    return Refused(absl::InvalidArgumentError(absl::StrCat("no key ", key_id)));
  }
  Key& key = keys[static_cast<size_t>(key_id)];
  const bool pushes = op == Op::kPush || op == Op::kPushPull;
  const bool pulls = op == Op::kPull || op == Op::kPushPull;
  if ((pushes && gradient == nullptr) || (pulls && out == nullptr)) {
    return Refused(absl::InvalidArgumentError(
        absl::StrCat(OpName(op), " of key '", key.name, "' with a null buffer")));
  }
  const size_t n = key.parts.size();
  auto state = NewState(n);
  for (size_t i = 0; i < n; ++i) {
    PartitionInfo& part = key.parts[i];
    RequestHeader& h = state->sent[i];
    h.op = static_cast<uint32_t>(op);
    h.partition = part.id;
    if (pushes) h.seq = ++part.pushes;
    h.clock = static_cast<int64_t>(part.pushes);
    h.bytes = part.bytes;
    state->what.push_back(absl::StrCat(OpName(op), " of key '", key.name, "'",
                                       n > 1 ? absl::StrCat(" (partition ", i, " of ", n, ")") : "",
                                       " on ", ServerName(part.server)));
    Post(state, i, part.server, pushes ? static_cast<const char*>(gradient) + part.offset : nullptr,
         pulls ? static_cast<char*>(out) + part.offset : nullptr);
  }
  return Handle(std::move(state));
}

absl::Status ParameterServerImpl::Finish() {
  std::vector<Handle> dones;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (finished) return absl::OkStatus();
    finished = true;
    if (worker) {
      for (int s = 0; s < servers; ++s) {
        if (!Local(s) && !down[static_cast<size_t>(s)] &&
            job.transport->peer_state(ServerRank(s)) != transport::Transport::PeerState::kAlive) {
          continue;  // a server gone already is told nothing
        }
        auto state = NewState(1);
        state->sent[0].op = static_cast<uint32_t>(Op::kDone);
        state->what.push_back(absl::StrCat("finish on ", ServerName(s)));
        Post(state, 0, s, nullptr, nullptr);
        dones.emplace_back(std::move(state));
      }
    }
  }
  absl::Status first;
  for (Handle& h : dones) {
    absl::Status s = h.Wait();
    if (!s.ok()) {
      DDP_LOG(kWarning, "parameter server: %s", s.message());
      if (first.ok()) first = s;
    }
  }
  StopPacer();  // nothing waits in it: the goodbyes were the last requests, and are answered
  StopRecoverer();
  if (loop_thread.joinable()) loop_thread.join();
  if (!loop_status.ok() && first.ok()) first = loop_status;
  if (job.transport) job.transport->Shutdown().IgnoreError();
  if (job.store_server) job.store_server->Stop();
  return first;
}

// ParameterServer.

ParameterServer::ParameterServer(std::unique_ptr<ParameterServerImpl> impl)
    : impl_(std::move(impl)) {}

ParameterServer::~ParameterServer() {
  if (impl_->server && !impl_->worker) {
    if (impl_->job.transport) impl_->job.transport->Shutdown().IgnoreError();
    return;
  }
  Finish().IgnoreError();
}

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(
    const Options& options, const PsOptions& ps_options) {
  auto impl = std::make_unique<ParameterServerImpl>();
  impl->options = options;
  impl->ps = ps_options;
  absl::Status status = impl->Init();
  if (!status.ok()) {
    if (impl->job.transport) impl->job.transport->Shutdown().IgnoreError();
    return Annotate(status, absl::StrCat("ddp parameter server init (rank ", options.rank, " of ",
                                         options.size, ")"));
  }
  return std::unique_ptr<ParameterServer>(new ParameterServer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::CreateFromEnvironment() {
  DDP_ASSIGN_OR_RETURN(Options options, Options::FromEnvironment());
  DDP_ASSIGN_OR_RETURN(PsOptions ps, PsOptions::FromEnvironment());
  return Create(options, ps);
}

int ParameterServer::rank() const { return impl_->Rank(); }
int ParameterServer::size() const { return impl_->options.size; }
bool ParameterServer::is_worker() const { return impl_->worker; }
bool ParameterServer::is_server() const { return impl_->server; }
int ParameterServer::num_workers() const { return impl_->workers; }
int ParameterServer::num_servers() const { return impl_->servers; }
int ParameterServer::worker_index() const { return impl_->WorkerIndex(); }
int ParameterServer::server_index() const { return impl_->ServerIndex(); }
int ParameterServer::ServerRank(int server) const { return impl_->ServerRank(server); }
int ParameterServer::WorkerRank(int worker) const { return worker; }

absl::Status ParameterServer::Serve() {
  if (!impl_->server || impl_->worker) return absl::OkStatus();
  absl::Status status = impl_->loop->Run();
  if (impl_->job.transport) impl_->job.transport->Shutdown().IgnoreError();
  if (impl_->job.store_server) impl_->job.store_server->Stop();
  return status;
}

absl::StatusOr<int> ParameterServer::Register(const std::string& name, DataType type,
                                              absl::Span<const int64_t> shape, const void* initial,
                                              const KeyOptions& options) {
  ParameterServerImpl& m = *impl_;
  if (!m.worker) return absl::FailedPreconditionError("Register on a server rank");
  if (name.empty() || name.size() >= kNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("key name '", name, "' must have 1 to ", kNameBytes - 1, " characters"));
  }
  if (static_cast<int>(type) >= kNumDataTypes) {
    return absl::InvalidArgumentError(absl::StrCat("key '", name, "': unknown dtype"));
  }
  size_t count = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && count > (size_t{1} << 40) / static_cast<size_t>(d))) {
      return absl::InvalidArgumentError(absl::StrCat("key '", name, "': bad shape"));
    }
    count *= static_cast<size_t>(d);
  }
  if (count == 0) return absl::InvalidArgumentError(absl::StrCat("key '", name, "' is empty"));
  const bool async = options.consistency == Consistency::kAsync;
  if (async && !IsFloating(type)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", name,
                     "': async keys need a floating dtype (the server applies an optimizer), not ",
                     DataTypeName(type)));
  }
  if (options.optimizer.name.empty() || options.optimizer.name.size() >= kOptimizerNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("key '", name, "': bad optimizer name"));
  }
  if (options.staleness < -1) {
    return absl::InvalidArgumentError(absl::StrCat("key '", name, "': staleness must be >= -1"));
  }
  if (m.WorkerIndex() == 0 && initial == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", name, "': worker 0 must give the initial value"));
  }
  // Partitions of at most partition_bytes; and a key of 256 KiB or more is spread over every
  // server (in as many equal parts at least), so that one large tensor never makes one server
  // the hot spot (what users of ps-lite and TensorFlow's parameter servers complain of).
  // In a job across hosts, larger keys are cut finer still, up to kPipelineDepth partitions
  // per server of at least 256 KiB each: a partition's pull can be answered only once every
  // worker's push of it has arrived, so with one partition per server a worker's link sends the
  // whole push and then receives the whole pull (2M/B); with d per server, the pulls of the
  // first overlap the pushes of the rest, and a step costs about (1 + 1/d) M/B
  // (docs/parameter-server.md). Within one host there is no link to pipeline, and every
  // partition costs the server's thread a wake-up: there the cut stays at one per server.
  constexpr size_t kSpreadBytes = size_t{256} << 10;
  constexpr size_t kPipelineDepth = 16;
  const size_t es = DataTypeSize(type);
  const size_t max_per = std::max<size_t>(1, static_cast<size_t>(m.ps.partition_bytes) / es);
  size_t nparts = (count + max_per - 1) / max_per;
  if (count * es >= kSpreadBytes) {
    const size_t servers = static_cast<size_t>(m.servers);
    const size_t depth =
        m.spans_hosts ? std::clamp<size_t>(count * es / (servers * kSpreadBytes), 1, kPipelineDepth)
                      : 1;
    nparts = std::max(nparts, std::min(count, servers * depth));
  }
  const size_t per = (count + nparts - 1) / nparts;
  nparts = (count + per - 1) / per;
  int key_id;
  std::vector<PartitionConfig> configs;
  std::vector<std::string> shares;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.finished) return absl::FailedPreconditionError("Register after Finish()");
    for (const auto& k : m.keys) {
      if (k.name == name) {
        return absl::AlreadyExistsError(absl::StrCat("key '", name, "' is registered already"));
      }
    }
    ParameterServerImpl::Key key;
    key.name = name;
    key.type = type;
    key.count = count;
    key.options = options;
    key_id = static_cast<int>(m.keys.size());
    for (size_t i = 0; i < nparts; ++i) {
      ParameterServerImpl::PartitionInfo part;
      part.id = m.next_partition++;
      part.offset = i * per * es;
      part.bytes = std::min(per, count - i * per) * es;
      // Size-balanced: the server holding the fewest bytes so far (the lowest index on a tie).
      part.server = static_cast<int>(
          std::min_element(m.server_bytes.begin(), m.server_bytes.end()) - m.server_bytes.begin());
      m.server_bytes[static_cast<size_t>(part.server)] += static_cast<int64_t>(part.bytes);
      key.parts.push_back(part);
      PartitionConfig c;
      std::memcpy(c.key_name, name.data(), name.size());
      c.key_id = static_cast<uint32_t>(key_id);
      c.part = static_cast<uint32_t>(i);
      c.parts = static_cast<uint32_t>(nparts);
      c.dtype = static_cast<uint8_t>(type);
      c.consistency = static_cast<uint8_t>(options.consistency);
      c.staleness = async ? options.staleness : -1;
      c.count = part.bytes / es;
      if (async) {
        const OptimizerConfig& o = options.optimizer;
        std::memcpy(c.optimizer, o.name.data(), o.name.size());
        c.learning_rate = o.learning_rate;
        c.momentum = o.momentum;
        c.nesterov = o.nesterov ? 1 : 0;
        c.beta1 = o.beta1;
        c.beta2 = o.beta2;
        c.epsilon = o.epsilon;
        c.weight_decay = o.weight_decay;
        c.gradient_scale = o.gradient_scale;
      }
      key.parts.back().config = c;
      configs.push_back(c);
    }
    m.keys.push_back(std::move(key));
    {
      std::lock_guard<std::mutex> ack_lock(m.acked_mu);
      m.acked.resize(m.next_partition, 0);
    }
    for (size_t s = 0; s < m.server_bytes.size(); ++s) {
      shares.push_back(absl::StrCat(m.server_bytes[s]));
    }
  }
  if (m.WorkerIndex() == 0) {
    DDP_LOG(kInfo, "parameter server: key '%s' (%d bytes) in %d partitions; bytes per server: %s",
            name, count * es, nparts, absl::StrJoin(shares, " "));
  }
  // One init per partition, all in flight together.
  std::vector<std::shared_ptr<HandleState>> states;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    ParameterServerImpl::Key& key = m.keys[static_cast<size_t>(key_id)];
    for (size_t i = 0; i < nparts; ++i) {
      auto state = m.NewState(1);
      RequestHeader& h = state->sent[0];
      const auto& part = key.parts[i];
      h.op = static_cast<uint32_t>(Op::kInit);
      h.partition = part.id;
      h.config = configs[i];
      const char* value = nullptr;
      if (m.WorkerIndex() == 0) {
        h.flags = kInitHasValue;
        h.bytes = part.bytes;
        value = static_cast<const char*>(initial) + part.offset;
      }
      state->what.push_back(absl::StrCat("register key '", name, "'",
                                         nparts > 1 ? absl::StrCat(" (partition ", i, ")") : "",
                                         " on ", m.ServerName(part.server)));
      m.Post(state, 0, part.server, value, nullptr);
      states.push_back(std::move(state));
    }
  }
  absl::Status first;
  for (size_t i = 0; i < states.size(); ++i) {
    absl::Status s = states[i]->Finish();
    if (!s.ok() && first.ok()) first = s;
    if (s.ok()) {
      std::lock_guard<std::mutex> lock(m.mu);
      m.keys[static_cast<size_t>(key_id)].parts[i].pushes = states[i]->answers[0].seq_base;
      std::lock_guard<std::mutex> ack_lock(m.acked_mu);
      m.acked[m.keys[static_cast<size_t>(key_id)].parts[i].id] = states[i]->answers[0].seq_base;
    }
  }
  if (!first.ok()) return first;
  return key_id;
}

size_t ParameterServer::KeyCount(int key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (key < 0 || static_cast<size_t>(key) >= impl_->keys.size()) return 0;
  return impl_->keys[static_cast<size_t>(key)].count;
}

std::vector<int64_t> ParameterServer::ServerBytes() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->server_bytes;
}

Handle ParameterServer::Push(int key, const void* gradient) {
  return impl_->Submit(key, Op::kPush, gradient, nullptr);
}
Handle ParameterServer::Pull(int key, void* out) {
  return impl_->Submit(key, Op::kPull, nullptr, out);
}
Handle ParameterServer::PushPull(int key, const void* gradient, void* out) {
  return impl_->Submit(key, Op::kPushPull, gradient, out);
}

absl::Status ParameterServer::Finish() {
  if (!impl_->worker) return absl::OkStatus();
  return impl_->Finish();
}

int64_t ParameterServer::requests_deferred() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->deferred_total;
}

int64_t ParameterServer::servers_recovered() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->recovered;
}

int64_t ParameterServer::pushes_lost() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lost_pushes;
}

int64_t ParameterServer::pushes_lost(int key) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (key < 0 || static_cast<size_t>(key) >= impl_->keys.size()) return 0;
  int64_t most = 0;
  for (const auto& part : impl_->keys[static_cast<size_t>(key)].parts) {
    auto it = impl_->lost_by_partition.find(part.id);
    if (it != impl_->lost_by_partition.end()) most = std::max(most, it->second);
  }
  return most;
}

ServerStats ParameterServer::server_stats() const {
  return impl_->loop ? impl_->loop->stats() : ServerStats{};
}

}  // namespace ddp::ps
