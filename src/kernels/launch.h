// Launch-wide settings of the kernels. Programmatic dependent launch (PDL, Hopper and later):
// whether the decode-path kernels are launched so that each may start while the kernel before it in
// the stream is finishing. Process-wide; off by default (the kernels then launch as ordinary
// stream-ordered kernels). The CUDA runner turns it on for devices of compute capability 9.0 and
// later (docs/kernels.md, "Programmatic dependent launch").
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>

namespace kiln::kernels {

void SetProgrammaticLaunch(bool on);
bool ProgrammaticLaunch();

// The current device's SM count, queried once per device (132, an H100's, if the query fails):
// what kernels size their grids or splits by.
int CurrentDeviceSmCount();

// A yes-or-no fact about a device (whether a kernel runs there, set up for it), found by `probe`
// (given the device ordinal, under the lock) the first time the current device asks, then
// remembered: one instance a fact, thread-safe. False when the device cannot be asked.
class PerDeviceFact {
 public:
  bool Get(const std::function<bool(int device)>& probe);

 private:
  std::mutex mu_;
  std::array<int8_t, 64> known_{};  // per device ordinal: 0 not known yet, 1 yes, -1 no
};

// Whether `device` has compute capability major.minor.
bool ComputeCapabilityIs(int device, int major, int minor);

}  // namespace kiln::kernels
