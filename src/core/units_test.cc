#include "core/units.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(ParseByteSize, DecimalAndBinaryUnitsLikeTransformersAndVllm) {
  EXPECT_EQ(*ParseByteSize("80GB"), 80'000'000'000);
  EXPECT_EQ(*ParseByteSize("5gb"), 5'000'000'000);
  EXPECT_EQ(*ParseByteSize("5G"), 5'000'000'000);
  EXPECT_EQ(*ParseByteSize("500MB"), 500'000'000);
  EXPECT_EQ(*ParseByteSize("141 GiB"), 141LL * 1024 * 1024 * 1024);
  EXPECT_EQ(*ParseByteSize("2GiB"), int64_t{2} << 30);
  EXPECT_EQ(*ParseByteSize("1.5 GB"), 1'500'000'000);
  EXPECT_EQ(*ParseByteSize("1.5tb"), 1'500'000'000'000);
  EXPECT_EQ(*ParseByteSize("10KiB"), 10240);
  EXPECT_EQ(*ParseByteSize("1048576"), 1048576);
  for (const char* bad :
       {"", "GB", "5XB", "-5GB", "0", "0.1B", "1..2GB", "1.2.3GB", "1e30", "99999999TB"}) {
    auto r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace kiln
