// Test helper: runs one interp kernel on tensors, as the interpreter would,
// without building a graph. For the ops/*_test.cc files only.
#pragma once
#include <string>
#include <vector>

#include "engines/interp/kernel.h"

namespace hodu::interp::testing {

// Runs (domain, op) on `inputs` (an undefined Tensor = omitted input) and returns its outputs.
inline std::vector<RuntimeValue> run_kernel(const std::string& op, const std::vector<Tensor>& inputs,
                                            std::vector<Attribute> attrs = {}, size_t n_out = 1,
                                            const std::string& domain = "", uint64_t seed = 0) {
  Node node;
  node.op_type = op;
  node.domain = domain;
  node.name = "n";
  for (size_t i = 0; i < inputs.size(); ++i) node.inputs.push_back(inputs[i].defined() ? "in" + std::to_string(i) : "");
  for (size_t i = 0; i < n_out; ++i) node.outputs.push_back("out" + std::to_string(i));
  node.attributes = std::move(attrs);
  std::vector<RuntimeValue> vals;
  vals.reserve(inputs.size());
  for (const auto& t : inputs) vals.emplace_back(t.defined() ? RuntimeValue(t) : RuntimeValue());
  KernelContext ctx{node, {}, {}, 1, seed, {}};
  for (auto& v : vals) ctx.inputs.push_back(v.is_none() ? nullptr : &v);
  ctx.outputs.resize(n_out);
  KernelFn fn = OpTable::instance().find(domain, op);
  if (!fn) throw Error(ErrorCode::Unsupported, "no kernel for " + op);
  fn(ctx);
  return ctx.outputs;
}

inline Tensor run_kernel1(const std::string& op, const std::vector<Tensor>& inputs,
                          std::vector<Attribute> attrs = {}) {
  return run_kernel(op, inputs, std::move(attrs)).at(0).tensor;
}

}  // namespace hodu::interp::testing
