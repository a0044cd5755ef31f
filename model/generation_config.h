// GenerationConfig: the model folder's generation_config.json, whose values generate() uses
// for every parameter a call leaves unset (end-of-sequence tokens, sampling defaults).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/beam_search.h"

namespace kvserve::model {

// The fields kvserve applies; others (max_length, pad_token_id, transformers_version, ...) are
// accepted and ignored. Every field is optional: unset means the library's default.
struct GenerationConfig {
  std::optional<bool> do_sample;
  std::optional<double> temperature;            // >= 0 (0: greedy)
  std::optional<int64_t> top_k;                 // >= 0
  std::optional<double> top_p;                  // (0, 1]
  std::optional<double> min_p;                  // [0, 1]
  std::optional<double> repetition_penalty;     // > 0
  std::optional<int64_t> max_new_tokens;        // >= 1
  std::optional<int> num_beams;                 // >= 1
  std::optional<double> length_penalty;         // finite
  std::optional<EarlyStopping> early_stopping;  // true, false or "never"
  // eos_token_id as an int or a list; empty when unset. When set it replaces config.json's.
  std::vector<int32_t> eos_token_ids;

  // Parses the file's text; `vocab_size` bounds token ids. InvalidArgument
  // "generation_config.json: <key>: ..." for malformed JSON, a non-object, a value of the
  // wrong type or out of range (null counts as unset, as in Transformers).
  static absl::StatusOr<GenerationConfig> Parse(std::string_view json_text, int64_t vocab_size);
};

}  // namespace kvserve::model
