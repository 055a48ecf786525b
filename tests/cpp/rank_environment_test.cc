// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp's side of the rank-environment contract (libddp/src/rank_environment.tsv): the
// variables ReadLaunchEnvironment and Options::FromEnvironment read are exactly the table's
// (libddp-launch, libddp-options), each launcher's example variables give the example's place,
// and where two launchers' identities are there, the table's precedence says which wins. The
// scenarios are generated from the table; tests/python/test_rank_environment.py checks the
// Python writers against the same file.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/env.h"
#include "ddp/launch.h"
#include "ddp/options.h"
#include "ddp/ps.h"
#include "support/check.h"

namespace ddp {
namespace {

struct Row {
  std::string variable;
  std::string launcher;  // "-": none
  int precedence = 0;    // on a launcher's identity rows
  std::set<std::string> read_by;
  std::string example;  // empty: a fallback name, left unset
};

std::vector<Row> ReadTable() {
  const std::string path = absl::StrCat(DDP_SOURCE_DIR, "/libddp/src/rank_environment.tsv");
  const std::string text = testing::ReadFile(path);
  std::vector<Row> rows;
  bool header = true;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    std::vector<std::string> cells = absl::StrSplit(line, '\t');
    EXPECT_EQ(cells.size(), 8u) << path << ": " << line;
    if (cells.size() != 8u) continue;
    if (header) {  // variable, launcher, written by, read by, ddprun, torch group, example, ...
      EXPECT_EQ(cells[0], "variable");
      EXPECT_EQ(cells[3], "read by");
      EXPECT_EQ(cells[6], "example");
      header = false;
      continue;
    }
    Row row;
    row.variable = cells[0];
    std::vector<std::string> launcher = absl::StrSplit(cells[1], ' ');
    row.launcher = launcher[0];
    if (launcher.size() > 1) row.precedence = std::stoi(launcher[1]);
    for (absl::string_view reader : absl::StrSplit(cells[3], ' ', absl::SkipEmpty())) {
      row.read_by.emplace(reader);
    }
    row.example = cells[6];
    rows.push_back(std::move(row));
  }
  EXPECT_GT(rows.size(), 40u) << "no rank-environment table at " << path;
  return rows;
}

const std::vector<Row>& Table() {
  static const std::vector<Row>* rows = new std::vector<Row>(ReadTable());
  return *rows;
}

std::set<std::string> ReadBy(const std::string& reader) {
  std::set<std::string> names;
  for (const Row& row : Table()) {
    if (row.read_by.count(reader) != 0) names.insert(row.variable);
  }
  return names;
}

using Vars = std::map<std::string, std::string>;

// A launcher's rows with their examples (the fallback names, with none, left out).
Vars Example(const std::string& launcher) {
  Vars vars;
  for (const Row& row : Table()) {
    if (row.launcher == launcher && !row.example.empty()) vars[row.variable] = row.example;
  }
  return vars;
}

// The launchers with an identity, by precedence.
std::vector<std::string> Launchers() {
  std::map<int, std::string> by_order;
  for (const Row& row : Table()) {
    if (row.precedence > 0) by_order[row.precedence] = row.launcher;
  }
  std::vector<std::string> names;
  for (const auto& [order, name] : by_order) names.push_back(name);
  return names;
}

// ReadLaunchEnvironment over `vars`, adding every name it asked for to `asked`.
absl::StatusOr<LaunchEnvironment> Read(const Vars& vars, std::set<std::string>* asked) {
  return ReadLaunchEnvironment([&](const char* name) -> std::optional<std::string> {
    asked->insert(name);
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string Join(const std::set<std::string>& names) { return absl::StrJoin(names, " "); }

TEST(RankEnvironment, TheTableHasFourLaunchersInOrder) {
  EXPECT_EQ(absl::StrJoin(Launchers(), " "), "ddp torchrun mpi slurm");
}

// The first word of a variable's name: OMPI, PMI, SLURM...
std::string Family(const std::string& name) { return name.substr(0, name.find('_')); }

// The union of what it asks for, with nothing set, and with each launcher's variables set: all
// of them, all but one, and all but one family (so that a fallback name, or a second set of
// names such as MPICH's after Open MPI's, is asked for too).
TEST(RankEnvironment, LaunchReadsExactlyTheTablesLibddpLaunchRows) {
  std::set<std::string> asked;
  (void)Read({}, &asked);
  for (const char* launcher : {"ddp", "torchrun", "mpi", "slurm", "pmix"}) {
    const Vars all = Example(launcher);
    EXPECT_FALSE(all.empty()) << launcher;
    (void)Read(all, &asked);
    for (const auto& [name, value] : all) {
      Vars less = all;
      less.erase(name);
      (void)Read(less, &asked);
      Vars other_families;
      for (const auto& [other, v] : all) {
        if (Family(other) != Family(name)) other_families[other] = v;
      }
      (void)Read(other_families, &asked);
    }
  }
  const std::set<std::string> listed = ReadBy("libddp-launch");
  std::set<std::string> unlisted, unread;
  for (const std::string& name : asked) {
    if (listed.count(name) == 0) unlisted.insert(name);
  }
  for (const std::string& name : listed) {
    if (asked.count(name) == 0) unread.insert(name);
  }
  EXPECT_TRUE(unlisted.empty()) << "read by ReadLaunchEnvironment but not a libddp-launch row of "
                                   "rank_environment.tsv: "
                                << Join(unlisted);
  EXPECT_TRUE(unread.empty()) << "libddp-launch rows that ReadLaunchEnvironment never reads: "
                              << Join(unread);
}

TEST(RankEnvironment, EachLaunchersExampleGivesRankOneOfTwo) {
  for (const std::string& launcher : Launchers()) {
    std::set<std::string> asked;
    absl::StatusOr<LaunchEnvironment> e = Read(Example(launcher), &asked);
    ASSERT_TRUE(e.ok()) << launcher << ": " << e.status();
    EXPECT_EQ(LauncherName(e->launcher), launcher);
    EXPECT_EQ(e->rank, 1) << launcher;
    EXPECT_EQ(e->size, 2) << launcher;
  }
}

TEST(RankEnvironment, TheLauncherFirstInPrecedenceWins) {
  const std::vector<std::string> launchers = Launchers();
  for (size_t first = 0; first < launchers.size(); ++first) {
    for (size_t second = first + 1; second < launchers.size(); ++second) {
      Vars both = Example(launchers[second]);
      for (const auto& [name, value] : Example(launchers[first])) both[name] = value;
      std::set<std::string> asked;
      absl::StatusOr<LaunchEnvironment> e = Read(both, &asked);
      ASSERT_TRUE(e.ok()) << launchers[first] << " with " << launchers[second] << ": "
                          << e.status();
      EXPECT_EQ(LauncherName(e->launcher), launchers[first])
          << "with " << launchers[second] << "'s variables too";
    }
  }
}

// What `read` asks for of the table's variables, all of them unset, is exactly the rows of
// `reader` (and of `also`, a reader it calls).
template <typename Read>
void ExpectReadsExactly(const char* what, Read read, const std::string& reader,
                        const std::string& also) {
  std::map<std::string, std::string> unset;  // every variable of the table, as if unset
  for (const Row& row : Table()) unset[row.variable] = "";
  std::set<std::string> asked;
  {
    env::ScopedOverrides overrides(&unset);
    env::ScopedReadLog log(&asked);
    read();
  }
  std::set<std::string> unread, unlisted;
  for (const std::string& name : ReadBy(reader)) {
    if (asked.count(name) == 0) unread.insert(name);
  }
  for (const Row& row : Table()) {
    if (asked.count(row.variable) != 0 && row.read_by.count(reader) == 0 &&
        row.read_by.count(also) == 0) {
      unlisted.insert(row.variable);
    }
  }
  EXPECT_TRUE(unread.empty()) << reader << " rows that " << what
                              << " never reads: " << Join(unread);
  EXPECT_TRUE(unlisted.empty()) << "read by " << what << ", but their rows do not say " << reader
                                << ": " << Join(unlisted);
}

TEST(RankEnvironment, OptionsReadExactlyTheTablesLibddpOptionsRows) {
  ExpectReadsExactly(
      "Options::FromEnvironment", [] { ASSERT_TRUE(Options::FromEnvironment().ok()); },
      "libddp-options", "libddp-launch");
}

TEST(RankEnvironment, PsOptionsReadExactlyTheTablesLibddpPsRows) {
  ExpectReadsExactly(
      "PsOptions::FromEnvironment", [] { ASSERT_TRUE(ps::PsOptions::FromEnvironment().ok()); },
      "libddp-ps", "-");
}

}  // namespace
}  // namespace ddp
