// How a Generate call becomes a request of an encoder-decoder model (model_type bart): its
// prompt is the encoder input, and the decoder starts from the decoder prompt.
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "model/model.h"
#include "server/generation_request.h"
#include "server/request_builder.h"
#include "server/request_inputs.h"

namespace kvserve::server {

// Called by RequestBuilder::Generation first: what an input may not ask of this model.
// InvalidArgument naming the field: decoder_prompt_ids for a decoder-only model; a session
// turn for an encoder-decoder model (info.encoder_decoder()).
absl::Status CheckEncoderDecoderInput(const model::ModelInfo& info, const GenerationInput& input);

// Called once the prompt is tokenized into out->prompt_ids (after a named prefix's tokens),
// before its size and cache are checked. For an encoder-decoder model: moves the prompt into
// out->encoder_ids and makes out->prompt_ids the decoder prompt (input.decoder_prompt_ids, or
// info.decoder_start_ids when unset), so that everything after (sizes, a static cache's
// length, the engine's steps) concerns the decoder. On a named prefix (out->prefix_snapshot,
// registered by ApplyEncoderDecoderRegistration), the prefix is the whole encoder input: its
// encoder output and cross K/V go to out->cross_attention, and the request leaves the
// snapshot and its name (the store's decoder-token reuse does not apply). InvalidArgument
// naming the field for an encoder input longer than max_position_embeddings, input after a
// named prefix, a prefix without an encoder input, or an empty decoder prompt or one outside
// the vocabulary. Does nothing for a decoder-only model.
absl::Status ApplyEncoderDecoderInput(const model::ModelInfo& info, const GenerationInput& input,
                                      GenerationRequest* out);

// Called once out->cache_spec is built. For an encoder-decoder model: InvalidArgument naming
// cache.cache_implementation for 'quantized' (the reference refuses quantized caches for
// encoder-decoder models); the request keeps out of automatic prefix reuse, since its decoder
// tokens alone do not identify their K/V (they depend on the encoder input). Does nothing for
// a decoder-only model.
absl::Status CheckEncoderDecoderCache(const model::ModelInfo& info, GenerationRequest* out);

// Called at the end of RequestBuilder::Registration. For an encoder-decoder model the content
// is the prefix's encoder input: it moves to out->encoder_ids and out->token_ids become
// info.decoder_start_ids, so that the registration's one step computes the encoder output and
// the cross K/V, which the prefix's snapshot keeps. InvalidArgument naming
// options.cache_implementation for 'quantized'. Does nothing for a decoder-only model.
absl::Status ApplyEncoderDecoderRegistration(const model::ModelInfo& info, PrefixRegistration* out);

}  // namespace kvserve::server
