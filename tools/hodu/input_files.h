// Turns `-i NAME=PATH` / `-I NAME=PATH,NAME=PATH` arguments into named
// tensors for a session, with errors that name the argument and the file.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/runtime_value.h"
#include "formats/tensor_io.h"
#include "runtime/session.h"

namespace hodu::cli {

// One `-i` spec read: NAME ("" for a PATH alone), PATH and the tensors the file holds
// (at least one). Errors name the spec and the file.
struct InputFile {
  std::string name, path;
  NamedTensors tensors;
};
InputFile read_input_spec(const std::string& spec);

// Each spec is "NAME=PATH" or "PATH". A PATH alone: a multi-tensor file (.npz,
// .hdt, .json, .safetensors) feeds the inputs whose names it holds; a
// single-tensor file feeds the model's only input.
std::map<std::string, RuntimeValue> load_inputs(const std::vector<std::string>& specs, const Session& session);

// "a=x.npy,b=y.npy" → {"a=x.npy", "b=y.npy"}
std::vector<std::string> split_comma_list(const std::string& list);

}  // namespace hodu::cli
