// hodugaki serve MODEL... [--host ADDR] [--port N] [--workers N] [--threads N]
//                         [--max-batch N] [--batch-timeout-us T] [--max-queue N]
//                         [--http-threads N] [--max-body-mb N] [--drain-grace-s S] [--tail-from VALUE]
//                         [--engine NAME] [-d DEVICE]
// Serves the models over KServe v2 REST until SIGINT or SIGTERM, then stops
// accepting connections, answers the requests in flight and exits 0. A second
// signal exits at once (status 130).
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "distributed/serving/metrics.h"
#include "distributed/serving/model_repository.h"
#include "distributed/serving/server.h"
#include "runtime/log.h"

namespace hodu::gaki {
namespace {

struct ServeArgs {
  std::vector<std::string> models;
  std::string host = "0.0.0.0";
  int port = 8000;
  int workers = 1;
  int threads = 0;
  int64_t max_batch = 16;
  int64_t batch_timeout_us = 1000;
  int64_t max_queue = 1024;
  int http_threads = 128;
  double max_body_mb = 64;
  std::string engine;
  std::string device = "cpu";
  double drain_grace_s = 0;
  std::string tail_from;
  bool verbose = false;
};

std::string describe(serving::ServedModel& m) {
  const auto& b = m.batcher();
  std::string how = b.batching() ? fmt::format("batches of up to {} rows", b.options().max_batch)
                                 : "one request per run (" + b.batching_note() + ")";
  std::string part = m.tail_from().empty() ? "" : ", the part after '" + m.tail_from() + "'";
  return fmt::format("model '{}' version {} ({}, {}{}): engine {}, {} worker{} x {} thread{}, {}", m.name(), m.version(),
                     m.path(), m.platform(), part, m.session().engine_name(), b.workers(), b.workers() == 1 ? "" : "s",
                     m.session().threads(), m.session().threads() == 1 ? "" : "s", how);
}

int run_serve(const ServeArgs& a) {
  if (a.verbose) set_log_verbosity(1);
  // Request bodies and tensors of a few hundred KiB come and go on many threads. glibc
  // raises its mmap threshold to the largest block freed, after which such blocks stay
  // in per-thread arenas: ResNet-18's server grew 124 -> 305 MB over 70 s of requests.
  // A fixed threshold maps them and gives them back (flat at 181 MB). MALLOC_MMAP_THRESHOLD_
  // in the environment takes precedence.
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  HODU_CHECK(a.max_body_mb > 0, ErrorCode::InvalidArgument, "--max-body-mb must be positive, not {}", a.max_body_mb);
  // Signals are taken by one thread with sigwait: blocked here, before any thread
  // starts, so every thread (HTTP, workers, OpenMP) inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // internal: wakes the signal thread when serving ends otherwise
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  serving::Metrics metrics;
  serving::ModelRepository repository;
  serving::ModelOptions mo;
  mo.workers = a.workers;
  mo.threads = a.threads;
  mo.engine = a.engine;
  mo.device = a.device;
  mo.batching = {a.max_batch, a.batch_timeout_us, a.max_queue};
  for (const auto& arg : a.models) {
    serving::ModelSpec spec = serving::parse_model_spec(arg);
    spec.tail_from = a.tail_from;
    serving::ServedModel& m = repository.add(spec, mo, &metrics);
    std::fprintf(stderr, "hodugaki: %s\n", describe(m).c_str());
  }
  serving::ServerOptions so;
  so.host = a.host;
  so.port = a.port;
  so.http_threads = a.http_threads;
  so.max_body_bytes = static_cast<size_t>(a.max_body_mb * 1024 * 1024);
  serving::InferenceServer server(repository, metrics, so);
  int port = server.bind();

  std::atomic<bool> done{false};
  std::thread signal_thread([&] {
    int seen = 0;
    for (;;) {
      int sig = 0;
      if (sigwait(&signals, &sig) != 0) continue;
      if (done) return;
      if (sig == SIGUSR1) continue;
      if (++seen > 1) {
        std::fprintf(stderr, "hodugaki: stopped before the requests in flight were done\n");
        std::_Exit(130);
      }
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (a.drain_grace_s > 0) {
        // Not ready, still serving: a load balancer has time to take this host out.
        server.mark_unready();
        std::fprintf(stderr, "hodugaki: %s: not ready; serving %.1f s more, then draining (again to stop at once)\n",
                     name, a.drain_grace_s);
        timespec grace{static_cast<time_t>(a.drain_grace_s),
                       static_cast<long>((a.drain_grace_s - static_cast<double>(static_cast<time_t>(a.drain_grace_s))) * 1e9)};
        int again = sigtimedwait(&signals, nullptr, &grace);
        if (again == SIGINT || again == SIGTERM) {
          std::fprintf(stderr, "hodugaki: stopped before the requests in flight were done\n");
          std::_Exit(130);
        }
      }
      std::fprintf(stderr, "hodugaki: %s: finishing the requests in flight (again to stop at once)\n", name);
      server.shutdown();  // closes the listening socket; serve() returns once the requests in flight are answered
    }
  });
  std::string shown_host = a.host == "0.0.0.0" || a.host == "::" ? "localhost" : a.host;
  std::fprintf(stderr, "hodugaki: listening on http://%s:%d (KServe v2: /v2/models/NAME/infer, /metrics)\n",
               shown_host.c_str(), port);
  std::fflush(stderr);
  server.serve();
  repository.stop();  // every queue is empty by now; ends the workers
  done = true;
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();
  std::fprintf(stderr, "hodugaki: stopped\n");
  return 0;
}

}  // namespace

CommandFn add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  app.add_option("model", a->models,
                 "models to serve: PATH, NAME=PATH or NAME:VERSION=PATH (.onnx .hdss .hodu, or a `hodu build` .so); "
                 "NAME defaults to the file name without extension, VERSION to 1")
      ->required();
  app.add_option("--host", a->host, "address to listen on (0.0.0.0: every interface; 127.0.0.1: this host only)")
      ->capture_default_str();
  app.add_option("--port", a->port, "TCP port (0: any free port, printed at start)")->capture_default_str();
  app.add_option("--workers", a->workers, "instances of each model, each running one batch at a time")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  app.add_option("--threads", a->threads, "kernel threads per instance (default: physical cores / workers)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--max-batch", a->max_batch,
                 "dynamic batching: stack concurrent requests along dim 0 up to this many rows (1: off); models "
                 "whose dim 0 is fixed run one request at a time")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--batch-timeout-us", a->batch_timeout_us,
                 "how long the oldest queued request waits for others to join its batch")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{60'000'000}));
  app.add_option("--max-queue", a->max_queue, "queued requests per model beyond which requests get 503")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--http-threads", a->http_threads,
                 "connections served at once (a keep-alive connection holds one while open)")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app.add_option("--max-body-mb", a->max_body_mb, "largest request body, in MiB (after decompression); larger get 413")
      ->capture_default_str();
  app.add_option("--engine", a->engine, "engine: cpu, interp, native (default: the best for the device)");
  app.add_option("-d,--device", a->device, "device: cpu or cuda:N")->capture_default_str();
  app.add_option("--drain-grace-s", a->drain_grace_s,
                 "on SIGINT/SIGTERM, report not ready but keep serving this long before draining (for a load "
                 "balancer's health checks)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--tail-from", a->tail_from,
                 "serve only the part of each model after this value: the tail that `hodu run --remote URL "
                 "--remote-from VALUE` sends VALUE to (edge-cloud offloading)");
  app.add_flag("-v,--verbose", a->verbose, "log engine and kernel decisions");
  app.footer(
      "Endpoints (KServe v2 / Open Inference Protocol, REST): GET /v2, /v2/health/live, /v2/health/ready, "
      "/v2/models/NAME[/versions/V], /v2/models/NAME[/versions/V]/ready; POST /v2/models/NAME[/versions/V]/infer "
      "(JSON tensors or the binary tensor data extension); GET /metrics (Prometheus). SIGINT/SIGTERM: readiness "
      "turns false (--drain-grace-s: while still serving), the socket closes, requests in flight are answered, then "
      "exit 0. See docs/hodugaki.md.");
  return [a] { return run_serve(*a); };
}

}  // namespace hodu::gaki
