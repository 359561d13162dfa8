// Executor: runs an Engine on its own thread for callers on other threads (the server).
//
//   auto exec = Executor::Start(std::move(engine), tokenizer);
//   KILN_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> s, exec->Enqueue(std::move(req)));
//   while (std::optional<TextDelta> d = s->Next()) { write(d->text); }   // blocks per delta
//   exec->Abort(s->id());                                                  // e.g. on disconnect
//
// Enqueue validates on the caller's thread and returns kInvalidArgument at once; an accepted
// request always ends with a finished delta (stop, length or abort), even at Shutdown.
// Detokenization and stop strings run in RequestStream::Next(), on the consumer's thread.
//
// An event loop (the HTTP server) must not block in Next(): it passes an OutputCallback to
// Enqueue, which the engine thread calls after each output it queues on the stream, and drains
// the stream with TryNext() from its own thread:
//
//   exec->Enqueue(std::move(req), [=] { post(loop, [=] { while (auto d = s->TryNext()) ...; }); });
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/output_processor.h"
#include "tokenizer/tokenizer.h"

namespace kiln {

class Executor;

// Called on the engine thread, with no executor lock held, each time a stream gains output that
// TryNext() can return. It must return quickly and must not block (post to an event loop).
// Spurious calls are harmless: TryNext() may then find nothing, or a previous call's drain may
// already have taken the output.
using OutputCallback = std::function<void()>;

// One request's output stream; shared by the executor (producer) and the consumer.
// REQUIRES: not used after its Executor is destroyed (a stop string aborts through it).
class RequestStream {
 public:
  RequestId id() const { return id_; }
  // Blocks until the next delta; nullopt once the finished delta has been returned.
  std::optional<TextDelta> Next();
  // Non-blocking: a delta if one is ready.
  std::optional<TextDelta> TryNext();
  // When the scheduler first admitted the request, as of the outputs returned so far (epoch
  // until one carried it). Consumer thread only.
  std::chrono::steady_clock::time_point first_scheduled_time() const {
    return first_scheduled_time_;
  }

 private:
  friend class Executor;
  RequestStream(RequestId id, Executor* executor, const Tokenizer* tokenizer,
                const SamplingParams& params)
      : id_(id), executor_(executor), text_(tokenizer, params) {}
  void Push(RequestOutput output);
  TextDelta Convert(RequestOutput output);

  RequestId id_;
  Executor* executor_;
  RequestTextStream text_;
  OutputCallback on_output_;  // set before the stream is shared; may be empty
  std::chrono::steady_clock::time_point first_scheduled_time_{};  // consumer side
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
  bool done_ = false;  // the finished delta was handed out
};

struct ExecutorStats {
  EngineStats engine;
  int64_t num_requests = 0;  // accepted so far
  int32_t num_active = 0;    // accepted and not yet finished
  // The scheduler's queues as of the last step; num_waiting also counts requests accepted but
  // not yet seen by a completed step (so an admission limit sees them at once).
  int32_t num_running = 0;
  int32_t num_waiting = 0;
};

class Executor {
 public:
  // Starts the engine thread. `tokenizer` must outlive the executor.
  static std::unique_ptr<Executor> Start(std::unique_ptr<Engine> engine,
                                         const Tokenizer* tokenizer);
  ~Executor();  // Shutdown()

  // Validates and queues; `request.id` is assigned here (any value passed is ignored).
  // `on_output` (optional) is called after each output queued on the stream (see OutputCallback).
  Result<std::shared_ptr<RequestStream>> Enqueue(EngineRequest request,
                                                 OutputCallback on_output = nullptr);
  // Aborts a request wherever it is; its stream ends with finish reason abort.
  void Abort(RequestId id);
  ExecutorStats Stats();
  // Aborts everything still running, stops the thread. Idempotent.
  void Shutdown();

  const ModelConfig& model_config() const { return engine_->model_config(); }
  int32_t max_model_len() const { return engine_->max_model_len(); }

 private:
  Executor(std::unique_ptr<Engine> engine, const Tokenizer* tokenizer);
  void Loop();

  std::unique_ptr<Engine> engine_;
  const Tokenizer* tokenizer_;
  std::atomic<RequestId> next_id_{1};

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::vector<EngineRequest> to_add_;
  std::vector<RequestId> to_abort_;
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> streams_;
  ExecutorStats stats_;
  int32_t num_in_transit_ = 0;  // taken from to_add_ by the loop, not yet counted by a step
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kiln
