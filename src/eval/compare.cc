#include "eval/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/stats.h"

namespace kiln::eval {
namespace {

constexpr double kProbFloor = 1e-10;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// "A: generated 24 tokens in 1.29 s, scored ... in 0.70 s".
std::string SideLine(const char* side, const SideRun& run, const char* scored) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s: generated %lld tokens in %.2f s, scored %s in %.2f s", side,
                static_cast<long long>(run.num_generated_tokens), run.generate_seconds, scored,
                run.score_seconds);
  return buf;
}

SamplingParams GreedyParams(int32_t max_tokens, bool ignore_eos) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  p.seed = 0;
  p.skip_special_tokens = true;
  return p;
}

}  // namespace

Status ValidateCompareOptions(const CompareOptions& o) {
  if (o.max_tokens < 1) {
    return InvalidArgument("max_tokens: must be >= 1, got " + std::to_string(o.max_tokens));
  }
  if (o.kl_top_k < 1 || o.kl_top_k > kCompareTopLogprobs) {
    return InvalidArgument("kl_top_k: must be in [1, " + std::to_string(kCompareTopLogprobs) +
                           "], got " + std::to_string(o.kl_top_k));
  }
  if (!(o.min_exact_match >= 0.0 && o.min_exact_match <= 1.0)) {
    return InvalidArgument("min_exact_match: must be in [0, 1], got " +
                           std::to_string(o.min_exact_match));
  }
  if (o.max_mean_kl.has_value() && !(*o.max_mean_kl >= 0.0)) {
    return InvalidArgument("max_mean_kl: must be >= 0, got " + std::to_string(*o.max_mean_kl));
  }
  return Status::Ok();
}

Result<std::vector<std::vector<int32_t>>> TokenizePrompts(const LLM& llm,
                                                          const std::vector<Prompt>& prompts) {
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto t = llm.Tokenize(prompts[i]);
    if (!t.ok()) return t.status().WithContext("prompts[" + std::to_string(i) + "]");
    ids.push_back(std::move(*t));
  }
  return ids;
}

Result<SideRun> RunSide(LLM& llm, const std::vector<std::vector<int32_t>>& prompt_ids,
                        const std::vector<std::vector<int32_t>>* reference,
                        const CompareOptions& options) {
  KILN_RETURN_IF_ERROR(ValidateCompareOptions(options));
  SideRun run;
  run.vocab_size = llm.model_config().vocab_size;
  std::vector<Prompt> prompts;
  for (const std::vector<int32_t>& ids : prompt_ids) prompts.push_back(Prompt::Tokens(ids));

  auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(
      std::vector<GenerateResult> generated,
      llm.Generate(prompts, GreedyParams(options.max_tokens, options.ignore_eos)));
  run.generate_seconds = Seconds(start);
  run.outputs.resize(prompt_ids.size());
  std::vector<std::vector<int32_t>> own;
  for (size_t i = 0; i < generated.size(); ++i) {
    const CompletionOutput& c = generated[i].completions[0];
    SideOutput& out = run.outputs[i];
    out.token_ids = c.token_ids;
    out.text = c.text;
    out.finish_reason = c.finish_reason;
    run.num_generated_tokens += static_cast<int64_t>(c.token_ids.size());
    own.push_back(c.token_ids);
  }
  if (reference == nullptr) reference = &own;
  CHECK_EQ(reference->size(), prompt_ids.size());

  // Scoring: the distribution of reference token t comes from the prompt logprobs of the
  // sequence prompt + reference[0, L-1), and that of the last (t = L-1) from the one token
  // generated after it, so the sequence stays one token shorter than the side generated and
  // always fits max_model_len.
  std::vector<Prompt> sequences;
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    const std::vector<int32_t>& ref = (*reference)[i];
    if (ref.empty()) {
      return Internal("prompts[" + std::to_string(i) + "]: the reference output is empty");
    }
    std::vector<int32_t> seq = prompt_ids[i];
    seq.insert(seq.end(), ref.begin(), ref.end() - 1);
    sequences.push_back(Prompt::Tokens(std::move(seq)));
  }
  SamplingParams score = GreedyParams(1, /*ignore_eos=*/true);
  score.prompt_logprobs = kCompareTopLogprobs;
  score.logprobs = kCompareTopLogprobs;
  start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(std::vector<GenerateResult> scored, llm.Generate(sequences, score));
  run.score_seconds = Seconds(start);
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    const std::vector<int32_t>& ref = (*reference)[i];
    const GenerateResult& s = scored[i];
    const size_t num_prompt = prompt_ids[i].size();
    const size_t length = ref.size();
    // prompt_logprobs[k] scores sequence token k + 1; reference token t is sequence token
    // num_prompt + t.
    if (s.prompt_logprobs.size() + 1 != num_prompt + length - 1 ||
        s.completions[0].logprobs.size() != 1) {
      return Internal("prompts[" + std::to_string(i) + "]: the engine returned " +
                      std::to_string(s.prompt_logprobs.size()) + " prompt logprobs for a " +
                      std::to_string(num_prompt + length - 1) + "-token sequence");
    }
    std::vector<std::vector<TokenLogprob>>& dists = run.outputs[i].dists;
    for (size_t t = 0; t + 1 < length; ++t) {
      const ScoredToken& st = s.prompt_logprobs[num_prompt - 1 + t];
      if (st.token_id != ref[t]) {
        return Internal("prompts[" + std::to_string(i) + "], token " + std::to_string(t) +
                        ": the engine scored token " + std::to_string(st.token_id) + ", expected " +
                        std::to_string(ref[t]));
      }
      dists.push_back(st.top_logprobs);
    }
    dists.push_back(s.completions[0].logprobs[0].top_logprobs);
  }
  return run;
}

KlTerm TopKKl(std::span<const TokenLogprob> a, std::span<const TokenLogprob> b, int32_t k) {
  const size_t num_support = std::min(a.size(), static_cast<size_t>(std::max(k, 0)));
  // B's probabilities of tokens missing from its list: the mass the list leaves over, shared.
  double b_listed = 0.0;
  for (const TokenLogprob& t : b) b_listed += std::exp(static_cast<double>(t.logprob));
  const double b_unlisted = std::max(0.0, 1.0 - b_listed);
  const double b_last = b.empty() ? 1.0 : std::exp(static_cast<double>(b.back().logprob));
  std::vector<const TokenLogprob*> in_b(num_support, nullptr);
  int32_t num_missing = 0;
  for (size_t i = 0; i < num_support; ++i) {
    for (const TokenLogprob& t : b) {
      if (t.token_id == a[i].token_id) {
        in_b[i] = &t;
        break;
      }
    }
    num_missing += in_b[i] == nullptr ? 1 : 0;
  }
  const double q_missing = num_missing > 0 ? std::min(b_last, b_unlisted / num_missing) : 0.0;

  KlTerm term;
  term.exact = num_missing == 0;
  double p_support = 0.0, q_support = 0.0, kl = 0.0;
  for (size_t i = 0; i < num_support; ++i) {
    const double log_p = static_cast<double>(a[i].logprob);
    const double p = std::exp(log_p);
    const double log_q = in_b[i] != nullptr ? static_cast<double>(in_b[i]->logprob)
                                            : std::log(std::max(q_missing, kProbFloor));
    p_support += p;
    q_support += in_b[i] != nullptr ? std::exp(log_q) : q_missing;
    kl += p * (log_p - log_q);
  }
  const double p_rest = std::max(0.0, 1.0 - p_support);
  const double q_rest = std::max(0.0, 1.0 - q_support);
  if (p_rest > 0.0) kl += p_rest * (std::log(p_rest) - std::log(std::max(q_rest, kProbFloor)));
  // NOTE: the true value is >= 0; a negative one is rounding in the float logprobs.
  term.kl = std::max(0.0, kl);
  return term;
}

Distribution Distribute(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int64_t>(values.size());
  double sum = 0.0;
  for (double v : values) sum += v;
  d.mean = sum / static_cast<double>(values.size());
  d.min = values.front();
  d.max = values.back();
  d.p10 = PercentileOfSorted(values, 10);
  d.p50 = PercentileOfSorted(values, 50);
  d.p90 = PercentileOfSorted(values, 90);
  d.p99 = PercentileOfSorted(values, 99);
  return d;
}

CompareReport Compare(const SideRun& a, const SideRun& b, const CompareOptions& options) {
  CHECK_EQ(a.outputs.size(), b.outputs.size());
  CompareReport r;
  r.num_prompts = static_cast<int32_t>(a.outputs.size());
  for (int32_t lo = 0; lo < options.max_tokens; lo = lo == 0 ? 1 : lo * 2) {
    r.divergence_histogram.push_back({lo, std::min(lo == 0 ? 1 : lo * 2, options.max_tokens), 0});
  }
  std::vector<double> divergences, kls;
  int64_t num_exact = 0, num_top1 = 0, num_self_top1 = 0;
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const SideOutput& oa = a.outputs[i];
    const SideOutput& ob = b.outputs[i];
    PromptComparison p;
    p.exact_match = oa.token_ids == ob.token_ids;
    if (!p.exact_match) {
      const auto [ia, ib] = std::mismatch(oa.token_ids.begin(), oa.token_ids.end(),
                                          ob.token_ids.begin(), ob.token_ids.end());
      p.first_divergence = static_cast<int32_t>(ia - oa.token_ids.begin());
      divergences.push_back(p.first_divergence);
      for (HistogramBucket& bucket : r.divergence_histogram) {
        if (p.first_divergence >= bucket.lo && p.first_divergence < bucket.hi) ++bucket.count;
      }
    }
    p.num_positions = static_cast<int32_t>(oa.token_ids.size());
    CHECK_EQ(oa.dists.size(), oa.token_ids.size());
    CHECK_EQ(ob.dists.size(), oa.token_ids.size());
    double sum_kl = 0.0;
    for (size_t t = 0; t < oa.token_ids.size(); ++t) {
      const KlTerm term = TopKKl(oa.dists[t], ob.dists[t], options.kl_top_k);
      kls.push_back(term.kl);
      sum_kl += term.kl;
      p.max_kl = std::max(p.max_kl, term.kl);
      num_exact += term.exact ? 1 : 0;
      const int32_t token = oa.token_ids[t];
      p.num_top1_agree += !ob.dists[t].empty() && ob.dists[t][0].token_id == token ? 1 : 0;
      num_self_top1 += !oa.dists[t].empty() && oa.dists[t][0].token_id == token ? 1 : 0;
    }
    p.mean_kl = p.num_positions > 0 ? sum_kl / p.num_positions : 0.0;
    num_top1 += p.num_top1_agree;
    r.num_exact_match += p.exact_match ? 1 : 0;
    r.num_positions += p.num_positions;
    r.prompts.push_back(p);
  }
  r.exact_match_rate =
      r.num_prompts > 0 ? static_cast<double>(r.num_exact_match) / r.num_prompts : 0.0;
  r.first_divergence = Distribute(std::move(divergences));
  r.kl = Distribute(std::move(kls));
  if (r.num_positions > 0) {
    const double n = static_cast<double>(r.num_positions);
    r.kl_exact_fraction = static_cast<double>(num_exact) / n;
    r.top1_agreement = static_cast<double>(num_top1) / n;
    r.top1_self_agreement = static_cast<double>(num_self_top1) / n;
  }
  r.exact_match_passed = r.exact_match_rate >= options.min_exact_match;
  r.kl_passed = !options.max_mean_kl.has_value() || r.kl.mean <= *options.max_mean_kl;
  r.passed = r.exact_match_passed && r.kl_passed;
  return r;
}

Result<ComparisonRun> RunComparison(const LlmFactory& make_a, const LlmFactory& make_b,
                                    const std::vector<Prompt>& prompts,
                                    const CompareOptions& options,
                                    const std::function<void(const std::string&)>& log) {
  KILN_RETURN_IF_ERROR(ValidateCompareOptions(options));
  if (prompts.empty()) return InvalidArgument("no prompts to compare");
  auto say = [&](const std::string& line) {
    if (log) log(line);
  };
  ComparisonRun run;
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<std::vector<int32_t>> a_outputs;
  {
    say("A: loading");
    auto a = make_a();
    if (!a.ok()) return a.status().WithContext("A");
    auto ids = TokenizePrompts(**a, prompts);
    if (!ids.ok()) return ids.status().WithContext("A");
    prompt_ids = std::move(*ids);
    auto side = RunSide(**a, prompt_ids, nullptr, options);
    if (!side.ok()) return side.status().WithContext("A");
    run.a = std::move(*side);
    say(SideLine("A", run.a, "them"));
  }  // A is released here, before B loads.
  for (const SideOutput& o : run.a.outputs) a_outputs.push_back(o.token_ids);
  say("B: loading");
  auto b = make_b();
  if (!b.ok()) return b.status().WithContext("B");
  if ((*b)->model_config().vocab_size != run.a.vocab_size) {
    return InvalidArgument("A and B have different vocabularies (" +
                           std::to_string(run.a.vocab_size) + " and " +
                           std::to_string((*b)->model_config().vocab_size) +
                           " tokens): compare needs models that share a tokenizer");
  }
  auto side = RunSide(**b, prompt_ids, &a_outputs, options);
  if (!side.ok()) return side.status().WithContext("B");
  run.b = std::move(*side);
  say(SideLine("B", run.b, "A's"));
  run.report = Compare(run.a, run.b, options);
  return run;
}

}  // namespace kiln::eval
