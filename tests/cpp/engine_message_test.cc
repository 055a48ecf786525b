// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Negotiation messages and the response cache, without processes: encoding round trips, hostile
// input, agreement messages, deterministic slots and LRU eviction.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/message.h"
#include "engine/response_cache.h"

namespace ddp::engine {
namespace {

TensorMeta Meta(std::vector<int64_t> shape, DataType type = DataType::kFloat32) {
  TensorMeta m;
  m.type = type;
  m.shapes = {std::move(shape)};
  return m;
}

TEST(EngineMessage, RecordsRoundTrip) {
  std::string bytes;
  TensorMeta group = Meta({3, 4});
  group.shapes.push_back({});
  group.shapes.push_back({7});
  group.op = ReduceOp::kAverage;
  group.prescale = 0.5;
  group.postscale = 3.0;
  group.root = 2;
  group.device = 1;
  AppendRecord({Record::Type::kRequest, "grad/layer1.weight", group}, &bytes);
  AppendRecord({Record::Type::kStallFail, "stuck", {}}, &bytes);
  AppendRecord({Record::Type::kRequest, "", Meta({0}, DataType::kInt8)}, &bytes);
  auto records = ParseRecords(bytes);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 3u);
  EXPECT_EQ((*records)[0].name, "grad/layer1.weight");
  EXPECT_TRUE((*records)[0].meta == group);
  EXPECT_EQ((*records)[1].type, Record::Type::kStallFail);
  EXPECT_EQ((*records)[1].name, "stuck");
  EXPECT_EQ((*records)[2].meta.type, DataType::kInt8);
  EXPECT_EQ(group.ElementCount(), 12u + 1u + 7u);
}

TEST(EngineMessage, HostileBytesAreErrorsNotCrashes) {
  std::string good;
  AppendRecord({Record::Type::kRequest, "x", Meta({5, 5})}, &good);
  for (size_t cut = 1; cut < good.size(); ++cut) {
    EXPECT_FALSE(ParseRecords(good.substr(0, cut)).ok()) << "truncated at " << cut;
  }
  std::mt19937_64 rng(42);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    (void)ParseRecords(junk);  // must not crash or allocate absurdly
  }
  std::string huge = good;
  huge[1] = '\xff';  // name length ~4 GiB
  huge[2] = '\xff';
  huge[3] = '\xff';
  huge[4] = '\x7f';
  EXPECT_FALSE(ParseRecords(huge).ok());
}

TEST(EngineMessage, AgreementErrorsNameTheFieldAndWhoSaidWhat) {
  TensorMeta a = Meta({4}), b = Meta({4}, DataType::kFloat16), c = Meta({4});
  absl::Status s = CheckAgreement("w", {0, 1, 2}, {&a, &b, &c});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "allreduce 'w'")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 1: f16; ranks 0, 2: f32")) << s;
  TensorMeta g0 = Meta({2, 3}), g1 = Meta({5, 3}), g2 = Meta({5, 4});
  for (auto* m : {&g0, &g1, &g2}) m->kind = OpKind::kAllgather;
  EXPECT_TRUE(CheckAgreement("g", {0, 1}, {&g0, &g1}).ok()) << "first dims may differ";
  s = CheckAgreement("g", {0, 1, 2}, {&g0, &g1, &g2});
  EXPECT_TRUE(absl::StrContains(s.message(), "all but the first")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "rank 2: [*, 4]")) << s;
}

TEST(EngineResponseCache, SlotsAreDeterministicAndEvictionIsLeastRecentlyUsed) {
  ResponseCache cache(3);
  int evicted = 0;
  EXPECT_EQ(cache.Put("a", Meta({1}), &evicted), 0);
  EXPECT_EQ(cache.Put("b", Meta({2}), &evicted), 1);
  EXPECT_EQ(cache.Put("c", Meta({3}), &evicted), 2);
  EXPECT_EQ(evicted, -1);
  cache.Touch(0);  // "b" is now the least recently used
  EXPECT_EQ(cache.Put("d", Meta({4}), &evicted), 1);
  EXPECT_EQ(evicted, 1);
  EXPECT_EQ(cache.Find("b"), -1);
  EXPECT_EQ(cache.Find("d"), 1);
  cache.Erase(0);
  EXPECT_FALSE(cache.valid(0));
  EXPECT_EQ(cache.Put("e", Meta({5}), &evicted), 0) << "the lowest free slot is reused";
  EXPECT_EQ(cache.slot_bound(), 3u);
  EXPECT_EQ(cache.Put("e", Meta({6}), &evicted), 0) << "an update keeps its slot";
  EXPECT_TRUE(cache.meta(0) == Meta({6}));
  ResponseCache off(0);
  EXPECT_EQ(off.Put("x", Meta({1}), &evicted), -1);
}

}  // namespace
}  // namespace ddp::engine
