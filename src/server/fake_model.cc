#include "server/fake_model.h"

#include "builder/synth_tokenizer.h"
#include "core/check.h"
#include "engine/fake_runner.h"
#include "tokenizer/vocab.h"

namespace kiln::server::testing {

std::unique_ptr<ServedModel> MakeFakeServedModel(const FakeModelSetup& setup) {
  auto runner = std::make_unique<kiln::testing::FakeRunner>(kFakeVocab, kFakeEos);
  runner->set_step_delay_us(setup.step_delay_us);
  auto model = std::make_unique<ServedModel>();
  auto synth = BuildSyntheticTokenizer(runner->config());
  CHECK(synth.ok()) << synth.status().ToString();
  auto vocab = VocabFromTokenizerJson(TokenizerJson(*synth), "synthetic");
  CHECK(vocab.ok()) << vocab.status().ToString();
  auto tokenizer = Tokenizer::Create(std::move(*vocab));
  CHECK(tokenizer.ok());
  model->tokenizer = std::make_unique<LoadedTokenizer>();
  model->tokenizer->tokenizer = std::move(*tokenizer);
  if (!setup.chat_template.empty()) {
    auto chat_template = ChatTemplate::Parse(setup.chat_template);
    CHECK(chat_template.ok()) << chat_template.status().ToString();
    model->tokenizer->chat_template = std::move(*chat_template);
  }
  EngineOptions o;
  o.block_size = 4;
  o.num_kv_blocks = setup.num_kv_blocks;
  o.scheduler.max_num_seqs = setup.max_num_seqs;
  o.check_invariants = true;
  auto engine = Engine::Create(std::move(runner), o);
  CHECK(engine.ok()) << engine.status().ToString();
  model->info.name = "fake";
  model->info.tokenizer = model->tokenizer.get();
  model->info.max_model_len = (*engine)->max_model_len();
  model->info.vocab_size = kFakeVocab;
  model->executor = Executor::Start(std::move(*engine), model->tokenizer->tokenizer.get());
  return model;
}

}  // namespace kiln::server::testing
