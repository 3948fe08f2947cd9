#include "distributed/training/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "core/error.h"
#include "runtime/session.h"

namespace hodu::distributed {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::string join(const std::vector<Value>& values) {
  std::string s;
  for (const auto& v : values) s += (s.empty() ? "'" : ", '") + v.name + "'";
  return s.empty() ? "none" : s;
}

}  // namespace

DataParallel::DataParallel(const Model& forward, DataParallelOptions options, Communicator comm)
    : forward_(forward), options_(std::move(options)), comm_(std::move(comm)) {
  HODU_CHECK(!options_.loss.empty(), ErrorCode::InvalidArgument, "DataParallel: no loss named");
  std::vector<std::string> params = options_.params;
  if (params.empty()) {
    params = passes::trainable_initializers(forward_.graph);
    HODU_CHECK(!params.empty(), ErrorCode::InvalidArgument,
               "the model has no float initializer to train (no weights, or all are exporter constants)");
  }
  HODU_CHECK(options_.bucket_mb >= 0, ErrorCode::InvalidArgument, "the bucket size must be >= 0 MB (got {})",
             options_.bucket_mb);
  const auto bucket_bytes = static_cast<int64_t>(options_.bucket_mb * 1e6);
  partition_ = partition_training_step(forward_, options_.loss, params, options_.optimizer,
                                       options_.bucket_mb == 0 ? 0 : std::max<int64_t>(bucket_bytes, 1));
  for (const auto& in : forward_.graph.inputs)
    if (!forward_.graph.initializer(in.name)) data_inputs_.push_back(in);
  for (auto& [name, t] : passes::initial_training_state(forward_.graph, partition_.step.graph)) state_[name] = t;

  threads_ = options_.threads > 0 ? options_.threads : std::max(1, physical_core_count() / comm_.local_size());
  SessionOptions so;
  so.engine = options_.engine;
  so.threads = threads_;
  so.seed = options_.seed + static_cast<uint64_t>(comm_.rank());
  so.reseed_each_run = true;
  for (const auto& stage : partition_.stages)
    stages_.push_back(stage.graph.nodes.empty() ? nullptr : Session::from_model(stage, so));
  so.update_state_in_place = true;
  update_ = Session::from_model(partition_.update, so);
  reducer_ = std::make_unique<GradientReducer>(comm_, partition_.buckets, options_.overlap);
}

DataParallel::~DataParallel() = default;

double DataParallel::step(const std::map<std::string, Tensor>& feeds, float lr) {
  const auto t0 = Clock::now();
  std::map<std::string, Tensor> values = state_;
  for (const auto& in : data_inputs_) {
    auto it = feeds.find(in.name);
    HODU_CHECK(it != feeds.end(), ErrorCode::InvalidArgument, "training step: no feed for the model input '{}' (inputs: {})",
               in.name, join(data_inputs_));
    values[in.name] = it->second;
  }
  for (const auto& [name, t] : feeds)
    HODU_CHECK(std::any_of(data_inputs_.begin(), data_inputs_.end(), [&](const Value& v) { return v.name == name; }),
               ErrorCode::InvalidArgument, "training step: '{}' is not an input of the model (inputs: {})", name,
               join(data_inputs_));
  for (size_t s = 0; s < stages_.size(); ++s) {
    if (stages_[s]) {
      std::map<std::string, RuntimeValue> in;
      for (const auto& v : partition_.stages[s].graph.inputs) in[v.name] = values.at(v.name);
      for (auto& o : stages_[s]->run(in)) values[o.name] = o.value.tensor;
    }
    reducer_->submit(s, values);
  }
  const double compute_ms = ms_since(t0);
  reducer_->wait();
  const auto t1 = Clock::now();
  std::map<std::string, RuntimeValue> in;
  for (const auto& v : partition_.averaged) in[v] = reducer_->averaged(v);
  in[passes::kLearningRateInput] = Tensor::scalar<float>(DType::F32, lr);
  for (const auto& [name, t] : state_) in[name] = t;
  update_->run(in);
  ++steps_;
  times_.steps++;
  times_.compute_ms += compute_ms;
  times_.update_ms += ms_since(t1);
  times_.step_ms += ms_since(t0);
  return reducer_->averaged(partition_.loss).get_double(0);
}

void DataParallel::load_state(const std::map<std::string, Tensor>& values, int64_t steps_taken) {
  for (const auto& [name, t] : values) {
    auto it = state_.find(name);
    HODU_CHECK(it != state_.end(), ErrorCode::InvalidArgument, "'{}' is not a param or state of this training", name);
    HODU_CHECK(t.dtype() == it->second.dtype() && t.shape() == it->second.shape(), ErrorCode::InvalidArgument,
               "'{}' is {} where this training has {}", name, t.type_string(), it->second.type_string());
  }
  for (auto& [name, t] : state_) {
    auto it = values.find(name);
    HODU_CHECK(it != values.end(), ErrorCode::InvalidArgument, "no value for '{}'", name);
    Tensor src = it->second.contiguous();
    std::memcpy(t.raw_data(), src.raw_data(), t.nbytes());
  }
  steps_ = steps_taken;
}

std::vector<std::string> DataParallel::optimizer_state() const {
  std::set<std::string> model(partition_.params.begin(), partition_.params.end());
  model.insert(partition_.statistics.begin(), partition_.statistics.end());
  std::vector<std::string> out;
  for (const auto& [name, t] : state_)
    if (!model.count(name)) out.push_back(name);
  return out;
}

Model DataParallel::trained_model() const {
  Model m = forward_;
  for (const auto* names : {&partition_.params, &partition_.statistics})
    for (const auto& name : *names) m.graph.set_initializer(name, state_.at(name).clone());
  return m;
}

uint64_t DataParallel::state_fingerprint() const {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (const auto* names : {&partition_.params, &partition_.statistics})
    for (const auto& name : *names) {
      const Tensor& t = state_.at(name);
      const auto* p = static_cast<const unsigned char*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ULL;
    }
  return h;
}

}  // namespace hodu::distributed
