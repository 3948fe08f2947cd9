// A KServe v2 REST client: health, metadata and infer (JSON or binary tensors),
// used by `hodugaki infer` and `hodu run --remote`. Failing to reach the server
// (refused, reset, timed out) is an Io error; an HTTP error status is an
// InvalidArgument (4xx) or Internal (5xx) error carrying the server's message.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/serving/infer_protocol.h"

namespace hodu::serving {

struct InferOptions {
  std::string version;               // "" = the server's choice (the latest)
  std::vector<std::string> outputs;  // "" = every output
  bool binary = true;                // tensors as binary data both ways (else JSON)
  std::optional<std::string> id;
};

class InferenceClient {
 public:
  // `url`: http://HOST[:PORT][/PREFIX] (https:// too). `timeout_ms` bounds the
  // connection, each read and each write (0: no limit).
  explicit InferenceClient(const std::string& url, int64_t timeout_ms = 60000);
  ~InferenceClient();
  InferenceClient(const InferenceClient&) = delete;
  InferenceClient& operator=(const InferenceClient&) = delete;

  const std::string& url() const { return url_; }
  bool live();
  bool ready();
  bool model_ready(const std::string& model, const std::string& version = "");
  std::string server_metadata();  // the JSON object
  std::string model_metadata(const std::string& model, const std::string& version = "");
  InferResponse infer(const std::string& model, const std::vector<NamedTensor>& inputs,
                      const InferOptions& options = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string url_;
};

}  // namespace hodu::serving
