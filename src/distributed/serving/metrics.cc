#include "distributed/serving/metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>
#include <fstream>

#include <unistd.h>

namespace hodu::serving {
namespace {

std::vector<double> seconds_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}
std::vector<double> size_buckets() { return {1, 2, 4, 8, 16, 32, 64, 128, 256}; }

std::string labels(const std::string& model, const std::string& version) {
  return fmt::format("model=\"{}\",version=\"{}\"", escape_label(model), escape_label(version));
}

std::string format_bound(double b) { return fmt::format("{}", b); }

// Resident memory of this process from /proc/self/statm (bytes).
uint64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

const double kStartTime = static_cast<double>(std::time(nullptr));

}  // namespace

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

uint64_t Histogram::bucket(double le) const {
  for (size_t i = 0; i < bounds_.size(); ++i)
    if (bounds_[i] == le) return counts_[i];
  return std::isinf(le) ? counts_.back() : 0;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, format_bound(bounds_[i]),
                   cumulative);
  }
  cumulative += counts_.back();
  fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cumulative);
  fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels,
                 count_);
}

Metrics::ModelSeries::ModelSeries()
    : queue(seconds_buckets()), compute(seconds_buckets()), request(seconds_buckets()), batch_rows(size_buckets()),
      batch_requests(size_buckets()) {}

Metrics::ModelSeries& Metrics::series(const std::string& model, const std::string& version) {
  return models_[{model, version}];
}

void Metrics::add_model(const std::string& model, const std::string& version) {
  std::lock_guard<std::mutex> lock(mutex_);
  series(model, version);
}

void Metrics::request_done(const std::string& model, const std::string& version, int status, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[{model, version, status}];
  if (status >= 400) ++errors_[{model, version, status >= 500 ? "server" : "client"}];
  if (!model.empty()) series(model, version).request.observe(seconds);
}

void Metrics::queued(const std::string& model, const std::string& version, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  series(model, version).queue.observe(seconds);
}

void Metrics::batch_done(const std::string& model, const std::string& version, const Batch& b) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& s = series(model, version);
  s.compute.observe(b.compute_s);
  s.batch_rows.observe(static_cast<double>(b.rows));
  s.batch_requests.observe(static_cast<double>(b.requests));
}

void Metrics::inflight(int delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  inflight_ += delta;
}

uint64_t Metrics::batches_with_requests_over(const std::string& model, const std::string& version, int64_t n) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = models_.find({model, version});
  if (it == models_.end()) return 0;
  uint64_t total = it->second.batch_requests.count(), small = 0;
  for (double b : size_buckets())
    if (b <= static_cast<double>(n)) small += it->second.batch_requests.bucket(b);
  return total - small;
}

uint64_t Metrics::request_count(const std::string& model, const std::string& version, int status) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = requests_.find({model, version, status});
  return it == requests_.end() ? 0 : it->second;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out += "# HELP hodugaki_requests_total Inference requests by model, version and HTTP status.\n"
         "# TYPE hodugaki_requests_total counter\n";
  for (const auto& [k, n] : requests_)
    fmt::format_to(std::back_inserter(out), "hodugaki_requests_total{{{},code=\"{}\"}} {}\n",
                   labels(std::get<0>(k), std::get<1>(k)), std::get<2>(k), n);
  out += "# HELP hodugaki_errors_total Failed inference requests: kind client (4xx) or server (5xx).\n"
         "# TYPE hodugaki_errors_total counter\n";
  for (const auto& [k, n] : errors_)
    fmt::format_to(std::back_inserter(out), "hodugaki_errors_total{{{},kind=\"{}\"}} {}\n",
                   labels(std::get<0>(k), std::get<1>(k)), std::get<2>(k), n);
  struct H {
    const char* name;
    const char* help;
    Histogram ModelSeries::*member;
  };
  const H hs[] = {
      {"hodugaki_queue_seconds", "Time a request waited for a model run.", &ModelSeries::queue},
      {"hodugaki_compute_seconds", "Time of one model run (a batch).", &ModelSeries::compute},
      {"hodugaki_request_seconds", "Time from a request's arrival to its response (parse, queue, run, encode).",
       &ModelSeries::request},
      {"hodugaki_batch_size", "Rows (dim 0) of one model run.", &ModelSeries::batch_rows},
      {"hodugaki_batch_requests", "Requests stacked into one model run.", &ModelSeries::batch_requests},
  };
  for (const auto& h : hs) {
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} histogram\n", h.name, h.help, h.name);
    for (const auto& [k, s] : models_) (s.*h.member).render(out, h.name, labels(k.first, k.second));
  }
  fmt::format_to(std::back_inserter(out),
                 "# HELP hodugaki_inflight_requests Inference requests being served.\n"
                 "# TYPE hodugaki_inflight_requests gauge\nhodugaki_inflight_requests {}\n",
                 inflight_);
  fmt::format_to(std::back_inserter(out),
                 "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                 "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}\n"
                 "# HELP process_start_time_seconds Start time of the process since the Unix epoch.\n"
                 "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {}\n",
                 resident_bytes(), kStartTime);
  return out;
}

}  // namespace hodu::serving
