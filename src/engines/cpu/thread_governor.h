// Whether a plan built for several threads runs them all, run by run. On cores that other
// processes keep busy, every parallel region (each oneDNN primitive, each parallel loop) waits
// at its end for its slowest thread, and a descheduled thread is a scheduler slice late: at 2
// threads on 2 shared cores the PaddleOCR detector ran 5-12x its 1-thread time (docs/performance.md).
// So the governor watches the time its threads spend runnable but not running (the kernel's
// schedstat run delay): past a share of the runs' time it runs the next runs on one thread, and
// goes back to all of them when the system's runnable tasks leave them enough cores.
// A virtual machine's vCPU taken by the hypervisor (steal time) is no wait the guest kernel sees:
// at 2 threads on such a machine MobileNetV3-Large ran 40 ms a run where one thread took 17 and
// ONNX Runtime's pool 13. So the governor also times its runs (a plan's runs do the same work):
// when the last 3 runs on all threads took a median past 1.5x the fastest recent one, one run goes
// on one thread, and
// when that is faster the next runs stay on one thread, an all-thread run tried now and then
// (every 50 ms at first, the gap doubling up to 2 s while one thread stays faster).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace hodu::cpu {

class ThreadGovernor {
 public:
  // HODU_THREAD_POLICY: adaptive (the default: as above), fixed (always all threads), one (every
  // run on one thread: what adaptive does on busy cores, forced; for tests and comparisons).
  enum class Policy { Adaptive, Fixed, One };
  static Policy policy();

  explicit ThreadGovernor(int threads) : ThreadGovernor(threads, policy()) {}
  ThreadGovernor(int threads, Policy policy);

  // Every run on all threads from now on, whatever the policy: for plans with oneDNN primitives
  // that wait at barriers for the team their split was made for when created (backward
  // convolutions: on one thread they waited for the missing one forever).
  void pin() { policy_ = Policy::Fixed; }
  bool pinned() const { return policy_ == Policy::Fixed; }

  // The threads of the next run: all, or 1. On 1, OpenMP's active levels are 0 on this thread until
  // end_run(): every parallel region runs on one thread, oneDNN's too. oneDNN's forward primitives
  // then do all the work on it (they split it by the team they get); the backward ones do not
  // (see pin()).
  int begin_run();
  // After every begin_run(), also when the run threw.
  void end_run();

  // RAII: begin_run() at construction, end_run() at destruction.
  class Run {
   public:
    explicit Run(ThreadGovernor& g) : g_(g), threads_(g.begin_run()) {}
    ~Run() { g_.end_run(); }
    Run(const Run&) = delete;
    Run& operator=(const Run&) = delete;
    int threads() const { return threads_; }

   private:
    ThreadGovernor& g_;
    int threads_;
  };

 private:
  using Clock = std::chrono::steady_clock;
  void collect_team();
  int64_t team_delay_ns() const;
  void end_timed_run();  // the timed part of end_run()

  int threads_;
  Policy policy_;
  bool serial_ = false, in_run_ = false;
  bool passed_ = true;          // the last parallel window found the cores free
  double probe_gap_ms_ = 10;    // on one thread: how often the system's load is looked at
  int saved_levels_ = 1;
  // Timed runs. slow_: on one thread because it timed faster (not the run delay). this_run_one_:
  // the current run's mode. probe_one_/probe_all_: the next run tries the other mode.
  bool slow_ = false, this_run_one_ = false, probe_one_ = false;
  double best_all_ms_ = 0, all_ms_ = 0, one_ms_ = 0;  // fastest recent, typical all-thread, latest one-thread runs
  double recent_all_ms_[3] = {0, 0, 0};               // the last all-thread runs (all_ms_: their median)
  int recent_at_ = 0;
  double slow_probe_gap_ms_ = 50;
  Clock::time_point timed_start_, last_all_probe_;
  // The parallel runs since the window started: their wall time and the team's run delay then.
  Clock::time_point run_start_, last_load_check_;
  double window_run_ns_ = 0;
  int64_t window_delay0_ = 0;
  pid_t caller_ = 0;
  std::vector<pid_t> team_;  // the calling thread, then its OpenMP workers
};

}  // namespace hodu::cpu
