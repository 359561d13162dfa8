// Writing HF safetensors checkpoints: the file layout, shard planning, the shard index, and a
// writer that fills pre-sized shard files from many threads at once.
//
// A safetensors file (https://github.com/huggingface/safetensors, "Format"):
//
//   +----------+---------------------------------+-------------------------------------+
//   | u64 LE N | N bytes of JSON header          | data: tensors back to back, no gaps |
//   +----------+---------------------------------+-------------------------------------+
//   header = {"__metadata__": {"format": "pt"},
//             "<name>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]},
//             ...}
//
// data_offsets are relative to the start of the data section; the header is padded with
// spaces so that the data section starts at a multiple of 8. A checkpoint that needs several
// files names them model-00001-of-0000N.safetensors and adds model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {"<name>": "<file>"}}); one that fits in
// one file is a single model.safetensors without an index, as HF transformers writes them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

// HF's default max_shard_size ("5GB", decimal as HF counts it).
inline constexpr int64_t kDefaultMaxShardBytes = 5'000'000'000;

// One tensor to be written: its name, element type and row-major shape.
struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  Shape shape;
};

// Where every tensor of a checkpoint goes.
struct SafetensorsLayout {
  struct Shard {
    std::string file_name;     // "model.safetensors" or "model-00002-of-00004.safetensors"
    std::vector<int> tensors;  // indices into the tensor list, in data order
    std::string prefix;        // the bytes before the data: u64 length + padded JSON header
    int64_t file_size = 0;     // prefix.size() + the data bytes
  };
  struct Placement {
    int shard = 0;
    int64_t file_offset = 0;  // of the tensor's first byte in its shard file
    int64_t nbytes = 0;
  };
  std::vector<Shard> shards;
  std::vector<Placement> placements;  // parallel to the tensor list
  int64_t total_size = 0;             // bytes of all tensors (the index's metadata.total_size)

  // Bytes of all shard files together (data plus headers).
  int64_t TotalFileBytes() const;
};

// Splits `tensors`, kept in their order, into shards of at most `max_shard_bytes` data bytes,
// the way HF transformers does: a tensor goes to the current shard unless it would push it
// past the limit, then it starts the next one; a tensor larger than the limit gets a shard of
// its own. Fails with InvalidArgument for an empty list, duplicate or empty names,
// max_shard_bytes <= 0; Unsupported for a dtype safetensors cannot hold.
Result<SafetensorsLayout> PlanSafetensorsShards(std::span<const SafetensorsTensorSpec> tensors,
                                                int64_t max_shard_bytes);

// model.safetensors.index.json for `layout` (pretty-printed; weight_map sorted by name).
std::string SafetensorsIndexJson(const SafetensorsLayout& layout,
                                 std::span<const SafetensorsTensorSpec> tensors);

// Writes the shard files of a layout. Create() makes every file at its final size (ftruncate,
// so still sparse) with its header in place; WriteTensorBytes() then fills tensor data with
// pwrite, from any number of threads; Finish() closes the files and writes the index when
// there is more than one shard.
//
// Thread safety: WriteTensorBytes may be called concurrently (distinct ranges); Create and
// Finish must not overlap with any other call. The writer keeps its own copy of the layout.
// On failure the files written so far are left in place (the caller decides to clean up).
class SafetensorsWriter {
 public:
  // Creates (or truncates) the shard files in the existing directory `dir`. IoError names the
  // file and the OS error.
  static Result<SafetensorsWriter> Create(const std::string& dir, const SafetensorsLayout& layout,
                                          std::span<const SafetensorsTensorSpec> tensors);

  SafetensorsWriter(SafetensorsWriter&& other) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&& other) noexcept;
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  ~SafetensorsWriter();  // closes any file still open, without writing the index

  // Writes `nbytes` bytes of tensor `tensor` starting `offset` bytes into its data.
  // REQUIRES: 0 <= tensor < number of tensors, the range lies inside the tensor (CHECKed).
  // IoError (ResourceExhausted when the disk is full) names the file.
  Status WriteTensorBytes(int tensor, int64_t offset, const void* data, size_t nbytes);

  // Closes every shard (reporting close errors) and, for more than one shard, writes
  // model.safetensors.index.json.
  Status Finish();

 private:
  SafetensorsWriter() = default;
  void CloseAll();

  std::string dir_;
  SafetensorsLayout layout_;
  std::string index_json_;  // written by Finish when there are several shards
  std::vector<int> fds_;    // one per shard, -1 once closed
};

// Writes `text` to `path` (created or truncated). IoError names the path.
Status WriteTextFile(const std::string& path, std::string_view text);

}  // namespace kiln
