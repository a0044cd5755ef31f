// Tests for the embedded default model: made in memory, loaded by the folder loader.
#include "model/embedded_model.h"

#include <gtest/gtest.h>

#include "model/transformer.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::model {
namespace {

TEST(EmbeddedModelTest, LoadsAndTokenizesLikeAFolder) {
  auto source = EmbeddedDefaultModel();
  ASSERT_TRUE(source.ok()) << source.status();
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(source->Has(f)) << f;
  }
  auto model = Transformer::Load(*source, {});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->info().model_type, "llama");
  EXPECT_EQ((*model)->info().num_layers, 4);  // the small preset
  auto tokenizer = tokenizer::Tokenizer::FromJson(*source->ReadText("tokenizer.json"),
                                                  *source->ReadText("tokenizer_config.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto ids = (*tokenizer)->Encode("Hello", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*tokenizer)->Decode(*ids, true), "Hello");
}

// Whatever id the model samples decodes to text: ids past the tokenizer's merges used to decode
// to nothing, so `make serve`'s demo printed an empty line for `generate --prompt 'Hello'`.
TEST(EmbeddedModelTest, EveryIdTheModelCanSampleDecodesToText) {
  auto source = EmbeddedDefaultModel();
  ASSERT_TRUE(source.ok()) << source.status();
  auto model = Transformer::Load(*source, {});
  ASSERT_TRUE(model.ok()) << model.status();
  auto tokenizer = tokenizer::Tokenizer::FromJson(*source->ReadText("tokenizer.json"),
                                                  *source->ReadText("tokenizer_config.json"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const int64_t vocab_size = (*model)->info().vocab_size;
  EXPECT_EQ((*tokenizer)->vocab_size(), vocab_size);
  int64_t empty = 0;
  for (int32_t id = 0; id < vocab_size; ++id) {
    // <s> and </s> are special: left out of the text, as Transformers' decode does.
    if (id == tokenizer::kTinyBosId || id == tokenizer::kTinyEosId) continue;
    if ((*tokenizer)->Decode({id}, /*skip_special_tokens=*/true).empty()) ++empty;
  }
  EXPECT_EQ(empty, 0) << "of " << vocab_size << " ids";
}

}  // namespace
}  // namespace kvserve::model
