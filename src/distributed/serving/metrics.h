// Prometheus metrics of the server, rendered in the text exposition format at
// /metrics: infer requests by model, version and HTTP status; errors; queue,
// compute and request time histograms; batch-size histograms (rows and
// requests per model run); in-flight requests; the process's resident memory.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace hodu::serving {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // "name_bucket{labels,le="..."} n" lines, then _sum and _count.
  void render(std::string& out, const std::string& name, const std::string& labels) const;
  uint64_t count() const { return count_; }
  // Observations in the bucket whose upper bound is `le` (not cumulative); tests read it.
  uint64_t bucket(double le) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // one per bound, plus +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  // What one model run did, for the histograms.
  struct Batch {
    int64_t rows = 0;      // dim-0 size run at once
    int64_t requests = 0;  // requests stacked into it
    double compute_s = 0;
  };

  // Creates the series of a model (so a scrape shows it before its first request).
  void add_model(const std::string& model, const std::string& version);
  // An infer request finished with HTTP `status`; `model` empty for an unknown model.
  void request_done(const std::string& model, const std::string& version, int status, double seconds);
  void queued(const std::string& model, const std::string& version, double seconds);
  void batch_done(const std::string& model, const std::string& version, const Batch& b);
  void inflight(int delta);

  std::string render() const;

  // For tests: observations of a model's histograms.
  uint64_t batches_with_requests_over(const std::string& model, const std::string& version, int64_t n) const;
  uint64_t request_count(const std::string& model, const std::string& version, int status) const;

 private:
  struct ModelSeries {
    ModelSeries();
    Histogram queue, compute, request, batch_rows, batch_requests;
  };
  using Key = std::pair<std::string, std::string>;  // model, version
  ModelSeries& series(const std::string& model, const std::string& version);

  mutable std::mutex mutex_;
  std::map<Key, ModelSeries> models_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;  // model, version, status
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> errors_;  // model, version, kind
  int64_t inflight_ = 0;
};

// Label values escaped for the text format (backslash, quote, newline).
std::string escape_label(const std::string& v);

}  // namespace hodu::serving
