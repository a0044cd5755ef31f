// Encoder-decoder requests: the prompt to the encoder, the decoder prompt to the engine (see
// encoder_decoder_request.h).
#include "server/encoder_decoder_request.h"

#include <utility>

#include "base/string_cat.h"
#include "cache/cross_attention_state.h"
#include "cache/snapshot.h"
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
  std::vector<int32_t> encoder = std::move(out->prompt_ids);
  if (out->prefix_snapshot != nullptr) {
    const cache::Snapshot& prefix = *out->prefix_snapshot;
    if (prefix.cross_attention() == nullptr) {
      return FieldError("prefix", Cat("prefix '", input.prefix,
                                      "' holds no encoder input (it was not registered on this "
                                      "encoder-decoder model); register it again"));
    }
    if (static_cast<int64_t>(encoder.size()) != prefix.num_tokens()) {
      return FieldError(
          "prompt",
          Cat("a named prefix of model_type ", info.model_type, " (an encoder-decoder model)",
              " is the whole encoder input (the encoder reads it both ways, so tokens "
              "after it would change every position): send an empty input, and the "
              "decoder's first tokens in decoder_prompt_ids"));
    }
    out->cross_attention = prefix.cross_attention();
    encoder = out->cross_attention->encoder_ids;
    out->prefix_snapshot = nullptr;
    out->prefix.clear();
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
  out->encoder_ids = std::move(encoder);
  out->prompt_ids = std::move(decoder);
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

absl::Status ApplyEncoderDecoderRegistration(const model::ModelInfo& info,
                                             PrefixRegistration* out) {
  if (!info.encoder_decoder()) return absl::OkStatus();
  if (out->strategy.implementation == cache::CacheImplementation::kQuantized) {
    return FieldError("options.cache_implementation",
                      Cat("'quantized' is not supported for model_type ", info.model_type,
                          " (an encoder-decoder model)"));
  }
  out->encoder_ids = std::exchange(out->token_ids, info.decoder_start_ids);
  return absl::OkStatus();
}

}  // namespace kvserve::server
