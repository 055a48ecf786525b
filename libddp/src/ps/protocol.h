// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The parameter server's messages, between a worker and a server over the job's transport.
//
// Every (worker, server) pair has one stream of requests, numbered from 0 by the worker. Request
// n travels as a fixed-size RequestHeader on a notification tag (a server waits on it for as long
// as the worker computes, which is not a stall: transport.h), then, for pushes and inits, its
// payload; the answer is a ResponseHeader, then, for pulls, the payload. Each of the four has its
// own tag (n, kind), so answers may come in any order (a sync pull waits for the slowest worker
// while later requests are answered). A pull's payload is always sent, and received straight
// into the caller's buffer: an error answer sends its bytes too (unspecified), which keeps the
// receive posted in advance and the copy away.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "ddp/types.h"

namespace ddp::ps {

enum class Op : uint32_t {
  kInit = 1,      // register a partition (payload: its initial value, from worker 0 only)
  kPush = 2,      // payload: a gradient
  kPull = 3,      // answer payload: the value
  kPushPull = 4,  // both
  kDone = 5,      // this worker has finished
};
absl::string_view OpName(Op op);

inline constexpr uint32_t kMagic = 0x50504444;  // "DDPP"
inline constexpr size_t kNameBytes = 64;
inline constexpr size_t kOptimizerNameBytes = 32;
inline constexpr size_t kMessageBytes = 240;

// What a partition is and how it behaves; sent with every init and compared by the server.
struct PartitionConfig {
  char key_name[kNameBytes] = {};
  uint32_t key_id = 0;
  uint32_t part = 0;   // index within the key
  uint32_t parts = 0;  // partitions of the key
  uint8_t dtype = 0;
  uint8_t consistency = 0;
  uint8_t nesterov = 0;
  // The codec of its pushes (ddp::Codec: none, bf16, fp16 or int8): a push's payload is the
  // gradient encoded (docs/compression.md), which the server decodes into float32.
  uint8_t codec = 0;
  int32_t staleness = -1;
  // Explicit, so that it is zero: an implicit hole here sent 4 bytes of the worker's stack to
  // the server with every init (and made tests/fuzz/make_seeds.cc's seeds differ run to run).
  uint32_t pad1 = 0;
  uint64_t count = 0;  // elements of this partition
  char optimizer[kOptimizerNameBytes] = {};
  double learning_rate = 0;
  double momentum = 0;
  double beta1 = 0;
  double beta2 = 0;
  double epsilon = 0;
  double weight_decay = 0;
  double gradient_scale = 1;
};

struct RequestHeader {
  uint32_t magic = kMagic;
  uint32_t op = 0;
  uint32_t partition = 0;  // the partition's id (registration order over all keys)
  uint32_t flags = 0;
  uint64_t seq = 0;           // pushes: this worker's push number for the partition (from 1)
  int64_t clock = 0;          // pulls: sync, the version wanted; async, this worker's pushes
  uint64_t bytes = 0;         // the payload's bytes (pushes, inits; a compressed push's fewer)
  uint64_t answer_bytes = 0;  // pulls and push_pulls: the answer's payload (the value's bytes)
  PartitionConfig config;     // inits
};

inline constexpr uint32_t kInitHasValue = 1;     // an init carrying the initial value
inline constexpr uint32_t kWantsHeldNotice = 2;  // the worker's credit waits on it: Part::kHeld
// An init sent again to a server's new process (it restarted and rejoined the job): `seq` is the
// worker's pushes of the partition that the previous process acknowledged. Carries no value.
inline constexpr uint32_t kInitRejoin = 4;

struct ResponseHeader {
  uint32_t magic = kMagic;
  uint32_t code = 0;  // absl::StatusCode
  int64_t version = 0;
  uint64_t seq_base = 0;  // inits: this worker's pushes the server has already (restored)
  int64_t clock_base = 0;
  uint32_t contributors = 0;
  uint32_t blamed_rank = UINT32_MAX;  // the job rank the error is about, if any
  uint64_t lost = 0;  // rejoin inits: this worker's acknowledged pushes the server no longer has
  char message[kMessageBytes] = {};
};

// Validates what a peer sent: the magic, a known op, names terminated. Messages from peers are
// untrusted bytes: nothing is assumed before this passes.
absl::Status CheckRequest(const RequestHeader& header);
// Whether a request's payload (header.bytes bytes) follows it: pushes, and inits with a value.
bool CarriesPayload(const RequestHeader& header);
// The bytes of a request's answer payload: a pull's value (0 for the other ops).
uint64_t AnswerBytes(const RequestHeader& header);
// The bytes a push of `count` elements of `type` carries with `codec` (a codec only for float32).
uint64_t PushBytes(DataType type, uint64_t count, uint8_t codec);
absl::Status CheckResponse(const ResponseHeader& header);

// The status a response carries, and back (the message truncated to fit).
ResponseHeader ErrorResponse(const absl::Status& status);
absl::Status ResponseStatus(const ResponseHeader& header);

std::string KeyName(const PartitionConfig& config);
// Whether two inits describe the same partition; "" or what differs.
std::string ConfigDifference(const PartitionConfig& a, const PartitionConfig& b);

// Tags (64 bits): the communicator id (20 bits), the request number (42 bits), the kind (2).
enum class Part : uint32_t {
  kRequest = 0,
  kRequestPayload = 1,
  kResponse = 2,
  kResponsePayload = 3,
  // Server to worker, numbered per pair by the server (not by request): "request n (a uint64_t,
  // the body) has arrived and is held" (a sync pull waiting for other workers, a pull held back
  // by the staleness bound), sent once it has been held for kHeldNoticeAfter. It returns the
  // worker's credit for that request (ddp/ps.h, PsOptions::credit_bytes) before the answer
  // does, so that workers sending keys in different orders never wait on each other's credit.
  // On a notification tag: the worker's receive for the next one waits for as long as need be.
  kHeld = 4,
};
uint64_t Tag(uint64_t number, Part part);

}  // namespace ddp::ps
