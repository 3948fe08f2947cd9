// The HTTP front of hodugaki: the KServe v2 REST protocol (health, server and
// model metadata, infer with JSON tensors and the binary tensor extension) and
// Prometheus metrics, on cpp-httplib. Every failure is an HTTP 4xx/5xx with a
// {"error": "..."} body; nothing a client sends can stop the server.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

namespace hodu::serving {

class Metrics;
class ModelRepository;

struct ServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                          // 0: any free port (bind() says which)
  int http_threads = 128;                   // connections served at once (each keep-alive connection holds one)
  size_t max_body_bytes = 64u << 20;        // larger request bodies get 413 (after decompression too)
  int keep_alive_timeout_s = 5;             // an idle connection is closed after this
};

class InferenceServer {
 public:
  InferenceServer(ModelRepository& models, Metrics& metrics, ServerOptions options);
  ~InferenceServer();
  InferenceServer(const InferenceServer&) = delete;
  InferenceServer& operator=(const InferenceServer&) = delete;

  // Binds the address; returns the port. Io error when it is taken or invalid.
  int bind();
  // Serves until shutdown(); returns once every in-flight request has been answered.
  void serve();
  // From any thread: readiness turns false, the listening socket closes, and
  // serve() returns when the requests being handled are done. Idempotent.
  void shutdown();
  // Readiness turns false while everything is still served: a load balancer
  // stops sending new requests before shutdown() closes the socket.
  void mark_unready() { unready_ = true; }
  bool ready() const { return !unready_ && !draining_; }
  bool draining() const { return draining_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> unready_{false};
  std::atomic<bool> serving_{false};
};

}  // namespace hodu::serving
