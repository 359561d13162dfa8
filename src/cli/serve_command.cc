// kiln serve: the OpenAI-compatible HTTP server (src/server/server.h; docs/server.md).
//
// The listener starts first (so /health answers 503 while the model loads), the model loads on
// a second thread, and the main thread waits for SIGTERM / SIGINT, then drains and exits 0.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/engine_flags.h"
#include "core/units.h"
#include "engine/executor.h"
#include "engine/llm.h"
#include "server/server.h"
#ifdef KILN_HAS_CUDA
#include "backend/cuda/cuda_runner.h"
#endif

namespace kiln::cli {
namespace {

struct ServeOptions {
  EngineFlags engine;
  std::string host = "0.0.0.0";
  int32_t port = 8000;
  std::string served_model_name;
  int32_t io_threads = 4;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  std::string max_request_body = "8MiB";
  int32_t max_num_waiting = -1;  // -1: 4 x max_num_seqs
  double shutdown_timeout_s = 30;
  int32_t keep_alive_timeout_s = 60;
};

// One key per line; blank lines and lines starting with '#' are skipped, surrounding
// whitespace trimmed.
Result<std::vector<std::string>> ReadKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound("--api-key-file: cannot open " + path);
  std::vector<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    const size_t begin = line.find_first_not_of(" \t\r");
    if (begin == std::string::npos || line[begin] == '#') continue;
    const size_t end = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(begin, end - begin + 1));
  }
  if (keys.empty()) return InvalidArgument("--api-key-file: " + path + " holds no key");
  return keys;
}

// max_num_seqs: the engine's, resolved (--max-num-waiting's default is 4x it).
Result<server::ServerOptions> ToServerOptions(const ServeOptions& o, int32_t max_num_seqs) {
  server::ServerOptions s;
  if (o.port < 0 || o.port > 65535) {
    return InvalidArgument("--port: expected 0..65535, got " + std::to_string(o.port));
  }
  s.http.host = o.host;
  s.http.port = static_cast<uint16_t>(o.port);
  s.http.num_io_threads = o.io_threads;
  s.http.keep_alive_timeout_s = o.keep_alive_timeout_s;
  auto body = ParseByteSize(o.max_request_body);
  if (!body.ok()) return body.status().WithContext("--max-request-body-bytes");
  s.http.max_request_body_bytes = *body;
  s.api_keys = o.api_keys;
  for (const std::string& key : o.api_keys) {
    if (key.empty()) return InvalidArgument("--api-key: must not be empty");
  }
  if (!o.api_key_file.empty()) {
    KILN_ASSIGN_OR_RETURN(std::vector<std::string> keys, ReadKeyFile(o.api_key_file));
    s.api_keys.insert(s.api_keys.end(), keys.begin(), keys.end());
  }
  if (o.max_num_waiting < -1) {
    return InvalidArgument(
        "--max-num-waiting: expected -1 (4 x --max-num-seqs), 0 (no limit) "
        "or a positive count");
  }
  s.max_num_waiting = o.max_num_waiting == -1 ? 4 * max_num_seqs : o.max_num_waiting;
  if (o.shutdown_timeout_s < 0) return InvalidArgument("--shutdown-timeout: must be >= 0");
  s.shutdown_timeout_s = o.shutdown_timeout_s;
  s.version = KILN_VERSION;
  return s;
}

// Where the start-up went (CUDA): the weights' upload rate, the GEMM tuning or the engine's
// table, the decode graphs.
void PrintStartup(const ModelRunner& runner, double seconds) {
#ifdef KILN_HAS_CUDA
  auto r = GetCudaMemoryReport(runner);
  if (r.ok()) {
    std::fprintf(stderr,
                 "kiln serve: ready in %.2f s: weights %.2f GB uploaded in %.2f s (%.1f GB/s), "
                 "decode graphs %.2f s (GEMM tuning %.2f s, %d algorithms from the engine's "
                 "table), the rest %.2f s (opening, CUDA context, allocations)\n",
                 seconds, r->weight_bytes / 1e9, r->upload_seconds,
                 r->weight_bytes / 1e9 / std::max(r->upload_seconds, 1e-9),
                 r->graph_capture_seconds, r->gemm_tune_seconds, r->gemm_table_entries,
                 seconds - r->upload_seconds - r->graph_capture_seconds);
    return;
  }
#endif
  (void)runner;
  std::fprintf(stderr, "kiln serve: ready in %.2f s\n", seconds);
}

// Loads the model and hands it to the server.
Result<std::string> Load(const ServeOptions& o, LlmOptions options, server::Server* server) {
  const auto start = std::chrono::steady_clock::now();
  options.load_progress = ByteProgressBar("kiln serve: weights");
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<LLM> llm, LLM::Create(o.engine.model, options));
  PrintStartup(llm->engine().runner(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  auto model = std::make_unique<server::ServedModel>();
  // NOTE: as vLLM, the default name is the model argument as given (clients that ported from
  // vLLM send what they passed to --model).
  model->info.name = o.served_model_name.empty() ? o.engine.model : o.served_model_name;
  model->info.tokenizer = &llm->tokenizer();
  model->info.max_model_len = llm->engine().max_model_len();
  model->info.vocab_size = llm->checkpoint().config().vocab_size;
  model->info.created = static_cast<int64_t>(std::time(nullptr));
  std::unique_ptr<Engine> engine = llm->TakeEngine();
  const Tokenizer* tokenizer = llm->tokenizer().tokenizer.get();
  model->owner = std::shared_ptr<LLM>(std::move(llm));
  model->executor = Executor::Start(std::move(engine), tokenizer);
  std::string name = model->info.name;
  server->SetModel(std::move(model));
  return name;
}

void Run(const ServeOptions& o) {
  auto llm_options = ToLlmOptions(o.engine);
  if (!llm_options.ok()) Fail("serve", llm_options.status());
  // Resolved once here: the server's queue limit needs it before the model loads.
  int32_t& max_num_seqs = llm_options->engine.scheduler.max_num_seqs;
  if (max_num_seqs == 0) max_num_seqs = AutomaticMaxNumSeqs(llm_options->device);
  auto server_options = ToServerOptions(o, max_num_seqs);
  if (!server_options.ok()) Fail("serve", server_options.status());
  auto started = server::Server::Start(*server_options);
  if (!started.ok()) Fail("serve", started.status());
  std::unique_ptr<server::Server> server = std::move(*started);
  const std::string address = o.host + ":" + std::to_string(server->port());
  std::fprintf(stderr, "kiln serve: loading %s (http://%s/health answers 503 until ready)\n",
               o.engine.model.c_str(), address.c_str());

  enum State { kLoading, kReady, kFailed };
  std::atomic<int> state{kLoading};
  Status load_error;
  std::thread loader([&] {
    auto name = Load(o, *llm_options, server.get());
    if (!name.ok()) {
      load_error = name.status();
      state = kFailed;
      server->RequestStop();
      return;
    }
    std::printf("kiln: serving %s on http://%s\n", name->c_str(), address.c_str());
    std::fflush(stdout);
    state = kReady;
  });
  server->WaitForShutdownSignal();
  if (state == kLoading) {
    // NOTE: loading cannot be interrupted and no request was accepted yet: nothing to drain.
    std::fprintf(stderr, "kiln serve: stopped while loading the model\n");
    std::fflush(stderr);
    std::_Exit(0);
  }
  loader.join();
  if (state == kFailed) {
    server->Shutdown();
    Fail("serve", load_error);
  }
  std::fprintf(stderr, "kiln serve: draining requests in flight (up to %.0f s)\n",
               o.shutdown_timeout_s);
  server->Shutdown();
  server.reset();
  std::fprintf(stderr, "kiln serve: stopped\n");
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  AddEngineFlags(cmd, &o->engine);
  cmd->add_option("--host", o->host, "address to listen on (default 0.0.0.0: all interfaces)");
  cmd->add_option("--port", o->port, "TCP port (default 8000; 0 = any free port)");
  cmd->add_option("--served-model-name", o->served_model_name,
                  "the name clients pass as `model` (default: the model argument)");
  cmd->add_option("--io-threads", o->io_threads, "HTTP I/O threads (default 4)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--api-key", o->api_keys,
                  "require `Authorization: Bearer KEY` on /v1, /v2, /generate, /tokenize, "
                  "/detokenize (repeatable)");
  cmd->add_option("--api-key-file", o->api_key_file, "a file of accepted keys, one per line");
  cmd->add_option("--max-request-body-bytes", o->max_request_body,
                  "larger request bodies get 413 (default 8MiB; e.g. 1048576 or 16MiB)");
  cmd->add_option("--max-num-waiting", o->max_num_waiting,
                  "requests waiting for the engine beyond which new ones get 429 "
                  "(default 4 x --max-num-seqs; 0 = no limit)");
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "seconds SIGTERM lets requests in flight finish before aborting them "
                  "(default 30)");
  cmd->add_option("--keep-alive-timeout", o->keep_alive_timeout_s,
                  "seconds an idle keep-alive connection stays open (default 60)")
      ->check(CLI::Range(1, 86400));
  cmd->callback([o] { Run(*o); });
}

}  // namespace kiln::cli
