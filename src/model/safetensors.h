// SafetensorsFile: a memory-mapped .safetensors file (the HF weight format).
//
// Layout (https://huggingface.co/docs/safetensors):
//   [u64 little-endian N][N bytes of JSON header][data section]
//   header: {"__metadata__": {str: str}, "<name>": {"dtype": "BF16", "shape": [..],
//            "data_offsets": [begin, end]}, ...}   offsets are relative to the data section.
//
// Open() validates everything before any tensor is handed out: the header length against the
// file size, the JSON, each dtype, shape and offset pair, that each tensor's byte count equals
// numel * element size, and that the tensors tile the data section exactly (no overlap, no
// hole), as the safetensors library itself requires. Tensor data is never copied.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

struct SafetensorsTensor {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t file_offset;  // absolute offset of the first byte in the file
  int64_t nbytes;
  const uint8_t* data;  // points into the map; valid while the SafetensorsFile lives
};

class SafetensorsFile {
 public:
  // Largest header accepted (the safetensors library's own limit is 100 MB).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and validates `path`. Errors: NotFound/IoError from the OS; Corrupt for a malformed
  // file (the message names the path, the tensor and the offending number); Unsupported for a
  // dtype kiln cannot read (e.g. F8_E8M0).
  static Result<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  // In the order of their data offsets.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const SafetensorsTensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile map_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Maps a safetensors dtype string ("BF16", "F8_E4M3", ...) to a kiln DType.
Result<DType> SafetensorsDType(std::string_view name);
// The safetensors dtype string for a kiln dtype ("BF16"); Unsupported for block types.
Result<std::string_view> SafetensorsDTypeName(DType dtype);

}  // namespace kiln
