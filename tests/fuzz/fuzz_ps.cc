// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: a parameter server's handling of requests (ServerCore, behind the checks
// the server's loop makes: CheckRequest, the payload limit). Every request comes from a peer
// holding the job's token, but its bytes are untrusted: a worker with a bug, or a hostile one,
// must get an error answer and leave the server (and the other workers' keys) sound.
//
// Input: records of [worker byte][RequestHeader][payload: the header's bytes, padded with zeros
// where the input ends]; a worker byte with the top bit set instead ends that worker (finished or
// dead by the next bit), and one of 0x7f runs the server's periodic check.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "ps/protocol.h"
#include "ps/server_core.h"

namespace {

constexpr int kWorkers = 3;
constexpr int64_t kMaxPayload = 1 << 20;

}  // namespace

// The server warns of every worker an input ends: formatted and written to stderr that is most of
// an input's time (546 inputs/s with it). The messages are absl::StrFormat's, type-checked; the
// harness keeps them off.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  ddp::log::SetLevel(ddp::LogLevel::kOff);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::ps;
  CoreConfig config;
  config.num_workers = kWorkers;
  config.worker_ranks = {0, 1, 2};
  config.worker_name = [](int w) { return absl::StrCat("worker ", w); };
  config.on_worker_loss =
      size > 0 && (data[0] & 1) ? WorkerLossPolicy::kContinue : WorkerLossPolicy::kFail;
  config.max_payload_bytes = kMaxPayload;
  ServerCore core(config);
  std::vector<Outgoing> out;
  uint64_t request[kWorkers] = {};
  bool gone[kWorkers] = {};
  size_t at = 0;
  while (at < size) {
    const uint8_t who = data[at++];
    if (who == 0x7f) {
      core.Tick(absl::Now(), &out);
      continue;
    }
    const int worker = (who & 0x3f) % kWorkers;
    if (gone[worker]) continue;
    if (who & 0x80) {
      gone[worker] = true;
      const bool failed = (who & 0x40) != 0;
      core.WorkerGone(worker, failed ? absl::UnavailableError("died") : absl::OkStatus(), failed,
                      &out);
      continue;
    }
    RequestHeader h;
    const size_t take = std::min(sizeof(h), size - at);
    std::memcpy(&h, data + at, take);
    at += take;
    if (!CheckRequest(h).ok()) continue;  // answered with the error by the loop
    std::vector<char> payload;
    if (CarriesPayload(h)) {
      if (h.bytes > static_cast<uint64_t>(kMaxPayload)) continue;  // refused by the loop
      payload.assign(h.bytes, 0);
      const size_t have = std::min<size_t>(h.bytes, size - at);
      if (have > 0) std::memcpy(payload.data(), data + at, have);
      at += have;
    }
    core.Handle(worker, request[worker]++, h, payload.empty() ? nullptr : payload.data(), &out);
    // Every answer is well formed: a known code, a terminated message.
    for (const Outgoing& o : out) {
      if (o.header.magic != kMagic || o.worker < 0 || o.worker >= kWorkers ||
          std::memchr(o.header.message, '\0', sizeof(o.header.message)) == nullptr) {
        std::abort();
      }
    }
    out.clear();
  }
  (void)core.stats();
  return 0;
}
