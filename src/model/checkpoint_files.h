// Internal: the mapped files behind a Checkpoint. Not part of the public API.
#pragma once

#include <optional>
#include <vector>

#include "model/checkpoint.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace kiln {

struct Checkpoint::Files {
  std::vector<SafetensorsFile> safetensors;
  std::optional<GgufFile> gguf;
};

}  // namespace kiln
