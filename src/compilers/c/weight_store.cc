#include "compilers/c/weight_store.h"

#include <cstring>

#include "compilers/c/api_emitter.h"
#include "core/error.h"

namespace hodu::compilers::c {

WeightStore::WeightStore() : blob_(kHeader, '\0') {}

int64_t WeightStore::place(const void* data, size_t size) {
  const uint64_t key = fingerprint_of(std::string_view(static_cast<const char*>(data), size)) ^ (size * 0x9e3779b97f4a7c15ULL);
  auto& offsets = index_[key];
  for (int64_t off : offsets) {
    if (blob_.size() - kHeader - off >= size && std::memcmp(blob_.data() + kHeader + off, data, size) == 0) {
      dedup_bytes_ += static_cast<int64_t>(size);
      ++dedup_count_;
      return off;
    }
  }
  HODU_CHECK(!sealed_, ErrorCode::Internal,
             "the shared weights blob is sealed, but a build asked for {} new bytes (builds differ between passes?)",
             size);
  int64_t off = static_cast<int64_t>(blob_.size()) - kHeader;
  blob_.append(static_cast<const char*>(data), size);
  blob_.resize((blob_.size() + 63) / 64 * 64, '\0');
  offsets.push_back(off);
  return off;
}

void WeightStore::seal() {
  fingerprint_ = fingerprint_of(data());
  seal_weights_blob(blob_, fingerprint_);
  sealed_ = true;
}

std::string WeightStore::release() {
  index_.clear();
  std::string out = std::move(blob_);
  blob_.assign(kHeader, '\0');
  sealed_ = false;
  return out;
}

}  // namespace hodu::compilers::c
