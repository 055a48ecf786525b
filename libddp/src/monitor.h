// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Monitor: a rank's voice to its launcher while the job runs (DDP_MONITOR=1, which ddprun sets).
// A thread of its own, so that it speaks while the rank's collectives hang: every second it puts
// the rank's status (Engine::StatusJson, with its host, pid and a heartbeat count) in the
// launcher's rendezvous store under ddp/monitor/status/<rank>, and answers a dump request (the
// counter ddp/monitor/dump raised by `ddprun dump`) with its flight record under
// ddp/monitor/dump/<rank>, after the request's number and a newline. Its last word, as the rank
// leaves, says so ("left"). `ddprun status`, `ddprun dump` and ddprun's metrics read them
// (docs/observability.md). A rank that stops (SIGSTOP, a debugger) stops speaking: its heartbeat
// stands still, which is how the launcher tells it apart.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "bootstrap/tcp_store.h"
#include "ddp/engine.h"
#include "ddp/options.h"

namespace ddp {

class Monitor {
 public:
  static constexpr absl::Duration kInterval = absl::Seconds(1);
  // Null when the store cannot be reached (warned once: the job runs without it).
  // `host`: this rank's host as the job names it.
  static std::unique_ptr<Monitor> Start(const Options& options, const Engine& engine,
                                        std::string host);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

 private:
  // The status as published; `left`: the rank's last word as it leaves.
  std::string Snapshot(bool left);
  Monitor(const Options& options, const Engine& engine, std::string host,
          std::unique_ptr<bootstrap::TcpStoreClient> store);
  void Loop();
  void AnswerDumpRequest();

  const Engine& engine_;
  const int rank_;
  const std::string host_;
  const std::string key_;
  const std::string address_;
  const int port_;
  const std::string token_;
  std::unique_ptr<bootstrap::TcpStoreClient> store_;  // null: reconnect at the next beat
  uint64_t beat_ = 0;
  int64_t dumps_answered_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddp
