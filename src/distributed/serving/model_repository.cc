#include "distributed/serving/model_repository.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "distributed/edge/model_split.h"
#include "distributed/serving/datatype.h"
#include "distributed/serving/metrics.h"
#include "engines/native/native_engine.h"

namespace hodu::serving {
namespace {

bool valid_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

void check_name(const std::string& s, const char* what, const std::string& arg) {
  HODU_CHECK(!s.empty() && std::all_of(s.begin(), s.end(), valid_name_char) && s != "." && s != "..",
             ErrorCode::InvalidArgument, "model '{}': {} '{}' must be letters, digits, '_', '-' or '.'", arg, what, s);
}

bool is_number(const std::string& s) {
  return !s.empty() && s.size() < 19 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Dims of a metadata tensor: -1 for a dynamic dim (and [-1] for an unknown rank).
nlohmann::ordered_json metadata_tensor(const Value& v) {
  nlohmann::ordered_json t;
  t["name"] = v.name;
  t["datatype"] = v.type.kind == ValueType::Kind::Tensor ? metadata_datatype(v.type.dtype) : v.type.to_string();
  auto shape = nlohmann::json::array();
  if (!v.type.is_tensor() || !v.type.shape.rank_known()) shape.push_back(-1);
  else
    for (const auto& d : v.type.shape.dims()) shape.push_back(d.is_known() ? d.value : -1);
  t["shape"] = shape;
  return t;
}

}  // namespace

bool version_less(const std::string& a, const std::string& b) {
  if (is_number(a) && is_number(b)) return std::stoll(a) < std::stoll(b);
  return a < b;
}

ModelSpec parse_model_spec(const std::string& arg) {
  ModelSpec spec;
  auto eq = arg.find('=');
  if (eq != std::string::npos && !std::filesystem::exists(arg)) {
    std::string head = arg.substr(0, eq);
    spec.path = arg.substr(eq + 1);
    auto colon = head.find(':');
    spec.name = head.substr(0, colon);
    if (colon != std::string::npos) spec.version = head.substr(colon + 1);
  } else {
    spec.path = arg;
  }
  HODU_CHECK(!spec.path.empty(), ErrorCode::InvalidArgument, "model '{}': missing the file path", arg);
  HODU_CHECK(std::filesystem::exists(spec.path), ErrorCode::Io, "model '{}': file '{}' does not exist", arg, spec.path);
  if (spec.name.empty()) {
    spec.name = std::filesystem::path(spec.path).stem().string();
    for (auto& c : spec.name)
      if (!valid_name_char(c)) c = '_';
  }
  if (spec.version.empty()) spec.version = "1";
  check_name(spec.name, "name", arg);
  check_name(spec.version, "version", arg);
  return spec;
}

std::unique_ptr<Session> open_session(const std::string& path, const SessionOptions& options) {
  if (native::is_native_library(path)) {
    SessionOptions o = options;
    if (o.engine.empty()) o.engine = "native";
    return Session::from_model(native::describe_library(path), o);
  }
  return Session::load(path, options);
}

ServedModel::ServedModel(ModelSpec spec, const ModelOptions& options, Metrics* metrics) : spec_(std::move(spec)) {
  HODU_CHECK(options.workers >= 1, ErrorCode::InvalidArgument, "workers must be at least 1, not {}", options.workers);
  SessionOptions so;
  so.engine = options.engine;
  so.device = Device::parse(options.device);
  so.threads = options.threads > 0 ? options.threads : std::max(1, physical_core_count() / options.workers);
  std::vector<std::unique_ptr<Session>> instances;
  try {
    // --tail-from: the model is read and cut once; each worker runs its own copy of the tail.
    std::optional<Model> tail;
    if (!spec_.tail_from.empty()) {
      HODU_CHECK(!native::is_native_library(spec_.path), ErrorCode::Unsupported,
                 "--tail-from cuts a model graph; a compiled library has none");
      tail = edge::split_model(load_model(spec_.path), spec_.tail_from).tail;
    }
    for (int i = 0; i < options.workers; ++i)
      instances.push_back(tail ? Session::from_model(*tail, so) : open_session(spec_.path, so));
  } catch (const Error& e) {
    throw e.with_context(fmt::format("model '{}' ({}): ", spec_.name, spec_.path));
  }
  if (metrics) metrics->add_model(spec_.name, spec_.version);
  batcher_ = std::make_unique<Batcher>(spec_.name, spec_.version, std::move(instances), options.batching, metrics);
}

std::string ServedModel::platform() const {
  if (native::is_native_library(spec_.path)) return "hodu_library";
  std::string ext = std::filesystem::path(spec_.path).extension().string();
  if (ext == ".hodu") return "hodu_hoduscript";
  if (ext.size() > 1) return "hodu_" + ext.substr(1);
  return "hodu";
}

ServedModel& ModelRepository::add(const ModelSpec& spec, const ModelOptions& options, Metrics* metrics) {
  HODU_CHECK(!find(spec.name, spec.version) || find(spec.name, spec.version)->version() != spec.version,
             ErrorCode::InvalidArgument, "model '{}' version {} is given twice", spec.name, spec.version);
  models_.push_back(std::make_unique<ServedModel>(spec, options, metrics));
  return *models_.back();
}

ServedModel* ModelRepository::find(const std::string& name, const std::string& version) const {
  ServedModel* best = nullptr;
  for (const auto& m : models_) {
    if (m->name() != name) continue;
    if (!version.empty()) {
      if (m->version() == version) return m.get();
    } else if (!best || version_less(best->version(), m->version())) {
      best = m.get();
    }
  }
  return best;
}

std::vector<std::string> ModelRepository::versions(const std::string& name) const {
  std::vector<std::string> v;
  for (const auto& m : models_)
    if (m->name() == name) v.push_back(m->version());
  std::sort(v.begin(), v.end(), version_less);
  return v;
}

std::vector<ServedModel*> ModelRepository::models() const {
  std::vector<ServedModel*> out;
  for (const auto& m : models_) out.push_back(m.get());
  return out;
}

std::string ModelRepository::metadata_json(const ServedModel& model) const {
  nlohmann::ordered_json j;
  j["name"] = model.name();
  j["versions"] = versions(model.name());
  j["platform"] = model.platform();
  j["inputs"] = nlohmann::json::array();
  for (const auto& in : model.session().inputs()) j["inputs"].push_back(metadata_tensor(in));
  j["outputs"] = nlohmann::json::array();
  for (const auto& out : model.session().outputs()) j["outputs"].push_back(metadata_tensor(out));
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ModelRepository::stop() {
  for (auto& m : models_) m->batcher().stop();
}

}  // namespace hodu::serving
