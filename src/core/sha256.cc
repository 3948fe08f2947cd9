#include "core/sha256.h"

#include <openssl/evp.h>

#include "core/error.h"

namespace hodu {

Sha256Digest sha256(const void* data, size_t size) {
  Sha256Digest d{};
  unsigned int n = 0;
  HODU_CHECK(EVP_Digest(data, size, d.data(), &n, EVP_sha256(), nullptr) == 1 && n == d.size(), ErrorCode::Internal,
             "SHA-256 failed (libcrypto)");
  return d;
}

std::string sha256_hex(const Sha256Digest& digest) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(64);
  for (uint8_t b : digest) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

}  // namespace hodu
