// TfIdfVectorizer beyond ONNX's conformance data (which covers only integer
// pools in TF mode): string pools, skips, IDF/TFIDF weighting, bad input.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engines/interp/ops/kernel_test_util.h"

namespace hodu::interp {
namespace {

using testing::run_kernel1;

// Pool: unigrams a, b, c (ids 0..2) and the bigram (a, b) (id 3).
std::vector<Attribute> string_pool(const std::string& mode, int64_t max_skip, std::vector<float> weights = {}) {
  std::vector<Attribute> a = {
      Attribute::make_string("mode", mode),
      Attribute::make_int("min_gram_length", 1),
      Attribute::make_int("max_gram_length", 2),
      Attribute::make_int("max_skip_count", max_skip),
      Attribute::make_ints("ngram_counts", {0, 3}),
      Attribute::make_ints("ngram_indexes", {0, 1, 2, 3}),
      Attribute::make_strings("pool_strings", {"a", "b", "c", "a", "b"}),
  };
  if (!weights.empty()) a.push_back(Attribute::make_floats("weights", weights));
  return a;
}

std::vector<double> tfidf(const std::vector<std::string>& words, std::vector<Attribute> attrs) {
  return run_kernel1("TfIdfVectorizer", {Tensor::from_strings({static_cast<int64_t>(words.size())}, words)},
                     std::move(attrs))
      .to_doubles();
}

TEST(TfIdfVectorizer, StringPoolCountsUnigramsAndBigrams) {
  EXPECT_EQ(tfidf({"a", "b", "a", "b", "c"}, string_pool("TF", 0)), (std::vector<double>{2, 2, 1, 2}));
}

TEST(TfIdfVectorizer, SkipsWidenBigrams) {
  // (a, b) only appears with one word between them.
  EXPECT_EQ(tfidf({"a", "x", "b"}, string_pool("TF", 0)), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(tfidf({"a", "x", "b"}, string_pool("TF", 1)), (std::vector<double>{1, 1, 0, 1}));
}

TEST(TfIdfVectorizer, IdfAndTfidfWeights) {
  std::vector<std::string> words = {"a", "b", "a", "b", "c"};
  EXPECT_EQ(tfidf(words, string_pool("IDF", 0, {0.5f, 1, 2, 3})), (std::vector<double>{0.5, 1, 2, 3}));
  EXPECT_EQ(tfidf(words, string_pool("TFIDF", 0, {0.5f, 1, 2, 3})), (std::vector<double>{1, 2, 2, 6}));
  EXPECT_EQ(tfidf({"c"}, string_pool("IDF", 0)), (std::vector<double>{0, 0, 1, 0}));
}

TEST(TfIdfVectorizer, IntegerRowsAndOutputIndexes) {
  // Pool unigrams 7, 9 mapped to outputs 2 and 0 (output 1 unused).
  std::vector<Attribute> attrs = {
      Attribute::make_string("mode", "TF"),       Attribute::make_int("min_gram_length", 1),
      Attribute::make_int("max_gram_length", 1),  Attribute::make_int("max_skip_count", 0),
      Attribute::make_ints("ngram_counts", {0}),  Attribute::make_ints("ngram_indexes", {2, 0}),
      Attribute::make_ints("pool_int64s", {7, 9}),
  };
  Tensor x = Tensor::from_vector(DType::I32, {2, 3}, std::vector<int32_t>{7, 7, 9, 1, 9, 2});
  Tensor y = run_kernel1("TfIdfVectorizer", {x}, attrs);
  EXPECT_EQ(y.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(y.to_doubles(), (std::vector<double>{1, 0, 2, 1, 0, 0}));
}

ErrorCode error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::Internal;
}

TEST(TfIdfVectorizer, BadInputIsAnError) {
  Tensor ints = Tensor::from_vector(DType::I64, {2}, std::vector<int64_t>{1, 2});
  EXPECT_EQ(error_of([&] { run_kernel1("TfIdfVectorizer", {ints}, string_pool("TF", 0)); }),
            ErrorCode::InvalidArgument);
  Tensor cube = Tensor::from_strings({1, 1, 1}, {"a"});
  EXPECT_EQ(error_of([&] { run_kernel1("TfIdfVectorizer", {cube}, string_pool("TF", 0)); }),
            ErrorCode::InvalidArgument);
  auto dup = string_pool("TF", 0);
  dup.back() = Attribute::make_strings("pool_strings", {"a", "a", "c", "a", "b"});
  EXPECT_EQ(error_of([&] { tfidf({"a"}, dup); }), ErrorCode::InvalidModel);
  EXPECT_EQ(error_of([&] { tfidf({"a"}, string_pool("BM25", 0)); }), ErrorCode::InvalidModel);
}

}  // namespace
}  // namespace hodu::interp
