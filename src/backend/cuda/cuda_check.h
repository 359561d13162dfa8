// CUDA / cuBLAS error handling for the CUDA backend: failures become kiln::Status values.
#pragma once

#include <string>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace kiln::cuda {

inline Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

inline Status CublasStatus(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return Internal(std::string(what) + ": " + cublasLtGetStatusString(st));
}

}  // namespace kiln::cuda

// Evaluates a cudaError_t / cublasStatus_t expression and returns its failure as a Status.
#define KILN_CUDA_RETURN_IF_ERROR(expr) \
  KILN_RETURN_IF_ERROR(::kiln::cuda::CudaStatus((expr), #expr))
#define KILN_CUBLAS_RETURN_IF_ERROR(expr) \
  KILN_RETURN_IF_ERROR(::kiln::cuda::CublasStatus((expr), #expr))
