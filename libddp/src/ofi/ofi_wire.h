// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The libfabric transport (DDP_TRANSPORT=ofi): a WireTransport over an FI_EP_RDM endpoint with
// tagged messages (EFA on AWS; `tcp;ofi_rxm` and `shm` here). The libfabric calls live in
// libddp_ofi.so (ofi_wire.cc), opened on first use; libddp never links libfabric.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "transport/wire/wire.h"

namespace ddp::ofi {

struct OfiConfig {
  int rank = 0;
  int size = 1;
  std::string provider;  // DDP_OFI_PROVIDER: "efa", "tcp;ofi_rxm", "shm"; empty = libfabric's pick
  std::string domain;    // DDP_OFI_DOMAIN: a domain (device) name; empty = the first
  // For socket-based providers: the local address to bind (where the other ranks reach us).
  std::string source_ip;
  // Register every buffer as if the provider asked for FI_MR_LOCAL (DDP_OFI_MR=local), to test
  // the registration path on providers that do not need it.
  bool force_mr_local = false;
  // Segment data above this many bytes (0 = the provider's max_msg_size, at most 1 GiB).
  size_t max_message_bytes = 0;
};

class OfiWire : public transport::wire::Wire {
 public:
  // This endpoint's name (hex), to publish through the bootstrap.
  virtual std::string address() const = 0;
  // Inserts every rank's name (from address()) into the address vector.
  virtual absl::Status Connect(const std::vector<std::string>& addresses) = 0;
  // The provider's mr_mode bits that apply, as text ("FI_MR_LOCAL|FI_MR_ENDPOINT" or "none").
  virtual std::string mr_mode() const = 0;
};

inline constexpr int kOfiPluginAbi = 1;
struct OfiPluginApi {
  int abi;
  absl::StatusOr<std::unique_ptr<OfiWire>> (*create)(const OfiConfig& config);
  std::string (*version)();
};

// libddp's side: loads libddp_ofi.so (DDP_OFI_PLUGIN overrides the path).
bool Available(std::string* why = nullptr);
absl::StatusOr<std::unique_ptr<OfiWire>> CreateWire(const OfiConfig& config);
std::string Version();

}  // namespace ddp::ofi
