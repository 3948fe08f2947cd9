// Training data as named arrays sharing their first dim (rows): an .npz's
// arrays, bound to the model's data inputs by name, and the feeds of a batch of
// rows (each array's rows gathered into a new tensor).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "formats/tensor_io.h"
#include "ir/graph.h"

namespace hodu::distributed {

class ArrayData {
 public:
  // `source` names the data in errors ("train.npz").
  ArrayData(NamedTensors arrays, std::string source);
  static ArrayData load(const std::string& path);

  // Feeds each model input from an array: `names` maps input -> array (an input not in it reads
  // the array of its own name). InvalidArgument naming the input and array for a missing array,
  // another dtype, rank or dim, arrays of different row counts, or a model input whose first dim
  // is fixed to another size than `batch`.
  void bind(const std::vector<Value>& inputs, const std::map<std::string, std::string>& names, int64_t batch);
  int64_t rows() const { return rows_; }
  const std::vector<std::string>& array_names() const { return names_; }
  bool has(const std::string& array) const;
  // The bound inputs' rows (after bind).
  std::map<std::string, Tensor> batch(const std::vector<int64_t>& rows) const;

 private:
  std::map<std::string, Tensor> arrays_;
  std::vector<std::string> names_;  // in file order
  std::string source_;
  std::vector<std::pair<std::string, std::string>> bound_;  // (input, array)
  int64_t rows_ = 0;
};

}  // namespace hodu::distributed
