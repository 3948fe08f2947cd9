// Sequences and optionals used only inside a graph, for the C generator: when every sequence
// value's elements are known at build time (which tensor values, in which order), the
// sequence ops become the tensor ops they stand for and the sequences disappear:
//
//   SequenceEmpty / SequenceConstruct / SequenceInsert / SequenceErase   (the element list)
//   SequenceAt(s, i)             ->  Identity(element i)
//   SequenceLength(s)            ->  a constant
//   ConcatFromSequence(s)        ->  Concat of the elements (Unsqueezed first with new_axis)
//   SplitToSequence(x[, split])  ->  Split (Squeezed with keepdims=0 and no split)
//   Optional(x) / OptionalGetElement / OptionalHasElement  ->  x / x / true (false: empty)
//
// Positions and split sizes must be constants and the split dim known. A graph is lowered
// all or nothing: a sequence that reaches a graph output, a control-flow node, SequenceMap,
// or a position read while running leaves every sequence op in place, for the generator
// to refuse naming it (the C API carries tensors only).
#pragma once
#include "ir/graph.h"

namespace hodu::compilers::c {

// Lowers g's sequences and optionals (opset: the model's, for Unsqueeze/Squeeze/Split's
// forms). True when the graph changed.
bool lower_sequences(Graph& g, int64_t opset);

// A sequence or optional op (of those lowered above), and why one left in a graph is refused.
bool is_sequence_op(const Node& n);
[[noreturn]] void refuse_sequence_op(const Node& n);

}  // namespace hodu::compilers::c
