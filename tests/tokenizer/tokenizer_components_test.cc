// Tests for the tokenizer.json components: normalizers, pre-tokenizers (every Split behaviour,
// Metaspace, Digits, ByteLevel), decoders and added-token matching.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_added_tokens.h"
#include "tokenizer/tokenizer_decoder.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using Json = nlohmann::json;

std::string Normalize(const Json& config, std::string text) {
  auto n = CreateNormalizer(config, "normalizer");
  EXPECT_TRUE(n.ok()) << n.status();
  if (n.ok()) (*n)->Normalize(&text);
  return text;
}

std::vector<std::string> PreTokenize(const Json& config, const std::string& text,
                                     bool at_start = true) {
  auto p = CreatePreTokenizer(config, "pre_tokenizer");
  EXPECT_TRUE(p.ok()) << p.status();
  std::vector<std::string> pieces = {text};
  if (p.ok()) (*p)->PreTokenize(&pieces, at_start);
  return pieces;
}

std::string DecodeTokens(const Json& config, std::vector<std::string> tokens) {
  auto d = CreateTokenDecoder(config, "decoder", nullptr);
  EXPECT_TRUE(d.ok()) << d.status();
  if (d.ok()) (*d)->DecodeChain(&tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TEST(NormalizerTest, UnicodeFormsLowercaseStripPrependReplaceSequence) {
  EXPECT_EQ(Normalize({{"type", "NFC"}}, "cafe\xCC\x81"), "caf\xC3\xA9");
  EXPECT_EQ(Normalize({{"type", "NFD"}}, "caf\xC3\xA9"), "cafe\xCC\x81");
  EXPECT_EQ(Normalize({{"type", "NFKC"}}, "\xEF\xAC\x81 \xC2\xBD"),
            "fi 1\xE2\x81\x84"
            "2");
  EXPECT_EQ(Normalize({{"type", "Lowercase"}}, "HeLLo \xC3\x89"), "hello \xC3\xA9");
  EXPECT_EQ(Normalize({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, " \t x "),
            "x ");
  EXPECT_EQ(Normalize({{"type", "Prepend"}, {"prepend", "_"}}, "ab"), "_ab");
  EXPECT_EQ(Normalize({{"type", "Prepend"}, {"prepend", "_"}}, ""), "");
  EXPECT_EQ(Normalize({{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}},
                      "a   b  c"),
            "a b c");
  EXPECT_EQ(Normalize({{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "Lowercase"}},
                         {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "4"}}}}},
                      "AbA"),
            "4b4");
}

TEST(PreTokenizerTest, SplitBehaviours) {
  auto split = [](const char* behavior, bool invert = false) {
    return PreTokenize({{"type", "Split"},
                        {"pattern", {{"String", "-"}}},
                        {"behavior", behavior},
                        {"invert", invert}},
                       "a-b--c-");
  };
  EXPECT_THAT(split("Removed"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(split("Isolated"), ElementsAre("a", "-", "b", "-", "-", "c", "-"));
  EXPECT_THAT(split("MergedWithPrevious"), ElementsAre("a-", "b-", "-", "c-"));
  EXPECT_THAT(split("MergedWithNext"), ElementsAre("a", "-b", "-", "-c", "-"));
  EXPECT_THAT(split("Contiguous"), ElementsAre("a", "-", "b", "--", "c", "-"));
  // Inverted: the matches are kept and everything else is removed; "--" is two matches.
  EXPECT_THAT(split("Removed", /*invert=*/true), ElementsAre("-", "-", "-", "-"));
  EXPECT_THAT(PreTokenize({{"type", "Split"},
                           {"pattern", {{"Regex", "\\s+(?!\\S)|\\s+"}}},
                           {"behavior", "Isolated"}},
                          "a   b"),
              ElementsAre("a", "  ", " ", "b"));
}

TEST(PreTokenizerTest, MetaspaceDigitsWhitespaceAndByteLevel) {
  const std::string m = "\xE2\x96\x81";
  EXPECT_THAT(PreTokenize({{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "always"}},
                          "hi there"),
              ElementsAre(m + "hi", m + "there"));
  EXPECT_THAT(PreTokenize({{"type", "Metaspace"}, {"replacement", m}, {"prepend_scheme", "first"}},
                          "hi", /*at_start=*/false),
              ElementsAre("hi"));
  EXPECT_THAT(PreTokenize({{"type", "Metaspace"},
                           {"replacement", m},
                           {"prepend_scheme", "never"},
                           {"split", false}},
                          "a b"),
              ElementsAre("a" + m + "b"));
  EXPECT_THAT(PreTokenize({{"type", "Digits"}, {"individual_digits", true}}, "a123"),
              ElementsAre("a", "1", "2", "3"));
  EXPECT_THAT(PreTokenize({{"type", "Digits"}, {"individual_digits", false}}, "a123b"),
              ElementsAre("a", "123", "b"));
  EXPECT_THAT(PreTokenize({{"type", "Whitespace"}}, "hi, you"), ElementsAre("hi", ",", "you"));
  // GPT-2 regex, bytes mapped to printable characters (space -> Ġ).
  EXPECT_THAT(PreTokenize({{"type", "ByteLevel"}, {"add_prefix_space", false}}, "I'm  ok!"),
              ElementsAre("I", "'m", "\xC4\xA0", "\xC4\xA0ok", "!"));
  EXPECT_THAT(PreTokenize({{"type", "ByteLevel"}, {"add_prefix_space", true}}, "ok"),
              ElementsAre("\xC4\xA0ok"));
}

TEST(DecoderTest, EachDecoder) {
  const std::string m = "\xE2\x96\x81";
  EXPECT_EQ(
      DecodeTokens({{"type", "ByteLevel"}}, {"\xC4\xA0hi", "\xC3\xA2", "\xC4\xA4", "\xC2\xAC"}),
      " hi\xE2\x82\xAC");
  EXPECT_EQ(DecodeTokens({{"type", "Metaspace"}, {"replacement", m}}, {m + "a", m + "b"}), "a b");
  EXPECT_EQ(DecodeTokens({{"type", "ByteFallback"}}, {"<0xE2>", "<0x82>", "<0xAC>", "x"}),
            "\xE2\x82\xAC"
            "x");
  EXPECT_EQ(DecodeTokens({{"type", "Sequence"},
                          {"decoders",
                           {{{"type", "Fuse"}},
                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}}}},
                         {" a", "b "}),
            "ab");
  EXPECT_EQ(DecodeTokens({{"type", "Replace"}, {"pattern", {{"String", m}}}, {"content", " "}},
                         {m + "x"}),
            " x");
}

// Each component must refuse a mistyped field with InvalidArgument naming its JSON path.
template <typename Create>
void ExpectComponentError(Create create, const Json& config, const std::string& message) {
  auto built = create(config);
  ASSERT_FALSE(built.ok()) << "accepted: " << config.dump();
  EXPECT_EQ(built.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(built.status().message()), message);
}

TEST(NormalizerTest, MistypedFieldsNameTheirPath) {
  auto create = [](const Json& config) { return CreateNormalizer(config, "normalizer"); };
  ExpectComponentError(create, Json::array(), "normalizer: expected an object, got array");
  ExpectComponentError(create, {{"type", 7}}, "normalizer.type: expected a string, got integer");
  ExpectComponentError(create, {{"kind", "NFC"}}, "normalizer.type: missing, expected a string");
  ExpectComponentError(create, {{"type", "Strip"}, {"strip_left", "yes"}},
                       "normalizer.strip_left: expected a boolean, got string");
  ExpectComponentError(create, {{"type", "Prepend"}, {"prepend", nullptr}},
                       "normalizer.prepend: expected a string, got null");
  ExpectComponentError(create,
                       Json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, 3]})"),
                       "normalizer.normalizers[1]: expected an object, got integer");
  ExpectComponentError(create, {{"type", "Sequence"}},
                       "normalizer.normalizers: missing, expected an array");
  ExpectComponentError(create,
                       {{"type", "Replace"}, {"pattern", {{"String", ""}}}, {"content", " "}},
                       "normalizer.pattern.String: must not be empty");
  ExpectComponentError(create, {{"type", "Replace"}, {"pattern", {{"Regex", 1}}}, {"content", " "}},
                       "normalizer.pattern.Regex: expected a string, got integer");
  ExpectComponentError(create, {{"type", "Replace"}, {"pattern", "x"}, {"content", " "}},
                       "normalizer.pattern: expected an object, got string");
}

TEST(PreTokenizerTest, MistypedFieldsNameTheirPath) {
  auto create = [](const Json& config) { return CreatePreTokenizer(config, "pre_tokenizer"); };
  ExpectComponentError(create, {{"type", "ByteLevel"}, {"use_regex", 1}},
                       "pre_tokenizer.use_regex: expected a boolean, got integer");
  ExpectComponentError(create, {{"type", "Digits"}, {"individual_digits", nullptr}},
                       "pre_tokenizer.individual_digits: expected a boolean, got null");
  ExpectComponentError(create, {{"type", "Metaspace"}, {"prepend_scheme", 2}},
                       "pre_tokenizer.prepend_scheme: expected a string, got integer");
  ExpectComponentError(create, {{"type", "Metaspace"}, {"replacement", ""}},
                       "pre_tokenizer.replacement: must not be empty");
  ExpectComponentError(create, {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", 1}},
                       "pre_tokenizer.behavior: expected a string or null, got integer");
  ExpectComponentError(create, {{"type", "Split"}, {"pattern", {{"Regex", "(x"}}}},
                       "pre_tokenizer.pattern.Regex: regex '(x' does not compile: end pattern "
                       "with unmatched parenthesis");
  ExpectComponentError(create, Json::parse(R"({"type": "Sequence", "pretokenizers": [
                           {"type": "Split", "invert": "no"}]})"),
                       "pre_tokenizer.pretokenizers[0].invert: expected a boolean, got string");
}

TEST(DecoderTest, MistypedFieldsNameTheirPath) {
  auto create = [](const Json& config) { return CreateTokenDecoder(config, "decoder", nullptr); };
  ExpectComponentError(create, {{"type", "Strip"}, {"content", " "}, {"start", "1"}},
                       "decoder.start: expected an integer, got string");
  ExpectComponentError(create, {{"type", "Strip"}, {"content", " "}, {"stop", -1}},
                       "decoder.stop: must be in [0, 2147483647] (got -1)");
  ExpectComponentError(create, {{"type", "Strip"}, {"content", " "}, {"stop", 1.5}},
                       "decoder.stop: expected an integer, got number");
  // An empty replacement would make the decoder loop forever.
  ExpectComponentError(create, {{"type", "Metaspace"}, {"replacement", ""}},
                       "decoder.replacement: must not be empty");
  ExpectComponentError(create, {{"type", "Metaspace"}, {"add_prefix_space", "true"}},
                       "decoder.add_prefix_space: expected a boolean, got string");
  ExpectComponentError(create, Json::parse(R"({"type": "Sequence", "decoders": {"type": "Fuse"}})"),
                       "decoder.decoders: expected an array, got object");
  ExpectComponentError(create,
                       Json::parse(R"({"type": "Sequence", "decoders": [{"type": "CTC"}]})"),
                       "decoder.decoders[0].type: unsupported decoder type 'CTC'");
}

TEST(AddedTokensTest, LeftmostLongestWithStripAndSingleWord) {
  AddedToken ab{.id = 1, .content = "<ab>"};
  AddedToken abc{.id = 2, .content = "<ab>c"};
  AddedToken l{.id = 3, .content = "[L]", .lstrip = true};
  AddedToken r{.id = 4, .content = "[R]", .rstrip = true};
  AddedToken w{.id = 5, .content = "cat", .single_word = true};
  AddedTokenMatcher matcher({ab, abc, l, r, w});
  auto describe = [&](const std::string& text) {
    std::vector<std::string> out;
    for (const TextSection& s : matcher.Split(text)) {
      out.push_back(s.added_id >= 0 ? absl::StrCat("#", s.added_id) : std::string(s.text));
    }
    return out;
  };
  EXPECT_THAT(describe("x<ab>cy<ab>"), ElementsAre("x", "#2", "y", "#1"));
  EXPECT_THAT(describe("a  [L]  b"), ElementsAre("a", "#3", "  b"));
  EXPECT_THAT(describe("a  [R]  b"), ElementsAre("a  ", "#4", "b"));
  EXPECT_THAT(describe("cat concat cats cat"), ElementsAre("#5", " concat cats ", "#5"));
}

TEST(UnicodeUtilsTest, LossyConversionAndValidation) {
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));  // a surrogate
  EXPECT_EQ(Utf8Lossy("a\xE2\x82"
                      "b"),
            "a\xEF\xBF\xBD"
            "b");  // one U+FFFD per maximal subpart
  EXPECT_EQ(Utf8Lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace kvserve::tokenizer
