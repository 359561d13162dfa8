// tokenizer_bench: single-thread encode throughput of kiln's tokenizer against HF `tokenizers`,
// measured in the same run on the same text.
//
// usage: tokenizer_bench TOKENIZER_JSON TEXT_FILE [PYTHON]
//
// Encodes the whole file in 4 KiB chunks (add_special=false, parse_special=true as HF does), best
// of 5 passes, after one warm-up pass (which also fills the word cache, as in a long-running
// server). Then runs PYTHON (default python3) with HF `tokenizers` on the same chunks, one thread
// (encode, not encode_batch).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_JSON TEXT_FILE [PYTHON]\n", argv[0]);
    return 2;
  }
  auto read = [](const char* p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  const std::string json = read(argv[1]), text = read(argv[2]);
  auto vocab = kiln::VocabFromTokenizerJson(json, argv[1]);
  if (!vocab.ok()) {
    std::fprintf(stderr, "%s\n", vocab.status().ToString().c_str());
    return 1;
  }
  auto tok = kiln::Tokenizer::Create(std::move(vocab).value());
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  std::vector<std::string_view> chunks;
  for (size_t i = 0; i < text.size();) {
    size_t end = std::min(text.size(), i + 4096);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    chunks.push_back(std::string_view(text).substr(i, end - i));
    i = end;
  }
  double best = 1e30;
  size_t num_tokens = 0;
  for (int pass = 0; pass < 6; ++pass) {
    auto t0 = std::chrono::steady_clock::now();
    num_tokens = 0;
    for (std::string_view c : chunks) num_tokens += (*tok)->Encode(c, false, true).size();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0) best = std::min(best, s);
  }
  double mb = text.size() / 1e6;
  std::printf("kiln  encode: %.2f MB in %.3f s = %.2f MB/s (%zu tokens)\n", mb, best, mb / best,
              num_tokens);
  std::fflush(stdout);

  const std::string python = argc > 3 ? argv[3] : "python3";
  const std::string cmd =
      "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false " + python +
      " -c \"import sys,time\nfrom tokenizers import Tokenizer\n"
      "t=Tokenizer.from_file(sys.argv[1]);d=open(sys.argv[2],'rb').read()\n"
      "cs=[];i=0\nwhile i<len(d):\n e=min(len(d),i+4096)\n"
      " while e<len(d) and d[e]&0xC0==0x80: e+=1\n cs.append(d[i:e].decode());i=e\n"
      "b=1e30\nfor p in range(6):\n "
      "t0=time.perf_counter();n=sum(len(t.encode(c,add_special_tokens=False).ids) for c in cs)\n"
      " s=time.perf_counter()-t0\n if p: b=min(b,s)\n"
      "print('hf    encode: %.2f MB in %.3f s = %.2f MB/s (%d "
      "tokens)'%(len(d)/1e6,b,len(d)/1e6/b,n))\" " +
      argv[1] + " " + argv[2];
  return std::system(cmd.c_str()) == 0 ? 0 : 1;
}
