// Reading config.json fields for the model families that parse their own (Mamba, BART): the
// object itself, and integers and booleans checked where they are read, with errors that name
// the field. Light header (no LibTorch).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::model::config_json {

using Json = nlohmann::json;

// config.json's text as a JSON object (its nesting depth checked first); InvalidArgument
// otherwise.
absl::StatusOr<Json> ParseObject(std::string_view json_text);
// json[key] as an integer in [lo, hi] into *out when present (absent or null keeps *out);
// InvalidArgument naming the key otherwise.
absl::Status ReadInt(const Json& json, const char* key, int64_t lo, int64_t hi, int64_t* out);
// json[key] as a boolean into *out when present (absent or null keeps *out).
absl::Status ReadBool(const Json& json, const char* key, bool* out);
// eos_token_id (one id or a list; null: none) into *out when present, each below vocab_size.
absl::Status ReadEosTokenIds(const Json& json, int64_t vocab_size, std::vector<int32_t>* out);
// The checkpoint's dtype name (torch_dtype, else dtype) into *out when one is a string.
void ReadDtypeName(const Json& json, std::string* out);

}  // namespace kvserve::model::config_json
