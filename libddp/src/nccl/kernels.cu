// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// CUDA kernels of the NCCL backend: scaling, integer averages and identity fills, grid-stride
// loops over any count (including > 2^31 elements).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <limits>

#include "nccl/kernels.h"

namespace ddp::nccl::kernels {
namespace {

constexpr int kThreads = 256;

dim3 Blocks(size_t count) {
  const size_t blocks = (count + kThreads - 1) / kThreads;
  return dim3(static_cast<unsigned>(blocks < 65535 * 8 ? (blocks > 0 ? blocks : 1) : 65535 * 8));
}

template <typename T>
struct Arith {
  using Compute = float;
  __device__ static float ToCompute(T v) { return static_cast<float>(v); }
  __device__ static T FromCompute(float v) { return static_cast<T>(v); }
};
template <>
struct Arith<double> {
  using Compute = double;
  __device__ static double ToCompute(double v) { return v; }
  __device__ static double FromCompute(double v) { return v; }
};
template <>
struct Arith<__half> {
  using Compute = float;
  __device__ static float ToCompute(__half v) { return __half2float(v); }
  __device__ static __half FromCompute(float v) { return __float2half_rn(v); }
};
template <>
struct Arith<__nv_bfloat16> {
  using Compute = float;
  __device__ static float ToCompute(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 FromCompute(float v) { return __float2bfloat16_rn(v); }
};

template <typename T>
__global__ void ScaleKernel(T* dst, const T* src, size_t n, typename Arith<T>::Compute factor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x) {
    dst[i] = Arith<T>::FromCompute(Arith<T>::ToCompute(src[i]) * factor);
  }
}

// Integers (Horovod's rule, as reduce::Scale on the CPU): the product in f64, truncated toward
// zero, saturated at the type's limits; a NaN product is 0.
template <typename T>
__global__ void ScaleIntKernel(T* dst, const T* src, size_t n, double factor, T lowest, T max) {
  const double low = static_cast<double>(lowest), high = static_cast<double>(max);
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x) {
    const double v = trunc(static_cast<double>(src[i]) * factor);
    dst[i] = v != v ? T(0) : v <= low ? lowest : v >= high ? max : static_cast<T>(v);
  }
}

template <typename T>
int LaunchScaleInt(void* dst, const void* src, size_t n, double factor, void* stream) {
  ScaleIntKernel<T><<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), n, factor, std::numeric_limits<T>::lowest(),
      std::numeric_limits<T>::max());
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
__global__ void DivideKernel(T* buf, size_t n, int64_t divisor) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x) {
    buf[i] = static_cast<T>(static_cast<int64_t>(buf[i]) / divisor);  // truncates toward 0
  }
}

template <typename T>
__global__ void FillKernel(T* dst, size_t n, T value) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{blockDim.x} * gridDim.x) {
    dst[i] = value;
  }
}

template <typename T>
int LaunchScale(void* dst, const void* src, size_t n, double factor, void* stream) {
  using C = typename Arith<T>::Compute;
  ScaleKernel<T><<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<T*>(dst), static_cast<const T*>(src), n, static_cast<C>(factor));
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int LaunchDivide(void* buf, size_t n, int64_t divisor, void* stream) {
  DivideKernel<T><<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<T*>(buf), n, divisor);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int LaunchFill(void* dst, size_t n, T value, void* stream) {
  FillKernel<T><<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<T*>(dst),
                                                                               n, value);
  return static_cast<int>(cudaGetLastError());
}

// The identity of `op` for T: 0, 1, the largest value (min) or the lowest (max).
template <typename T>
int FillFor(ReduceOp op, void* dst, size_t n, T zero, T one, T highest, T lowest, void* stream) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return LaunchFill<T>(dst, n, zero, stream);
    case ReduceOp::kProduct:
      return LaunchFill<T>(dst, n, one, stream);
    case ReduceOp::kMin:
      return LaunchFill<T>(dst, n, highest, stream);
    case ReduceOp::kMax:
      return LaunchFill<T>(dst, n, lowest, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace

int Scale(DataType type, void* dst, const void* src, size_t count, double factor, void* stream) {
  if (count == 0) return 0;
  switch (type) {
    case DataType::kFloat32:
      return LaunchScale<float>(dst, src, count, factor, stream);
    case DataType::kFloat64:
      return LaunchScale<double>(dst, src, count, factor, stream);
    case DataType::kFloat16:
      return LaunchScale<__half>(dst, src, count, factor, stream);
    case DataType::kBFloat16:
      return LaunchScale<__nv_bfloat16>(dst, src, count, factor, stream);
    case DataType::kInt8:
      return LaunchScaleInt<int8_t>(dst, src, count, factor, stream);
    case DataType::kUInt8:
      return LaunchScaleInt<uint8_t>(dst, src, count, factor, stream);
    case DataType::kInt32:
      return LaunchScaleInt<int32_t>(dst, src, count, factor, stream);
    case DataType::kInt64:
      return LaunchScaleInt<int64_t>(dst, src, count, factor, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int DivideInt(DataType type, void* buf, size_t count, int64_t divisor, void* stream) {
  if (count == 0) return 0;
  if (divisor == 0) return static_cast<int>(cudaErrorInvalidValue);
  switch (type) {
    case DataType::kInt8:
      return LaunchDivide<int8_t>(buf, count, divisor, stream);
    case DataType::kUInt8:
      return LaunchDivide<uint8_t>(buf, count, divisor, stream);
    case DataType::kInt32:
      return LaunchDivide<int32_t>(buf, count, divisor, stream);
    case DataType::kInt64:
      return LaunchDivide<int64_t>(buf, count, divisor, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

int FillIdentity(DataType type, ReduceOp op, void* dst, size_t count, void* stream) {
  if (count == 0) return 0;
  // f16 and bf16 as their bit patterns: 0, 1.0, +inf, -inf.
  switch (type) {
    case DataType::kFloat32:
      return FillFor<float>(op, dst, count, 0.0f, 1.0f, INFINITY, -INFINITY, stream);
    case DataType::kFloat64:
      return FillFor<double>(op, dst, count, 0.0, 1.0, INFINITY, -INFINITY, stream);
    case DataType::kFloat16:
      return FillFor<uint16_t>(op, dst, count, 0, 0x3C00, 0x7C00, 0xFC00, stream);
    case DataType::kBFloat16:
      return FillFor<uint16_t>(op, dst, count, 0, 0x3F80, 0x7F80, 0xFF80, stream);
    case DataType::kInt8:
      return FillFor<int8_t>(op, dst, count, 0, 1, INT8_MAX, INT8_MIN, stream);
    case DataType::kUInt8:
      return FillFor<uint8_t>(op, dst, count, 0, 1, UINT8_MAX, 0, stream);
    case DataType::kInt32:
      return FillFor<int32_t>(op, dst, count, 0, 1, INT32_MAX, INT32_MIN, stream);
    case DataType::kInt64:
      return FillFor<int64_t>(op, dst, count, 0, 1, INT64_MAX, INT64_MIN, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace ddp::nccl::kernels
