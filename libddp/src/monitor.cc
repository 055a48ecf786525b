// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "monitor.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/thread_priority.h"
#include "engine/timeline.h"

namespace ddp {

std::unique_ptr<Monitor> Monitor::Start(const Options& options, const Engine& engine,
                                        std::string host) {
  auto store = bootstrap::TcpStoreClient::Connect(options.rendezvous_addr, options.rendezvous_port,
                                                  options.job_token, options.rank,
                                                  absl::Now() + absl::Seconds(5));
  if (!store.ok()) {
    DDP_LOG(kWarning, "no status for the launcher (DDP_MONITOR): %s", store.status().message());
    return nullptr;
  }
  return std::unique_ptr<Monitor>(new Monitor(options, engine, std::move(host), *std::move(store)));
}

Monitor::Monitor(const Options& options, const Engine& engine, std::string host,
                 std::unique_ptr<bootstrap::TcpStoreClient> store)
    : engine_(engine),
      rank_(options.rank),
      host_(std::move(host)),
      key_(absl::StrCat("ddp/monitor/status/", options.rank)),
      address_(options.rendezvous_addr),
      port_(options.rendezvous_port),
      token_(options.job_token),
      store_(std::move(store)),
      thread_([this] { Loop(); }) {}

Monitor::~Monitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The last word: the rank left on purpose (not a rank that stopped answering).
  if (store_ != nullptr) store_->Set(key_, Snapshot(/*left=*/true)).IgnoreError();
}

std::string Monitor::Snapshot(bool left) {
  return absl::StrCat("{\"rank\":", rank_, ",\"host\":\"", engine::JsonEscape(host_),
                      "\",\"pid\":", getpid(), ",\"beat\":", ++beat_,
                      ",\"time_ns\":", absl::ToUnixNanos(absl::Now()), left ? ",\"left\":true" : "",
                      ",\"engine\":", engine_.StatusJson(), "}");
}

void Monitor::AnswerDumpRequest() {
  absl::StatusOr<int64_t> asked = store_->Add("ddp/monitor/dump", 0);
  if (!asked.ok() || *asked <= dumps_answered_) return;
  dumps_answered_ = *asked;
  // One key per rank, the request's number first: the store keeps one record per rank, not one
  // per request.
  const std::string record =
      absl::StrCat(*asked, "\n", engine_.FlightRecord("requested by ddprun dump"));
  store_->Set(absl::StrCat("ddp/monitor/dump/", rank_), record).IgnoreError();
}

void Monitor::Loop() {
  NameThisThread("ddp-monitor");
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    // A store that did not answer (a slow launcher, a dropped connection) is tried again, on a
    // new connection, next time; one that went for good (the launcher ended) costs a try a
    // second until the rank leaves.
    if (store_ == nullptr) {
      auto store = bootstrap::TcpStoreClient::Connect(address_, port_, token_, rank_,
                                                      absl::Now() + absl::Milliseconds(500));
      if (store.ok()) store_ = *std::move(store);
    }
    if (store_ != nullptr && store_->Set(key_, Snapshot(/*left=*/false)).ok()) {
      AnswerDumpRequest();
    } else {
      store_.reset();
    }
    lock.lock();
    cv_.wait_for(lock, absl::ToChronoNanoseconds(kInterval), [this] { return stop_; });
  }
}

}  // namespace ddp
