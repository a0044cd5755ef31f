// A small GPT-2-style byte-level BPE tokenizer for the tiny models that tests and the demo
// generate.
#include "tokenizer/tiny_tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

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

// Whole words (each after a byte-level space) that fill the vocabulary's ids past the merges, so
// that every id a model of that vocabulary can sample decodes to text. No merge produces them,
// so encoding never does: they change what ids decode to, never how text encodes.
constexpr const char* kWords[] = {
    "time",    "people",  "year",     "way",     "day",      "man",        "thing",    "woman",
    "life",    "child",   "world",    "school",  "state",    "family",     "student",  "group",
    "country", "problem", "hand",     "part",    "place",    "case",       "week",     "company",
    "system",  "program", "question", "work",    "number",   "night",      "point",    "home",
    "water",   "room",    "mother",   "area",    "money",    "story",      "fact",     "month",
    "lot",     "right",   "study",    "book",    "eye",      "job",        "word",     "business",
    "issue",   "side",    "kind",     "head",    "house",    "service",    "friend",   "father",
    "power",   "hour",    "game",     "line",    "end",      "member",     "law",      "car",
    "city",    "name",    "team",     "minute",  "idea",     "kid",        "body",     "face",
    "others",  "level",   "office",   "door",    "health",   "person",     "art",      "war",
    "history", "party",   "result",   "change",  "morning",  "reason",     "research", "girl",
    "guy",     "moment",  "air",      "teacher", "force",    "river",      "garden",   "light",
    "music",   "letter",  "paper",    "say",     "get",      "make",       "go",       "know",
    "take",    "see",     "come",     "think",   "look",     "want",       "give",     "use",
    "find",    "tell",    "ask",      "seem",    "feel",     "try",        "leave",    "call",
    "keep",    "let",     "begin",    "help",    "talk",     "turn",       "start",    "show",
    "hear",    "play",    "run",      "move",    "like",     "live",       "believe",  "hold",
    "bring",   "happen",  "write",    "provide", "sit",      "stand",      "lose",     "pay",
    "meet",    "include", "continue", "learn",   "lead",     "understand", "watch",    "follow",
    "stop",    "create",  "speak",    "read",    "spend",    "grow",       "open",     "walk",
    "win",     "offer",   "remember", "love",    "consider", "appear",     "buy",      "wait",
    "serve",   "die",     "send",     "good",    "new",      "first",      "last",     "long",
    "great",   "little",  "own",      "other",   "old",      "big",        "high",     "different",
    "small",   "large",   "next",     "early",   "young",    "important",  "few",      "public",
    "bad",     "same",    "able",     "quiet",   "green",    "blue",       "red",      "warm",
    "cold",    "happy",   "simple",   "clear",   "strong",   "free",       "true",     "full",
    "and",     "but",     "or",       "so",      "then",     "when",       "where",    "because",
    "after",   "before",  "over",     "under",   "again",    "never",      "always",   "often",
    "here",    "there",   "now",      "very",    "just",     "also",       "well",     "only",
    "even",    "still",   "back",     "down",    "up",       "out",        "about",    "into",
    "from",    "for",     "by",       "they",    "we",       "he",         "she",      "it",
    "this",    "what",    "which",    "who",
};

// Consonants and vowels of the made-up words that fill what kWords leaves: "ba", "be", ...,
// then "baba", "babe", ..., then three syllables (at most 6 letters, far below the 16 bytes a
// token may hold without changing the request parser's text limit).
constexpr char kConsonants[] = "bdfgklmnprstvz";
constexpr char kVowels[] = "aeiou";

// The `index`-th made-up word: syllables counted in base (consonants x vowels).
std::string MadeUpWord(int64_t index) {
  constexpr int64_t kSyllables = (sizeof(kConsonants) - 1) * (sizeof(kVowels) - 1);
  int64_t count = kSyllables;
  int syllables = 1;
  while (index >= count) {
    index -= count;
    count *= kSyllables;
    ++syllables;
  }
  std::string word;
  for (int i = 0; i < syllables; ++i) {
    const int64_t syllable = index % kSyllables;
    index /= kSyllables;
    word.insert(word.begin(), {kConsonants[syllable / (sizeof(kVowels) - 1)],
                               kVowels[syllable % (sizeof(kVowels) - 1)]});
  }
  return word;
}

}  // namespace

namespace {

// The special tokens of one flavour: bos and eos at kTinyBosId/kTinyEosId, then `extra` at
// the ids given, after every word.
struct SpecialTokens {
  const char* bos;
  const char* eos;
  std::vector<std::pair<int32_t, std::string>> extra;
};

std::string MakeTokenizerJson(int32_t vocab_size_hint, const SpecialTokens& special);

}  // namespace

std::string MakeTinyTokenizerJson(int32_t vocab_size_hint) {
  return MakeTokenizerJson(vocab_size_hint, {"<s>", "</s>", {}});
}

std::string MakeTinyGemmaTokenizerJson(int32_t vocab_size) {
  return MakeTokenizerJson(vocab_size - 2,
                           {"<bos>",
                            "<eos>",
                            {{TinyGemmaStartOfTurnId(vocab_size), "<start_of_turn>"},
                             {TinyGemmaEndOfTurnId(vocab_size), "<end_of_turn>"}}});
}

namespace {

std::string MakeTokenizerJson(int32_t vocab_size_hint, const SpecialTokens& special) {
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
  // An ordered object looks keys up one by one, too slow for 32,000 words: `taken` knows the
  // tokens, and the words are appended without a look-up.
  std::unordered_set<std::string> taken;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) taken.insert(it.key());
  Json::object_t& entries = vocab.get_ref<Json::object_t&>();
  const std::string space = bytes[' '];
  const auto add_word = [&](const std::string& word) {
    if (taken.insert(space + word).second) entries.emplace_back(space + word, next_id++);
  };
  for (const char* word : kWords) {
    if (next_id >= vocab_size_hint) break;
    add_word(word);
  }
  for (int64_t i = 0; next_id < vocab_size_hint; ++i) add_word(MadeUpWord(i));
  auto added = [](int32_t id, const std::string& content) {
    return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  Json added_tokens = Json::array({added(kTinyBosId, special.bos), added(kTinyEosId, special.eos)});
  for (const auto& [id, content] : special.extra) added_tokens.push_back(added(id, content));
  const std::string bos = special.bos;
  Json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({Json{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({Json{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                              Json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              Json{{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                              Json{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{bos,
           {{"id", bos}, {"ids", Json::array({kTinyBosId})}, {"tokens", Json::array({bos})}}}}}}},
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

}  // namespace

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

std::string MakeTinyGemmaTokenizerConfigJson() {
  nlohmann::ordered_json config = {
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"bos_token", "<bos>"},
      {"eos_token", "<eos>"},
      {"clean_up_tokenization_spaces", false},
      {"model_max_length", 4096},
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"chat_template",
       "{{ bos_token }}"
       "{%- if messages[0]['role'] == 'system' -%}"
       "{%- set first_prefix = messages[0]['content'] | trim + '\\n\\n' -%}"
       "{%- set turns = messages[1:] -%}"
       "{%- else -%}"
       "{%- set first_prefix = '' -%}"
       "{%- set turns = messages -%}"
       "{%- endif -%}"
       "{%- for message in turns -%}"
       "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
       "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') "
       "}}"
       "{%- endif -%}"
       "{%- if message['role'] == 'assistant' -%}{%- set role = 'model' -%}"
       "{%- else -%}{%- set role = message['role'] -%}{%- endif -%}"
       "{{ '<start_of_turn>' + role + '\\n' + (first_prefix if loop.first else '') + "
       "message['content'] | trim + '<end_of_turn>\\n' }}"
       "{%- endfor -%}"
       "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"},
  };
  return config.dump(2);
}

}  // namespace kvserve::tokenizer
