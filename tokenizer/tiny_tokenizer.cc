// A small GPT-2-style byte-level BPE tokenizer for the tiny models that tests and the demo
// generate.
#include "tokenizer/tiny_tokenizer.h"

#include <nlohmann/json.hpp>

#include <utility>

#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

// Common English pairs, in merge order; "Ġ" is the byte-level space. Each merge's parts exist
// by the time it is listed.
constexpr const char* kMerges[] = {
    "Ġ t",    "h e",    "Ġ a",   "i n",  "Ġt he", "e r",    "Ġ o",   "Ġ s",    "o n",     "r e",
    "Ġ w",    "a t",    "e n",   "Ġ c",  "i s",   "o r",    "in g",  "Ġ b",    "Ġ f",     "Ġ p",
    "e d",    "a n",    "Ġ m",   "Ġ i",  "l l",   "Ġ d",    "o u",   "Ġ h",    "e s",     "Ġo f",
    "Ġa n",   "Ġan d",  "Ġ l",   "i t",  "a r",   "Ġt o",   "Ġ n",   "Ġ e",    "Ġi n",    "Ġ H",
    "l o",    "Ġ y",    "Ġy ou", "H e",  "He ll", "Hell o", "Ġw or", "Ġwor l", "Ġworl d", "Ġi s",
    "Ġ T",    "ĠT he",  "Ġ g",   "Ġw h", "Ġ r",   "l e",    "a l",   "Ġb e",   "Ġ u",     "Ġ I",
    "Ġth at", "Ġw ith", "a s",   "i c",
};

}  // namespace

std::string MakeTinyTokenizerJson(int32_t vocab_size_hint) {
  using Json = nlohmann::ordered_json;
  const auto& bytes = GetByteLevelTables().byte_to_utf8;
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[bytes[b]] = b;
  Json merges = Json::array();
  int32_t next_id = kTinyEosId + 1;
  for (const char* merge : kMerges) {
    if (next_id >= vocab_size_hint) break;
    std::string m(merge);
    const size_t space = m.find(' ');
    const std::string merged = m.substr(0, space) + m.substr(space + 1);
    if (vocab.contains(merged)) continue;
    if (!vocab.contains(m.substr(0, space)) || !vocab.contains(m.substr(space + 1))) continue;
    vocab[merged] = next_id++;
    merges.push_back(m);
  }
  auto added = [](int32_t id, const char* content) {
    return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  Json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", Json::array({added(kTinyBosId, "<s>"), added(kTinyEosId, "</s>")})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({Json{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({Json{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              Json{{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                              Json{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{"<s>",
           {{"id", "<s>"},
            {"ids", Json::array({kTinyBosId})},
            {"tokens", Json::array({"<s>"})}}}}}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", std::move(vocab)},
        {"merges", std::move(merges)}}},
  };
  return tokenizer.dump(2);
}

std::string MakeTinyTokenizerConfigJson() {
  nlohmann::ordered_json config = {
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", 2048},
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"chat_template",
       "{{ bos_token }}{% for message in messages %}"
       "{{ '<|' + message['role'] + '|>\\n\\n' + message['content'] | trim + eos_token }}"
       "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n\\n' }}{% endif %}"},
  };
  return config.dump(2);
}

}  // namespace kvserve::tokenizer
