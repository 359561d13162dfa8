#include "cli/command.h"

#include <gtest/gtest.h>

namespace kiln::cli {
namespace {

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
