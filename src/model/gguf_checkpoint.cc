#include "model/checkpoint.h"

namespace kiln {

Result<Checkpoint> Checkpoint::OpenGguf(const std::string& file) {
  return Unsupported(file + ": GGUF checkpoints are not wired in yet");
}

}  // namespace kiln
