// Concat of tensors kept in a blocked layout (SqueezeNet's fire modules concat
// two conv outputs on channels) with oneDNN's concat primitive, which reads and
// writes that layout: no reorder to plain and back around the copy.
#include "core/error.h"
#include "engines/cpu/dnnl_common.h"

namespace hodu::cpu {
namespace {

class BlockedConcatStep : public Step {
 public:
  void run(RunState& rs) override {
    std::unordered_map<int, dnnl::memory> args;
    for (size_t i = 0; i < srcs_.size(); ++i) {
      bind(srcs_[i], rs, reads[i]);
      args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = srcs_[i];
    }
    bind(dst_, rs, writes[0]);
    args[DNNL_ARG_DST] = dst_;
    prim_.execute(rs.stream, args);
  }
  dnnl::concat prim_;
  std::vector<dnnl::memory> srcs_;
  dnnl::memory dst_;
};

}  // namespace

bool make_blocked_concat(PlanBuilder& b, const Node& n) {
  if (!n.domain.empty() || n.op_type != "Concat" || n.inputs.size() < 2) return false;
  auto y = b.static_type(n.outputs[0]);
  if (!y || y->first != DType::F32) return false;
  const auto& ys = y->second;
  int64_t axis = n.get_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(ys.size());
  // Only on channels of blocked inputs (conv outputs); a plain concat stays a plain copy.
  if (axis != 1 || ys.size() < 3) return false;
  const Slot& first = b.at(b.slot(n.inputs[0]));
  if (!first.blocked) return false;
  std::vector<int> reads;
  std::vector<dnnl::memory::desc> mds;
  for (const auto& in : n.inputs) {
    int s = b.slot(in);
    const Slot& sl = b.at(s);
    if (sl.dtype != DType::F32 || !sl.is_static || sl.shape.size() != ys.size()) return false;
    // Mixed plain and blocked inputs are left to the plain Concat.
    if (!sl.blocked) return false;
    mds.push_back(sl.md);
    reads.push_back(s);
  }
  dnnl::concat::primitive_desc pd;
  try {
    pd = dnnl::concat::primitive_desc(dnnl::memory::desc(to_dims(ys), dt::f32, tag::any), static_cast<int>(axis),
                                      mds, b.engine());
  } catch (const dnnl::error&) {
    return false;
  }
  auto step = std::make_unique<BlockedConcatStep>();
  step->prim_ = dnnl::concat(pd);
  for (const auto& md : mds) step->srcs_.emplace_back(md, b.engine(), nullptr);
  step->dst_ = dnnl::memory(pd.dst_desc(), b.engine(), nullptr);
  step->reads = reads;
  step->writes = {b.define(n.outputs[0], DType::F32, ys, pd.dst_desc())};
  step->label = n.describe() + ": onednn concat " + std::string(pd.impl_info_str());
  b.add(std::move(step));
  return true;
}

}  // namespace hodu::cpu
