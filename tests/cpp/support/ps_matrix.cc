// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "support/ps_matrix.h"

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "reduce/reduce.h"
#include "support/check.h"

namespace ddp::testing {

namespace {

// Small integers, exact in every dtype (int8 included) for up to 8 workers.
double Grad(int worker, int step, size_t i) {
  return static_cast<double>((worker + 1) + step + static_cast<int>(i % 3));
}

void Store(DataType t, void* p, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DataType::kFloat64:
      static_cast<double*>(p)[i] = v;
      return;
    case DataType::kFloat16:
      static_cast<uint16_t*>(p)[i] = reduce::FloatToHalf(static_cast<float>(v));
      return;
    case DataType::kBFloat16: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bits >> 16);
      return;
    }
    case DataType::kInt8:
      static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      return;
    case DataType::kUInt8:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      return;
    case DataType::kInt32:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case DataType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
  }
}

double Load(DataType t, const void* p, size_t i) {
  switch (t) {
    case DataType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DataType::kFloat16:
      return reduce::HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::kBFloat16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DataType::kInt8:
      return static_cast<const int8_t*>(p)[i];
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(p)[i];
    case DataType::kInt32:
      return static_cast<const int32_t*>(p)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

absl::Status SyncKeys(ps::ParameterServer& ps, std::mt19937_64& rng) {
  const int w = ps.worker_index();
  const int n = ps.num_workers();
  const DataType types[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                            DataType::kInt32,    DataType::kInt64};
  const size_t count = 3001;  // several partitions of DDP_PS_PARTITION_BYTES=4096 for most
  std::vector<int> keys;
  for (DataType t : types) {
    std::vector<char> init(count * DataTypeSize(t));
    for (size_t i = 0; i < count; ++i) Store(t, init.data(), i, static_cast<double>(i % 5));
    ps::KeyOptions o;
    const int64_t shape[] = {static_cast<int64_t>(count)};
    auto key = ps.Register(absl::StrCat("sync_", DataTypeName(t)), t, shape,
                           w == 0 ? init.data() : nullptr, o);
    CHECK_OK(key.status());
    keys.push_back(*key);
    std::vector<char> got(init.size(), 0x55);
    CHECK_OK(ps.Pull(*key, got.data()).Wait());
    CHECK_OK(Expect(got == init, absl::StrCat("initial value of ", DataTypeName(t))));
  }
  for (int step = 0; step < 3; ++step) {
    for (size_t k = 0; k < keys.size(); ++k) {
      const DataType t = types[k];
      std::vector<char> grad(count * DataTypeSize(t));
      for (size_t i = 0; i < count; ++i) Store(t, grad.data(), i, Grad(w, step, i));
      std::vector<char> out(grad.size());
      // Alternate PushPull and Push-then-Pull.
      ps::Handle h;
      if ((step + static_cast<int>(k)) % 2 == 0) {
        h = ps.PushPull(keys[k], grad.data(), out.data());
        CHECK_OK(h.Wait());
      } else {
        CHECK_OK(ps.Push(keys[k], grad.data()).Wait());
        h = ps.Pull(keys[k], out.data());
        CHECK_OK(h.Wait());
      }
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int v = 0; v < n; ++v) want += Grad(v, step, i);
        if (Load(t, out.data(), i) != want) {
          return absl::InternalError(absl::StrCat("sync ", DataTypeName(t), " step ", step,
                                                  " element ", i, ": ", Load(t, out.data(), i),
                                                  " != ", want));
        }
      }
      CHECK_OK(Expect(h.version() == step + 1 && h.contributors() == n,
                      absl::StrCat("version ", h.version(), " contributors ", h.contributors())));
    }
    // Workers at different speeds.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
  }
  return absl::OkStatus();
}

absl::Status AsyncKeys(ps::ParameterServer& ps, std::mt19937_64& rng) {
  const int w = ps.worker_index();
  const int n = ps.num_workers();
  const size_t count = 2500;
  const int pushes = 20;
  ps::KeyOptions o;
  o.consistency = ps::Consistency::kAsync;
  o.optimizer.name = "sum";
  std::vector<float> init(count, 1.0f);
  const int64_t shape[] = {static_cast<int64_t>(count)};
  auto counted = ps.Register("async_counted", DataType::kFloat32, shape, init.data(), o);
  CHECK_OK(counted.status());
  o.staleness = 1;
  auto bounded = ps.Register("async_bounded", DataType::kFloat32, shape, init.data(), o);
  CHECK_OK(bounded.status());
  // A sync key as a barrier: its pull waits for every worker's push.
  ps::KeyOptions so;
  std::vector<int32_t> token(1, 0);
  const int64_t one[] = {1};
  auto barrier = ps.Register("barrier", DataType::kInt32, one, token.data(), so);
  CHECK_OK(barrier.status());

  std::vector<float> ones(count, 1.0f);
  std::vector<float> out(count);
  for (int c = 1; c <= pushes; ++c) {
    CHECK_OK(ps.PushPull(*counted, ones.data(), out.data()).Wait());
    CHECK_OK(ps.PushPull(*bounded, ones.data(), out.data()).Wait());
    // Pushed c times: every live worker had pushed at least c - 1 (s = 1).
    const float floor = 1.0f + static_cast<float>(n * (c - 1));
    for (size_t i = 0; i < count; ++i) {
      if (out[i] < floor) {
        return absl::InternalError(absl::StrCat("staleness bound broken: after ", c,
                                                " pushes worker ", w, " pulled ", out[i], " < ",
                                                floor));
      }
    }
    // Worker 0 slow, the others fast: the bound has something to hold back.
    if (w == 0) std::this_thread::sleep_for(std::chrono::microseconds(1000 + rng() % 2000));
  }
  std::vector<int32_t> b(1, 1);
  CHECK_OK(ps.PushPull(*barrier, b.data(), b.data()).Wait());
  CHECK_OK(ps.Pull(*counted, out.data()).Wait());
  const float want = 1.0f + static_cast<float>(n * pushes);
  for (size_t i = 0; i < count; ++i) {
    if (out[i] != want) {
      return absl::InternalError(
          absl::StrCat("async: element ", i, " is ", out[i], ", want ", want, " (each push once)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunPsMatrix(ps::ParameterServer& ps, uint64_t seed) {
  if (!ps.is_worker()) return ps.Serve();
  std::mt19937_64 rng(seed + static_cast<uint64_t>(ps.rank()));
  CHECK_OK(SyncKeys(ps, rng));
  CHECK_OK(AsyncKeys(ps, rng));
  return ps.Finish();
}

}  // namespace ddp::testing
