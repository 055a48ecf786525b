// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The byte codec (common/bytes.h) every fixed-layout format goes through: what it writes, that a
// read past the end reads nothing, and that running past a buffer the caller sized is stopped.
#include "common/bytes.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>

namespace ddp {
namespace {

TEST(ByteCodec, FieldsAreTheirBytesInMemoryOneAfterAnother) {
  std::string out = "x";  // appends to what is there
  ByteWriter w(&out);
  w.Put(uint32_t{0x31504444});
  w.Put(int16_t{-2});
  w.Put(std::array<uint8_t, 3>{7, 8, 9});
  w.PutBytes("raw");
  w.PutString("ab");
  EXPECT_EQ(out, std::string("xDDP1\xfe\xff\x07\x08\x09raw\x02\0\0\0\0\0\0\0ab", 23));
}

TEST(ByteCodec, ReadsBackWhatWasWritten) {
  std::string out;
  ByteWriter w(&out);
  w.Put(int64_t{-5});
  w.Put(2.5);
  w.PutString("name");
  w.PutBytes("tail");
  ByteReader r(out);
  int64_t i = 0;
  double d = 0;
  std::string s;
  char buffer[4];
  ASSERT_TRUE(r.Get(&i) && r.Get(&d) && r.GetString(&s, 4));
  EXPECT_EQ(i, -5);
  EXPECT_EQ(d, 2.5);
  EXPECT_EQ(s, "name");
  EXPECT_EQ(r.remaining(), 4u);
  ASSERT_TRUE(r.GetBytes(sizeof(buffer), buffer));
  EXPECT_EQ(std::string(buffer, sizeof(buffer)), "tail");
  EXPECT_TRUE(r.empty());
}

TEST(ByteCodec, AReadPastTheEndReadsNothing) {
  ByteReader r(absl::string_view("\x01\x02\x03", 3));
  uint32_t v = 7;
  EXPECT_FALSE(r.Get(&v));
  EXPECT_EQ(v, 7u);
  std::string s = "kept";
  EXPECT_FALSE(r.GetBytes(4, &s));
  EXPECT_EQ(s, "kept");
  EXPECT_EQ(r.remaining(), 3u);
  uint16_t two = 0;
  ASSERT_TRUE(r.Get(&two));
  EXPECT_EQ(two, 0x0201);
  EXPECT_TRUE(r.GetBytes(1, &s));
  EXPECT_EQ(s, "\x03");
  EXPECT_TRUE(r.empty());
}

TEST(ByteCodec, ALengthPrefixOverItsLimitOrThePayloadIsRefused) {
  std::string out;
  ByteWriter w(&out);
  w.PutString("hello");
  std::string s;
  EXPECT_FALSE(ByteReader(out).GetString(&s, 4));                            // over the limit
  EXPECT_FALSE(ByteReader(out.substr(0, out.size() - 1)).GetString(&s, 5));  // truncated
  EXPECT_FALSE(ByteReader(out.substr(0, 7)).GetString(&s, 5));  // the length itself cut
  std::string huge;
  ByteWriter(&huge).Put(~uint64_t{0});
  EXPECT_FALSE(ByteReader(huge).GetString(&s, ~uint64_t{0}));
  ByteReader r(out);
  ASSERT_TRUE(r.GetString(&s, 5));
  EXPECT_EQ(s, "hello");
}

TEST(ByteCodec, AFixedBufferHoldsTheBytesAnAppendWrites) {
  std::string appended;
  ByteWriter(&appended).Put(uint32_t{0x31504444});
  ByteWriter(&appended).Put(int16_t{-2});
  ByteWriter(&appended).Put(std::array<uint8_t, 3>{7, 8, 9});
  char fixed[10] = {};
  FixedByteWriter w(fixed, sizeof(fixed));
  w.Put(uint32_t{0x31504444});
  w.Put(int16_t{-2});
  w.Put(std::array<uint8_t, 3>{7, 8, 9});
  EXPECT_EQ(w.remaining(), 1u);
  EXPECT_EQ(std::string(fixed, 9), appended);
  EXPECT_EQ(fixed[9], 0);  // nothing past what was written

  FixedByteReader r(fixed, sizeof(fixed));
  uint32_t magic = 0;
  int16_t minus_two = 0;
  std::array<uint8_t, 3> three{};
  r.Get(&magic);
  r.Get(&minus_two);
  r.Get(&three);
  EXPECT_EQ(magic, 0x31504444u);
  EXPECT_EQ(minus_two, -2);
  EXPECT_EQ(three, (std::array<uint8_t, 3>{7, 8, 9}));
  EXPECT_EQ(r.remaining(), 1u);
}

TEST(ByteCodec, AStoreOverwritesOneFieldOfABuiltMessage) {
  std::string m;
  ByteWriter w(&m);
  w.Put(uint8_t{1});
  w.Put(uint64_t{0});
  w.PutBytes("tail");
  StoreAt(&m, 1, uint64_t{0x0807060504030201});
  EXPECT_EQ(m, std::string("\x01\x01\x02\x03\x04\x05\x06\x07\x08tail", 13));
  StoreAt(&m, m.size() - 1, 'T');  // the last byte is in reach
  EXPECT_EQ(m.substr(9), "taiT");
}

// The sizes are the format's, not a peer's: running past them is a bug in libddp, and the
// process stops before memory is corrupted.
TEST(ByteCodec, RunningPastAFixedBufferStopsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  char fixed[4] = {};
  EXPECT_DEATH(
      {
        FixedByteWriter w(fixed, 3);
        w.Put(uint16_t{1});
        w.Put(uint16_t{2});
      },
      "a write of 2 bytes at offset 2 overruns a 3-byte buffer");
  EXPECT_DEATH(
      {
        uint64_t v = 0;
        FixedByteReader(fixed, sizeof(fixed)).Get(&v);
      },
      "a read of 8 bytes at offset 0 overruns a 4-byte buffer");
  std::string m(4, '\0');
  EXPECT_DEATH(StoreAt(&m, 1, uint32_t{1}), "a store of 4 bytes at offset 1 overruns");
  EXPECT_DEATH(StoreAt(&m, 9, uint8_t{1}), "a store of 1 bytes at offset 9 overruns");
}

}  // namespace
}  // namespace ddp
