// GGUF parsing and validation. Every read goes through GgufParser::Read*, which checks the
// bytes left first; every count is checked against the bytes left before anything is reserved.
#include "model/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <utility>

namespace kiln {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kMaxGgmlType = 41;

// Indexed by ggml type id (ggml.h enum ggml_type; sizes from ggml's type traits). Entries with
// an empty name are ids that were never used or were removed from ggml.
constexpr GgmlTypeInfo kGgmlTypes[kMaxGgmlType + 1] = {
    /* 0 */ {"f32", 1, 4, DType::kF32},
    /* 1 */ {"f16", 1, 2, DType::kF16},
    /* 2 */ {"q4_0", 32, 18, DType::kQ4_0},
    /* 3 */ {"q4_1", 32, 20, DType::kQ4_1},
    /* 4 */ {"", 0, 0, std::nullopt},  // q4_2, removed
    /* 5 */ {"", 0, 0, std::nullopt},  // q4_3, removed
    /* 6 */ {"q5_0", 32, 22, DType::kQ5_0},
    /* 7 */ {"q5_1", 32, 24, DType::kQ5_1},
    /* 8 */ {"q8_0", 32, 34, DType::kQ8_0},
    /* 9 */ {"q8_1", 32, 36, DType::kQ8_1},  // ggml's block_q8_1: f16 d, f16 s, 32 x int8
    /* 10 */ {"q2_k", 256, 84, DType::kQ2_K},
    /* 11 */ {"q3_k", 256, 110, DType::kQ3_K},
    /* 12 */ {"q4_k", 256, 144, DType::kQ4_K},
    /* 13 */ {"q5_k", 256, 176, DType::kQ5_K},
    /* 14 */ {"q6_k", 256, 210, DType::kQ6_K},
    /* 15 */ {"q8_k", 256, 292, DType::kQ8_K},
    /* 16 */ {"iq2_xxs", 256, 66, std::nullopt},
    /* 17 */ {"iq2_xs", 256, 74, std::nullopt},
    /* 18 */ {"iq3_xxs", 256, 98, std::nullopt},
    /* 19 */ {"iq1_s", 256, 50, std::nullopt},
    /* 20 */ {"iq4_nl", 32, 18, std::nullopt},
    /* 21 */ {"iq3_s", 256, 110, std::nullopt},
    /* 22 */ {"iq2_s", 256, 82, std::nullopt},
    /* 23 */ {"iq4_xs", 256, 136, std::nullopt},
    /* 24 */ {"i8", 1, 1, DType::kI8},
    /* 25 */ {"i16", 1, 2, DType::kI16},
    /* 26 */ {"i32", 1, 4, DType::kI32},
    /* 27 */ {"i64", 1, 8, DType::kI64},
    /* 28 */ {"f64", 1, 8, DType::kF64},
    /* 29 */ {"iq1_m", 256, 56, std::nullopt},
    /* 30 */ {"bf16", 1, 2, DType::kBF16},
    /* 31 */ {"", 0, 0, std::nullopt},  // q4_0_4_4, removed
    /* 32 */ {"", 0, 0, std::nullopt},  // q4_0_4_8, removed
    /* 33 */ {"", 0, 0, std::nullopt},  // q4_0_8_8, removed
    /* 34 */ {"tq1_0", 256, 54, std::nullopt},
    /* 35 */ {"tq2_0", 256, 66, std::nullopt},
    /* 36 */ {"", 0, 0, std::nullopt},  // iq4_nl_4_4, removed
    /* 37 */ {"", 0, 0, std::nullopt},  // iq4_nl_4_8, removed
    /* 38 */ {"", 0, 0, std::nullopt},  // iq4_nl_8_8, removed
    /* 39 */ {"mxfp4", 32, 17, std::nullopt},
    /* 40 */ {"nvfp4", 64, 36, std::nullopt},
    /* 41 */ {"q1_0", 128, 18, std::nullopt},
};

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(GgufType::kFloat64);

// Smallest encodings, used to bound counts by the bytes left before reserving memory.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, value type, a 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset
constexpr uint64_t kMinStringBytes = 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;

std::string Quoted(std::string_view s) {
  // Names in messages come from the file: cap their length and escape control bytes.
  constexpr size_t kMax = 96;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c < 0x20 || c == 0x7f) ? '?' : static_cast<char>(c);
  }
  if (s.size() > kMax) out += "...";
  return out + "'";
}

std::string ShapeOfNe(const std::array<int64_t, kGgufMaxDims>& ne, int n_dims) {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

}  // namespace

const GgmlTypeInfo* GetGgmlTypeInfo(uint32_t ggml_type) {
  if (ggml_type > kMaxGgmlType || kGgmlTypes[ggml_type].name.empty()) return nullptr;
  return &kGgmlTypes[ggml_type];
}

// Reads one GGUF image into a GgufFile. All messages are prefixed with the file name.
class GgufParser {
 public:
  // Parses file->bytes_ into *file.
  static Status Run(GgufFile* file) {
    // NOTE: allocation failures are the one exception the standard library can throw at us;
    // report them as a Status rather than terminating.
    try {
      return GgufParser(file).Parse();
    } catch (const std::bad_alloc&) {
      return ResourceExhausted(file->path_ + ": out of memory while reading the GGUF metadata");
    } catch (const std::length_error&) {
      return ResourceExhausted(file->path_ + ": GGUF metadata too large to hold in memory");
    }
  }

 private:
  explicit GgufParser(GgufFile* file) : bytes_(file->bytes_), name_(file->path_), file_(file) {}

  Status Parse() {
    KILN_RETURN_IF_ERROR(ParseHeader());
    KILN_RETURN_IF_ERROR(ParseMetadata());
    KILN_RETURN_IF_ERROR(ParseTensorInfos());
    KILN_RETURN_IF_ERROR(ParseAlignment());
    return PlaceTensors();
  }

  Status Fail(StatusCode code, const std::string& msg) const {
    return Status(code, name_ + ": " + msg);
  }
  Status Fail(const std::string& msg) const { return Fail(StatusCode::kCorrupt, msg); }

  uint64_t remaining() const { return bytes_.size() - pos_; }

  Status Need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return Fail("truncated: " + std::string(what) + " at byte " + std::to_string(pos_) +
                  " needs " + std::to_string(n) + " bytes but only " + std::to_string(remaining()) +
                  " remain (file size " + std::to_string(bytes_.size()) + ")");
    }
    return Status::Ok();
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    KILN_RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(std::string* out, std::string_view what) {
    uint64_t len = 0;
    KILN_RETURN_IF_ERROR(Read(&len, what));
    if (len > remaining()) {
      return Fail("truncated or corrupt: " + std::string(what) + " claims a length of " +
                  std::to_string(len) + " bytes at byte " + std::to_string(pos_ - 8) +
                  " but only " + std::to_string(remaining()) + " bytes remain");
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::Ok();
  }

  Status ReadValueType(GgufType* out, const std::string& what) {
    const size_t at = pos_;
    uint32_t id = 0;
    KILN_RETURN_IF_ERROR(Read(&id, what));
    if (id > kMaxValueType) {
      return Fail(what + " is " + std::to_string(id) + " at byte " + std::to_string(at) +
                  ", which is not a GGUF value type (0..12)");
    }
    *out = static_cast<GgufType>(id);
    return Status::Ok();
  }

  Status ParseHeader() {
    if (bytes_.size() < 4) {
      return Fail("too small to be a GGUF file (" + std::to_string(bytes_.size()) + " bytes)");
    }
    uint32_t magic = 0;
    KILN_RETURN_IF_ERROR(Read(&magic, "magic"));
    if (magic != kGgufMagic) {
      std::string found;
      for (int i = 0; i < 4; ++i) {
        const char c = static_cast<char>(bytes_[i]);
        found += (c >= 0x20 && c < 0x7f) ? c : '?';
      }
      return Fail("not a GGUF file: magic is '" + found + "', expected 'GGUF'");
    }
    uint32_t version = 0;
    KILN_RETURN_IF_ERROR(Read(&version, "version"));
    if (version == 1) {
      return Fail(StatusCode::kUnsupported,
                  "GGUF version 1 is not supported (kiln reads versions 2 and 3); re-convert "
                  "the model with a current llama.cpp");
    }
    if (version != 2 && version != 3) {
      if ((version & 0xffffu) == 0 && (version >> 16) != 0 && __builtin_bswap32(version) <= 3) {
        return Fail(StatusCode::kUnsupported,
                    "big-endian GGUF (version " + std::to_string(__builtin_bswap32(version)) +
                        ") is not supported; kiln reads little-endian files only");
      }
      return Fail(StatusCode::kUnsupported, "GGUF version " + std::to_string(version) +
                                                " is not supported (kiln reads versions 2 and 3)");
    }
    file_->version_ = version;
    KILN_RETURN_IF_ERROR(Read(&tensor_count_, "tensor count"));
    KILN_RETURN_IF_ERROR(Read(&kv_count_, "metadata count"));
    if (kv_count_ > remaining() / kMinKvBytes) {
      return Fail("metadata count " + std::to_string(kv_count_) +
                  " is impossible: " + std::to_string(remaining()) +
                  " bytes remain and an entry takes at least " + std::to_string(kMinKvBytes));
    }
    if (tensor_count_ > remaining() / kMinTensorInfoBytes) {
      return Fail("tensor count " + std::to_string(tensor_count_) + " is impossible: " +
                  std::to_string(remaining()) + " bytes remain and a tensor info takes at least " +
                  std::to_string(kMinTensorInfoBytes));
    }
    return Status::Ok();
  }

  Status ParseMetadata() {
    file_->metadata_.reserve(static_cast<size_t>(kv_count_));
    for (uint64_t i = 0; i < kv_count_; ++i) {
      GgufKeyValue kv;
      KILN_RETURN_IF_ERROR(ReadString(&kv.key, "key of metadata entry " + std::to_string(i)));
      const std::string what = "metadata key " + Quoted(kv.key);
      if (file_->key_index_.count(kv.key) != 0) {
        return Fail("duplicate " + what + " (entries " + std::to_string(file_->key_index_[kv.key]) +
                    " and " + std::to_string(i) + ")");
      }
      GgufType type;
      KILN_RETURN_IF_ERROR(ReadValueType(&type, "value type of " + what));
      KILN_RETURN_IF_ERROR(ReadValue(type, what, &kv.value));
      file_->key_index_.emplace(kv.key, file_->metadata_.size());
      file_->metadata_.push_back(std::move(kv));
    }
    return Status::Ok();
  }

  Status ReadValue(GgufType type, const std::string& what, GgufValue* out) {
    switch (type) {
      case GgufType::kUint8:
        return ReadScalar<uint8_t>(what, out, type);
      case GgufType::kInt8:
        return ReadScalar<int8_t>(what, out, type);
      case GgufType::kUint16:
        return ReadScalar<uint16_t>(what, out, type);
      case GgufType::kInt16:
        return ReadScalar<int16_t>(what, out, type);
      case GgufType::kUint32:
        return ReadScalar<uint32_t>(what, out, type);
      case GgufType::kInt32:
        return ReadScalar<int32_t>(what, out, type);
      case GgufType::kUint64:
        return ReadScalar<uint64_t>(what, out, type);
      case GgufType::kInt64:
        return ReadScalar<int64_t>(what, out, type);
      case GgufType::kFloat32:
        return ReadScalar<float>(what, out, type);
      case GgufType::kFloat64:
        return ReadScalar<double>(what, out, type);
      case GgufType::kBool: {
        uint8_t b = 0;
        const size_t at = pos_;
        KILN_RETURN_IF_ERROR(Read(&b, what));
        if (b > 1) {
          return Fail(what + ": bool byte at " + std::to_string(at) + " is " + std::to_string(b) +
                      ", expected 0 or 1");
        }
        *out = GgufValue::Bool(b != 0);
        return Status::Ok();
      }
      case GgufType::kString: {
        std::string s;
        KILN_RETURN_IF_ERROR(ReadString(&s, what));
        *out = GgufValue::String(std::move(s));
        return Status::Ok();
      }
      case GgufType::kArray: {
        GgufArray a;
        KILN_RETURN_IF_ERROR(ReadArray(/*depth=*/1, what, &a));
        *out = GgufValue::Array(std::move(a));
        return Status::Ok();
      }
    }
    return Fail(what + ": bad value type");  // unreachable: ReadValueType checked the id
  }

  template <typename T>
  Status ReadScalar(const std::string& what, GgufValue* out, GgufType type) {
    T v{};
    KILN_RETURN_IF_ERROR(Read(&v, what));
    if constexpr (std::is_floating_point_v<T>) {
      *out = GgufValue::Float(type, static_cast<double>(v));
    } else if constexpr (std::is_signed_v<T>) {
      *out = GgufValue::Int(type, static_cast<int64_t>(v));
    } else {
      *out = GgufValue::Uint(type, static_cast<uint64_t>(v));
    }
    return Status::Ok();
  }

  // `depth` counts the arrays enclosing this one, itself included (a top-level array is 1).
  Status ReadArray(int depth, const std::string& what, GgufArray* out) {
    if (depth > GgufFile::kMaxArrayDepth) {
      return Fail(what + ": arrays nested more than " + std::to_string(GgufFile::kMaxArrayDepth) +
                  " levels deep at byte " + std::to_string(pos_));
    }
    GgufType elem;
    KILN_RETURN_IF_ERROR(ReadValueType(&elem, "array element type of " + what));
    uint64_t count = 0;
    const size_t count_at = pos_;
    KILN_RETURN_IF_ERROR(Read(&count, "array length of " + what));
    const size_t scalar = GgufScalarSize(elem);
    const uint64_t min_bytes = scalar != 0                 ? scalar
                               : elem == GgufType::kString ? kMinStringBytes
                                                           : kMinArrayBytes;
    if (count > remaining() / min_bytes) {
      return Fail(what + ": array of " + std::to_string(count) + " " +
                  std::string(GgufTypeName(elem)) + " elements (length at byte " +
                  std::to_string(count_at) + ") cannot fit in the " + std::to_string(remaining()) +
                  " bytes that remain");
    }
    const size_t n = static_cast<size_t>(count);
    if (scalar != 0) {
      const uint8_t* p = bytes_.data() + pos_;
      std::vector<uint8_t> raw(p, p + n * scalar);
      if (elem == GgufType::kBool) {
        for (size_t i = 0; i < n; ++i) {
          if (raw[i] > 1) {
            return Fail(what + ": bool element " + std::to_string(i) + " at byte " +
                        std::to_string(pos_ + i) + " is " + std::to_string(raw[i]) +
                        ", expected 0 or 1");
          }
        }
      }
      pos_ += n * scalar;
      *out = GgufArray::Numeric(elem, std::move(raw));
    } else if (elem == GgufType::kString) {
      std::vector<std::string> strings(n);
      for (size_t i = 0; i < n; ++i) {
        KILN_RETURN_IF_ERROR(ReadString(&strings[i], what + " element " + std::to_string(i)));
      }
      *out = GgufArray::Strings(std::move(strings));
    } else {
      std::vector<GgufArray> arrays(n);
      for (size_t i = 0; i < n; ++i) {
        KILN_RETURN_IF_ERROR(
            ReadArray(depth + 1, what + "[" + std::to_string(i) + "]", &arrays[i]));
      }
      *out = GgufArray::Arrays(std::move(arrays));
    }
    return Status::Ok();
  }

  Status ParseTensorInfos() {
    file_->tensors_.reserve(static_cast<size_t>(tensor_count_));
    for (uint64_t i = 0; i < tensor_count_; ++i) {
      GgufTensor t;
      KILN_RETURN_IF_ERROR(ReadString(&t.name, "name of tensor " + std::to_string(i)));
      const std::string what = "tensor " + Quoted(t.name);
      if (file_->tensor_index_.count(t.name) != 0) {
        return Fail("duplicate " + what + " (tensors " +
                    std::to_string(file_->tensor_index_[t.name]) + " and " + std::to_string(i) +
                    ")");
      }
      uint32_t n_dims = 0;
      KILN_RETURN_IF_ERROR(Read(&n_dims, "n_dims of " + what));
      if (n_dims > kGgufMaxDims) {
        return Fail(what + ": n_dims is " + std::to_string(n_dims) + ", more than the maximum " +
                    std::to_string(kGgufMaxDims));
      }
      t.n_dims = static_cast<int>(n_dims);
      for (int d = 0; d < t.n_dims; ++d) {
        uint64_t ne = 0;
        KILN_RETURN_IF_ERROR(Read(&ne, "dimensions of " + what));
        if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Fail(what + ": ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                      " does not fit in int64");
        }
        t.ne[d] = static_cast<int64_t>(ne);
      }
      KILN_RETURN_IF_ERROR(Read(&t.ggml_type, "ggml type of " + what));
      KILN_RETURN_IF_ERROR(Read(&t.offset, "data offset of " + what));
      KILN_RETURN_IF_ERROR(SizeTensor(what, &t));
      file_->tensor_index_.emplace(t.name, file_->tensors_.size());
      file_->tensors_.push_back(std::move(t));
    }
    header_end_ = pos_;
    return Status::Ok();
  }

  // Sets type fields, shape, num_elements and num_bytes from ne and ggml_type.
  Status SizeTensor(const std::string& what, GgufTensor* t) const {
    const GgmlTypeInfo* info = GetGgmlTypeInfo(t->ggml_type);
    if (info == nullptr) {
      return Fail(StatusCode::kUnsupported,
                  what + " has ggml type id " + std::to_string(t->ggml_type) +
                      ", which is unknown or was removed from ggml (newer file than this reader?)");
    }
    t->type_name = info->name;
    t->dtype = info->dtype;
    int64_t elements = 1;
    for (int d = 0; d < t->n_dims; ++d) {
      if (__builtin_mul_overflow(elements, t->ne[d], &elements)) {
        return Fail(what + ": element count of shape ne=" + ShapeOfNe(t->ne, t->n_dims) +
                    " overflows int64");
      }
    }
    if (t->ne[0] % info->block_size != 0) {
      return Fail(what + ": innermost dimension ne[0] = " + std::to_string(t->ne[0]) +
                  " is not a multiple of the " + std::string(info->name) + " block size " +
                  std::to_string(info->block_size));
    }
    int64_t bytes = 0;
    if (__builtin_mul_overflow(elements / info->block_size, int64_t{info->block_bytes}, &bytes)) {
      return Fail(what + ": byte size of shape ne=" + ShapeOfNe(t->ne, t->n_dims) + " of " +
                  std::string(info->name) + " overflows int64");
    }
    t->num_elements = elements;
    t->num_bytes = static_cast<uint64_t>(bytes);
    std::array<int64_t, kGgufMaxDims> reversed{};
    for (int d = 0; d < t->n_dims; ++d) reversed[d] = t->ne[t->n_dims - 1 - d];
    Result<Shape> shape = Shape::FromRange(std::span<const int64_t>(reversed.data(), t->n_dims));
    if (!shape.ok()) return Fail(what + ": " + shape.status().message());
    t->shape = *shape;
    return Status::Ok();
  }

  Status ParseAlignment() {
    const GgufValue* v = file_->Find("general.alignment");
    if (v == nullptr) return Status::Ok();
    if (!IsGgufIntegerType(v->type())) {
      return Fail("metadata key 'general.alignment' has type " + v->TypeString() +
                  ", expected uint32");
    }
    const std::optional<int64_t> a = v->AsInt();
    if (!a || *a <= 0 || *a > int64_t{std::numeric_limits<uint32_t>::max()} ||
        !std::has_single_bit(static_cast<uint64_t>(*a))) {
      return Fail("metadata key 'general.alignment' = " + v->ToString() +
                  " is not a power of two in [1, 2^31]");
    }
    file_->alignment_ = static_cast<uint64_t>(*a);
    return Status::Ok();
  }

  Status PlaceTensors() {
    const uint64_t align = file_->alignment_;
    const uint64_t size = bytes_.size();
    // header_end_ <= size < 2^63 and align <= 2^31: this cannot overflow.
    const uint64_t data_offset = (header_end_ + align - 1) / align * align;
    file_->data_offset_ = data_offset;
    if (tensor_count_ == 0) return Status::Ok();
    if (data_offset > size) {
      return Fail("truncated: the file ends at byte " + std::to_string(size) +
                  ", before its data section, which starts at byte " + std::to_string(data_offset));
    }
    const uint64_t data_size = size - data_offset;
    std::vector<size_t> with_data;
    for (size_t i = 0; i < file_->tensors_.size(); ++i) {
      GgufTensor& t = file_->tensors_[i];
      const std::string what = "tensor " + Quoted(t.name);
      if (t.offset % align != 0) {
        return Fail(what + ": data offset " + std::to_string(t.offset) +
                    " is not a multiple of the alignment " + std::to_string(align));
      }
      if (t.offset > data_size || t.num_bytes > data_size - t.offset) {
        return Fail(what + ": its " + std::to_string(t.num_bytes) + " bytes at data offset " +
                    std::to_string(t.offset) + " end past the data section of " +
                    std::to_string(data_size) + " bytes (truncated file?)");
      }
      t.file_offset = data_offset + t.offset;
      t.data = bytes_.data() + t.file_offset;
      if (t.num_bytes > 0) with_data.push_back(i);
    }
    std::sort(with_data.begin(), with_data.end(), [&](size_t a, size_t b) {
      return file_->tensors_[a].offset < file_->tensors_[b].offset;
    });
    for (size_t k = 1; k < with_data.size(); ++k) {
      const GgufTensor& prev = file_->tensors_[with_data[k - 1]];
      const GgufTensor& next = file_->tensors_[with_data[k]];
      if (prev.offset + prev.num_bytes > next.offset) {
        return Fail("tensor " + Quoted(prev.name) + " (data offset " + std::to_string(prev.offset) +
                    ", " + std::to_string(prev.num_bytes) + " bytes) overlaps tensor " +
                    Quoted(next.name) + " (data offset " + std::to_string(next.offset) + ")");
      }
    }
    return Status::Ok();
  }

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  GgufFile* file_;
  size_t pos_ = 0;
  uint64_t tensor_count_ = 0;
  uint64_t kv_count_ = 0;
  uint64_t header_end_ = 0;
};

Result<GgufFile> GgufFile::Open(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(MappedFile map, MappedFile::Open(path));
  GgufFile file;
  file.path_ = path;
  file.map_ = std::move(map);
  file.bytes_ = file.map_.bytes();
  KILN_RETURN_IF_ERROR(GgufParser::Run(&file));
  return file;
}

Result<GgufFile> GgufFile::OpenFromBytes(std::span<const uint8_t> bytes, std::string name) {
  GgufFile file;
  file.path_ = std::move(name);
  file.bytes_ = bytes;
  KILN_RETURN_IF_ERROR(GgufParser::Run(&file));
  return file;
}

// ---- Tensors -----------------------------------------------------------------------------------

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<const GgufTensor*> GgufFile::GetTensor(std::string_view name) const {
  const GgufTensor* t = FindTensor(name);
  if (t == nullptr) {
    return NotFound(path_ + ": tensor " + Quoted(name) + " not found (the file has " +
                    std::to_string(tensors_.size()) + " tensors)");
  }
  return t;
}

Result<DType> GgufFile::TensorDType(const GgufTensor& tensor) const {
  if (tensor.dtype.has_value()) return *tensor.dtype;
  return Unsupported(path_ + ": tensor " + Quoted(tensor.name) + " has ggml type " +
                     std::string(tensor.type_name) + " (id " + std::to_string(tensor.ggml_type) +
                     "), which kiln cannot load");
}

}  // namespace kiln
