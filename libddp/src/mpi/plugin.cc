// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libddp_mpi.so's table (mpi/mpi.h says what it offers) and the bootstrap's MPI calls.
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "mpi/plugin_api.h"
#include "mpi/plugin_impl.h"

namespace ddp::mpi::impl {

std::string MpiText(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

absl::Status MpiError(int code, const char* what) {
  return absl::InternalError(absl::StrCat(what, " failed: ", MpiText(code)));
}

namespace {

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

absl::Status Init(int* rank, int* size) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  int initialized = 0;
  DDP_MPI_CHECK(MPI_Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    int provided = 0;
    DDP_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
                  "MPI_Init_thread");
    std::atexit(FinalizeAtExit);  // libddp initialised it, so libddp finalises it
  }
  // Errors come back as codes (and become libddp errors) instead of aborting the job.
  DDP_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                "MPI_Comm_set_errhandler");
  DDP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, rank), "MPI_Comm_rank");
  DDP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, size), "MPI_Comm_size");
  return absl::OkStatus();
}

absl::Status Broadcast(void* data, size_t bytes, int root) {
  if (bytes > INT32_MAX) return absl::InvalidArgumentError("MPI bootstrap: message too large");
  DDP_MPI_CHECK(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD),
                "MPI_Bcast");
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Allgather(const std::string& mine) {
  int size = 0;
  DDP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  if (mine.size() > (1u << 20)) return absl::InvalidArgumentError("MPI bootstrap: too large");
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(size));
  DDP_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD),
                "MPI_Allgather");
  std::vector<int> offsets(static_cast<size_t>(size));
  int64_t total = 0;
  for (int i = 0; i < size; ++i) {
    offsets[static_cast<size_t>(i)] = static_cast<int>(total);
    total += lengths[static_cast<size_t>(i)];
    if (lengths[static_cast<size_t>(i)] < 0 || total > INT32_MAX) {
      return absl::InternalError("MPI bootstrap: bad lengths from the peers");
    }
  }
  std::string all(static_cast<size_t>(total), '\0');
  DDP_MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                               offsets.data(), MPI_CHAR, MPI_COMM_WORLD),
                "MPI_Allgatherv");
  std::vector<std::string> out;
  for (int i = 0; i < size; ++i) {
    out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                             static_cast<size_t>(lengths[static_cast<size_t>(i)])));
  }
  return out;
}

std::string Version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string v(text, static_cast<size_t>(length));
  const size_t newline = v.find_first_of("\r\n,");
  return newline == std::string::npos ? v : v.substr(0, newline);
}

constexpr MpiPluginApi kApi = {kMpiPluginAbi, Version,    Init,     Broadcast,
                               Allgather,     CreateWire, Allreduce};

}  // namespace
}  // namespace ddp::mpi::impl

extern "C" __attribute__((visibility("default"))) const void* ddp_mpi_plugin() {
  return &ddp::mpi::impl::kApi;
}
