// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Server-side optimizers of async keys: the built-ins (sgd, adam, sum) and those an application
// registers (ddp/ps.h RegisterOptimizer), and their application to a partition of any floating
// dtype (f16 and bf16 through f32).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ddp/ps.h"
#include "ddp/types.h"
#include "ps/protocol.h"

namespace ddp::ps {

// The optimizer an async key's partition config names, with its parameters.
OptimizerConfig OptimizerOf(const PartitionConfig& config);

absl::StatusOr<std::unique_ptr<ServerOptimizer>> MakeOptimizer(const OptimizerConfig& config,
                                                               size_t count);

// value = optimizer(value, gradient) for `count` elements of `type` (a floating type).
void ApplyOptimizer(ServerOptimizer& optimizer, DataType type, void* value, const void* gradient,
                    size_t count);

}  // namespace ddp::ps
