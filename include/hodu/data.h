/* hodu/data.h — datasets, batching, and the files training data comes in (public).
 *
 *   auto arrays = hodu::data::load_npz("digits.npz");
 *   hodu::data::TensorDataset train({arrays.at("x_train"), arrays.at("y_train")});
 *   hodu::data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 0});
 *   for (int epoch = 0; epoch < 10; ++epoch)
 *     for (const auto& batch : loader) { ... batch[0], batch[1] ... }
 *
 * An example is a vector of tensors (features, label, ...); a batch stacks the
 * examples' tensors along a new first dim. Shuffling draws one permutation per
 * epoch from a Generator seeded once, so a run is the same every time; worker
 * threads assemble the next batches while the current one is used, in order. */
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hodu/random.h"
#include "hodu/tensor.h"

namespace hodu::eager::data {

using Example = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset();
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // A batch of examples; by default get() of each, stacked. Datasets over tensors override it
  // to gather rows at once. Must be safe to call from several threads.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// Rows of tensors sharing their first dim (features [N, ...], labels [N], ...).
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// Rows [begin, end) of another dataset (a train/test split).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  std::vector<int64_t> indices_;
};

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;        // of the shuffling generator
  bool drop_last = false;   // drop a last batch smaller than batch_size
  int num_workers = 0;      // threads assembling batches ahead (0: on the caller's thread)
  int prefetch = 2;         // batches each worker may hold ready
};

class DataLoader {
 public:
  // The dataset must outlive the loader.
  DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_batches() const;
  // One epoch: a new order when shuffling. Iterating again starts the next epoch.
  class Iterator;
  Iterator begin();
  Iterator end();
  // Epochs started so far, and the shuffling generator's state (checkpoints of a run).
  int64_t epoch() const { return epoch_; }
  std::string state() const;
  void set_state(const std::string& state);

  class Iterator {
   public:
    const Example& operator*() const { return current_; }
    const Example* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& o) const { return index_ != o.index_; }
    bool operator==(const Iterator& o) const { return index_ == o.index_; }

   private:
    friend class DataLoader;
    DataLoader* loader_ = nullptr;
    int64_t index_ = 0;
    Example current_;
  };

 private:
  struct Epoch;
  Example fetch(int64_t batch);  // the batch of the running epoch
  void start_epoch();
  const Dataset& dataset_;
  DataLoaderOptions options_;
  Generator gen_;
  int64_t epoch_ = 0;
  std::unique_ptr<Epoch> running_;
};

// ---- files -------------------------------------------------------------------------

// Every array of a .npz file (numpy's savez / savez_compressed), by name.
std::map<std::string, Tensor> load_npz(const std::string& path);
void save_npz(const std::string& path, const std::map<std::string, Tensor>& arrays);

struct CsvOptions {
  char delimiter = ',';
  bool header = true;       // the first line names the columns
  DType dtype = kFloat32;   // of the values
  std::vector<std::string> columns = {};  // only these (by header name); all when empty
};
// A numeric CSV file as a [rows, columns] tensor; InvalidArgument naming the line and column
// of a value that is not a number or a row of another length.
Tensor read_csv(const std::string& path, const CsvOptions& options = {});
// The header's column names (empty without a header).
std::vector<std::string> csv_columns(const std::string& path, const CsvOptions& options = {});

}  // namespace hodu::eager::data
