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
  // Weights converted at open (AutoAWQ / GPTQ packed codes in kiln's W4A16 layout).
  std::vector<std::vector<uint8_t>> converted;
};

}  // namespace kiln
