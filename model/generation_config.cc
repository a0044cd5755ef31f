// generation_config.json (see generation_config.h).
#include "model/generation_config.h"

#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvserve::model {
namespace {

using Json = nlohmann::json;

absl::Status Error(const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("generation_config.json: ", key, ": ", what));
}

const Json* Find(const Json& object, const std::string& key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

absl::Status ReadNumber(const Json& object, const std::string& key, std::optional<double>* out) {
  const Json* v = Find(object, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Error(key, "must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return Error(key, "must be finite");
  *out = d;
  return absl::OkStatus();
}

absl::Status ReadInt(const Json& object, const std::string& key, std::optional<int64_t>* out) {
  const Json* v = Find(object, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) return Error(key, "must be an integer");
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Error(key, "is out of range");
  }
  *out = v->get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadTokenId(const Json& v, const std::string& key, int64_t vocab_size,
                         std::vector<int32_t>* out) {
  if (!v.is_number_integer()) return Error(key, "must be an integer token id or a list of them");
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(vocab_size)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size)) {
    return Error(key, absl::StrCat(v.dump(), " is not a token id in [0, ", vocab_size, ")"));
  }
  out->push_back(static_cast<int32_t>(v.get<int64_t>()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationConfig> GenerationConfig::Parse(std::string_view json_text,
                                                         int64_t vocab_size) {
  Json json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError("generation_config.json: not valid JSON");
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError("generation_config.json: must be a JSON object");
  }
  GenerationConfig c;
  if (const Json* v = Find(json, "do_sample")) {
    if (!v->is_boolean()) return Error("do_sample", "must be true or false");
    c.do_sample = v->get<bool>();
  }
  for (absl::Status s :
       {ReadNumber(json, "temperature", &c.temperature), ReadNumber(json, "top_p", &c.top_p),
        ReadNumber(json, "min_p", &c.min_p),
        ReadNumber(json, "repetition_penalty", &c.repetition_penalty),
        ReadInt(json, "top_k", &c.top_k), ReadInt(json, "max_new_tokens", &c.max_new_tokens)}) {
    if (!s.ok()) return s;
  }
  if (c.temperature && *c.temperature < 0) return Error("temperature", "must be >= 0");
  if (c.top_p && !(*c.top_p > 0 && *c.top_p <= 1)) return Error("top_p", "must be in (0, 1]");
  if (c.min_p && !(*c.min_p >= 0 && *c.min_p <= 1)) return Error("min_p", "must be in [0, 1]");
  if (c.repetition_penalty && *c.repetition_penalty <= 0) {
    return Error("repetition_penalty", "must be > 0");
  }
  if (c.top_k && *c.top_k < 0) return Error("top_k", "must be >= 0");
  if (c.max_new_tokens && *c.max_new_tokens < 1) return Error("max_new_tokens", "must be >= 1");
  std::optional<int64_t> num_beams;
  if (absl::Status s = ReadInt(json, "num_beams", &num_beams); !s.ok()) return s;
  if (num_beams) {
    if (*num_beams < 1 || *num_beams > 1024) return Error("num_beams", "must be in [1, 1024]");
    c.num_beams = static_cast<int>(*num_beams);
  }
  if (absl::Status s = ReadNumber(json, "length_penalty", &c.length_penalty); !s.ok()) return s;
  if (const Json* v = Find(json, "early_stopping")) {
    if (v->is_boolean()) {
      c.early_stopping = v->get<bool>() ? EarlyStopping::kTrue : EarlyStopping::kFalse;
    } else if (v->is_string() && v->get<std::string>() == "never") {
      c.early_stopping = EarlyStopping::kNever;
    } else {
      return Error("early_stopping", "must be true, false or \"never\"");
    }
  }
  if (const Json* v = Find(json, "eos_token_id")) {
    if (v->is_array()) {
      if (v->empty()) return Error("eos_token_id", "must not be an empty list");
      for (size_t i = 0; i < v->size(); ++i) {
        absl::Status s = ReadTokenId((*v)[i], absl::StrCat("eos_token_id[", i, "]"), vocab_size,
                                     &c.eos_token_ids);
        if (!s.ok()) return s;
      }
    } else if (absl::Status s = ReadTokenId(*v, "eos_token_id", vocab_size, &c.eos_token_ids);
               !s.ok()) {
      return s;
    }
  }
  return c;
}

}  // namespace kvserve::model
