// Test helpers: builds GGUF images byte by byte, so tests control every field (and can break
// any of them). Test-only; not part of kiln_model.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf.h"

namespace kiln::testing {

using Bytes = std::vector<uint8_t>;

template <typename T>
void Put(Bytes* b, T v) {
  const size_t at = b->size();
  b->resize(at + sizeof(T));
  std::memcpy(b->data() + at, &v, sizeof(T));
}

inline void PutStr(Bytes* b, std::string_view s) {
  Put<uint64_t>(b, s.size());
  b->insert(b->end(), s.begin(), s.end());
}

// Encodes a metadata value payload (what follows the u32 value type).
struct Value {
  GgufType type;
  Bytes payload;
};

template <typename T>
Value Scalar(GgufType type, T v) {
  Value r{type, {}};
  Put<T>(&r.payload, v);
  return r;
}
inline Value Str(std::string_view s) {
  Value r{GgufType::kString, {}};
  PutStr(&r.payload, s);
  return r;
}
// An array whose elements are given as already-encoded payloads of `elem` type.
inline Value Array(GgufType elem, const std::vector<Value>& items) {
  Value r{GgufType::kArray, {}};
  Put<uint32_t>(&r.payload, static_cast<uint32_t>(elem));
  Put<uint64_t>(&r.payload, items.size());
  for (const Value& v : items)
    r.payload.insert(r.payload.end(), v.payload.begin(), v.payload.end());
  return r;
}
template <typename T>
Value NumArray(GgufType elem, std::initializer_list<T> items) {
  std::vector<Value> v;
  for (T x : items) v.push_back(Scalar<T>(elem, x));
  return Array(elem, v);
}
inline Value StrArray(std::initializer_list<std::string_view> items) {
  std::vector<Value> v;
  for (std::string_view s : items) v.push_back(Str(s));
  return Array(GgufType::kString, v);
}
// `depth` arrays nested inside each other around a single int32 7.
inline Value Nested(int depth) {
  Value v = NumArray<int32_t>(GgufType::kInt32, {7});
  for (int i = 1; i < depth; ++i) v = Array(GgufType::kArray, {v});
  return v;
}

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> ne;  // GGUF order (innermost first)
  uint32_t ggml_type = 0;
  Bytes data;
  std::optional<uint64_t> offset;  // default: packed after the previous tensor, aligned
};

// Builds a GGUF image. Records the byte positions of every u32/u64 header field it writes
// (counts, lengths, types, dims, offsets) so mutation tests can aim at them.
class GgufBuilder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // layout only; add "general.alignment" as a KV to declare it
  std::vector<std::pair<std::string, Value>> kvs;
  std::vector<TensorSpec> tensors;
  // Filled by Build(): positions of u32 (size 4) and u64 (size 8) fields.
  std::vector<std::pair<size_t, int>> fields;

  GgufBuilder& Kv(std::string key, Value v) {
    kvs.emplace_back(std::move(key), std::move(v));
    return *this;
  }
  GgufBuilder& Tensor(std::string name, std::vector<uint64_t> ne, uint32_t ggml_type, Bytes data,
                      std::optional<uint64_t> offset = std::nullopt) {
    tensors.push_back({std::move(name), std::move(ne), ggml_type, std::move(data), offset});
    return *this;
  }

  Bytes Build() {
    fields.clear();
    Bytes b = {'G', 'G', 'U', 'F'};
    Field32(&b, version);
    Field64(&b, tensors.size());
    Field64(&b, kvs.size());
    for (const auto& [key, v] : kvs) {
      Field64(&b, key.size());
      b.insert(b.end(), key.begin(), key.end());
      Field32(&b, static_cast<uint32_t>(v.type));
      b.insert(b.end(), v.payload.begin(), v.payload.end());
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const TensorSpec& t : tensors) {
      const uint64_t off = t.offset.value_or(next);
      offsets.push_back(off);
      next = Align(std::max(next, off + t.data.size()));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorSpec& t = tensors[i];
      Field64(&b, t.name.size());
      b.insert(b.end(), t.name.begin(), t.name.end());
      Field32(&b, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) Field64(&b, d);
      Field32(&b, t.ggml_type);
      Field64(&b, offsets[i]);
    }
    if (tensors.empty()) return b;
    const size_t data_start = Align(b.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].data.empty()) continue;
      const size_t at = data_start + offsets[i];
      if (b.size() < at + tensors[i].data.size()) b.resize(at + tensors[i].data.size(), 0);
      std::memcpy(b.data() + at, tensors[i].data.data(), tensors[i].data.size());
    }
    b.resize(Align(b.size()), 0);
    return b;
  }

 private:
  uint64_t Align(uint64_t x) const { return (x + alignment - 1) / alignment * alignment; }
  void Field32(Bytes* b, uint32_t v) {
    fields.emplace_back(b->size(), 4);
    Put<uint32_t>(b, v);
  }
  void Field64(Bytes* b, uint64_t v) {
    fields.emplace_back(b->size(), 8);
    Put<uint64_t>(b, v);
  }
};

// Deterministic filler bytes for tensor data.
inline Bytes Filler(size_t n, uint32_t seed) {
  Bytes b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b[i] = static_cast<uint8_t>(x);
  }
  return b;
}

inline bool WriteFile(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(f);
}

}  // namespace kiln::testing
