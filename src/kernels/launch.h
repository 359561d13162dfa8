// Launch-wide settings of the kernels. Programmatic dependent launch (PDL, Hopper and later):
// whether the decode-path kernels are launched so that each may start while the kernel before it in
// the stream is finishing. Process-wide; off by default (the kernels then launch as ordinary
// stream-ordered kernels). The CUDA runner turns it on for devices of compute capability 9.0 and
// later (docs/kernels.md, "Programmatic dependent launch").
#pragma once

namespace kiln::kernels {

void SetProgrammaticLaunch(bool on);
bool ProgrammaticLaunch();

// The current device's SM count, queried once per device (132, an H100's, if the query fails):
// what kernels size their grids or splits by.
int CurrentDeviceSmCount();

}  // namespace kiln::kernels
