// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// A process's flight record holds its other jobs that are named as a framework's groups
// (Engine::NameGroup: torch.distributed's new_group groups are libddp jobs of their own).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "ddp/ddp.h"

namespace ddp {
namespace {

std::unique_ptr<Context> OneRankJob() {
  Options options;  // rank 0 of 1: no token, no network
  auto ctx = Context::Create(options);
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  return ctx.ok() ? std::move(*ctx) : nullptr;
}

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(FlightRecord, HoldsTheProcesssOtherJobsThatAreNamedAsGroups) {
  ::unsetenv("DDP_JOB_TOKEN");
  std::unique_ptr<Context> job = OneRankJob();
  std::unique_ptr<Context> group = OneRankJob();
  std::unique_ptr<Context> unnamed = OneRankJob();
  ASSERT_TRUE(job && group && unnamed);
  job->engine().NameGroup("0", "default_pg", {0, 1, 2});
  group->engine().NameGroup("1", "a \"pair\"", {0, 2});
  std::vector<float> x(4, 1.0f);
  ASSERT_TRUE(group->engine()
                  .AllreduceAsync("in the pair", x.data(), x.data(), DataType::kFloat32, {4},
                                  ReduceOp::kSum)
                  .Wait()
                  .ok());
  ASSERT_TRUE(
      unnamed->engine()
          .AllreduceAsync("elsewhere", x.data(), x.data(), DataType::kFloat32, {4}, ReduceOp::kSum)
          .Wait()
          .ok());

  const std::string record = job->engine().FlightRecord("asked");
  EXPECT_TRUE(
      absl::StrContains(record, R"("group":{"name":"0","desc":"default_pg","ranks":[0,1,2]})"))
      << record;
  EXPECT_TRUE(absl::StrContains(
      record, R"(,"groups":[{"format":"libddp-flight-recorder","version":1,"rank":0,"size":1,)"))
      << record;
  EXPECT_TRUE(
      absl::StrContains(record, R"("group":{"name":"1","desc":"a \"pair\"","ranks":[0,2]})"))
      << record;
  EXPECT_EQ(CountOf(record, R"("name":"in the pair")"), 1u) << record;
  EXPECT_EQ(CountOf(record, "elsewhere"), 0u) << record;  // not named: not a group of the job's
  EXPECT_EQ(CountOf(record, "\"format\":"), 2u) << record;
  EXPECT_TRUE(absl::EndsWith(record, "]}\n")) << record;
  // A group's own record holds the job's (named too), not itself again.
  const std::string groups = group->engine().FlightRecord("asked");
  EXPECT_EQ(CountOf(groups, R"("name":"in the pair")"), 1u) << groups;
  EXPECT_EQ(CountOf(groups, R"("desc":"default_pg")"), 1u) << groups;

  group.reset();  // a group that is gone is in no record
  const std::string after = job->engine().FlightRecord("asked");
  EXPECT_TRUE(absl::StrContains(after, R"(,"groups":[]})")) << after;
  EXPECT_EQ(CountOf(after, "in the pair"), 0u) << after;
}

// Records taken on one thread while groups come and go on another: each record is whole, and
// holds only groups that were alive (run under TSan and ASan in CI's sanitizer builds).
TEST(FlightRecord, IsTakenSafelyWhileGroupsComeAndGo) {
  ::unsetenv("DDP_JOB_TOKEN");
  std::unique_ptr<Context> job = OneRankJob();
  ASSERT_TRUE(job);
  job->engine().NameGroup("0", "default_pg", {0});
  std::atomic<bool> done{false};
  std::atomic<int> records{0};
  std::thread reader([&] {
    do {
      const std::string record = job->engine().FlightRecord("asked");
      if (!absl::EndsWith(record, "]}\n")) ADD_FAILURE() << record;
      records.fetch_add(1);
    } while (!done.load());
  });
  for (int i = 0; i < 20; ++i) {
    std::unique_ptr<Context> group = OneRankJob();
    ASSERT_TRUE(group);
    group->engine().NameGroup(absl::StrCat(i + 1), "undefined", {0});
  }
  done.store(true);
  reader.join();
  EXPECT_GT(records.load(), 0);
  EXPECT_TRUE(absl::StrContains(job->engine().FlightRecord("after"), R"(,"groups":[]})"));
}

}  // namespace
}  // namespace ddp
