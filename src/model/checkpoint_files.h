// Internal: the mapped files behind a Checkpoint. Not part of the public API.
#pragma once

#include <optional>
#include <vector>

#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace kiln {

struct Checkpoint::Files {
  std::vector<SafetensorsFile> safetensors;
};

}  // namespace kiln
