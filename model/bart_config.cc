// Parses and writes Hugging Face config.json of model_type "bart" (see bart_config.h).
#include "model/bart_config.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/config_json.h"

namespace kvserve::model {
namespace {

using config_json::Json;
using config_json::ReadBool;
using config_json::ReadInt;

// A token id field: absent keeps the default, null clears it, else an id below vocab_size.
absl::Status BartReadTokenId(const Json& json, const char* key, int64_t vocab_size,
                             std::optional<int32_t>* out) {
  auto it = json.find(key);
  if (it == json.end()) return absl::OkStatus();
  if (it->is_null()) {
    out->reset();
    return absl::OkStatus();
  }
  int64_t id = 0;
  if (absl::Status s = ReadInt(json, key, 0, vocab_size - 1, &id); !s.ok()) return s;
  *out = static_cast<int32_t>(id);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BartConfig> BartConfig::Parse(std::string_view json_text) {
  absl::StatusOr<Json> parsed = config_json::ParseObject(json_text);
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  auto type = json.find("model_type");
  if (type == json.end() || !type->is_string() || type->get<std::string>() != "bart") {
    return absl::InvalidArgumentError("config.json: model_type must be 'bart'");
  }
  BartConfig c;
  constexpr int64_t kMaxVocab = int64_t{1} << 22, kMaxHidden = int64_t{1} << 16;
  constexpr int64_t kMaxFfn = int64_t{1} << 18, kMaxPositions = int64_t{1} << 20;
  for (absl::Status s :
       {ReadInt(json, "vocab_size", 1, kMaxVocab, &c.vocab_size),
        ReadInt(json, "d_model", 1, kMaxHidden, &c.d_model),
        ReadInt(json, "encoder_layers", 1, 1024, &c.encoder_layers),
        ReadInt(json, "decoder_layers", 1, 1024, &c.decoder_layers),
        ReadInt(json, "encoder_attention_heads", 1, 1024, &c.encoder_attention_heads),
        ReadInt(json, "decoder_attention_heads", 1, 1024, &c.decoder_attention_heads),
        ReadInt(json, "encoder_ffn_dim", 1, kMaxFfn, &c.encoder_ffn_dim),
        ReadInt(json, "decoder_ffn_dim", 1, kMaxFfn, &c.decoder_ffn_dim),
        ReadInt(json, "max_position_embeddings", 1, kMaxPositions, &c.max_position_embeddings),
        ReadBool(json, "scale_embedding", &c.scale_embedding),
        ReadBool(json, "tie_word_embeddings", &c.tie_word_embeddings)}) {
    if (!s.ok()) return s;
  }
  for (const auto& [key, heads] :
       {std::pair{"encoder_attention_heads", c.encoder_attention_heads},
        std::pair{"decoder_attention_heads", c.decoder_attention_heads}}) {
    if (c.d_model % heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, " (", heads,
                                                     ") must divide d_model (", c.d_model, ")"));
    }
  }
  if (auto it = json.find("activation_function"); it != json.end() && !it->is_null()) {
    const std::string act = it->is_string() ? it->get<std::string>() : "";
    if (act != "gelu" && act != "gelu_new" && act != "relu") {
      return absl::InvalidArgumentError(
          "config.json: activation_function must be \"gelu\", \"gelu_new\" or \"relu\"");
    }
    c.activation_function = act;
  }
  for (const auto& [key, field] :
       {std::pair{"pad_token_id", &c.pad_token_id}, std::pair{"bos_token_id", &c.bos_token_id},
        std::pair{"forced_bos_token_id", &c.forced_bos_token_id},
        std::pair{"forced_eos_token_id", &c.forced_eos_token_id}}) {
    if (absl::Status s = BartReadTokenId(json, key, c.vocab_size, field); !s.ok()) return s;
  }
  std::optional<int32_t> start = c.decoder_start_token_id;
  if (absl::Status s = BartReadTokenId(json, "decoder_start_token_id", c.vocab_size, &start);
      !s.ok()) {
    return s;
  }
  if (!start) {
    return absl::InvalidArgumentError(
        "config.json: decoder_start_token_id must be a token id (decoding starts from it)");
  }
  c.decoder_start_token_id = *start;
  if (absl::Status s = config_json::ReadEosTokenIds(json, c.vocab_size, &c.eos_token_ids);
      !s.ok()) {
    return s;
  }
  config_json::ReadDtypeName(json, &c.torch_dtype);
  return c;
}

std::string BartConfig::ToJson() const {
  auto id = [](const std::optional<int32_t>& v) { return v ? Json(*v) : Json(); };
  Json json = {
      {"architectures", {"BartForConditionalGeneration"}},
      {"model_type", "bart"},
      {"is_encoder_decoder", true},
      {"vocab_size", vocab_size},
      {"d_model", d_model},
      {"encoder_layers", encoder_layers},
      {"decoder_layers", decoder_layers},
      {"encoder_attention_heads", encoder_attention_heads},
      {"decoder_attention_heads", decoder_attention_heads},
      {"encoder_ffn_dim", encoder_ffn_dim},
      {"decoder_ffn_dim", decoder_ffn_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"activation_function", activation_function},
      {"scale_embedding", scale_embedding},
      {"tie_word_embeddings", tie_word_embeddings},
      {"decoder_start_token_id", decoder_start_token_id},
      {"eos_token_id", eos_token_ids.size() == 1 ? Json(eos_token_ids[0]) : Json(eos_token_ids)}};
  json["pad_token_id"] = id(pad_token_id);
  json["bos_token_id"] = id(bos_token_id);
  json["forced_bos_token_id"] = id(forced_bos_token_id);
  json["forced_eos_token_id"] = id(forced_eos_token_id);
  if (!torch_dtype.empty()) json["torch_dtype"] = torch_dtype;
  return json.dump(2);
}

}  // namespace kvserve::model
