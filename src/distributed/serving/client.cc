#include "distributed/serving/client.h"

#include <httplib.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hodu::serving {

struct InferenceClient::Impl {
  std::unique_ptr<httplib::Client> http;
  std::string prefix;  // path after the host, without a trailing '/'
};

namespace {

// Percent-encodes a path segment (everything but RFC 3986's unreserved characters).
std::string encode_segment(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string model_path(const std::string& model, const std::string& version) {
  std::string p = "/v2/models/" + encode_segment(model);
  if (!version.empty()) p += "/versions/" + encode_segment(version);
  return p;
}

// The server's {"error": ...} message, else the body itself (cut short).
std::string server_message(const httplib::Response& res) {
  auto j = nlohmann::json::parse(res.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  return res.body.size() > 200 ? res.body.substr(0, 200) + "..." : res.body;
}

}  // namespace

InferenceClient::InferenceClient(const std::string& url, int64_t timeout_ms) : impl_(std::make_unique<Impl>()), url_(url) {
  auto scheme_end = url.find("://");
  HODU_CHECK(scheme_end != std::string::npos && (url.rfind("http://", 0) == 0 || url.rfind("https://", 0) == 0),
             ErrorCode::InvalidArgument, "server URL '{}' must start with http:// or https://", url);
  auto path_start = url.find('/', scheme_end + 3);
  std::string host = url.substr(0, path_start);
  HODU_CHECK(host.size() > scheme_end + 3, ErrorCode::InvalidArgument, "server URL '{}' has no host", url);
  if (path_start != std::string::npos) impl_->prefix = url.substr(path_start);
  while (!impl_->prefix.empty() && impl_->prefix.back() == '/') impl_->prefix.pop_back();
  impl_->http = std::make_unique<httplib::Client>(host);
  HODU_CHECK(impl_->http->is_valid(), ErrorCode::InvalidArgument, "server URL '{}' is not valid", url);
  if (timeout_ms > 0) {
    time_t s = static_cast<time_t>(timeout_ms / 1000);
    time_t us = static_cast<time_t>((timeout_ms % 1000) * 1000);
    impl_->http->set_connection_timeout(s, us);
    impl_->http->set_read_timeout(s, us);
    impl_->http->set_write_timeout(s, us);
  }
  impl_->http->set_keep_alive(true);
  impl_->http->set_tcp_nodelay(true);
}

InferenceClient::~InferenceClient() = default;

namespace {

httplib::Response checked(httplib::Result r, const std::string& url, const std::string& path, bool allow_4xx = false) {
  if (!r) fail(ErrorCode::Io, "cannot reach {}{}: {}", url, path, httplib::to_string(r.error()));
  httplib::Response res = r.value();
  if (res.status >= 400 && !(allow_4xx && res.status < 500))
    fail(res.status < 500 ? ErrorCode::InvalidArgument : ErrorCode::Internal, "server {}: {} (HTTP {})", url,
         server_message(res), res.status);
  return res;
}

}  // namespace

bool InferenceClient::live() {
  return checked(impl_->http->Get(impl_->prefix + "/v2/health/live"), url_, "/v2/health/live", true).status == 200;
}

bool InferenceClient::ready() {
  return checked(impl_->http->Get(impl_->prefix + "/v2/health/ready"), url_, "/v2/health/ready", true).status == 200;
}

bool InferenceClient::model_ready(const std::string& model, const std::string& version) {
  std::string p = model_path(model, version) + "/ready";
  return checked(impl_->http->Get(impl_->prefix + p), url_, p, true).status == 200;
}

std::string InferenceClient::server_metadata() {
  return checked(impl_->http->Get(impl_->prefix + "/v2"), url_, "/v2").body;
}

std::string InferenceClient::model_metadata(const std::string& model, const std::string& version) {
  std::string p = model_path(model, version);
  return checked(impl_->http->Get(impl_->prefix + p), url_, p).body;
}

InferResponse InferenceClient::infer(const std::string& model, const std::vector<NamedTensor>& inputs,
                                     const InferOptions& options) {
  EncodedBody body = encode_infer_request(inputs, options.binary, options.outputs, options.binary, options.id);
  httplib::Headers headers;
  std::string content_type = "application/json";
  if (body.json_length) {
    headers.emplace(kHeaderLengthHeader, std::to_string(*body.json_length));
    content_type = "application/octet-stream";
  }
  std::string p = model_path(model, options.version) + "/infer";
  httplib::Response res = checked(impl_->http->Post(impl_->prefix + p, headers, body.body, content_type), url_, p);
  std::optional<size_t> json_length;
  if (res.has_header(kHeaderLengthHeader))
    json_length = parse_header_length(res.get_header_value(kHeaderLengthHeader), res.body.size());
  try {
    return parse_infer_response(res.body, json_length);
  } catch (const Error& e) {
    throw e.with_context(fmt::format("server {}: ", url_));
  }
}

}  // namespace hodu::serving
