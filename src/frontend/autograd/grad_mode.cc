// Grad mode: a thread-local switch, on by default.
#include "hodu/autograd.h"

namespace hodu::eager {
namespace {
thread_local bool grad_enabled = true;
}

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }
EnableGradGuard::EnableGradGuard() : previous_(grad_enabled) { grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { grad_enabled = previous_; }

}  // namespace hodu::eager
