#include "runtime/memory/caching_allocator.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "runtime/log.h"

namespace hodu {

struct CachingAllocator::Block {
  void* ptr = nullptr;
  size_t size = 0;
  StreamId stream = 0;
  Pool pool = Pool::Small;
  bool allocated = false;
  Block* prev = nullptr;  // neighbours within the same segment
  Block* next = nullptr;
  std::set<StreamId> stream_uses;  // other streams that used it (record_stream)

  bool is_split() const { return prev || next; }
};

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return std::less<void*>()(a->ptr, b->ptr);
}

namespace {

int idx(Pool p) { return static_cast<int>(p); }

}  // namespace

CachingAllocator::CachingAllocator(std::shared_ptr<DeviceBackend> backend) : backend_(std::move(backend)) {
  HODU_CHECK(backend_, ErrorCode::InvalidArgument, "caching allocator: no backend");
}

CachingAllocator::~CachingAllocator() {
  // Give every segment back (blocks still allocated are the caller's leak, but
  // their memory is returned). Collect the segment heads first, then delete.
  std::vector<Block*> all(small_.begin(), small_.end());
  all.insert(all.end(), large_.begin(), large_.end());
  for (auto& [p, b] : allocated_) all.push_back(b);
  for (auto& [b, events] : pending_) {
    all.push_back(b);
    for (EventId e : events) backend_->release_event(e);
  }
  std::set<Block*> heads;
  for (Block* b : all) {
    while (b->prev) b = b->prev;
    heads.insert(b);
  }
  for (Block* b : heads) {
    void* base = b->ptr;
    while (b) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    backend_->raw_free(base);
  }
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool pool, StreamId stream, size_t size) {
  BlockPool& p = pool_of(pool);
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  p.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(Pool pool, StreamId stream, size_t size) {
  void* ptr = backend_->raw_alloc(size);
  if (!ptr) return nullptr;
  auto* b = new Block;
  b->ptr = ptr;
  b->size = size;
  b->stream = stream;
  b->pool = pool;
  for (int i : {idx(pool), 2}) {
    stats_.reserved_bytes[i].increase(static_cast<int64_t>(size));
    stats_.segments[i].increase(1);
  }
  return b;
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  std::lock_guard lock(mutex_);
  process_events();
  size_t size = round_size(bytes);
  Pool pool = size <= kSmallSize ? Pool::Small : Pool::Large;
  Block* block = find_free_block(pool, stream, size);
  if (!block) {
    size_t seg = segment_size(size);
    block = new_segment(pool, stream, seg);
    if (!block) {
      // Out of device memory: give back what the cache holds and try once more.
      stats_.num_alloc_retries++;
      log_verbose("{}: out of memory for {}, releasing cached segments and retrying", name(),
                  format_bytes(static_cast<int64_t>(seg)));
      synchronize_and_process_events();
      release_cached_segments();
      block = new_segment(pool, stream, seg);
      if (!block) fail_oom(bytes, size, seg);
    }
  }
  // Split off the rest when it is worth keeping as its own block.
  size_t remaining = block->size - size;
  bool split = pool == Pool::Small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    auto* rest = new Block;
    rest->ptr = static_cast<char*>(block->ptr) + size;
    rest->size = remaining;
    rest->stream = stream;
    rest->pool = pool;
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool_of(pool).insert(rest);
  }
  block->allocated = true;
  allocated_[block->ptr] = block;
  for (int i : {idx(pool), 2}) {
    stats_.allocated_bytes[i].increase(static_cast<int64_t>(block->size));
    stats_.active_bytes[i].increase(static_cast<int64_t>(block->size));
  }
  return block->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = allocated_.find(ptr);
  HODU_CHECK(it != allocated_.end(), ErrorCode::InvalidArgument,
             "{}: {} was not allocated here (or was freed twice)", name(), ptr);
  Block* block = it->second;
  allocated_.erase(it);
  block->allocated = false;
  for (int i : {idx(block->pool), 2}) stats_.allocated_bytes[i].decrease(static_cast<int64_t>(block->size));
  if (!block->stream_uses.empty()) {
    // Other streams may still read it: reusable once each has passed this point.
    std::vector<EventId> events;
    for (StreamId s : block->stream_uses) events.push_back(backend_->record_event(s));
    block->stream_uses.clear();
    pending_[block] = std::move(events);
    return;
  }
  free_block(block);
}

void CachingAllocator::free_block(Block* block) {
  for (int i : {idx(block->pool), 2}) stats_.active_bytes[i].decrease(static_cast<int64_t>(block->size));
  BlockPool& pool = pool_of(block->pool);
  auto mergeable = [&](Block* n) { return n && !n->allocated && !pending_.count(n); };
  if (mergeable(block->prev)) {
    Block* prev = block->prev;
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (prev->next) prev->next->prev = prev;
    delete block;
    block = prev;
  }
  if (mergeable(block->next)) {
    Block* next = block->next;
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next) block->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void CachingAllocator::process_events() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& events = it->second;
    bool done = std::all_of(events.begin(), events.end(), [&](EventId e) { return backend_->event_done(e); });
    if (!done) {
      ++it;
      continue;
    }
    for (EventId e : events) backend_->release_event(e);
    Block* b = it->first;
    it = pending_.erase(it);
    free_block(b);
  }
}

void CachingAllocator::synchronize_and_process_events() {
  if (pending_.empty()) return;
  backend_->synchronize();
  process_events();
}

void CachingAllocator::release_cached_segments() {
  bool released = false;
  for (BlockPool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->is_split()) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      for (int i : {idx(b->pool), 2}) {
        stats_.reserved_bytes[i].decrease(static_cast<int64_t>(b->size));
        stats_.segments[i].decrease(1);
      }
      backend_->raw_free(b->ptr);
      delete b;
      released = true;
    }
  }
  if (released) stats_.num_cache_flushes++;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  synchronize_and_process_events();
  release_cached_segments();
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard lock(mutex_);
  auto it = allocated_.find(ptr);
  HODU_CHECK(it != allocated_.end(), ErrorCode::InvalidArgument, "{}: record_stream: {} is not an allocated block",
             name(), ptr);
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

size_t CachingAllocator::block_size(void* ptr) const {
  std::lock_guard lock(mutex_);
  auto it = allocated_.find(ptr);
  HODU_CHECK(it != allocated_.end(), ErrorCode::InvalidArgument, "{}: {} is not an allocated block", name(), ptr);
  return it->second->size;
}

void CachingAllocator::fail_oom(size_t requested, size_t rounded, size_t segment) {
  stats_.num_ooms++;
  size_t free_b = 0, total_b = 0;
  backend_->memory_info(free_b, total_b);
  std::string device_part =
      total_b ? fmt::format("{} has a total capacity of {} of which {} is free", device().to_string(),
                            format_bytes(static_cast<int64_t>(total_b)), format_bytes(static_cast<int64_t>(free_b)))
              : device().to_string();
  fail(ErrorCode::OutOfMemory,
       "{}: out of memory: tried to allocate {} (rounded to {}, needing a new {} segment); {}; {} "
       "(cached segments were released and the allocation retried)",
       name(), format_bytes(static_cast<int64_t>(requested)), format_bytes(static_cast<int64_t>(rounded)),
       format_bytes(static_cast<int64_t>(segment)), device_part, stats_.summary());
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.reset_peaks();
}

}  // namespace hodu
