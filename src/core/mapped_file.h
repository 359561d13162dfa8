// MappedFile: a read-only memory map of a whole file. Model weights are viewed straight out of
// the map (no copies); the map must outlive every view into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace kiln {

class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only. NotFound when it does not exist, IoError when it cannot be opened or
  // mapped (the message names the path and the OS error). An empty file maps to an empty span.
  static Result<MappedFile> Open(const std::string& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void Unmap();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace kiln
