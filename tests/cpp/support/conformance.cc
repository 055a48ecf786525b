// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The conformance matrix (see conformance.h).
#include "support/conformance.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "support/data.h"

namespace ddp::testing {
namespace {

constexpr DataType kTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                               DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                               DataType::kInt32,    DataType::kInt64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

std::string Name(absl::string_view coll, DataType t, ReduceOp op, size_t count, bool in_place) {
  return absl::StrCat(coll, " ", DataTypeName(t), " ", ReduceOpName(op), " count ", count,
                      in_place ? " in-place" : " out-of-place");
}

#define RETURN_IF_ERROR(expr) \
  do {                        \
    absl::Status s_ = (expr); \
    if (!s_.ok()) return s_;  \
  } while (0)

struct Suite {
  Context& ctx;
  uint64_t seed;
  uint64_t call = 0;
  uint64_t digest = 1469598103934665603ULL;
  int n() const { return ctx.size(); }
  int r() const { return ctx.rank(); }

  absl::Status Allreduce(DataType t, ReduceOp op, size_t count, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    const std::string what = Name("allreduce", t, op, count, in_place);
    std::vector<char> in(count * es + 1), out(count * es + 1);
    FillInput(g, t, op, r(), in.data(), count);
    std::vector<char> pristine = in;
    Poison(out.data(), out.size());
    if (in_place) {
      std::memcpy(out.data(), in.data(), count * es);
      RETURN_IF_ERROR(ctx.Allreduce(out.data(), out.data(), count, t, op));
    } else {
      RETURN_IF_ERROR(ctx.Allreduce(in.data(), out.data(), count, t, op));
      if (in != pristine) return absl::InternalError(what + ": the send buffer was modified");
    }
    if (static_cast<unsigned char>(out[count * es]) != 0xCD) {
      return absl::InternalError(what + ": wrote past the end of the receive buffer");
    }
    digest = Digest(out.data(), count * es, digest);
    return CheckReduced(g, t, op, n(), out.data(), count, 0, what);
  }

  absl::Status Allgatherv(DataType t, size_t count, bool uneven, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    std::vector<size_t> counts(static_cast<size_t>(n()), count);
    if (uneven) {
      for (int j = 0; j < n(); ++j) counts[static_cast<size_t>(j)] = j == 1 ? 0 : count / 2 + j;
    }
    std::vector<size_t> offsets;
    size_t total = 0;
    for (size_t c : counts) {
      offsets.push_back(total);
      total += c;
    }
    const std::string what =
        Name(uneven ? "allgatherv" : "allgather", t, ReduceOp::kSum, count, in_place);
    const size_t mine = counts[static_cast<size_t>(r())];
    std::vector<char> in(mine * es + 1), out(total * es + 1);
    Poison(out.data(), out.size());
    FillInput(g, t, ReduceOp::kSum, r(), in.data(), mine);
    char* slot = out.data() + offsets[static_cast<size_t>(r())] * es;
    const void* send = in.data();
    if (in_place) {
      std::memcpy(slot, in.data(), mine * es);
      send = slot;
    }
    if (uneven) {
      RETURN_IF_ERROR(ctx.Allgatherv(send, out.data(), counts, t));
    } else {
      RETURN_IF_ERROR(ctx.Allgather(send, out.data(), count, t));
    }
    for (int j = 0; j < n(); ++j) {
      RETURN_IF_ERROR(CheckCopied(g, t, ReduceOp::kSum, j,
                                  out.data() + offsets[static_cast<size_t>(j)] * es,
                                  counts[static_cast<size_t>(j)], 0, what));
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(DataType t, size_t count, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    const int root = static_cast<int>(call % static_cast<uint64_t>(n()));
    const std::string what =
        absl::StrCat(Name("broadcast", t, ReduceOp::kSum, count, in_place), " root ", root);
    std::vector<char> in(count * es + 1), out(count * es + 1);
    Poison(out.data(), out.size());
    const void* send = nullptr;
    if (r() == root) {
      FillInput(g, t, ReduceOp::kSum, root, in.data(), count);
      if (in_place) {
        std::memcpy(out.data(), in.data(), count * es);
        send = out.data();
      } else {
        send = in.data();
      }
    }
    RETURN_IF_ERROR(ctx.Broadcast(send, out.data(), count, t, root));
    return CheckCopied(g, t, ReduceOp::kSum, root, out.data(), count, 0, what);
  }

  absl::Status ReduceScatterv(DataType t, ReduceOp op, size_t count, bool uneven, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    std::vector<size_t> counts(static_cast<size_t>(n()), count);
    if (uneven) {
      for (int j = 0; j < n(); ++j) counts[static_cast<size_t>(j)] = j == 0 ? 0 : count / 2 + j;
    }
    size_t total = 0, offset = 0;
    for (int j = 0; j < n(); ++j) {
      if (j == r()) offset = total;
      total += counts[static_cast<size_t>(j)];
    }
    const size_t mine = counts[static_cast<size_t>(r())];
    const std::string what =
        Name(uneven ? "reducescatterv" : "reducescatter", t, op, count, in_place);
    std::vector<char> in(total * es + 1), out(mine * es + 1);
    FillInput(g, t, op, r(), in.data(), total);
    Poison(out.data(), out.size());
    const char* result = out.data();
    if (in_place) {
      RETURN_IF_ERROR(uneven ? ctx.ReduceScatterv(in.data(), in.data(), counts, t, op)
                             : ctx.ReduceScatter(in.data(), in.data(), count, t, op));
      result = in.data();
    } else {
      RETURN_IF_ERROR(uneven ? ctx.ReduceScatterv(in.data(), out.data(), counts, t, op)
                             : ctx.ReduceScatter(in.data(), out.data(), count, t, op));
      if (static_cast<unsigned char>(out[mine * es]) != 0xCD) {
        return absl::InternalError(what + ": wrote past the end of the receive buffer");
      }
    }
    return CheckReduced(g, t, op, n(), result, mine, offset, what);
  }

  absl::Status Alltoall(DataType t, size_t count, bool in_place) {
    const DataGen g{seed, ++call};
    const size_t es = DataTypeSize(t);
    const size_t total = count * static_cast<size_t>(n());
    const std::string what = Name("alltoall", t, ReduceOp::kSum, count, in_place);
    std::vector<char> in(total * es + 1), out(total * es + 1);
    FillInput(g, t, ReduceOp::kSum, r(), in.data(), total);
    Poison(out.data(), out.size());
    char* result = out.data();
    if (in_place) {
      RETURN_IF_ERROR(ctx.Alltoall(in.data(), in.data(), count, t));
      result = in.data();
    } else {
      RETURN_IF_ERROR(ctx.Alltoall(in.data(), out.data(), count, t));
    }
    for (int j = 0; j < n(); ++j) {
      RETURN_IF_ERROR(CheckCopied(g, t, ReduceOp::kSum, j,
                                  result + static_cast<size_t>(j) * count * es, count,
                                  static_cast<size_t>(r()) * count, what));
    }
    return absl::OkStatus();
  }
};

}  // namespace

namespace {

// Whether op `op` on type `t` runs at `count`. Every combination runs at every count but the
// largest of its list; there every type runs SUM and AVERAGE, and float32 every op. The largest
// counts are there for what does not depend on the op: segments, pipelining, element sizes at
// segment boundaries (every type keeps them); each op's kernel is checked at the other counts,
// 65537 elements included (DDP_TEST_FULL_MATRIX=1 runs every op at every count too: make
// test-matrix).
bool Runs(DataType t, ReduceOp op, size_t count, const std::vector<size_t>& counts) {
  static const bool full = std::getenv("DDP_TEST_FULL_MATRIX") != nullptr;
  const size_t largest = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  return full || count < largest || t == DataType::kFloat32 || op == ReduceOp::kSum ||
         op == ReduceOp::kAverage;
}

}  // namespace

absl::Status RunMatrix(Context& ctx, uint64_t seed, const std::vector<size_t>& reduce_counts,
                       const std::vector<size_t>& block_counts) {
  Suite s{ctx, seed};
  for (bool in_place : {false, true}) {
    for (DataType t : kTypes) {
      for (size_t count : reduce_counts) {
        for (ReduceOp op : kOps) {
          if (Runs(t, op, count, reduce_counts)) {
            RETURN_IF_ERROR(s.Allreduce(t, op, count, in_place));
          }
        }
      }
      for (size_t count : block_counts) {
        RETURN_IF_ERROR(s.Allgatherv(t, count, /*uneven=*/false, in_place));
        RETURN_IF_ERROR(s.Allgatherv(t, count, /*uneven=*/true, in_place));
        RETURN_IF_ERROR(s.Broadcast(t, count * 3 + 1, in_place));
        RETURN_IF_ERROR(s.Alltoall(t, count, in_place));
        for (ReduceOp op : kOps) {
          if (!Runs(t, op, count, block_counts)) continue;
          RETURN_IF_ERROR(s.ReduceScatterv(t, op, count, /*uneven=*/false, in_place));
          RETURN_IF_ERROR(s.ReduceScatterv(t, op, count, /*uneven=*/true, in_place));
        }
      }
    }
  }
  for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(ctx.Barrier());
  std::printf("digest=%016llx\n", static_cast<unsigned long long>(s.digest));
  return absl::OkStatus();
}

}  // namespace ddp::testing
