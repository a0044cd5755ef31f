// Parses and writes Hugging Face config.json of model_type "mamba" (see mamba_config.h).
#include "model/mamba_config.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/config_json.h"

namespace kvserve::model {
namespace {

using config_json::Json;
using config_json::ParseObject;
using config_json::ReadBool;
using config_json::ReadInt;

}  // namespace

absl::StatusOr<std::string> ReadModelType(std::string_view json_text) {
  absl::StatusOr<Json> json = ParseObject(json_text);
  if (!json.ok()) return json.status();
  auto it = json->find("model_type");
  if (it == json->end() || !it->is_string()) {
    return absl::InvalidArgumentError("config.json: model_type is missing or not a string");
  }
  return it->get<std::string>();
}

absl::StatusOr<MambaConfig> MambaConfig::Parse(std::string_view json_text) {
  absl::StatusOr<Json> parsed = ParseObject(json_text);
  if (!parsed.ok()) return parsed.status();
  const Json& json = *parsed;
  MambaConfig c;
  auto type = json.find("model_type");
  if (type == json.end() || !type->is_string() || type->get<std::string>() != "mamba") {
    return absl::InvalidArgumentError("config.json: model_type must be 'mamba'");
  }
  constexpr int64_t kMaxVocab = int64_t{1} << 22, kMaxHidden = int64_t{1} << 16;
  for (absl::Status s :
       {ReadInt(json, "vocab_size", 1, kMaxVocab, &c.vocab_size),
        ReadInt(json, "hidden_size", 1, kMaxHidden, &c.hidden_size),
        ReadInt(json, "state_size", 1, 1024, &c.state_size),
        ReadInt(json, "num_hidden_layers", 1, 1024, &c.num_hidden_layers),
        ReadInt(json, "expand", 1, 16, &c.expand),
        ReadInt(json, "conv_kernel", 1, 64, &c.conv_kernel),
        ReadBool(json, "use_bias", &c.use_bias), ReadBool(json, "use_conv_bias", &c.use_conv_bias),
        ReadBool(json, "tie_word_embeddings", &c.tie_word_embeddings)}) {
    if (!s.ok()) return s;
  }
  c.time_step_rank = (c.hidden_size + 15) / 16;
  if (auto it = json.find("time_step_rank"); it != json.end() && !it->is_null()) {
    if (it->is_string()) {
      if (it->get<std::string>() != "auto") {
        return absl::InvalidArgumentError(
            "config.json: time_step_rank must be \"auto\" or an integer");
      }
    } else if (absl::Status s = ReadInt(json, "time_step_rank", 1, kMaxHidden, &c.time_step_rank);
               !s.ok()) {
      return s;
    }
  }
  if (auto it = json.find("layer_norm_epsilon"); it != json.end() && !it->is_null()) {
    if (!it->is_number() || !(it->get<double>() > 0)) {
      return absl::InvalidArgumentError("config.json: layer_norm_epsilon must be a number > 0");
    }
    c.layer_norm_epsilon = it->get<double>();
  }
  if (auto it = json.find("hidden_act"); it != json.end() && !it->is_null()) {
    if (!it->is_string() || it->get<std::string>() != "silu") {
      return absl::InvalidArgumentError("config.json: hidden_act must be \"silu\" for mamba");
    }
  }
  if (auto it = json.find("bos_token_id"); it != json.end()) {
    if (it->is_null()) {
      c.bos_token_id.reset();
    } else {
      int64_t bos = 0;
      if (absl::Status s = ReadInt(json, "bos_token_id", 0, c.vocab_size - 1, &bos); !s.ok()) {
        return s;
      }
      c.bos_token_id = static_cast<int32_t>(bos);
    }
  }
  if (absl::Status s = config_json::ReadEosTokenIds(json, c.vocab_size, &c.eos_token_ids);
      !s.ok()) {
    return s;
  }
  config_json::ReadDtypeName(json, &c.torch_dtype);
  return c;
}

std::string MambaConfig::ToJson() const {
  Json json = {
      {"architectures", {"MambaForCausalLM"}},
      {"model_type", "mamba"},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size()},
      {"state_size", state_size},
      {"num_hidden_layers", num_hidden_layers},
      {"layer_norm_epsilon", layer_norm_epsilon},
      {"expand", expand},
      {"conv_kernel", conv_kernel},
      {"time_step_rank", time_step_rank},
      {"use_bias", use_bias},
      {"use_conv_bias", use_conv_bias},
      {"hidden_act", "silu"},
      {"residual_in_fp32", true},
      {"tie_word_embeddings", tie_word_embeddings},
      {"eos_token_id", eos_token_ids.size() == 1 ? Json(eos_token_ids[0]) : Json(eos_token_ids)}};
  json["bos_token_id"] = bos_token_id ? Json(*bos_token_id) : Json();
  if (!torch_dtype.empty()) json["torch_dtype"] = torch_dtype;
  return json.dump(2);
}

}  // namespace kvserve::model
