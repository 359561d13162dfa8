// The pool behind ParallelFor (thread_pool.h).
//
// One loop ("job") runs at a time. The caller publishes the job's parameters, then the job id
// and chunk count in `state_`; every participant (the caller and up to threads - 1 workers)
// claims chunks by compare-and-swap on `state_`, runs them and counts them down in `pending_`.
// Because a chunk is only claimed through a CAS that also checks the job id, a worker that
// wakes late never touches a later job's parameters: those are rewritten only after `pending_`
// reached zero, and a claimed chunk keeps it above zero until it is done.
//
//   state_ = job id (32 bits) | num_chunks (16 bits) | next unclaimed chunk (16 bits)
#include "backend/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln::cpu {
namespace {

using Body = std::function<void(int64_t, int64_t)>;

// Spin iterations (each a pause instruction, ~10-40 ns) before a waiting thread sleeps: long
// enough to bridge the gaps between the ops of one forward pass, short enough not to steal a
// busy machine's cores.
constexpr int kSpinIterations = 2000;
constexpr int64_t kMaxChunks = 0xffff;

inline void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class Pool {
 public:
  explicit Pool(int num_workers) {
    for (int i = 1; i <= num_workers; ++i) workers_.emplace_back([this, i] { WorkerMain(i); });
  }
  // Never destroyed (see Instance): workers sleep on a condition variable at exit.

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs the loop with `threads` participants; false if another loop holds the pool.
  bool TryRun(int64_t n, int threads, const Body& body) {
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    if (!run.owns_lock()) return false;
    const int64_t wanted = std::min<int64_t>({n, int64_t{4} * threads, kMaxChunks});
    chunk_size_ = (n + wanted - 1) / wanted;
    const int64_t num_chunks = (n + chunk_size_ - 1) / chunk_size_;
    body_ = &body;
    n_ = n;
    pending_.store(num_chunks, std::memory_order_relaxed);
    const uint32_t job = ++last_job_;
    num_helpers_.store(threads - 1, std::memory_order_relaxed);
    state_.store(uint64_t{job} << 32 | uint64_t(num_chunks) << 16, std::memory_order_release);
    job_.store(job, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      if (num_sleeping_ > 0) wake_cv_.notify_all();
    }
    RunChunks(job);
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
      if (spin < kSpinIterations) {
        Pause();
        continue;
      }
      std::unique_lock<std::mutex> lock(sleep_mu_);
      done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
      break;
    }
    return true;
  }

 private:
  void WorkerMain(int index) {
    uint32_t seen = 0;
    for (;;) {
      for (int spin = 0; job_.load(std::memory_order_acquire) == seen; ++spin) {
        if (spin < kSpinIterations) {
          Pause();
          continue;
        }
        std::unique_lock<std::mutex> lock(sleep_mu_);
        ++num_sleeping_;
        wake_cv_.wait(lock, [&] { return job_.load(std::memory_order_acquire) != seen; });
        --num_sleeping_;
        break;
      }
      seen = job_.load(std::memory_order_acquire);
      if (index <= num_helpers_.load(std::memory_order_relaxed)) RunChunks(seen);
    }
  }

  void RunChunks(uint32_t job) {
    for (;;) {
      uint64_t v = state_.load(std::memory_order_acquire);
      for (;;) {
        if (static_cast<uint32_t>(v >> 32) != job) return;
        if ((v & 0xffff) >= ((v >> 16) & 0xffff)) return;
        if (state_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                         std::memory_order_acquire)) {
          break;
        }
      }
      const int64_t begin = static_cast<int64_t>(v & 0xffff) * chunk_size_;
      (*body_)(begin, std::min(n_, begin + chunk_size_));
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(sleep_mu_);
        done_cv_.notify_all();
      }
    }
  }

  std::mutex run_mu_;  // held by the caller of the running loop
  uint32_t last_job_ = 0;
  // The running loop's parameters; stable while any of its chunks is claimed and unfinished.
  const Body* body_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_size_ = 0;

  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> pending_{0};  // chunks of the running loop not finished
  std::atomic<uint32_t> job_{0};     // the latest job; workers wake when it changes
  std::atomic<int> num_helpers_{0};  // workers 1..num_helpers take part in it

  std::mutex sleep_mu_;
  std::condition_variable wake_cv_;  // workers asleep until job_ changes
  std::condition_variable done_cv_;  // the caller asleep until pending_ == 0
  int num_sleeping_ = 0;             // guarded by sleep_mu_

  std::vector<std::thread> workers_;
};

Pool& Instance() {
  // Leaked on purpose: joining at exit would race with static destructors of callers.
  static Pool* const pool = new Pool(DefaultNumThreads() - 1);
  return *pool;
}

}  // namespace

int DefaultNumThreads() {
  static const int n = [] {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }();
  return n;
}

void ParallelFor(int64_t n, int max_threads, const Body& body) {
  if (n <= 0) return;
  int threads = max_threads > 0 ? max_threads : DefaultNumThreads();
  if (threads > 1 && n > 1) {
    Pool& pool = Instance();
    threads = static_cast<int>(std::min<int64_t>({threads, pool.num_threads(), n}));
    if (threads > 1 && pool.TryRun(n, threads, body)) return;
  }
  body(0, n);
}

}  // namespace kiln::cpu
