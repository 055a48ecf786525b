// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
#include "ps/protocol.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "collectives/comm_ids.h"
#include "compress/codec.h"
#include "ddp/errors.h"

namespace ddp::ps {

namespace {

constexpr int kRequestBits = 42;
constexpr uint64_t kRequestMask = (uint64_t{1} << kRequestBits) - 1;

bool Terminated(const char* s, size_t n) { return std::memchr(s, 0, n) != nullptr; }

}  // namespace

absl::string_view OpName(Op op) {
  switch (op) {
    case Op::kInit:
      return "init";
    case Op::kPush:
      return "push";
    case Op::kPull:
      return "pull";
    case Op::kPushPull:
      return "push_pull";
    case Op::kDone:
      return "done";
  }
  return "unknown";
}

absl::Status CheckRequest(const RequestHeader& h) {
  if (h.magic != kMagic) return absl::InvalidArgumentError("not a parameter-server request");
  if (h.op < static_cast<uint32_t>(Op::kInit) || h.op > static_cast<uint32_t>(Op::kDone)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown request op ", h.op));
  }
  if (!Terminated(h.config.key_name, kNameBytes) ||
      !Terminated(h.config.optimizer, kOptimizerNameBytes)) {
    return absl::InvalidArgumentError("request names are not terminated");
  }
  // Counts, compared and subtracted as int64_t by the server: nothing a peer sends may overflow
  // them (found by tests/fuzz/fuzz_ps).
  if (h.config.codec >= static_cast<uint8_t>(Codec::kPowerSgd)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown push codec ", h.config.codec, " (none, bf16, fp16 or int8)"));
  }
  if (h.clock < 0 || h.seq > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(
        absl::StrCat("request counters out of range (clock ", h.clock, ", push ", h.seq, ")"));
  }
  return absl::OkStatus();
}

uint64_t AnswerBytes(const RequestHeader& h) {
  const auto op = static_cast<Op>(h.op);
  return op == Op::kPull || op == Op::kPushPull ? h.answer_bytes : 0;
}

uint64_t PushBytes(DataType type, uint64_t count, uint8_t codec) {
  const compress::Coder* coder = codec == 0 ? nullptr : compress::CoderFor(Codec{codec});
  if (coder == nullptr) return count * DataTypeSize(type);
  return coder->EncodedBytes(count);
}

bool CarriesPayload(const RequestHeader& h) {
  const auto op = static_cast<Op>(h.op);
  return op == Op::kPush || op == Op::kPushPull ||
         (op == Op::kInit && (h.flags & kInitHasValue) != 0);
}

absl::Status CheckResponse(const ResponseHeader& h) {
  if (h.magic != kMagic) return absl::InternalError("not a parameter-server response");
  if (!Terminated(h.message, kMessageBytes)) {
    return absl::InternalError("parameter-server response message not terminated");
  }
  return absl::OkStatus();
}

ResponseHeader ErrorResponse(const absl::Status& status) {
  ResponseHeader r;
  r.code = static_cast<uint32_t>(status.code());
  const std::vector<int> ranks = BlamedRanks(status);
  if (!ranks.empty()) r.blamed_rank = static_cast<uint32_t>(ranks.front());
  const absl::string_view m = status.message();
  const size_t n = std::min(m.size(), kMessageBytes - 1);
  std::memcpy(r.message, m.data(), n);
  r.message[n] = 0;
  return r;
}

absl::Status ResponseStatus(const ResponseHeader& h) {
  if (h.code == 0) return absl::OkStatus();
  const auto code =
      h.code <= 16 ? static_cast<absl::StatusCode>(h.code) : absl::StatusCode::kUnknown;
  absl::Status status(code, h.message);
  if (h.blamed_rank != UINT32_MAX) {
    const int rank = static_cast<int>(h.blamed_rank);
    status = WithRanks(status, {rank});
  }
  return status;
}

std::string KeyName(const PartitionConfig& c) {
  std::string name(c.key_name, strnlen(c.key_name, kNameBytes));
  if (c.parts > 1) absl::StrAppend(&name, " (partition ", c.part, " of ", c.parts, ")");
  return name;
}

std::string ConfigDifference(const PartitionConfig& a, const PartitionConfig& b) {
  if (std::strncmp(a.key_name, b.key_name, kNameBytes) != 0) {
    return absl::StrCat("name '", KeyName(a), "' vs '", KeyName(b), "'");
  }
  if (a.key_id != b.key_id || a.part != b.part || a.parts != b.parts) {
    return absl::StrCat("registration order (key ", a.key_id, " vs ", b.key_id, ")");
  }
  if (a.dtype != b.dtype) {
    return absl::StrCat("dtype ", DataTypeName(static_cast<DataType>(a.dtype)), " vs ",
                        DataTypeName(static_cast<DataType>(b.dtype)));
  }
  if (a.count != b.count) return absl::StrCat("element count ", a.count, " vs ", b.count);
  if (a.codec != b.codec) {
    return absl::StrCat("compression ", CodecName(Codec{a.codec}), " vs ",
                        CodecName(Codec{b.codec}));
  }
  if (a.consistency != b.consistency) return "consistency (sync vs async)";
  if (a.staleness != b.staleness) {
    return absl::StrCat("staleness ", a.staleness, " vs ", b.staleness);
  }
  if (std::strncmp(a.optimizer, b.optimizer, kOptimizerNameBytes) != 0 ||
      a.learning_rate != b.learning_rate || a.momentum != b.momentum || a.nesterov != b.nesterov ||
      a.beta1 != b.beta1 || a.beta2 != b.beta2 || a.epsilon != b.epsilon ||
      a.weight_decay != b.weight_decay || a.gradient_scale != b.gradient_scale) {
    return "optimizer settings";
  }
  return "";
}

uint64_t Tag(uint64_t number, Part part) {
  // Requests and held notices wait on a notification tag (the last id of that range: requests
  // in its low bits 0, notices 1); everything else on the first id of the parameter-server
  // range.
  const bool notification = part == Part::kRequest || part == Part::kHeld;
  const uint64_t id = notification
                          ? collectives::CommRangeEnd(collectives::CommRange::kNotification) - 1
                          : collectives::CommRangeBegin(collectives::CommRange::kParameterServer);
  const uint64_t low = part == Part::kHeld ? 1 : static_cast<uint64_t>(part);
  return (id << (64 - collectives::kCommIdBits)) | ((number & kRequestMask) << 2) | low;
}

}  // namespace ddp::ps
