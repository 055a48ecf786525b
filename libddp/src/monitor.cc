// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "monitor.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/thread_priority.h"

namespace ddp {
namespace {

std::string HostName(const Options& options) {
  if (!options.hostname.empty()) return options.hostname;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

std::unique_ptr<Monitor> Monitor::Start(const Options& options, const Engine& engine) {
  auto store = bootstrap::TcpStoreClient::Connect(options.rendezvous_addr, options.rendezvous_port,
                                                  options.job_token, options.rank,
                                                  absl::Now() + absl::Seconds(5));
  if (!store.ok()) {
    DDP_LOG(kWarning, "no status for the launcher (DDP_MONITOR): %s", store.status().message());
    return nullptr;
  }
  return std::unique_ptr<Monitor>(new Monitor(options, engine, *std::move(store)));
}

Monitor::Monitor(const Options& options, const Engine& engine,
                 std::unique_ptr<bootstrap::TcpStoreClient> store)
    : engine_(engine),
      rank_(options.rank),
      host_(HostName(options)),
      store_(std::move(store)),
      thread_([this] { Loop(); }) {}

Monitor::~Monitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Monitor::Snapshot() {
  return absl::StrCat("{\"rank\":", rank_, ",\"host\":\"", Escape(host_), "\",\"pid\":", getpid(),
                      ",\"beat\":", ++beat_, ",\"time_ns\":", absl::ToUnixNanos(absl::Now()),
                      ",\"engine\":", engine_.StatusJson(), "}");
}

void Monitor::AnswerDumpRequest() {
  absl::StatusOr<int64_t> asked = store_->Add("ddp/monitor/dump", 0);
  if (!asked.ok() || *asked <= dumps_answered_) return;
  dumps_answered_ = *asked;
  const std::string record = engine_.FlightRecord("requested by ddprun dump");
  store_->Set(absl::StrCat("ddp/monitor/dump/", *asked, "/", rank_), record).IgnoreError();
}

void Monitor::Loop() {
  NameThisThread("ddp-monitor");
  const std::string key = absl::StrCat("ddp/monitor/status/", rank_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    // A store that went away (the launcher ended first) ends the monitor, quietly.
    const bool spoke = store_->Set(key, Snapshot()).ok();
    if (spoke) AnswerDumpRequest();
    lock.lock();
    if (!spoke) return;
    cv_.wait_for(lock, absl::ToChronoNanoseconds(kInterval), [this] { return stop_; });
  }
}

}  // namespace ddp
