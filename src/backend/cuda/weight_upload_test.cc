// cuda::PlaceRows (the W4A16 row orders the CUDA runner stores for the one-token GEMV's
// epilogues, weight_upload.h) against the host permutation each order stands for, on the device.
#include "backend/cuda/weight_upload.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/test_util.cuh"

namespace kiln::cuda {
namespace {

using kernels::Dev;

// The fused matrix's row that row r of a part (placed at `row`) lands on, by the order's
// definition (weight_upload.h).
int64_t DestRow(W4RowOrder order, int64_t row, int64_t r, int64_t head_dim) {
  switch (order) {
    case W4RowOrder::kAsIs:
      return row + r;
    case W4RowOrder::kGateRuns:
      return 16 * (r / 8) + r % 8;
    case W4RowOrder::kUpRuns:
      return 16 * (r / 8) + 8 + r % 8;
    case W4RowOrder::kRopePairs: {
      const int64_t head = r / head_dim, i = r % head_dim, half = head_dim / 2;
      return row + head * head_dim + (i < half ? 2 * i : 2 * (i - half) + 1);
    }
  }
  return -1;
}

// Places the parts of one fused matrix (each part's rows random bytes) and compares every byte
// with the host's placement; bytes no part owns keep the poison.
struct Part {
  W4RowOrder order;
  int64_t row, rows;
};
void CheckPlacement(const std::vector<Part>& parts, int64_t fused_rows, int64_t row_bytes,
                    int64_t head_dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> want(fused_rows * row_bytes, 0xa5);
  Dev<uint8_t> dst(want.size());
  dst.Upload(want);
  for (const Part& p : parts) {
    std::vector<uint8_t> src(p.rows * row_bytes);
    for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
    Dev<uint8_t> d_src(src.size());
    d_src.Upload(src);
    const Status st =
        PlaceRows(d_src.ptr, dst.ptr, p.row, p.rows, row_bytes, p.order, head_dim, nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    CUDA_OK(cudaDeviceSynchronize());  // d_src goes out of scope
    for (int64_t r = 0; r < p.rows; ++r) {
      const int64_t d = DestRow(p.order, p.row, r, head_dim);
      std::copy(src.begin() + r * row_bytes, src.begin() + (r + 1) * row_bytes,
                want.begin() + d * row_bytes);
    }
  }
  EXPECT_EQ(dst.Download(want.size()), want);
}

TEST(PlaceRowsGpu, GateAndUpInRunsOf8) {
  REQUIRE_GPU();
  // gate_up of 2 x 48 rows: codes (k / 2 bytes a row), scales (2 bytes a group), a bias (2
  // bytes); the 8B's shape's row bytes.
  for (int64_t row_bytes : {int64_t{2048}, int64_t{64}, int64_t{2}}) {
    SCOPED_TRACE(row_bytes);
    CheckPlacement({{W4RowOrder::kGateRuns, 0, 48}, {W4RowOrder::kUpRuns, 48, 48}}, 96, row_bytes,
                   0, 11);
  }
}

TEST(PlaceRowsGpu, QkInRopePairOrderVAsIs) {
  REQUIRE_GPU();
  // q of 4 heads, k and v of 2 (GQA), head_dim 64 and 128: k placed at row q, v as stored.
  for (int64_t head_dim : {int64_t{64}, int64_t{128}}) {
    for (int64_t row_bytes : {int64_t{1024}, int64_t{2}}) {
      SCOPED_TRACE(testing::Message() << "head_dim " << head_dim << " row bytes " << row_bytes);
      const int64_t q = 4 * head_dim, kv = 2 * head_dim;
      CheckPlacement({{W4RowOrder::kRopePairs, 0, q},
                      {W4RowOrder::kRopePairs, q, kv},
                      {W4RowOrder::kAsIs, q + kv, kv}},
                     q + 2 * kv, row_bytes, head_dim, 23);
    }
  }
}

TEST(PlaceRowsGpu, RefusesPartsOfNoWholeRunOrHead) {
  REQUIRE_GPU();
  Dev<uint8_t> a(4096), b(4096);
  EXPECT_EQ(PlaceRows(a.ptr, b.ptr, 0, 12, 16, W4RowOrder::kGateRuns, 0, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceRows(a.ptr, b.ptr, 0, 96, 16, W4RowOrder::kRopePairs, 64, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceRows(a.ptr, b.ptr, 0, 66, 16, W4RowOrder::kRopePairs, 33, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln::cuda
