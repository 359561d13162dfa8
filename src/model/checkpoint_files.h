// Internal: the mapped files behind a Checkpoint. Not part of the public API.
#pragma once

#include <optional>
#include <vector>

#include "core/mapped_file.h"
#include "model/checkpoint.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace kiln {

struct Checkpoint::Files {
  std::vector<SafetensorsFile> safetensors;
  std::optional<GgufFile> gguf;
  std::optional<MappedFile> engine_weights;  // an engine directory's weights.bin
};

}  // namespace kiln
