// Tests of the mapping of kvctl's generate/stream/tokenize flags onto kvserve.v1 requests (and
// of the sampling and cache-strategy flags chat and session create share).
#include "client/request_flags.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<v1::GenerateRequest> Build(const std::vector<std::string>& args) {
  absl::StatusOr<ParsedFlags> parsed =
      ParseFlags(args, GenerateFlagSpecs(), GenerateRepeatableFlags());
  if (!parsed.ok()) return parsed.status();
  return BuildGenerateRequest(*parsed);
}

absl::StatusOr<v1::TokenizeRequest> BuildTokenize(const std::vector<std::string>& args) {
  absl::StatusOr<ParsedFlags> parsed = ParseFlags(args, TokenizeFlagSpecs());
  if (!parsed.ok()) return parsed.status();
  return BuildTokenizeRequest(*parsed);
}

TEST(BuildGenerateRequestTest, PromptAloneLeavesEverythingElseUnset) {
  absl::StatusOr<v1::GenerateRequest> request = Build({"--prompt", "Hello"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->prompt(), "Hello");
  EXPECT_TRUE(request->prefix().empty());
  EXPECT_TRUE(request->session().empty());
  EXPECT_TRUE(request->template_kwargs().empty());
  EXPECT_FALSE(request->has_sampling());
  EXPECT_FALSE(request->has_cache());
}

TEST(BuildGenerateRequestTest, OneSamplingFlagSetsOnlyItsField) {
  absl::StatusOr<v1::GenerateRequest> request = Build({"--prompt", "x", "--temperature", "0"});
  ASSERT_TRUE(request.ok()) << request.status();
  const v1::SamplingParams& s = request->sampling();
  ASSERT_TRUE(request->has_sampling());
  EXPECT_TRUE(s.has_temperature());
  EXPECT_EQ(s.temperature(), 0.0f);
  EXPECT_FALSE(s.has_max_new_tokens());
  EXPECT_FALSE(s.has_do_sample());
  EXPECT_FALSE(s.has_top_k());
  EXPECT_FALSE(s.has_top_p());
  EXPECT_FALSE(s.has_min_p());
  EXPECT_FALSE(s.has_repetition_penalty());
  EXPECT_FALSE(s.has_seed());
  EXPECT_EQ(s.stop_size(), 0);
  EXPECT_EQ(s.stop_token_ids_size(), 0);
  EXPECT_FALSE(s.ignore_eos());
  EXPECT_FALSE(request->has_cache());
}

TEST(BuildGenerateRequestTest, EverySamplingFlag) {
  absl::StatusOr<v1::GenerateRequest> request = Build({"--token-ids",
                                                       "1,450,29",
                                                       "--prefix",
                                                       "sys",
                                                       "--max-new-tokens",
                                                       "8",
                                                       "--do-sample",
                                                       "--temperature",
                                                       "0.7",
                                                       "--top-k",
                                                       "0",
                                                       "--top-p",
                                                       "0.9",
                                                       "--min-p",
                                                       "0.05",
                                                       "--repetition-penalty",
                                                       "1.1",
                                                       "--seed",
                                                       "42",
                                                       "--stop",
                                                       "\n\n",
                                                       "--stop=END",
                                                       "--stop-token-ids",
                                                       "2,7",
                                                       "--ignore-eos"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_THAT(request->token_ids().ids(), ElementsAre(1, 450, 29));
  EXPECT_EQ(request->prefix(), "sys");
  const v1::SamplingParams& s = request->sampling();
  EXPECT_EQ(s.max_new_tokens(), 8);
  EXPECT_TRUE(s.has_do_sample() && s.do_sample());
  EXPECT_FLOAT_EQ(s.temperature(), 0.7f);
  EXPECT_TRUE(s.has_top_k());
  EXPECT_EQ(s.top_k(), 0);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_FLOAT_EQ(s.min_p(), 0.05f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.1f);
  EXPECT_EQ(s.seed(), 42u);
  EXPECT_THAT(s.stop(), ElementsAre("\n\n", "END"));
  EXPECT_THAT(s.stop_token_ids(), ElementsAre(2, 7));
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_FALSE(request->has_cache());
}

TEST(BuildGenerateRequestTest, EverySequenceFlag) {
  absl::StatusOr<v1::GenerateRequest> request =
      Build({"--prompt", "x", "--num-beams", "4", "--num-return-sequences", "2", "--early-stopping",
             "never", "--length-penalty", "-0.5", "--logprobs", "--top-logprobs", "5"});
  ASSERT_TRUE(request.ok()) << request.status();
  const v1::SamplingParams& s = request->sampling();
  EXPECT_TRUE(s.has_num_beams());
  EXPECT_EQ(s.num_beams(), 4);
  EXPECT_TRUE(s.has_num_return_sequences());
  EXPECT_EQ(s.num_return_sequences(), 2);
  EXPECT_EQ(s.early_stopping(), v1::EARLY_STOPPING_NEVER);
  EXPECT_TRUE(s.has_length_penalty());
  EXPECT_FLOAT_EQ(s.length_penalty(), -0.5f);
  EXPECT_TRUE(s.logprobs());
  EXPECT_EQ(s.top_logprobs(), 5);
  EXPECT_FALSE(s.has_num_beam_groups());
  // The sampling flags stay unset.
  EXPECT_FALSE(s.has_max_new_tokens());
  EXPECT_FALSE(s.has_do_sample());
  EXPECT_FALSE(s.has_temperature());
  EXPECT_FALSE(request->has_cache());
}

TEST(BuildGenerateRequestTest, OneSequenceFlagSetsOnlyItsField) {
  absl::StatusOr<v1::GenerateRequest> logprobs = Build({"--prompt", "x", "--logprobs"});
  ASSERT_TRUE(logprobs.ok()) << logprobs.status();
  ASSERT_TRUE(logprobs->has_sampling());
  EXPECT_TRUE(logprobs->sampling().logprobs());
  EXPECT_EQ(logprobs->sampling().top_logprobs(), 0);
  EXPECT_FALSE(logprobs->sampling().has_num_beams());
  EXPECT_FALSE(logprobs->sampling().has_num_return_sequences());
  EXPECT_EQ(logprobs->sampling().early_stopping(), v1::EARLY_STOPPING_UNSPECIFIED);
  EXPECT_FALSE(logprobs->sampling().has_length_penalty());

  absl::StatusOr<v1::GenerateRequest> beams = Build({"--prompt", "x", "--num-beams", "1"});
  ASSERT_TRUE(beams.ok()) << beams.status();
  EXPECT_TRUE(beams->sampling().has_num_beams());
  EXPECT_EQ(beams->sampling().num_beams(), 1);
  EXPECT_FALSE(beams->sampling().logprobs());

  // --top-logprobs is sent as given, without --logprobs too: the server judges it.
  absl::StatusOr<v1::GenerateRequest> top = Build({"--prompt", "x", "--top-logprobs", "3"});
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_EQ(top->sampling().top_logprobs(), 3);
  EXPECT_FALSE(top->sampling().logprobs());

  // --logprobs=false is the default: sampling is sent, logprobs false.
  absl::StatusOr<v1::GenerateRequest> off = Build({"--prompt", "x", "--logprobs=false"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->sampling().logprobs());
}

TEST(BuildGenerateRequestTest, EarlyStoppingValues) {
  const std::vector<std::pair<std::string, v1::EarlyStopping>> cases = {
      {"true", v1::EARLY_STOPPING_TRUE},
      {"false", v1::EARLY_STOPPING_FALSE},
      {"never", v1::EARLY_STOPPING_NEVER},
  };
  for (const auto& [value, expected] : cases) {
    absl::StatusOr<v1::GenerateRequest> request =
        Build({"--prompt", "x", "--early-stopping=" + value});
    ASSERT_TRUE(request.ok()) << value << ": " << request.status();
    EXPECT_EQ(request->sampling().early_stopping(), expected) << value;
  }
  EXPECT_EQ(
      Build({"--prompt", "x", "--early-stopping", "sometimes"}).status(),
      absl::InvalidArgumentError("--early-stopping: 'sometimes' is not true, false or never"));
}

// Semantic checks (ranges, beams with sampling, top_logprobs beyond 20) are the server's.
TEST(BuildGenerateRequestTest, SequenceValuesAreNotRangeChecked) {
  absl::StatusOr<v1::GenerateRequest> request =
      Build({"--prompt", "x", "--num-beams", "0", "--num-return-sequences", "-2", "--top-logprobs",
             "100", "--do-sample"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->sampling().num_beams(), 0);
  EXPECT_EQ(request->sampling().num_return_sequences(), -2);
  EXPECT_EQ(request->sampling().top_logprobs(), 100);
}

TEST(BuildGenerateRequestTest, DoSampleFalseIsSetNotUnset) {
  absl::StatusOr<v1::GenerateRequest> request = Build({"--prompt", "x", "--do-sample=false"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->sampling().has_do_sample());
  EXPECT_FALSE(request->sampling().do_sample());
}

TEST(BuildGenerateRequestTest, EveryCacheFlag) {
  absl::StatusOr<v1::GenerateRequest> request =
      Build({"--prompt", "x", "--no-cache", "--cache-implementation", "quantized", "--cache-config",
             R"({"backend": "hqq", "nbits": 2, "axis_key": 1, "axis_value": 0,
             "q_group_size": 32, "residual_length": 0})",
             "--max-cache-len", "4096", "--offload-only-non-sliding=false", "--no-prefix-reuse"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->has_sampling());
  const v1::CacheOptions& c = request->cache();
  EXPECT_TRUE(c.has_use_cache());
  EXPECT_FALSE(c.use_cache());
  EXPECT_EQ(c.cache_implementation(), "quantized");
  const v1::QuantizationConfig& q = c.quantization();
  EXPECT_EQ(q.backend(), "hqq");
  EXPECT_EQ(q.nbits(), 2);
  EXPECT_EQ(q.axis_key(), 1);
  EXPECT_TRUE(q.has_axis_value());
  EXPECT_EQ(q.axis_value(), 0);
  EXPECT_EQ(q.q_group_size(), 32);
  EXPECT_TRUE(q.has_residual_length());
  EXPECT_EQ(q.residual_length(), 0);
  EXPECT_EQ(c.max_cache_len(), 4096);
  EXPECT_TRUE(c.has_offload_only_non_sliding());
  EXPECT_FALSE(c.offload_only_non_sliding());
  EXPECT_TRUE(c.skip_prefix_reuse());
}

// --offload-only-non-sliding is a switch like every other boolean flag.
TEST(BuildGenerateRequestTest, OffloadOnlyNonSlidingIsASwitch) {
  absl::StatusOr<v1::GenerateRequest> request =
      Build({"--prompt", "x", "--offload-only-non-sliding", "--max-cache-len", "64"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->cache().has_offload_only_non_sliding());
  EXPECT_TRUE(request->cache().offload_only_non_sliding());
  EXPECT_EQ(request->cache().max_cache_len(), 64);
}

TEST(BuildGenerateRequestTest, OneCacheFlagSetsOnlyItsField) {
  absl::StatusOr<v1::GenerateRequest> request =
      Build({"--prompt", "x", "--cache-implementation", "static"});
  ASSERT_TRUE(request.ok()) << request.status();
  const v1::CacheOptions& c = request->cache();
  EXPECT_EQ(c.cache_implementation(), "static");
  EXPECT_FALSE(c.has_use_cache());
  EXPECT_FALSE(c.has_quantization());
  EXPECT_FALSE(c.has_max_cache_len());
  EXPECT_FALSE(c.has_offload_only_non_sliding());
  EXPECT_FALSE(c.skip_prefix_reuse());
}

TEST(BuildGenerateRequestTest, MessagesJson) {
  absl::StatusOr<v1::GenerateRequest> request =
      Build({"--messages",
             R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])"});
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->messages().messages_size(), 2);
  EXPECT_EQ(request->messages().messages(0).role(), "system");
  EXPECT_EQ(request->messages().messages(0).content(), "Be brief.");
  EXPECT_EQ(request->messages().messages(1).role(), "user");
  EXPECT_EQ(request->messages().messages(1).content(), "Hi");
}

TEST(BuildGenerateRequestTest, EmptyPromptIsAnInput) {
  absl::StatusOr<v1::GenerateRequest> request = Build({"--prompt", "", "--prefix", "sys"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->input_case(), v1::GenerateRequest::kPrompt);
}

TEST(BuildGenerateRequestTest, InputIsRequiredAndUnique) {
  EXPECT_EQ(Build({"--max-new-tokens", "4"}).status().message(),
            "one of --prompt, --prompt-file, --token-ids, --messages is required");
  EXPECT_EQ(Build({"--prompt", "a", "--token-ids", "1"}).status().message(),
            "give only one of --prompt, --prompt-file, --token-ids, --messages");
  EXPECT_EQ(Build({"--prompt", "a", "--prompt-file", "-"}).status().message(),
            "give only one of --prompt, --prompt-file, --token-ids, --messages");
}

// A prompt over 128 KiB cannot be one command-line argument (Linux's MAX_ARG_STRLEN).
TEST(BuildGenerateRequestTest, PromptFileIsSentAsIs) {
  const std::string prompt = std::string(200 << 10, 'a') + "\n\xc3\xa9 end\n";
  const std::string path = ::testing::TempDir() + "kvctl_prompt_file.txt";
  std::ofstream(path, std::ios::binary) << prompt;
  absl::StatusOr<v1::GenerateRequest> request = Build({"--prompt-file", path});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->input_case(), v1::GenerateRequest::kPrompt);
  EXPECT_EQ(request->prompt(), prompt);
  std::remove(path.c_str());

  request = Build({"--prompt-file", path});
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(request.status().message(),
              HasSubstr("--prompt-file: cannot read '" + path + "': No such file"));
}

TEST(BuildGenerateRequestTest, PromptFileDashReadsStandardInput) {
  absl::StatusOr<ParsedFlags> parsed = ParseFlags({"--prompt-file", "-", "--max-new-tokens", "2"},
                                                  GenerateFlagSpecs(), GenerateRepeatableFlags());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  std::istringstream in("piped\nprompt");
  absl::StatusOr<v1::GenerateRequest> request = BuildGenerateRequest(*parsed, in);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->prompt(), "piped\nprompt");
  EXPECT_EQ(request->sampling().max_new_tokens(), 2);
}

// A request's string fields must be UTF-8: refused here, naming the flag, rather than by the
// server's parser as an INTERNAL error.
TEST(BuildGenerateRequestTest, APromptThatIsNotUtf8IsRefused) {
  EXPECT_EQ(Build({"--prompt", "caf\xe9"}).status().message(), "--prompt: not UTF-8 text (byte 3)");
  const std::string path = ::testing::TempDir() + "kvctl_latin1_prompt.txt";
  std::ofstream(path, std::ios::binary) << "ok\n\xff";
  EXPECT_EQ(Build({"--prompt-file", path}).status().message(),
            "--prompt-file '" + path + "': not UTF-8 text (byte 3)");
  std::remove(path.c_str());
}

// Each malformed value is InvalidArgument naming its flag.
TEST(BuildGenerateRequestTest, MalformedValuesNameTheFlag) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--token-ids", "1,x"}, "--token-ids"},
      {{"--max-new-tokens", "many"}, "--max-new-tokens"},
      {{"--max-new-tokens", "99999999999"}, "--max-new-tokens"},
      {{"--temperature", "hot"}, "--temperature"},
      {{"--top-k", "1.5"}, "--top-k"},
      {{"--top-p", ""}, "--top-p"},
      {{"--min-p", "x"}, "--min-p"},
      {{"--repetition-penalty", "x"}, "--repetition-penalty"},
      {{"--seed", "-3"}, "--seed"},
      {{"--stop-token-ids", "2,,a"}, "--stop-token-ids"},
      {{"--max-cache-len", "1e3"}, "--max-cache-len"},
      {{"--offload-only-non-sliding=yes"}, "--offload-only-non-sliding"},
      {{"--cache-config", "{"}, "--cache-config"},
      {{"--messages", "{}"}, "--messages"},
      {{"--do-sample=maybe"}, "--do-sample"},
      {{"--num-beams", "four"}, "--num-beams"},
      {{"--num-beams", "1.5"}, "--num-beams"},
      {{"--num-return-sequences", "x"}, "--num-return-sequences"},
      {{"--num-return-sequences", "99999999999"}, "--num-return-sequences"},
      {{"--early-stopping", "yes"}, "--early-stopping"},
      {{"--early-stopping", "True"}, "--early-stopping"},
      {{"--early-stopping", ""}, "--early-stopping"},
      {{"--length-penalty", "long"}, "--length-penalty"},
      {{"--logprobs=maybe"}, "--logprobs"},
      {{"--top-logprobs", "all"}, "--top-logprobs"},
  };
  for (const auto& [flags, name] : cases) {
    std::vector<std::string> args = flags;
    if (name != "--token-ids" && name != "--messages") {
      args.insert(args.begin(), {"--prompt", "x"});
    }
    absl::StatusOr<v1::GenerateRequest> request = Build(args);
    ASSERT_FALSE(request.ok()) << name;
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(request.status().message(), HasSubstr(name));
  }
}

TEST(ParseCacheConfigTest, OnlyGivenKeysAreSet) {
  absl::StatusOr<v1::QuantizationConfig> config = ParseCacheConfig(R"({"nbits": 4})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->nbits(), 4);
  EXPECT_TRUE(config->backend().empty());
  EXPECT_FALSE(config->has_axis_key());
  EXPECT_FALSE(config->has_axis_value());
  EXPECT_FALSE(config->has_q_group_size());
  EXPECT_FALSE(config->has_residual_length());
}

TEST(ParseCacheConfigTest, EmptyObjectSetsNothing) {
  absl::StatusOr<v1::QuantizationConfig> config = ParseCacheConfig("{}");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->ByteSizeLong(), 0u);
}

TEST(ParseCacheConfigTest, RefusalsNameTheProblem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"nbit": 4})", "\"nbit\""},
      {R"({"nbits": "4"})", "\"nbits\""},
      {R"({"nbits": 4.5})", "\"nbits\""},
      {R"({"nbits": 4294967296})", "\"nbits\""},
      {R"({"backend": 1})", "\"backend\""},
      {R"({"q_group_size": true})", "\"q_group_size\""},
      {R"([1, 2])", "object"},
      {"not json", "JSON"},
  };
  for (const auto& [json, needle] : cases) {
    absl::StatusOr<v1::QuantizationConfig> config = ParseCacheConfig(json);
    ASSERT_FALSE(config.ok()) << json;
    EXPECT_THAT(config.status().message(), HasSubstr("--cache-config")) << json;
    EXPECT_THAT(config.status().message(), HasSubstr(needle)) << json;
  }
}

TEST(ParseChatMessagesTest, RefusalsNameTheMessage) {
  EXPECT_THAT(
      ParseChatMessages(R"([{"role": "user", "content": 3}])", "--messages").status().message(),
      HasSubstr("message 0: \"content\" must be a string"));
  EXPECT_THAT(
      ParseChatMessages(R"([{"role": "user"}, {"speaker": "x"}])", "--messages").status().message(),
      HasSubstr("message 1: unknown key \"speaker\""));
  EXPECT_THAT(ParseChatMessages(R"(["hi"])", "--messages").status().message(),
              HasSubstr("--messages: message 0 is not an object"));
}

TEST(BuildTokenizeRequestTest, TextWithAndWithoutSpecialTokens) {
  absl::StatusOr<v1::TokenizeRequest> plain = BuildTokenize({"--text", "Hello"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->text(), "Hello");
  EXPECT_FALSE(plain->has_add_special_tokens());

  absl::StatusOr<v1::TokenizeRequest> bare =
      BuildTokenize({"--text", "Hello", "--no-special-tokens"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_TRUE(bare->has_add_special_tokens());
  EXPECT_FALSE(bare->add_special_tokens());
}

TEST(BuildTokenizeRequestTest, MessagesAndInputErrors) {
  absl::StatusOr<v1::TokenizeRequest> chat =
      BuildTokenize({"--messages", R"([{"role": "user", "content": "Hi"}])"});
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->messages().messages(0).content(), "Hi");
  EXPECT_THAT(BuildTokenize({}).status().message(), HasSubstr("--text"));
  EXPECT_THAT(BuildTokenize({"--text", "a", "--messages", "[]"}).status().message(),
              HasSubstr("only one of"));
}

TEST(BuildGenerateRequestTest, SessionTurn) {
  absl::StatusOr<v1::GenerateRequest> append =
      Build({"--prompt", "And then?", "--session", "0123456789abcdef0123456789abcdef"});
  ASSERT_TRUE(append.ok()) << append.status();
  EXPECT_EQ(append->session(), "0123456789abcdef0123456789abcdef");
  EXPECT_EQ(append->prompt(), "And then?");
  EXPECT_FALSE(append->has_cache());

  // The server refuses a cache on a session turn; kvctl passes it on for it to say so.
  absl::StatusOr<v1::GenerateRequest> with_cache =
      Build({"--token-ids", "1", "--session", "s", "--cache-implementation", "static"});
  ASSERT_TRUE(with_cache.ok()) << with_cache.status();
  EXPECT_EQ(with_cache->cache().cache_implementation(), "static");
}

TEST(BuildGenerateRequestTest, TemplateKwargsAreSentAsGiven) {
  const std::string kwargs = R"({"enable_thinking": false, "tools": [{"name": "f"}], "a": 1})";
  absl::StatusOr<v1::GenerateRequest> request =
      Build({"--messages", R"([{"role":"user","content":"Hi"}])", "--template-kwargs", kwargs,
             "--session", "s"});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->template_kwargs(), kwargs);  // keys in their order, spacing kept
  EXPECT_EQ(request->session(), "s");
}

TEST(BuildGenerateRequestTest, TemplateKwargsRefusals) {
  const std::string messages = R"([{"role":"user","content":"Hi"}])";
  EXPECT_EQ(Build({"--prompt", "x", "--template-kwargs", "{}"}).status(),
            absl::InvalidArgumentError("--template-kwargs needs --messages"));
  EXPECT_EQ(Build({"--token-ids", "1", "--template-kwargs", "{}"}).status(),
            absl::InvalidArgumentError("--template-kwargs needs --messages"));
  EXPECT_EQ(Build({"--messages", messages, "--template-kwargs", "[true]"}).status(),
            absl::InvalidArgumentError("--template-kwargs: expected a JSON object"));
  EXPECT_EQ(Build({"--messages", messages, "--template-kwargs", "\"x\""}).status(),
            absl::InvalidArgumentError("--template-kwargs: expected a JSON object"));
  absl::Status malformed =
      Build({"--messages", messages, "--template-kwargs", "{enable_thinking: false}"}).status();
  EXPECT_EQ(malformed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(malformed.message()),
              ::testing::StartsWith("--template-kwargs: not valid JSON ("));
}

TEST(BuildTokenizeRequestTest, TemplateKwargs) {
  absl::StatusOr<v1::TokenizeRequest> chat =
      BuildTokenize({"--messages", R"([{"role":"user","content":"Hi"}])", "--template-kwargs",
                     R"({"enable_thinking":false})"});
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->template_kwargs(), R"({"enable_thinking":false})");
  absl::StatusOr<v1::TokenizeRequest> plain = BuildTokenize({"--text", "Hi"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->template_kwargs(), "");
  EXPECT_EQ(BuildTokenize({"--text", "Hi", "--template-kwargs", "{}"}).status(),
            absl::InvalidArgumentError("--template-kwargs needs --messages"));
  EXPECT_THAT(BuildTokenize({"--messages", "[]", "--template-kwargs", "1"}).status().message(),
              HasSubstr("--template-kwargs"));
}

TEST(SharedFlagsTest, SamplingAndCacheOptionsOnlyWhenGiven) {
  const std::vector<base::FlagSpec> specs = GenerateFlagSpecs();
  absl::StatusOr<ParsedFlags> none = ParseFlags({}, specs, GenerateRepeatableFlags());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(BuildSamplingParams(*none)->has_value());
  EXPECT_FALSE(BuildCacheOptions(*none)->has_value());

  absl::StatusOr<ParsedFlags> stop = ParseFlags({"--stop", "x"}, specs, GenerateRepeatableFlags());
  ASSERT_TRUE(stop.ok()) << stop.status();
  absl::StatusOr<std::optional<v1::SamplingParams>> sampling = BuildSamplingParams(*stop);
  ASSERT_TRUE(sampling.ok() && sampling->has_value());
  EXPECT_THAT((*sampling)->stop(), ElementsAre("x"));
  EXPECT_FALSE(BuildCacheOptions(*stop)->has_value());

  absl::StatusOr<ParsedFlags> no_cache = ParseFlags({"--no-cache"}, specs);
  ASSERT_TRUE(no_cache.ok()) << no_cache.status();
  absl::StatusOr<std::optional<v1::CacheOptions>> cache = BuildCacheOptions(*no_cache);
  ASSERT_TRUE(cache.ok() && cache->has_value());
  EXPECT_TRUE((*cache)->has_use_cache());
  EXPECT_FALSE((*cache)->use_cache());
}

TEST(SharedFlagsTest, GenerateHasTheSharedFlags) {
  std::vector<std::string> names;
  for (const base::FlagSpec& spec : GenerateFlagSpecs()) names.push_back(spec.name);
  for (const std::vector<base::FlagSpec>& shared :
       {SamplingFlagSpecs(), SequenceFlagSpecs(), CacheStrategyFlagSpecs()}) {
    for (const base::FlagSpec& spec : shared) {
      EXPECT_THAT(names, ::testing::Contains(spec.name));
    }
  }
  EXPECT_THAT(names, ::testing::Contains("session"));
  EXPECT_THAT(names, ::testing::Contains("template-kwargs"));
}

// The sequence flags are generate's and stream's only: chat and session create share the
// sampling flags, not these.
TEST(SharedFlagsTest, SequenceFlagsAreNotSamplingFlags) {
  std::vector<std::string> sampling;
  for (const base::FlagSpec& spec : SamplingFlagSpecs()) sampling.push_back(spec.name);
  std::vector<std::string> sequences;
  for (const base::FlagSpec& spec : SequenceFlagSpecs()) sequences.push_back(spec.name);
  EXPECT_THAT(sequences,
              ::testing::UnorderedElementsAre("num-beams", "num-return-sequences", "early-stopping",
                                              "length-penalty", "logprobs", "top-logprobs"));
  for (const std::string& name : sequences) {
    EXPECT_THAT(sampling, ::testing::Not(::testing::Contains(name)));
  }
  // Sampling flags alone (as chat parses them) build no sequence field.
  absl::StatusOr<ParsedFlags> chat = ParseFlags({"--seed", "3"}, SamplingFlagSpecs());
  ASSERT_TRUE(chat.ok()) << chat.status();
  absl::StatusOr<std::optional<v1::SamplingParams>> params = BuildSamplingParams(*chat);
  ASSERT_TRUE(params.ok() && params->has_value());
  EXPECT_FALSE((*params)->has_num_beams());
  EXPECT_FALSE((*params)->logprobs());
}

TEST(SharedFlagsTest, SequenceFlagsAloneMakeSamplingParams) {
  absl::StatusOr<ParsedFlags> parsed =
      ParseFlags({"--num-return-sequences", "3"}, GenerateFlagSpecs(), GenerateRepeatableFlags());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::optional<v1::SamplingParams>> params = BuildSamplingParams(*parsed);
  ASSERT_TRUE(params.ok() && params->has_value());
  EXPECT_EQ((*params)->num_return_sequences(), 3);
}

}  // namespace
}  // namespace kvserve::client
