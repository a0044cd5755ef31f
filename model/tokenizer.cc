// A Hugging Face tokenizer.json tokenizer plus tokenizer_config.json's special tokens and chat
// template.
#include "model/tokenizer.h"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/bpe_model.h"
#include "model/normalizer.h"
#include "model/pretokenizer.h"
#include "model/tokenizer_added_tokens.h"
#include "model/tokenizer_decoder.h"
#include "model/unicode_utils.h"

namespace kvserve::model {
namespace {

using Json = nlohmann::json;

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), " is not valid JSON"));
  }
  if (!json.is_object())
    return absl::InvalidArgumentError(absl::StrCat(AsAbsl(what), " is not an object"));
  return json;
}

// tokenizer_config.json names tokens either as a string or as {"content": ...}.
std::string TokenContent(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object()) {
    auto it = value.find("content");
    if (it != value.end() && it->is_string()) return it->get<std::string>();
  }
  return std::string();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view tokenizer_config_json) {
  auto tokenizer = std::unique_ptr<Tokenizer>(new Tokenizer());
  if (absl::Status s = tokenizer->LoadTokenizerJson(tokenizer_json); !s.ok()) return s;
  if (absl::Status s = tokenizer->LoadConfigJson(tokenizer_config_json); !s.ok()) return s;
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir) {
  auto tokenizer_json = ReadFile(dir + "/tokenizer.json");
  if (!tokenizer_json.ok()) return tokenizer_json.status();
  std::string config_json;
  if (std::ifstream(dir + "/tokenizer_config.json").good()) {
    auto config = ReadFile(dir + "/tokenizer_config.json");
    if (!config.ok()) return config.status();
    config_json = *std::move(config);
  }
  auto tokenizer = FromJson(*tokenizer_json, config_json);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(dir, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::Status Tokenizer::LoadTokenizerJson(std::string_view text) {
  auto parsed = ParseJson(text, "tokenizer.json");
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;

  auto model_it = json.find("model");
  if (model_it == json.end()) return absl::InvalidArgumentError("tokenizer.json has no 'model'");
  auto model = BpeModel::FromJson(*model_it);
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
  vocab_size_ = model_->size();

  std::vector<AddedToken> raw, normalized;
  if (auto it = json.find("added_tokens"); it != json.end() && !it->is_null()) {
    if (!it->is_array()) return absl::InvalidArgumentError("'added_tokens' is not an array");
    for (const Json& entry : *it) {
      AddedToken token;
      if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() ||
          !entry.contains("content") || !entry["content"].is_string()) {
        return absl::InvalidArgumentError("an added token needs an integer 'id' and a 'content'");
      }
      token.id = entry["id"].get<int32_t>();
      token.content = entry["content"].get<std::string>();
      token.special = entry.value("special", false);
      token.lstrip = entry.value("lstrip", false);
      token.rstrip = entry.value("rstrip", false);
      token.single_word = entry.value("single_word", false);
      token.normalized = entry.value("normalized", !token.special);
      if (token.id < 0) return absl::InvalidArgumentError("an added token has a negative id");
      added_id_to_content_[token.id] = token.content;
      added_content_to_id_[token.content] = token.id;
      added_contents_.insert(token.content);
      if (token.special) special_ids_.insert(token.id);
      vocab_size_ = std::max(vocab_size_, token.id + 1);
      (token.normalized ? normalized : raw).push_back(std::move(token));
    }
  }

  if (auto it = json.find("normalizer"); it != json.end() && !it->is_null()) {
    auto normalizer = CreateNormalizer(*it);
    if (!normalizer.ok()) return normalizer.status();
    normalizer_ = *std::move(normalizer);
  }
  if (normalizer_ != nullptr) {
    for (AddedToken& token : normalized) normalizer_->Normalize(&token.content);
  }
  raw_added_ = std::make_unique<AddedTokenMatcher>(std::move(raw));
  normalized_added_ = std::make_unique<AddedTokenMatcher>(std::move(normalized));

  if (auto it = json.find("pre_tokenizer"); it != json.end() && !it->is_null()) {
    auto pre = CreatePreTokenizer(*it);
    if (!pre.ok()) return pre.status();
    pre_tokenizer_ = *std::move(pre);
  }
  if (auto it = json.find("decoder"); it != json.end() && !it->is_null()) {
    auto decoder = CreateTokenDecoder(*it, &added_contents_);
    if (!decoder.ok()) return decoder.status();
    decoder_ = *std::move(decoder);
  }
  if (auto it = json.find("post_processor"); it != json.end() && !it->is_null()) {
    if (absl::Status s = LoadPostProcessor(*it); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadPostProcessor(const nlohmann::json& config) {
  if (!config.is_object()) return absl::InvalidArgumentError("post_processor must be an object");
  const std::string type = config.value("type", "");
  if (type == "ByteLevel") return absl::OkStatus();  // only changes offsets
  if (type == "Sequence") {
    auto it = config.find("processors");
    if (it == config.end() || !it->is_array()) {
      return absl::InvalidArgumentError("Sequence post_processor needs a 'processors' array");
    }
    for (const Json& step : *it) {
      if (absl::Status s = LoadPostProcessor(step); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto cls = config.find("cls");
    auto sep = config.find("sep");
    if (cls == config.end() || sep == config.end() || !cls->is_array() || cls->size() != 2 ||
        !sep->is_array() || sep->size() != 2 || !(*cls)[1].is_number_integer() ||
        !(*sep)[1].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(type, " needs 'cls' and 'sep' pairs"));
    }
    prefix_ids_.push_back((*cls)[1].get<int32_t>());
    suffix_ids_.insert(suffix_ids_.begin(), (*sep)[1].get<int32_t>());
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return absl::InvalidArgumentError(absl::StrCat("unsupported post_processor type '", type, "'"));
  }
  auto single = config.find("single");
  if (single == config.end() || !single->is_array()) {
    return absl::InvalidArgumentError("TemplateProcessing needs a 'single' array");
  }
  const Json special_tokens = config.value("special_tokens", Json::object());
  bool seen_sequence = false;
  std::vector<int32_t> prefix, suffix;
  for (const Json& item : *single) {
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id")) {
      return absl::InvalidArgumentError(
          "TemplateProcessing item is neither Sequence nor SpecialToken");
    }
    const std::string name = item["SpecialToken"]["id"].get<std::string>();
    auto entry = special_tokens.find(name);
    if (entry == special_tokens.end() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TemplateProcessing special token '", name, "' has no ids"));
    }
    for (const Json& id : (*entry)["ids"]) {
      (seen_sequence ? suffix : prefix).push_back(id.get<int32_t>());
    }
  }
  prefix_ids_.insert(prefix_ids_.end(), prefix.begin(), prefix.end());
  suffix_ids_.insert(suffix_ids_.begin(), suffix.begin(), suffix.end());
  return absl::OkStatus();
}

absl::Status Tokenizer::LoadConfigJson(std::string_view text) {
  Json config = Json::object();
  if (!text.empty()) {
    auto parsed = ParseJson(text, "tokenizer_config.json");
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  if (auto it = config.find("bos_token"); it != config.end()) bos_token_ = TokenContent(*it);
  if (auto it = config.find("eos_token"); it != config.end()) eos_token_ = TokenContent(*it);
  if (!bos_token_.empty()) {
    bos_token_id_ = TokenToId(bos_token_);
  } else if (!prefix_ids_.empty()) {
    bos_token_id_ = prefix_ids_.front();
    if (auto token = IdToToken(prefix_ids_.front())) bos_token_ = *token;
  }
  if (!eos_token_.empty()) {
    if (auto id = TokenToId(eos_token_)) eos_token_ids_.push_back(*id);
  }
  clean_up_tokenization_spaces_ = config.value("clean_up_tokenization_spaces", true);

  std::string source;
  if (auto it = config.find("chat_template"); it != config.end()) {
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: use "default", else the first
      for (const Json& named : *it) {
        if (!named.is_object() || !named.contains("template")) continue;
        if (source.empty() || named.value("name", "") == "default") {
          source = named["template"].get<std::string>();
        }
      }
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
  if (chat_template_ == nullptr) return chat_template_status_;
  return chat_template_->Render(messages, add_generation_prompt, bos_token_, eos_token_, budget);
}

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplateJson(const nlohmann::json& messages,
                                                             bool add_generation_prompt,
                                                             const RenderBudget& budget) const {
  if (chat_template_ == nullptr) return chat_template_status_;
  Json context = Json::object();
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  return chat_template_->RenderWithContext(context, budget);
}

}  // namespace kvserve::model
