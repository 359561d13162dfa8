#include "builder/synth.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "builder/normal_fill.h"
#include "builder/synth_tokenizer.h"
#include "core/buffer.h"
#include "model/weights.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Elements generated and written per work item: 4 MiB of bf16, large enough that pwrite and
// scheduling costs vanish, small enough that 16 threads balance well over a 16 GB model.
constexpr int64_t kChunkElements = int64_t{1} << 21;

// Slack on top of the checkpoint's own bytes in the free-space check: file system metadata and
// model.safetensors.index.json (~25 kB for Llama-3.1-8B).
constexpr int64_t kSpaceSlackBytes = 16 << 20;

bool IsCheckpointFile(const fs::path& p) {
  static const char* const kNames[] = {"model.safetensors.index.json", "config.json",
                                       "generation_config.json",       "tokenizer.json",
                                       "tokenizer_config.json",        "special_tokens_map.json"};
  const std::string name = p.filename().string();
  if (p.extension() == ".safetensors") return true;
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

std::string FormatBytes(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", static_cast<double>(n) / 1e9);
  return buf;
}

// The nearest existing ancestor of `dir` (itself when it exists): where statvfs can look.
fs::path NearestExisting(const fs::path& dir) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  while (!fs::exists(p, ec) && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  return p;
}

// Makes `dir` ready for writing `needed_bytes` under `policy`: checks what is there and the
// free space first, then creates the directory and removes the files being replaced. Nothing
// is created or removed when a check fails.
Status PrepareOutputDir(const std::string& dir, OverwritePolicy policy, int64_t needed_bytes) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  const bool exists = fs::exists(st);
  if (exists && !fs::is_directory(st)) {
    return InvalidArgument(dir + ": exists and is not a directory");
  }
  std::vector<fs::path> to_remove;
  int64_t freed_bytes = 0;  // the files being replaced count as free space
  bool has_other = false;
  if (exists) {
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file(ec) && IsCheckpointFile(e.path())) {
        to_remove.push_back(e.path());
        freed_bytes += static_cast<int64_t>(e.file_size(ec));
      } else {
        has_other = true;
      }
    }
    if (ec) return IoError(dir + ": cannot list directory: " + ec.message());
  }
  if ((has_other || !to_remove.empty()) && policy == OverwritePolicy::kRefuseNonEmpty) {
    return InvalidArgument(dir +
                           ": directory is not empty; choose an empty or new directory, or pass "
                           "--force to replace the checkpoint files in it");
  }

  const fs::path probe = NearestExisting(dir);
  struct statvfs vfs {};
  if (::statvfs(probe.c_str(), &vfs) != 0) {
    return IoError(probe.string() + ": statvfs: " + std::strerror(errno));
  }
  const int64_t available = static_cast<int64_t>(vfs.f_bavail) * vfs.f_frsize + freed_bytes;
  if (available < needed_bytes + kSpaceSlackBytes) {
    return ResourceExhausted(dir + ": the checkpoint needs " + FormatBytes(needed_bytes) +
                             " but the file system has only " + FormatBytes(available) +
                             " free; free some space or choose another --out");
  }

  if (!exists) {
    fs::create_directories(dir, ec);
    if (ec) return IoError(dir + ": cannot create directory: " + ec.message());
  }
  for (const fs::path& p : to_remove) {
    if (!fs::remove(p, ec) && ec) return IoError(p.string() + ": cannot remove: " + ec.message());
  }
  return Status::Ok();
}

// One unit of work: a chunk of one tensor.
struct WorkItem {
  int tensor;
  int64_t first;  // element
  int64_t count;
};

// Generates every tensor's values and writes them through `writer`, on `num_threads` threads.
Status WriteWeights(const std::vector<WeightSpec>& specs, const SafetensorsLayout& layout,
                    const SynthOptions& options, int num_threads, SafetensorsWriter* writer) {
  std::vector<WorkItem> items;
  for (size_t t = 0; t < specs.size(); ++t) {
    const int64_t n = specs[t].shape.numel();
    for (int64_t first = 0; first < n; first += kChunkElements) {
      items.push_back({static_cast<int>(t), first, std::min(kChunkElements, n - first)});
    }
  }
  std::vector<uint64_t> keys(specs.size());
  for (size_t t = 0; t < specs.size(); ++t) keys[t] = TensorStreamKey(options.seed, specs[t].name);
  const int64_t elem_bytes = GetDTypeInfo(options.dtype).block_bytes;

  std::atomic<size_t> next_item{0};
  std::atomic<int64_t> done_bytes{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  int num_running = num_threads;
  Status first_error;

  auto worker = [&] {
    Status status;
    auto buffer = HostBuffer::Allocate(static_cast<size_t>(kChunkElements * elem_bytes));
    if (!buffer.ok()) status = buffer.status();
    while (status.ok() && !failed.load(std::memory_order_relaxed)) {
      const size_t i = next_item.fetch_add(1, std::memory_order_relaxed);
      if (i >= items.size()) break;
      const WorkItem& item = items[i];
      const WeightSpec& spec = specs[item.tensor];
      if (spec.is_norm) {
        FillConstant(1.0f, item.count, options.dtype, buffer->data());
      } else {
        FillNormal(keys[item.tensor], item.first, item.count, options.stddev, options.dtype,
                   buffer->data());
      }
      const int64_t nbytes = item.count * elem_bytes;
      status = writer->WriteTensorBytes(item.tensor, item.first * elem_bytes, buffer->data(),
                                        static_cast<size_t>(nbytes));
      done_bytes.fetch_add(nbytes, std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok() && first_error.ok()) {
      first_error = status;
      failed = true;
    }
    if (--num_running == 0) cv.notify_all();
  };

  std::vector<std::thread> threads;
  threads.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) threads.emplace_back(worker);
  {
    std::unique_lock<std::mutex> lock(mu);
    while (num_running > 0) {
      cv.wait_for(lock, std::chrono::milliseconds(500));
      if (options.progress && num_running > 0) {
        lock.unlock();
        options.progress(done_bytes.load(), layout.total_size);
        lock.lock();
      }
    }
  }
  for (std::thread& t : threads) t.join();
  KILN_RETURN_IF_ERROR(first_error);
  if (options.progress) options.progress(done_bytes.load(), layout.total_size);
  return Status::Ok();
}

Status ValidateOptions(const SynthOptions& o) {
  if (o.output_dir.empty()) return InvalidArgument("no output directory given (--out DIR)");
  if (o.dtype != DType::kBF16 && o.dtype != DType::kF16) {
    return InvalidArgument("synthetic weights are written in bf16 or f16, not " +
                           std::string(DTypeName(o.dtype)));
  }
  if (!(o.stddev > 0) || !std::isfinite(o.stddev)) {
    return InvalidArgument("the weights' standard deviation must be positive and finite, got " +
                           std::to_string(o.stddev));
  }
  if (o.max_shard_bytes <= 0) return InvalidArgument("the max shard size must be positive");
  return Status::Ok();
}

}  // namespace

Status WriteSyntheticCheckpoint(const ModelConfig& config_in, const SynthOptions& options,
                                SynthStats* stats) {
  KILN_RETURN_IF_ERROR(ValidateOptions(options));
  ModelConfig config = config_in;
  config.dtype = options.dtype;
  KILN_RETURN_IF_ERROR(config.Validate().WithContext("model shape"));
  KILN_ASSIGN_OR_RETURN(const SyntheticTokenizer tokenizer, BuildSyntheticTokenizer(config));

  const std::string& dir = options.output_dir;
  GenerationConfig generation;
  generation.bos_token_id = config.bos_token_id;
  generation.eos_token_ids = config.eos_token_ids;
  const std::vector<std::pair<std::string, std::string>> text_files = {
      {"tokenizer.json", TokenizerJson(tokenizer)},
      {"tokenizer_config.json", TokenizerConfigJson(tokenizer, config.max_position_embeddings)},
      {"special_tokens_map.json", SpecialTokensMapJson(tokenizer)},
      {"generation_config.json", ToGenerationConfigJson(generation)},
      {"config.json", ToHfConfigJson(config)},  // last: its presence marks a complete checkpoint
  };

  const std::vector<WeightSpec> specs = ExpectedWeights(config);
  std::vector<SafetensorsTensorSpec> tensors;
  tensors.reserve(specs.size());
  for (const WeightSpec& w : specs) tensors.push_back({w.name, options.dtype, w.shape});
  KILN_ASSIGN_OR_RETURN(SafetensorsLayout layout,
                        PlanSafetensorsShards(tensors, options.max_shard_bytes));

  int64_t needed = 0;
  for (const auto& [name, text] : text_files) needed += static_cast<int64_t>(text.size());
  if (options.write_weights) needed += layout.TotalFileBytes();  // the index fits in the slack
  KILN_RETURN_IF_ERROR(PrepareOutputDir(dir, options.overwrite, needed));

  int num_threads = options.num_threads;
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads = std::max(num_threads, 1);
  double seconds = 0;
  if (options.write_weights) {
    const auto start = std::chrono::steady_clock::now();
    auto write_shards = [&]() -> Status {
      KILN_ASSIGN_OR_RETURN(SafetensorsWriter writer,
                            SafetensorsWriter::Create(dir, layout, tensors));
      KILN_RETURN_IF_ERROR(WriteWeights(specs, layout, options, num_threads, &writer));
      return writer.Finish();
    };
    if (Status s = write_shards(); !s.ok()) {
      std::error_code ec;  // best effort: do not leave gigabytes of half-written shards behind
      for (const SafetensorsLayout::Shard& shard : layout.shards) {
        fs::remove(dir + "/" + shard.file_name, ec);
      }
      return s;
    }
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  for (const auto& [name, text] : text_files) {
    KILN_RETURN_IF_ERROR(WriteTextFile(dir + "/" + name, text));
  }
  if (stats != nullptr) {
    stats->num_parameters = config.NumParameters();
    stats->weight_bytes = options.write_weights ? layout.total_size : 0;
    stats->num_shards = options.write_weights ? static_cast<int>(layout.shards.size()) : 0;
    stats->num_threads = num_threads;
    stats->weight_seconds = seconds;
  }
  return Status::Ok();
}

}  // namespace kiln
