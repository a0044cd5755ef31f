// Tests for the embedded default model: made in memory, loaded by the folder loader.
#include "model/embedded_model.h"

#include <gtest/gtest.h>

#include "model/transformer.h"
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

}  // namespace
}  // namespace kvserve::model
