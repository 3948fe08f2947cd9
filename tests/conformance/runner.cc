// hodu-conformance: runs ONNX's backend test cases (../shared/onnx-tests) on an
// engine and compares with the expected outputs. Each case runs in a forked
// child (a crash or hang in one case cannot take down the run; --no-fork to
// debug). Expected failures come from one reviewed file, each with a reason.
// With --fallbacks FILE the nodes an engine hands to the interpreter's kernels
// are recorded (as `hodu run -v` reports them) and a case fails when one falls
// back with an op and dtype the file does not list.
#include <fnmatch.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compare.h"
#include "engines/interp/interpreter.h"
#include "formats/model_io.h"
#include "formats/onnx_tensor.h"
#include "passes/passes.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"

namespace fs = std::filesystem;
using namespace hodu;

namespace {

struct Options {
  std::string root;
  std::vector<std::string> suites = {"node", "simple", "pytorch-converted", "pytorch-operator"};
  std::string filter = "*";
  std::string engine = "interp";
  std::string expected_file;
  std::string tolerances_file;
  std::string fallbacks_file;  // allowed interpreter fallbacks; empty: not tracked
  bool report_fallbacks = false;
  int opt_level = -1;          // passes::optimize before the engine (-1: the engine's default)
  int min_cases = 0;
  int threads = 1;
  int timeout_s = 120;
  bool fork = true;
  bool verbose = false;
  bool list_failures = false;
};

struct Outcome {
  Outcome() = default;
  Outcome(bool p, std::string m, std::set<std::string> f = {})
      : passed(p), message(std::move(m)), fallbacks(std::move(f)) {}
  bool passed = false;
  std::string message;
  std::set<std::string> fallbacks;  // "Op dtype" of the nodes that ran on the interpreter's kernels
};

// "Op dtype" of a node span that ran on the interpreter's kernel inside another engine; the
// dtype is the first tensor input's ("-" when the node reads none, e.g. SequenceEmpty).
std::string fallback_key(const ProfileEvent& e) {
  return e.op + " " + (e.input_shapes.empty() ? std::string("-") : std::string(dtype_name(e.input_shapes[0].first)));
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail(ErrorCode::Io, "cannot open {}", p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "key  # reason" lines (the reason is required): key → reason. `what` names an entry in errors.
std::map<std::string, std::string> read_reasoned(const std::string& path, const char* what,
                                                 std::map<std::string, int>* lines = nullptr) {
  std::map<std::string, std::string> out;
  std::ifstream f(path);
  if (!f) fail(ErrorCode::Io, "cannot open {} file {}", what, path);
  std::string line;
  int ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    auto s = line.find_first_not_of(" \t");
    if (s == std::string::npos || line[s] == '#') continue;
    auto hash = line.find('#');
    std::string key = line.substr(s, hash == std::string::npos ? std::string::npos : hash - s);
    key.erase(key.find_last_not_of(" \t") + 1);
    std::string reason = hash == std::string::npos ? "" : line.substr(hash + 1);
    if (reason.find_first_not_of(" \t") == std::string::npos)
      fail(ErrorCode::InvalidArgument, "{}:{}: {} '{}' has no reason", path, ln, what, key);
    out[key] = reason.substr(reason.find_first_not_of(" \t"));
    if (lines) (*lines)[key] = ln;
  }
  return out;
}

// "suite/case  # reason" lines.
std::map<std::string, std::string> read_expected(const std::string& path) {
  if (path.empty()) return {};
  return read_reasoned(path, "expected failure");
}

// "Op dtype  # reason" lines: the interpreter fallbacks a run accepts (key "Op dtype").
std::map<std::string, std::string> read_fallbacks(const std::string& path) {
  std::map<std::string, int> lines;
  std::map<std::string, std::string> out;
  for (auto& [key, reason] : read_reasoned(path, "allowed fallback", &lines)) {
    std::istringstream is(key);
    std::string op, dtype, extra;
    is >> op >> dtype;
    if (dtype.empty() || (is >> extra))
      fail(ErrorCode::InvalidArgument, "{}:{}: expected 'Op dtype  # reason', got '{}'", path, lines[key], key);
    out[op + " " + dtype] = std::move(reason);
  }
  return out;
}

// "suite/case rtol atol # reason"
std::map<std::string, conformance::Tolerance> read_tolerances(const std::string& path) {
  std::map<std::string, conformance::Tolerance> out;
  if (path.empty()) return out;
  std::ifstream f(path);
  if (!f) fail(ErrorCode::Io, "cannot open tolerances file {}", path);
  std::string line;
  int ln = 0;
  while (std::getline(f, line)) {
    ++ln;
    auto s = line.find_first_not_of(" \t");
    if (s == std::string::npos || line[s] == '#') continue;
    std::istringstream is(line);
    std::string key;
    conformance::Tolerance t;
    is >> key >> t.rtol >> t.atol;
    if (!is || line.find('#') == std::string::npos)
      fail(ErrorCode::InvalidArgument, "{}:{}: expected 'suite/case rtol atol # reason'", path, ln);
    out[key] = t;
  }
  return out;
}

Outcome run_case(const fs::path& dir, const Options& opt, const conformance::Tolerance& tol) {
  Outcome r;
  Model model = load_model((dir / "model.onnx").string());
  std::vector<const Value*> graph_inputs;
  for (const auto& in : model.graph.inputs)
    if (!model.graph.initializer(in.name)) graph_inputs.push_back(&in);

  interp::InterpreterOptions io;
  io.threads = opt.threads;
  // interp directly (the oracle); any other engine through the EngineRegistry.
  std::unique_ptr<interp::Interpreter> interpreter;
  std::unique_ptr<Executable> executable;
  if (opt.engine == "interp") {
    interpreter = std::make_unique<interp::Interpreter>(model, io);
  } else {
    EngineOptions eo;
    eo.threads = opt.threads;
    if (opt.opt_level >= 0) passes::optimize(model, {opt.opt_level, {}});
    executable = EngineRegistry::instance().find(opt.engine)->prepare(model, eo);
  }

  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {false, "no test_data_set_* folder"};

  for (const auto& set : sets) {
    std::map<std::string, RuntimeValue> feeds;
    for (size_t i = 0;; ++i) {
      fs::path p = set / fmt::format("input_{}.pb", i);
      if (!fs::exists(p)) break;
      if (i >= graph_inputs.size())
        return {false, fmt::format("{}: more input files than model inputs", set.filename().string())};
      feeds[graph_inputs[i]->name] = read_value_pb(read_file(p), &graph_inputs[i]->type, p.string());
    }
    Profiler profiler;
    if (opt.report_fallbacks && executable) profiler.start();
    auto outputs = interpreter ? interpreter->run(feeds) : executable->run(feeds);
    profiler.stop();
    for (const auto& e : profiler.events())
      if (e.category == "Node" && e.kernel == "interp" && e.engine != "interp") r.fallbacks.insert(fallback_key(e));
    for (size_t i = 0;; ++i) {
      fs::path p = set / fmt::format("output_{}.pb", i);
      if (!fs::exists(p)) break;
      if (i >= outputs.size()) return {false, "fewer outputs than expected"};
      const ValueType* vt = &model.graph.outputs[i].type;
      RuntimeValue expected = read_value_pb(read_file(p), vt, p.string());
      std::string msg = conformance::compare_values(outputs[i], expected, tol);
      if (!msg.empty())
        return {false, fmt::format("{} output {} ('{}'): {}", set.filename().string(), i,
                                   model.graph.outputs[i].name, msg)};
    }
  }
  r.passed = true;
  return r;
}

Outcome run_case_guarded(const fs::path& dir, const Options& opt, const conformance::Tolerance& tol) {
  try {
    return run_case(dir, opt, tol);
  } catch (const Error& e) {
    return {false, fmt::format("error [{}]: {}", error_code_name(e.code()), e.what())};
  } catch (const std::exception& e) {
    return {false, fmt::format("exception: {}", e.what())};
  }
}

// Runs the case in a child process with a time limit; the child writes
// "P" or "F<message>" to a pipe.
Outcome run_case_forked(const fs::path& dir, const Options& opt, const conformance::Tolerance& tol) {
  int fds[2];
  if (pipe(fds) != 0) return run_case_guarded(dir, opt, tol);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Outcome o = run_case_guarded(dir, opt, tol);
    std::string msg = (o.passed ? "P" : "F") + o.message;
    for (const auto& f : o.fallbacks) msg += "\x1f" + f;
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t w = write(fds[1], msg.data() + off, msg.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string data;
  char buf[4096];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
  bool timed_out = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) { timed_out = true; break; }
    pollfd p{fds[0], POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (pr < 0) break;
    if (pr == 0) continue;
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) return {false, fmt::format("timed out after {} s", opt.timeout_s)};
  if (WIFSIGNALED(status)) return {false, fmt::format("crashed with signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)))};
  if (data.empty()) return {false, "child produced no result"};
  Outcome o{data[0] == 'P', data.substr(1), {}};
  auto sep = o.message.find('\x1f');
  if (sep != std::string::npos) {
    std::string rest = o.message.substr(sep + 1);
    o.message.resize(sep);
    std::istringstream is(rest);
    for (std::string f; std::getline(is, f, '\x1f');) o.fallbacks.insert(f);
  }
  return o;
}

void usage() {
  std::puts(
      "usage: hodu-conformance [options]\n"
      "  --root DIR          onnx-tests folder (default: $HODU_ONNX_TESTS or $HODU_SOURCE_DIR/../shared/onnx-tests)\n"
      "  --suite NAME        node | simple | pytorch-converted | pytorch-operator (repeatable; default all)\n"
      "  --filter GLOB       only cases whose name matches (e.g. 'test_conv*')\n"
      "  --engine NAME       engine to test (default interp)\n"
      "  --expected FILE     expected failures: 'suite/case  # reason' per line\n"
      "  --tolerances FILE   per-case tolerances: 'suite/case rtol atol # reason'\n"
      "  --opt-level N       optimize the graph at level N (0-3) before the engine (default: the engine's)\n"
      "  --fallbacks FILE    allowed interpreter fallbacks of a non-interp engine: 'Op dtype  # reason' per\n"
      "                      line; a case whose node falls back with an op and dtype not listed fails, and\n"
      "                      a listed one no case uses is reported stale\n"
      "  --report-fallbacks  print each op and dtype that fell back, with its number of cases\n"
      "  --min-cases N       fail when fewer cases are found (keeps the corpus from shrinking)\n"
      "  --threads N         engine threads (default 1)\n"
      "  --timeout S         per-case time limit in seconds (default 120)\n"
      "  --no-fork           run cases in this process (debugging)\n"
      "  --list-failures     print failing cases as expected-failure lines\n"
      "  -v                  print every case and each failure's message");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  bool suites_given = false;
  std::vector<std::string> suites;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::fprintf(stderr, "error: %s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--root") opt.root = next();
    else if (a == "--suite") { suites.push_back(next()); suites_given = true; }
    else if (a == "--filter") opt.filter = next();
    else if (a == "--engine") opt.engine = next();
    else if (a == "--expected") opt.expected_file = next();
    else if (a == "--tolerances") opt.tolerances_file = next();
    else if (a == "--fallbacks") opt.fallbacks_file = next();
    else if (a == "--report-fallbacks") opt.report_fallbacks = true;
    else if (a == "--opt-level") opt.opt_level = std::atoi(next().c_str());
    else if (a == "--min-cases") opt.min_cases = std::atoi(next().c_str());
    else if (a == "--threads") opt.threads = std::atoi(next().c_str());
    else if (a == "--timeout") opt.timeout_s = std::atoi(next().c_str());
    else if (a == "--no-fork") opt.fork = false;
    else if (a == "--list-failures") opt.list_failures = true;
    else if (a == "-v" || a == "--verbose") opt.verbose = true;
    else if (a == "-h" || a == "--help") { usage(); return 0; }
    else { std::fprintf(stderr, "error: unknown option '%s'\n", a.c_str()); usage(); return 2; }
  }
  if (suites_given) opt.suites = suites;
  if (!opt.fallbacks_file.empty()) opt.report_fallbacks = true;
  if (opt.report_fallbacks && opt.engine == "interp") {
    std::fprintf(stderr, "error: --fallbacks and --report-fallbacks need an engine other than interp\n");
    return 2;
  }
  if (opt.opt_level > 3) {
    std::fprintf(stderr, "error: --opt-level must be 0 to 3\n");
    return 2;
  }
  if (opt.engine != "interp" && !EngineRegistry::instance().find(opt.engine)) {
    std::string names;
    for (const auto& e : EngineRegistry::instance().all()) names += (names.empty() ? "" : ", ") + e->name();
    std::fprintf(stderr, "error: engine '%s' is not available (available: %s)\n", opt.engine.c_str(), names.c_str());
    return 2;
  }
  if (opt.root.empty()) {
    if (const char* r = std::getenv("HODU_ONNX_TESTS")) opt.root = r;
    else if (const char* s = std::getenv("HODU_SOURCE_DIR")) opt.root = std::string(s) + "/../shared/onnx-tests";
    else opt.root = "../shared/onnx-tests";
  }
  if (!fs::is_directory(opt.root)) {
    std::fprintf(stderr, "error: onnx-tests folder '%s' not found (use --root)\n", opt.root.c_str());
    return 2;
  }

  std::map<std::string, std::string> expected;
  std::map<std::string, conformance::Tolerance> tolerances;
  std::map<std::string, std::string> allowed_fallbacks;
  try {
    if (!opt.fallbacks_file.empty()) allowed_fallbacks = read_fallbacks(opt.fallbacks_file);
    expected = read_expected(opt.expected_file);
    tolerances = read_tolerances(opt.tolerances_file);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }

  struct Counts { int passed = 0, failed = 0, xfail = 0, xpass = 0; };
  std::map<std::string, Counts> counts;
  Counts total;
  int found = 0;
  std::vector<std::string> unexpected_failures, unexpected_passes, failure_lines;
  std::set<std::string> seen;
  std::map<std::string, std::vector<std::string>> fallback_cases;  // "Op dtype" → cases
  auto t0 = std::chrono::steady_clock::now();

  for (const auto& suite : opt.suites) {
    fs::path sdir = fs::path(opt.root) / suite;
    if (!fs::is_directory(sdir)) {
      std::fprintf(stderr, "error: suite folder %s not found\n", sdir.c_str());
      return 2;
    }
    std::vector<fs::path> cases;
    for (const auto& e : fs::directory_iterator(sdir))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx")) cases.push_back(e.path());
    std::sort(cases.begin(), cases.end());
    Counts& c = counts[suite];
    for (const auto& dir : cases) {
      std::string name = dir.filename().string();
      ++found;
      if (fnmatch(opt.filter.c_str(), name.c_str(), 0) != 0) continue;
      std::string key = suite + "/" + name;
      seen.insert(key);
      conformance::Tolerance tol;
      if (auto it = tolerances.find(key); it != tolerances.end()) tol = it->second;
      Outcome o = opt.fork ? run_case_forked(dir, opt, tol) : run_case_guarded(dir, opt, tol);
      std::string refused;
      for (const auto& f : o.fallbacks) {
        fallback_cases[f].push_back(key);
        if (!opt.fallbacks_file.empty() && !allowed_fallbacks.count(f)) refused += (refused.empty() ? "" : ", ") + f;
      }
      if (!refused.empty() && o.passed)
        o = {false, "ran on the interpreter's kernel (not in the fallbacks file): " + refused, o.fallbacks};
      bool is_expected_fail = expected.count(key) > 0;
      if (o.passed && !is_expected_fail) ++c.passed;
      else if (o.passed) { ++c.xpass; unexpected_passes.push_back(key); }
      else if (is_expected_fail) ++c.xfail;
      else {
        ++c.failed;
        unexpected_failures.push_back(key + ": " + o.message);
        failure_lines.push_back(key + "  # " + o.message.substr(0, 160));
      }
      if (opt.verbose)
        std::printf("%-70s %s%s%s\n", key.c_str(), o.passed ? "PASS" : (is_expected_fail ? "XFAIL" : "FAIL"),
                    o.passed ? "" : "  ", o.passed ? "" : o.message.substr(0, 400).c_str());
    }
    total.passed += c.passed; total.failed += c.failed; total.xfail += c.xfail; total.xpass += c.xpass;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (!opt.verbose)
    for (const auto& f : unexpected_failures) std::printf("FAIL %s\n", f.substr(0, 400).c_str());
  for (const auto& p : unexpected_passes)
    std::printf("UNEXPECTED PASS %s (remove it from the expected-failures file)\n", p.c_str());
  if (opt.list_failures)
    for (const auto& l : failure_lines) std::printf("%s\n", l.c_str());
  // Expected failures that name no existing case are stale.
  int stale = 0;
  if (opt.filter == "*" && !suites_given)
    for (const auto& [k, v] : expected)
      if (!seen.count(k)) { std::printf("STALE expected failure %s (no such case)\n", k.c_str()); ++stale; }

  if (opt.report_fallbacks) {
    std::printf("\ninterpreter fallbacks (op dtype: cases)%s\n", fallback_cases.empty() ? ": none" : "");
    for (const auto& [f, cases] : fallback_cases)
      std::printf("  %-40s %4zu  e.g. %s\n", f.c_str(), cases.size(), cases.front().c_str());
  }
  if (!opt.fallbacks_file.empty() && opt.filter == "*" && !suites_given)
    for (const auto& [f, reason] : allowed_fallbacks)
      if (!fallback_cases.count(f)) {
        std::printf("STALE allowed fallback '%s' (no case falls back with it: remove it from the fallbacks file)\n",
                    f.c_str());
        ++stale;
      }

  std::printf("\nengine %s, %d threads, %.1f s\n", opt.engine.c_str(), opt.threads, secs);
  std::printf("%-20s %8s %8s %8s %8s\n", "suite", "passed", "failed", "xfail", "xpass");
  for (const auto& [s, c] : counts)
    std::printf("%-20s %8d %8d %8d %8d\n", s.c_str(), c.passed, c.failed, c.xfail, c.xpass);
  std::printf("%-20s %8d %8d %8d %8d\n", "total", total.passed, total.failed, total.xfail, total.xpass);
  std::printf("conformance: %d passed, %d failed, %d expected-fail\n", total.passed, total.failed, total.xfail);
  bool ok = total.failed == 0 && total.xpass == 0 && stale == 0;
  if (opt.min_cases > 0 && found < opt.min_cases) {
    std::printf("error: found %d cases, fewer than the floor of %d\n", found, opt.min_cases);
    ok = false;
  }
  return ok ? 0 : 1;
}
