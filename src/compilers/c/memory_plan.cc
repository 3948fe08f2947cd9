#include "compilers/c/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace hodu::compilers::c {
namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

struct Slot {
  int64_t bytes = 0;
  int first = 0, last = 0;
  int64_t offset = -1;
};

}  // namespace

MemoryPlan plan_memory(const std::vector<PlanBuffer>& buffers, int64_t alignment) {
  // Buffers joined in place share one slot whose lifetime is their union and whose size is
  // their largest.
  std::vector<int> slot_of(buffers.size(), -1);
  std::vector<Slot> slots;
  MemoryPlan plan;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    const int64_t bytes = b.bytes.value();  // static plans only (run-time sizes: the generated planner)
    plan.naive_bytes += align_up(bytes, alignment);
    HODU_CHECK(b.first_step <= b.last_step, ErrorCode::Internal, "memory plan: buffer {} ends before it starts", i);
    if (b.reuse >= 0) {
      HODU_CHECK(static_cast<size_t>(b.reuse) < i, ErrorCode::Internal, "memory plan: buffer {} reuses a later one", i);
      Slot& s = slots[slot_of[b.reuse]];
      HODU_CHECK(s.last == b.first_step, ErrorCode::Internal,
                 "memory plan: buffer {} (steps {}..{}) cannot reuse buffer {} in place: its slot lives steps {}..{}", i,
                 b.first_step, b.last_step, b.reuse, s.first, s.last);
      // The slot is as large as its largest buffer (a conv writing oneDNN's 16-channel
      // blocks over a residual in the plain layout needs the rounded-up channels), as
      // hk_plan does for run-time sizes.
      s.bytes = std::max(s.bytes, bytes);
      s.last = std::max(s.last, b.last_step);
      slot_of[i] = slot_of[b.reuse];
      continue;
    }
    slot_of[i] = static_cast<int>(slots.size());
    slots.push_back({bytes, b.first_step, b.last_step});
  }
  // Greedy by size (largest first): the lowest offset that overlaps no placed
  // slot live at the same time.
  std::vector<int> order(slots.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return slots[a].bytes > slots[b].bytes; });
  std::vector<int> placed;
  for (int si : order) {
    Slot& s = slots[si];
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int pi : placed) {
      const Slot& p = slots[pi];
      if (p.first <= s.last && s.first <= p.last) busy.push_back({p.offset, p.offset + align_up(p.bytes, alignment)});
    }
    std::sort(busy.begin(), busy.end());
    int64_t off = 0, need = align_up(s.bytes, alignment);
    for (const auto& [lo, hi] : busy) {
      if (off + need <= lo) break;
      off = std::max(off, hi);
    }
    s.offset = off;
    plan.arena_bytes = std::max(plan.arena_bytes, off + need);
    placed.push_back(si);
  }
  plan.offsets.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) plan.offsets[i] = slots[slot_of[i]].offset;
  return plan;
}

}  // namespace hodu::compilers::c
