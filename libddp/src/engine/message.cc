// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Negotiation messages: encoding, decoding and agreement checks.
#include "engine/message.h"

#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bytes.h"
#include "ddp/errors.h"

namespace ddp::engine {
namespace {

constexpr uint32_t kMaxDims = 64;
constexpr uint32_t kMaxShapes = 1 << 16;

bool ReadMeta(ByteReader& in, TensorMeta* meta) {
  uint8_t kind, type, op;
  uint32_t nshapes;
  if (!in.Get(&kind) || !in.Get(&type) || !in.Get(&op) || !in.Get(&meta->root) ||
      !in.Get(&meta->device) || !in.Get(&meta->prescale) || !in.Get(&meta->postscale) ||
      !in.Get(&nshapes) || nshapes > kMaxShapes) {
    return false;
  }
  meta->kind = static_cast<OpKind>(kind);
  meta->type = static_cast<DataType>(type);
  meta->op = static_cast<ReduceOp>(op);
  if (kind < 1 || kind > 6 || !IsValid(meta->type) || !IsValid(meta->op)) return false;
  if (meta->device != kCpuMemory && meta->device != kCudaMemory) return false;
  meta->shapes.resize(nshapes);
  for (auto& shape : meta->shapes) {
    uint32_t ndims;
    if (!in.Get(&ndims) || ndims > kMaxDims) return false;
    shape.resize(ndims);
    for (auto& d : shape) {
      if (!in.Get(&d)) return false;
    }
  }
  uint8_t codec;
  if (!in.Get(&codec) || !in.Get(&meta->compression.rank)) return false;
  meta->compression.codec = static_cast<Codec>(codec);
  return IsValid(meta->compression.codec);
}

// Groups ranks by the text a field has on them: "ranks 0, 2: f32; rank 1: f16".
std::string WhoSaidWhat(const std::vector<int>& ranks, const std::vector<std::string>& values) {
  std::map<std::string, std::vector<int>> by_value;
  for (size_t i = 0; i < ranks.size(); ++i) by_value[values[i]].push_back(ranks[i]);
  std::vector<std::string> parts;
  for (const auto& [value, who] : by_value) {
    parts.push_back(
        absl::StrCat(who.size() == 1 ? "rank " : "ranks ", absl::StrJoin(who, ", "), ": ", value));
  }
  return absl::StrJoin(parts, "; ");
}

std::string ShapesExceptFirstDim(const TensorMeta& m) {
  std::vector<std::string> parts;
  for (const auto& shape : m.shapes) {
    std::vector<int64_t> rest(shape.begin() + (shape.empty() ? 0 : 1), shape.end());
    parts.push_back(absl::StrCat("[*", rest.empty() ? "" : ", ", absl::StrJoin(rest, ", "), "]"));
  }
  return absl::StrJoin(parts, " ");
}

std::string AllShapes(const TensorMeta& m) {
  std::vector<std::string> parts;
  for (const auto& shape : m.shapes) parts.push_back(ShapeString(shape));
  return absl::StrJoin(parts, " ");
}

}  // namespace

absl::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllreduce:
      return "allreduce";
    case OpKind::kAllgather:
      return "allgather";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kAlltoall:
      return "alltoall";
    case OpKind::kReduceScatter:
      return "reducescatter";
    case OpKind::kAddProcessSet:
      return "add_process_set";
  }
  return "?";
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

uint64_t ElementCount(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t TensorMeta::ElementCount() const {
  uint64_t total = 0;
  for (const auto& shape : shapes) total += engine::ElementCount(shape);
  return total;
}

bool operator==(const TensorMeta& a, const TensorMeta& b) {
  return a.kind == b.kind && a.type == b.type && a.op == b.op && a.root == b.root &&
         a.device == b.device && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.shapes == b.shapes && a.compression == b.compression;
}

void AppendRecord(const Record& record, std::string* out) {
  ByteWriter w(out);
  w.Put(static_cast<uint8_t>(record.type));
  w.Put(static_cast<uint32_t>(record.name.size()));
  w.PutBytes(record.name);
  if (record.type != Record::Type::kRequest) return;
  const TensorMeta& m = record.meta;
  w.Put(static_cast<uint8_t>(m.kind));
  w.Put(static_cast<uint8_t>(m.type));
  w.Put(static_cast<uint8_t>(m.op));
  w.Put(m.root);
  w.Put(m.device);
  w.Put(m.prescale);
  w.Put(m.postscale);
  w.Put(static_cast<uint32_t>(m.shapes.size()));
  for (const auto& shape : m.shapes) {
    w.Put(static_cast<uint32_t>(shape.size()));
    for (int64_t d : shape) w.Put(d);
  }
  w.Put(static_cast<uint8_t>(m.compression.codec));
  w.Put(m.compression.rank);
}

absl::StatusOr<std::vector<Record>> ParseRecords(absl::string_view bytes) {
  std::vector<Record> records;
  ByteReader in(bytes);
  while (!in.empty()) {
    Record r;
    uint8_t type;
    uint32_t name_len;
    bool ok = in.Get(&type) && in.Get(&name_len) && name_len <= (1u << 20) &&
              in.GetBytes(name_len, &r.name) && (type == 1 || type == 2);
    r.type = static_cast<Record::Type>(type);
    if (ok && r.type == Record::Type::kRequest) ok = ReadMeta(in, &r.meta);
    if (!ok) {
      return absl::DataLossError(
          absl::StrCat("malformed negotiation message after ", records.size(), " records"));
    }
    records.push_back(std::move(r));
  }
  return records;
}

absl::Status CheckAgreement(absl::string_view name, const std::vector<int>& ranks,
                            const std::vector<const TensorMeta*>& metas) {
  const TensorMeta& first = *metas[0];
  const std::string what = absl::StrCat(OpKindName(first.kind), " '", name, "'");
  struct Field {
    const char* label;
    std::function<std::string(const TensorMeta&)> text;
  };
  const bool gather = first.kind == OpKind::kAllgather;
  const std::vector<Field> fields = {
      {"operation", [](const TensorMeta& m) { return std::string(OpKindName(m.kind)); }},
      {"dtype", [](const TensorMeta& m) { return std::string(DataTypeName(m.type)); }},
      {"reduce op", [](const TensorMeta& m) { return std::string(ReduceOpName(m.op)); }},
      {"root rank", [](const TensorMeta& m) { return absl::StrCat(m.root); }},
      {"device",
       [](const TensorMeta& m) {
         return std::string(m.device == kCpuMemory    ? "cpu"
                            : m.device == kCudaMemory ? "cuda"
                                                      : "?");
       }},
      {"prescale factor", [](const TensorMeta& m) { return absl::StrCat(m.prescale); }},
      {"postscale factor", [](const TensorMeta& m) { return absl::StrCat(m.postscale); }},
      {"compression", [](const TensorMeta& m) { return CompressionName(m.compression); }},
      {"number of tensors", [](const TensorMeta& m) { return absl::StrCat(m.shapes.size()); }},
      {gather ? "shape (all but the first dimension)" : "shape",
       gather ? ShapesExceptFirstDim : AllShapes},
  };
  for (const Field& field : fields) {
    std::vector<std::string> values;
    bool differ = false;
    for (const TensorMeta* m : metas) {
      values.push_back(field.text(*m));
      differ = differ || values.back() != values.front();
    }
    if (differ) {
      // Blamed: the ranks that differ from the first.
      std::vector<int> odd;
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i] != values.front()) odd.push_back(ranks[i]);
      }
      return AsDisagreement(WithRanks(
          absl::InvalidArgumentError(absl::StrCat(what, ": ranks disagree on the ", field.label,
                                                  " (", WhoSaidWhat(ranks, values), ")")),
          odd));
    }
  }
  return absl::OkStatus();
}

}  // namespace ddp::engine
