#include "core/status.h"

#include <gtest/gtest.h>

#include <memory>

#include "core/logging.h"

namespace kiln {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument("odd value " + std::to_string(x));
  return x / 2;
}

Result<int> Quarter(int x) {
  KILN_ASSIGN_OR_RETURN(int h, Half(x));
  KILN_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckQuarter(int x) {
  KILN_RETURN_IF_ERROR(Quarter(x).status());
  return Status::Ok();
}

TEST(Status, OkAndError) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = NotFound("model.safetensors: no such file");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NotFound: model.safetensors: no such file");
  EXPECT_EQ(s.WithContext("loading /m").message(), "loading /m: model.safetensors: no such file");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(Status, ResultPropagates) {
  EXPECT_EQ(*Quarter(12), 3);
  auto r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd value 3");
  EXPECT_EQ(CheckQuarter(6).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckQuarter(8).ok());
}

TEST(Status, ResultHoldsMoveOnly) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

TEST(StatusDeathTest, ValueOfErrorAborts) {
  Result<int> r = Internal("boom");
  EXPECT_DEATH((void)r.value(), "Result::value\\(\\) on error: Internal: boom");
}

TEST(CheckDeathTest, NamesFileLineAndValues) {
  int a = 3, b = 4;
  EXPECT_DEATH(CHECK_EQ(a, b) << "context",
               "status_test.cc:[0-9]+: CHECK failed: .*3 vs 4.*context");
}

TEST(Logging, ParseLevels) {
  EXPECT_EQ(*ParseLogLevel("WARNING"), LogLevel::kWarning);
  EXPECT_FALSE(ParseLogLevel("loud").ok());
  SetLogLevel(LogLevel::kError);
  EXPECT_EQ(GetLogLevel(), LogLevel::kError);
  LOG(INFO) << "suppressed";
  SetLogLevel(LogLevel::kInfo);
}

TEST(LoggingDeathTest, FatalAborts) { EXPECT_DEATH(LOG(FATAL) << "fatal here", "fatal here"); }

}  // namespace
}  // namespace kiln
