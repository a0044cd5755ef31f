// config.json field readers for the families that parse their own (see config_json.h).
#include "model/config_json.h"

#include "absl/strings/str_cat.h"
#include "tokenizer/tokenizer_json_util.h"

namespace kvserve::model::config_json {

absl::StatusOr<Json> ParseObject(std::string_view json_text) {
  if (absl::Status s = tokenizer::CheckJsonDepth(json_text, tokenizer::kMaxJsonDepth); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", s.message()));
  }
  Json json = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError("config.json is not a JSON object");
  }
  return json;
}

absl::Status ReadInt(const Json& json, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, " must be an integer"));
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", key, " must be in [", lo, ", ", hi, "], got ", v));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadBool(const Json& json, const char* key, bool* out) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, " must be a boolean"));
  }
  *out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadEosTokenIds(const Json& json, int64_t vocab_size, std::vector<int32_t>* out) {
  auto it = json.find("eos_token_id");
  if (it == json.end()) return absl::OkStatus();
  out->clear();
  const Json list = it->is_array() ? *it : (it->is_null() ? Json::array() : Json::array({*it}));
  for (const Json& id : list) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return absl::InvalidArgumentError(
          "config.json: eos_token_id must be token ids below vocab_size");
    }
    out->push_back(id.get<int32_t>());
  }
  return absl::OkStatus();
}

void ReadDtypeName(const Json& json, std::string* out) {
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (auto it = json.find(key); it != json.end() && it->is_string()) {
      *out = it->get<std::string>();
      return;
    }
  }
}

}  // namespace kvserve::model::config_json
