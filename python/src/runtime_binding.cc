// hodu.runtime's and hodu.policies' C++ side: engines, devices, memory
// statistics, profiling, and the policy structs of runtime/policy.h (Python
// keeps the fields; C++ parses, validates and normalizes them, one source of truth).
#include <pybind11/stl.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "bindings.h"
#include "core/error.h"
#include "runtime/device_manager.h"
#include "runtime/dispatcher.h"
#include "runtime/memory/memory_manager.h"
#include "runtime/engine.h"
#include "runtime/policy.h"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "runtime/stream_manager.h"

namespace hodu::python {

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::InvalidArgument, "{}: not valid JSON: {}", what, e.what());
  }
}

namespace {

// Parses and validates one policy kind (from_json validates what it parses);
// returns its normalized JSON text.
std::string normalize_policy(const std::string& kind, const std::string& text) {
  if (kind == "kernels") return KernelPolicy::from_json(parse_json(text, "kernel policy")).to_json().dump();
  if (kind == "execution") return ExecutionPolicy::from_json(parse_json(text, "execution policy")).to_json().dump();
  if (kind == "policy") return Policy::from_json(parse_json(text, "policy")).to_json().dump();
  fail(ErrorCode::InvalidArgument, "unknown policy kind '{}' (kernels, execution, policy)", kind);
}

py::dict stat_dict(const Stat& s) {
  return py::dict(py::arg("current") = s.current, py::arg("peak") = s.peak, py::arg("allocated") = s.allocated,
                  py::arg("freed") = s.freed);
}

// torch.cuda.memory_stats-like: {"allocated_bytes": {"all": {...}, "small_pool": {...}, "large_pool": {...}}, ...}
py::dict stats_dict(const MemoryStats& st) {
  auto pools = [](const Stat (&s)[3]) {
    return py::dict(py::arg("all") = stat_dict(s[2]), py::arg("small_pool") = stat_dict(s[0]),
                    py::arg("large_pool") = stat_dict(s[1]));
  };
  py::dict d;
  d["allocated_bytes"] = pools(st.allocated_bytes);
  d["reserved_bytes"] = pools(st.reserved_bytes);
  d["active_bytes"] = pools(st.active_bytes);
  d["segments"] = pools(st.segments);
  d["num_alloc_retries"] = st.num_alloc_retries;
  d["num_ooms"] = st.num_ooms;
  d["num_cache_flushes"] = st.num_cache_flushes;
  d["summary"] = st.summary();
  return d;
}

py::list device_list() {
  const DeviceReport& r = DeviceManager::instance().report();
  py::list out;
  const CpuInfo& cpu = r.cpu;
  py::dict cpu_caps;
  for (const auto& flag : cpu.isa_flags()) cpu_caps[py::str(flag)] = true;
  py::list caches;
  for (const auto& c : cpu.caches)
    caches.append(py::dict(py::arg("level") = c.level, py::arg("type") = c.type, py::arg("size") = c.size_bytes));
  const int64_t ram = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  out.append(py::dict(py::arg("kind") = "cpu", py::arg("index") = 0, py::arg("name") = cpu.model,
                      py::arg("memory") = ram, py::arg("capabilities") = cpu_caps,
                      py::arg("details") = py::dict(py::arg("vendor") = cpu.vendor,
                                                    py::arg("physical_cores") = cpu.physical_cores,
                                                    py::arg("logical_cores") = cpu.logical_cores,
                                                    py::arg("caches") = caches)));
  for (const auto& g : r.cuda) {
    py::dict caps(py::arg("fp16") = g.fp16, py::arg("bf16") = g.bf16, py::arg("tf32") = g.tf32,
                  py::arg("fp8") = g.fp8, py::arg("int4") = g.int4,
                  py::arg("compute_capability") = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor));
    out.append(py::dict(py::arg("kind") = "cuda", py::arg("index") = g.index, py::arg("name") = g.name,
                        py::arg("memory") = g.total_memory, py::arg("capabilities") = caps,
                        py::arg("details") = py::dict(
                            py::arg("free_memory") = g.free_memory, py::arg("sm_count") = g.sm_count,
                            py::arg("runtime_version") = cuda_version_string(r.cuda_runtime_version),
                            py::arg("driver_version") = cuda_version_string(r.cuda_driver_version))));
  }
  return out;
}

// A stream held by Python. Destroying a CpuStream waits for its queued tasks,
// which may need the GIL to run: so the GIL is released around that.
struct PyStream {
  std::shared_ptr<Stream> stream;
  ~PyStream() {
    py::gil_scoped_release nogil;
    stream.reset();
  }
};

struct PyEvent {
  std::shared_ptr<Event> event;
};

// A Python callable that may be copied and dropped on any thread.
std::function<void()> python_task(py::function fn) {
  auto held = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return [held] {
    py::gil_scoped_acquire gil;
    (*held)();
  };
}

}  // namespace

void bind_runtime(py::module_& m) {
  py::class_<PyEvent>(m, "Event")
      .def("query", [](const PyEvent& e) { return e.event->query(); })
      .def("synchronize", [](PyEvent& e) { e.event->synchronize(); }, py::call_guard<py::gil_scoped_release>())
      .def("elapsed_ms", [](const PyEvent& e, const PyEvent& start) { return e.event->elapsed_ms(*start.event); },
           py::arg("start"));
  py::class_<PyStream>(m, "Stream")
      .def(py::init([](const std::string& device) {
             Device d = Device::parse(device);
             DeviceManager::instance().require(d);
             return std::make_unique<PyStream>(PyStream{StreamManager::instance().create_stream(d)});
           }),
           py::arg("device"))
      .def("submit",
           [](PyStream& s, py::function fn) {
             auto* cpu = dynamic_cast<CpuStream*>(s.stream.get());
             HODU_CHECK(cpu, ErrorCode::Unsupported,
                        "Python tasks run only on cpu streams; {} streams take work from engines",
                        s.stream->device().to_string());
             cpu->submit(python_task(std::move(fn)));
           })
      .def("synchronize", [](PyStream& s) { s.stream->synchronize(); }, py::call_guard<py::gil_scoped_release>())
      .def("query", [](const PyStream& s) { return s.stream->query(); })
      .def("record_event",
           [](PyStream& s) {
             PyEvent e{s.stream->create_event()};
             s.stream->record(*e.event);
             return e;
           })
      .def("wait_event", [](PyStream& s, PyEvent& e) { s.stream->wait(*e.event); }, py::arg("event"))
      .def_property_readonly("id", [](const PyStream& s) { return s.stream->id(); })
      .def_property_readonly("device", [](const PyStream& s) { return s.stream->device().to_string(); });

  m.def("devices", &device_list, "Every device (cpu first) as dicts; see hodu.runtime.DeviceInfo.");
  m.def("cuda_status", [] { return DeviceManager::instance().report().cuda_status; },
        "Why there are no CUDA devices (\"\" when there are).");
  m.def(
      "memory_stats",
      [](const std::string& device) {
        Device d = Device::parse(device);
        DeviceManager::instance().require(d);
        return stats_dict(MemoryManager::instance().memory_stats(d));
      },
      py::arg("device"));
  m.def(
      "empty_cache",
      [](const std::string& device) {
        if (!device.empty()) {
          Device d = Device::parse(device);
          DeviceManager::instance().require(d);
          MemoryManager::instance().empty_cache(d);
          return;
        }
        MemoryManager::instance().empty_cache(Device::cpu());
        for (const auto& g : DeviceManager::instance().cuda_devices())
          MemoryManager::instance().empty_cache(Device::cuda(g.index));
      },
      py::arg("device") = "");
  m.def("engines", [] {
    py::list out;
    for (const auto& e : EngineRegistry::instance().all())
      out.append(py::dict(py::arg("name") = e->name(), py::arg("description") = e->description()));
    return out;
  });
  m.def("physical_core_count", &physical_core_count);
  m.def("parse_device", [](const std::string& text) { return Device::parse(text).to_string(); }, py::arg("device"));

  py::class_<Profiler, std::shared_ptr<Profiler>>(m, "Profiler")
      .def(py::init<>())
      .def("start", &Profiler::start)
      .def("stop", &Profiler::stop)
      .def("write_chrome_trace", &Profiler::write_chrome_trace, py::arg("path"), py::call_guard<py::gil_scoped_release>())
      .def("chrome_trace", [](const Profiler& p) { return p.to_chrome_trace().dump(); })
      .def("summary", [](const Profiler& p) {
        py::list out;
        for (const auto& s : p.summary())
          out.append(py::dict(py::arg("op") = s.op, py::arg("count") = s.count, py::arg("total_ms") = s.total_ms,
                              py::arg("percent") = s.percent));
        return out;
      })
      .def("summary_table", &Profiler::summary_table)
      .def_property_readonly("run_ms", &Profiler::run_ms)
      .def_property_readonly("event_count", [](const Profiler& p) { return p.events().size(); })
      .def_property_readonly("is_active", [](const Profiler& p) { return Profiler::active() == &p; });

  m.def("normalize_policy", &normalize_policy, py::arg("kind"), py::arg("json"));
  // Checks a whole policy against the kernel and engine registries (what a
  // Session would refuse); returns the engine it would run on.
  m.def(
      "check_policy",
      [](const std::string& text) {
        Dispatcher d(KernelRegistry::instance(), Policy::from_json(parse_json(text, "policy")));
        return d.choose_engine(EngineRegistry::instance())->name();
      },
      py::arg("json"));
  m.def("kernels", [](const std::string& op) {
    py::list out;
    for (const auto& k : KernelRegistry::instance().all())
      if (op.empty() || k.op == op)
        out.append(py::dict(py::arg("op") = k.op, py::arg("name") = k.name, py::arg("engine") = k.engine,
                            py::arg("device") = k.device == Device::Kind::CUDA ? "cuda" : "cpu",
                            py::arg("priority") = k.priority, py::arg("description") = k.description));
    return out;
  }, py::arg("op") = "");
}

}  // namespace hodu::python
