# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
# Thin entry points: deps, build, demo, test, bench. Everything real lives in CMake and scripts.
SHELL := /bin/bash
BUILD ?= build
JOBS ?= 2
# Python writes the .pyc files of what it imports, whatever the caller's environment says: with
# PYTHONDONTWRITEBYTECODE set, every rank of every test would compile torch's modules again (3-4
# s more per PyTorch 2 process on 2 cores). They go into the venvs and git-ignored __pycache__.
unexport PYTHONDONTWRITEBYTECODE
# Debian's Python: it sees Debian's numpy and PyTorch (1.13), which the venv inherits.
PYTHON ?= /usr/bin/python3
VENV := .venv
# The deployment checks' tools (yamllint, checkov, ...): a venv of their own, apart from torch's.
DEPLOY_VENV := .venv-deploy
# TensorFlow's own venv: its numpy 2 must never reach .venv, whose Debian torch 1.13 needs 1.x.
TF_VENV := .venv-tf
# PyTorch 2's own venv (the current release, bindings/python/requirements-torch2.txt), beside
# Debian's 1.13 in .venv: no system site packages, so neither torch 1.13 nor numpy 1.x reaches
# it, and its numpy 2 never reaches .venv. Debian's python3 too: the extension built for .venv
# loads in it.
TORCH2_VENV := .venv-torch2
# The lint tools (ruff, mypy, lizard; tests/lint/requirements.txt), pinned, in a venv of their own.
LINT_VENV := .venv-lint
# The Pythons `make wheel` builds for (one wheel per tag: Debian's 3.11 and pyenv's 3.11 share
# cp311); e.g. WHEEL_PYTHONS="$$(pyenv root)/versions/3.12.1/bin/python" for a cp312 wheel.
WHEEL_PYTHONS ?= /usr/bin/python3 python3

APT_PACKAGES := build-essential cmake ninja-build pkg-config git libabsl-dev libssl-dev libgtest-dev \
  libgmock-dev libbenchmark-dev openmpi-bin libopenmpi-dev libfabric-dev libfabric-bin \
  pybind11-dev python3-dev python3-venv python3-numpy python3-torch libtorch-dev python3-pytest \
  python3-matplotlib python3-sklearn iproute2 clang clang-format clang-tidy libclang-rt-14-dev

.PHONY: help lint lint-venv lint-python lint-format lint-size lint-spdx lint-tidy
.PHONY: all deps venv deploy-venv tf-venv torch2-venv torch2-frameworks build build-tf build-torch2 test-tf \
  test-torch2 demo-tf demo demo-ps test test-full test-python test-deploy test-pip \
  wheel test-wheel package test-package test-packages \
  eks-up eks-run eks-stage-data eks-down \
  test-fast test-slow test-matrix sanitize asan asan-build tsan tsan-build fuzz-build fuzz-smoke fuzz fuzz-seeds soak chaos bench bench-horovod horovod-suite-tf install clean format

all: build

# The targets a contributor runs, from the `##` notes on their lines.
help:  ## this list
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | \
	  sed -E 's/^([a-z0-9-]+):.*## (.*)/\1\t\2/' | awk -F'\t' '{printf "  %-18s %s\n", $$1, $$2}'

# Idempotent and non-interactive: installs only what is missing.
deps:  ## the Debian packages the build and tests need (apt-get; idempotent)
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all present"; fi

venv: $(VENV)/.ok
$(VENV)/.ok: tests/python/requirements.txt
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install -q -r tests/python/requirements.txt
	touch $@

deploy-venv: $(DEPLOY_VENV)/.ok
$(DEPLOY_VENV)/.ok: tests/deploy/requirements.txt k8s/requirements.txt
	rm -rf $(DEPLOY_VENV) && $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install -q -r tests/deploy/requirements.txt
	touch $@

# `make lint`, the first stage of `make test`: each part stops on a finding (CONTRIBUTING.md says
# what each checks). About 3 minutes on 2 cores from a fresh clone, nearly all of it clang-tidy;
# .pre-commit-config.yaml runs the same targets.
lint-venv: $(LINT_VENV)/.ok
$(LINT_VENV)/.ok: tests/lint/requirements.txt
	rm -rf $(LINT_VENV) && $(PYTHON) -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/pip install -q -r tests/lint/requirements.txt
	touch $@

# The C++ files of the repository, new ones included.
CXX_SOURCES = $$(git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.cu')
lint: lint-python lint-format lint-size lint-spdx lint-tidy  ## ruff, mypy, clang-format, sizes, SPDX lines, clang-tidy
lint-python: lint-venv  ## ruff (pyproject.toml's rules), mypy on the typed modules
	$(LINT_VENV)/bin/ruff check .
	$(LINT_VENV)/bin/mypy
lint-format: deps  ## every C++ file as clang-format writes it (make format fixes)
	clang-format --dry-run --Werror $(CXX_SOURCES)
# No function past 80 lines or past a cyclomatic complexity of 25 in libddp/ and bindings/.
lint-size: lint-venv  ## no function past 80 lines or a complexity of 25
	$(LINT_VENV)/bin/lizard --length 80 --CCN 25 --warnings_only libddp bindings
lint-spdx:  ## SPDX lines on every source file (tests/lint/spdx.py --fix adds them)
	$(PYTHON) tests/lint/spdx.py
lint-tidy: deps $(BUILD)/build.ninja  ## clang-tidy's profile (.clang-tidy) on libddp/src
	$(PYTHON) tests/lint/clang_tidy.py --build $(BUILD) --jobs $(JOBS)

# Development builds treat warnings as errors (a user's plain CMake or pip build does not).
# After deps: CMake looks for the optional dependencies (Open MPI, libfabric) once, and under
# `make -j` a configure that ran while apt was still installing them left them out for good.
$(BUILD)/build.ninja: | deps $(VENV)/.ok
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_WERROR=ON \
	  -DPython_EXECUTABLE=$(abspath $(VENV))/bin/python -DDDP_WITH_PYTHON=ON

# Builds everything and installs the `ddp` package (extension, libddp.so, Python files) and the
# `ddprun` and `ddp-model` commands into .venv.
build: deps venv $(BUILD)/build.ninja  ## libddp, its tests and benchmarks; ddp, ddprun, ddp-model into .venv
	cmake --build $(BUILD) -j $(JOBS)
	@site=$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])'); \
	rm -rf "$$site/ddp" && cmake --install $(BUILD) --component python --prefix "$$site" >/dev/null && \
	$(PYTHON) packaging/dev_metadata.py "$$site" && \
	printf '#!%s\nimport sys\nfrom ddp.run import main\nsys.exit(main())\n' \
	  "$(abspath $(VENV))/bin/python" > $(VENV)/bin/ddprun && chmod +x $(VENV)/bin/ddprun && \
	printf '#!%s\nimport sys\nfrom ddp_model import main\nsys.exit(main())\n' \
	  "$(abspath $(VENV))/bin/python" > $(VENV)/bin/ddp-model && chmod +x $(VENV)/bin/ddp-model && \
	printf '#!%s\nimport sys\nfrom ddp.timeline import main\nsys.exit(main())\n' \
	  "$(abspath $(VENV))/bin/python" > $(VENV)/bin/ddp-timeline && \
	chmod +x $(VENV)/bin/ddp-timeline && \
	echo "installed ddp into $$site and ddprun, ddp-model, ddp-timeline into $(VENV)/bin"

# Installs the `ddp` package (cmake's python component: extension, libddp.so, Python files, the
# TensorFlow ops when built) and `ddprun` into the venv $(1).
define install_ddp
	@site=$$($(1)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])'); \
	rm -rf "$$site/ddp" && cmake --install $(BUILD) --component python --prefix "$$site" >/dev/null && \
	$(PYTHON) packaging/dev_metadata.py "$$site" && \
	printf '#!%s\nimport sys\nfrom ddp.run import main\nsys.exit(main())\n' \
	  "$(abspath $(1))/bin/python" > $(1)/bin/ddprun && chmod +x $(1)/bin/ddprun && \
	echo "installed ddp into $$site and ddprun into $(1)/bin"
endef

tf-venv: $(TF_VENV)/.ok
$(TF_VENV)/.ok: bindings/tensorflow/requirements.txt
	rm -rf $(TF_VENV) && $(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/pip install -q -r bindings/tensorflow/requirements.txt
	touch $@

# ddp.tensorflow: the build also compiles the TensorFlow ops against .venv-tf's TensorFlow, and
# installs the package (ops included) and ddprun into .venv-tf.
build-tf: build tf-venv  ## the TensorFlow ops too, and ddp into .venv-tf
	cmake -S . -B $(BUILD) -DDDP_TENSORFLOW_PYTHON=$(abspath $(TF_VENV))/bin/python >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	$(call install_ddp,$(TF_VENV))

# About 2 minutes, most of it fetching torch's wheel and the CUDA libraries it brings (it runs on
# CPU as it is). --no-compile: the .pyc files of what is imported are written on first import,
# not all of torch's up front (40 s less).
torch2-venv: $(TORCH2_VENV)/.ok
$(TORCH2_VENV)/.ok: bindings/python/requirements-torch2.txt
	rm -rf $(TORCH2_VENV) && $(PYTHON) -m venv $(TORCH2_VENV)
	$(TORCH2_VENV)/bin/pip install -q --no-compile -r bindings/python/requirements-torch2.txt
	touch $@

# The frameworks that take a backend name (Lightning, DeepSpeed, Accelerate), torchft, the
# cluster engines (Ray, PySpark) in .venv-torch2, for tests/python/test_{frameworks,ray,spark,
# torchft}.py and the examples; torch and numpy held where requirements-torch2.txt puts them. About 40 s.
torch2-frameworks: $(TORCH2_VENV)/.frameworks-ok  ## Lightning, DeepSpeed, Accelerate, Ray, PySpark, torchft into .venv-torch2
$(TORCH2_VENV)/.frameworks-ok: $(TORCH2_VENV)/.ok bindings/python/requirements-frameworks.txt
	$(TORCH2_VENV)/bin/pip install -q --no-compile --no-build-isolation \
	  -c bindings/python/requirements-torch2.txt -r bindings/python/requirements-frameworks.txt
	touch $@

# ddp.torch on PyTorch 2: the same build (the extension does not link torch) installed into
# .venv-torch2, and the backend's torch-native part built for its torch too (bindings/torch_native:
# one small module per torch line, the profiler's events and torch 2's C++ Backend, about 1 min).
build-torch2: build torch2-venv  ## ddp and torch 2's native backend into .venv-torch2
	cmake -S . -B $(BUILD) \
	  -DDDP_TORCH_PYTHONS='$(abspath $(VENV))/bin/python;$(abspath $(TORCH2_VENV))/bin/python' >/dev/null
	cmake --build $(BUILD) -j $(JOBS)
	$(call install_ddp,$(TORCH2_VENV))

# The demo: a real 4-rank PyTorch training job on the embedded default transport (handwritten
# digits from scikit-learn, no download): >= 97% test accuracy in well under a minute.
demo: build  ## 4 ranks train a digits classifier to >= 97% (PyTorch, embedded default)
	$(VENV)/bin/ddprun -np 4 $(VENV)/bin/python examples/pytorch/train_digits.py

# The Keras demo: the digits CNN trained with model.fit by 4 ranks through ddp.tensorflow.keras
# (DistributedOptimizer and Horovod's callbacks), to >= 97% test accuracy.
demo-tf: build-tf  ## the same with Keras (ddp.tensorflow.keras)
	$(TF_VENV)/bin/ddprun -np 4 $(TF_VENV)/bin/python examples/tensorflow/train_digits_keras.py \
	  --target-accuracy 0.97

# The parameter-server demo: the same digits CNN trained asynchronously by 4 workers against 2
# server processes (Adam on the servers), to >= 97% test accuracy.
demo-ps: build  ## the same with 4 workers and 2 parameter servers
	$(VENV)/bin/ddprun -np 4 --servers 2 $(VENV)/bin/python examples/ps/train_digits_ps.py \
	  --target-accuracy 0.97

# What CI runs: the C++ suite (fast and slow labels; tests/cpp/CMakeLists.txt says what the
# matrix label holds), the Python suite, ddp.torch's tests on PyTorch 2, PyTorch's own suite's CI
# part (torch-suite-ci, 120 s a test at most), the TensorFlow suite (in .venv-tf), the deployment
# checks, the wheel (pip's build from scratch, auditwheel) and the .deb with their install tests,
# then ASan/UBSan (built
# with clang, so a second compiler's warnings stop the build too) and TSan builds of the fast
# label.
# Each part says when it starts (CI's log then shows where the time goes).
STAMP = @date -u +'== %H:%M:%S UTC: make $(1)'
test:  ## what CI runs (lint first): about 42 minutes on 2 cores
	$(call STAMP,test: lint)
	$(MAKE) deps
	$(MAKE) lint
	$(call STAMP,test: build and venvs)
	@# The C++ build (two compilers) beside the three venvs' downloads and installs, all at once
	@# (mostly waiting on the network and the disk): each venv after the other took as long as
	@# the build.
	$(MAKE) -j 4 --output-sync=target build torch2-frameworks tf-venv deploy-venv
	$(call STAMP,test: ctest)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 1800 -L 'fast|slow'
	$(call STAMP,test-python)
	$(MAKE) test-python
	$(call STAMP,test-torch2)
	$(MAKE) test-torch2 TORCH2_TESTS='torch and not once'
	$(call STAMP,torch-suite-ci)
	TORCH_SUITE_TIMEOUT=120 $(MAKE) torch-suite-ci
	$(call STAMP,test-tf)
	$(MAKE) test-tf
	@# The deployment checks (one core: linters and a rehearsal that mostly waits) beside the
	@# wheel (pip's build of libddp from scratch, then its clean-room test) and the .deb.
	$(call STAMP,test-deploy and test-packages)
	$(MAKE) -j 2 --output-sync=target test-deploy test-packages
	$(call STAMP,sanitize)
	$(MAKE) sanitize
	$(call STAMP,test: done)

# Everything `make test` runs, and the whole conformance matrix (N = 1..8 on every transport,
# every fake-host layout).
test-full: test test-matrix  ## make test and the whole conformance matrix

# Every op at every count too (DDP_TEST_FULL_MATRIX: CI's runs give the largest counts SUM and
# AVERAGE on every dtype and every op on float32; tests/cpp/support/conformance.cc).
test-matrix: build  ## the conformance matrix's larger layouts (label matrix)
	cd $(BUILD) && DDP_TEST_FULL_MATRIX=1 ctest --output-on-failure -j $(JOBS) --timeout 1800 \
	  -L 'matrix|wide'

# The Python package, ddp.torch, ddprun and the demo: real multi-process jobs (pytest).
test-python: build  ## tests/python on Debian's torch 1.13
	$(VENV)/bin/python -m pytest -q --durations=12 tests/python

# ddp.torch's tests (pytest marker `torch`: the torch.distributed backend, DistributedOptimizer,
# elastic, parameter server, fast path, Horovod's API, the demos) on PyTorch 2, in .venv-torch2;
# test-python runs them on 1.13. `make test` leaves out those marked `once` (tests/python/pytest.ini).
TORCH2_TESTS ?= torch
test-torch2: build-torch2 torch2-frameworks  ## ddp.torch's tests on PyTorch 2 (TORCH2_TESTS=marker expression)
	DDP_REQUIRE_FRAMEWORKS=1 $(TORCH2_VENV)/bin/python -m pytest --durations=5 \
	  -m '$(TORCH2_TESTS)' tests/python

# ddp.tensorflow in TensorFlow's environment: ops x dtypes, gradients, tf.function, errors.
test-tf: build-tf  ## tests/tensorflow in .venv-tf
	$(TF_VENV)/bin/python -m pytest -q tests/tensorflow

# k8s/ and terraform/ checked offline, and the jobs rehearsed on network namespaces
# (tests/deploy; about 2 min). The PyPI tools must be there; kubectl, terraform and root (for
# the rehearsal) are used where present, skipped with the reason where not.
test-deploy: build deploy-venv  ## k8s/ and terraform/ offline, the jobs rehearsed (tests/deploy)
	DDP_REQUIRE_DEPLOY_TOOLS=1 $(DEPLOY_VENV)/bin/python -m pytest -q tests/deploy

# A libddp cluster on EKS, one command each (k8s/eks.py; k8s/README.md, "On a cluster"): eks-up
# (terraform apply, outputs to the git-ignored k8s/local/, Kueue's queues), eks-run
# JOB=ddp-digits|ddp-synthetic|ddp-bench|all [OVERLAY=gpu-efa|cpu] (or JOB=ddp-ps,
# JOB=ddp-torch-digits) (the image built and pushed once per commit, the job sent to its queue,
# waited for, accuracy, busbw and the EFA check printed), eks-stage-data (the training data to
# S3, which FSx imports), eks-down (the jobs, Karpenter's nodes, then the stack). DRY_RUN=1 runs
# what works offline (render, validate; REHEARSE=1 rehearses the job too) and prints every cloud
# command instead of running it. They need .venv-deploy alone (k8s/requirements.txt): no build.
EKS := $(DEPLOY_VENV)/bin/python k8s/eks.py
eks-up: deploy-venv  ## the EKS stack (k8s/README.md, On a cluster)
	$(EKS) up
eks-run: deploy-venv  ## JOB=... [OVERLAY=...] on the cluster
	$(EKS) run JOB=$(JOB) OVERLAY=$(OVERLAY)
eks-stage-data: deploy-venv  ## the training data to S3 for FSx
	$(EKS) stage-data
eks-down: deploy-venv  ## the jobs, Karpenter's nodes, then the stack
	$(EKS) down

# `pip install .` from scratch in a clean virtual environment, then a 2-rank job (about 3 min).
# Not in `make test`, whose wheel build is the same pip build from scratch.
test-pip: deps  ## pip install . from scratch, then a 2-rank job
	tests/pip_install_test.sh

# Self-contained wheels (packaging/wheel.sh: pip's build of this checkout, then auditwheel; torch
# 2's native module built against .venv-torch2's torch) into dist/, and their clean-room test
# (tests/wheel_install_test.sh: fresh venvs, the build trees, headers and Abseil hidden).
wheel: deps torch2-venv  ## self-contained wheels into dist/ (WHEEL_PYTHONS), no compiler needed to install
	packaging/wheel.sh $(WHEEL_PYTHONS)
test-wheel: wheel  ## the cp311 wheel installed and run in a clean room
	tests/wheel_install_test.sh
# The C++ library as a .deb (cmake/package.cmake): a Release build of the library alone, then
# CPack; its test unpacks it into a scratch root and builds the examples against it.
package: deps  ## a .deb of the C++ library, headers, CMake package and pkg-config file into dist/
	cmake -S . -B build-package -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
	  -DDDP_BUILD_TESTS=OFF -DDDP_BUILD_BENCHMARKS=OFF -DDDP_WITH_PYTHON=OFF >/dev/null
	cmake --build build-package -j $(JOBS)
	rm -rf build-package/cpack && rm -f dist/libddp-dev_*.deb
	cd build-package && cpack -B cpack >/dev/null
	mkdir -p dist && cp build-package/cpack/libddp-dev_*.deb dist/
	@ls -l dist/libddp-dev_*.deb
test-package: package  ## the .deb unpacked into a scratch root, the C++ examples built against it
	tests/package_test.sh
test-packages:  ## test-wheel, then test-package (one after the other: each builds on both cores)
	$(MAKE) test-wheel
	$(MAKE) test-package

test-fast: build  ## ctest's fast label
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -L fast

test-slow: build  ## ctest's slow label
	cd $(BUILD) && ctest --output-on-failure -L slow

# Sanitizer builds run the fast label with smaller payloads (DDP_TEST_QUICK=1), not the 8-rank
# conformance layouts (label wide: the paths of the 3- to 6-rank ones, 7 minutes). They leave out
# the NCCL plugin (its CUDA runtime is not instrumented and needs a GPU to run); the tests then
# cover libddp's side of it: CUDA submissions refused with the reason.
# SANITIZER_SKIP: fast tests whose paths other fast tests take in the same sanitizer run (the
# main build runs them all). The fake-host ThreeByTwoHierInChunks runs the pipeline of
# HierarchicalAcrossNetworkNamespaces (2 hosts of 2 ranks, the hierarchical allreduce in chunks,
# every collective; over real TCP links between namespaces there) on 3 hosts; recursive doubling
# with 5 and 6 ranks takes the paths of RecursiveDoubling4 and of 3 ranks' fold; the engine's
# mixed orders with 3 and 4 ranks those of 1 and 2 ranks (the same negotiation and cache, more
# rounds); the reduction kernels of int8, uint8, int64 and float64 are the templates that int32 and
# float32 instantiate (the exhaustive float16/bfloat16 conversions stay). About 6 of CI's minutes.
SANITIZER_SKIP ?= Hosts/Conformance\..*/T[a-z]*ByTwoHierInChunks|Tcp/Variants\..*/RecursiveDoubling[56]|EngineMixed\..*/[34]$$|ReduceTest\.(Int8|UInt8|Int64|Float64)MatchesReference
# TSAN_SKIP: TSan looks for races between the threads of a process (the engine's, the transport's
# progress, the store's, the caller's), which are the same threads whatever the ranks: it runs the
# unit, engine, fault and store tests and the smaller layouts of each transport (2 ranks, the
# hierarchical TwoByTwo, the 2- and 3-rank variants), not the larger ones ASan/UBSan run (4 more
# of CI's minutes); nor the single-threaded arithmetic of the reduction kernels and conversions.
TSAN_SKIP ?= ReduceTest\.|ReduceIsa|ConversionRandomTest|Hosts/Conformance\..*/Uneven|(Shm|Tcp)/Conformance\..*/N3|Variants\..*/(RecursiveDoubling|SmallSegments|Ring3|RankZeroHostsStore4|Shm4|TcpRxm3|TcpRxmEveryThird)|OfiLarge\..*/TcpRxm
# The fuzz harnesses' committed seeds are replayed in every build (tests FuzzSeeds.*, label fast:
# gcc, ASan/UBSan, TSan); libFuzzer's own runs are `make fuzz-smoke` and `make fuzz`.
sanitize: asan tsan  ## ASan/UBSan and TSan builds and their runs

asan: asan-build
	$(call STAMP,asan: tests)
	cd build-asan && DDP_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitizers/lsan.supp \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS) -L fast \
	  -E '$(SANITIZER_SKIP)'

asan-build: deps
	$(call STAMP,asan: build)
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDDP_SANITIZE=address,undefined \
	  -DCMAKE_CXX_FLAGS_DEBUG='-O1 -g1' -DCMAKE_C_FLAGS_DEBUG='-O1 -g1' \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDDP_WERROR=ON -DDDP_FUZZ=OFF \
	  -DDDP_BUILD_BENCHMARKS=OFF -DDDP_WITH_PYTHON=OFF -DDDP_WITH_NCCL=OFF -DDDP_WITH_MPI=OFF
	cmake --build build-asan -j $(JOBS)

# The libFuzzer harnesses (tests/fuzz): a build of their own (clang, ASan and UBSan, coverage for
# libFuzzer in libddp; no test suite), so that the coverage instrumentation never slows the ASan
# build's multi-process tests. `fuzz-smoke` (no longer in `make test`, which replays the seeds in
# its own builds: 3.5 of CI's minutes) runs each for FUZZ_SMOKE_SECONDS
# from the committed seeds; `fuzz` runs each for FUZZ_MINUTES (0: no limit) or until it has run
# FUZZ_RUNS inputs (e.g. 10000000; default no limit), one after the other (FUZZ_HARNESSES picks),
# keeping what earlier runs found (build-fuzz/tests/fuzz/corpus/); a finding stops it, the input
# saved under build-fuzz/tests/fuzz/artifacts/. Both print each harness's executions.
FUZZ_SMOKE_SECONDS ?= 15
FUZZ_MINUTES ?= 10
FUZZ_RUNS ?= -1
FUZZ_HARNESSES ?= frame handshake negotiation options ps store wire shm_segment
fuzz-build: deps
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDDP_SANITIZE=address,undefined \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DDDP_WERROR=ON -DDDP_FUZZ=ON \
	  -DDDP_FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) -DDDP_BUILD_TESTS=OFF \
	  -DDDP_BUILD_BENCHMARKS=OFF -DDDP_WITH_PYTHON=OFF -DDDP_WITH_NCCL=OFF -DDDP_WITH_MPI=OFF
	cmake --build build-fuzz -j $(JOBS)

fuzz-smoke: fuzz-build  ## each fuzz harness for 15 s
	cd build-fuzz && ctest --output-on-failure -j $(JOBS) -L fuzz

fuzz: fuzz-build  ## each fuzz harness for FUZZ_MINUTES
	@for h in $(FUZZ_HARNESSES); do \
	  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  tests/fuzz/run_fuzzer.sh build-fuzz/bin/fuzz_$$h $$(($(FUZZ_MINUTES) * 60)) \
	    build-fuzz/tests/fuzz/corpus/$$h build-fuzz/tests/fuzz/artifacts/$$h/ \
	    tests/fuzz/corpus/$$h $(FUZZ_RUNS) || exit 1; \
	done

# A 4-rank training loop on the engine for SOAK_MINUTES (default 30), sampled from outside:
# resident memory, fds, threads and /dev/shm must stay flat (tests/soak/soak.py; `make test`
# runs 1 minute of it in tests/python). Saves benchmarks/results/soak-<date>.{json,md,png}.
SOAK_MINUTES ?= 30
soak: build  ## a training loop for SOAK_MINUTES; memory, fds, threads must stay flat
	$(VENV)/bin/python tests/soak/soak.py --minutes $(SOAK_MINUTES) --out benchmarks/results

# CHAOS_TRIALS (default 100) trials of a 4-8 rank training job on 2-4 simulated hosts (network
# namespaces; needs root), one random fault each: a rank killed or stopped, a link cut or
# throttled, the rendezvous host killed during start-up (tests/chaos/chaos.py; `make test` runs 8
# in tests/python: one of each fault, and 3 throttled links). Saves
# benchmarks/results/chaos-<date>.{json,md}. About 16 minutes (docs/reliability.md).
CHAOS_TRIALS ?= 100
chaos: build  ## CHAOS_TRIALS random faults on simulated hosts (root)
	$(VENV)/bin/python tests/chaos/chaos.py --trials $(CHAOS_TRIALS) --out benchmarks/results

# Rewrites the seed corpora (tests/fuzz/corpus/) from libddp's encoders (tests/fuzz/make_seeds.cc).
fuzz-seeds: build
	$(BUILD)/bin/make_seeds tests/fuzz/corpus

# -O1: TSan's checks are the same; its build is a third faster than at -O2.
tsan: tsan-build
	$(call STAMP,tsan: tests)
	cd build-tsan && DDP_TEST_QUICK=1 \
	  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/sanitizers/tsan.supp \
	  ctest --output-on-failure -j $(JOBS) -L fast -E '$(SANITIZER_SKIP)|$(TSAN_SKIP)'

tsan-build: deps
	$(call STAMP,tsan: build)
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDP_SANITIZE=thread \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O1 -g1 -DNDEBUG' -DCMAKE_C_FLAGS_RELWITHDEBINFO='-O1 -g1 -DNDEBUG' \
	  -DDDP_WERROR=ON \
	  -DDDP_BUILD_BENCHMARKS=OFF -DDDP_WITH_PYTHON=OFF -DDDP_WITH_NCCL=OFF -DDDP_WITH_MPI=OFF
	cmake --build build-tsan -j $(JOBS)

bench: build  ## allreduce against Open MPI and Gloo (shared memory, loopback TCP)
	benchmarks/collectives/compare
	benchmarks/collectives/compare_tcp

# libddp against Horovod 0.28.1 (built into .venv-horovod first), the same scripts: submission,
# fused small-gradient and ResNet-50 steps, busbw and training (about 22 minutes with the build,
# 2026-12-02: docs/results.md).
bench-horovod: build  ## libddp against Horovod 0.28.1 (builds it first)
	benchmarks/peers/build_horovod
	$(VENV)/bin/python benchmarks/peers/compare_horovod --runs 3

# Horovod 0.28.1's own TensorFlow tests (test/parallel/test_tensorflow.py and
# test_tensorflow2_keras.py) with only their imports changed to ddp.tensorflow, on 2 and 3 ranks
# (about 5 minutes each: docs/testing.md). HOROVOD=<a checkout of Horovod's repository at v0.28.1>: its tests
# are not in the PyPI sdist. Not part of `make test`; docs/horovod-migration.md has the figures.
HOROVOD_SUITE_NPS ?= 2 3
horovod-suite-tf: build-tf
	@test -n "$(HOROVOD)" || { echo "make horovod-suite-tf HOROVOD=<a Horovod v0.28.1 checkout>"; exit 2; }
	status=0; for np in $(HOROVOD_SUITE_NPS); do \
	  benchmarks/peers/horovod_suite_tf "$(HOROVOD)" $$np || status=$$?; done; exit $$status

install: build  ## libddp and its headers under PREFIX (default /usr/local)
	cmake --install $(BUILD) --prefix $${PREFIX:-/usr/local}

format:  ## clang-format every C++ file in place
	clang-format -i $(CXX_SOURCES)

clean:  ## the builds and the venvs
	rm -rf $(BUILD) build-asan build-tsan build-package build/wheel-* dist .venv-wheel \
	  $(DEPLOY_VENV) $(TF_VENV) $(TORCH2_VENV) $(LINT_VENV)

# PyTorch's own distributed suite (torch/testing/_internal/distributed/distributed_test.py) on
# gloo and on ddp, in .venv (torch 1.13) and .venv-torch2: every test that passes on gloo and not on
# ddp, by reason (tests/torch_suite, docs/testing.md). Not part of `make test`. torch-suite-ci (in
# `make test`): the tests of tests/torch_suite/ci_tests.txt, failing if one passes on gloo and not
# on ddp.
.PHONY: torch-suite torch-suite-ci
torch-suite: build-torch2  ## PyTorch's own distributed suite on gloo and ddp, both torch lines
	tests/torch_suite/run_all.sh full

torch-suite-ci: build-torch2
	tests/torch_suite/run_all.sh ci
