// Tests for CacheSpec::Parse and ParseQuantizationConfigJson: defaults and every refusal.
#include "cache/cache_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvserve::cache {
namespace {

using ::testing::HasSubstr;

absl::Status ParseError(std::string_view impl, const QuantizationConfig& config = {}) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse(impl, config);
  EXPECT_FALSE(spec.ok()) << impl;
  return spec.status();
}

QuantizationConfig Json(std::string_view json) {
  absl::StatusOr<QuantizationConfig> config = ParseQuantizationConfigJson(json);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.value_or(QuantizationConfig{});
}

TEST(CacheSpecTest, NamesMapToImplementations) {
  EXPECT_EQ(CacheSpec::Parse("")->implementation, CacheImplementation::kDynamic);
  EXPECT_EQ(CacheSpec::Parse("dynamic")->implementation, CacheImplementation::kDynamic);
  EXPECT_EQ(CacheSpec::Parse("static")->implementation, CacheImplementation::kStatic);
  EXPECT_EQ(CacheSpec::Parse("offloaded")->implementation, CacheImplementation::kOffloaded);
  EXPECT_EQ(CacheSpec::Parse("offloaded_static")->implementation,
            CacheImplementation::kOffloadedStatic);
  EXPECT_EQ(CacheSpec::Parse("quantized")->implementation, CacheImplementation::kQuantized);
}

TEST(CacheSpecTest, OffloadOnlyNonSlidingDefaultsAsReference) {
  EXPECT_FALSE(CacheSpec::Parse("offloaded")->offload_only_non_sliding);
  EXPECT_TRUE(CacheSpec::Parse("offloaded_static")->offload_only_non_sliding);
}

TEST(CacheSpecTest, UseCacheFalseIsNone) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse("", {}, /*use_cache=*/false);
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->implementation, CacheImplementation::kNone);
  EXPECT_FALSE(spec->use_cache());
  // The name is still validated.
  EXPECT_FALSE(CacheSpec::Parse("Static", {}, false).ok());
}

TEST(CacheSpecTest, NamesAreCaseSensitive) {
  absl::Status s = ParseError("Static");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cache_implementation 'Static'"));
  EXPECT_THAT(s.message(),
              HasSubstr("allowed: dynamic, static, offloaded, offloaded_static, quantized"));
}

TEST(CacheSpecTest, DeprecatedAndPagedNamesAreRefusedWithAdvice) {
  EXPECT_THAT(ParseError("sliding_window").message(), HasSubstr("use 'static'"));
  EXPECT_THAT(ParseError("hybrid").message(), HasSubstr("deprecated"));
  EXPECT_THAT(ParseError("hybrid_chunked").message(), HasSubstr("use 'static'"));
  EXPECT_THAT(ParseError("offloaded_hybrid").message(), HasSubstr("use 'offloaded_static'"));
  EXPECT_THAT(ParseError("offloaded_hybrid_chunked").message(),
              HasSubstr("use 'offloaded_static'"));
  EXPECT_THAT(ParseError("paged").message(), HasSubstr("'paged' is not supported"));
}

TEST(CacheSpecTest, QuantizedDefaults) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse("quantized");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->quantized.backend, QuantizationBackend::kQuanto);
  EXPECT_EQ(spec->quantized.nbits, 4);
  EXPECT_EQ(spec->quantized.axis_key, 0);
  EXPECT_EQ(spec->quantized.axis_value, 0);
  EXPECT_EQ(spec->quantized.q_group_size, 64);
  EXPECT_EQ(spec->quantized.residual_length, 128);
}

TEST(CacheSpecTest, BackendsAreCaseSensitive) {
  // The reference's own test passes "HQQ", which its QuantizedCache refuses.
  absl::Status s = ParseError("quantized", Json(R"({"backend": "HQQ"})"));
  EXPECT_THAT(s.message(), HasSubstr("cache_config.backend 'HQQ' is not supported"));
  EXPECT_THAT(s.message(), HasSubstr("allowed: quanto, hqq, fp8"));
}

TEST(CacheSpecTest, QuantoAllowsNbits2And4AndAxes0AndMinus1) {
  EXPECT_TRUE(CacheSpec::Parse("quantized", Json(R"({"nbits": 2, "axis_key": -1})")).ok());
  absl::Status s = ParseError("quantized", Json(R"({"nbits": 8})"));
  EXPECT_THAT(s.message(), HasSubstr("cache_config.nbits 8 is not supported by backend "
                                     "'quanto'; allowed: 2, 4"));
  s = ParseError("quantized", Json(R"({"axis_key": 1})"));
  EXPECT_THAT(s.message(), HasSubstr("cache_config.axis_key 1"));
  EXPECT_THAT(s.message(), HasSubstr("allowed: 0, -1"));
  s = ParseError("quantized", Json(R"({"axis_value": 1})"));
  EXPECT_THAT(s.message(), HasSubstr("cache_config.axis_value 1"));
}

TEST(CacheSpecTest, HqqAllowsNbits12348AndAxes0And1) {
  for (int nbits : {1, 2, 3, 4, 8}) {
    QuantizationConfig config{.backend = "hqq", .nbits = nbits, .axis_key = 1, .axis_value = 0};
    absl::StatusOr<CacheSpec> spec = CacheSpec::Parse("quantized", config);
    ASSERT_TRUE(spec.ok()) << nbits;
    EXPECT_EQ(spec->quantized.backend, QuantizationBackend::kHqq);
    EXPECT_EQ(spec->quantized.nbits, nbits);
  }
  absl::Status s = ParseError("quantized", Json(R"({"backend": "hqq", "nbits": 5})"));
  EXPECT_THAT(s.message(), HasSubstr("allowed: 1, 2, 3, 4, 8"));
  s = ParseError("quantized", Json(R"({"backend": "hqq", "axis_key": -1})"));
  EXPECT_THAT(s.message(), HasSubstr("cache_config.axis_key -1"));
  EXPECT_THAT(s.message(), HasSubstr("allowed: 0, 1"));
}

TEST(CacheSpecTest, Fp8RefusesEveryGroupWiseParameter) {
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse("quantized", Json(R"({"backend": "fp8"})"));
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->quantized.backend, QuantizationBackend::kFp8);
  for (const char* key : {"nbits", "axis_key", "axis_value", "q_group_size", "residual_length"}) {
    const std::string json = std::string(R"({"backend": "fp8", ")") + key + R"(": 0})";
    absl::Status s = ParseError("quantized", Json(json));
    EXPECT_THAT(s.message(), HasSubstr(std::string("cache_config.") + key)) << key;
    EXPECT_THAT(s.message(), HasSubstr("backend 'fp8'")) << key;
  }
}

TEST(CacheSpecTest, GroupSizeAndResidualLengthRanges) {
  EXPECT_THAT(ParseError("quantized", Json(R"({"q_group_size": 0})")).message(),
              HasSubstr("cache_config.q_group_size 0 is not allowed; allowed: an integer > 0"));
  EXPECT_THAT(ParseError("quantized", Json(R"({"residual_length": -1})")).message(),
              HasSubstr("cache_config.residual_length -1"));
  EXPECT_TRUE(CacheSpec::Parse("quantized", Json(R"({"residual_length": 0})")).ok());
}

TEST(CacheSpecTest, HugeNbitsIsNotNarrowedIntoRange) {
  QuantizationConfig config{.nbits = (int64_t{1} << 32) + 4};
  EXPECT_FALSE(CacheSpec::Parse("quantized", config).ok());
}

TEST(CacheSpecTest, CacheConfigOnlyWithQuantized) {
  absl::Status s = ParseError("static", Json(R"({"nbits": 4})"));
  EXPECT_THAT(s.message(), HasSubstr("only used with cache_implementation 'quantized'"));
  EXPECT_TRUE(CacheSpec::Parse("static", Json("{}")).ok());
}

TEST(CacheSpecTest, MaxCacheLenMustBePositive) {
  EXPECT_THAT(CacheSpec::Parse("static", {}, true, 0).status().message(),
              HasSubstr("max_cache_len 0"));
  EXPECT_EQ(*CacheSpec::Parse("static", {}, true, 16)->max_cache_len, 16);
}

TEST(QuantizationConfigJsonTest, ParsesEveryKey) {
  QuantizationConfig c = Json(
      R"({"backend": "hqq", "nbits": 3, "axis_key": 1, "axis_value": 0, "q_group_size": 32,
          "residual_length": 8})");
  EXPECT_EQ(c.backend, "hqq");
  EXPECT_EQ(c.nbits, 3);
  EXPECT_EQ(c.axis_key, 1);
  EXPECT_EQ(c.axis_value, 0);
  EXPECT_EQ(c.q_group_size, 32);
  EXPECT_EQ(c.residual_length, 8);
  EXPECT_TRUE(Json("{}").empty());
}

TEST(QuantizationConfigJsonTest, RefusesUnknownKeysWrongTypesAndBadJson) {
  EXPECT_THAT(ParseQuantizationConfigJson(R"({"bits": 4})").status().message(),
              HasSubstr("cache_config key 'bits' is not supported; allowed keys: backend, nbits"));
  EXPECT_THAT(ParseQuantizationConfigJson(R"({"nbits": "4"})").status().message(),
              HasSubstr("cache_config.nbits must be an integer"));
  EXPECT_THAT(ParseQuantizationConfigJson(R"({"nbits": 4.5})").status().message(),
              HasSubstr("cache_config.nbits must be an integer"));
  EXPECT_THAT(ParseQuantizationConfigJson(R"({"backend": 1})").status().message(),
              HasSubstr("cache_config.backend must be a string"));
  EXPECT_THAT(ParseQuantizationConfigJson("[1]").status().message(),
              HasSubstr("must be a JSON object"));
  EXPECT_THAT(ParseQuantizationConfigJson("{").status().message(), HasSubstr("not valid JSON"));
}

TEST(CacheSpecTest, AHugeNameIsQuotedShort) {
  const std::string name(10000, 'x');
  absl::StatusOr<CacheSpec> spec = CacheSpec::Parse(name);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(),
            std::string("cache_implementation '") + std::string(64, 'x') +
                "... (10000 bytes)' is not supported; allowed: dynamic, static, offloaded, "
                "offloaded_static, quantized (case-sensitive)");
  absl::StatusOr<CacheSpec> backend =
      CacheSpec::Parse("quantized", {.backend = std::string(500, 'b')});
  EXPECT_LT(backend.status().message().size(), 200u);
}

}  // namespace
}  // namespace kvserve::cache
