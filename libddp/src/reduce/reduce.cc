// Portable element-wise reduction kernels for every DataType x ReduceOp, and the dispatch behind
// the public entry points of reduce.h.
//
// Speed comes from the compiler's auto-vectorizer, so the loops are shaped for it: GCC at -O2
// uses the "very-cheap" cost model, which only vectorizes a loop when no scalar epilogue and no
// runtime alias check are needed. Hence every hot loop runs over a block of kBlock elements (a
// compile-time trip count) through __restrict pointers, with a separate loop for each way dst may
// alias the inputs, and the ragged tail goes through a zero-padded stack copy of one block.
// f16/bf16 are widened to f32 inside the same loop with the branchless conversions of half.h;
// on CPUs with F16C, f16 goes to the faster kernels of f16c.cc instead.
#include "reduce/reduce.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "reduce/half.h"
#include "reduce/ops.h"
#include "reduce/reduce_internal.h"

// Runtime dispatch: the kernels are compiled twice and the dynamic loader picks the AVX2 copy on
// machines that have it (GNU ifunc, so ELF with glibc only).
// Not under ThreadSanitizer: its runtime is not initialised yet when the dynamic loader runs
// ifunc resolvers, and an instrumented resolver crashes the process at start-up.
#if defined(__SANITIZE_THREAD__)
#define DDP_REDUCE_CLONES
#elif defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__GNUC__)
#define DDP_REDUCE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define DDP_REDUCE_CLONES
#endif

namespace ddp::reduce {
namespace internal {
namespace {

// Elements per kernel block: a multiple of every vector width, small enough for stack scratch
// (2 KiB per array at 8 bytes an element), and a compile-time trip count so that GCC's -O2
// "very-cheap" vectorizer accepts the loop (it rejects loops needing a scalar epilogue).
constexpr size_t kBlock = 256;

// How a stored element is widened for arithmetic and narrowed back. Native types compute as
// themselves; f16 and bf16 compute in f32.
template <typename T>
struct Native {
  using Storage = T;
  using Compute = T;
  static T Load(T v) { return v; }
  static T Store(T v) { return v; }
};

struct Half {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t v) { return HalfBitsToFloat(v); }
  static uint16_t Store(float v) { return FloatToHalfBits(v); }
};

struct BFloat16 {
  using Storage = uint16_t;
  using Compute = float;
  static float Load(uint16_t v) { return BFloat16BitsToFloatUnquieted(v); }
  static uint16_t Store(float v) { return FloatToBFloat16Bits(v); }
};

template <typename E, typename Op>
[[gnu::always_inline]] inline typename E::Storage Element(typename E::Storage a,
                                                          typename E::Storage b) {
  return E::Store(Op::Apply(E::Load(a), E::Load(b)));
}

// One block per aliasing case. __restrict is only sound because the pointers given to each are
// disjoint (or, for the two inputs of BlockDistinct, only read).
template <typename E, typename Op, typename S = typename E::Storage>
[[gnu::always_inline]] inline void BlockDistinct(S* __restrict dst, const S* __restrict a,
                                                 const S* __restrict b) {
  for (size_t i = 0; i < kBlock; ++i) dst[i] = Element<E, Op>(a[i], b[i]);
}

// dst is a (kDstIsA) or b (!kDstIsA); operand order is kept so NaN payloads do not depend on it.
template <typename E, typename Op, bool kDstIsA, typename S = typename E::Storage>
[[gnu::always_inline]] inline void BlockInPlace(S* __restrict io, const S* __restrict other) {
  for (size_t i = 0; i < kBlock; ++i) {
    io[i] = kDstIsA ? Element<E, Op>(io[i], other[i]) : Element<E, Op>(other[i], io[i]);
  }
}

template <typename E, typename Op, typename S = typename E::Storage>
[[gnu::always_inline]] inline void BlockSelf(S* io) {
  for (size_t i = 0; i < kBlock; ++i) io[i] = Element<E, Op>(io[i], io[i]);
}

template <typename E, typename Op, typename S = typename E::Storage>
[[gnu::always_inline]] inline void CombineSpan(S* dst, const S* a, const S* b, size_t count) {
  const size_t full = count - count % kBlock;
  if (dst == a && dst == b) {
    for (size_t i = 0; i < full; i += kBlock) BlockSelf<E, Op>(dst + i);
  } else if (dst == a) {
    for (size_t i = 0; i < full; i += kBlock) BlockInPlace<E, Op, true>(dst + i, b + i);
  } else if (dst == b) {
    for (size_t i = 0; i < full; i += kBlock) BlockInPlace<E, Op, false>(dst + i, a + i);
  } else {
    for (size_t i = 0; i < full; i += kBlock) BlockDistinct<E, Op>(dst + i, a + i, b + i);
  }
  const size_t rest = count - full;
  if (rest == 0) return;
  // Both inputs are copied before dst is written, so any aliasing is harmless here. The padding
  // is zeroed so the unused lanes compute on defined values.
  S tail_a[kBlock] = {};
  S tail_b[kBlock] = {};
  std::memcpy(tail_a, a + full, rest * sizeof(S));
  std::memcpy(tail_b, b + full, rest * sizeof(S));
  BlockInPlace<E, Op, true>(tail_a, tail_b);
  std::memcpy(dst + full, tail_a, rest * sizeof(S));
}

template <typename E>
[[gnu::always_inline]] inline void CombineTyped(ReduceOp op, typename E::Storage* dst,
                                                const typename E::Storage* a,
                                                const typename E::Storage* b, size_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      CombineSpan<E, Sum>(dst, a, b, count);
      return;
    case ReduceOp::kMin:
      CombineSpan<E, Min>(dst, a, b, count);
      return;
    case ReduceOp::kMax:
      CombineSpan<E, Max>(dst, a, b, count);
      return;
    case ReduceOp::kProduct:
      CombineSpan<E, Product>(dst, a, b, count);
      return;
  }
}

// Floats (and f16/bf16 through f32) divide by the divisor rounded to the compute type.
template <typename E, typename S = typename E::Storage>
[[gnu::always_inline]] inline void DivideBlock(S* __restrict io, typename E::Compute divisor) {
  for (size_t i = 0; i < kBlock; ++i) io[i] = E::Store(E::Load(io[i]) / divisor);
}

template <typename E>
[[gnu::always_inline]] inline void DivideFloating(typename E::Storage* buf, size_t count,
                                                  int64_t divisor) {
  using S = typename E::Storage;
  const auto d = static_cast<typename E::Compute>(divisor);
  const size_t full = count - count % kBlock;
  for (size_t i = 0; i < full; i += kBlock) DivideBlock<E>(buf + i, d);
  const size_t rest = count - full;
  if (rest == 0) return;
  S tail[kBlock] = {};
  std::memcpy(tail, buf + full, rest * sizeof(S));
  DivideBlock<E>(tail, d);
  std::memcpy(buf + full, tail, rest * sizeof(S));
}

// Integers of up to 32 bits divide in double, which vectorizes where integer division does not.
// The truncated double quotient is exact: if x/d is not an integer it lies at least 1/|d| from
// one, while the rounding error is at most |x/d| * 2^-53, which is smaller because |x| < 2^53.
template <typename T>
[[gnu::always_inline]] inline void DivideSmallIntBlock(T* __restrict io, double divisor) {
  for (size_t i = 0; i < kBlock; ++i) {
    io[i] = static_cast<T>(static_cast<int32_t>(static_cast<double>(io[i]) / divisor));
  }
}

template <typename T>
[[gnu::always_inline]] inline void DivideSmallInt(T* buf, size_t count, int64_t divisor) {
  if (divisor == -1) {
    // The one quotient that does not fit in int32 (INT32_MIN / -1); negate with wrap-around.
    using U = std::make_unsigned_t<T>;
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<T>(U{0} - static_cast<U>(buf[i]));
    return;
  }
  const auto d = static_cast<double>(divisor);
  const size_t full = count - count % kBlock;
  for (size_t i = 0; i < full; i += kBlock) DivideSmallIntBlock<T>(buf + i, d);
  const size_t rest = count - full;
  if (rest == 0) return;
  T tail[kBlock] = {};
  std::memcpy(tail, buf + full, rest * sizeof(T));
  DivideSmallIntBlock<T>(tail, d);
  std::memcpy(buf + full, tail, rest * sizeof(T));
}

// No vector instruction divides 64-bit integers, so this stays a scalar loop.
[[gnu::always_inline]] inline void DivideInt64(int64_t* buf, size_t count, int64_t divisor) {
  if (divisor == -1) {
    // INT64_MIN / -1 overflows; negate with wrap-around instead.
    for (size_t i = 0; i < count; ++i) {
      buf[i] = static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(buf[i]));
    }
    return;
  }
  for (size_t i = 0; i < count; ++i) buf[i] /= divisor;
}

template <typename T>
T* As(void* p) {
  return static_cast<T*>(p);
}
template <typename T>
const T* As(const void* p) {
  return static_cast<const T*>(p);
}

// A type or op outside the enum can only come from memory corruption or a missing validation
// upstream; silently leaving dst unchanged would corrupt training, so stop loudly instead.
[[noreturn]] void DieInvalid(const char* what, int value) {
  std::fprintf(stderr, "ddp::reduce: invalid %s %d\n", what, value);
  std::abort();
}

}  // namespace

// The clones go on these two entry points, with every kernel inlined into them, because Clang
// cannot clone function templates.
DDP_REDUCE_CLONES void CombinePortable(DataType type, ReduceOp op, void* dst, const void* a,
                                       const void* b, size_t count) {
  if (!IsValid(op)) DieInvalid("ReduceOp", static_cast<int>(op));
  switch (type) {
    case DataType::kFloat32:
      return CombineTyped<Native<float>>(op, As<float>(dst), As<float>(a), As<float>(b), count);
    case DataType::kFloat64:
      return CombineTyped<Native<double>>(op, As<double>(dst), As<double>(a), As<double>(b), count);
    case DataType::kFloat16:
      return CombineTyped<Half>(op, As<uint16_t>(dst), As<uint16_t>(a), As<uint16_t>(b), count);
    case DataType::kBFloat16:
      return CombineTyped<BFloat16>(op, As<uint16_t>(dst), As<uint16_t>(a), As<uint16_t>(b), count);
    case DataType::kInt8:
      return CombineTyped<Native<int8_t>>(op, As<int8_t>(dst), As<int8_t>(a), As<int8_t>(b), count);
    case DataType::kUInt8:
      return CombineTyped<Native<uint8_t>>(op, As<uint8_t>(dst), As<uint8_t>(a), As<uint8_t>(b),
                                           count);
    case DataType::kInt32:
      return CombineTyped<Native<int32_t>>(op, As<int32_t>(dst), As<int32_t>(a), As<int32_t>(b),
                                           count);
    case DataType::kInt64:
      return CombineTyped<Native<int64_t>>(op, As<int64_t>(dst), As<int64_t>(a), As<int64_t>(b),
                                           count);
  }
  DieInvalid("DataType", static_cast<int>(type));
}

DDP_REDUCE_CLONES void DivideByPortable(DataType type, void* buf, size_t count, int64_t divisor) {
  // Integer division by zero is undefined behaviour; an average over zero ranks is a caller bug.
  if (divisor == 0) DieInvalid("divisor", 0);
  switch (type) {
    case DataType::kFloat32:
      return DivideFloating<Native<float>>(As<float>(buf), count, divisor);
    case DataType::kFloat64:
      return DivideFloating<Native<double>>(As<double>(buf), count, divisor);
    case DataType::kFloat16:
      return DivideFloating<Half>(As<uint16_t>(buf), count, divisor);
    case DataType::kBFloat16:
      return DivideFloating<BFloat16>(As<uint16_t>(buf), count, divisor);
    case DataType::kInt8:
      return DivideSmallInt(As<int8_t>(buf), count, divisor);
    case DataType::kUInt8:
      return DivideSmallInt(As<uint8_t>(buf), count, divisor);
    case DataType::kInt32:
      return DivideSmallInt(As<int32_t>(buf), count, divisor);
    case DataType::kInt64:
      return DivideInt64(As<int64_t>(buf), count, divisor);
  }
  DieInvalid("DataType", static_cast<int>(type));
}

}  // namespace internal

void Combine(DataType type, ReduceOp op, void* dst, const void* a, const void* b, size_t count) {
  if (type == DataType::kFloat16 && IsValid(op) && internal::HaveF16c()) {
    return internal::CombineHalfF16c(op, static_cast<uint16_t*>(dst),
                                     static_cast<const uint16_t*>(a),
                                     static_cast<const uint16_t*>(b), count);
  }
  internal::CombinePortable(type, op, dst, a, b, count);
}

void DivideBy(DataType type, void* buf, size_t count, int64_t divisor) {
  if (type == DataType::kFloat16 && divisor != 0 && internal::HaveF16c()) {
    return internal::DivideHalfF16c(static_cast<uint16_t*>(buf), count, divisor);
  }
  internal::DivideByPortable(type, buf, count, divisor);
}

float HalfToFloat(uint16_t h) { return internal::HalfBitsToFloat(h); }
uint16_t FloatToHalf(float f) { return internal::FloatToHalfBits(f); }
float BFloat16ToFloat(uint16_t b) { return internal::BFloat16BitsToFloat(b); }
uint16_t FloatToBFloat16(float f) { return internal::FloatToBFloat16Bits(f); }

}  // namespace ddp::reduce
