// SHA-256 digests and Ed25519 signatures (OpenSSL's libcrypto) for engine directories
// (docs/engine-format.md): every file's digest is recorded at build, and a signed manifest
// lets `serve --verify-key` refuse a tampered engine.
//
//   KILN_ASSIGN_OR_RETURN(FileDigest d, Sha256File("weights.bin", 64 << 20, 8));
//   KILN_ASSIGN_OR_RETURN(std::string sig, Ed25519Sign("key.pem", manifest_bytes));
//   KILN_RETURN_IF_ERROR(Ed25519Verify("key.pub.pem", manifest_bytes, sig));
//
// Keys are PEM files as `openssl genpkey -algorithm ed25519` (private) and
// `openssl pkey -pubout` (public) write them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln {

// Lowercase hex SHA-256 of `bytes`.
std::string Sha256Hex(std::span<const uint8_t> bytes);
inline std::string Sha256Hex(std::string_view text) {
  return Sha256Hex({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

struct FileDigest {
  int64_t bytes = 0;
  std::string sha256;  // of the whole file
  // Of each consecutive chunk_bytes piece (the last may be shorter): these can be checked on
  // many cores at once, where one file digest runs on one.
  int64_t chunk_bytes = 0;
  std::vector<std::string> chunk_sha256;
};

// Digests of the file at `path`. chunk_bytes > 0 also computes the chunk digests, on up to
// `threads` threads (the whole-file digest runs alongside them). Errors name the path.
Result<FileDigest> Sha256File(const std::string& path, int64_t chunk_bytes, int threads);

// Checks `path` against `expected` with only its chunk digests (parallel) when it has them, else
// its whole digest. Corrupt naming the file (and the first bad chunk's byte range) on mismatch.
Status VerifyFileDigest(const std::string& path, const FileDigest& expected, int threads);

// The 64-byte Ed25519 signature of `message` with the private key in `private_key_pem`, as
// lowercase hex. Errors: NotFound / InvalidArgument naming the key file when it is missing or
// not an Ed25519 private key.
Result<std::string> Ed25519Sign(const std::string& private_key_pem, std::string_view message);

// OK when `signature_hex` is a valid signature of `message` by the public key in
// `public_key_pem` (a private key file is accepted too: its public half is used). Corrupt
// when it is not (tampered, or signed by another key); NotFound / InvalidArgument for a bad key
// file or signature text.
Status Ed25519Verify(const std::string& public_key_pem, std::string_view message,
                     std::string_view signature_hex);

}  // namespace kiln
