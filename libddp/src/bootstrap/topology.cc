// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Topology from host names.
#include "bootstrap/topology.h"

#include <algorithm>

namespace ddp::bootstrap {

Topology ComputeTopology(const std::vector<std::string>& hosts, int rank) {
  Topology t;
  const std::string& mine = hosts[static_cast<size_t>(rank)];
  std::vector<std::string> distinct;
  t.local_rank = 0;
  t.local_size = 0;
  for (size_t r = 0; r < hosts.size(); ++r) {
    if (std::find(distinct.begin(), distinct.end(), hosts[r]) == distinct.end()) {
      distinct.push_back(hosts[r]);
    }
    if (hosts[r] == mine) {
      if (static_cast<int>(r) < rank) ++t.local_rank;
      ++t.local_size;
    }
  }
  t.cross_size = static_cast<int>(distinct.size());
  t.cross_rank =
      static_cast<int>(std::find(distinct.begin(), distinct.end(), mine) - distinct.begin());
  return t;
}

}  // namespace ddp::bootstrap
