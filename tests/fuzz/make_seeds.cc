// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/<harness>/): well-formed
// inputs of each protocol, made with libddp's own encoders where it has them, so that the
// fuzzers start from what peers really send. Run by `make fuzz-seeds`; the output is committed.
//
//   make_seeds DIR
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "ddp/types.h"
#include "engine/message.h"
#include "ps/protocol.h"
#include "transport/notice.h"
#include "transport/tcp/frame.h"

namespace {

std::string dir;

void Write(const std::string& harness, const std::string& name, const std::string& bytes) {
  const std::string folder = dir + "/" + harness;
  mkdir(folder.c_str(), 0755);
  std::ofstream(folder + "/" + name, std::ios::binary) << bytes;
}

template <typename T>
std::string Bytes(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

void Frames() {
  using namespace ddp::transport;
  tcp::FrameHeader h;
  h.tag = 42;
  h.length = 4096;
  char buf[tcp::kFrameHeaderSize];
  tcp::EncodeFrameHeader(h, buf);
  Write("frame", "data", std::string(buf, sizeof(buf)));
  Notice n;
  n.ranks = {3, 5};
  n.text = "rank 3 (host-b): timed out";
  const std::string notice = EncodeNotice(n);
  h.type = tcp::FrameType::kAbort;
  h.length = notice.size();
  tcp::EncodeFrameHeader(h, buf);
  Write("frame", "abort", std::string(buf, sizeof(buf)) + notice);
  h.type = tcp::FrameType::kHeartbeat;
  h.length = 0;
  h.reserved = tcp::kWaitingFlag;
  tcp::EncodeFrameHeader(h, buf);
  Write("frame", "heartbeat", std::string(buf, sizeof(buf)));
}

void Handshakes() {
  using namespace ddp::auth;
  Hello hello{Role::kTransport, 0, {}};
  Write("handshake", "hello", EncodeHello(hello));
  Auth a{Role::kTransport, 1, 0, {}, {}};
  a.mac = ClientMac("not the token", hello, 1, 0, a.nonce);
  Write("handshake", "auth", EncodeAuth(a));
  Write("handshake", "accept", EncodeAccept(a.mac));
}

void Negotiation() {
  using namespace ddp::engine;
  std::string out;
  Record r;
  r.name = "layer1.weight";
  r.meta.shapes = {{64, 3, 3, 3}};
  AppendRecord(r, &out);
  Record g;
  g.name = "grouped";
  g.meta.kind = OpKind::kAllgather;
  g.meta.type = ddp::DataType::kFloat16;
  g.meta.shapes = {{8}, {2, 2}};
  g.meta.prescale = 0.5;
  AppendRecord(g, &out);
  Record s;
  s.type = Record::Type::kStallFail;
  s.name = "stalled";
  AppendRecord(s, &out);
  Write("negotiation", "three", out);
}

void Options() {
  // Records of [variable index][length][value] (fuzz_options.cc's list).
  auto rec = [](uint8_t index, const std::string& v) {
    return std::string(1, static_cast<char>(index)) + std::string(1, static_cast<char>(v.size())) +
           v;
  };
  Write("options", "job", rec(20, "1") + rec(30, "4") + rec(11, "secret") + rec(40, "tcp"));
  Write("options", "sizes", rec(8, "64MB") + rec(36, "4") + rec(39, "30") + rec(45, "512KiB"));
  Write(
      "options", "ps",
      rec(48, "2") + rec(46, "continue") + rec(42, "/tmp/ckpt") + rec(44, "100") + rec(49, "120"));
  Write("options", "bad", rec(30, "-1") + rec(39, "abc") + rec(40, "carrier-pigeon"));
}

ddp::ps::RequestHeader Init(uint32_t partition, bool async, bool value) {
  using namespace ddp::ps;
  RequestHeader h;
  h.op = static_cast<uint32_t>(Op::kInit);
  h.partition = partition;
  h.flags = value ? kInitHasValue : 0;
  h.bytes = value ? 16 : 0;
  std::strcpy(h.config.key_name, async ? "async" : "sync");
  h.config.key_id = partition;
  h.config.parts = 1;
  h.config.dtype = static_cast<uint8_t>(ddp::DataType::kFloat32);
  h.config.consistency = async ? 1 : 0;
  h.config.staleness = async ? 1 : -1;
  h.config.count = 4;
  std::strcpy(h.config.optimizer, async ? "adam" : "sgd");
  h.config.learning_rate = 0.1;
  h.config.beta1 = 0.9;
  h.config.beta2 = 0.999;
  h.config.epsilon = 1e-8;
  h.config.gradient_scale = 1;
  return h;
}

void Ps() {
  using namespace ddp::ps;
  const std::string value(16, '\0');
  std::string steps;
  // Partition 0 sync, 1 async, 2 sync with int8 pushes (4 values and their block's scale: 8
  // bytes, decoded by the server).
  constexpr uint32_t kInt8Partition = 2;
  for (uint32_t p = 0; p < 3; ++p) {
    for (uint8_t w = 0; w < 3; ++w) {
      RequestHeader h = Init(p, p == 1, w == 0);
      if (p == kInt8Partition) h.config.codec = static_cast<uint8_t>(ddp::Codec::kInt8);
      steps += std::string(1, static_cast<char>(w)) + Bytes(h) + (w == 0 ? value : "");
    }
  }
  for (uint64_t seq = 1; seq <= 2; ++seq) {
    for (uint8_t w = 0; w < 3; ++w) {
      for (uint32_t p = 0; p < 3; ++p) {
        RequestHeader h;
        h.op = static_cast<uint32_t>(Op::kPushPull);
        h.partition = p;
        h.seq = seq;
        h.clock = static_cast<int64_t>(seq);
        h.bytes = p == kInt8Partition ? 8 : 16;
        h.answer_bytes = 16;
        steps += std::string(1, static_cast<char>(w)) + Bytes(h) + std::string(h.bytes, '\1');
      }
    }
  }
  Write("ps", "sync-and-async", steps);
  Write("ps", "worker-dies",
        steps + std::string(1, static_cast<char>(0xc1)) + std::string(1, static_cast<char>(0x7f)));
}

void Store() {
  // fuzz_store.cc sends one input in 64, by its hash, end to end through a real server (first
  // byte odd: as a stranger, else after a handshake), the rest straight to a table; the first
  // byte is not a request. Requests: u8 op, 3 pad, u32 key length, u64 value length, u64 arg;
  // then key and value.
  auto req = [](uint8_t op, const std::string& key, const std::string& value, uint64_t arg) {
    std::string r(24, '\0');
    r[0] = static_cast<char>(op);
    const uint32_t kl = static_cast<uint32_t>(key.size());
    const uint64_t vl = value.size();
    std::memcpy(&r[4], &kl, 4);
    std::memcpy(&r[8], &vl, 8);
    std::memcpy(&r[16], &arg, 8);
    return r + key + value;
  };
  auto end_to_end = [](const std::string& input) {  // fuzz_store.cc's GoesEndToEnd
    uint32_t h = 2166136261u;
    for (char c : input) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
    return (h & 63) == 0;
  };
  // The first input of this form (first byte `first`, then `rest` with a counter appended)
  // that goes the way asked for.
  auto routed = [&](char first, const std::string& rest, bool e2e) {
    for (int i = 0;; ++i) {
      const std::string input = std::string(1, first) + rest + absl::StrCat(i);
      if (end_to_end(input) == e2e) return input;
    }
  };
  const std::string requests = req(1, "rank0/addr", "10.0.0.1:4000", 0) +
                               req(2, "rank0/addr", "", 1000) + req(3, "counter", "", 5) +
                               req(3, "counter", "", 7) + req(2, "missing", "", 50);
  Write("store", "set-get-add", routed('\0', requests, false));
  Write("store", "set-get-add-end-to-end", routed('\0', requests, true));
  Write("store", "stranger", routed('\1', std::string(64, 'x'), true));
}

void Wire() {
  // Records of [peer bit][u16 length][control message]; see wire_transport.cc's layout.
  auto rec = [](uint8_t peer, const std::string& m) {
    const uint16_t len = static_cast<uint16_t>(m.size());
    return std::string(1, static_cast<char>(peer)) + Bytes(len) + m;
  };
  auto prefix = [](uint8_t kind, uint8_t flags, uint32_t segment, uint64_t seq) {
    std::string m(16, '\0');
    m[0] = static_cast<char>(kind);
    m[1] = static_cast<char>(flags);
    std::memcpy(&m[4], &segment, 4);
    std::memcpy(&m[8], &seq, 8);
    return m;
  };
  auto message = [&](uint64_t seq, uint64_t tag, uint64_t bytes, bool inline_payload) {
    std::string m = prefix(1, inline_payload ? 1 : 0, 1 << 16, seq);
    m += Bytes(tag) + std::string(16, '\0') + Bytes(bytes) + Bytes(uint64_t{1});
    if (inline_payload) m += std::string(bytes, 'p');
    return m;
  };
  ddp::transport::Notice bye;
  bye.text = "done";
  std::string in = rec(0, message(0, 1, 200, true)) + rec(1, message(0, 2, 500, false)) +
                   rec(0, message(1, 3, 900, false)) + rec(1, prefix(2, 2, 0, 0)) +
                   rec(0, prefix(5, 0, 0, 2) + Bytes(uint64_t{7})) +
                   rec(0, prefix(3, 0, 0, 2) + ddp::transport::EncodeNotice(bye));
  Write("wire", "messages-and-bye", in);
  ddp::transport::Notice abort;
  abort.ranks = {2};
  abort.text = "rank 2 failed";
  Write("wire", "out-of-order-and-abort",
        rec(0, message(1, 1, 10, true)) + rec(0, message(0, 0, 0, true)) +
            rec(1, prefix(4, 0, 0, 0) + ddp::transport::EncodeNotice(abort)));
}

void Shm() {
  // The header's fields (segment.h), MAC zero.
  std::string s(4096, '\0');
  const uint64_t magic = 0x314D485350444444ULL;  // "DDDPSHM1"
  const uint32_t version = 1;
  const int32_t rank = 1;
  std::memcpy(&s[0], &magic, 8);
  std::memcpy(&s[8], &version, 4);
  std::memcpy(&s[12], &rank, 4);
  Write("shm_segment", "header", s);
  Write("shm_segment", "short", s.substr(0, 40));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  dir = argv[1];
  mkdir(dir.c_str(), 0755);
  Frames();
  Handshakes();
  Negotiation();
  Options();
  Ps();
  Store();
  Wire();
  Shm();
  return 0;
}
