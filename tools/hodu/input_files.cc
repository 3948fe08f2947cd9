#include "input_files.h"

#include <filesystem>

#include "core/error.h"
#include "formats/tensor_io.h"

namespace hodu::cli {

std::vector<std::string> split_comma_list(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

InputFile read_input_spec(const std::string& spec) {
  InputFile f;
  auto eq = spec.find('=');
  // "NAME=PATH" unless the whole spec is an existing file (paths may contain '=').
  if (eq != std::string::npos && !std::filesystem::exists(spec)) {
    f.name = spec.substr(0, eq);
    f.path = spec.substr(eq + 1);
  } else {
    f.path = spec;
  }
  HODU_CHECK(!f.path.empty(), ErrorCode::InvalidArgument, "-i {}: missing file path", spec);
  HODU_CHECK(std::filesystem::exists(f.path), ErrorCode::Io, "-i {}: file '{}' does not exist", spec, f.path);
  f.tensors = read_tensor_file(f.path);
  HODU_CHECK(!f.tensors.empty(), ErrorCode::InvalidArgument, "-i {}: '{}' holds no tensor", spec, f.path);
  return f;
}

std::map<std::string, RuntimeValue> load_inputs(const std::vector<std::string>& specs, const Session& session) {
  std::map<std::string, RuntimeValue> feeds;
  auto is_input = [&](const std::string& n) {
    for (const auto& in : session.inputs())
      if (in.name == n) return true;
    return false;
  };
  auto input_names = [&] {
    std::string s;
    for (const auto& in : session.inputs()) s += (s.empty() ? "'" : ", '") + in.name + "'";
    return s.empty() ? std::string("none") : s;
  };
  for (const auto& spec : specs) {
    auto [name, path, tensors] = read_input_spec(spec);
    if (!name.empty()) {
      HODU_CHECK(is_input(name), ErrorCode::InvalidArgument, "-i {}: '{}' is not an input of the model (inputs: {})",
                 spec, name, input_names());
      const Tensor* chosen = nullptr;
      if (tensors.size() == 1) chosen = &tensors[0].second;
      else
        for (const auto& [n, t] : tensors)
          if (n == name) chosen = &t;
      HODU_CHECK(chosen, ErrorCode::InvalidArgument, "-i {}: '{}' holds {} tensors and none is named '{}'", spec, path,
                 tensors.size(), name);
      feeds[name] = RuntimeValue(*chosen);
      continue;
    }
    if (tensors.size() == 1 && (tensors[0].first.empty() || !is_input(tensors[0].first))) {
      HODU_CHECK(session.inputs().size() == 1, ErrorCode::InvalidArgument,
                 "-i {}: the model has {} inputs ({}); say which one with NAME={}", spec, session.inputs().size(),
                 input_names(), path);
      feeds[session.inputs()[0].name] = RuntimeValue(tensors[0].second);
      continue;
    }
    int used = 0;
    for (const auto& [n, t] : tensors)
      if (is_input(n)) { feeds[n] = RuntimeValue(t); ++used; }
    HODU_CHECK(used > 0, ErrorCode::InvalidArgument, "-i {}: no tensor in '{}' is named like a model input ({})", spec,
               path, input_names());
  }
  return feeds;
}

}  // namespace hodu::cli
