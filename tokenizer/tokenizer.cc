// A Hugging Face tokenizer.json tokenizer plus tokenizer_config.json's special tokens and chat
// template.
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/model_source.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_added_tokens.h"
#include "tokenizer/tokenizer_decoder.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();
constexpr std::string_view kTokenizerJson = "tokenizer.json";
constexpr std::string_view kTokenizerConfigJson = "tokenizer_config.json";

// `text` as a JSON object; errors do not name the file (the caller adds it).
absl::StatusOr<Json> ParseJsonObject(std::string_view text) {
  if (absl::Status s = CheckJsonDepth(text, kMaxJsonDepth); !s.ok()) return s;
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!json.is_object()) return JsonTypeError("the top level", "an object", json);
  return json;
}

// tokenizer_config.json names tokens as a string, as {"content": ...} or as null (none).
absl::StatusOr<std::string> TokenContent(const Json& config, std::string_view key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return GetString(*it, "content", key);
  return JsonTypeError(key, "a string, an object with a string 'content', or null", *it);
}

// A token id of tokenizer.json at `path`: an integer in [0, 2^31).
absl::StatusOr<int32_t> TokenId(const Json& value, std::string_view path) {
  absl::StatusOr<int64_t> id = JsonToInt(value, path, 0, kMaxTokenId);
  if (!id.ok()) return id.status();
  return static_cast<int32_t>(*id);
}

// One entry of tokenizer.json's added_tokens, the value at `path`.
absl::StatusOr<AddedToken> ParseAddedToken(const Json& entry, std::string_view path) {
  if (absl::Status s = ExpectJsonObject(entry, path); !s.ok()) return s;
  AddedToken token;
  auto id_it = entry.find("id");
  if (id_it == entry.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(JsonMemberPath(path, "id"), ": missing, expected an integer"));
  }
  absl::StatusOr<int32_t> id = TokenId(*id_it, JsonMemberPath(path, "id"));
  if (!id.ok()) return id.status();
  token.id = *id;
  absl::StatusOr<std::string> content = GetString(entry, "content", path);
  if (!content.ok()) return content.status();
  token.content = *std::move(content);
  for (auto [key, field] :
       {std::pair{"special", &token.special}, std::pair{"lstrip", &token.lstrip},
        std::pair{"rstrip", &token.rstrip}, std::pair{"single_word", &token.single_word}}) {
    absl::StatusOr<bool> value = GetBool(entry, key, path, false);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  absl::StatusOr<bool> normalized = GetBool(entry, "normalized", path, !token.special);
  if (!normalized.ok()) return normalized.status();
  token.normalized = *normalized;
  return token;
}

// `status` with "<file>: " in front of its message.
absl::Status InFile(std::string_view file, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(AsAbsl(file), ": ", status.message()));
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  return FromNamedJson(tokenizer_json, kTokenizerJson, tokenizer_config_json, kTokenizerConfigJson);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromNamedJson(
    std::string_view tokenizer_json, std::string_view tokenizer_json_name,
    std::string_view tokenizer_config_json, std::string_view tokenizer_config_json_name) {
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer());
  // The loaders check every type they read; the catches are the safety net that keeps a
  // missed check from ending the process.
  try {
    absl::Status s = tokenizer->LoadTokenizerJson(tokenizer_json);
    if (!s.ok()) return InFile(tokenizer_json_name, s);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(tokenizer_json_name), ": unexpected value: ", e.what()));
  }
  try {
    absl::Status s = tokenizer->LoadConfigJson(tokenizer_config_json);
    if (!s.ok()) return InFile(tokenizer_config_json_name, s);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(AsAbsl(tokenizer_config_json_name), ": unexpected value: ", e.what()));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelSource(
    const base::ModelSource& source) {
  absl::StatusOr<std::string> tokenizer_json = source.ReadText(kTokenizerJson);
  if (!tokenizer_json.ok()) return tokenizer_json.status();
  std::string config_json;
  if (source.Has(kTokenizerConfigJson)) {
    absl::StatusOr<std::string> config = source.ReadText(kTokenizerConfigJson);
    if (!config.ok()) return config.status();
    config_json = *std::move(config);
  }
  const std::string folder = source.Describe();
  return FromNamedJson(*tokenizer_json, absl::StrCat(folder, "/", AsAbsl(kTokenizerJson)),
                       config_json, absl::StrCat(folder, "/", AsAbsl(kTokenizerConfigJson)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  absl::StatusOr<base::ModelSource> source = base::ModelSource::FromDirectory(dir);
  if (!source.ok()) return source.status();
  return FromModelSource(*source);
}

absl::Status Tokenizer::CheckFitsModel(int64_t model_vocab_size) const {
  if (vocab_size_ <= model_vocab_size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("tokenizer.json: token ids go up to ", vocab_size_ - 1, " (vocab size ",
                   vocab_size_, "), beyond config.json's vocab_size ", model_vocab_size));
}

absl::Status Tokenizer::LoadTokenizerJson(std::string_view text) {
  auto parsed = ParseJsonObject(text);
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;

  auto model_config = GetObject(json, "model", "");
  if (!model_config.ok()) return model_config.status();
  auto model = BpeModel::FromJson(**model_config, "model");
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
  vocab_size_ = model_->size();

  std::vector<AddedToken> raw, normalized;
  if (auto it = json.find("added_tokens"); it != json.end() && !it->is_null()) {
    if (!it->is_array()) return JsonTypeError("added_tokens", "an array or null", *it);
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& entry = (*it)[i];
      const std::string path = JsonElementPath("added_tokens", i);
      absl::StatusOr<AddedToken> token = ParseAddedToken(entry, path);
      if (!token.ok()) return token.status();
      added_id_to_content_[token->id] = token->content;
      added_content_to_id_[token->content] = token->id;
      added_contents_.insert(token->content);
      if (token->special) special_ids_.insert(token->id);
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{token->id} + 1);
      (token->normalized ? normalized : raw).push_back(*std::move(token));
    }
  }

  if (auto it = json.find("normalizer"); it != json.end() && !it->is_null()) {
    auto normalizer = CreateNormalizer(*it, "normalizer");
    if (!normalizer.ok()) return normalizer.status();
    normalizer_ = *std::move(normalizer);
  }
  if (normalizer_ != nullptr) {
    for (AddedToken& token : normalized) normalizer_->Normalize(&token.content);
  }
  raw_added_ = std::make_unique<AddedTokenMatcher>(std::move(raw));
  normalized_added_ = std::make_unique<AddedTokenMatcher>(std::move(normalized));

  if (auto it = json.find("pre_tokenizer"); it != json.end() && !it->is_null()) {
    auto pre = CreatePreTokenizer(*it, "pre_tokenizer");
    if (!pre.ok()) return pre.status();
    pre_tokenizer_ = *std::move(pre);
  }
  if (auto it = json.find("decoder"); it != json.end() && !it->is_null()) {
    auto decoder = CreateTokenDecoder(*it, "decoder", &added_contents_);
    if (!decoder.ok()) return decoder.status();
    decoder_ = *std::move(decoder);
  }
  if (auto it = json.find("post_processor"); it != json.end() && !it->is_null()) {
    if (absl::Status s = LoadPostProcessor(*it, "post_processor"); !s.ok()) return s;
  }
  for (const std::vector<int32_t>* ids : {&prefix_ids_, &suffix_ids_}) {
    for (int32_t id : *ids) vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{id} + 1);
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadPostProcessor(const nlohmann::json& config, std::string_view path) {
  if (absl::Status s = ExpectJsonObject(config, path); !s.ok()) return s;
  auto type = GetString(config, "type", path);
  if (!type.ok()) return type.status();
  if (*type == "ByteLevel") return absl::OkStatus();  // only changes offsets
  if (*type == "Sequence") {
    auto processors = GetArray(config, "processors", path);
    if (!processors.ok()) return processors.status();
    const std::string steps_path = JsonMemberPath(path, "processors");
    for (size_t i = 0; i < (*processors)->size(); ++i) {
      absl::Status s = LoadPostProcessor((**processors)[i], JsonElementPath(steps_path, i));
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (*type == "BertProcessing" || *type == "RobertaProcessing") {
    // cls and sep are ["<token>", id] pairs.
    int32_t ids[2];
    for (int i = 0; i < 2; ++i) {
      const char* key = i == 0 ? "cls" : "sep";
      const std::string pair_path = JsonMemberPath(path, key);
      auto pair = GetArray(config, key, path);
      if (!pair.ok()) return pair.status();
      if ((*pair)->size() != 2 || !(**pair)[0].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(pair_path, ": expected a [\"<token>\", <id>] pair"));
      }
      absl::StatusOr<int32_t> id = TokenId((**pair)[1], JsonElementPath(pair_path, 1));
      if (!id.ok()) return id.status();
      ids[i] = *id;
    }
    prefix_ids_.push_back(ids[0]);
    suffix_ids_.insert(suffix_ids_.begin(), ids[1]);
    return absl::OkStatus();
  }
  if (*type != "TemplateProcessing") {
    return absl::InvalidArgumentError(absl::StrCat(
        JsonMemberPath(path, "type"), ": unsupported post_processor type '", *type, "'"));
  }
  auto single = GetArray(config, "single", path);
  if (!single.ok()) return single.status();
  const std::string single_path = JsonMemberPath(path, "single");
  const std::string special_path = JsonMemberPath(path, "special_tokens");
  const Json empty = Json::object();
  const Json* special_tokens = &empty;
  if (auto it = config.find("special_tokens"); it != config.end() && !it->is_null()) {
    if (!it->is_object()) return JsonTypeError(special_path, "an object", *it);
    special_tokens = &*it;
  }
  bool seen_sequence = false;
  std::vector<int32_t> prefix, suffix;
  for (size_t i = 0; i < (*single)->size(); ++i) {
    const Json& item = (**single)[i];
    const std::string item_path = JsonElementPath(single_path, i);
    if (absl::Status s = ExpectJsonObject(item, item_path); !s.ok()) return s;
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    auto special = GetObject(item, "SpecialToken", item_path);
    if (!special.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(item_path, ": expected a Sequence or SpecialToken item"));
    }
    auto name = GetString(**special, "id", JsonMemberPath(item_path, "SpecialToken"));
    if (!name.ok()) return name.status();
    // Special token names are arbitrary strings; quoted in paths.
    const std::string entry_path = absl::StrCat(special_path, "[", Json(*name).dump(), "]");
    auto entry = special_tokens->find(*name);
    if (entry == special_tokens->end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(entry_path, ": missing, but ", item_path, ".SpecialToken.id names it"));
    }
    if (absl::Status s = ExpectJsonObject(*entry, entry_path); !s.ok()) return s;
    auto listed = GetArray(*entry, "ids", entry_path);
    if (!listed.ok()) return listed.status();
    const std::string ids_path = JsonMemberPath(entry_path, "ids");
    for (size_t j = 0; j < (*listed)->size(); ++j) {
      absl::StatusOr<int32_t> id = TokenId((**listed)[j], JsonElementPath(ids_path, j));
      if (!id.ok()) return id.status();
      (seen_sequence ? suffix : prefix).push_back(*id);
    }
  }
  prefix_ids_.insert(prefix_ids_.end(), prefix.begin(), prefix.end());
  suffix_ids_.insert(suffix_ids_.begin(), suffix.begin(), suffix.end());
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadConfigJson(std::string_view text) {
  Json config = Json::object();
  if (!text.empty()) {
    auto parsed = ParseJsonObject(text);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  absl::StatusOr<std::string> bos = TokenContent(config, "bos_token");
  if (!bos.ok()) return bos.status();
  bos_token_ = *std::move(bos);
  absl::StatusOr<std::string> eos = TokenContent(config, "eos_token");
  if (!eos.ok()) return eos.status();
  eos_token_ = *std::move(eos);
  if (!bos_token_.empty()) {
    bos_token_id_ = TokenToId(bos_token_);
  } else if (!prefix_ids_.empty()) {
    bos_token_id_ = prefix_ids_.front();
    if (auto token = IdToToken(prefix_ids_.front())) bos_token_ = *token;
  }
  if (!eos_token_.empty()) {
    if (auto id = TokenToId(eos_token_)) eos_token_ids_.push_back(*id);
  }
  clean_up_tokenization_spaces_ = true;
  if (auto it = config.find("clean_up_tokenization_spaces"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return JsonTypeError("clean_up_tokenization_spaces", "a boolean or null", *it);
    }
    clean_up_tokenization_spaces_ = it->get<bool>();
  }

  std::string source;
  if (auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: use "default", else the first
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string path = JsonElementPath("chat_template", i);
        const Json& named = (*it)[i];
        if (absl::Status s = ExpectJsonObject(named, path); !s.ok()) return s;
        absl::StatusOr<std::string> name = GetString(named, "name", path);
        if (!name.ok()) return name.status();
        absl::StatusOr<std::string> named_source = GetString(named, "template", path);
        if (!named_source.ok()) return named_source.status();
        if (i == 0 || *name == "default") source = *std::move(named_source);
      }
    } else {
      return JsonTypeError("chat_template",
                           "a string, an array of {\"name\", \"template\"} objects, or null", *it);
    }
  }
  if (source.empty()) {
    chat_template_status_ = absl::FailedPreconditionError("the tokenizer has no chat_template");
    return absl::OkStatus();
  }
  auto parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    chat_template_status_ = absl::Status(
        parsed.status().code(), absl::StrCat("tokenizer_config.json: ", parsed.status().message()));
  } else {
    chat_template_ = *std::move(parsed);
  }
  // Chat models end assistant turns with an end-of-turn token that generation must stop at
  // even when the config's eos_token is the end-of-text token.
  for (const char* end_of_turn : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>"}) {
    if (source.find(end_of_turn) == std::string::npos) continue;
    if (auto id = TokenToId(end_of_turn);
        id &&
        std::find(eos_token_ids_.begin(), eos_token_ids_.end(), *id) == eos_token_ids_.end()) {
      eos_token_ids_.push_back(*id);
    }
  }
  return absl::OkStatus();
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (auto it = added_id_to_content_.find(id); it != added_id_to_content_.end()) return it->second;
  if (const std::string* token = model_->IdToToken(id)) return *token;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_content_to_id_.find(AsAbsl(token)); it != added_content_to_id_.end()) {
    return it->second;
  }
  return model_->TokenToId(token);
}

void Tokenizer::EncodeSection(std::string_view text, bool at_input_start,
                              std::vector<int32_t>* ids) const {
  std::string normalized(text);
  if (normalizer_ != nullptr) normalizer_->Normalize(&normalized);
  if (normalized.empty()) return;
  std::vector<TextSection> sections;
  if (normalized_added_->empty()) {
    sections.push_back({normalized, -1, 0});
  } else {
    sections = normalized_added_->Split(normalized);
  }
  std::vector<std::string> pieces;
  for (const TextSection& section : sections) {
    if (section.added_id >= 0) {
      ids->push_back(section.added_id);
      continue;
    }
    pieces.assign(1, std::string(section.text));
    if (pre_tokenizer_ != nullptr) {
      pre_tokenizer_->PreTokenize(&pieces, at_input_start && section.offset == 0);
    }
    for (const std::string& piece : pieces) model_->Encode(piece, ids);
  }
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                       bool add_special_tokens) const {
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError("text to encode is not valid UTF-8");
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), prefix_ids_.begin(), prefix_ids_.end());
  if (raw_added_->empty()) {
    EncodeSection(text, true, &ids);
  } else {
    for (const TextSection& section : raw_added_->Split(text)) {
      if (section.added_id >= 0) {
        ids.push_back(section.added_id);
      } else {
        EncodeSection(section.text, section.offset == 0, &ids);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), suffix_ids_.begin(), suffix_ids_.end());
  return ids;
}

bool Tokenizer::DecodesToNothing(int32_t id, bool skip_special_tokens) const {
  if (skip_special_tokens && special_ids_.contains(id)) return true;
  return !added_id_to_content_.contains(id) && model_->IdToToken(id) == nullptr;
}

std::string Tokenizer::DecodeWithoutCleanup(absl::Span<const int32_t> ids,
                                            bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && special_ids_.contains(id)) continue;
    if (auto it = added_id_to_content_.find(id); it != added_id_to_content_.end()) {
      tokens.push_back(it->second);
    } else if (const std::string* token = model_->IdToToken(id)) {
      tokens.push_back(*token);
    }
  }
  if (decoder_ == nullptr) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) joined.push_back(' ');
      joined.append(tokens[i]);
    }
    return joined;
  }
  decoder_->DecodeChain(&tokens);
  std::string text;
  for (const std::string& t : tokens) text.append(t);
  return text;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::string text = DecodeWithoutCleanup(ids, skip_special_tokens);
  return clean_up_tokenization_spaces_ ? CleanUpTokenization(text) : text;
}

std::string Tokenizer::CleanUpTokenization(std::string_view text) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string out(text);
  for (const auto& [from, to] : kRules) {
    if (out.find(from) == std::string::npos) continue;
    std::string replaced;
    replaced.reserve(out.size());
    size_t pos = 0;
    for (size_t found = out.find(from); found != std::string::npos; found = out.find(from, pos)) {
      replaced.append(out, pos, found - pos);
      replaced.append(to);
      pos = found + from.size();
    }
    replaced.append(out, pos, std::string::npos);
    out = std::move(replaced);
  }
  return out;
}

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                                         bool add_generation_prompt,
                                                         const RenderBudget& budget) const {
  return ApplyChatTemplate(messages, add_generation_prompt, budget, "");
}

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplate(
    const std::vector<ChatMessage>& messages, bool add_generation_prompt,
    const RenderBudget& budget, std::string_view template_kwargs_json) const {
  if (chat_template_ == nullptr) return chat_template_status_;
  return chat_template_->Render(messages, add_generation_prompt, bos_token_, eos_token_,
                                template_kwargs_json, budget);
}

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplateJson(
    const nlohmann::ordered_json& messages, bool add_generation_prompt, const RenderBudget& budget,
    std::string_view template_kwargs_json) const {
  if (chat_template_ == nullptr) return chat_template_status_;
  return chat_template_->RenderJson(messages, add_generation_prompt, bos_token_, eos_token_,
                                    template_kwargs_json, budget);
}

}  // namespace kvserve::tokenizer
