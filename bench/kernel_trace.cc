// kiln_kernel_trace: records the GPU kernel timeline of any unmodified CUDA program, kernels
// replayed inside CUDA graphs and kernels launched with programmatic dependent launch included.
//
// The CUDA driver dlopens this library when CUDA_INJECTION64_PATH names it and calls
// InitializeInjection() in cuInit; that enables CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL (one record
// per kernel, graph nodes included, kernels not serialised) and CUPTI_ACTIVITY_KIND_MEMCPY (one
// per copy: what runs on the GPU between a step's graph launches). At exit an atexit handler
// flushes CUPTI and writes every record.
//
// Usage:
//   cmake --build build --target kiln_kernel_trace
//   lib=$PWD/build/bench/libkiln_kernel_trace.so
//   CUDA_INJECTION64_PATH=$lib KILN_TRACE_OUT=/tmp/trace.jsonl <any CUDA program and its args>
//   python3 bench/kernel_trace_summary.py --trace /tmp/trace.jsonl
// KILN_TRACE_OUT names the output (unset: nothing is traced, one stderr line says so);
// KILN_TRACE_MAX caps the records kept (default 2,000,000, ~80 bytes each; the rest are counted
// and dropped). Output, one JSON line per kernel or copy, sorted by start:
//   {"kind": "kernel" or "memcpy", "name": demangled or raw (copies: "memcpy HtoD" and the like),
//    "bytes" (copies; 0 for kernels), "start": ns, "end": ns, "device", "stream", "graph_id" and
//    "graph_node_id" (0 outside graphs), "correlation" (the launching API call's; a graph
//    kernel's is its graph launch's), "grid": [x,y,z], "block": [x,y,z], "regs" (per thread),
//    "smem_dyn" (dynamic shared memory bytes)}
//
// Limits: CUPTI adds a small per-kernel overhead, so gaps between short kernels grow a little:
// compare kernels within one trace, not against untraced runs. Timestamps are CUPTI's GPU-global
// ns, meaningful within one trace. Records are written at exit: a program ending by a signal or
// _exit() writes nothing. The record layout is the built-against CUPTI's CUpti_ActivityKernel10;
// if the CUPTI loaded at run time is of another CUDA major.minor, tracing stays off (stderr says
// so).
// Nothing here aborts the host program: CUPTI failures are reported on stderr and tracing stops
// or drops records.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8 << 20;  // one CUPTI activity buffer: ~38k kernel records
constexpr size_t kBufferAlign = 8;        // CUPTI requires 8-byte aligned buffers
constexpr size_t kDefaultMaxRecords = 2'000'000;

// One kernel execution or copy, taken out of CUPTI's record (whose buffer is freed after
// reading). Copies have no grid, block, registers or shared memory (zeros).
struct KernelRecord {
  uint64_t bytes;  // copies only
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t graph_node_id;
  uint32_t name_id;  // index into Tracer::names
  uint32_t device_id;
  uint32_t stream_id;
  uint32_t graph_id;
  uint32_t correlation_id;
  int32_t grid[3];
  int32_t block[3];
  int32_t smem_dyn;
  uint16_t regs;
  bool is_copy;
};

// State shared by CUPTI's worker thread (buffer callbacks) and the atexit handler; every field
// is guarded by mutex. Invariant: records.size() <= max_records.
struct Tracer {
  std::mutex mutex;
  std::string out_path;
  size_t max_records = kDefaultMaxRecords;
  std::vector<KernelRecord> records;
  std::vector<std::string> names;  // raw (mangled) kernel names, interned
  std::unordered_map<std::string, uint32_t> name_ids;
  size_t num_over_cap = 0;       // records dropped here: past max_records or out of memory
  size_t num_cupti_dropped = 0;  // records CUPTI dropped for want of buffer space
};

// NOTE: leaked on purpose: CUPTI may deliver buffers after static destructors have run.
Tracer& GetTracer() {
  static Tracer* const tracer = new Tracer;
  return *tracer;
}

// Reports a failed CUPTI call on stderr; returns whether `result` is success.
bool CuptiOk(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return true;
  const char* message = nullptr;
  if (cuptiGetResultString(result, &message) != CUPTI_SUCCESS || message == nullptr) {
    message = "unknown CUPTI error";
  }
  std::fprintf(stderr, "kiln_kernel_trace: %s failed: %s\n", what, message);
  return false;
}

// Keeps `record` under `name` (interned into record.name_id) unless max_records are kept already.
// REQUIRES: tracer.mutex held. May throw std::bad_alloc.
void Keep(Tracer& tracer, const char* name, KernelRecord record) {
  if (tracer.records.size() >= tracer.max_records) {
    ++tracer.num_over_cap;
    return;
  }
  auto [it, is_new] = tracer.name_ids.try_emplace(name, tracer.names.size());
  if (is_new) tracer.names.emplace_back(name);
  record.name_id = it->second;
  tracer.records.push_back(record);
}

// REQUIRES: tracer.mutex held. May throw std::bad_alloc.
void AddKernel(Tracer& tracer, const CUpti_ActivityKernel10& kernel) {
  Keep(tracer, kernel.name != nullptr ? kernel.name : "<unnamed>",
       KernelRecord{
           .bytes = 0,
           .start_ns = kernel.start,
           .end_ns = kernel.end,
           .graph_node_id = kernel.graphNodeId,
           .name_id = 0,
           .device_id = kernel.deviceId,
           .stream_id = kernel.streamId,
           .graph_id = kernel.graphId,
           .correlation_id = kernel.correlationId,
           .grid = {kernel.gridX, kernel.gridY, kernel.gridZ},
           .block = {kernel.blockX, kernel.blockY, kernel.blockZ},
           .smem_dyn = kernel.dynamicSharedMemory,
           .regs = kernel.registersPerThread,
           .is_copy = false,
       });
}

// The name a copy gets: "memcpy " and its direction.
const char* CopyName(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    default:
      return "memcpy other";
  }
}

// REQUIRES: tracer.mutex held. May throw std::bad_alloc. No grid, block, registers or shared
// memory (zeros).
void AddCopy(Tracer& tracer, const CUpti_ActivityMemcpy6& copy) {
  KernelRecord record{};
  record.bytes = copy.bytes;
  record.start_ns = copy.start;
  record.end_ns = copy.end;
  record.graph_node_id = copy.graphNodeId;
  record.device_id = copy.deviceId;
  record.stream_id = copy.streamId;
  record.graph_id = copy.graphId;
  record.correlation_id = copy.correlationId;
  record.is_copy = true;
  Keep(tracer, CopyName(copy.copyKind), record);
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_num_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;  // no buffer: CUPTI drops and counts records
  *max_num_records = 0;                           // fill the whole buffer
}

void CUPTIAPI BufferCompleted(CUcontext context, uint32_t stream_id, uint8_t* buffer,
                              size_t /*size*/, size_t valid_size) {
  Tracer& tracer = GetTracer();
  std::lock_guard lock(tracer.mutex);
  CUpti_Activity* record = nullptr;
  for (;;) {
    const CUptiResult result = cuptiActivityGetNextRecord(buffer, valid_size, &record);
    if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // end of the buffer
    if (!CuptiOk(result, "cuptiActivityGetNextRecord")) break;
    try {
      if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        AddKernel(tracer, *reinterpret_cast<const CUpti_ActivityKernel10*>(record));
      } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
        AddCopy(tracer, *reinterpret_cast<const CUpti_ActivityMemcpy6*>(record));
      }
    } catch (...) {  // out of memory: keep the program alive, count the loss
      ++tracer.num_over_cap;
    }
  }
  size_t num_dropped = 0;
  if (CuptiOk(cuptiActivityGetNumDroppedRecords(context, stream_id, &num_dropped),
              "cuptiActivityGetNumDroppedRecords")) {
    tracer.num_cupti_dropped += num_dropped;
  }
  std::free(buffer);
}

std::string Demangle(const std::string& raw) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : raw;
  std::free(demangled);
  return name;
}

// Kernel names are printable; control characters (never seen) become spaces.
std::string JsonEscape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out;
}

// REQUIRES: tracer.mutex held. Returns whether the whole file was written.
bool WriteTrace(Tracer& tracer) {
  std::FILE* file = std::fopen(tracer.out_path.c_str(), "w");
  if (file == nullptr) {
    std::perror(("kiln_kernel_trace: cannot open " + tracer.out_path).c_str());
    return false;
  }
  std::vector<std::string> names;
  names.reserve(tracer.names.size());
  for (const std::string& raw : tracer.names) names.push_back(JsonEscape(Demangle(raw)));
  std::sort(tracer.records.begin(), tracer.records.end(),
            [](const KernelRecord& a, const KernelRecord& b) { return a.start_ns < b.start_ns; });
  for (const KernelRecord& r : tracer.records) {
    std::fprintf(file,
                 "{\"kind\":\"%s\",\"name\":\"%s\",\"bytes\":%" PRIu64 ",\"start\":%" PRIu64
                 ",\"end\":%" PRIu64
                 ",\"device\":%u,\"stream\":%u,\"graph_id\":%u,\"graph_node_id\":%" PRIu64
                 ",\"correlation\":%u,\"grid\":[%d,%d,%d],\"block\":[%d,%d,%d],\"regs\":%u,"
                 "\"smem_dyn\":%d}\n",
                 r.is_copy ? "memcpy" : "kernel", names[r.name_id].c_str(), r.bytes, r.start_ns,
                 r.end_ns, r.device_id, r.stream_id, r.graph_id, r.graph_node_id, r.correlation_id,
                 r.grid[0], r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2],
                 static_cast<unsigned>(r.regs), r.smem_dyn);
  }
  const bool is_written = std::ferror(file) == 0;
  if (std::fclose(file) != 0 || !is_written) {
    std::fprintf(stderr, "kiln_kernel_trace: writing %s failed\n", tracer.out_path.c_str());
    return false;
  }
  return true;
}

void AtExit() {
  CuptiOk(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  Tracer& tracer = GetTracer();
  std::lock_guard lock(tracer.mutex);
  if (tracer.num_cupti_dropped > 0) {
    std::fprintf(stderr, "kiln_kernel_trace: CUPTI dropped %zu records (no buffer space)\n",
                 tracer.num_cupti_dropped);
  }
  if (tracer.num_over_cap > 0) {
    std::fprintf(stderr, "kiln_kernel_trace: %zu records not kept (KILN_TRACE_MAX=%zu reached)\n",
                 tracer.num_over_cap, tracer.max_records);
  }
  try {
    if (WriteTrace(tracer)) {
      std::fprintf(stderr, "kiln_kernel_trace: wrote %zu kernel and copy records to %s\n",
                   tracer.records.size(), tracer.out_path.c_str());
    }
  } catch (...) {
    std::fprintf(stderr, "kiln_kernel_trace: out of memory while writing the trace\n");
  }
}

// Returns KILN_TRACE_MAX, or the default when it is unset or not a positive integer.
size_t MaxRecordsFromEnv() {
  const char* text = std::getenv("KILN_TRACE_MAX");
  if (text == nullptr || *text == '\0') return kDefaultMaxRecords;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0' || value == 0 || text[0] == '-') {
    std::fprintf(stderr,
                 "kiln_kernel_trace: KILN_TRACE_MAX=%s is not a positive integer; using %zu\n",
                 text, kDefaultMaxRecords);
    return kDefaultMaxRecords;
  }
  return static_cast<size_t>(value);
}

}  // namespace

// Called by the CUDA driver during cuInit when CUDA_INJECTION64_PATH names this library.
// Always returns 1 (success to the driver): a tracing problem must not stop the program.
// NOTE: default visibility spelled out: the driver finds this symbol with dlsym and silently
// skips the library when it is hidden.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  static std::atomic<bool> is_initialized{false};
  if (is_initialized.exchange(true)) return 1;
  const char* out_path = std::getenv("KILN_TRACE_OUT");
  if (out_path == nullptr || *out_path == '\0') {
    std::fprintf(stderr, "kiln_kernel_trace: KILN_TRACE_OUT is not set; no trace is written\n");
    return 1;
  }
  uint32_t version = 0;
  if (!CuptiOk(cuptiGetVersion(&version), "cuptiGetVersion")) return 1;
  // NOTE: versions read xxyyzz (CUDA major, minor, CUPTI update); record layouts change with
  // the CUDA minor version at most, so an update's difference is accepted.
  if (version / 100 != CUPTI_API_VERSION / 100) {
    std::fprintf(stderr,
                 "kiln_kernel_trace: CUPTI at run time is version %u, built against %u; tracing "
                 "off (rebuild against the CUPTI the program loads)\n",
                 version, static_cast<unsigned>(CUPTI_API_VERSION));
    return 1;
  }
  Tracer& tracer = GetTracer();
  {
    std::lock_guard lock(tracer.mutex);
    tracer.out_path = out_path;
    tracer.max_records = MaxRecordsFromEnv();
  }
  if (!CuptiOk(cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted),
               "cuptiActivityRegisterCallbacks")) {
    return 1;
  }
  if (!CuptiOk(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
               "cuptiActivityEnable(CONCURRENT_KERNEL)")) {
    return 1;
  }
  // Copies too; without them the kernels are still traced.
  CuptiOk(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
  if (std::atexit(AtExit) != 0) {
    std::fprintf(stderr, "kiln_kernel_trace: atexit failed; no trace will be written\n");
  }
  return 1;
}
