// The one codec for libddp's fixed-layout bytes (the handshake, negotiation records, notices,
// parameter-server checkpoints): a writer that appends fields and a bounds-checked reader.
//
// A field is the raw copy of a trivially copyable value in host byte order, padding included:
// every format read with it is read by libddp on the same kind of machine (little endian), and
// each names itself with a magic or a version. A reader never reads past its input: every Get
// says whether the bytes were there, so that peer-supplied or on-disk bytes that end early are an
// error the caller reports, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "absl/strings/string_view.h"

namespace ddp {

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

}  // namespace ddp
