#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace kiln {
namespace {

using nlohmann::json;

struct StDType {
  std::string_view name;
  DType dtype;
};
constexpr StDType kDTypes[] = {
    {"F64", DType::kF64},   {"F32", DType::kF32},        {"F16", DType::kF16},
    {"BF16", DType::kBF16}, {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2},
    {"I64", DType::kI64},   {"I32", DType::kI32},        {"I16", DType::kI16},
    {"I8", DType::kI8},     {"U8", DType::kU8},          {"BOOL", DType::kBool},
};

bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

}  // namespace

Result<DType> SafetensorsDType(std::string_view name) {
  for (const StDType& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return Unsupported("safetensors dtype '" + std::string(name) +
                     "' is not supported; kiln reads F64, F32, F16, BF16, F8_E4M3, F8_E5M2 and "
                     "integer tensors");
}

Result<std::string_view> SafetensorsDTypeName(DType dtype) {
  for (const StDType& d : kDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return Unsupported("dtype " + std::string(DTypeName(dtype)) +
                     " cannot be stored in a safetensors file");
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  KILN_ASSIGN_OR_RETURN(f.map_, MappedFile::Open(path));
  const uint64_t file_size = f.map_.size();
  auto corrupt = [&](const std::string& what) { return Corrupt(path + ": " + what); };

  if (file_size < 8) {
    return corrupt("file is " + std::to_string(file_size) +
                   " bytes, too short for a safetensors header (truncated download?)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | f.map_.data()[i];
  if (header_len > kMaxHeaderBytes) {
    return corrupt("header length " + std::to_string(header_len) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderBytes) + " bytes; this is not a safetensors file");
  }
  if (header_len > file_size - 8) {
    return corrupt("header length " + std::to_string(header_len) + " runs past the end of the " +
                   std::to_string(file_size) + "-byte file (truncated?)");
  }
  const std::string_view header(reinterpret_cast<const char*>(f.map_.data() + 8), header_len);
  json j = json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return corrupt("header is not a JSON object");

  const uint64_t data_start = 8 + header_len;
  const int64_t data_size = static_cast<int64_t>(file_size - data_start);
  for (auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return corrupt("__metadata__ is not an object");
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) return corrupt("__metadata__ value for '" + k + "' is not a string");
        f.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { return corrupt("tensor '" + name + "': " + what); };
    if (!entry.is_object()) return bad("entry is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string()) return bad("missing string field 'dtype'");
    if (sh == entry.end() || !sh->is_array()) return bad("missing array field 'shape'");
    if (off == entry.end() || !off->is_array() || off->size() != 2) {
      return bad("'data_offsets' must be [begin, end]");
    }
    SafetensorsTensor t;
    t.name = name;
    auto dtype = SafetensorsDType(dt->get<std::string>());
    if (!dtype.ok()) return dtype.status().WithContext(path + ": tensor '" + name + "'");
    t.dtype = *dtype;
    if (sh->size() > static_cast<size_t>(kMaxDims)) {
      return bad("has " + std::to_string(sh->size()) + " dimensions; at most " +
                 std::to_string(kMaxDims) + " are supported");
    }
    std::vector<int64_t> dims;
    int64_t numel = 1;
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) return bad("shape " + sh->dump() + " is not a list of sizes");
      const uint64_t u = d.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          MulOverflows(numel, static_cast<int64_t>(u), &numel)) {
        return bad("shape " + sh->dump() + " overflows");
      }
      dims.push_back(static_cast<int64_t>(u));
    }
    KILN_ASSIGN_OR_RETURN(t.shape, Shape::FromRange(dims));
    const json& b = (*off)[0];
    const json& e = (*off)[1];
    if (!b.is_number_unsigned() || !e.is_number_unsigned()) {
      return bad("data_offsets " + off->dump() + " are not byte offsets");
    }
    const uint64_t begin = b.get<uint64_t>();
    const uint64_t end = e.get<uint64_t>();
    if (begin > end || end > static_cast<uint64_t>(data_size)) {
      return bad("data_offsets " + off->dump() + " lie outside the " + std::to_string(data_size) +
                 "-byte data section (truncated file?)");
    }
    auto expected = DTypeByteSize(t.dtype, numel);
    if (!expected.ok()) return bad(expected.status().message());
    if (static_cast<uint64_t>(*expected) != end - begin) {
      return bad("shape " + t.shape.ToString() + " of " + std::string(DTypeName(t.dtype)) +
                 " needs " + std::to_string(*expected) + " bytes but data_offsets span " +
                 std::to_string(end - begin));
    }
    t.file_offset = static_cast<int64_t>(data_start + begin);
    t.nbytes = static_cast<int64_t>(end - begin);
    t.data = f.map_.data() + t.file_offset;
    f.tensors_.push_back(std::move(t));
  }

  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.file_offset != b.file_offset ? a.file_offset < b.file_offset
                                                    : a.nbytes < b.nbytes;
            });
  int64_t cursor = static_cast<int64_t>(data_start);
  for (size_t i = 0; i < f.tensors_.size(); ++i) {
    const SafetensorsTensor& t = f.tensors_[i];
    if (t.file_offset != cursor) {
      return corrupt("tensor '" + t.name + "' starts at data offset " +
                     std::to_string(t.file_offset - static_cast<int64_t>(data_start)) +
                     (t.file_offset < cursor ? ", overlapping the previous tensor"
                                             : ", leaving a hole after the previous tensor") +
                     " (expected " + std::to_string(cursor - static_cast<int64_t>(data_start)) +
                     ")");
    }
    cursor += t.nbytes;
    f.index_.emplace(t.name, i);
  }
  if (cursor != static_cast<int64_t>(file_size)) {
    return corrupt(std::to_string(static_cast<int64_t>(file_size) - cursor) +
                   " bytes after the last tensor are not described by the header");
  }
  return f;
}

}  // namespace kiln
