#include "kernels/launch.h"

#include <atomic>

namespace kiln::kernels {
namespace {

std::atomic<bool> programmatic_launch{false};

}  // namespace

void SetProgrammaticLaunch(bool on) { programmatic_launch.store(on, std::memory_order_relaxed); }
bool ProgrammaticLaunch() { return programmatic_launch.load(std::memory_order_relaxed); }

}  // namespace kiln::kernels
