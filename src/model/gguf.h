// GGUF reader: memory-maps a GGUF v2/v3 file, parses and validates its header, metadata and
// tensor table, and exposes tensors as views into the map (no copies of tensor data).
//
// File layout (little-endian; docs/formats.md "GGUF" has the accept/reject rules):
//
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x   { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to `general.alignment` (default 32)
//   data section: tensor i occupies [data_offset + offset_i, ... + num_bytes_i)
//
//   string = u64 length | bytes (no terminator); array = u32 element_type | u64 count | elements
//
// Shapes: GGUF lists `ne` innermost first (ne[0] is the contiguous dimension); kiln shapes are
// row-major, so kiln shape = ne reversed. A GGUF tensor with ne = [576, 49152] has kiln shape
// {49152, 576}.
//
// Every read is bounds-checked and every count is checked against the bytes that remain before
// anything is allocated, so a corrupt or hostile file yields a Status, never a crash.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

// ---- Metadata values --------------------------------------------------------------------------

// GGUF metadata value types, with their on-disk ids.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint8", "int32", "float32", "bool", "string", "array", ...; "unknown" for other values.
std::string_view GgufTypeName(GgufType type);
bool IsGgufIntegerType(GgufType type);
// Bytes of one number or bool value; 0 for string, array and unknown types.
size_t GgufScalarSize(GgufType type);
bool IsGgufFloatType(GgufType type);

// An array value: an element type and `size()` elements. Numeric and bool elements are kept
// packed as in the file (a 49152-entry int32 array takes 196 KB, not 49152 variants).
class GgufArray {
 public:
  GgufArray() = default;
  // REQUIRES: element_type is a number or bool type and le_bytes.size() is a multiple of its
  // size (CHECKed). Bool bytes must be 0 or 1.
  static GgufArray Numeric(GgufType element_type, std::vector<uint8_t> le_bytes);
  static GgufArray Strings(std::vector<std::string> strings);
  static GgufArray Arrays(std::vector<GgufArray> arrays);

  GgufType element_type() const { return element_type_; }
  size_t size() const { return size_; }

  // Element i, when it has the asked-for kind. nullopt / nullptr when i >= size(), the element
  // type is another kind, or (IntAt) a uint64 element exceeds INT64_MAX.
  std::optional<int64_t> IntAt(size_t i) const;   // any integer element type
  std::optional<double> FloatAt(size_t i) const;  // float32 or float64 (exact)
  std::optional<bool> BoolAt(size_t i) const;
  const std::string* StringAt(size_t i) const;
  const GgufArray* ArrayAt(size_t i) const;

  // "array<int32>", "array<array<string>>" (nesting shown from the first inner array).
  std::string TypeString() const;

 private:
  friend class GgufValue;
  GgufType element_type_ = GgufType::kUint8;
  size_t size_ = 0;
  std::vector<uint8_t> raw_;          // numbers and bools, little-endian, packed
  std::vector<std::string> strings_;  // element_type_ == kString
  std::vector<GgufArray> arrays_;     // element_type_ == kArray
};

// One metadata value: a scalar, a string or an array.
class GgufValue {
 public:
  GgufValue() = default;  // uint8 0
  // REQUIRES: `type` is an unsigned / signed / float type respectively (CHECKed); the value is
  // stored as given (callers keep it inside the type's range).
  static GgufValue Uint(GgufType type, uint64_t v);
  static GgufValue Int(GgufType type, int64_t v);
  static GgufValue Float(GgufType type, double v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue Array(GgufArray v);

  GgufType type() const { return type_; }
  // Present when the value has the asked-for kind (and, for AsInt, fits in int64).
  std::optional<int64_t> AsInt() const;   // any integer type
  std::optional<double> AsFloat() const;  // float32 or float64
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;  // nullptr unless a string
  const GgufArray* AsArray() const;     // nullptr unless an array

  // "uint32", "string", "array<string>", ...
  std::string TypeString() const;
  // A short human-readable rendering for `kiln inspect`: 576, 1e-05, "llama",
  // [string x 49152: "<|endoftext|>", "<|im_start|>", ...]. At most max_items array elements
  // and 64 characters per string are shown.
  std::string ToString(size_t max_items = 4) const;

 private:
  GgufType type_ = GgufType::kUint8;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v_ = uint64_t{0};
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

// ---- ggml tensor types -------------------------------------------------------------------------

// Properties of a ggml tensor type id as used in GGUF tensor infos.
struct GgmlTypeInfo {
  std::string_view name;       // "f32", "q4_k", "iq2_xxs", ...
  int block_size;              // elements per block
  int block_bytes;             // bytes per block
  std::optional<DType> dtype;  // the kiln dtype, or nullopt when kiln has none (IQ*, TQ*, ...)
};

// The info for a ggml type id, or nullptr for ids that are unknown or were removed from ggml
// (4, 5, 31-33, 36-38, > 41).
const GgmlTypeInfo* GetGgmlTypeInfo(uint32_t ggml_type);

// ---- Tensors -----------------------------------------------------------------------------------

inline constexpr int kGgufMaxDims = 4;  // GGML_MAX_DIMS

struct GgufTensor {
  std::string name;
  uint32_t ggml_type = 0;      // raw id from the file
  std::string_view type_name;  // GetGgmlTypeInfo(ggml_type)->name
  std::optional<DType> dtype;  // nullopt when kiln has no DType for the ggml type
  int n_dims = 0;              // 0..kGgufMaxDims, as in the file
  std::array<int64_t, kGgufMaxDims> ne{1, 1, 1, 1};  // GGUF order, ne[0] innermost
  Shape shape;  // kiln row-major order: ne[n_dims-1], ..., ne[0]
  int64_t num_elements = 0;
  uint64_t offset = 0;       // relative to the data section, as stored
  uint64_t file_offset = 0;  // absolute byte offset of the data in the file
  uint64_t num_bytes = 0;
  // num_bytes bytes inside the file's map, valid while the GgufFile lives. For a tensor with
  // zero elements it must not be dereferenced.
  const uint8_t* data = nullptr;
};

// ---- The file ----------------------------------------------------------------------------------

// An opened, fully validated GGUF file. Immutable after Open; safe to read from many threads.
// Moving a GgufFile keeps every GgufTensor::data pointer valid (the map does not move).
//
// Invariants after a successful Open:
//   - keys and tensor names are unique;
//   - every tensor's ggml type is known (GetGgmlTypeInfo != nullptr), ne[i] >= 0, ne[0] is a
//     multiple of the type's block size, the element and byte counts fit in int64;
//   - every tensor's offset is a multiple of alignment(), its bytes lie inside the data section,
//     and no two tensors with data overlap.
class GgufFile {
 public:
  // Memory-maps and parses `path`. On failure:
  //   NotFound / IoError   the file cannot be opened or mapped;
  //   Corrupt              bad magic, truncation, bad counts, bad value or ggml type ids, nesting
  //                        deeper than kMaxArrayDepth, duplicate keys or tensor names, bad
  //                        alignment, misaligned / out-of-range / overlapping tensor data, bad
  //                        dims, wrong metadata type for general.alignment;
  //   Unsupported          GGUF v1, versions > 3, big-endian files, unknown ggml type ids;
  //   ResourceExhausted    memory ran out while building the metadata.
  // Every message starts with the path and names the key or tensor and the offending number.
  static Result<GgufFile> Open(const std::string& path);

  // Parses GGUF bytes held by the caller; `name` stands for the path in messages. Used by tests
  // and fuzzing (a heap buffer lets AddressSanitizer see reads past its end, a map does not).
  // REQUIRES: `bytes` outlives the returned GgufFile.
  static Result<GgufFile> OpenFromBytes(std::span<const uint8_t> bytes, std::string name);

  static constexpr int kMaxArrayDepth = 8;  // arrays nested deeper than this are Corrupt
  static constexpr uint64_t kDefaultAlignment = 32;

  GgufFile(GgufFile&&) = default;
  GgufFile& operator=(GgufFile&&) = default;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file
  uint64_t file_size() const { return bytes_.size(); }
  // The whole file (the map, or the caller's bytes for OpenFromBytes).
  std::span<const uint8_t> file_bytes() const { return bytes_; }

  // ---- Metadata ----
  // All key-value pairs in file order.
  const std::vector<GgufKeyValue>& metadata() const { return metadata_; }
  bool Has(std::string_view key) const;
  // nullptr when absent.
  const GgufValue* Find(std::string_view key) const;

  // Typed getters. Failures: NotFound when the key is absent; Corrupt when it has another type
  // (the message names the file, the key, the expected and the found type); OutOfRange when an
  // integer does not fit the requested type (the message gives the value).
  Result<int64_t> GetInt(std::string_view key) const;      // any integer type
  Result<uint32_t> GetUint32(std::string_view key) const;  // any integer type in [0, 2^32)
  Result<double> GetFloat(std::string_view key) const;     // float32 or float64
  Result<bool> GetBool(std::string_view key) const;
  Result<std::string> GetString(std::string_view key) const;
  Result<const GgufArray*> GetArray(std::string_view key) const;  // pointer into this file
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;   // integer elements
  Result<std::vector<double>> GetFloatArray(std::string_view key) const;  // float32/64 elements

  // ---- Tensors ----
  // All tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensor* FindTensor(std::string_view name) const;
  // NotFound (naming the file and tensor) when absent.
  Result<const GgufTensor*> GetTensor(std::string_view name) const;
  // The tensor's kiln dtype; Unsupported naming the file, the tensor and the ggml type when
  // kiln has no dtype for it (IQ*, TQ*, MXFP4, ...). Such files still open, so they can be
  // inspected.
  Result<DType> TensorDType(const GgufTensor& tensor) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  MappedFile map_;                  // empty for OpenFromBytes
  std::span<const uint8_t> bytes_;  // the whole file
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> metadata_;
  std::map<std::string, size_t, std::less<>> key_index_;  // key -> index in metadata_
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> index in tensors_
};

}  // namespace kiln
