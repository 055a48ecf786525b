#!/bin/bash
# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# The GPU checks, on the GPU machine (after tests/gpu/prepare.sh here): a build with NCCL and the
# Python extension (warnings as errors: a second compiler), the C++ NCCL, handle and C API tests,
# and the CUDA Python workers (1 rank: NCCL allows one rank per GPU). Log: $OUT/log. Through the
# device tool: command "bash .device/check.sh", carry [".device"], about 2 minutes warm.
set -uo pipefail
exec > >(tee "$OUT/log") 2>&1
P=$PWD/.device/root/usr
LIB=$P/lib/x86_64-linux-gnu
nvidia-smi -L; nvcc --version | tail -2; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())'
NCCL=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])')
echo "nccl at $NCCL"; ls $NCCL/include $NCCL/lib
export LD_LIBRARY_PATH=$LIB:$NCCL/lib:${LD_LIBRARY_PATH:-}
SSL_INC=/usr/include; [ -f /usr/include/openssl/evp.h ] || SSL_INC=$P/include
SSLXF=""; [ -f /usr/include/x86_64-linux-gnu/openssl/opensslconf.h ] || SSLXF="-isystem $P/include/x86_64-linux-gnu"
CRYPTO=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so.3 2>/dev/null || echo $LIB/libcrypto.a)
echo "ssl: $SSL_INC $CRYPTO"
t0=$(date +%s)
cmake -S . -B /tmp/b -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_WERROR=ON \
  -DCMAKE_PREFIX_PATH=$P -Dabsl_DIR=$LIB/cmake/absl -DGTest_DIR=$LIB/cmake/GTest \
  -DOPENSSL_INCLUDE_DIR=$SSL_INC -DOPENSSL_CRYPTO_LIBRARY=$CRYPTO "-DCMAKE_CXX_FLAGS=$SSLXF" \
  -DDDP_WITH_NCCL=ON -DNCCL_INCLUDE_DIR=$NCCL/include -DNCCL_LIBRARY=$(ls $NCCL/lib/libnccl.so* | head -1) \
  -DDDP_WITH_PYTHON=ON -DPython_EXECUTABLE=$(which python3) -Dpybind11_DIR=$(python3 -m pybind11 --cmakedir) \
  -DDDP_WITH_MPI=OFF -DDDP_WITH_OFI=OFF -DDDP_BUILD_BENCHMARKS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  || exit 10
cmake --build /tmp/b -j 16 || exit 11
echo "build took $(( $(date +%s) - t0 )) s"
timeout 240 /tmp/b/bin/ddp-tests --gtest_filter='Nccl.*:Handle.*:CApi.*' ; echo "ddp-tests rc $?"
cmake --install /tmp/b --component python --prefix /tmp/site >/dev/null
export PYTHONPATH=/tmp/site
python3 -c 'import ddp, ddp.torch; print("ddp", ddp.__file__, ddp.nccl_built())'
timeout 200 python3 -m ddp.run -np 1 python3 tests/python/workers/api_cuda.py; echo "api_cuda rc $?"
DDP_TIMEOUT_SECONDS=1 timeout 100 python3 -m ddp.run -np 1 python3 tests/python/workers/api_cuda_watch.py; echo "api_cuda_watch rc $?"
