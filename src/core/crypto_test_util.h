// Test helper: a fresh Ed25519 key pair in PEM files, as `openssl genpkey -algorithm ed25519`
// and `openssl pkey -pubout` write them.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>

#include <cstdio>
#include <string>
#include <utility>

namespace kiln::testing {

// Writes <stem>.pem (private) and <stem>.pub.pem (public); returns their paths.
inline std::pair<std::string, std::string> WriteEd25519KeyPair(const std::string& stem) {
  EVP_PKEY* key = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  const std::string priv = stem + ".pem", pub = stem + ".pub.pem";
  FILE* f = std::fopen(priv.c_str(), "w");
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  f = std::fopen(pub.c_str(), "w");
  PEM_write_PUBKEY(f, key);
  std::fclose(f);
  EVP_PKEY_free(key);
  return {priv, pub};
}

}  // namespace kiln::testing
