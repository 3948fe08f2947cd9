#include "distributed/serving/batcher.h"

#include <fmt/format.h>

#include <cstring>
#include <set>

#include "distributed/serving/metrics.h"

namespace hodu::serving {
namespace {

double seconds_between(Batcher::Clock::time_point a, Batcher::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

std::string batch_dim_problem(const Session& session) {
  std::string symbol;
  bool first = true;
  for (const auto& in : session.inputs()) {
    const ValueType& t = in.type;
    if (!t.is_tensor()) return fmt::format("input '{}' is not a tensor", in.name);
    if (!t.shape.rank_known() || t.shape.rank() == 0)
      return fmt::format("input '{}' has no dim 0 ({})", in.name, t.to_string());
    const Dim& d = t.shape[0];
    if (d.is_known()) return fmt::format("dim 0 of input '{}' is fixed ({})", in.name, t.to_string());
    if (first) symbol = d.symbol;
    else if (d.symbol != symbol)
      return fmt::format("inputs name dim 0 differently ('{}' and '{}')", symbol, d.symbol);
    first = false;
  }
  if (first) return "the model has no inputs";
  if (!symbol.empty())
    for (const auto& in : session.inputs())
      for (int64_t i = 1; i < in.type.shape.rank(); ++i)
        if (in.type.shape[i].symbol == symbol)
          return fmt::format("the batch dim '{}' is also dim {} of input '{}'", symbol, i, in.name);
  for (const auto& out : session.outputs()) {
    const ValueType& t = out.type;
    if (t.kind != ValueType::Kind::Tensor && t.kind != ValueType::Kind::Unknown)
      return fmt::format("output '{}' is not a tensor", out.name);
    if (!t.is_tensor() || !t.shape.rank_known()) continue;  // checked on each run
    if (t.shape.rank() == 0) return fmt::format("output '{}' is a scalar", out.name);
    if (t.shape[0].is_known()) return fmt::format("dim 0 of output '{}' is fixed ({})", out.name, t.to_string());
  }
  return "";
}

Tensor stack_rows(const std::vector<const Tensor*>& parts) {
  std::vector<int64_t> shape = parts[0]->shape();
  shape[0] = 0;
  for (const Tensor* p : parts) shape[0] += p->dim(0);
  Tensor out = Tensor::empty(parts[0]->dtype(), shape);
  if (out.dtype() == DType::String) {
    std::string* dst = out.string_data();
    for (const Tensor* p : parts) {
      Tensor c = p->contiguous();
      const std::string* src = c.string_data();
      for (int64_t i = 0; i < c.numel(); ++i) *dst++ = src[i];
    }
    return out;
  }
  auto* dst = static_cast<char*>(out.raw_data());
  for (const Tensor* p : parts) {
    Tensor c = p->contiguous();
    std::memcpy(dst, c.raw_data(), c.nbytes());
    dst += c.nbytes();
  }
  return out;
}

Batcher::Batcher(std::string model, std::string version, std::vector<std::unique_ptr<Session>> instances,
                 BatchOptions options, Metrics* metrics)
    : model_(std::move(model)), version_(std::move(version)), instances_(std::move(instances)),
      options_(options), metrics_(metrics) {
  HODU_CHECK(!instances_.empty(), ErrorCode::InvalidArgument, "model '{}': no instance to run it", model_);
  HODU_CHECK(options_.max_batch >= 1, ErrorCode::InvalidArgument, "max batch must be at least 1, not {}",
             options_.max_batch);
  HODU_CHECK(options_.timeout_us >= 0, ErrorCode::InvalidArgument, "batch timeout must be >= 0, not {}",
             options_.timeout_us);
  for (const auto& in : session().inputs()) input_names_.push_back(in.name);
  if (options_.max_batch == 1) {
    note_ = "max batch is 1";
  } else {
    note_ = batch_dim_problem(session());
    batching_ = note_.empty();
  }
  for (auto& s : instances_) workers_.emplace_back([this, sp = s.get()] { worker(*sp); });
}

Batcher::~Batcher() { stop(); }

std::string Batcher::batching_note() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return note_;
}

void Batcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
}

std::string Batcher::key_of(const std::map<std::string, RuntimeValue>& feeds, int64_t& rows) const {
  rows = 1;
  if (!batching_) return "";
  std::string key;
  bool first = true;
  for (const auto& name : input_names_) {
    auto it = feeds.find(name);
    if (it == feeds.end() || !it->second.is_tensor() || it->second.tensor.rank() == 0) return "";
    const Tensor& t = it->second.tensor;
    if (first) rows = t.dim(0);
    else if (t.dim(0) != rows) return "";  // inputs disagree on dim 0: run alone (the Session says why)
    first = false;
    fmt::format_to(std::back_inserter(key), "{}:{}", static_cast<int>(t.dtype()), dtype_name(t.dtype()));
    for (int64_t d = 1; d < t.rank(); ++d) fmt::format_to(std::back_inserter(key), ",{}", t.dim(d));
    key += ';';
  }
  return key;
}

std::vector<NamedValue> Batcher::infer(std::map<std::string, RuntimeValue> feeds) {
  auto p = std::make_shared<Pending>();
  p->key = key_of(feeds, p->rows);
  p->feeds = std::move(feeds);
  std::future<std::vector<NamedValue>> result = p->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw Unavailable(fmt::format("model '{}' is shutting down", model_));
    if (static_cast<int64_t>(queue_.size()) >= options_.max_queue)
      throw Unavailable(fmt::format("model '{}': {} requests are already queued", model_, queue_.size()));
    p->enqueued = Clock::now();
    queue_.push_back(p);
  }
  cv_.notify_one();
  return result.get();
}

void Batcher::worker(Session& session) {
  for (;;) {
    Batch batch;
    {
      std::lock_guard<std::mutex> forming(forming_);
      std::unique_lock<std::mutex> lock(mutex_);
      batch = take_batch(lock);
    }
    if (batch.empty()) return;  // stopping, and the queue is drained
    run_batch(session, batch);
  }
}

Batcher::Batch Batcher::take_batch(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return {};
  std::shared_ptr<Pending> first = queue_.front();
  if (!batching_ || first->key.empty() || first->rows >= options_.max_batch) {
    queue_.pop_front();
    return {first};
  }
  const auto deadline = first->enqueued + std::chrono::microseconds(options_.timeout_us);
  Batch chosen;
  for (;;) {
    chosen.clear();
    int64_t rows = 0;
    for (const auto& p : queue_)
      if (p->key == first->key && rows + p->rows <= options_.max_batch) {
        chosen.push_back(p);
        rows += p->rows;
      }
    if (rows >= options_.max_batch || stopping_ || Clock::now() >= deadline) break;
    cv_.wait_until(lock, deadline);
  }
  std::set<Pending*> taken;
  for (const auto& p : chosen) taken.insert(p.get());
  std::erase_if(queue_, [&](const std::shared_ptr<Pending>& p) { return taken.count(p.get()) > 0; });
  return chosen;
}

void Batcher::run_alone(Session& session, Pending& p) {
  auto t0 = Clock::now();
  try {
    auto outputs = session.run(p.feeds);
    if (metrics_) metrics_->batch_done(model_, version_, {p.rows, 1, seconds_between(t0, Clock::now())});
    p.done.set_value(std::move(outputs));
  } catch (...) {
    p.done.set_exception(std::current_exception());
  }
}

void Batcher::run_batch(Session& session, Batch& batch) {
  auto start = Clock::now();
  if (metrics_)
    for (const auto& p : batch) metrics_->queued(model_, version_, seconds_between(p->enqueued, start));
  if (batch.size() == 1) {
    run_alone(session, *batch[0]);
    return;
  }
  int64_t total = 0;
  for (const auto& p : batch) total += p->rows;
  std::vector<NamedValue> outputs;
  bool rows_lost = false;  // an output does not keep dim 0 as the batch
  try {
    std::map<std::string, RuntimeValue> stacked;
    for (const auto& name : input_names_) {
      std::vector<const Tensor*> parts;
      for (const auto& p : batch) parts.push_back(&p->feeds.at(name).tensor);
      stacked[name] = RuntimeValue(stack_rows(parts));
    }
    outputs = session.run(stacked);
    for (const auto& o : outputs) {
      rows_lost = !(o.value.is_tensor() && o.value.tensor.rank() > 0 && o.value.tensor.dim(0) == total);
      HODU_CHECK(!rows_lost, ErrorCode::Unsupported, "output '{}' of a batch of {} rows is {}, not {} rows along dim 0",
                 o.name, total, o.value.is_tensor() ? o.value.tensor.type_string() : "not a tensor", total);
    }
  } catch (const Error& e) {
    // A bad request, or a model whose outputs do not keep dim 0 as the batch: each runs alone.
    if (rows_lost) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (batching_) {
        batching_ = false;
        note_ = e.what();
        std::fprintf(stderr, "hodugaki: model '%s': batching turned off: %s\n", model_.c_str(), e.what());
      }
    }
    for (auto& p : batch) run_alone(session, *p);
    return;
  } catch (...) {
    for (auto& p : batch) run_alone(session, *p);
    return;
  }
  if (metrics_)
    metrics_->batch_done(model_, version_,
                         {total, static_cast<int64_t>(batch.size()), seconds_between(start, Clock::now())});
  int64_t offset = 0;
  for (auto& p : batch) {
    std::vector<NamedValue> mine;
    mine.reserve(outputs.size());
    for (const auto& o : outputs) mine.push_back({o.name, RuntimeValue(o.value.tensor.slice(0, offset, offset + p->rows))});
    offset += p->rows;
    p->done.set_value(std::move(mine));
  }
}

}  // namespace hodu::serving
