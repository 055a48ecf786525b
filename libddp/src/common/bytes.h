// SPDX-FileCopyrightText: 2026 The libddp Authors
// SPDX-License-Identifier: Apache-2.0
// The one codec for libddp's fixed-layout bytes (the handshake, TCP frame headers, wire control
// messages, negotiation records, notices, parameter-server checkpoints and optimizer state): a
// writer that appends fields, one that fills a buffer of a size the format fixes, a reader of
// each kind, and a store into a field of a message already built.
//
// A field is the raw copy of a trivially copyable value in host byte order, padding included:
// every format read with it is read by libddp on the same kind of machine (little endian), and
// each names itself with a magic or a version. A ByteReader never reads past its input: every Get
// says whether the bytes were there, so that peer-supplied or on-disk bytes that end early are an
// error the caller reports, never a crash. The fixed-size writer and reader, and StoreAt, work on
// buffers their caller sized for the format (no allocation, for the hot paths): running past one
// is a bug in the format's code, not bad input, and stops the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace ddp {
namespace bytes_internal {

// Cold and out of line, so that a check on a hot path costs one compare.
[[noreturn, gnu::cold, gnu::noinline]] inline void DieOverrun(const char* what, size_t at, size_t n,
                                                              size_t size) {
  std::fprintf(stderr, "ddp: %s of %zu bytes at offset %zu overruns a %zu-byte buffer\n", what, n,
               at, size);
  std::abort();
}

}  // namespace bytes_internal

// Appends to a string the caller owns (a message being built, or one that already has some).
class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}

  template <typename T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "a field is a trivially copyable value");
    static_assert(!std::is_pointer_v<T>, "a pointer's value means nothing to the reader");
    out_->append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  // A view's bytes are PutBytes' or PutString's, never the view itself.
  void Put(absl::string_view) = delete;

  // Raw bytes, no length: the format or the reader knows how many.
  void PutBytes(absl::string_view bytes) { out_->append(bytes.data(), bytes.size()); }
  // A u64 length, then the bytes (ByteReader::GetString).
  void PutString(absl::string_view bytes) {
    Put<uint64_t>(bytes.size());
    PutBytes(bytes);
  }

 private:
  std::string* out_;
};

// Reads fields off the front of a view; a read that would run past its end reads nothing and
// returns false.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view in) : in_(in) {}

  template <typename T>
  [[nodiscard]] bool Get(T* value) {
    static_assert(std::is_trivially_copyable_v<T>, "a field is a trivially copyable value");
    static_assert(!std::is_pointer_v<T>, "a pointer read from bytes points nowhere");
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(value, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }

  // `n` raw bytes, into a string (replacing what it held) or a buffer of at least `n` bytes.
  [[nodiscard]] bool GetBytes(size_t n, std::string* out) {
    if (in_.size() < n) return false;
    out->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  [[nodiscard]] bool GetBytes(size_t n, void* buffer) {
    if (in_.size() < n) return false;
    std::memcpy(buffer, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }

  // What PutString wrote; false too when its length is over `limit` (checked before anything
  // is allocated, so a corrupt length cannot ask for terabytes).
  [[nodiscard]] bool GetString(std::string* out, uint64_t limit) {
    uint64_t n = 0;
    if (in_.size() < sizeof(n)) return false;
    std::memcpy(&n, in_.data(), sizeof(n));
    if (n > limit || n > in_.size() - sizeof(n)) return false;
    in_.remove_prefix(sizeof(n));
    return GetBytes(static_cast<size_t>(n), out);
  }

  bool empty() const { return in_.empty(); }
  size_t remaining() const { return in_.size(); }

 private:
  absl::string_view in_;
};

// Writes fields one after another into `size` bytes at `out` (a frame header's array, a record
// inside a larger vector), where appending to a string would allocate.
class FixedByteWriter {
 public:
  FixedByteWriter(void* out, size_t size) : out_(static_cast<char*>(out)), size_(size) {}

  template <typename T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>, "a field is a trivially copyable value");
    static_assert(!std::is_pointer_v<T>, "a pointer's value means nothing to the reader");
    if (size_ - at_ < sizeof(T)) bytes_internal::DieOverrun("a write", at_, sizeof(T), size_);
    std::memcpy(out_ + at_, &value, sizeof(T));
    at_ += sizeof(T);
  }
  void Put(absl::string_view) = delete;

  size_t remaining() const { return size_ - at_; }

 private:
  char* out_;
  size_t size_;
  size_t at_ = 0;
};

// Reads fields one after another from `size` bytes at `in`, which the caller knows hold them
// all: the bytes may still be a peer's, to be validated after reading.
class FixedByteReader {
 public:
  FixedByteReader(const void* in, size_t size) : in_(static_cast<const char*>(in)), size_(size) {}

  template <typename T>
  void Get(T* value) {
    static_assert(std::is_trivially_copyable_v<T>, "a field is a trivially copyable value");
    static_assert(!std::is_pointer_v<T>, "a pointer read from bytes points nowhere");
    if (size_ - at_ < sizeof(T)) bytes_internal::DieOverrun("a read", at_, sizeof(T), size_);
    std::memcpy(value, in_ + at_, sizeof(T));
    at_ += sizeof(T);
  }

  size_t remaining() const { return size_ - at_; }

 private:
  const char* in_;
  size_t size_;
  size_t at_ = 0;
};

// Overwrites the field at offset `at` of a message already built (a number known only as the
// message leaves, such as a sequence number).
template <typename T>
void StoreAt(std::string* message, size_t at, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>, "a field is a trivially copyable value");
  static_assert(!std::is_pointer_v<T>, "a pointer's value means nothing to the reader");
  if (at > message->size() || message->size() - at < sizeof(T)) {
    bytes_internal::DieOverrun("a store", at, sizeof(T), message->size());
  }
  std::memcpy(message->data() + at, &value, sizeof(T));
}

}  // namespace ddp
