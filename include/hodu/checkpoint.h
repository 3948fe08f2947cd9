/* hodu/checkpoint.h — saving a training run and resuming it exactly (public).
 *
 * A checkpoint is a folder with model.safetensors (the module's state_dict:
 * parameters and buffers, bit-exact) and training.json (the optimizer's
 * state with its buffers, the scheduler's and data loader's positions, and
 * the caller's own counters). Loading it into the same model, optimizer,
 * scheduler and loader continues the run with the same numbers as if it had
 * not stopped. */
#pragma once
#include <map>
#include <string>

#include "hodu/data.h"
#include "hodu/nn.h"
#include "hodu/optim.h"

namespace hodu::eager {

struct Checkpoint {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;     // optional
  optim::LRScheduler* scheduler = nullptr;   // optional
  data::DataLoader* loader = nullptr;        // optional
  std::map<std::string, int64_t> counters;   // the caller's (epoch, step, ...)
};

void save_checkpoint(const std::string& dir, const Checkpoint& c);
// Fills c.counters from the file; InvalidArgument when the files do not fit the objects.
void load_checkpoint(const std::string& dir, Checkpoint& c);

}  // namespace hodu::eager
