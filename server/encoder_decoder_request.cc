// Encoder-decoder requests: the prompt to the encoder, the decoder prompt to the engine (see
// encoder_decoder_request.h).
#include "server/encoder_decoder_request.h"

#include <utility>

#include "base/string_cat.h"
#include "server/request_builder.h"

namespace kvserve::server {

using base::Cat;

absl::Status CheckEncoderDecoderInput(const model::ModelInfo& info, const GenerationInput& input) {
  if (!info.encoder_decoder()) {
    if (input.decoder_prompt_ids.has_value()) {
      return FieldError("decoder_prompt_ids",
                        Cat("only encoder-decoder models take a decoder prompt; model_type ",
                            info.model_type, " is decoder-only"));
    }
    return absl::OkStatus();
  }
  const std::string family = Cat("model_type ", info.model_type, " (an encoder-decoder model)");
  if (!input.session.empty()) {
    return FieldError("session", Cat("sessions continue one decoder sequence turn after turn; ",
                                     family, " decodes each request from its own encoder input"));
  }
  if (!input.prefix.empty()) return RefuseEncoderDecoderPrefix(info, "prefix");
  return absl::OkStatus();
}

absl::Status ApplyEncoderDecoderInput(const model::ModelInfo& info, const GenerationInput& input,
                                      GenerationRequest* out) {
  if (!info.encoder_decoder()) return absl::OkStatus();
  if (static_cast<int64_t>(out->prompt_ids.size()) > info.max_position_embeddings) {
    return FieldError("prompt",
                      Cat("the encoder input has ", out->prompt_ids.size(),
                          " tokens; the encoder reads at most ", info.max_position_embeddings));
  }
  std::vector<int32_t> decoder = info.decoder_start_ids;
  if (input.decoder_prompt_ids.has_value()) {
    decoder = *input.decoder_prompt_ids;
    if (decoder.empty()) {
      return FieldError("decoder_prompt_ids",
                        "needs at least one token (leave it unset to start from "
                        "decoder_start_token_id)");
    }
    for (int32_t id : decoder) {
      if (id < 0 || id >= info.vocab_size) {
        return FieldError("decoder_prompt_ids.ids",
                          Cat("token id ", id, " is outside [0, ", info.vocab_size, ")"));
      }
    }
  }
  out->encoder_ids = std::exchange(out->prompt_ids, std::move(decoder));
  return absl::OkStatus();
}

absl::Status CheckEncoderDecoderCache(const model::ModelInfo& info, GenerationRequest* out) {
  if (!info.encoder_decoder()) return absl::OkStatus();
  if (out->cache_spec.implementation == cache::CacheImplementation::kQuantized) {
    return FieldError("cache.cache_implementation",
                      Cat("'quantized' is not supported for model_type ", info.model_type,
                          " (an encoder-decoder model), as the reference refuses quantized "
                          "caches for encoder-decoder models; allowed: dynamic, static, "
                          "offloaded, offloaded_static"));
  }
  out->skip_prefix_reuse = true;
  return absl::OkStatus();
}

absl::Status RefuseEncoderDecoderPrefix(const model::ModelInfo& info, std::string_view field) {
  if (!info.encoder_decoder()) return absl::OkStatus();
  return FieldError(field, Cat("named prefixes are not supported for model_type ", info.model_type,
                               " (an encoder-decoder model): a prefix holds decoder tokens, "
                               "not an encoder input"));
}

}  // namespace kvserve::server
