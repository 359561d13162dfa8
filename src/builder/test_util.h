// Helpers shared by the builder tests: a scratch directory and a small, independent
// safetensors header reader (nlohmann JSON; it does not use the writer's code).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln::testing {

// A fresh directory under the test temp dir, removed on destruction.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& name) {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("kiln_" + name + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The parts of a safetensors file, parsed independently of the writer.
struct ParsedSafetensors {
  uint64_t header_len = 0;
  nlohmann::json header;
  std::string data;  // the bytes after the header
};

inline ParsedSafetensors ParseSafetensors(const std::string& bytes) {
  ParsedSafetensors p;
  EXPECT_GE(bytes.size(), 8u);
  for (int i = 7; i >= 0; --i) p.header_len = (p.header_len << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_LE(8 + p.header_len, bytes.size());
  p.header = nlohmann::json::parse(bytes.substr(8, p.header_len));
  p.data = bytes.substr(8 + p.header_len);
  return p;
}

}  // namespace kiln::testing
