// UploadStepInputs (kernels/step_inputs.h) against a host model: jobs read from pinned, mapped
// host memory (cudaHostAllocMapped, the device address from cudaHostGetDevicePointer, as the CUDA
// runner's step slots) into a poisoned device arena. Arrays of 1, 3, 17 and 1000 elements of
// int32, int64 and struct types, at source and destination offsets of every alignment; block
// tables as a 2D job between different row strides; token ids that name the previous step's
// sampled rows; zero-byte jobs; and the argument checks. Exact comparisons of the whole arena:
// the kernel moves bytes, and must write nothing else.
#include "kernels/step_inputs.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "kernels/test_util.cuh"

namespace kiln::kernels {
namespace {

constexpr size_t kArenaBytes = size_t{8} << 20;
constexpr uint8_t kFill = 0xab;  // the device arena's bytes before a launch
constexpr int32_t kPreviousRows = 83;

// Where a job lies, as offsets into the host and device arenas.
struct Spec {
  int64_t src = 0, dst = 0;
  int64_t row_bytes = 0;
  int32_t num_rows = 1;
  int64_t src_stride = 0, dst_stride = 0;
};

// A 6-byte element (row_bytes not a multiple of 4 for most counts).
struct Short3 {
  int16_t a, b, c;
};

class UploadStepInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&host_), kArenaBytes, cudaHostAllocMapped),
              cudaSuccess);
    ASSERT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_dev_), host_, 0),
              cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dev_, kArenaBytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&previous_, kPreviousRows * sizeof(SampledToken)), cudaSuccess);
    std::vector<SampledToken> previous(kPreviousRows);
    for (int32_t r = 0; r < kPreviousRows; ++r) previous[r].token_id = 1000 + 7 * r;
    ASSERT_EQ(cudaMemcpy(previous_, previous.data(), previous.size() * sizeof(SampledToken),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    std::mt19937 rng(11);
    for (size_t i = 0; i < kArenaBytes; ++i) host_[i] = static_cast<uint8_t>(rng());
  }
  void TearDown() override {
    if (host_ != nullptr) cudaFreeHost(host_);
    cudaFree(dev_);
    cudaFree(previous_);
  }

  // Writes `tokens` to the source of job `spec` (one row of exactly those ids).
  void WriteTokens(const Spec& spec, const std::vector<int32_t>& tokens) {
    ASSERT_EQ(spec.row_bytes, static_cast<int64_t>(tokens.size() * sizeof(int32_t)));
    std::memcpy(host_ + spec.src, tokens.data(), spec.row_bytes);
  }

  // Runs `specs` (job resolve_job's ids resolved against previous_) and compares the whole device
  // arena with the model.
  void RunAndCompare(const std::vector<Spec>& specs, int32_t resolve_job = -1) {
    std::vector<uint8_t> want(kArenaBytes, kFill);
    std::vector<UploadJob> jobs;
    for (const Spec& s : specs) {
      jobs.push_back(
          {host_dev_ + s.src, dev_ + s.dst, s.row_bytes, s.num_rows, s.src_stride, s.dst_stride});
      for (int32_t r = 0; r < s.num_rows; ++r) {
        std::memcpy(want.data() + s.dst + r * s.dst_stride, host_ + s.src + r * s.src_stride,
                    s.row_bytes);
      }
    }
    if (resolve_job >= 0) {
      const Spec& s = specs[resolve_job];
      for (int64_t i = 0; i < s.row_bytes / 4; ++i) {
        int32_t id;
        std::memcpy(&id, want.data() + s.dst + 4 * i, 4);
        if (id < 0) id = 1000 + 7 * (-1 - id);
        std::memcpy(want.data() + s.dst + 4 * i, &id, 4);
      }
    }
    CUDA_OK(cudaMemset(dev_, kFill, kArenaBytes));
    CUDA_OK(UploadStepInputs(jobs.data(), static_cast<int32_t>(jobs.size()),
                             {resolve_job, resolve_job >= 0 ? previous_ : nullptr}, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint8_t> got(kArenaBytes);
    CUDA_OK(cudaMemcpy(got.data(), dev_, kArenaBytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < kArenaBytes; ++i) {
      ASSERT_EQ(got[i], want[i]) << "device arena byte " << i;
    }
  }

  uint8_t* host_ = nullptr;
  uint8_t* host_dev_ = nullptr;  // host_ as the device addresses it
  uint8_t* dev_ = nullptr;
  SampledToken* previous_ = nullptr;
};

// Places jobs one after another, each at the given misalignment from a 256-byte boundary: sources
// from the start of the arena, destinations from its middle (so that a job's source and
// destination offsets differ).
class Layout {
 public:
  Spec Take(int64_t bytes, int64_t src_misalign, int64_t dst_misalign) {
    Spec s;
    s.src = src_ + src_misalign;
    s.dst = dst_ + dst_misalign;
    s.row_bytes = bytes;
    src_ = (s.src + bytes + 255) / 256 * 256 + 256;
    dst_ = (s.dst + bytes + 255) / 256 * 256 + 512;
    EXPECT_LE(src_, static_cast<int64_t>(kArenaBytes));
    EXPECT_LE(dst_, static_cast<int64_t>(kArenaBytes));
    return s;
  }

 private:
  int64_t src_ = 0, dst_ = kArenaBytes / 2;
};

// Element counts 1, 3, 17, 1000 of bytes, int32, int64, a 6-byte struct and SamplingRow, at
// offsets of every alignment on either side (16-byte pieces only where both allow them): 20 jobs,
// kMaxUploadJobs in the first launch and the rest in a second.
TEST_F(UploadStepInputsTest, OddSizesAndAlignments) {
  Layout layout;
  std::vector<Spec> specs;
  const int64_t sizes[] = {sizeof(uint8_t), sizeof(int32_t), sizeof(int64_t), sizeof(Short3),
                           sizeof(SamplingRow)};
  const int64_t misaligns[][2] = {{0, 0}, {4, 4}, {8, 24}, {4, 12}, {2, 6}, {1, 1}, {3, 0}};
  int m = 0;
  for (int64_t element : sizes) {
    for (int64_t count : {1, 3, 17, 1000}) {
      const auto& mis = misaligns[m++ % std::size(misaligns)];
      specs.push_back(layout.Take(element * count, mis[0], mis[1]));
    }
  }
  ASSERT_GT(specs.size(), static_cast<size_t>(kMaxUploadJobs));
  for (size_t begin = 0; begin < specs.size(); begin += kMaxUploadJobs) {
    const size_t end = std::min(specs.size(), begin + kMaxUploadJobs);
    RunAndCompare(std::vector<Spec>(specs.begin() + begin, specs.begin() + end));
  }
  // Each alone too (one job a launch: a job alone at piece 0 of the grid).
  for (const Spec& s : specs) RunAndCompare({s});
}

// Enough pieces for many blocks and every one of a thread's four pieces: 3 MiB + 12 bytes, and a
// second job behind it.
TEST_F(UploadStepInputsTest, LargeJobs) {
  Layout layout;
  RunAndCompare({layout.Take((int64_t{3} << 20) + 12, 0, 0), layout.Take(4000, 4, 8)});
}

// Block tables: rows packed on the host (row stride = row bytes) into rows of a fixed, longer
// stride on the device; and strides that leave only 4-byte pieces.
TEST_F(UploadStepInputsTest, BlockTables2D) {
  for (const auto& [rows, blocks, src_blocks, dst_blocks] : std::vector<std::array<int32_t, 4>>{
           {1, 1, 1, 1}, {7, 13, 13, 40}, {5, 8, 12, 8}, {33, 64, 64, 256}, {3, 5, 7, 9}}) {
    SCOPED_TRACE(testing::Message() << rows << " rows of " << blocks << " blocks, strides "
                                    << src_blocks << " / " << dst_blocks);
    Spec table;
    table.src = 1024;
    table.dst = 2048;
    table.row_bytes = blocks * 4;
    table.num_rows = rows;
    table.src_stride = src_blocks * 4;
    table.dst_stride = dst_blocks * 4;
    Spec other;  // a plain job in the same launch
    other.src = 256 * 1024;
    other.dst = 512 * 1024 + 4;
    other.row_bytes = 17 * 8;
    RunAndCompare({other, table});
  }
}

// Token ids naming the previous step's rows (< 0) take their sampled tokens; real ids stay. 1, 3
// and 17 tokens (4- and 8-byte pieces: a 16-byte piece's tail) and 769 in a step-like launch.
TEST_F(UploadStepInputsTest, ResolvesPreviousTokens) {
  std::mt19937_64 rng(3);
  for (int32_t num_tokens : {1, 3, 17, 769}) {
    SCOPED_TRACE(testing::Message() << num_tokens << " tokens");
    std::vector<int32_t> tokens(num_tokens);
    for (int32_t& t : tokens) {
      const bool placeholder = rng() % 3 == 0;
      t = placeholder ? -1 - static_cast<int32_t>(rng() % kPreviousRows)
                      : static_cast<int32_t>(rng() % 50000);
    }
    tokens[0] = -kPreviousRows;  // the last row
    Layout layout;
    std::vector<Spec> specs;
    specs.push_back(layout.Take(num_tokens * 4, 0, 0));  // token ids
    specs.push_back(layout.Take(num_tokens * 4, 0, 0));  // positions: ids < 0 stay there
    specs.push_back(layout.Take(num_tokens * 8, 0, 0));  // slots
    WriteTokens(specs[0], tokens);
    WriteTokens(specs[1], tokens);
    RunAndCompare(specs, /*resolve_job=*/0);
    // The token job last, at 4-byte offsets (4-byte pieces).
    Layout other;
    std::vector<Spec> moved = {other.Take(num_tokens * 8, 0, 0), other.Take(num_tokens * 4, 0, 0),
                               other.Take(num_tokens * 4, 4, 12)};
    WriteTokens(moved[1], tokens);
    WriteTokens(moved[2], tokens);
    RunAndCompare(moved, /*resolve_job=*/2);
  }
}

// Jobs of no bytes (no rows, or empty rows, null pointers allowed) launch nothing and shift no
// other job; all of them empty launches nothing at all.
TEST_F(UploadStepInputsTest, ZeroByteJobs) {
  Layout layout;
  Spec empty_rows;
  empty_rows.num_rows = 0;
  empty_rows.row_bytes = 64;
  const Spec a = layout.Take(12, 0, 0), b = layout.Take(100, 4, 4);
  RunAndCompare({Spec{}, a, empty_rows, Spec{}, b, Spec{}});
  RunAndCompare({Spec{}, empty_rows});
  RunAndCompare({});
  std::vector<int32_t> tokens = {-1, 5, -2};
  const Spec t = layout.Take(12, 0, 0);
  WriteTokens(t, tokens);
  RunAndCompare({Spec{}, t, Spec{}}, /*resolve_job=*/1);
  // A resolve job with no bytes needs no `previous`.
  const UploadJob none{};
  EXPECT_EQ(UploadStepInputs(&none, 1, {0, nullptr}, nullptr), cudaSuccess);
  EXPECT_EQ(UploadStepInputs(nullptr, 0, {}, nullptr), cudaSuccess);
}

TEST_F(UploadStepInputsTest, RejectsBadArguments) {
  std::memset(host_, 0, 4096);  // token ids >= 0 where a resolve job reads
  std::vector<UploadJob> jobs(kMaxUploadJobs + 1);
  for (size_t i = 0; i < jobs.size(); ++i) {
    jobs[i] = {host_dev_ + 64 * i, dev_ + 64 * i, 16, 1, 0, 0};
  }
  EXPECT_EQ(UploadStepInputs(jobs.data(), kMaxUploadJobs, {}, nullptr), cudaSuccess);
  EXPECT_EQ(UploadStepInputs(jobs.data(), kMaxUploadJobs + 1, {}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(UploadStepInputs(jobs.data(), -1, {}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(UploadStepInputs(nullptr, 2, {}, nullptr), cudaErrorInvalidValue);
  auto one = [&](UploadJob job, TokenResolve resolve = {}) {
    return UploadStepInputs(&job, 1, resolve, nullptr);
  };
  const UploadJob good = jobs[0];
  UploadJob bad = good;
  bad.src = nullptr;
  EXPECT_EQ(one(bad), cudaErrorInvalidValue);
  bad = good;
  bad.dst = nullptr;
  EXPECT_EQ(one(bad), cudaErrorInvalidValue);
  bad = good;
  bad.row_bytes = -4;
  EXPECT_EQ(one(bad), cudaErrorInvalidValue);
  bad = good;
  bad.num_rows = -1;
  EXPECT_EQ(one(bad), cudaErrorInvalidValue);
  bad = good;  // overlapping destination rows
  bad.num_rows = 2;
  bad.src_stride = 16;
  bad.dst_stride = 8;
  EXPECT_EQ(one(bad), cudaErrorInvalidValue);
  bad = good;
  bad.row_bytes = (int64_t{1} << 30) + 16;  // over the limit
  EXPECT_EQ(one(bad), cudaErrorInvalidValue);
  // Resolve: a job that exists, with `previous`, of whole int32s.
  EXPECT_EQ(one(good, {0, previous_}), cudaSuccess);
  EXPECT_EQ(one(good, {1, previous_}), cudaErrorInvalidValue);
  EXPECT_EQ(one(good, {-2, previous_}), cudaErrorInvalidValue);
  EXPECT_EQ(one(good, {0, nullptr}), cudaErrorInvalidValue);
  bad = good;
  bad.src = host_dev_ + 2;
  EXPECT_EQ(one(bad, {0, previous_}), cudaErrorInvalidValue);
  bad = good;
  bad.row_bytes = 14;
  EXPECT_EQ(one(bad, {0, previous_}), cudaErrorInvalidValue);
  CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace kiln::kernels
