# Resolves KILN_CUDA (AUTO|ON|OFF) into KILN_HAS_CUDA and enables the CUDA language when on.
# Default architectures: sm_90a (Hopper, what kernels are tuned for) and sm_80 (Ampere, must
# still compile). With a GPU visible (nvidia-smi lists one) both as machine code; without one
# (CI, build hosts) Ampere as PTX only (80-virtual): the sources still compile for sm_80, ptxas'
# sm_80 pass (about 40 % of that architecture's compile time) is skipped, and an Ampere driver
# compiles the PTX once at first start (it caches the result). Override with
# -DCMAKE_CUDA_ARCHITECTURES=90a for faster local builds.
string(TOUPPER "${KILN_CUDA}" _kiln_cuda)
set(KILN_HAS_CUDA OFF)
if(_kiln_cuda STREQUAL "OFF")
  message(STATUS "kiln: CUDA disabled (KILN_CUDA=OFF)")
else()
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER)
    find_program(_kiln_nvcc nvcc HINTS /usr/local/cuda/bin ENV CUDA_HOME PATH_SUFFIXES bin)
    if(_kiln_nvcc)
      set(CMAKE_CUDA_COMPILER "${_kiln_nvcc}")
    endif()
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE _kiln_smi_rc OUTPUT_VARIABLE _kiln_gpus
                      ERROR_QUIET)
      if(_kiln_smi_rc EQUAL 0 AND _kiln_gpus MATCHES "GPU")
        set(CMAKE_CUDA_ARCHITECTURES "90a;80")
      else()
        set(CMAKE_CUDA_ARCHITECTURES "90a;80-virtual")
      endif()
    endif()
    enable_language(CUDA)
    # NOTE: CMake 3.25 does not know nvcc 13's C++20 flag; CUDA targets inherit CXX_STANDARD 20,
    # so name the flag for it.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    set(KILN_HAS_CUDA ON)
    message(STATUS "kiln: CUDA on (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(_kiln_cuda STREQUAL "ON")
    message(FATAL_ERROR "kiln: KILN_CUDA=ON but no CUDA compiler (nvcc) was found; "
                        "install the CUDA toolkit or configure with -DKILN_CUDA=OFF")
  else()
    message(STATUS "kiln: CUDA not found, building the CPU-only engine (KILN_CUDA=AUTO)")
  endif()
endif()
