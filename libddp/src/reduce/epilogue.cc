// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Epilogue::Apply.
#include "reduce/epilogue.h"

#include <cstring>

#include "reduce/reduce.h"

namespace ddp::reduce {

void Epilogue::Apply(DataType type, void* dst, const void* src, size_t count) const {
  if (count == 0) return;
  if (IsFloating(type) && postscale != 1.0) {
    Scale(type, dst, src, count, factor());
    return;
  }
  if (type == DataType::kFloat32 && divisor != 1 && dst != src) {
    // Out of place in one pass: the kernels' quotient (x / d, rounded once), into dst.
    const auto d = static_cast<float>(divisor);
    const auto* x = static_cast<const float*>(src);
    auto* y = static_cast<float*>(dst);
    for (size_t i = 0; i < count; ++i) y[i] = x[i] / d;  // (a float postscale returned above)
    return;
  }
  if (dst != src) std::memcpy(dst, src, count * DataTypeSize(type));
  if (divisor != 1) DivideBy(type, dst, count, divisor);
  if (postscale != 1.0) Scale(type, dst, dst, count, postscale);  // integers: after the quotient
}

}  // namespace ddp::reduce
