// Cuts a model in two at a named value, to run the first part on an edge
// device and the rest on a server (`hodu run --remote URL --remote-from VALUE`
// with `hodugaki serve --tail-from VALUE` on the same model file):
//   head: the nodes VALUE depends on. Inputs: the graph inputs they read.
//         Outputs: every value the other nodes read from them (VALUE among
//         them), then the graph outputs computed here.
//   tail: every other node. Inputs: the values the head sends, then the
//         graph inputs these nodes read. Outputs: the other graph outputs.
// Both keep the initializers they read (sharing storage with the model).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"

namespace hodu::edge {

struct ModelSplit {
  Model head;
  Model tail;
  std::vector<std::string> sent;  // head outputs the tail reads, in the tail's input order
};

// InvalidArgument naming VALUE when it is not produced by a node, or when no
// node after it reads it (nothing would be left for the server).
ModelSplit split_model(const Model& model, const std::string& value);

}  // namespace hodu::edge
