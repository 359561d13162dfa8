// kiln bench serve | offline | latency: the benchmark tool (vLLM's `vllm bench`, TensorRT-LLM's
// `trtllm-bench`). `serve` is a load generator for any OpenAI-compatible server; `offline` and
// `latency` run the engine in this process. Each prints a table and, with --json, writes the
// figures (src/benchmark/ holds the logic; this file is flags and output).
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "benchmark/dataset.h"
#include "benchmark/engine_bench.h"
#include "benchmark/metrics.h"
#include "benchmark/plot.h"
#include "benchmark/serve_client.h"
#include "cli/command.h"
#include "cli/engine_flags.h"
#include "cli/json_report.h"
#include "engine/llm.h"
#include "engine/tokenizer_loader.h"

namespace kiln::cli {
namespace {

using Json = nlohmann::ordered_json;
using benchmark::BenchRequest;
using benchmark::DatasetOptions;
using benchmark::RequestRecord;
using benchmark::Summary;

// The flags shared by `serve` and `offline` that pick the prompts.
void AddDatasetFlags(CLI::App* cmd, DatasetOptions* d) {
  cmd->add_option("--dataset", d->kind, "random (default), jsonl, sharegpt or shared-prefix")
      ->check(CLI::IsMember({"random", "jsonl", "sharegpt", "shared-prefix"}));
  cmd->add_option("--dataset-path", d->path, "the jsonl or ShareGPT JSON file");
  cmd->add_option("--num-requests", d->num_requests, "requests to send (default 1000)");
  cmd->add_option("--input-len", d->input_len, "random: prompt tokens (default 1024)");
  cmd->add_option("--output-len", d->output_len,
                  "tokens to ask for (random, jsonl default, sharegpt with --fixed-output-len; "
                  "default 128)");
  cmd->add_option("--input-len-stddev", d->input_len_stddev,
                  "random: normal-distributed prompt lengths with this stddev (default 0)");
  cmd->add_option("--output-len-stddev", d->output_len_stddev,
                  "random: normal-distributed output lengths with this stddev (default 0)");
  cmd->add_flag("--fixed-output-len", d->fixed_output_len,
                "sharegpt: ask for --output-len tokens, not the reply's length");
  cmd->add_option("--num-prefixes", d->num_prefixes, "shared-prefix: system prompts (default 4)");
  cmd->add_option("--prefix-len", d->prefix_len,
                  "shared-prefix: system prompt tokens (default 512)");
  cmd->add_option("--question-len", d->question_len,
                  "shared-prefix: question tokens (default 128)");
  cmd->add_option("--seed", d->seed, "prompts and arrival times (default 0)");
}

Json DatasetJson(const DatasetOptions& d) {
  Json j = {{"dataset", d.kind}, {"num_requests", d.num_requests}, {"seed", d.seed}};
  if (d.kind == "random") {
    j["input_len"] = d.input_len;
    j["output_len"] = d.output_len;
    j["input_len_stddev"] = d.input_len_stddev;
    j["output_len_stddev"] = d.output_len_stddev;
  } else if (d.kind == "shared-prefix") {
    j["num_prefixes"] = d.num_prefixes;
    j["prefix_len"] = d.prefix_len;
    j["question_len"] = d.question_len;
    j["output_len"] = d.output_len;
  } else {
    j["dataset_path"] = d.path;
    j["output_len"] = d.output_len;
    j["fixed_output_len"] = d.fixed_output_len;
  }
  return j;
}

// "2,16,inf" -> {2, 16, +inf}.
Result<std::vector<double>> ParseRates(const std::string& spec) {
  std::vector<double> rates;
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    if (part == "inf" || part == "infinity") {
      rates.push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    size_t used = 0;
    double rate = 0;
    try {
      rate = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size() || !(rate > 0) || std::isinf(rate)) {
      return InvalidArgument("--request-rate: '" + part +
                             "' is not a positive number of requests per second or 'inf'");
    }
    rates.push_back(rate);
  }
  if (rates.empty()) return InvalidArgument("--request-rate: no rate given");
  return rates;
}

std::string RateLabel(double rate) {
  if (std::isinf(rate)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", rate);
  return buf;
}

// ---- kiln bench serve -------------------------------------------------------------------------

struct ServeOptions {
  DatasetOptions dataset;
  benchmark::ServeClientOptions client;
  std::string tokenizer;
  std::string rates = "inf";
  std::string goodput;
  std::string extra_body;
  std::string json;
  std::string plot;
  bool no_progress = false;
};

void RunServe(ServeOptions& o) {
  const std::string cmd = "bench serve";
  auto slo = benchmark::ParseSlo(o.goodput);
  if (!slo.ok()) Fail(cmd, slo.status().WithContext("--goodput"));
  auto rates = ParseRates(o.rates);
  if (!rates.ok()) Fail(cmd, rates.status());
  if (!o.extra_body.empty()) {
    o.client.extra_body = nlohmann::json::parse(o.extra_body, nullptr, false);
    if (o.client.extra_body.is_discarded() || !o.client.extra_body.is_object()) {
      Fail(cmd, InvalidArgument("--extra-body: not a JSON object: " + o.extra_body));
    }
  }
  if (o.client.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) o.client.api_key = key;
  }
  std::unique_ptr<LoadedTokenizer> tokenizer;
  if (!o.tokenizer.empty()) {
    auto t = LoadTokenizer(o.tokenizer);
    if (!t.ok()) Fail(cmd, t.status().WithContext("--tokenizer"));
    tokenizer = std::make_unique<LoadedTokenizer>(std::move(*t));
  }
  auto requests =
      benchmark::MakeDataset(o.dataset, tokenizer ? tokenizer->tokenizer.get() : nullptr);
  if (!requests.ok()) Fail(cmd, requests.status());
  if (o.client.model.empty()) {
    auto name = benchmark::FetchModelName(o.client.base_url, o.client.api_key);
    if (!name.ok()) Fail(cmd, name.status().WithContext("--model not given, so asked the server"));
    o.client.model = *name;
  }
  o.client.seed = o.dataset.seed;
  o.client.show_progress = !o.no_progress;

  Json report = ReportHeader("kiln bench serve");
  report["config"] = DatasetJson(o.dataset);
  report["config"]["base_url"] = o.client.base_url;
  report["config"]["endpoint"] = o.client.endpoint;
  report["config"]["model"] = o.client.model;
  report["config"]["max_concurrency"] = o.client.max_concurrency;
  report["config"]["burstiness"] = o.client.burstiness;
  report["config"]["num_warmup"] = o.client.num_warmup;
  report["config"]["duration_s"] = o.client.duration_s;
  report["config"]["ignore_eos"] = o.client.ignore_eos;
  report["runs"] = Json::array();
  std::vector<benchmark::LatencyPoint> points;
  for (double rate : *rates) {
    o.client.request_rate = rate;
    const std::string label = RateLabel(rate);
    std::fprintf(stderr, "kiln bench serve: %s, request rate %s/s, max concurrency %s\n",
                 o.client.base_url.c_str(), label.c_str(),
                 o.client.max_concurrency > 0 ? std::to_string(o.client.max_concurrency).c_str()
                                              : "unlimited");
    auto run = benchmark::RunServeBenchmark(*requests, o.client);
    if (!run.ok()) Fail(cmd, run.status());
    const Summary s = benchmark::Summarize(run->records, run->duration_s, *slo);
    std::printf(
        "%s\n",
        benchmark::FormatSummary(s, "kiln bench serve, request rate " + label + "/s").c_str());
    Json entry = {{"request_rate", std::isinf(rate) ? Json("inf") : Json(rate)},
                  {"max_concurrency", o.client.max_concurrency},
                  {"summary", benchmark::SummaryToJson(s)}};
    report["runs"].push_back(std::move(entry));
    points.push_back({label + (std::isinf(rate) ? "" : "/s"), s.output_throughput, s.ttft.p50,
                      s.ttft.p99, s.itl.p50, s.itl.p99});
    if (!o.plot.empty()) {
      const std::string path = o.plot + "-timeline-" + label + ".png";
      const Status st = benchmark::WriteTimelinePng(
          run->records, path, o.client.model + ", request rate " + label + "/s");
      if (!st.ok()) Fail(cmd, st.WithContext("--plot"));
      std::fprintf(stderr, "kiln bench serve: wrote %s\n", path.c_str());
    }
    if (!o.json.empty()) WriteJson(cmd, o.json, report);  // after every rate: keep what ran
  }
  if (!o.plot.empty() && points.size() > 1) {
    const std::string path = o.plot + "-latency.png";
    const Status st = benchmark::WriteLatencyThroughputPng(points, path, o.client.model);
    if (!st.ok()) Fail(cmd, st.WithContext("--plot"));
    std::fprintf(stderr, "kiln bench serve: wrote %s\n", path.c_str());
  }
}

void AddServe(CLI::App* bench) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "serve", "Load-test an OpenAI-compatible server (kiln serve, vLLM, trtllm-serve, ...)");
  cmd->add_option("--base-url", o->client.base_url,
                  "the server, http://host:port[/prefix] (default http://127.0.0.1:8000)");
  cmd->add_option("--model", o->client.model,
                  "the model name to send (default: the first of GET /v1/models)");
  cmd->add_option("--endpoint", o->client.endpoint,
                  "completions (default; token-id prompts, exact lengths) or chat")
      ->check(CLI::IsMember({"completions", "chat"}));
  cmd->add_option("--tokenizer", o->tokenizer,
                  "HF checkpoint directory or GGUF file whose tokenizer makes and measures "
                  "prompts (needed by sharegpt, chat prompts from token ids, and random ids "
                  "without --vocab-size)");
  cmd->add_option("--vocab-size", o->dataset.vocab_size,
                  "random ids from [0, N) when no --tokenizer is given");
  AddDatasetFlags(cmd, &o->dataset);
  cmd->add_option("--request-rate", o->rates,
                  "requests per second, Poisson arrivals; 'inf' sends all at once; a comma "
                  "list runs each in turn (default inf)");
  cmd->add_option("--burstiness", o->client.burstiness,
                  "gamma shape of the arrival gaps: 1 = Poisson (default), < 1 burstier");
  cmd->add_option("--max-concurrency", o->client.max_concurrency,
                  "requests in flight at most (default 0 = no limit)");
  cmd->add_option("--warmup", o->client.num_warmup,
                  "requests sent first and not measured (default 0)");
  cmd->add_option("--duration", o->client.duration_s,
                  "send requests for this many seconds (cycling the dataset) instead of "
                  "--num-requests once");
  cmd->add_flag("--ignore-eos", o->client.ignore_eos,
                "send ignore_eos so every request generates its full length (kiln, vLLM)");
  cmd->add_option("--goodput", o->goodput,
                  "SLOs in ms for goodput, e.g. 'ttft:200,tpot:50,e2el:5000'");
  cmd->add_option("--extra-body", o->extra_body, "a JSON object merged into every request body");
  cmd->add_option("--api-key", o->client.api_key, "bearer token (default $OPENAI_API_KEY)");
  cmd->add_option("--timeout", o->client.request_timeout_s,
                  "seconds per request before it counts as a timeout (default 600)");
  cmd->add_option("--json", o->json, "write the figures as JSON here");
  cmd->add_option("--plot", o->plot,
                  "write PNG plots PREFIX-timeline-RATE.png (and PREFIX-latency.png for "
                  "several rates)");
  cmd->add_flag("--no-progress", o->no_progress, "no progress bar on stderr");
  cmd->callback([o] { RunServe(*o); });
}

// ---- kiln bench offline / latency -------------------------------------------------------------

std::unique_ptr<LLM> LoadModel(const std::string& cmd, const EngineFlags& flags) {
  auto options = ToLlmOptions(flags);
  if (!options.ok()) Fail(cmd, options.status());
  auto llm = LLM::Create(flags.model, *options);
  if (!llm.ok()) Fail(cmd, llm.status());
  return std::move(*llm);
}

Json EngineJson(const EngineFlags& f, LLM& llm) {
  return {{"model", f.model},
          {"device", ResolveDevice(f.device)},
          {"quantization", f.quantization},
          {"kv_cache_dtype", f.kv_cache_dtype},
          {"max_num_seqs", llm.engine().scheduler_options().max_num_seqs},
          {"capacity_policy", f.capacity_policy},
          {"max_num_batched_tokens", f.max_num_batched_tokens},
          {"gpu_memory_utilization", f.gpu_memory_utilization},
          {"kv_cache_memory", f.kv_cache_memory},
          {"swap_space", f.swap_space},
          {"num_kv_blocks", llm.engine().stats().num_kv_blocks},
          {"block_size", f.block_size}};
}

struct OfflineCommandOptions {
  EngineFlags engine;
  DatasetOptions dataset;
  benchmark::OfflineOptions run;
  bool no_ignore_eos = false;
  std::string json;
  std::string step_log;
  std::string goodput;
};

void RunOfflineCommand(OfflineCommandOptions& o) {
  const std::string cmd = "bench offline";
  auto slo = benchmark::ParseSlo(o.goodput);
  if (!slo.ok()) Fail(cmd, slo.status().WithContext("--goodput"));
  std::unique_ptr<LLM> llm = LoadModel(cmd, o.engine);
  o.dataset.vocab_size = llm->model_config().vocab_size;
  auto requests = benchmark::MakeDataset(o.dataset, llm->tokenizer().tokenizer.get());
  if (!requests.ok()) Fail(cmd, requests.status());
  o.run.ignore_eos = !o.no_ignore_eos;
  o.run.seed = o.dataset.seed;
  std::fprintf(stderr, "kiln bench offline: %zu requests submitted at once\n", requests->size());
  auto run = benchmark::RunOffline(llm->engine(), *requests, o.run);
  if (!run.ok()) Fail(cmd, run.status());
  const Summary s = benchmark::Summarize(run->records, run->duration_s, *slo);
  std::printf("%s", benchmark::FormatSummary(s, "kiln bench offline").c_str());
  const benchmark::EngineCounters& c = run->counters;
  std::printf(
      "Engine: %lld steps (%lld decode-only, mean batch %.1f, %.1f s), %lld prompt tokens "
      "computed, %lld from the prefix cache, %lld preemptions (%lld swapped)\n",
      static_cast<long long>(c.num_steps), static_cast<long long>(c.num_decode_only_steps),
      c.mean_decode_batch, c.decode_only_seconds, static_cast<long long>(c.num_prompt_tokens),
      static_cast<long long>(c.num_cached_prompt_tokens), static_cast<long long>(c.num_preemptions),
      static_cast<long long>(c.num_swap_preemptions));
  std::printf("        %lld steps with prompt tokens (%.1f s), carrying %lld decodes\n",
              static_cast<long long>(c.num_prompt_steps), c.prompt_step_seconds,
              static_cast<long long>(c.num_prompt_step_decodes));
  if (!o.step_log.empty()) {
    Json log = ReportHeader("kiln bench offline");
    log["steps"] = Json::array();
    for (const benchmark::StepRecord& step : run->steps) {
      log["steps"].push_back(benchmark::StepToJson(step));
    }
    WriteJson(cmd, o.step_log, log);
  }
  if (!o.json.empty()) {
    Json report = ReportHeader("kiln bench offline");
    report["config"] = DatasetJson(o.dataset);
    report["config"]["ignore_eos"] = o.run.ignore_eos;
    report["config"]["num_warmup"] = o.run.num_warmup;
    report["engine"] = EngineJson(o.engine, *llm);
    report["summary"] = benchmark::SummaryToJson(s);
    report["engine_counters"] = benchmark::CountersToJson(c);
    WriteJson(cmd, o.json, report);
  }
}

void AddOffline(CLI::App* bench) {
  auto o = std::make_shared<OfflineCommandOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "offline", "Offline throughput: every request submitted to the engine at once");
  AddEngineFlags(cmd, &o->engine);
  AddDatasetFlags(cmd, &o->dataset);
  cmd->add_option("--warmup", o->run.num_warmup, "requests run first and not measured (default 0)");
  cmd->add_flag("--no-ignore-eos", o->no_ignore_eos,
                "let eos end requests (default: exactly --output-len tokens each)");
  cmd->add_option("--goodput", o->goodput, "SLOs in ms, e.g. 'ttft:2000,tpot:100'");
  cmd->add_option("--json", o->json, "write the figures as JSON here");
  cmd->add_option("--step-log", o->step_log,
                  "write every engine step (wall time, sequences, decodes, prompt tokens, "
                  "running, waiting) as JSON here");
  cmd->callback([o] { RunOfflineCommand(*o); });
}

struct LatencyCommandOptions {
  EngineFlags engine;
  benchmark::LatencyOptions run;
  std::string json;
};

void RunLatencyCommand(LatencyCommandOptions& o) {
  const std::string cmd = "bench latency";
  std::unique_ptr<LLM> llm = LoadModel(cmd, o.engine);
  auto iterations = benchmark::RunLatency(llm->engine(), o.run, llm->tokenizer().tokenizer.get());
  if (!iterations.ok()) Fail(cmd, iterations.status());
  std::vector<double> e2e, prefill, steps, tok_s;
  for (const benchmark::LatencyIteration& it : *iterations) {
    e2e.push_back(it.e2e_s);
    prefill.push_back(it.prefill_s);
    steps.insert(steps.end(), it.decode_step_s.begin(), it.decode_step_s.end());
    tok_s.push_back(static_cast<double>(o.run.batch_size) * o.run.output_len / it.e2e_s);
  }
  const benchmark::Distribution e2e_d = benchmark::Distribute(e2e);
  const benchmark::Distribution prefill_d = benchmark::Distribute(prefill);
  const benchmark::Distribution step_d = benchmark::Distribute(steps);
  // Distribute reads seconds and reports milliseconds: tok/s come out 1,000 times too large.
  const benchmark::Distribution tok_d = benchmark::Distribute(tok_s);
  std::printf("============ kiln bench latency ============\n");
  std::printf("batch %d, %d in, %d out, %d iterations (+%d warm-up)\n", o.run.batch_size,
              o.run.input_len, o.run.output_len, o.run.num_iterations, o.run.num_warmup);
  std::printf("%-22s %10s %10s %10s %10s %10s\n", "", "mean", "p50", "p90", "p99", "max");
  auto row = [](const char* name, const benchmark::Distribution& d, double scale) {
    std::printf("%-22s %10.2f %10.2f %10.2f %10.2f %10.2f\n", name, d.mean * scale, d.p50 * scale,
                d.p90 * scale, d.p99 * scale, d.max * scale);
  };
  row("end to end (ms)", e2e_d, 1);
  row("prefill (ms)", prefill_d, 1);
  row("decode step (ms)", step_d, 1);
  row("output tok/s", tok_d, 1e-3);
  if (!o.json.empty()) {
    auto dist = [](const benchmark::Distribution& d, double scale) {
      return Json{{"count", d.count},     {"mean", d.mean * scale}, {"min", d.min * scale},
                  {"p50", d.p50 * scale}, {"p90", d.p90 * scale},   {"p99", d.p99 * scale},
                  {"max", d.max * scale}};
    };
    Json report = ReportHeader("kiln bench latency");
    report["config"] = {{"batch_size", o.run.batch_size}, {"input_len", o.run.input_len},
                        {"output_len", o.run.output_len}, {"iterations", o.run.num_iterations},
                        {"num_warmup", o.run.num_warmup}, {"seed", o.run.seed}};
    report["engine"] = EngineJson(o.engine, *llm);
    report["e2e_ms"] = dist(e2e_d, 1);
    report["prefill_ms"] = dist(prefill_d, 1);
    report["decode_step_ms"] = dist(step_d, 1);
    report["output_tok_s"] = dist(tok_d, 1e-3);
    WriteJson(cmd, o.json, report);
  }
}

void AddLatency(CLI::App* bench) {
  auto o = std::make_shared<LatencyCommandOptions>();
  CLI::App* cmd = bench->add_subcommand(
      "latency", "Batch latency: N requests together, prefill and decode, repeated");
  AddEngineFlags(cmd, &o->engine);
  cmd->add_option("--batch-size", o->run.batch_size, "requests per iteration (default 1)");
  cmd->add_option("--input-len", o->run.input_len, "prompt tokens (default 128)");
  cmd->add_option("--output-len", o->run.output_len, "tokens generated each (default 128)");
  cmd->add_option("--iterations", o->run.num_iterations, "measured iterations (default 10)");
  cmd->add_option("--warmup", o->run.num_warmup, "unmeasured iterations first (default 2)");
  cmd->add_option("--seed", o->run.seed, "prompts (default 0)");
  cmd->add_option("--json", o->json, "write the figures as JSON here");
  cmd->callback([o] { RunLatencyCommand(*o); });
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  CLI::App* bench = app.add_subcommand(
      "bench", "Benchmarks: serve (any OpenAI-compatible server), offline, latency");
  bench->require_subcommand(1);
  AddServe(bench);
  AddOffline(bench);
  AddLatency(bench);
}

}  // namespace kiln::cli
