// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// A complete libddp program: join the job, then allreduce, allgather, broadcast and barrier,
// checking every result. Start one process per rank (see README.md for the environment).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ddp/ddp.h"

namespace {

// Compares got[i] with want(i) for every i. A wrong value becomes an error Status, so it is
// reported the same way as a failed collective.
template <typename T, typename Want>
absl::Status CheckAll(const std::string& what, const std::vector<T>& got, Want want) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double expected = want(static_cast<double>(i));
    const double actual = static_cast<double>(got[i]);
    if (std::fabs(actual - expected) > 1e-5 * std::max(1.0, std::fabs(expected))) {
      return absl::InternalError(what + "[" + std::to_string(i) + "] = " + std::to_string(actual) +
                                 ", expected " + std::to_string(expected));
    }
  }
  return absl::OkStatus();
}

absl::Status RunCollectives(ddp::Context& context) {
  const int rank = context.rank();
  const double n = context.size();

  // Allreduce. Rank r contributes r + i at position i, so over all n ranks the sum is
  // n * (n - 1) / 2 + n * i and the average is (n - 1) / 2 + i.
  constexpr size_t kCount = 1000;
  std::vector<float> gradients(kCount);
  for (size_t i = 0; i < kCount; ++i) gradients[i] = static_cast<float>(rank + static_cast<int>(i));

  std::vector<float> sum(kCount);
  absl::Status status = context.Allreduce(gradients.data(), sum.data(), kCount,
                                          ddp::DataType::kFloat32, ddp::ReduceOp::kSum);
  if (status.ok()) status = CheckAll("sum", sum, [n](double i) { return n * (n - 1) / 2 + n * i; });
  if (!status.ok()) return status;

  // In place (send == recv), as a training loop averages its gradient buffer.
  status = context.Allreduce(gradients.data(), gradients.data(), kCount, ddp::DataType::kFloat32,
                             ddp::ReduceOp::kAverage);
  if (status.ok()) {
    status = CheckAll("average", gradients, [n](double i) { return (n - 1) / 2 + i; });
  }
  if (!status.ok()) return status;

  // Allgather: every rank's value lands in the slot of its rank.
  const int32_t my_rank = rank;
  std::vector<int32_t> ranks(static_cast<size_t>(context.size()), -1);
  status = context.Allgather(&my_rank, ranks.data(), 1, ddp::DataType::kInt32);
  if (status.ok()) status = CheckAll("allgather", ranks, [](double r) { return r; });
  if (!status.ok()) return status;

  // Broadcast: rank 0's values replace everyone's, as when sharing the initial weights.
  constexpr int kRoot = 0;
  std::vector<float> weights(16, -1.0f);
  if (rank == kRoot) {
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = 0.5f * static_cast<float>(i);
  }
  status = context.Broadcast(weights.data(), weights.data(), weights.size(),
                             ddp::DataType::kFloat32, kRoot);
  if (status.ok()) status = CheckAll("broadcast", weights, [](double i) { return 0.5 * i; });
  if (!status.ok()) return status;

  // Barrier: no rank gets past it before every rank has reached it.
  return context.Barrier();
}

}  // namespace

int main() {
  // Reads DDP_RANK, DDP_SIZE, DDP_RENDEZVOUS_ADDR, DDP_RENDEZVOUS_PORT, DDP_JOB_TOKEN, ...
  absl::StatusOr<std::unique_ptr<ddp::Context>> context = ddp::Context::CreateFromEnvironment();
  if (!context.ok()) {
    std::fprintf(stderr, "could not join the job: %s\n", context.status().ToString().c_str());
    return 1;
  }
  const int rank = (*context)->rank();
  std::printf("rank %d of %d, local rank %d of %d\n", rank, (*context)->size(),
              (*context)->local_rank(), (*context)->local_size());

  absl::Status status = RunCollectives(**context);
  if (status.ok()) {
    // Leave explicitly to see a failed flush; the destructor would shut down silently.
    status = (*context)->Shutdown();
  } else {
    // Tell the peers why, so they fail now instead of waiting for this rank until the timeout.
    (*context)->Abort(status);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
    return 1;
  }
  std::printf("rank %d: ok\n", rank);
  return 0;
}
