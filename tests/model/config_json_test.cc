// config_json: the config.json readers Mamba's and BART's configs share.
#include "model/config_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::model::config_json {
namespace {

using ::testing::HasSubstr;

Json Parsed(std::string_view text) {
  absl::StatusOr<Json> json = ParseObject(text);
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *json : Json::object();
}

TEST(ConfigJsonTest, ParseObjectRefusesWhatIsNotAnObject) {
  EXPECT_TRUE(ParseObject(R"({"a": 1})").ok());
  for (std::string_view bad : {"[1, 2]", "{\"a\": ", "7"}) {
    absl::Status status = ParseObject(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(status.message()), HasSubstr("config.json")) << bad;
  }
}

TEST(ConfigJsonTest, ReadIntChecksTypeAndRangeAndKeepsAbsentFields) {
  const Json json = Parsed(R"({"n": 12, "big": 4096, "text": "12", "none": null})");
  int64_t value = -1;
  ASSERT_TRUE(ReadInt(json, "n", 1, 100, &value).ok());
  EXPECT_EQ(value, 12);
  value = 5;
  EXPECT_TRUE(ReadInt(json, "missing", 1, 100, &value).ok());
  EXPECT_TRUE(ReadInt(json, "none", 1, 100, &value).ok());
  EXPECT_EQ(value, 5);
  absl::Status range = ReadInt(json, "big", 1, 1024, &value);
  EXPECT_THAT(std::string(range.message()), HasSubstr("big must be in [1, 1024], got 4096"));
  absl::Status type = ReadInt(json, "text", 1, 100, &value);
  EXPECT_THAT(std::string(type.message()), HasSubstr("text must be an integer"));
  EXPECT_EQ(value, 5);
}

TEST(ConfigJsonTest, ReadBoolNamesTheField) {
  const Json json = Parsed(R"({"yes": true, "word": "true"})");
  bool value = false;
  ASSERT_TRUE(ReadBool(json, "yes", &value).ok());
  EXPECT_TRUE(value);
  absl::Status status = ReadBool(json, "word", &value);
  EXPECT_THAT(std::string(status.message()), HasSubstr("word must be a boolean"));
}

TEST(ConfigJsonTest, EosIsOneIdOrAListBelowTheVocabulary) {
  std::vector<int32_t> eos = {9};
  ASSERT_TRUE(ReadEosTokenIds(Parsed(R"({"eos_token_id": 2})"), 10, &eos).ok());
  EXPECT_EQ(eos, (std::vector<int32_t>{2}));
  ASSERT_TRUE(ReadEosTokenIds(Parsed(R"({"eos_token_id": [1, 3]})"), 10, &eos).ok());
  EXPECT_EQ(eos, (std::vector<int32_t>{1, 3}));
  ASSERT_TRUE(ReadEosTokenIds(Parsed(R"({"eos_token_id": null})"), 10, &eos).ok());
  EXPECT_TRUE(eos.empty());
  eos = {4};
  ASSERT_TRUE(ReadEosTokenIds(Parsed("{}"), 10, &eos).ok());
  EXPECT_EQ(eos, (std::vector<int32_t>{4}));
  for (std::string_view bad :
       {R"({"eos_token_id": 10})", R"({"eos_token_id": [1, -1]})", R"({"eos_token_id": "2"})"}) {
    absl::Status status = ReadEosTokenIds(Parsed(bad), 10, &eos);
    EXPECT_THAT(std::string(status.message()), HasSubstr("eos_token_id")) << bad;
  }
}

TEST(ConfigJsonTest, DtypeNameFromTorchDtypeElseDtype) {
  std::string name = "unset";
  ReadDtypeName(Parsed(R"({"torch_dtype": "bfloat16", "dtype": "float32"})"), &name);
  EXPECT_EQ(name, "bfloat16");
  ReadDtypeName(Parsed(R"({"torch_dtype": null, "dtype": "float16"})"), &name);
  EXPECT_EQ(name, "float16");
  ReadDtypeName(Parsed("{}"), &name);
  EXPECT_EQ(name, "float16");
}

}  // namespace
}  // namespace kvserve::model::config_json
