#include "core/crypto.h"

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "core/mapped_file.h"

namespace kiln {
namespace {

struct EvpMdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
struct EvpPkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, EvpMdCtxFree>;
using Pkey = std::unique_ptr<EVP_PKEY, EvpPkeyFree>;

std::string ToHex(const uint8_t* bytes, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

// One SHA-256 context fed piece by piece.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Update(const uint8_t* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }
  std::string HexDigest() {
    uint8_t digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &len);
    return ToHex(digest, len);
  }

 private:
  MdCtx ctx_;
};

// Hashes the chunks of `bytes` on `threads` threads; returns the digests in chunk order.
std::vector<std::string> ChunkDigests(std::span<const uint8_t> bytes, int64_t chunk_bytes,
                                      int threads) {
  const int64_t n = static_cast<int64_t>(bytes.size());
  const int64_t chunks = n == 0 ? 0 : (n + chunk_bytes - 1) / chunk_bytes;
  std::vector<std::string> digests(chunks);
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t c = next++; c < chunks; c = next++) {
      Sha256 h;
      const int64_t begin = c * chunk_bytes;
      h.Update(bytes.data() + begin, static_cast<size_t>(std::min(chunk_bytes, n - begin)));
      digests[c] = h.HexDigest();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max<int64_t>(1, std::min<int64_t>(threads, chunks)); ++t) {
    pool.emplace_back(work);
  }
  work();
  for (std::thread& t : pool) t.join();
  return digests;
}

std::string OpenSslError() {
  // The library's error queue is process-wide; a generic reason is enough for the user.
  return "OpenSSL could not read it";
}

Result<Pkey> ReadKey(const std::string& path, bool want_private) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return NotFound(path + ": cannot open the key file");
  EVP_PKEY* key = want_private ? PEM_read_PrivateKey(f, nullptr, nullptr, nullptr)
                               : PEM_read_PUBKEY(f, nullptr, nullptr, nullptr);
  if (key == nullptr && !want_private) {  // a private key file also holds the public key
    std::rewind(f);
    key = PEM_read_PrivateKey(f, nullptr, nullptr, nullptr);
  }
  std::fclose(f);
  if (key == nullptr) {
    return InvalidArgument(path + ": not a PEM " +
                           std::string(want_private ? "private" : "public") + " key (" +
                           OpenSslError() + "); make one with `openssl genpkey -algorithm " +
                           "ed25519 -out key.pem` and `openssl pkey -in key.pem -pubout`");
  }
  Pkey owned(key);
  if (EVP_PKEY_id(key) != EVP_PKEY_ED25519) {
    return InvalidArgument(path + ": not an Ed25519 key (kiln signs engines with Ed25519)");
  }
  return owned;
}

}  // namespace

std::string Sha256Hex(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.Update(bytes.data(), bytes.size());
  return h.HexDigest();
}

Result<FileDigest> Sha256File(const std::string& path, int64_t chunk_bytes, int threads) {
  KILN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  FileDigest d;
  d.bytes = static_cast<int64_t>(file.size());
  std::thread whole([&] { d.sha256 = Sha256Hex(file.bytes()); });
  if (chunk_bytes > 0) {
    d.chunk_bytes = chunk_bytes;
    d.chunk_sha256 = ChunkDigests(file.bytes(), chunk_bytes, std::max(1, threads - 1));
  }
  whole.join();
  return d;
}

Status VerifyFileDigest(const std::string& path, const FileDigest& expected, int threads) {
  KILN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  if (static_cast<int64_t>(file.size()) != expected.bytes) {
    return Corrupt(path + ": holds " + std::to_string(file.size()) + " bytes, the manifest says " +
                   std::to_string(expected.bytes));
  }
  if (expected.chunk_bytes <= 0) {
    if (Sha256Hex(file.bytes()) != expected.sha256) {
      return Corrupt(path + ": sha256 differs from the manifest's (the file was changed)");
    }
    return Status::Ok();
  }
  const std::vector<std::string> got = ChunkDigests(file.bytes(), expected.chunk_bytes, threads);
  if (got.size() != expected.chunk_sha256.size()) {
    return Corrupt(path + ": the manifest lists " + std::to_string(expected.chunk_sha256.size()) +
                   " chunk digests for " + std::to_string(got.size()) + " chunks");
  }
  for (size_t c = 0; c < got.size(); ++c) {
    if (got[c] != expected.chunk_sha256[c]) {
      const int64_t begin = static_cast<int64_t>(c) * expected.chunk_bytes;
      return Corrupt(path + ": bytes " + std::to_string(begin) + ".." +
                     std::to_string(std::min(begin + expected.chunk_bytes, expected.bytes)) +
                     " differ from the manifest's sha256 (the file was changed)");
    }
  }
  return Status::Ok();
}

Result<std::string> Ed25519Sign(const std::string& private_key_pem, std::string_view message) {
  KILN_ASSIGN_OR_RETURN(Pkey key, ReadKey(private_key_pem, /*want_private=*/true));
  MdCtx ctx(EVP_MD_CTX_new());
  uint8_t sig[64];
  size_t len = sizeof(sig);
  if (EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1 ||
      EVP_DigestSign(ctx.get(), sig, &len, reinterpret_cast<const uint8_t*>(message.data()),
                     message.size()) != 1) {
    return Internal(private_key_pem + ": Ed25519 signing failed");
  }
  return ToHex(sig, len);
}

Status Ed25519Verify(const std::string& public_key_pem, std::string_view message,
                     std::string_view signature_hex) {
  KILN_ASSIGN_OR_RETURN(Pkey key, ReadKey(public_key_pem, /*want_private=*/false));
  if (signature_hex.size() != 128 ||
      signature_hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return InvalidArgument("signature: expected 128 lowercase hex digits (64 bytes)");
  }
  uint8_t sig[64];
  for (int i = 0; i < 64; ++i) {
    auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
    sig[i] =
        static_cast<uint8_t>(nibble(signature_hex[2 * i]) << 4 | nibble(signature_hex[2 * i + 1]));
  }
  MdCtx ctx(EVP_MD_CTX_new());
  if (EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1) {
    return Internal(public_key_pem + ": Ed25519 verification could not start");
  }
  if (EVP_DigestVerify(ctx.get(), sig, sizeof(sig),
                       reinterpret_cast<const uint8_t*>(message.data()), message.size()) != 1) {
    return Corrupt("signature does not verify with " + public_key_pem +
                   ": the engine was changed after signing, or signed with another key");
  }
  return Status::Ok();
}

}  // namespace kiln
