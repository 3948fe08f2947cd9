// Datasets and the DataLoader (seeded shuffling, batches assembled ahead by
// worker threads, handed out in order).
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/shape.h"
#include "hodu/autograd.h"
#include "hodu/data.h"

namespace hodu::eager::data {

Dataset::~Dataset() = default;

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples;
  for (int64_t i : indices) examples.push_back(get(i));
  HODU_CHECK(!examples.empty(), ErrorCode::InvalidArgument, "Dataset::get_batch: no indices");
  Example batch;
  for (size_t k = 0; k < examples[0].size(); ++k) {
    std::vector<Tensor> parts;
    for (size_t e = 0; e < examples.size(); ++e) {
      HODU_CHECK(examples[e].size() == examples[0].size(), ErrorCode::InvalidArgument,
                 "Dataset: example {} has {} tensors, example {} has {}", indices[e], examples[e].size(), indices[0],
                 examples[0].size());
      parts.push_back(examples[e][k]);
    }
    batch.push_back(stack(parts, 0));
  }
  return batch;
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  HODU_CHECK(!tensors_.empty(), ErrorCode::InvalidArgument, "TensorDataset: no tensors");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    HODU_CHECK(tensors_[i].defined() && tensors_[i].dim() >= 1, ErrorCode::InvalidArgument,
               "TensorDataset: tensor {} ({}) needs a first dim", i, tensors_[i].type_string());
    HODU_CHECK(tensors_[i].size(0) == tensors_[0].size(0), ErrorCode::InvalidArgument,
               "TensorDataset: tensor {} has {} rows, tensor 0 has {}", i, tensors_[i].size(0), tensors_[0].size(0));
  }
  size_ = tensors_[0].size(0);
}

Example TensorDataset::get(int64_t index) const {
  HODU_CHECK(index >= 0 && index < size_, ErrorCode::InvalidArgument, "TensorDataset: index {} of {}", index, size_);
  Example e;
  for (const Tensor& t : tensors_) e.push_back(t.select(0, index));
  return e;
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  NoGradGuard guard;
  Tensor idx = tensor(indices);
  Example e;
  for (const Tensor& t : tensors_) e.push_back(t.index_select(0, idx));
  return e;
}

Subset::Subset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), indices_(std::move(indices)) {
  HODU_CHECK(base_ != nullptr, ErrorCode::InvalidArgument, "Subset: null dataset");
  for (int64_t i : indices_)
    HODU_CHECK(i >= 0 && i < base_->size(), ErrorCode::InvalidArgument, "Subset: index {} of a dataset of {}", i,
               base_->size());
}

Example Subset::get(int64_t index) const {
  HODU_CHECK(index >= 0 && index < size(), ErrorCode::InvalidArgument, "Subset: index {} of {}", index, size());
  return base_->get(indices_[index]);
}

Example Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  for (int64_t i : indices) {
    HODU_CHECK(i >= 0 && i < size(), ErrorCode::InvalidArgument, "Subset: index {} of {}", i, size());
    mapped.push_back(indices_[i]);
  }
  return base_->get_batch(mapped);
}

// ---- DataLoader ----------------------------------------------------------------------

struct DataLoader::Epoch {
  std::vector<std::vector<int64_t>> batches;
  std::vector<std::optional<Example>> ready;
  std::vector<std::exception_ptr> errors;
  std::mutex mu;
  std::condition_variable cv;
  int64_t consumed = 0;
  bool stop = false;
  std::vector<std::thread> workers;

  ~Epoch() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& t : workers) t.join();
  }
};

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    : dataset_(dataset), options_(options), gen_(options.seed) {
  HODU_CHECK(options_.batch_size > 0, ErrorCode::InvalidArgument, "DataLoader: batch_size {}", options_.batch_size);
  HODU_CHECK(options_.num_workers >= 0 && options_.prefetch >= 1, ErrorCode::InvalidArgument,
             "DataLoader: num_workers {} must be >= 0 and prefetch {} >= 1", options_.num_workers, options_.prefetch);
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::num_batches() const {
  const int64_t n = dataset_.size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

void DataLoader::start_epoch() {
  running_.reset();  // joins the previous epoch's workers
  auto e = std::make_unique<Epoch>();
  const int64_t n = dataset_.size();
  std::vector<int64_t> order(n);
  if (options_.shuffle) {
    order = randperm(n, &gen_).to_vector<int64_t>();
  } else {
    for (int64_t i = 0; i < n; ++i) order[i] = i;
  }
  const int64_t nb = num_batches();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t start = b * options_.batch_size, stop = std::min(n, start + options_.batch_size);
    e->batches.emplace_back(order.begin() + start, order.begin() + stop);
  }
  e->ready.resize(nb);
  e->errors.resize(nb);
  ++epoch_;
  const int workers = options_.num_workers;
  Epoch* ep = e.get();
  for (int w = 0; w < workers; ++w) {
    ep->workers.emplace_back([this, ep, w, workers, nb] {
      for (int64_t b = w; b < nb; b += workers) {
        {
          std::unique_lock<std::mutex> lock(ep->mu);
          ep->cv.wait(lock, [&] { return ep->stop || b < ep->consumed + options_.prefetch * workers; });
          if (ep->stop) return;
        }
        std::optional<Example> ex;
        std::exception_ptr err;
        try {
          ex = dataset_.get_batch(ep->batches[b]);
        } catch (...) {
          err = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(ep->mu);
          ep->ready[b] = std::move(ex);
          ep->errors[b] = err;
        }
        ep->cv.notify_all();
      }
    });
  }
  running_ = std::move(e);
}

Example DataLoader::fetch(int64_t b) {
  Epoch& e = *running_;
  if (options_.num_workers == 0) {
    e.consumed = b + 1;
    return dataset_.get_batch(e.batches[b]);
  }
  std::unique_lock<std::mutex> lock(e.mu);
  e.cv.wait(lock, [&] { return e.ready[b].has_value() || e.errors[b] != nullptr; });
  if (e.errors[b]) std::rethrow_exception(e.errors[b]);
  Example ex = std::move(*e.ready[b]);
  e.ready[b].reset();
  e.consumed = b + 1;
  lock.unlock();
  e.cv.notify_all();
  return ex;
}

DataLoader::Iterator DataLoader::begin() {
  start_epoch();
  Iterator it;
  it.loader_ = this;
  it.index_ = 0;
  if (num_batches() > 0) it.current_ = fetch(0);
  return it;
}

DataLoader::Iterator DataLoader::end() {
  Iterator it;
  it.loader_ = this;
  it.index_ = num_batches();
  return it;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  ++index_;
  current_.clear();
  if (index_ < loader_->num_batches()) current_ = loader_->fetch(index_);
  return *this;
}

std::string DataLoader::state() const {
  std::ostringstream os;
  os << epoch_ << ' ' << gen_.state();
  return os.str();
}

void DataLoader::set_state(const std::string& s) {
  std::istringstream is(s);
  int64_t epoch = 0;
  is >> epoch;
  HODU_CHECK(!is.fail() && epoch >= 0, ErrorCode::InvalidArgument, "DataLoader::set_state: not a loader state");
  std::string rest;
  std::getline(is, rest);
  gen_.set_state(rest);
  running_.reset();
  epoch_ = epoch;
}

}  // namespace hodu::eager::data
