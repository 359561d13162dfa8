#include "engine/executor.h"

#include "core/check.h"

namespace kiln {

void RequestStream::Push(RequestOutput output) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(output));
  }
  cv_.notify_all();
}

TextDelta RequestStream::Convert(RequestOutput output) {
  if (output.first_scheduled_time != std::chrono::steady_clock::time_point{}) {
    first_scheduled_time_ = output.first_scheduled_time;
  }
  TextDelta delta = text_.Process(output);
  if (delta.finished) done_ = true;
  if (delta.needs_abort) executor_->Abort(id_);
  return delta;
}

std::optional<TextDelta> RequestStream::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_) return std::nullopt;
  cv_.wait(lock, [&] { return !queue_.empty(); });
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  return Convert(std::move(out));
}

std::optional<TextDelta> RequestStream::TryNext() {
  std::unique_lock<std::mutex> lock(mu_);
  if (done_ || queue_.empty()) return std::nullopt;
  RequestOutput out = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  return Convert(std::move(out));
}

std::unique_ptr<Executor> Executor::Start(std::unique_ptr<Engine> engine,
                                          const Tokenizer* tokenizer) {
  std::unique_ptr<Executor> exec(new Executor(std::move(engine), tokenizer));
  exec->thread_ = std::thread([e = exec.get()] { e->Loop(); });
  return exec;
}

Executor::Executor(std::unique_ptr<Engine> engine, const Tokenizer* tokenizer)
    : engine_(std::move(engine)), tokenizer_(tokenizer) {}

Executor::~Executor() { Shutdown(); }

Result<std::shared_ptr<RequestStream>> Executor::Enqueue(EngineRequest request,
                                                         OutputCallback on_output) {
  request.id = next_id_++;
  KILN_RETURN_IF_ERROR(engine_->ValidateRequest(request));
  std::shared_ptr<RequestStream> stream(
      new RequestStream(request.id, this, tokenizer_, request.params));
  stream->on_output_ = std::move(on_output);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return Unavailable("the engine is shutting down");
    streams_.emplace(request.id, stream);
    to_add_.push_back(std::move(request));
    ++stats_.num_requests;
  }
  cv_.notify_all();
  return stream;
}

void Executor::Abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    to_abort_.push_back(id);
  }
  cv_.notify_all();
}

ExecutorStats Executor::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  ExecutorStats stats = stats_;
  stats.num_waiting += static_cast<int32_t>(to_add_.size()) + num_in_transit_;
  return stats;
}

void Executor::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Executor::Loop() {
  while (true) {
    std::vector<EngineRequest> to_add;
    std::vector<RequestId> to_abort;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !to_add_.empty() || !to_abort_.empty() || engine_->HasWork();
      });
      to_add.swap(to_add_);
      to_abort.swap(to_abort_);
      num_in_transit_ = static_cast<int32_t>(to_add.size());
      stopping = stopping_;
    }
    for (EngineRequest& r : to_add) {
      const RequestId id = r.id;
      Status s = engine_->AddRequest(std::move(r));
      CHECK(s.ok()) << "request " << id
                    << " passed validation but not AddRequest: " << s.ToString();
    }
    for (RequestId id : to_abort) engine_->Abort(id);
    if (stopping) {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, stream] : streams_) engine_->Abort(id);
    }
    std::vector<RequestOutput> outputs;
    if (engine_->HasWork()) outputs = engine_->Step();
    // NOTE: callbacks run after the lock is released: they may post work that calls back into
    // the executor (Abort on a stop string) on another thread.
    std::vector<std::shared_ptr<RequestStream>> to_notify;
    bool done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (RequestOutput& out : outputs) {
        auto it = streams_.find(out.id);
        if (it == streams_.end()) continue;
        const bool finished = out.finished;
        it->second->Push(std::move(out));
        if (it->second->on_output_) to_notify.push_back(it->second);
        if (finished) streams_.erase(it);
      }
      stats_.engine = engine_->stats();
      stats_.num_active = static_cast<int32_t>(streams_.size());
      stats_.num_running = stats_.engine.last_step.num_running;
      stats_.num_waiting = stats_.engine.last_step.num_waiting;
      num_in_transit_ = 0;
      done = stopping && streams_.empty() && !engine_->HasWork();
    }
    for (const std::shared_ptr<RequestStream>& s : to_notify) s->on_output_();
    if (done) return;
  }
}

}  // namespace kiln
