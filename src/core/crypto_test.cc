#include "core/crypto.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/crypto_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

class CryptoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_crypto_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::pair<std::string, std::string> MakeKeyPair(const std::string& stem) {
    return testing::WriteEd25519KeyPair((dir_ / stem).string());
  }

  fs::path dir_;
};

TEST_F(CryptoTest, Sha256MatchesTheFips180Vectors) {
  EXPECT_EQ(Sha256Hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(std::string_view("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_F(CryptoTest, FileDigestChunksAndDetectsAChangedByte) {
  std::string bytes(10000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7919 % 251);
  const std::string path = Write("data.bin", bytes);
  auto d = Sha256File(path, /*chunk_bytes=*/4096, /*threads=*/3);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->bytes, 10000);
  EXPECT_EQ(d->sha256, Sha256Hex(std::string_view(bytes)));
  ASSERT_EQ(d->chunk_sha256.size(), 3u);  // 4096 + 4096 + 1808
  EXPECT_EQ(d->chunk_sha256[2], Sha256Hex(std::string_view(bytes).substr(8192)));
  EXPECT_TRUE(VerifyFileDigest(path, *d, 2).ok());

  bytes[5000] ^= 1;
  Write("data.bin", bytes);
  const Status changed = VerifyFileDigest(path, *d, 2);
  EXPECT_EQ(changed.code(), StatusCode::kCorrupt);
  EXPECT_NE(changed.message().find("bytes 4096..8192"), std::string::npos) << changed.message();
  FileDigest whole = *d;
  whole.chunk_bytes = 0;
  EXPECT_EQ(VerifyFileDigest(path, whole, 1).code(), StatusCode::kCorrupt);
  Write("data.bin", bytes + "x");
  EXPECT_EQ(VerifyFileDigest(path, *d, 1).code(), StatusCode::kCorrupt);
  EXPECT_EQ(Sha256File((dir_ / "missing").string(), 0, 1).status().code(), StatusCode::kNotFound);
}

TEST_F(CryptoTest, Ed25519SignsAndRejectsTamperingAndOtherKeys) {
  const auto [priv, pub] = MakeKeyPair("a");
  const auto [other_priv, other_pub] = MakeKeyPair("b");
  auto sig = Ed25519Sign(priv, "manifest bytes");
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  EXPECT_EQ(sig->size(), 128u);
  EXPECT_TRUE(Ed25519Verify(pub, "manifest bytes", *sig).ok());
  EXPECT_TRUE(Ed25519Verify(priv, "manifest bytes", *sig).ok());  // its public half
  EXPECT_EQ(Ed25519Verify(pub, "manifest bytez", *sig).code(), StatusCode::kCorrupt);
  EXPECT_EQ(Ed25519Verify(other_pub, "manifest bytes", *sig).code(), StatusCode::kCorrupt);
  EXPECT_EQ(Ed25519Verify(pub, "manifest bytes", "abc").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Ed25519Verify((dir_ / "none.pem").string(), "m", *sig).code(), StatusCode::kNotFound);
  const std::string junk = Write("junk.pem", "not a key");
  EXPECT_EQ(Ed25519Sign(junk, "m").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Ed25519Sign(pub, "m").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
