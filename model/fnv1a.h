// FNV-1a, the 64-bit variant (Fowler, Noll, Vo): a small stable hash for fingerprints that ranks
// compare (bucket layout, options). Not cryptographic.
#pragma once
#include <cstdint>
#include <string>

namespace vitddp {

/// Incremental 64-bit FNV-1a over bytes.
class Fnv1a {
 public:
  void add_bytes(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 1099511628211ull;
    }
  }
  void add(uint64_t v) { add_bytes(&v, sizeof(v)); }  // little-endian bytes on our targets
  void add(const std::string& s) { add_bytes(s.data(), s.size()); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

}  // namespace vitddp
