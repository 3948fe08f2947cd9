// TfIdfVectorizer: counts the n-grams of a pool (pool_int64s or pool_strings)
// in each row of the input, with skips, and weights the counts (TF, IDF, TFIDF).
// Follows ONNX's reference and ONNX Runtime: unigrams are counted once, longer
// n-grams once per skip distance 1..max_skip_count+1. Weights are indexed by
// output coordinate, as both references do (the spec's prose says by pool
// n-gram; the two agree when ngram_indexes is 0..n-1, as in every test).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "engines/interp/ops/op_utils.h"

namespace hodu::interp {
namespace {

enum class TfIdfMode { TF, IDF, TFIDF };

struct TfIdfConfig {
  TfIdfMode mode = TfIdfMode::TF;
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  std::vector<int64_t> ngram_indexes;
  std::vector<float> weights;
  int64_t output_size = 0;
};

TfIdfConfig read_config(const KernelContext& ctx) {
  TfIdfConfig c;
  const std::string mode = ctx.node.get_string("mode", "");
  if (mode == "TF") c.mode = TfIdfMode::TF;
  else if (mode == "IDF") c.mode = TfIdfMode::IDF;
  else if (mode == "TFIDF") c.mode = TfIdfMode::TFIDF;
  else ctx.fail(ErrorCode::InvalidModel, "mode must be 'TF', 'IDF' or 'TFIDF', got '{}'", mode);
  for (const char* a : {"min_gram_length", "max_gram_length", "max_skip_count", "ngram_counts", "ngram_indexes"})
    if (!ctx.node.has_attr(a)) ctx.fail(ErrorCode::InvalidModel, "attribute '{}' is required", a);
  c.min_gram = ctx.node.get_int("min_gram_length", 1);
  c.max_gram = ctx.node.get_int("max_gram_length", 1);
  c.max_skip = ctx.node.get_int("max_skip_count", 0);
  if (c.min_gram < 1) ctx.fail(ErrorCode::InvalidModel, "min_gram_length must be >= 1, got {}", c.min_gram);
  if (c.max_gram < c.min_gram)
    ctx.fail(ErrorCode::InvalidModel, "max_gram_length {} is smaller than min_gram_length {}", c.max_gram,
             c.min_gram);
  if (c.max_skip < 0) ctx.fail(ErrorCode::InvalidModel, "max_skip_count must be >= 0, got {}", c.max_skip);
  c.ngram_indexes = ctx.node.get_ints("ngram_indexes");
  if (c.ngram_indexes.empty()) ctx.fail(ErrorCode::InvalidModel, "ngram_indexes must not be empty");
  for (int64_t o : c.ngram_indexes) {
    if (o < 0) ctx.fail(ErrorCode::InvalidModel, "ngram_indexes has a negative entry {}", o);
    c.output_size = std::max(c.output_size, o + 1);
  }
  c.weights = ctx.node.get_floats("weights");
  if (!c.weights.empty() && c.weights.size() != c.ngram_indexes.size())
    ctx.fail(ErrorCode::InvalidModel, "weights has {} entries but ngram_indexes has {}", c.weights.size(),
             c.ngram_indexes.size());
  if (!c.weights.empty() && static_cast<int64_t>(c.weights.size()) < c.output_size)
    ctx.fail(ErrorCode::InvalidModel, "weights has {} entries, fewer than the {} output coordinates",
             c.weights.size(), c.output_size);
  return c;
}

// The pool as n-gram → n-gram id (ids count every n-gram of the pool, those
// outside [min_gram, max_gram] included, so they index ngram_indexes).
template <typename K>
std::map<std::vector<K>, int64_t> build_pool(const KernelContext& ctx, const TfIdfConfig& c,
                                             const std::vector<K>& items) {
  std::vector<int64_t> counts = ctx.node.get_ints("ngram_counts");
  if (counts.empty()) ctx.fail(ErrorCode::InvalidModel, "ngram_counts must not be empty");
  if (c.max_gram > static_cast<int64_t>(counts.size()))
    ctx.fail(ErrorCode::InvalidModel, "max_gram_length {} exceeds the {} n-gram sizes of ngram_counts", c.max_gram,
             counts.size());
  std::map<std::vector<K>, int64_t> pool;
  const int64_t total = static_cast<int64_t>(items.size());
  int64_t id = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t size = static_cast<int64_t>(i) + 1;
    const int64_t begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : total;
    if (begin < 0 || end < begin || end > total)
      ctx.fail(ErrorCode::InvalidModel, "ngram_counts {} for {}-grams is out of the pool's {} items", begin, size,
               total);
    if ((end - begin) % size != 0)
      ctx.fail(ErrorCode::InvalidModel, "the {} pool items of {}-grams do not make whole {}-grams", end - begin, size,
               size);
    for (int64_t k = begin; k < end; k += size, ++id) {
      if (size < c.min_gram || size > c.max_gram) continue;
      std::vector<K> gram(items.begin() + k, items.begin() + k + size);
      if (!pool.emplace(std::move(gram), id).second)
        ctx.fail(ErrorCode::InvalidModel, "the pool holds a {}-gram twice (pool entry {})", size, k);
    }
  }
  if (id > static_cast<int64_t>(c.ngram_indexes.size()))
    ctx.fail(ErrorCode::InvalidModel, "the pool holds {} n-grams but ngram_indexes has only {} entries", id,
             c.ngram_indexes.size());
  return pool;
}

// Counts the pool's n-grams in one row into freq[0..output_size).
template <typename K>
void count_row(const TfIdfConfig& c, const std::map<std::vector<K>, int64_t>& pool, const K* row, int64_t n,
               std::vector<int64_t>& freq) {
  auto hit = [&](const std::vector<K>& gram) {
    auto it = pool.find(gram);
    if (it != pool.end()) ++freq[static_cast<size_t>(c.ngram_indexes[static_cast<size_t>(it->second)])];
  };
  std::vector<K> gram;
  int64_t start_size = c.min_gram;
  if (start_size == 1) {  // unigrams do not depend on the skip
    for (int64_t i = 0; i < n; ++i) hit({row[i]});
    if (++start_size > c.max_gram) return;
  }
  for (int64_t dist = 1; dist <= c.max_skip + 1; ++dist) {
    for (int64_t s = 0; s + dist * (start_size - 1) < n; ++s) {
      gram.clear();
      for (int64_t size = 1, k = s; size <= c.max_gram && k < n; ++size, k += dist) {
        gram.push_back(row[k]);
        if (size >= start_size) hit(gram);
      }
    }
  }
}

void tfidf_kernel(KernelContext& ctx) {
  const TfIdfConfig c = read_config(ctx);
  const Tensor x = ctx.input(0).contiguous();
  const bool has_strings = ctx.node.has_attr("pool_strings");
  const bool has_ints = ctx.node.has_attr("pool_int64s");
  if (has_strings == has_ints)
    ctx.fail(ErrorCode::InvalidModel, "exactly one of pool_strings and pool_int64s must be set");
  int64_t rows = 1, cols = 1;
  std::vector<int64_t> out_shape;
  if (x.rank() == 0) {
    out_shape = {c.output_size};
  } else if (x.rank() == 1) {
    cols = x.dim(0);
    out_shape = {c.output_size};
  } else if (x.rank() == 2) {
    rows = x.dim(0);
    cols = x.dim(1);
    if (rows < 1) ctx.fail(ErrorCode::InvalidArgument, "input of shape {} has no rows", x.shape_string());
    out_shape = {rows, c.output_size};
  } else {
    ctx.fail(ErrorCode::InvalidArgument, "input must be [C] or [N, C], got shape {}", x.shape_string());
  }
  std::vector<int64_t> freq(static_cast<size_t>(rows * c.output_size), 0);
  auto count_all = [&]<typename K>(const std::vector<K>& pool_items, const K* data) {
    auto pool = build_pool(ctx, c, pool_items);
    std::vector<int64_t> row_freq(static_cast<size_t>(c.output_size));
    for (int64_t r = 0; r < rows; ++r) {
      std::fill(row_freq.begin(), row_freq.end(), 0);
      count_row(c, pool, data + r * cols, cols, row_freq);
      std::copy(row_freq.begin(), row_freq.end(), freq.begin() + r * c.output_size);
    }
  };
  if (has_strings) {
    if (x.dtype() != DType::String)
      ctx.fail(ErrorCode::InvalidArgument, "pool_strings needs a string input, got {}", dtype_name(x.dtype()));
    count_all(ctx.node.get_strings("pool_strings"), x.string_data());
  } else {
    if (x.dtype() != DType::I32 && x.dtype() != DType::I64)
      ctx.fail(ErrorCode::InvalidArgument, "pool_int64s needs an int32 or int64 input, got {}",
               dtype_name(x.dtype()));
    std::vector<int64_t> xs = x.to_int64s();
    count_all(ctx.node.get_ints("pool_int64s"), xs.data());
  }
  Tensor y = Tensor::empty(DType::F32, out_shape);
  float* yd = y.data<float>();
  for (size_t p = 0; p < freq.size(); ++p) {
    const size_t o = p % static_cast<size_t>(c.output_size);
    const float f = static_cast<float>(freq[p]);
    switch (c.mode) {
      case TfIdfMode::TF: yd[p] = f; break;
      case TfIdfMode::IDF: yd[p] = freq[p] > 0 ? (c.weights.empty() ? 1.0f : c.weights[o]) : 0.0f; break;
      case TfIdfMode::TFIDF: yd[p] = c.weights.empty() ? f : f * c.weights[o]; break;
    }
  }
  ctx.set_output(0, y);
}

}  // namespace

void register_text_ops(OpTable& t) { t.add("", "TfIdfVectorizer", tfidf_kernel); }

}  // namespace hodu::interp
