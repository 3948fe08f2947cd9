// A weights blob (the 64-byte HODUWGT1 header, then 64-byte aligned tensors: the format of
// `hodu build --weights file`) that several builds share: each distinct run of bytes is
// stored once, and every tensor equal to one already there gets its offset. A .hodupkg keeps
// one such blob; its graph and the library of every target read their constants from it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hodu::compilers::c {

class WeightStore {
 public:
  WeightStore();

  // Offset, from the start of the data (after the header), of bytes equal to these; they are
  // appended (64-byte aligned) when new. Internal error when new bytes come after seal().
  int64_t place(const void* data, size_t size);
  // Room for this many bytes of data up front (growing by doubling holds two buffers at once).
  void reserve(size_t data_bytes) { blob_.reserve(kHeader + data_bytes); }
  // Fills in the header (size, fingerprint): the blob is final.
  void seal();
  bool sealed() const { return sealed_; }

  // The header, then the data.
  const std::string& blob() const { return blob_; }
  std::string_view data() const { return std::string_view(blob_).substr(kHeader); }
  int64_t data_bytes() const { return static_cast<int64_t>(blob_.size()) - kHeader; }
  uint64_t fingerprint() const { return fingerprint_; }  // valid once sealed
  // Bytes that place() found already stored, and how many calls did.
  int64_t deduplicated_bytes() const { return dedup_bytes_; }
  int deduplicated() const { return dedup_count_; }
  // Hands the blob over (the store is empty afterwards).
  std::string release();

 private:
  static constexpr int64_t kHeader = 64;
  std::string blob_;
  std::unordered_map<uint64_t, std::vector<int64_t>> index_;  // hash of bytes + size → offsets
  bool sealed_ = false;
  uint64_t fingerprint_ = 0;
  int64_t dedup_bytes_ = 0;
  int dedup_count_ = 0;
};

}  // namespace hodu::compilers::c
