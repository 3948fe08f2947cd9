#include "engines/cpu/thread_governor.h"

#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hodu::cpu {
namespace {

// Parallel runs are judged over at least this much of their wall time (one run if longer).
constexpr double kWindowNs = 20e6;
// The share of the team's thread-time spent waiting for a core past which runs go to one thread:
// on an idle machine it is a few percent (wake-ups), on cores shared with busy processes 30-80 %.
constexpr double kBusyShare = 0.2;
// On one thread, the system's runnable tasks are looked at this often, at first; each parallel
// window that finds the cores still busy doubles it, up to kMaxProbeGap.
constexpr double kMinProbeGapMs = 10, kMaxProbeGapMs = 1000;
// Timed runs: an all-thread run this much slower than the fastest recent one tries one thread
// next; one thread is kept while it is faster than all of them by kSlowMargin.
constexpr double kSlowRun = 1.5, kSlowMargin = 0.9;
constexpr double kMinSlowGapMs = 50, kMaxSlowGapMs = 2000;

bool debug() {
  static const bool on = [] {
    const char* v = std::getenv("HODU_THREAD_DEBUG");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// A small /proc file's text (empty when unreadable).
int read_proc(const char* path, char* buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  buf[n > 0 ? n : 0] = '\0';
  return n > 0 ? static_cast<int>(n) : 0;
}

// Nanoseconds thread `tid` of this process has spent runnable but not running (schedstat's second
// field); -1 when the kernel does not say.
int64_t run_delay_ns(pid_t tid) {
  char path[64], buf[128];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", static_cast<int>(tid));
  if (!read_proc(path, buf, sizeof buf)) return -1;
  unsigned long long on_cpu = 0, waiting = 0;
  if (std::sscanf(buf, "%llu %llu", &on_cpu, &waiting) != 2) return -1;
  return static_cast<int64_t>(waiting);
}

// Tasks runnable on the system now, this thread included (/proc/loadavg's "R/T"); -1 if unknown.
int runnable_tasks() {
  char buf[128];
  if (!read_proc("/proc/loadavg", buf, sizeof buf)) return -1;
  double l1, l5, l15;
  int running = 0, total = 0;
  if (std::sscanf(buf, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) != 5) return -1;
  return running;
}

int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

pid_t this_thread() { return static_cast<pid_t>(syscall(SYS_gettid)); }

}  // namespace

ThreadGovernor::Policy ThreadGovernor::policy() {
  static const Policy p = [] {
    const char* v = std::getenv("HODU_THREAD_POLICY");
    if (!v || !*v || std::strcmp(v, "adaptive") == 0) return Policy::Adaptive;
    if (std::strcmp(v, "fixed") == 0) return Policy::Fixed;
    if (std::strcmp(v, "one") == 0) return Policy::One;
    std::fprintf(stderr, "hodu: warning: HODU_THREAD_POLICY=%s is not adaptive, fixed or one; using adaptive\n", v);
    return Policy::Adaptive;
  }();
  return p;
}

ThreadGovernor::ThreadGovernor(int threads, Policy policy) : threads_(std::max(threads, 1)), policy_(policy) {}

void ThreadGovernor::collect_team() {
  caller_ = this_thread();
  team_.assign(threads_, 0);
  team_[0] = caller_;
#pragma omp parallel num_threads(threads_)
  team_[omp_get_thread_num()] = this_thread();
}

int64_t ThreadGovernor::team_delay_ns() const {
  int64_t sum = 0;
  for (pid_t t : team_) {
    if (t <= 0) continue;
    int64_t d = run_delay_ns(t);
    if (d < 0) return -1;
    sum += d;
  }
  return sum;
}

int ThreadGovernor::begin_run() {
  in_run_ = true;
  if (threads_ == 1 || policy_ == Policy::Fixed) return threads_;
  bool one = policy_ == Policy::One || serial_;
  const Clock::time_point now = Clock::now();
  timed_start_ = now;
  if (policy_ == Policy::Adaptive && !serial_) {
    // One thread timed faster: stay there, but try all threads now and then.
    one = slow_ || probe_one_;
    if (slow_ && std::chrono::duration<double, std::milli>(now - last_all_probe_).count() >= slow_probe_gap_ms_) {
      last_all_probe_ = now;
      one = false;
    }
  }
  if (serial_ && policy_ == Policy::Adaptive &&
      std::chrono::duration<double, std::milli>(now - last_load_check_).count() >= probe_gap_ms_) {
    last_load_check_ = now;
    // This thread is one of the runnable tasks; the team's other threads need a core each.
    const int others = runnable_tasks() - 1;
    if (others >= 0 && others + threads_ <= cores_available()) {
      serial_ = one = false;
      window_run_ns_ = 0;
      window_delay0_ = -2;  // taken below
      if (debug()) std::fprintf(stderr, "hodu threads: %d other runnable tasks: back to %d threads\n", others, threads_);
    }
  }
  this_run_one_ = one;
  if (one) {
    saved_levels_ = omp_get_max_active_levels();
    omp_set_max_active_levels(0);
    return 1;
  }
  if (caller_ != this_thread() || team_.empty()) {
    collect_team();
    window_run_ns_ = 0;
    window_delay0_ = -2;
  }
  if (window_delay0_ == -2) window_delay0_ = team_delay_ns();
  run_start_ = Clock::now();
  return threads_;
}

void ThreadGovernor::end_timed_run() {
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - timed_start_).count();
  if (this_run_one_) {
    one_ms_ = ms;
    if (probe_one_) {
      probe_one_ = false;
      last_all_probe_ = Clock::now();
      if (one_ms_ < all_ms_ * kSlowMargin) {
        slow_ = true;
        slow_probe_gap_ms_ = kMinSlowGapMs;
        if (debug()) std::fprintf(stderr, "hodu threads: %.2f ms on 1 thread, %.2f on %d: 1 thread\n", one_ms_, all_ms_, threads_);
      } else {
        slow_probe_gap_ms_ = std::min(kMaxSlowGapMs, slow_probe_gap_ms_ * 2);  // all threads stay faster
      }
    }
    return;
  }
  // The median of the last three all-thread runs: one slow run (a page fault, a neighbour's burst)
  // moves nothing.
  recent_all_ms_[recent_at_] = ms;
  recent_at_ = (recent_at_ + 1) % 3;
  double sorted[3] = {recent_all_ms_[0], recent_all_ms_[1], recent_all_ms_[2]};
  std::sort(sorted, sorted + 3);
  all_ms_ = sorted[0] > 0 ? sorted[1] : ms;
  if (slow_) {
    all_ms_ = ms;  // the one all-thread probe
    if (all_ms_ < one_ms_ * kSlowMargin) {
      slow_ = false;
      best_all_ms_ = all_ms_;
      for (double& r : recent_all_ms_) r = all_ms_;
      slow_probe_gap_ms_ = kMinSlowGapMs;
      if (debug()) std::fprintf(stderr, "hodu threads: %.2f ms on %d threads, %.2f on 1: back to %d\n", all_ms_, threads_, one_ms_, threads_);
    } else {
      slow_probe_gap_ms_ = std::min(kMaxSlowGapMs, slow_probe_gap_ms_ * 2);
    }
    return;
  }
  // The fastest recent all-thread run, let drift up 1 % a run so that a lasting change of the
  // work (a plan whose runs take longer for good) is followed.
  best_all_ms_ = best_all_ms_ > 0 && best_all_ms_ * 1.01 < ms ? best_all_ms_ * 1.01 : ms;
  if (all_ms_ > kSlowRun * best_all_ms_ &&
      std::chrono::duration<double, std::milli>(Clock::now() - last_all_probe_).count() >= slow_probe_gap_ms_)
    probe_one_ = true;
}

void ThreadGovernor::end_run() {
  if (!in_run_) return;
  in_run_ = false;
  if (threads_ == 1 || policy_ == Policy::Fixed) return;
  if (policy_ == Policy::Adaptive && !serial_) end_timed_run();
  if (this_run_one_) {  // a run on one thread: nothing for the run-delay window
    omp_set_max_active_levels(saved_levels_);
    return;
  }
  window_run_ns_ += std::chrono::duration<double, std::nano>(Clock::now() - run_start_).count();
  if (window_run_ns_ < kWindowNs) return;
  const int64_t delay = window_delay0_ >= 0 ? team_delay_ns() : -1;
  if (delay >= 0) {
    const double share = static_cast<double>(delay - window_delay0_) / (window_run_ns_ * threads_);
    if (debug())
      std::fprintf(stderr, "hodu threads: %.1f ms of runs on %d threads, %.0f %% of their time waiting for a core\n",
                   window_run_ns_ / 1e6, threads_, share * 100);
    if (share > kBusyShare) {
      serial_ = true;
      last_load_check_ = Clock::now();
      probe_gap_ms_ = passed_ ? kMinProbeGapMs : std::min(kMaxProbeGapMs, probe_gap_ms_ * 2);
      if (debug()) std::fprintf(stderr, "hodu threads: cores busy: 1 thread (next look in %.0f ms)\n", probe_gap_ms_);
    }
    passed_ = !serial_;
  }
  window_run_ns_ = 0;
  window_delay0_ = delay;
}

}  // namespace hodu::cpu
