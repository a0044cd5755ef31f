// Tests of the generated kvserve.v1 wire API: presence of optional fields, oneofs, services.
#include <gtest/gtest.h>

#include <string>

#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "kvserve/v1/prefix.pb.h"

namespace kvserve {
namespace {

TEST(ProtoTest, OptionalScalarsTellUnsetFromZero) {
  v1::GenerateRequest request;
  EXPECT_FALSE(request.sampling().has_temperature());
  EXPECT_FALSE(request.sampling().has_max_new_tokens());
  EXPECT_FALSE(request.cache().has_use_cache());
  EXPECT_FALSE(request.cache().quantization().has_nbits());

  request.mutable_sampling()->set_top_k(0);
  request.mutable_cache()->mutable_quantization()->set_axis_key(0);
  request.mutable_cache()->set_use_cache(false);
  v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(request.SerializeAsString()));
  EXPECT_TRUE(parsed.sampling().has_top_k());
  EXPECT_EQ(parsed.sampling().top_k(), 0);
  EXPECT_FALSE(parsed.sampling().has_top_p());
  EXPECT_TRUE(parsed.cache().quantization().has_axis_key());
  EXPECT_FALSE(parsed.cache().quantization().has_axis_value());
  EXPECT_TRUE(parsed.cache().has_use_cache());
  EXPECT_FALSE(parsed.cache().use_cache());
}

TEST(ProtoTest, InputIsAOneof) {
  v1::GenerateRequest request;
  EXPECT_EQ(request.input_case(), v1::GenerateRequest::INPUT_NOT_SET);
  request.set_prompt("hello");
  EXPECT_EQ(request.input_case(), v1::GenerateRequest::kPrompt);
  request.mutable_token_ids()->add_ids(5);
  EXPECT_EQ(request.input_case(), v1::GenerateRequest::kTokenIds);
  EXPECT_EQ(request.prompt(), "");
  auto* message = request.mutable_messages()->add_messages();
  message->set_role("user");
  message->set_content("hi");
  EXPECT_EQ(request.input_case(), v1::GenerateRequest::kMessages);

  v1::RegisterPrefixRequest prefix;
  prefix.set_text("You are helpful.");
  EXPECT_EQ(prefix.content_case(), v1::RegisterPrefixRequest::kText);
  EXPECT_FALSE(prefix.options().has_pinned());
}

TEST(ProtoTest, ServicesHaveTheirMethods) {
  const google::protobuf::ServiceDescriptor* generation =
      v1::GenerateRequest::descriptor()->file()->FindServiceByName("Generation");
  ASSERT_NE(generation, nullptr);
  ASSERT_EQ(generation->method_count(), 4);
  EXPECT_EQ(generation->full_name(), "kvserve.v1.Generation");
  EXPECT_EQ(generation->method(0)->name(), "Generate");
  EXPECT_FALSE(generation->method(0)->server_streaming());
  EXPECT_EQ(generation->method(1)->name(), "GenerateStream");
  EXPECT_TRUE(generation->method(1)->server_streaming());
  EXPECT_EQ(generation->method(2)->name(), "Tokenize");
  EXPECT_EQ(generation->method(3)->name(), "GetModelInfo");

  const google::protobuf::ServiceDescriptor* prefix =
      v1::Prefix::descriptor()->file()->FindServiceByName("PrefixCache");
  ASSERT_NE(prefix, nullptr);
  ASSERT_EQ(prefix->method_count(), 4);
  EXPECT_EQ(prefix->method(0)->name(), "RegisterPrefix");
  EXPECT_EQ(prefix->method(1)->name(), "GetPrefix");
  EXPECT_EQ(prefix->method(2)->name(), "ListPrefixes");
  EXPECT_EQ(prefix->method(3)->name(), "DeletePrefix");
  EXPECT_EQ(prefix->method(0)->output_type()->full_name(), "kvserve.v1.Prefix");
  // The generated stubs exist for both services.
  EXPECT_STREQ(v1::Generation::service_full_name(), "kvserve.v1.Generation");
  EXPECT_STREQ(v1::PrefixCache::service_full_name(), "kvserve.v1.PrefixCache");
}

}  // namespace
}  // namespace kvserve
