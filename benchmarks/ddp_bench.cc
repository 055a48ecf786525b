// ddp-bench: nccl-tests-style benchmark of libddp collectives; with -np N it launches the ranks.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "ddp/ddp.h"

extern char** environ;

namespace {

using ddp::DataType;
using ddp::ReduceOp;

enum class Op { kAllreduce, kAllgather, kBroadcast, kReduceScatter, kAlltoall };
constexpr const char* kOpNames[] = {"allreduce", "allgather", "broadcast", "reducescatter",
                                    "alltoall"};

const char* OpName(Op op) { return kOpNames[static_cast<int>(op)]; }
bool IsReduction(Op op) { return op == Op::kAllreduce || op == Op::kReduceScatter; }
// Ops whose -b/-e size is the whole buffer, split into one block per rank.
bool IsBlocked(Op op) { return op != Op::kAllreduce && op != Op::kBroadcast; }

struct Config {
  int np = 0;  // > 0: this process is the launcher
  Op op = Op::kAllreduce;
  size_t min_bytes = 8;
  size_t max_bytes = size_t{64} << 20;
  double factor = 2;
  DataType dtype = DataType::kFloat32;
  ReduceOp redop = ReduceOp::kSum;
  std::optional<std::string> transport;  // only when given, so DDP_TRANSPORT wins otherwise
  std::optional<std::string> algo;
  int warmup = 5;
  int iters = 20;
  int repeats = 5;
  bool inplace = false;
  bool check = true;
};

constexpr const char* kUsage =
    "usage: ddp-bench [-np N] [--op allreduce|allgather|broadcast|reducescatter|alltoall]\n"
    "  [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [--dtype f32|f64|f16|bf16|i8|u8|i32|i64]\n"
    "  [--redop sum|average|min|max|product] [--transport auto|tcp] [--algo auto|ring|rd]\n"
    "  [-w WARMUP_ITERS] [-n ITERS] [-r REPEATS] [--inplace] [--check 0|1]\n"
    "Sizes take K, M, G suffixes (powers of 1024). Without -np it runs as one rank of a job\n"
    "described by DDP_* variables (or alone).\n";

std::string Str(absl::string_view s) { return std::string(s); }

// ----------------------------------------------------------------------------- command line

std::optional<size_t> ParseBytes(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || text[0] == '-') return std::nullopt;
  size_t shift = 0;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "k") shift = 10;
  if (suffix == "M" || suffix == "m") shift = 20;
  if (suffix == "G" || suffix == "g") shift = 30;
  if (shift == 0 && !suffix.empty()) return std::nullopt;
  return static_cast<size_t>(value) << shift;
}

std::optional<int> ParseInt(const std::string& text, int min) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0' || value < min || value > 1 << 30) {
    return std::nullopt;
  }
  return static_cast<int>(value);
}

std::optional<Op> ParseOp(const std::string& text) {
  for (int i = 0; i < 5; ++i) {
    if (text == kOpNames[i]) return static_cast<Op>(i);
  }
  return std::nullopt;
}

// Applies one flag; returns an error message, or "" when it was understood.
std::string ApplyFlag(const std::string& flag, const std::string& v, Config* c) {
  std::optional<size_t> bytes;
  std::optional<int> num;
  if (flag == "-np" || flag == "--np") {
    if (!(num = ParseInt(v, 1))) return "-np wants a rank count >= 1";
    c->np = *num;
  } else if (flag == "--op") {
    auto op = ParseOp(v);
    if (!op) return "unknown --op " + v;
    c->op = *op;
  } else if (flag == "-b" || flag == "-e") {
    if (!(bytes = ParseBytes(v))) return "bad size " + v;
    (flag == "-b" ? c->min_bytes : c->max_bytes) = *bytes;
  } else if (flag == "-f") {
    c->factor = std::atof(v.c_str());
    if (!(c->factor > 1.0)) return "-f wants a factor > 1";
  } else if (flag == "--dtype") {
    auto t = ddp::ParseDataType(v);
    if (!t.ok()) return "unknown --dtype " + v;
    c->dtype = *t;
  } else if (flag == "--redop") {
    auto r = ddp::ParseReduceOp(v);
    if (!r.ok()) return "unknown --redop " + v;
    c->redop = *r;
  } else if (flag == "--transport") {
    if (v != "auto" && v != "tcp") return "--transport wants auto or tcp";
    c->transport = v;
  } else if (flag == "--algo") {
    if (v != "auto" && v != "ring" && v != "rd") return "--algo wants auto, ring or rd";
    c->algo = v;
  } else if (flag == "-w" || flag == "-n" || flag == "-r") {
    if (!(num = ParseInt(v, flag == "-w" ? 0 : 1))) return flag + " wants a count";
    (flag == "-w" ? c->warmup : flag == "-n" ? c->iters : c->repeats) = *num;
  } else if (flag == "--check") {
    if (v != "0" && v != "1") return "--check wants 0 or 1";
    c->check = v == "1";
  } else {
    return "unknown flag " + flag;
  }
  return "";
}

// Fills `config`; `child_args` receives argv minus -np, for the ranks a launcher starts.
bool ParseArgs(int argc, char** argv, Config* config, std::vector<std::string>* child_args) {
  child_args->push_back(argv[0]);
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--inplace") {
      config->inplace = true;
      child_args->push_back(flag);
      continue;
    }
    std::string value;
    const size_t eq = flag.find('=');
    const bool joined = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (joined) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "ddp-bench: %s needs a value\n%s", flag.c_str(), kUsage);
      return false;
    }
    if (std::string error = ApplyFlag(flag, value, config); !error.empty()) {
      std::fprintf(stderr, "ddp-bench: %s\n%s", error.c_str(), kUsage);
      return false;
    }
    if (flag != "-np" && flag != "--np") {
      child_args->push_back(flag);
      child_args->push_back(value);
    }
  }
  if (config->min_bytes > config->max_bytes) {
    std::fprintf(stderr, "ddp-bench: -b is larger than -e\n");
    return false;
  }
  return true;
}

// ----------------------------------------------------------------------------- launcher

std::optional<int> PickFreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  socklen_t len = sizeof(addr);
  std::optional<int> port;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

std::optional<std::string> MakeJobToken() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  std::string token;
  for (unsigned char b : bytes) {
    static constexpr char kHex[] = "0123456789abcdef";
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

// The launcher's environment without any job identity, plus this rank's.
std::vector<std::string> RankEnvironment(const Config& c, int rank, int port,
                                         const std::string& token) {
  static constexpr absl::string_view kDropped[] = {
      "DDP_RANK=",       "DDP_SIZE=",        "DDP_LOCAL_RANK=",          "DDP_LOCAL_SIZE=",
      "DDP_CROSS_RANK=", "DDP_CROSS_SIZE=",  "DDP_RENDEZVOUS_ADDR=",     "DDP_RENDEZVOUS_PORT=",
      "DDP_JOB_TOKEN=",  "OMPI_COMM_WORLD_", "DDP_RENDEZVOUS_EXTERNAL=", "PMI_RANK=",
      "PMI_SIZE=",       "MPI_LOCALRANKID=", "MPI_LOCALNRANKS="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view var(*e);
    const bool drop = std::any_of(std::begin(kDropped), std::end(kDropped),
                                  [&](absl::string_view p) { return absl::StartsWith(var, p); });
    const bool replaced = (c.transport && absl::StartsWith(var, "DDP_TRANSPORT=")) ||
                          (c.algo && absl::StartsWith(var, "DDP_ALGO="));
    if (!drop && !replaced) env.emplace_back(var);
  }
  env.push_back("DDP_RANK=" + std::to_string(rank));
  env.push_back("DDP_SIZE=" + std::to_string(c.np));
  env.push_back("DDP_RENDEZVOUS_ADDR=127.0.0.1");
  env.push_back("DDP_RENDEZVOUS_PORT=" + std::to_string(port));
  env.push_back("DDP_JOB_TOKEN=" + token);
  if (c.transport) env.push_back("DDP_TRANSPORT=" + *c.transport);
  if (c.algo) env.push_back("DDP_ALGO=" + *c.algo);
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t SpawnRank(std::vector<std::string> args, std::vector<std::string> env) {
  std::vector<char*> argv = CStrings(args);
  std::vector<char*> envp = CStrings(env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // A rank must not outlive its launcher (killed by a timeout, say).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    execve("/proc/self/exe", argv.data(), envp.data());
    std::fprintf(stderr, "ddp-bench: exec /proc/self/exe: %s\n", std::strerror(errno));
    _exit(127);
  }
  return pid;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "stopped with status " + std::to_string(status);
}

// Waits for every rank; after the first failure, stops the rest (SIGTERM, SIGKILL after 5 s).
int WaitForRanks(std::vector<pid_t> pids) {
  using Clock = std::chrono::steady_clock;
  int running = static_cast<int>(pids.size());
  bool failed = false;
  Clock::time_point kill_at;
  auto signal_running = [&](int sig) {
    for (pid_t p : pids) {
      if (p > 0) kill(p, sig);
    }
  };
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, failed ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    if (pid == 0) {
      if (Clock::now() >= kill_at) signal_running(SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    const int rank = static_cast<int>(it - pids.begin());
    *it = -1;
    --running;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok) continue;
    if (!failed) {
      std::fprintf(stderr, "ddp-bench: rank %d %s; stopping the other ranks\n", rank,
                   DescribeExit(status).c_str());
      failed = true;
      kill_at = Clock::now() + std::chrono::seconds(5);
      signal_running(SIGTERM);
    } else {
      std::fprintf(stderr, "ddp-bench: rank %d then %s\n", rank, DescribeExit(status).c_str());
    }
  }
  return failed ? 1 : 0;
}

int Launch(const Config& config, const std::vector<std::string>& child_args) {
  const std::optional<int> port = PickFreeLoopbackPort();
  const std::optional<std::string> token = MakeJobToken();
  if (!port || !token) {
    std::fprintf(stderr, "ddp-bench: cannot pick a port or make a job token: %s\n",
                 std::strerror(errno));
    return 1;
  }
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < config.np; ++rank) {
    const pid_t pid = SpawnRank(child_args, RankEnvironment(config, rank, *port, *token));
    if (pid < 0) {
      std::fprintf(stderr, "ddp-bench: fork for rank %d: %s\n", rank, std::strerror(errno));
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      return 1;
    }
    pids.push_back(pid);
  }
  return WaitForRanks(pids);
}

// ----------------------------------------------------------------------------- element values

struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// Round to nearest even; values here are small integers, so subnormals simply flush to zero.
uint16_t HalfFromFloat(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs < 0x38800000u) return static_cast<uint16_t>(sign);
  if (abs >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  uint32_t h = (abs - 0x38000000u) >> 13;
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) return (sign ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(mant), -24);
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t BFloat16FromFloat(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <typename T>
void Store(T& out, int64_t v) {
  if constexpr (std::is_same_v<T, Half>) {
    out.bits = HalfFromFloat(static_cast<float>(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    out.bits = BFloat16FromFloat(static_cast<float>(v));
  } else {
    out = static_cast<T>(v);
  }
}

template <typename T>
double Load(const T& in) {
  if constexpr (std::is_same_v<T, Half>) {
    return HalfToFloat(in.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return std::bit_cast<float>(static_cast<uint32_t>(in.bits) << 16);
  } else {
    return static_cast<double>(in);
  }
}

template <typename T>
struct Tag {
  using type = T;
};

template <typename F>
void WithType(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32:
      return f(Tag<float>{});
    case DataType::kFloat64:
      return f(Tag<double>{});
    case DataType::kFloat16:
      return f(Tag<Half>{});
    case DataType::kBFloat16:
      return f(Tag<BFloat16>{});
    case DataType::kInt8:
      return f(Tag<int8_t>{});
    case DataType::kUInt8:
      return f(Tag<uint8_t>{});
    case DataType::kInt32:
      return f(Tag<int32_t>{});
    case DataType::kInt64:
      return f(Tag<int64_t>{});
  }
  std::abort();
}

// Relative error allowed: none, except the division of an average in floating point.
double Tolerance(DataType type, ReduceOp op) {
  if (op != ReduceOp::kAverage) return 0;
  switch (type) {
    case DataType::kFloat32:
      return std::ldexp(1.0, -23);
    case DataType::kFloat64:
      return std::ldexp(1.0, -52);
    case DataType::kFloat16:
      return std::ldexp(1.0, -10);
    case DataType::kBFloat16:
      return std::ldexp(1.0, -7);
    default:
      return 0;
  }
}

// Inputs to reductions: small non-negative integers whose reduction over the ranks is exact in
// every type (f16 and bf16 included) and differs from any single rank's input.
int64_t ReduceInput(ReduceOp op, int rank, int n, int64_t i) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: {
      // 1..4, plus and minus an offset that cancels over each pair of ranks: average is exact.
      const int64_t base = 1 + i % 4;
      if (rank == n - 1 && n % 2 == 1) return base;
      const int64_t offset = (i + rank / 2) % 2;
      return rank % 2 == 0 ? base + offset : base - offset;
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return (i * 3 + rank * 5) % 17;
    case ReduceOp::kProduct:
      return i % (2 * n) == rank ? 2 : 1;  // at most one 2 per element
  }
  return 0;
}

int64_t ReduceExpected(ReduceOp op, int n, int64_t i) {
  int64_t acc = ReduceInput(op, 0, n, i);
  for (int r = 1; r < n; ++r) {
    const int64_t v = ReduceInput(op, r, n, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAverage) acc += v;
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kProduct) acc *= v;
  }
  return op == ReduceOp::kAverage ? acc / n : acc;
}

int64_t RankData(int rank, int64_t i) { return (rank * 7 + i) % 23 + 1; }
int64_t AlltoallData(int src, int dst, int64_t i) { return (src * 5 + dst * 3 + i) % 29 + 1; }

// One collective call at one size, from this rank's point of view.
struct Plan {
  Op op;
  DataType dtype;
  ReduceOp redop;
  int rank;
  int n;
  size_t count;  // the `count` argument of the call (per rank for blocked ops)
  size_t esize;

  size_t SendCount() const {
    return op == Op::kReduceScatter || op == Op::kAlltoall ? count * n : count;
  }
  size_t RecvCount() const {
    return op == Op::kAllgather || op == Op::kAlltoall ? count * n : count;
  }
  size_t TotalBytes() const { return count * esize * (IsBlocked(op) ? n : 1); }

  int64_t Input(int64_t i) const {
    if (IsReduction(op)) return ReduceInput(redop, rank, n, i);
    if (op == Op::kAlltoall) {
      const auto c = static_cast<int64_t>(count);
      return AlltoallData(rank, static_cast<int>(i / c), i % c);
    }
    return RankData(rank, i);
  }
  int64_t Expected(int64_t i) const {
    const int64_t block = i / static_cast<int64_t>(count);
    const int64_t offset = i % static_cast<int64_t>(count);
    switch (op) {
      case Op::kAllreduce:
        return ReduceExpected(redop, n, i);
      case Op::kReduceScatter:
        return ReduceExpected(redop, n, rank * static_cast<int64_t>(count) + i);
      case Op::kAllgather:
        return RankData(static_cast<int>(block), offset);
      case Op::kBroadcast:
        return RankData(0, i);
      case Op::kAlltoall:
        return AlltoallData(static_cast<int>(block), rank, offset);
    }
    return 0;
  }
};

struct Buffers {
  std::unique_ptr<std::byte, decltype(&std::free)> send{nullptr, &std::free};
  std::unique_ptr<std::byte, decltype(&std::free)> recv{nullptr, &std::free};
};

// Send and receive pointers for `plan`; in place, both point into the receive buffer.
std::pair<std::byte*, std::byte*> Pointers(const Plan& p, bool inplace, const Buffers& b) {
  std::byte* recv = b.recv.get();
  if (!inplace) return {b.send.get(), recv};
  if (p.op == Op::kAllgather) return {recv + p.rank * p.count * p.esize, recv};
  return {recv, recv};
}

// Poisons the output, then writes the inputs (after, so in-place inputs survive).
void Prepare(const Plan& p, std::byte* send, std::byte* recv) {
  std::memset(recv, 0xff, p.RecvCount() * p.esize);
  WithType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = reinterpret_cast<T*>(send);
    const auto n = static_cast<int64_t>(p.SendCount());
    for (int64_t i = 0; i < n; ++i) Store(out[i], p.Input(i));
  });
}

int64_t CountWrong(const Plan& p, const std::byte* recv) {
  int64_t wrong = 0;
  const double tolerance = Tolerance(p.dtype, p.redop);
  WithType(p.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = reinterpret_cast<const T*>(recv);
    const auto n = static_cast<int64_t>(p.RecvCount());
    for (int64_t i = 0; i < n; ++i) {
      const double want = static_cast<double>(p.Expected(i));
      // Written so that NaN (the poison, in floating types) never matches.
      if (!(std::fabs(Load(in[i]) - want) <= tolerance * want)) ++wrong;
    }
  });
  return wrong;
}

// ----------------------------------------------------------------------------- measuring

absl::Status RunOnce(ddp::Context& ctx, const Plan& p, const std::byte* send, std::byte* recv) {
  switch (p.op) {
    case Op::kAllreduce:
      return ctx.Allreduce(send, recv, p.count, p.dtype, p.redop);
    case Op::kAllgather:
      return ctx.Allgather(send, recv, p.count, p.dtype);
    case Op::kBroadcast:
      return ctx.Broadcast(send, recv, p.count, p.dtype, /*root=*/0);
    case Op::kReduceScatter:
      return ctx.ReduceScatter(send, recv, p.count, p.dtype, p.redop);
    case Op::kAlltoall:
      return ctx.Alltoall(send, recv, p.count, p.dtype);
  }
  return absl::InternalError("unknown op");
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Microseconds per call: median over timed groups on this rank, then the slowest rank.
absl::StatusOr<double> TimeCalls(ddp::Context& ctx, const Config& c, const Plan& p,
                                 const std::byte* send, std::byte* recv) {
  for (int i = 0; i < c.warmup; ++i) {
    if (absl::Status s = RunOnce(ctx, p, send, recv); !s.ok()) return s;
  }
  std::vector<double> per_call_us;
  for (int r = 0; r < c.repeats; ++r) {
    if (absl::Status s = ctx.Barrier(); !s.ok()) return s;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < c.iters; ++i) {
      if (absl::Status s = RunOnce(ctx, p, send, recv); !s.ok()) return s;
    }
    const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
    per_call_us.push_back(took.count() / c.iters);
  }
  double us = Median(per_call_us);
  if (absl::Status s = ctx.Allreduce(&us, &us, 1, DataType::kFloat64, ReduceOp::kMax); !s.ok()) {
    return s;
  }
  return us;
}

// Elements that came out wrong on all ranks together, from one fresh call.
absl::StatusOr<int64_t> CheckCall(ddp::Context& ctx, const Plan& p, std::byte* send,
                                  std::byte* recv) {
  Prepare(p, send, recv);
  if (absl::Status s = RunOnce(ctx, p, send, recv); !s.ok()) return s;
  int64_t wrong = CountWrong(p, recv);
  if (absl::Status s = ctx.Allreduce(&wrong, &wrong, 1, DataType::kInt64, ReduceOp::kSum);
      !s.ok()) {
    return s;
  }
  return wrong;
}

void PrintHeader(const ddp::Context& ctx, const Config& c) {
  const ddp::Options& o = ctx.options();
  std::printf("# ddp-bench: libddp %s\n", DDP_VERSION_STRING);
  std::printf("# op: %s  ranks: %d  transport: %s  algo: %s  dtype: %s  redop: %s  inplace: %d\n",
              OpName(c.op), ctx.size(), Str(ddp::TransportKindName(o.transport)).c_str(),
              Str(ddp::AlgorithmName(o.algorithm)).c_str(), Str(ddp::DataTypeName(c.dtype)).c_str(),
              Str(ddp::ReduceOpName(c.redop)).c_str(), c.inplace ? 1 : 0);
  std::printf("# sizes: %zu..%zu bytes x%g  warmup: %d  iters: %d  repeats: %d  check: %d\n",
              c.min_bytes, c.max_bytes, c.factor, c.warmup, c.iters, c.repeats, c.check ? 1 : 0);
  std::printf("# time: median over repeats of (group time / iters), max over ranks\n#\n");
  std::printf("# %10s  %12s  %6s  %7s  %10s  %8s  %8s  %6s\n", "size", "count", "type", "redop",
              "time_us", "algbw", "busbw", "#wrong");
  std::printf("# %10s  %12s  %6s  %7s  %10s  %8s  %8s  %6s\n", "(B)", "(elements)", "", "", "(us)",
              "(GB/s)", "(GB/s)", "");
  std::fflush(stdout);
}

double BusFactor(Op op, int n) {
  if (op == Op::kAllreduce) return 2.0 * (n - 1) / n;
  if (op == Op::kBroadcast) return 1.0;
  return static_cast<double>(n - 1) / n;
}

// Runs every size; returns the total of wrong elements (0 when unchecked).
absl::StatusOr<int64_t> RunSizes(ddp::Context& ctx, const Config& c) {
  const int n = ctx.size();
  const size_t esize = ddp::DataTypeSize(c.dtype);
  const size_t alloc = (std::max(c.max_bytes, esize * n) + 4095) / 4096 * 4096;
  Buffers buffers;
  buffers.send.reset(static_cast<std::byte*>(std::aligned_alloc(4096, alloc)));
  buffers.recv.reset(static_cast<std::byte*>(std::aligned_alloc(4096, alloc)));
  if (!buffers.send || !buffers.recv) return absl::ResourceExhaustedError("out of memory");
  if (ctx.rank() == 0) PrintHeader(ctx, c);
  int64_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  size_t last_bytes = SIZE_MAX;
  for (size_t bytes = c.min_bytes; bytes <= c.max_bytes;
       bytes = std::max(bytes + 1, static_cast<size_t>(static_cast<double>(bytes) * c.factor))) {
    const size_t count = bytes / esize / (IsBlocked(c.op) ? n : 1);
    const Plan p{c.op, c.dtype, c.redop, ctx.rank(), n, count, esize};
    if (count == 0 || p.TotalBytes() == last_bytes) continue;
    last_bytes = p.TotalBytes();
    auto [send, recv] = Pointers(p, c.inplace, buffers);
    Prepare(p, send, recv);
    absl::StatusOr<double> us = TimeCalls(ctx, c, p, send, recv);
    if (!us.ok()) return us.status();
    absl::StatusOr<int64_t> wrong = c.check ? CheckCall(ctx, p, send, recv) : 0;
    if (!wrong.ok()) return wrong.status();
    total_wrong += *wrong;
    const double algbw = static_cast<double>(p.TotalBytes()) / *us / 1e3;
    const double busbw = algbw * BusFactor(c.op, n);
    busbw_sum += busbw;
    ++rows;
    if (ctx.rank() != 0) continue;
    const std::string wrong_text = c.check ? std::to_string(*wrong) : "N/A";
    std::printf("  %10zu  %12zu  %6s  %7s  %10.2f  %8.3f  %8.3f  %6s\n", p.TotalBytes(),
                p.TotalBytes() / esize, Str(ddp::DataTypeName(c.dtype)).c_str(),
                IsReduction(c.op) ? Str(ddp::ReduceOpName(c.redop)).c_str() : "none", *us, algbw,
                busbw, wrong_text.c_str());
    std::fflush(stdout);
  }
  if (ctx.rank() == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(total_wrong),
                total_wrong == 0 ? "OK" : "FAILED");
    std::printf("# Avg bus bandwidth : %.3f\n#\n", rows > 0 ? busbw_sum / rows : 0.0);
    std::fflush(stdout);
  }
  return total_wrong;
}

int RunRank(const Config& config) {
  absl::StatusOr<ddp::Options> options = ddp::Options::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "ddp-bench: %s\n", options.status().ToString().c_str());
    return 1;
  }
  if (config.transport) {
    options->transport =
        *config.transport == "tcp" ? ddp::TransportKind::kTcp : ddp::TransportKind::kAuto;
  }
  if (config.algo) {
    options->algorithm = *config.algo == "ring" ? ddp::Algorithm::kRing
                         : *config.algo == "rd" ? ddp::Algorithm::kRecursiveDoubling
                                                : ddp::Algorithm::kAuto;
  }
  const int rank = options->rank;
  absl::StatusOr<std::unique_ptr<ddp::Context>> ctx = ddp::Context::Create(*options);
  if (!ctx.ok()) {
    std::fprintf(stderr, "ddp-bench: rank %d: %s\n", rank, ctx.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<int64_t> wrong = RunSizes(**ctx, config);
  if (!wrong.ok()) {
    std::fprintf(stderr, "ddp-bench: rank %d: %s\n", rank, wrong.status().ToString().c_str());
    (*ctx)->Abort(wrong.status());
    return 1;
  }
  if (absl::Status s = (*ctx)->Shutdown(); !s.ok()) {
    std::fprintf(stderr, "ddp-bench: rank %d: shutdown: %s\n", rank, s.ToString().c_str());
    return 1;
  }
  // Rank 0 alone reports wrong results, so that a launcher does not stop it mid-table.
  if (*wrong == 0 || rank != 0) return 0;
  std::fprintf(stderr, "ddp-bench: %lld wrong elements\n", static_cast<long long>(*wrong));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  std::vector<std::string> child_args;
  if (!ParseArgs(argc, argv, &config, &child_args)) return 2;
  if (config.np > 0) return Launch(config, child_args);
  return RunRank(config);
}
