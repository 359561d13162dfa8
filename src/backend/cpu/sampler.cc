#include "backend/cpu/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/philox.h"

namespace kiln::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// top_p counts a prefix as reaching top_p when its mass is within this of it (sampler.h).
constexpr double kTopPSlack = 1e-6;

// A token still in the running, with its scaled logit or, after Exponentiate(), its weight
// exp(v - max): its probability up to a common factor.
struct Candidate {
  float value;
  int32_t id;
};

// The order of top_k and top_p: value desc, then token id asc.
bool Better(const Candidate& a, const Candidate& b) {
  return a.value != b.value ? a.value > b.value : a.id < b.id;
}

// The lowest id among the largest values.
int32_t Argmax(std::span<const float> values) {
  int32_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

// The tokens that can still be drawn (processed logit above -inf), scaled by the temperature.
std::vector<Candidate> ScaledCandidates(std::span<const float> processed, float temperature) {
  std::vector<Candidate> out;
  out.reserve(processed.size());
  for (size_t i = 0; i < processed.size(); ++i) {
    if (processed[i] != kNegInf) {
      out.push_back({processed[i] / temperature, static_cast<int32_t>(i)});
    }
  }
  return out;
}

// Keeps the k best candidates (any order among them); k == 0 keeps all.
void TopK(int32_t k, std::vector<Candidate>& candidates) {
  if (k <= 0 || static_cast<size_t>(k) >= candidates.size()) return;
  std::nth_element(candidates.begin(), candidates.begin() + k, candidates.end(), Better);
  candidates.resize(k);
}

// Turns scaled logits into softmax weights exp(v - max) and returns their sum.
double Exponentiate(std::vector<Candidate>& candidates) {
  float max_value = kNegInf;
  for (const Candidate& c : candidates) max_value = std::max(max_value, c.value);
  double sum = 0.0;
  for (Candidate& c : candidates) {
    // NOTE: v == max is 0 even when both are +inf (a huge logit over a tiny temperature).
    c.value = std::exp(c.value == max_value ? 0.0f : c.value - max_value);
    sum += c.value;
  }
  return sum;
}

// Weights (in [0, 1]) fall into buckets that keep their order: the top 13 bits of the fp32
// pattern, i.e. the exponent and 4 mantissa bits (16 buckets per power of two).
constexpr int32_t kNumWeightBuckets = (std::bit_cast<uint32_t>(1.0f) >> 19) + 1;
int32_t WeightBucket(float weight) {
  return static_cast<int32_t>(std::bit_cast<uint32_t>(weight) >> 19);
}

// Keeps the smallest prefix, in Better() order, whose weight reaches top_p of `total_weight`.
// Rather than sort every candidate, a histogram of the weight per bucket finds the bucket where
// the prefix ends: the buckets above it are kept whole, and only that bucket is sorted.
void TopP(float top_p, double total_weight, std::vector<Candidate>& candidates) {
  if (top_p >= 1.0f) return;
  const double target = (static_cast<double>(top_p) - kTopPSlack) * total_weight;
  std::vector<double> bucket_weight(kNumWeightBuckets, 0.0);
  for (const Candidate& c : candidates) bucket_weight[WeightBucket(c.value)] += c.value;
  double weight_above = 0.0;  // of the buckets above `last`
  int32_t last = kNumWeightBuckets - 1;
  while (last > 0 && weight_above + bucket_weight[last] < target) {
    weight_above += bucket_weight[last--];
  }
  const auto first_of_last =
      std::partition(candidates.begin(), candidates.end(),
                     [&](const Candidate& c) { return WeightBucket(c.value) > last; });
  const auto end_of_last = std::partition(first_of_last, candidates.end(), [&](const Candidate& c) {
    return WeightBucket(c.value) == last;
  });
  std::sort(first_of_last, end_of_last, Better);
  double mass = weight_above;
  auto cut = first_of_last;
  // NOTE: the best candidate is always kept, also when top_p < the slack makes target <= 0.
  while (cut != end_of_last && (mass < target || cut == candidates.begin())) {
    mass += (cut++)->value;
  }
  candidates.erase(cut, candidates.end());
}

// Drops the candidates less likely than min_p times the most likely one.
void MinP(float min_p, std::vector<Candidate>& candidates) {
  if (min_p <= 0.0f) return;
  float max_weight = 0.0f;
  for (const Candidate& c : candidates) max_weight = std::max(max_weight, c.value);
  const float threshold = min_p * max_weight;
  std::erase_if(candidates, [&](const Candidate& c) { return c.value < threshold; });
}

double SumWeights(const std::vector<Candidate>& candidates) {
  double sum = 0.0;
  for (const Candidate& c : candidates) sum += c.value;
  return sum;
}

// Renormalizes the weights to p_i = w_i / weight_sum and draws one candidate with probability
// p_i: argmax p_i / E_i with E_i ~ Exp(1) from the request's Philox stream at `position`
// (sampler.h has the exact recipe).
int32_t ExponentialRace(const std::vector<Candidate>& candidates, double weight_sum, uint64_t seed,
                        uint64_t position) {
  int32_t best_id = -1;
  float best_score = -1.0f;
  // A weight below prune_weight * (1 - u) cannot win: E >= 1 - u, so p / E <= p / (1 - u). The
  // 0.999 covers the rounding of the divisions and of logf; this skips most logf() calls.
  float prune_weight = -1.0f;
  // Candidates usually come in id order, so one Philox block serves four neighbours.
  uint32_t group = 0;
  Philox4x32Block words = SamplerRandomWords(seed, position, group);
  for (const Candidate& c : candidates) {
    const uint32_t id = static_cast<uint32_t>(c.id);
    if (id / 4 != group) {
      group = id / 4;
      words = SamplerRandomWords(seed, position, group);
    }
    const float u = UniformFloat(words.w[id % 4]);
    if (c.value < prune_weight * (1.0f - u)) continue;
    const float p = static_cast<float>(c.value / weight_sum);
    if (!(p > 0.0f)) continue;
    const float e = u < 1.0f ? -std::log(u) : 0x1p-25f;  // NOTE: E = 0 would always win
    const float score = p / e;
    if (score > best_score || (score == best_score && c.id < best_id)) {
      best_score = score;
      best_id = c.id;
      prune_weight = static_cast<float>(best_score * weight_sum * 0.999);
    }
  }
  CHECK_GE(best_id, 0) << "no candidate with positive probability";
  return best_id;
}

// Step 4 of step.h. Returns -1 when no token can be drawn (every processed logit is -inf).
int32_t SampleWithTemperature(std::span<const float> processed, const SamplingSpec& spec) {
  std::vector<Candidate> candidates = ScaledCandidates(processed, spec.temperature);
  if (candidates.empty()) return -1;
  TopK(spec.top_k, candidates);
  const double total_weight = Exponentiate(candidates);  // softmax, up to the division
  TopP(spec.top_p, total_weight, candidates);
  MinP(spec.min_p, candidates);
  return ExponentialRace(candidates, SumWeights(candidates), spec.seed,
                         spec.output_token_ids.size());
}

}  // namespace

void ApplyPenalties(const SamplingSpec& spec, std::span<float> logits) {
  for (const auto& [id, bias] : spec.logit_bias) logits[id] += bias;
  for (int32_t id : spec.banned_token_ids) logits[id] = kNegInf;

  if (spec.repetition_penalty != 1.0f) {
    const float rp = spec.repetition_penalty;
    std::vector<uint8_t> seen(logits.size(), 0);
    for (std::span<const int32_t> ids : {spec.prompt_token_ids, spec.output_token_ids}) {
      for (int32_t id : ids) {
        if (seen[id]) continue;
        seen[id] = 1;
        logits[id] = logits[id] > 0.0f ? logits[id] / rp : logits[id] * rp;
      }
    }
  }

  if (spec.frequency_penalty != 0.0f || spec.presence_penalty != 0.0f) {
    std::vector<int32_t> counts(logits.size(), 0);
    for (int32_t id : spec.output_token_ids) ++counts[id];
    for (int32_t id : spec.output_token_ids) {
      if (counts[id] == 0) continue;  // already penalized
      logits[id] -= spec.frequency_penalty * static_cast<float>(counts[id]) + spec.presence_penalty;
      counts[id] = 0;
    }
  }
}

ScoredToken Score(std::span<const float> logits, int32_t target, int32_t num_top) {
  CHECK(target >= 0 && static_cast<size_t>(target) < logits.size());
  // log_softmax of the target, the sum in double; the rank counts strictly larger raw logits.
  const float target_logit = logits[target];
  float max_logit = kNegInf;
  int32_t num_larger = 0;
  for (float x : logits) {
    max_logit = std::max(max_logit, x);
    num_larger += x > target_logit ? 1 : 0;
  }
  double sum = 0.0;
  for (float x : logits) sum += std::exp(x - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  ScoredToken out;
  out.token_id = target;
  out.logprob = static_cast<float>(logits[target] - log_sum);
  out.rank = num_larger + 1;
  if (num_top > 0) {
    // The num_top best (value desc, id asc), kept sorted; one pass, most tokens rejected by
    // a single comparison against the current last.
    const size_t k = std::min<size_t>(num_top, logits.size());
    std::vector<Candidate> top;
    top.reserve(k + 1);
    for (size_t i = 0; i < logits.size(); ++i) {
      const Candidate c{logits[i], static_cast<int32_t>(i)};
      if (top.size() == k && !Better(c, top.back())) continue;
      top.insert(std::upper_bound(top.begin(), top.end(), c, Better), c);
      if (top.size() > k) top.pop_back();
    }
    for (const Candidate& c : top) {
      out.top_logprobs.push_back({c.id, static_cast<float>(c.value - log_sum)});
    }
  }
  return out;
}

ScoredToken Sample(std::span<const float> logits, const SamplingSpec& spec) {
  CHECK(!logits.empty());
  std::vector<float> processed(logits.begin(), logits.end());
  ApplyPenalties(spec, processed);
  int32_t token = -1;
  if (spec.temperature == 0.0f) {
    token = Argmax(processed);
    if (processed[token] == kNegInf) token = -1;
  } else {
    token = SampleWithTemperature(processed, spec);
  }
  // Everything banned: fall back to the raw argmax so that the step still yields a token.
  if (token < 0) token = Argmax(logits);
  return Score(logits, token, spec.num_top_logprobs);
}

}  // namespace kiln::cpu
