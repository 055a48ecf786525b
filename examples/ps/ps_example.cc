// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// A parameter-server job in C++: workers fit y = 3x - 1 by asynchronous SGD on the servers.
//
//   DDP_PS_SERVERS=1 ddprun -np 3 ./ps_example      (2 workers, the last rank a server; or
//   ddprun -np 2 --servers 1 ./ps_example, which starts the server with Python's ddp.ps.server)
//
// Every rank runs this program; ParameterServer gives it its role. Servers serve until the
// workers finish; workers register the weights (worker 0's initial value), then push gradients
// and pull the weights the servers' SGD made of everyone's pushes.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "ddp/ps.h"

int main() {
  auto made = ddp::ps::ParameterServer::CreateFromEnvironment();
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 1;
  }
  ddp::ps::ParameterServer& ps = **made;
  if (!ps.is_worker()) {
    absl::Status served = ps.Serve();
    std::printf("server %d: %s\n", ps.server_index(),
                served.ok() ? "ok" : served.ToString().c_str());
    return served.ok() ? 0 : 1;
  }
  const int w = ps.worker_index();
  ddp::ps::KeyOptions options;
  options.consistency = ddp::ps::Consistency::kAsync;
  options.optimizer.name = "sgd";
  options.optimizer.learning_rate = 0.1;
  options.optimizer.momentum = 0.5;
  std::vector<double> weights = {0.0, 0.0};  // slope, intercept
  const int64_t shape[] = {2};
  auto key = ps.Register("weights", ddp::DataType::kFloat64, shape, weights.data(), options);
  if (!key.ok()) {
    std::fprintf(stderr, "%s\n", key.status().ToString().c_str());
    return 1;
  }
  std::mt19937 rng(static_cast<unsigned>(w));
  std::uniform_real_distribution<double> xs(-1.0, 1.0);
  double loss = 0;
  absl::Status s = ps.Pull(*key, weights.data()).Wait();
  for (int step = 0; step < 300 && s.ok(); ++step) {
    std::vector<double> grad = {0.0, 0.0};
    loss = 0;
    for (int i = 0; i < 16; ++i) {  // this worker's batch
      const double x = xs(rng);
      const double err = weights[0] * x + weights[1] - (3 * x - 1);
      grad[0] += err * x / 16;
      grad[1] += err / 16;
      loss += err * err / 16;
    }
    s = ps.PushPull(*key, grad.data(), weights.data()).Wait();  // the servers' weights, after it
  }
  if (s.ok()) s = ps.Finish();
  const bool fit = std::abs(weights[0] - 3) < 0.05 && std::abs(weights[1] + 1) < 0.05;
  std::printf("worker %d: %s (slope %.3f, intercept %.3f, loss %.2e)\n", w,
              !s.ok() ? s.ToString().c_str()
              : fit   ? "ok"
                      : "did not fit",
              weights[0], weights[1], loss);
  return s.ok() && fit ? 0 : 1;
}
