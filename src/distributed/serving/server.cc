#include "distributed/serving/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <new>
#include <thread>

#include "core/error.h"
#include "distributed/serving/datatype.h"
#include "distributed/serving/infer_protocol.h"
#include "distributed/serving/metrics.h"
#include "distributed/serving/model_repository.h"

#ifndef HODU_VERSION
#define HODU_VERSION "0"
#endif

namespace hodu::serving {
namespace {

using Clock = std::chrono::steady_clock;

// An HTTP status with its message, thrown inside handlers.
struct HttpError {
  int status;
  std::string message;
};

void reply_json(httplib::Response& res, int status, std::string body) {
  res.status = status;
  res.body = std::move(body);
  res.set_header("Content-Type", "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  reply_json(res, status, error_json(message));
}

int status_of(const Error& e) {
  if (dynamic_cast<const Unavailable*>(&e)) return 503;
  switch (e.code()) {
    case ErrorCode::InvalidArgument:
    case ErrorCode::Unsupported: return 400;
    case ErrorCode::OutOfMemory: return 507;
    default: return 500;
  }
}

std::string list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s.empty() ? "none" : s;
}

// Counts a request as in flight for its lifetime.
struct Inflight {
  Metrics& m;
  explicit Inflight(Metrics& metrics) : m(metrics) { m.inflight(1); }
  ~Inflight() { m.inflight(-1); }
};

}  // namespace

struct InferenceServer::Impl {
  ModelRepository& models;
  Metrics& metrics;
  ServerOptions options;
  httplib::Server http;
  int listen_fd = -1;
  InferenceServer* owner = nullptr;

  Impl(ModelRepository& m, Metrics& me, ServerOptions o) : models(m), metrics(me), options(std::move(o)) {}

  ServedModel& find_model(const httplib::Request& req) {
    std::string name = req.matches[1];
    std::string version = req.matches.size() > 2 ? std::string(req.matches[2]) : "";
    if (ServedModel* m = models.find(name, version)) return *m;
    auto versions = models.versions(name);
    if (versions.empty()) {
      std::vector<std::string> names;
      for (auto* m : models.models())
        if (std::find(names.begin(), names.end(), m->name()) == names.end()) names.push_back(m->name());
      throw HttpError{404, fmt::format("unknown model '{}' (models: {})", name, list(names))};
    }
    throw HttpError{404, fmt::format("model '{}' has no version '{}' (versions: {})", name, version, list(versions))};
  }

  // Reads the body, decompressed, refusing more than max_body_bytes.
  std::string read_body(const httplib::Request& req, const httplib::ContentReader& reader) {
    std::string body;
    size_t declared = req.get_header_value<uint64_t>("Content-Length");
    bool too_large = declared > options.max_body_bytes;
    if (!too_large) body.reserve(declared);
    bool ok = !too_large && reader([&](const char* data, size_t n) {
      if (body.size() + n > options.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, n);
      return true;
    });
    if (too_large)
      throw HttpError{413, fmt::format("the request body is larger than the server's limit of {} bytes (--max-body-mb)",
                                       options.max_body_bytes)};
    if (!ok) throw HttpError{400, "the request body could not be read (truncated, or a bad Content-Encoding)"};
    return body;
  }

  void infer(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
    auto start = Clock::now();
    Inflight inflight(metrics);
    std::string model_name, version;
    int status = 200;
    try {
      // The body is read first, whatever the answer: bytes left unread would be taken
      // for the next request on this keep-alive connection.
      std::string body = read_body(req, reader);
      ServedModel& model = find_model(req);
      model_name = model.name();
      version = model.version();
      if (owner->draining()) throw HttpError{503, "the server is shutting down"};
      std::optional<size_t> json_length;
      if (req.has_header(kHeaderLengthHeader))
        json_length = parse_header_length(req.get_header_value(kHeaderLengthHeader), body.size());
      InferRequest request = parse_infer_request(body, json_length);
      body = std::string();
      auto feeds = check_request(model, request);
      auto outputs = model.batcher().infer(std::move(feeds));
      std::vector<ResponseOutput> selected;
      if (request.outputs.empty()) {
        for (auto& o : outputs) selected.push_back({o.name, tensor_of(o), request.binary_data_output});
      } else {
        for (const auto& ro : request.outputs)
          for (auto& o : outputs)
            if (o.name == ro.name) selected.push_back({o.name, tensor_of(o), request.output_binary(ro)});
      }
      EncodedBody encoded = encode_infer_response(model.name(), model.version(), request.id, selected);
      res.status = 200;
      res.body = std::move(encoded.body);
      if (encoded.json_length) {
        res.set_header("Content-Type", "application/octet-stream");
        res.set_header(kHeaderLengthHeader, std::to_string(*encoded.json_length));
      } else {
        res.set_header("Content-Type", "application/json");
      }
    } catch (const HttpError& e) {
      status = e.status;
      reply_error(res, e.status, e.message);
    } catch (const Error& e) {
      status = status_of(e);
      reply_error(res, status, e.what());
    } catch (const std::bad_alloc&) {
      status = 507;
      reply_error(res, status, "out of memory");
    } catch (const std::exception& e) {
      status = 500;
      reply_error(res, status, std::string("internal error: ") + e.what());
    }
    if (status == 413) res.set_header("Connection", "close");  // the rest of the body was not read
    metrics.request_done(model_name, version, status, std::chrono::duration<double>(Clock::now() - start).count());
  }

  static Tensor tensor_of(const NamedValue& o) {
    HODU_CHECK(o.value.is_tensor(), ErrorCode::Unsupported,
               "output '{}' is not a tensor; the v2 protocol carries tensors only", o.name);
    return o.value.tensor;
  }

  // The request's inputs as feeds, checked against the model (names, datatypes,
  // shapes), and its requested outputs against the model's outputs.
  std::map<std::string, RuntimeValue> check_request(ServedModel& model, const InferRequest& request) {
    const Session& s = model.session();
    std::map<std::string, RuntimeValue> feeds;
    std::vector<std::string> input_names, output_names;
    for (const auto& in : s.inputs()) input_names.push_back(in.name);
    for (const auto& out : s.outputs()) output_names.push_back(out.name);
    for (const auto& [name, tensor] : request.inputs) {
      const Value* in = nullptr;
      for (const auto& v : s.inputs())
        if (v.name == name) in = &v;
      if (!in)
        throw HttpError{400, fmt::format("model '{}' has no input '{}' (inputs: {})", model.name(), name,
                                         list(input_names))};
      if (in->type.is_tensor() && in->type.dtype != DType::Undefined && in->type.dtype != tensor.dtype())
        throw HttpError{400, fmt::format("input '{}': datatype {} does not match the model's {}", name,
                                         metadata_datatype(tensor.dtype()), metadata_datatype(in->type.dtype))};
      // oneDNN's primitive creation divides by zero on an empty dim (SIGFPE in the cpu engine's
      // MatMul): refused here, whatever the model, rather than taking the server down.
      if (tensor.numel() == 0)
        throw HttpError{400, fmt::format("input '{}' has no elements (shape {}): empty tensors are not served", name,
                                         tensor.shape_string())};
      feeds[name] = RuntimeValue(tensor);
    }
    for (const auto& ro : request.outputs)
      if (std::find(output_names.begin(), output_names.end(), ro.name) == output_names.end())
        throw HttpError{400, fmt::format("model '{}' has no output '{}' (outputs: {})", model.name(), ro.name,
                                         list(output_names))};
    s.check_inputs(feeds);  // missing inputs, rank, fixed dims, symbolic dims bound consistently
    return feeds;
  }

  void routes() {
    auto guarded = [this](auto&& fn) {
      return [this, fn](const httplib::Request& req, httplib::Response& res) {
        try {
          fn(req, res);
        } catch (const HttpError& e) {
          reply_error(res, e.status, e.message);
        } catch (const Error& e) {
          reply_error(res, status_of(e), e.what());
        } catch (const std::exception& e) {
          reply_error(res, 500, std::string("internal error: ") + e.what());
        }
      };
    };
    // Health: the status says it (200 true, 4xx false), as the protocol wants; the body
    // repeats it as JSON because KServe's own client reads {"live"} / {"ready"}.
    http.Get("/v2/health/live", guarded([](const httplib::Request&, httplib::Response& res) {
               reply_json(res, 200, "{\"live\":true}");
             }));
    http.Get("/v2/health/ready", guarded([this](const httplib::Request&, httplib::Response& res) {
               bool ready = owner->ready();
               reply_json(res, ready ? 200 : 400, ready ? "{\"ready\":true}" : "{\"ready\":false}");
             }));
    http.Get("/v2", guarded([](const httplib::Request&, httplib::Response& res) {
               reply_json(res, 200,
                          fmt::format("{{\"name\":\"hodugaki\",\"version\":\"{}\",\"extensions\":[\"binary_tensor_data\"]}}",
                                      HODU_VERSION));
             }));
    const std::string model = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
    http.Get(model + "/ready", guarded([this](const httplib::Request& req, httplib::Response& res) {
               ServedModel& m = find_model(req);
               bool ready = owner->ready();
               reply_json(res, ready ? 200 : 400,
                          fmt::format("{{\"name\":{},\"ready\":{}}}", nlohmann::json(m.name()).dump(), ready));
             }));
    http.Get(model, guarded([this](const httplib::Request& req, httplib::Response& res) {
               reply_json(res, 200, models.metadata_json(find_model(req)));
             }));
    http.Post(model + "/infer", [this](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& reader) { infer(req, res, reader); });
    http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
               res.status = 200;
               res.body = metrics.render();
               res.set_header("Content-Type", "text/plain; version=0.0.4");
             }));
    // 404s, 405s, 413s from the library itself get the protocol's error object too.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string what = res.status == 404   ? fmt::format("no such endpoint: {} {}", req.method, req.path)
                         : res.status == 413 ? std::string("the request body is larger than the server's limit")
                                             : fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
      reply_error(res, res.status, what);
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what += std::string(": ") + e.what();
      } catch (...) {
      }
      reply_error(res, 500, what);
    });
  }
};

InferenceServer::InferenceServer(ModelRepository& models, Metrics& metrics, ServerOptions options)
    : impl_(std::make_unique<Impl>(models, metrics, std::move(options))) {
  impl_->owner = this;
  HODU_CHECK(impl_->options.http_threads >= 1, ErrorCode::InvalidArgument, "http threads must be at least 1, not {}",
             impl_->options.http_threads);
  auto& http = impl_->http;
  size_t threads = static_cast<size_t>(impl_->options.http_threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(impl_->options.max_body_bytes);
  http.set_keep_alive_max_count(100000);
  http.set_keep_alive_timeout(impl_->options.keep_alive_timeout_s);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_tcp_nodelay(true);
  // SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which would let a second
  // server bind the same port and take half its traffic); the socket is kept to
  // raise the listen backlog, which httplib fixes at 5.
  http.set_socket_options([this](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    impl_->listen_fd = sock;
  });
  impl_->routes();
}

InferenceServer::~InferenceServer() { shutdown(); }

int InferenceServer::bind() {
  auto& o = impl_->options;
  HODU_CHECK(o.port >= 0 && o.port <= 65535, ErrorCode::InvalidArgument, "port {} is not between 0 and 65535", o.port);
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    HODU_CHECK(port > 0, ErrorCode::Io, "cannot listen on {}: no free port", o.host);
  } else {
    HODU_CHECK(impl_->http.bind_to_port(o.host, port), ErrorCode::Io,
               "cannot listen on {}:{} (the port is taken, or the address is not this host's)", o.host, port);
  }
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, SOMAXCONN);
  o.port = port;
  return port;
}

void InferenceServer::serve() {
  serving_ = true;
  if (!draining_) impl_->http.listen_after_bind();
  serving_ = false;
}

void InferenceServer::shutdown() {
  draining_ = true;
  // serve() may be between its check of draining_ and the library's listen loop,
  // where stop() does nothing yet: wait for the loop to start, then stop it.
  while (serving_ && !impl_->http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  impl_->http.stop();
}

}  // namespace hodu::serving
