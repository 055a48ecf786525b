// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The two Exchanges: over the rendezvous store, and over MPI.
#include "bootstrap/exchange.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bootstrap/prefix_store.h"
#include "common/crypto.h"
#include "common/socket.h"
#include "common/status.h"
#include "ddp/errors.h"
#include "mpi/mpi.h"

namespace ddp::bootstrap {
namespace {

class StoreExchangeImpl final : public Exchange {
 public:
  StoreExchangeImpl(std::unique_ptr<Store> store, const Options& options, absl::Time deadline)
      : store_(std::move(store)),
        rank_(options.rank),
        start_timeout_(options.start_timeout),
        rendezvous_(options.rendezvous_addr),
        deadline_(deadline) {}

  absl::StatusOr<std::vector<std::string>> Allgather(absl::string_view key, const std::string& mine,
                                                     absl::Span<const int> from) override {
    DDP_RETURN_IF_ERROR(store_->Set(absl::StrCat(key, "/", rank_), mine));
    std::vector<std::string> values;
    for (int r : from) {
      if (values.size() <= static_cast<size_t>(r)) values.resize(static_cast<size_t>(r) + 1);
      auto value = store_->Get(absl::StrCat(key, "/", r),
                               std::max(deadline_ - absl::Now(), absl::ZeroDuration()));
      if (!value.ok()) {
        return WithRanks(
            Annotate(value.status(),
                     absl::StrCat("rank ", r, " did not join within the start timeout (",
                                  absl::FormatDuration(start_timeout_),
                                  ", DDP_START_TIMEOUT_SECONDS); is it running with the same "
                                  "DDP_SIZE and rendezvous address?")),
            {r});
      }
      values[static_cast<size_t>(r)] = *std::move(value);
    }
    return values;
  }

  std::string Toward(const std::vector<std::string>& /*hosts*/, int /*rank*/) const override {
    return rendezvous_;
  }

 private:
  std::unique_ptr<Store> store_;
  const int rank_;
  const absl::Duration start_timeout_;
  const std::string rendezvous_;
  const absl::Time deadline_;
};

class MpiExchangeImpl final : public Exchange {
 public:
  absl::StatusOr<std::vector<std::string>> Allgather(absl::string_view /*key*/,
                                                     const std::string& mine,
                                                     absl::Span<const int> /*from*/) override {
    return mpi::Allgather(mine);
  }

  // The address that routes to the first rank on another host, else (one host) loopback.
  std::string Toward(const std::vector<std::string>& hosts, int rank) const override {
    for (const std::string& h : hosts) {
      if (h != hosts[static_cast<size_t>(rank)]) return h;
    }
    return "127.0.0.1";
  }
};

}  // namespace

std::vector<int> AllRanks(int size) {
  std::vector<int> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all[static_cast<size_t>(r)] = r;
  return all;
}

absl::StatusOr<std::unique_ptr<Exchange>> StoreExchange(const Options& options, absl::Time deadline,
                                                        std::unique_ptr<TcpStoreServer>* server) {
  if (options.rank == 0 && !options.rendezvous_external) {
    DDP_ASSIGN_OR_RETURN(std::string ip, net::Resolve(options.rendezvous_addr));
    auto started = TcpStoreServer::Start(ip, options.rendezvous_port, options.job_token);
    if (!started.ok()) {
      return Annotate(started.status(),
                      absl::StrCat("rank 0 cannot host the rendezvous store at ",
                                   net::JoinHostPort(ip, options.rendezvous_port),
                                   " (DDP_RENDEZVOUS_ADDR/PORT; is the port in use?)"));
    }
    *server = *std::move(started);
  }
  DDP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store,
                       TcpStoreClient::Connect(options.rendezvous_addr, options.rendezvous_port,
                                               options.job_token, options.rank, deadline));
  // A fresh key space per initialisation, so a re-init never reads stale addresses. A process
  // rejoining a running job (options.rejoin) reads the key space the job started in, rank 0's
  // (whose values stay in the store): it overwrites its own rank's and reads the others'.
  DDP_ASSIGN_OR_RETURN(int64_t generation, store->Add(absl::StrCat("ddp/init/", options.rank), 1));
  if (options.rejoin) {
    if (options.rank == 0) {
      return absl::FailedPreconditionError("rank 0 cannot rejoin: it hosts the job's rendezvous");
    }
    DDP_ASSIGN_OR_RETURN(generation, store->Add("ddp/init/0", 0));
    if (generation < 1) return absl::FailedPreconditionError("no running job to rejoin");
  }
  return std::make_unique<StoreExchangeImpl>(
      std::make_unique<PrefixStore>(absl::StrCat("ddp/", generation, "/"), std::move(store)),
      options, deadline);
}

absl::Status InitMpi(const Options& options) {
  int mpi_rank = -1;
  int mpi_size = 0;
  DDP_RETURN_IF_ERROR(mpi::Init(&mpi_rank, &mpi_size));
  if (mpi_rank != options.rank || mpi_size != options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("this process is rank ", options.rank, " of ", options.size,
                     " by its variables (DDP_RANK/DDP_SIZE or the launcher's) but rank ", mpi_rank,
                     " of ", mpi_size, " in MPI_COMM_WORLD"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Exchange>> MpiExchange(Options* options) {
  DDP_RETURN_IF_ERROR(InitMpi(*options));
  // Rank 0's token for everyone; rank 0 makes one when none was given.
  std::array<char, 129> token{};
  if (options->rank == 0) {
    std::string t = options->job_token;
    if (t.empty()) {
      std::array<uint8_t, 16> random{};
      DDP_RETURN_IF_ERROR(crypto::RandomBytes(absl::MakeSpan(random)));
      for (uint8_t b : random) t += absl::StrFormat("%02x", b);
    }
    if (t.size() >= token.size()) {
      return absl::InvalidArgumentError("DDP_JOB_TOKEN is too long (at most 128 characters)");
    }
    std::copy(t.begin(), t.end(), token.begin());
  }
  DDP_RETURN_IF_ERROR(mpi::Broadcast(token.data(), token.size(), 0));
  token.back() = '\0';
  options->job_token = token.data();
  return std::make_unique<MpiExchangeImpl>();
}

}  // namespace ddp::bootstrap
