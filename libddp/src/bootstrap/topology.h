// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Topology: local (same host) and cross (host index) ranks derived from every rank's host name.
#pragma once

#include <string>
#include <vector>

namespace ddp::bootstrap {

struct Topology {
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

// hosts[r] is rank r's host identity. Hosts are numbered in order of their lowest rank.
Topology ComputeTopology(const std::vector<std::string>& hosts, int rank);

}  // namespace ddp::bootstrap
