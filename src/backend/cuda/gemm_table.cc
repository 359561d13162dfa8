#include "backend/cuda/gemm_table.h"

#include <cuda_runtime.h>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_check.h"

namespace kiln::cuda {

using Json = nlohmann::ordered_json;

Result<GemmTable> CurrentGemmTable(int device, std::vector<TunedGemm> entries) {
  cudaDeviceProp prop{};
  KILN_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  GemmTable t;
  t.device = prop.name;
  t.compute_capability = prop.major * 10 + prop.minor;
  t.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  t.entries = std::move(entries);
  return t;
}

std::string GemmTableToJson(const GemmTable& t) {
  Json entries = Json::array();
  for (const TunedGemm& e : t.entries) {
    const GemmShape& s = e.shape;
    entries.push_back({{"m", s.m},
                       {"n", s.n},
                       {"k", s.k},
                       {"ldx", s.ldx},
                       {"ldo", s.ldo},
                       {"out_f32", s.out_f32},
                       {"bias", s.bias},
                       {"dtype", DTypeName(s.dtype)},
                       {"fp8", s.fp8},
                       {"algo", e.algo}});
  }
  Json j = {{"device", t.device},
            {"compute_capability", t.compute_capability},
            {"cublaslt_version", t.cublaslt_version},
            {"entries", entries}};
  return j.dump(1) + "\n";
}

Result<GemmTable> ParseGemmTable(std::string_view text, const std::string& source) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt(source + ": not a JSON object");
  GemmTable t;
  try {
    t.device = j.at("device").get<std::string>();
    t.compute_capability = j.at("compute_capability").get<int>();
    t.cublaslt_version = j.at("cublaslt_version").get<int64_t>();
    for (const Json& e : j.at("entries")) {
      TunedGemm g;
      g.shape.m = e.at("m").get<int64_t>();
      g.shape.n = e.at("n").get<int64_t>();
      g.shape.k = e.at("k").get<int64_t>();
      g.shape.ldx = e.at("ldx").get<int64_t>();
      g.shape.ldo = e.at("ldo").get<int64_t>();
      g.shape.out_f32 = e.at("out_f32").get<bool>();
      g.shape.bias = e.at("bias").get<bool>();
      g.shape.fp8 = e.at("fp8").get<bool>();
      auto dtype = ParseDType(e.at("dtype").get<std::string>());
      if (!dtype.ok()) return Corrupt(source + ": an entry's dtype is unknown");
      g.shape.dtype = *dtype;
      g.algo = e.at("algo").get<std::array<uint64_t, 8>>();
      t.entries.push_back(g);
    }
  } catch (const Json::exception& e) {
    return Corrupt(source + ": " + e.what());
  }
  return t;
}

}  // namespace kiln::cuda
