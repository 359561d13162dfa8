#include "cli/command.h"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

TEST(Cli, ParseByteSize) {
  EXPECT_EQ(*ParseByteSize("80GB"), 80'000'000'000);
  EXPECT_EQ(*ParseByteSize("141 GiB"), 141LL * 1024 * 1024 * 1024);
  EXPECT_EQ(*ParseByteSize("1.5tb"), 1'500'000'000'000);
  EXPECT_EQ(*ParseByteSize("4096"), 4096);
  EXPECT_EQ(*ParseByteSize("5G"), 5'000'000'000);
  for (const char* bad : {"", "GB", "12XB", "-3GB", "1e30", "1.2.3GB", "99999999999TB"}) {
    auto r = ParseByteSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Cli, Format) {
  EXPECT_EQ(FormatCount(8030261248), "8,030,261,248");
  EXPECT_EQ(FormatCount(135), "135");
  EXPECT_EQ(FormatCount(-1234), "-1,234");
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3 * 1024 * 1024), "3.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{16} << 30), "16.00 GiB");
}

}  // namespace
}  // namespace kiln::cli
