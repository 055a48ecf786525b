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
  if (dst != src) std::memcpy(dst, src, count * DataTypeSize(type));
  if (divisor != 1) DivideBy(type, dst, count, divisor);
  if (postscale != 1.0) Scale(type, dst, dst, count, postscale);  // integers: after the quotient
}

}  // namespace ddp::reduce
