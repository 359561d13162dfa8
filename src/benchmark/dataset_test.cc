#include "benchmark/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

namespace kiln::benchmark {
namespace {

// A small byte-level BPE tokenizer: a control token "<s>" at id 0, the 256 GPT-2 byte symbols,
// the merges "h e", "he l", "l o", "hel lo", then control "</s>", "<|im_start|>" and an unknown
// token "<unk>" (4 special ids of 265). Letters other than h, e, l, o encode one token each, so
// "xxxx" is 4 tokens.
std::unique_ptr<Tokenizer> SmallTokenizer() {
  GgufTokenizerFields f;
  f.model = "gpt2";
  f.pre = "gpt-2";
  f.tokens.push_back("<s>");
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    uint32_t cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    f.tokens.push_back(s);
  }
  for (const char* t : {"he", "hel", "lo", "hello", "</s>", "<|im_start|>", "<unk>"}) {
    f.tokens.push_back(t);
  }
  f.merges = {"h e", "he l", "l o", "hel lo"};
  f.token_type.assign(f.tokens.size(), 1);
  const int64_t n = static_cast<int64_t>(f.tokens.size());
  f.token_type[0] = 3;
  f.token_type[n - 3] = 3;
  f.token_type[n - 2] = 3;
  f.token_type[n - 1] = 2;
  f.bos_id = 0;
  f.eos_id = n - 3;
  f.unk_id = n - 1;
  auto vocab = VocabFromGgufMetadata(f);
  CHECK(vocab.ok()) << vocab.status().ToString();
  auto tokenizer = Tokenizer::Create(std::move(vocab).value());
  CHECK(tokenizer.ok()) << tokenizer.status().ToString();
  return std::move(tokenizer).value();
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out << text;
  CHECK(out.good()) << path;
  return path;
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / v.size();
}
double Stddev(const std::vector<double>& v) {
  const double m = Mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / v.size());
}

TEST(DatasetTest, SmallTokenizerIsAsDescribed) {
  auto tok = SmallTokenizer();
  EXPECT_EQ(tok->vocab_size(), 264);
  int num_special = 0;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) num_special += tok->is_special(id);
  EXPECT_EQ(num_special, 4);
  EXPECT_TRUE(tok->is_special(0));
  EXPECT_EQ(tok->Encode("xxxx", false, false).size(), 4u);
  EXPECT_EQ(tok->Encode("hello", false, false).size(), 1u);
}

// --- random ---

TEST(RandomDatasetTest, ExactLengthsWithoutTokenizer) {
  DatasetOptions o;
  o.num_requests = 50;
  o.input_len = 37;
  o.output_len = 11;
  o.vocab_size = 1000;
  auto reqs = MakeDataset(o, nullptr);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  ASSERT_EQ(reqs->size(), 50u);
  for (const BenchRequest& r : *reqs) {
    EXPECT_EQ(r.input_len, 37);
    EXPECT_EQ(r.prompt_ids.size(), 37u);
    EXPECT_EQ(r.output_len, 11);
    EXPECT_EQ(r.prefix_len, 0);
    EXPECT_TRUE(r.prompt_text.empty());
    for (int32_t id : r.prompt_ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 1000);
    }
  }
}

TEST(RandomDatasetTest, NormalLengthsHaveTheGivenMeanAndStddev) {
  DatasetOptions o;
  o.num_requests = 5000;
  o.input_len = 100;
  o.input_len_stddev = 20;
  o.output_len = 50;
  o.output_len_stddev = 10;
  o.vocab_size = 32;
  auto reqs = MakeDataset(o, nullptr);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  std::vector<double> in, out;
  for (const BenchRequest& r : *reqs) {
    ASSERT_EQ(r.prompt_ids.size(), static_cast<size_t>(r.input_len));
    in.push_back(r.input_len);
    out.push_back(r.output_len);
  }
  // Standard errors over 5,000 draws: mean sd/sqrt(n) (0.28 and 0.14), stddev about
  // sd/sqrt(2n) (0.2 and 0.1); the tolerances are about 4-5 of them.
  EXPECT_NEAR(Mean(in), 100, 1.2);
  EXPECT_NEAR(Stddev(in), 20, 1.0);
  EXPECT_NEAR(Mean(out), 50, 0.6);
  EXPECT_NEAR(Stddev(out), 10, 0.5);
  // Lengths vary (they are not all the mean).
  EXPECT_GT(std::set<double>(in.begin(), in.end()).size(), 50u);
}

TEST(RandomDatasetTest, NormalLengthsAreClampedToOneAndTwiceTheMean) {
  DatasetOptions o;
  o.num_requests = 2000;
  o.input_len = 10;
  o.input_len_stddev = 50;
  o.output_len = 4;
  o.output_len_stddev = 40;
  o.vocab_size = 32;
  auto reqs = MakeDataset(o, nullptr);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  int at_one = 0, at_max = 0;
  for (const BenchRequest& r : *reqs) {
    ASSERT_GE(r.input_len, 1);
    ASSERT_LE(r.input_len, 20);
    ASSERT_GE(r.output_len, 1);
    ASSERT_LE(r.output_len, 8);
    at_one += r.input_len == 1;
    at_max += r.input_len == 20;
  }
  // With sd 5x the mean, about 42% fall below 1 and 42% above 20.
  EXPECT_GT(at_one, 600);
  EXPECT_GT(at_max, 600);
}

TEST(RandomDatasetTest, SpecialTokensAreNeverDrawn) {
  auto tok = SmallTokenizer();
  DatasetOptions o;
  o.num_requests = 200;
  o.input_len = 500;  // 100,000 draws: a special id (4 of 264) would appear ~1,500 times
  o.output_len = 8;
  auto reqs = MakeDataset(o, tok.get());
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  std::set<int32_t> seen;
  for (const BenchRequest& r : *reqs) {
    for (int32_t id : r.prompt_ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tok->vocab_size());
      ASSERT_FALSE(tok->is_special(id)) << id;
      seen.insert(id);
    }
    EXPECT_EQ(r.prompt_text, tok->Decode(r.prompt_ids, false));
  }
  EXPECT_EQ(seen.size(), 260u);  // every non-special id is drawn
}

TEST(RandomDatasetTest, SameSeedSamePromptsOtherSeedOthers) {
  DatasetOptions o;
  o.num_requests = 20;
  o.input_len = 16;
  o.input_len_stddev = 4;
  o.vocab_size = 50000;
  o.seed = 7;
  auto a = MakeDataset(o, nullptr);
  auto b = MakeDataset(o, nullptr);
  o.seed = 8;
  auto c = MakeDataset(o, nullptr);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  int num_differ = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].prompt_ids, (*b)[i].prompt_ids);
    EXPECT_EQ((*a)[i].input_len, (*b)[i].input_len);
    num_differ += (*a)[i].prompt_ids != (*c)[i].prompt_ids;
  }
  EXPECT_EQ(num_differ, 20);
}

TEST(RandomDatasetTest, BadOptionsAreInvalidArguments) {
  DatasetOptions o;
  o.vocab_size = 100;
  o.kind = "nope";
  auto r = MakeDataset(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("nope"), std::string::npos);

  o.kind = "random";
  o.num_requests = 0;
  EXPECT_EQ(MakeDataset(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o.num_requests = 5;
  o.input_len = 0;
  r = MakeDataset(o, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("input_len"), std::string::npos);
  o.input_len = 5;
  o.vocab_size = 0;
  r = MakeDataset(o, nullptr);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("vocab_size"), std::string::npos);
}

// --- shared-prefix ---

TEST(SharedPrefixDatasetTest, RequestsOfOnePrefixShareExactlyThePrefix) {
  auto tok = SmallTokenizer();
  DatasetOptions o;
  o.kind = "shared-prefix";
  o.num_requests = 10;
  o.num_prefixes = 3;
  o.prefix_len = 20;
  o.question_len = 5;
  o.output_len = 9;
  auto reqs = MakeDataset(o, tok.get());
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  ASSERT_EQ(reqs->size(), 10u);
  for (size_t i = 0; i < reqs->size(); ++i) {
    const BenchRequest& r = (*reqs)[i];
    ASSERT_EQ(r.prompt_ids.size(), 25u);
    EXPECT_EQ(r.input_len, 25);
    EXPECT_EQ(r.output_len, 9);
    EXPECT_EQ(r.prefix_len, 20);
    std::vector<int32_t> prefix(r.prompt_ids.begin(), r.prompt_ids.begin() + 20);
    const std::string prefix_text = tok->Decode(prefix, false);
    EXPECT_EQ(r.prefix_text_len, static_cast<int32_t>(prefix_text.size()));
    EXPECT_TRUE(r.prompt_text.starts_with(prefix_text));
    EXPECT_EQ(r.prompt_text, tok->Decode(r.prompt_ids, false));
    for (int32_t id : r.prompt_ids) EXPECT_FALSE(tok->is_special(id));
    for (size_t j = 0; j < i; ++j) {
      const BenchRequest& q = (*reqs)[j];
      const bool same_prefix =
          std::equal(r.prompt_ids.begin(), r.prompt_ids.begin() + 20, q.prompt_ids.begin());
      EXPECT_EQ(same_prefix, i % 3 == j % 3) << i << " " << j;
      // The questions are drawn per request.
      EXPECT_FALSE(
          std::equal(r.prompt_ids.begin() + 20, r.prompt_ids.end(), q.prompt_ids.begin() + 20))
          << i << " " << j;
    }
  }
}

TEST(SharedPrefixDatasetTest, WithoutTokenizerHasNoText) {
  DatasetOptions o;
  o.kind = "shared-prefix";
  o.num_requests = 4;
  o.num_prefixes = 2;
  o.prefix_len = 8;
  o.question_len = 3;
  o.vocab_size = 100;
  auto reqs = MakeDataset(o, nullptr);
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  for (const BenchRequest& r : *reqs) {
    EXPECT_EQ(r.prompt_ids.size(), 11u);
    EXPECT_EQ(r.prefix_len, 8);
    EXPECT_EQ(r.prefix_text_len, 0);
    EXPECT_TRUE(r.prompt_text.empty());
  }
  o.num_prefixes = 0;
  EXPECT_EQ(MakeDataset(o, nullptr).status().code(), StatusCode::kInvalidArgument);
}

// --- jsonl ---

TEST(JsonlDatasetTest, ParsesCyclesAndSkipsBlankLines) {
  auto tok = SmallTokenizer();
  const std::string path = WriteTemp("prompts.jsonl",
                                     "{\"prompt\": \"hello\", \"output_len\": 7}\n"
                                     "\n"
                                     "   \t\r\n"
                                     "{\"prompt\": \"xxxx\", \"max_tokens\": 9, \"other\": [1]}\n"
                                     "{\"prompt\": \"abc\"}");  // no final newline
  DatasetOptions o;
  o.kind = "jsonl";
  o.path = path;
  o.num_requests = 7;
  o.output_len = 33;
  auto reqs = MakeDataset(o, tok.get());
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  ASSERT_EQ(reqs->size(), 7u);
  const std::vector<std::string> texts = {"hello", "xxxx", "abc"};
  const std::vector<int32_t> outs = {7, 9, 33};
  const std::vector<int32_t> ins = {1, 4, 3};
  for (size_t i = 0; i < 7; ++i) {
    const BenchRequest& r = (*reqs)[i];
    EXPECT_EQ(r.prompt_text, texts[i % 3]) << i;
    EXPECT_EQ(r.output_len, outs[i % 3]) << i;
    EXPECT_EQ(r.input_len, ins[i % 3]) << i;
    EXPECT_EQ(r.prompt_ids, tok->Encode(texts[i % 3], false, false)) << i;
  }
  EXPECT_EQ((*reqs)[0].prompt_ids, std::vector<int32_t>{tok->TokenToId("hello")});

  // Without a tokenizer the input length is unknown.
  auto plain = MakeDataset(o, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)[1].input_len, -1);
  EXPECT_TRUE((*plain)[1].prompt_ids.empty());
  EXPECT_EQ((*plain)[1].prompt_text, "xxxx");
}

void ExpectJsonlError(const std::string& name, const std::string& text, int line) {
  const std::string path = WriteTemp(name, text);
  DatasetOptions o;
  o.kind = "jsonl";
  o.path = path;
  o.num_requests = 3;
  auto r = MakeDataset(o, nullptr);
  ASSERT_FALSE(r.ok()) << name;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << name;
  EXPECT_NE(r.status().message().find(path + ":" + std::to_string(line) + ":"), std::string::npos)
      << r.status().message();
}

TEST(JsonlDatasetTest, MalformedLinesNameFileAndLine) {
  ExpectJsonlError("bad1.jsonl", "{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\"\n", 3);
  ExpectJsonlError("bad2.jsonl", "{\"prompt\": 5}\n", 1);
  ExpectJsonlError("bad3.jsonl", "{\"prompt\": \"a\"}\n[\"a\"]\n", 2);
  ExpectJsonlError("bad4.jsonl", "\n{\"prompt\": \"a\", \"output_len\": 0}\n", 2);
  ExpectJsonlError("bad5.jsonl", "{\"prompt\": \"a\", \"max_tokens\": \"9\"}\n", 1);
  ExpectJsonlError("bad6.jsonl", "{\"text\": \"a\"}\n", 1);
}

TEST(JsonlDatasetTest, MissingOrEmptyFile) {
  DatasetOptions o;
  o.kind = "jsonl";
  o.path = ::testing::TempDir() + "/no_such_file.jsonl";
  auto r = MakeDataset(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(o.path), std::string::npos);

  o.path = WriteTemp("blank.jsonl", "\n  \n");
  r = MakeDataset(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// --- sharegpt ---

std::string Entry(const std::string& prompt, const std::string& reply) {
  return "{\"id\": \"x\", \"conversations\": [{\"from\": \"human\", \"value\": \"" + prompt +
         "\"}, {\"from\": \"gpt\", \"value\": \"" + reply + "\"}]}";
}

// Seven entries; with a reply's length as output length only a, b and c pass the filters.
std::string ShareGptFile() {
  std::string s = "[";
  s += Entry("aaaa", "zzzz") + ",";                                  // a: 4 + 4, both minimal
  s += Entry(std::string(1000, 'b'), std::string(1048, 'z')) + ",";  // b: sum exactly 2048
  s += Entry("cccccccc", std::string(20, 'z')) + ",";                // c: 8 + 20
  s += Entry("ddd", "zzzzzz") + ",";                                 // d: prompt 3 tokens
  s += Entry("ffff", "zzz") + ",";                                   // f: reply 3 tokens
  s += Entry(std::string(1025, 'g'), "zzzz") + ",";                  // g: prompt over 1,024
  s += Entry(std::string(1000, 'i'), std::string(1049, 'z')) + ",";  // i: sum 2049
  s += "{\"conversations\": [{\"from\": \"human\", \"value\": \"jjjjjjj\"}]}";  // one turn
  return s + "]";
}

TEST(ShareGptDatasetTest, FiltersByTokenCounts) {
  auto tok = SmallTokenizer();
  DatasetOptions o;
  o.kind = "sharegpt";
  o.path = WriteTemp("sharegpt.json", ShareGptFile());
  o.num_requests = 3;
  auto reqs = MakeDataset(o, tok.get());
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  std::map<char, const BenchRequest*> by_first;
  for (const BenchRequest& r : *reqs) by_first[r.prompt_text[0]] = &r;
  ASSERT_EQ(by_first.size(), 3u);
  ASSERT_TRUE(by_first.count('a') && by_first.count('b') && by_first.count('c'));
  EXPECT_EQ(by_first['a']->input_len, 4);
  EXPECT_EQ(by_first['a']->output_len, 4);
  EXPECT_EQ(by_first['b']->input_len, 1000);
  EXPECT_EQ(by_first['b']->output_len, 1048);
  EXPECT_EQ(by_first['c']->output_len, 20);
  EXPECT_EQ(by_first['c']->prompt_ids, tok->Encode("cccccccc", false, false));

  // One more than pass: an error naming both counts.
  o.num_requests = 4;
  auto r = MakeDataset(o, tok.get());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("only 3 of"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("4 requests"), std::string::npos) << r.status().message();
}

TEST(ShareGptDatasetTest, FixedOutputLenSkipsTheReplyCheck) {
  auto tok = SmallTokenizer();
  DatasetOptions o;
  o.kind = "sharegpt";
  o.path = WriteTemp("sharegpt_fixed.json", ShareGptFile());
  o.fixed_output_len = true;
  o.output_len = 100;
  o.num_requests = 5;  // a, b, c, f (reply 3 tokens, not checked), i (1000 + 100)
  auto reqs = MakeDataset(o, tok.get());
  ASSERT_TRUE(reqs.ok()) << reqs.status().ToString();
  std::set<char> firsts;
  for (const BenchRequest& r : *reqs) {
    firsts.insert(r.prompt_text[0]);
    EXPECT_EQ(r.output_len, 100);
  }
  EXPECT_EQ(firsts, (std::set<char>{'a', 'b', 'c', 'f', 'i'}));
  o.num_requests = 6;
  EXPECT_FALSE(MakeDataset(o, tok.get()).ok());
}

TEST(ShareGptDatasetTest, ShuffledBySeed) {
  auto tok = SmallTokenizer();
  std::string s = "[";
  for (int i = 0; i < 20; ++i) {
    if (i > 0) s += ",";
    s += Entry(std::string(4 + i, 'a' + i), "zzzzz");
  }
  DatasetOptions o;
  o.kind = "sharegpt";
  o.path = WriteTemp("sharegpt20.json", s + "]");
  o.num_requests = 20;
  auto order = [&](uint64_t seed) {
    o.seed = seed;
    auto reqs = MakeDataset(o, tok.get());
    CHECK(reqs.ok()) << reqs.status().ToString();
    std::string firsts;
    for (const BenchRequest& r : *reqs) firsts += r.prompt_text[0];
    return firsts;
  };
  const std::string a = order(1);
  EXPECT_EQ(a, order(1));
  EXPECT_NE(a, order(2));
  std::string sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, "abcdefghijklmnopqrst");
}

TEST(ShareGptDatasetTest, MalformedEntriesNameTheirIndex) {
  auto tok = SmallTokenizer();
  DatasetOptions o;
  o.kind = "sharegpt";
  o.num_requests = 1;
  struct Case {
    std::string text;
    std::string want;
  };
  for (const Case& c : {
           Case{"[" + Entry("aaaa", "zzzz") + ", {\"id\": 1}]", "entry 1 "},
           Case{"[" + Entry("aaaa", "zzzz") + ", 5]", "entry 1 "},
           Case{"[" + Entry("aaaa", "zzzz") + "," + Entry("bbbb", "zzzz") +
                    ", {\"conversations\": [{\"from\": \"human\", \"value\": 3}, {}]}]",
                "entry 2 "},
           Case{"{\"conversations\": []}", "expected a JSON list"},
           Case{"[" + Entry("aaaa", "zzzz"), "not valid JSON"},
       }) {
    o.path = WriteTemp("sharegpt_bad.json", c.text);
    auto r = MakeDataset(o, tok.get());
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(o.path), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().message();
  }
}

TEST(ShareGptDatasetTest, NeedsTokenizerAndFile) {
  auto tok = SmallTokenizer();
  DatasetOptions o;
  o.kind = "sharegpt";
  o.path = WriteTemp("sharegpt_ok.json", ShareGptFile());
  EXPECT_EQ(MakeDataset(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o.path = ::testing::TempDir() + "/missing_sharegpt.json";
  auto r = MakeDataset(o, tok.get());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(o.path), std::string::npos);
}

// --- arrival times ---

// The coefficient of variation (stddev / mean) of the gaps between `times`, and their mean.
void GapStats(const std::vector<double>& times, double* mean, double* cv) {
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  *mean = Mean(gaps);
  *cv = Stddev(gaps) / *mean;
}

TEST(ArrivalTimesTest, InfiniteRateSendsAllAtZero) {
  std::vector<double> t = ArrivalTimes(100, std::numeric_limits<double>::infinity(), 1.0, 3);
  EXPECT_EQ(t, std::vector<double>(100, 0.0));
  EXPECT_TRUE(ArrivalTimes(0, 10, 1, 0).empty());
  EXPECT_EQ(ArrivalTimes(1, 10, 1, 0), std::vector<double>{0.0});
}

TEST(ArrivalTimesTest, PoissonGapsHaveMeanOneOverRate) {
  std::vector<double> t = ArrivalTimes(20001, 4.0, 1.0, 11);
  ASSERT_EQ(t.size(), 20001u);
  EXPECT_EQ(t[0], 0.0);
  for (size_t i = 1; i < t.size(); ++i) ASSERT_GE(t[i], t[i - 1]) << i;
  double mean, cv;
  GapStats(t, &mean, &cv);
  // Exponential gaps: the mean's standard error is 0.25 / sqrt(20000) = 0.7%, the CV's about
  // 1%; tolerances about 4-5 standard errors.
  EXPECT_NEAR(mean, 0.25, 0.25 * 0.03);
  EXPECT_NEAR(cv, 1.0, 0.05);
}

TEST(ArrivalTimesTest, BurstinessSetsTheCoefficientOfVariation) {
  // Gamma gaps with shape k have CV 1 / sqrt(k) and, here, mean 1 / rate = 0.5 s.
  double mean, cv;
  GapStats(ArrivalTimes(20001, 2.0, 4.0, 5), &mean, &cv);
  // Standard errors over 20,000 gaps: the mean's CV / sqrt(n); the CV's about
  // CV * sqrt((kurtosis - 1) / 4n + 1 / n) (kurtosis 3 + 6 / k). Tolerances about 4-5 of them.
  EXPECT_NEAR(mean, 0.5, 0.5 * 0.02);  // standard error 0.35%
  EXPECT_NEAR(cv, 0.5, 0.02);          // standard error 0.004
  GapStats(ArrivalTimes(20001, 2.0, 0.25, 5), &mean, &cv);
  EXPECT_NEAR(mean, 0.5, 0.5 * 0.06);  // standard error 1.4%
  EXPECT_NEAR(cv, 2.0, 0.2);           // standard error 0.04
}

TEST(ArrivalTimesTest, SeedDeterminesTheTimes) {
  EXPECT_EQ(ArrivalTimes(500, 10, 0.5, 42), ArrivalTimes(500, 10, 0.5, 42));
  EXPECT_NE(ArrivalTimes(500, 10, 0.5, 42), ArrivalTimes(500, 10, 0.5, 43));
}

}  // namespace
}  // namespace kiln::benchmark

namespace kiln::benchmark {
namespace {

TEST(WarmupVariantTest, SharesNoLeadingBlockWithTheRequest) {
  BenchRequest r;
  r.prompt_ids = {5, 6, 7, 8, 9};
  r.prompt_text = "system part, question";
  r.prefix_text_len = 11;  // "system part"
  r.output_len = 3;
  const BenchRequest v = WarmupVariant(r);
  EXPECT_EQ(v.prompt_ids, (std::vector<int32_t>{6, 7, 8, 9, 5}));
  EXPECT_EQ(v.prompt_text, "warm-up: system part, question");
  EXPECT_EQ(v.prompt_text.substr(0, v.prefix_text_len), "warm-up: system part");
  EXPECT_EQ(v.output_len, 3);
}

}  // namespace
}  // namespace kiln::benchmark
