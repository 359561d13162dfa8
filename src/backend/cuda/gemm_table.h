// An engine's tuned GEMM table (gemm_table.json, docs/engine-format.md): the cuBLASLt algorithm
// Gemm::Tune chose for each linear-layer shape, with the GPU and cuBLASLt version it was tuned
// on. A table from another GPU or cuBLASLt is not used (the runner tunes instead).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "backend/cuda/gemm.h"
#include "core/status.h"

namespace kiln::cuda {

struct GemmTable {
  std::string device;            // cudaDeviceProp::name
  int compute_capability = 0;    // major * 10 + minor
  int64_t cublaslt_version = 0;  // cublasLtGetVersion()
  std::vector<TunedGemm> entries;
};

// The table of `device`'s current GPU and this process's cuBLASLt, with `entries`.
Result<GemmTable> CurrentGemmTable(int device, std::vector<TunedGemm> entries);

std::string GemmTableToJson(const GemmTable& table);
// Errors: Corrupt naming `source` for malformed JSON or entries.
Result<GemmTable> ParseGemmTable(std::string_view text, const std::string& source);

}  // namespace kiln::cuda
