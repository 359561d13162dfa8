// GgufValue, GgufArray and the typed metadata getters of GgufFile.
#include <cstring>
#include <limits>
#include <sstream>

#include "model/gguf.h"

namespace kiln {
namespace {

bool IsUnsigned(GgufType t) {
  return t == GgufType::kUint8 || t == GgufType::kUint16 || t == GgufType::kUint32 ||
         t == GgufType::kUint64;
}

template <typename T>
T LoadLe(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Decodes a packed integer element as a (possibly out-of-int64-range) signed/unsigned pair.
struct IntElem {
  bool is_unsigned;
  uint64_t u;
  int64_t s;
};

IntElem DecodeInt(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kUint8:
      return {true, LoadLe<uint8_t>(p), 0};
    case GgufType::kUint16:
      return {true, LoadLe<uint16_t>(p), 0};
    case GgufType::kUint32:
      return {true, LoadLe<uint32_t>(p), 0};
    case GgufType::kUint64:
      return {true, LoadLe<uint64_t>(p), 0};
    case GgufType::kInt8:
      return {false, 0, LoadLe<int8_t>(p)};
    case GgufType::kInt16:
      return {false, 0, LoadLe<int16_t>(p)};
    case GgufType::kInt32:
      return {false, 0, LoadLe<int32_t>(p)};
    default:
      return {false, 0, LoadLe<int64_t>(p)};
  }
}

std::string Quote(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_chars) out += "...";
  return out + "\"";
}

std::string FormatDouble(double d) {
  std::ostringstream os;
  os.precision(9);
  os << d;
  return os.str();
}

}  // namespace

size_t GgufScalarSize(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool IsGgufIntegerType(GgufType t) {
  return IsUnsigned(t) || t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 ||
         t == GgufType::kInt64;
}

bool IsGgufFloatType(GgufType t) { return t == GgufType::kFloat32 || t == GgufType::kFloat64; }

// ---- GgufArray ---------------------------------------------------------------------------------

GgufArray GgufArray::Numeric(GgufType element_type, std::vector<uint8_t> le_bytes) {
  const size_t elem = GgufScalarSize(element_type);
  CHECK(elem != 0) << "GgufArray::Numeric with type " << GgufTypeName(element_type);
  CHECK(le_bytes.size() % elem == 0) << le_bytes.size() << " bytes for " << elem << "-byte items";
  GgufArray a;
  a.element_type_ = element_type;
  a.size_ = le_bytes.size() / elem;
  a.raw_ = std::move(le_bytes);
  return a;
}

GgufArray GgufArray::Strings(std::vector<std::string> strings) {
  GgufArray a;
  a.element_type_ = GgufType::kString;
  a.size_ = strings.size();
  a.strings_ = std::move(strings);
  return a;
}

GgufArray GgufArray::Arrays(std::vector<GgufArray> arrays) {
  GgufArray a;
  a.element_type_ = GgufType::kArray;
  a.size_ = arrays.size();
  a.arrays_ = std::move(arrays);
  return a;
}

std::optional<int64_t> GgufArray::IntAt(size_t i) const {
  if (i >= size_ || !IsGgufIntegerType(element_type_)) return std::nullopt;
  const IntElem e = DecodeInt(element_type_, raw_.data() + i * GgufScalarSize(element_type_));
  if (!e.is_unsigned) return e.s;
  if (e.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(e.u);
}

std::optional<double> GgufArray::FloatAt(size_t i) const {
  if (i >= size_) return std::nullopt;
  if (element_type_ == GgufType::kFloat32) return LoadLe<float>(raw_.data() + i * 4);
  if (element_type_ == GgufType::kFloat64) return LoadLe<double>(raw_.data() + i * 8);
  return std::nullopt;
}

std::optional<bool> GgufArray::BoolAt(size_t i) const {
  if (i >= size_ || element_type_ != GgufType::kBool) return std::nullopt;
  return raw_[i] != 0;
}

const std::string* GgufArray::StringAt(size_t i) const {
  if (i >= size_ || element_type_ != GgufType::kString) return nullptr;
  return &strings_[i];
}

const GgufArray* GgufArray::ArrayAt(size_t i) const {
  if (i >= size_ || element_type_ != GgufType::kArray) return nullptr;
  return &arrays_[i];
}

std::string GgufArray::TypeString() const {
  if (element_type_ == GgufType::kArray && !arrays_.empty()) {
    return "array<" + arrays_[0].TypeString() + ">";
  }
  return "array<" + std::string(GgufTypeName(element_type_)) + ">";
}

// ---- GgufValue ---------------------------------------------------------------------------------

GgufValue GgufValue::Uint(GgufType type, uint64_t v) {
  CHECK(IsUnsigned(type)) << GgufTypeName(type);
  GgufValue r;
  r.type_ = type;
  r.v_ = v;
  return r;
}

GgufValue GgufValue::Int(GgufType type, int64_t v) {
  CHECK(IsGgufIntegerType(type) && !IsUnsigned(type)) << GgufTypeName(type);
  GgufValue r;
  r.type_ = type;
  r.v_ = v;
  return r;
}

GgufValue GgufValue::Float(GgufType type, double v) {
  CHECK(IsGgufFloatType(type)) << GgufTypeName(type);
  GgufValue r;
  r.type_ = type;
  r.v_ = v;
  return r;
}

GgufValue GgufValue::Bool(bool v) {
  GgufValue r;
  r.type_ = GgufType::kBool;
  r.v_ = v;
  return r;
}

GgufValue GgufValue::String(std::string v) {
  GgufValue r;
  r.type_ = GgufType::kString;
  r.v_ = std::move(v);
  return r;
}

GgufValue GgufValue::Array(GgufArray v) {
  GgufValue r;
  r.type_ = GgufType::kArray;
  r.v_ = std::move(v);
  return r;
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (const int64_t* s = std::get_if<int64_t>(&v_)) return *s;
  if (const uint64_t* u = std::get_if<uint64_t>(&v_)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

std::optional<double> GgufValue::AsFloat() const {
  if (const double* d = std::get_if<double>(&v_)) return *d;
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (const bool* b = std::get_if<bool>(&v_)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::AsString() const { return std::get_if<std::string>(&v_); }

const GgufArray* GgufValue::AsArray() const { return std::get_if<GgufArray>(&v_); }

std::string GgufValue::TypeString() const {
  if (const GgufArray* a = AsArray()) return a->TypeString();
  return std::string(GgufTypeName(type_));
}

std::string GgufValue::ToString(size_t max_items) const {
  constexpr size_t kMaxChars = 64;
  if (const uint64_t* u = std::get_if<uint64_t>(&v_)) return std::to_string(*u);
  if (const int64_t* s = std::get_if<int64_t>(&v_)) return std::to_string(*s);
  if (const double* d = std::get_if<double>(&v_)) return FormatDouble(*d);
  if (const bool* b = std::get_if<bool>(&v_)) return *b ? "true" : "false";
  if (const std::string* str = AsString()) return Quote(*str, kMaxChars);
  const GgufArray& a = std::get<GgufArray>(v_);
  // NOTE: appended piecewise; `"[" + std::string(...)` trips a GCC 12 -Wrestrict false positive.
  std::string out = "[";
  out += GgufTypeName(a.element_type());
  out += " x ";
  out += std::to_string(a.size());
  for (size_t i = 0; i < a.size() && i < max_items; ++i) {
    out += i == 0 ? ": " : ", ";
    if (auto v = a.IntAt(i)) {
      out += std::to_string(*v);
    } else if (auto f = a.FloatAt(i)) {
      out += FormatDouble(*f);
    } else if (auto b = a.BoolAt(i)) {
      out += *b ? "true" : "false";
    } else if (const std::string* str = a.StringAt(i)) {
      out += Quote(*str, kMaxChars);
    } else if (const GgufArray* inner = a.ArrayAt(i)) {
      out += GgufValue::Array(*inner).ToString(max_items);
    } else {  // a uint64 element past INT64_MAX
      out += std::to_string(LoadLe<uint64_t>(a.raw_.data() + i * 8));
    }
  }
  if (a.size() > max_items) out += ", ...";
  return out + "]";
}

// ---- Typed getters -----------------------------------------------------------------------------

bool GgufFile::Has(std::string_view key) const { return key_index_.find(key) != key_index_.end(); }

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].value;
}

namespace {

Result<const GgufValue*> Lookup(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) {
    return NotFound(f.path() + ": metadata key '" + std::string(key) + "' not found");
  }
  return v;
}

Status WrongType(const GgufFile& f, std::string_view key, std::string_view expected,
                 const std::string& found) {
  return Corrupt(f.path() + ": metadata key '" + std::string(key) + "' has type " + found +
                 ", expected " + std::string(expected));
}

}  // namespace

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (!IsGgufIntegerType(v->type())) return WrongType(*this, key, "an integer", v->TypeString());
  if (std::optional<int64_t> i = v->AsInt()) return *i;
  return OutOfRange(path_ + ": metadata key '" + std::string(key) + "' = " + v->ToString() +
                    " does not fit in int64");
}

Result<uint32_t> GgufFile::GetUint32(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (!IsGgufIntegerType(v->type())) return WrongType(*this, key, "an integer", v->TypeString());
  std::optional<int64_t> i = v->AsInt();
  if (!i || *i < 0 || *i > static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
    return OutOfRange(path_ + ": metadata key '" + std::string(key) + "' = " + v->ToString() +
                      " is outside the uint32 range [0, 4294967295]");
  }
  return static_cast<uint32_t>(*i);
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (std::optional<double> d = v->AsFloat()) return *d;
  return WrongType(*this, key, "float32 or float64", v->TypeString());
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (std::optional<bool> b = v->AsBool()) return *b;
  return WrongType(*this, key, "bool", v->TypeString());
}

Result<std::string> GgufFile::GetString(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (const std::string* s = v->AsString()) return *s;
  return WrongType(*this, key, "string", v->TypeString());
}

Result<const GgufArray*> GgufFile::GetArray(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufValue* v, Lookup(*this, key));
  if (const GgufArray* a = v->AsArray()) return a;
  return WrongType(*this, key, "an array", v->TypeString());
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufArray* a, GetArray(key));
  if (a->element_type() != GgufType::kString) {
    return WrongType(*this, key, "array<string>", a->TypeString());
  }
  std::vector<std::string> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) out.push_back(*a->StringAt(i));
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufArray* a, GetArray(key));
  if (!IsGgufIntegerType(a->element_type())) {
    return WrongType(*this, key, "an array of integers", a->TypeString());
  }
  std::vector<int64_t> out(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    std::optional<int64_t> v = a->IntAt(i);
    if (!v) {
      return OutOfRange(path_ + ": metadata key '" + std::string(key) + "' element " +
                        std::to_string(i) + " does not fit in int64");
    }
    out[i] = *v;
  }
  return out;
}

Result<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  KILN_ASSIGN_OR_RETURN(const GgufArray* a, GetArray(key));
  if (!IsGgufFloatType(a->element_type())) {
    return WrongType(*this, key, "array<float32> or array<float64>", a->TypeString());
  }
  std::vector<double> out(a->size());
  for (size_t i = 0; i < a->size(); ++i) out[i] = *a->FloatAt(i);
  return out;
}

}  // namespace kiln
