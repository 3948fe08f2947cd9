// Little-endian integers in binary file headers (.hdss, .hodupkg): read from bytes, written
// into a string being built.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace hodu {

inline uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t get_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void put_u32(std::string& s, size_t at, uint32_t v) { std::memcpy(s.data() + at, &v, 4); }
inline void put_u64(std::string& s, size_t at, uint64_t v) { std::memcpy(s.data() + at, &v, 8); }

}  // namespace hodu
