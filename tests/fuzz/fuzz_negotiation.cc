// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// libFuzzer harness: the engine's negotiation records (message.h), which every rank's
// announcement carries to the coordinator each cycle. Parsing never crashes; what parses
// re-encodes to records that parse the same; agreement checks over what parsed never crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/message.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

// TensorMeta's operator== with the scales compared bit for bit (a NaN parses and re-encodes as
// itself, but is not equal to itself).
bool Same(const ddp::engine::TensorMeta& a, const ddp::engine::TensorMeta& b) {
  return a.kind == b.kind && a.type == b.type && a.op == b.op && a.root == b.root &&
         a.device == b.device && SameBits(a.prescale, b.prescale) &&
         SameBits(a.postscale, b.postscale) && a.shapes == b.shapes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::engine;
  auto records = ParseRecords(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!records.ok()) return 0;
  std::string again;
  for (const Record& r : *records) AppendRecord(r, &again);
  auto reparsed = ParseRecords(again);
  Check(reparsed.ok() && reparsed->size() == records->size());
  std::vector<int> ranks;
  std::vector<const TensorMeta*> metas;
  for (size_t i = 0; i < records->size(); ++i) {
    const Record& a = (*records)[i];
    const Record& b = (*reparsed)[i];
    Check(a.type == b.type && a.name == b.name && Same(a.meta, b.meta));
    (void)a.meta.ElementCount();
    for (const auto& shape : a.meta.shapes) (void)ShapeString(shape);
    ranks.push_back(static_cast<int>(i));
    metas.push_back(&a.meta);
  }
  if (!metas.empty()) (void)CheckAgreement((*records)[0].name, ranks, metas);
  return 0;
}
