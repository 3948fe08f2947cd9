// Values read in place from another value's bytes (default mode): a chain of Slice,
// Reshape and Transpose over a row-major tensor is one strided view of it, which a
// library MatMul reads directly (attention's head split: no copies), or one strided
// copy materializes where a reader needs row-major bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compilers/c/sym_int.h"
#include "ir/graph.h"

namespace hodu::compilers::c {

struct Codegen;

// Element offset and strides over `root` (a value stored row-major), in the view's dims.
struct StridedView {
  std::string root;
  SymInt offset = 0;
  SymShape dims, strides;
};

// The row-major view of `v` itself.
StridedView whole_view(const Codegen& cg, const std::string& v);
// Whether the view reads its root's first bytes in row-major order (size-1 dims aside).
bool is_row_major(const StridedView& v);
// Ops whose output is a view of input 0: Transpose, Slice and the reshape family.
bool is_view_producer(const Codegen& cg, const Node& n);
// The view of n's output given the view of its input 0; nullopt where those bytes are not
// one strided view (a Slice with a negative step, a Reshape across non-adjacent strides).
std::optional<StridedView> view_through(const Codegen& cg, const Node& n, const StridedView& in);

}  // namespace hodu::compilers::c
