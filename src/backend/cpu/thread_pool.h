// ParallelFor: the fork-join loop of the CPU ops, on a process-wide pool of worker threads.
//
// Why not OpenMP: libgomp's workers spin-wait at every barrier (GOMP_SPINCOUNT, ~1 ms), which is
// right on an idle dedicated machine and ruinous on a shared one. Measured on the 2-core dev
// machine while other builds ran: one 1536 x 576 q4_1 matrix-vector product took 0.28 ms on one
// thread and 17.7 ms on two (OMP_WAIT_POLICY=passive: 0.41 ms), because each barrier waited a
// scheduler time slice for a spinning or preempted partner. Here the caller takes part in the
// work and chunks are claimed dynamically, so a preempted worker delays nothing it has not
// started; waiting threads spin briefly (~20 us), then sleep on a futex.
//
// Results never depend on the threads: the callers (cpu_ops.cc) compute every output element
// inside one chunk, whichever thread runs it.
#pragma once

#include <cstdint>
#include <functional>

namespace kiln::cpu {

// Calls body(begin, end) on disjoint ranges covering [0, n), on up to max_threads threads (the
// calling thread included; <= 0 = every core), and returns when all have finished. Ranges are
// contiguous chunks of about n / (4 * threads) items. Runs inline on the caller when
// max_threads == 1, n <= 1, or the pool is busy with another caller's loop (a nested or
// concurrent ParallelFor), so it never deadlocks. `body` must not throw.
void ParallelFor(int64_t n, int max_threads, const std::function<void(int64_t, int64_t)>& body);

// The number of threads max_threads <= 0 means: the cores this process may run on.
int DefaultNumThreads();

}  // namespace kiln::cpu
