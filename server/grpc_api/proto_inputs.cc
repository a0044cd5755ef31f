// kvserve.v1 messages to the builder's typed inputs (see proto_inputs.h).
#include "server/grpc_api/proto_inputs.h"

#include <string>
#include <utility>
#include <vector>

namespace kvserve::server::grpc_api {
namespace {

std::vector<tokenizer::ChatMessage> Messages(const v1::ChatMessages& messages) {
  std::vector<tokenizer::ChatMessage> out;
  out.reserve(messages.messages_size());
  for (const v1::ChatMessage& m : messages.messages()) out.push_back({m.role(), m.content()});
  return out;
}

SamplingInput ToInput(const v1::SamplingParams& s) {
  SamplingInput out;
  if (s.has_max_new_tokens()) out.max_new_tokens = s.max_new_tokens();
  if (s.has_do_sample()) out.do_sample = s.do_sample();
  if (s.has_temperature()) out.temperature = s.temperature();
  if (s.has_top_k()) out.top_k = s.top_k();
  if (s.has_top_p()) out.top_p = s.top_p();
  if (s.has_min_p()) out.min_p = s.min_p();
  if (s.has_repetition_penalty()) out.repetition_penalty = s.repetition_penalty();
  if (s.has_seed()) out.seed = s.seed();
  out.stop.assign(s.stop().begin(), s.stop().end());
  out.stop_token_ids.assign(s.stop_token_ids().begin(), s.stop_token_ids().end());
  out.ignore_eos = s.ignore_eos();
  if (s.has_num_beams()) out.num_beams = s.num_beams();
  if (s.has_num_return_sequences()) out.num_return_sequences = s.num_return_sequences();
  if (s.has_num_beam_groups()) out.num_beam_groups = s.num_beam_groups();
  switch (s.early_stopping()) {
    case v1::EARLY_STOPPING_UNSPECIFIED:
      out.early_stopping = EarlyStoppingInput::kUnspecified;
      break;
    case v1::EARLY_STOPPING_TRUE:
      out.early_stopping = EarlyStoppingInput::kTrue;
      break;
    case v1::EARLY_STOPPING_FALSE:
      out.early_stopping = EarlyStoppingInput::kFalse;
      break;
    case v1::EARLY_STOPPING_NEVER:
      out.early_stopping = EarlyStoppingInput::kNever;
      break;
    default:
      out.early_stopping = EarlyStoppingInput::kInvalid;
      out.early_stopping_value = static_cast<int>(s.early_stopping());
      break;
  }
  if (s.has_length_penalty()) out.length_penalty = s.length_penalty();
  out.logprobs = s.logprobs();
  out.top_logprobs = s.top_logprobs();
  return out;
}

CacheInput ToInput(const v1::CacheOptions& c) {
  CacheInput out;
  if (c.has_use_cache()) out.use_cache = c.use_cache();
  out.cache_implementation = c.cache_implementation();
  if (c.has_quantization()) {
    const v1::QuantizationConfig& q = c.quantization();
    QuantizationInput& quantization = out.quantization.emplace();
    quantization.backend = q.backend();
    if (q.has_nbits()) quantization.nbits = q.nbits();
    if (q.has_axis_key()) quantization.axis_key = q.axis_key();
    if (q.has_axis_value()) quantization.axis_value = q.axis_value();
    if (q.has_q_group_size()) quantization.q_group_size = q.q_group_size();
    if (q.has_residual_length()) quantization.residual_length = q.residual_length();
  }
  if (c.has_max_cache_len()) out.max_cache_len = c.max_cache_len();
  if (c.has_offload_only_non_sliding()) {
    out.offload_only_non_sliding = c.offload_only_non_sliding();
  }
  out.skip_prefix_reuse = c.skip_prefix_reuse();
  out.prefix_kv_mode = c.prefix_kv_mode();
  return out;
}

}  // namespace

GenerationInput ToInput(const v1::GenerateRequest& request) {
  GenerationInput out;
  switch (request.input_case()) {
    case v1::GenerateRequest::kPrompt:
      out.input = PromptInput::Text(request.prompt());
      break;
    case v1::GenerateRequest::kTokenIds:
      out.input = PromptInput::TokenIds(
          {request.token_ids().ids().begin(), request.token_ids().ids().end()});
      break;
    case v1::GenerateRequest::kMessages:
      out.input = PromptInput::Messages(Messages(request.messages()));
      break;
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;
  }
  out.input.template_kwargs = request.template_kwargs();
  out.prefix = request.prefix();
  out.session = request.session();
  out.sampling = ToInput(request.sampling());
  if (request.has_constraint()) out.sampling.constraint = ToInput(request.constraint());
  if (request.has_cache()) out.cache = ToInput(request.cache());
  if (request.has_decoder_prompt_ids()) {
    out.decoder_prompt_ids.emplace(request.decoder_prompt_ids().ids().begin(),
                                   request.decoder_prompt_ids().ids().end());
  }
  return out;
}

constraint::ConstraintSpec ToInput(const v1::Constraint& c) {
  using Kind = constraint::ConstraintSpec::Kind;
  constraint::ConstraintSpec spec;
  spec.whitespace_bytes = c.whitespace_bytes();
  switch (c.kind_case()) {
    case v1::Constraint::kJsonSchema:
      spec.kind = Kind::kJsonSchema;
      spec.text = c.json_schema();
      break;
    case v1::Constraint::kJsonObject:
      spec.kind = Kind::kJsonObject;
      break;
    case v1::Constraint::kRegex:
      spec.kind = Kind::kRegex;
      spec.text = c.regex();
      break;
    case v1::Constraint::kGrammar:
      spec.kind = Kind::kGrammar;
      spec.text = c.grammar();
      break;
    case v1::Constraint::kChoice:
      spec.kind = Kind::kChoice;
      spec.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      break;
    case v1::Constraint::KIND_NOT_SET:
      spec.kind = Kind::kUnset;  // refused by the builder, by name
      break;
  }
  return spec;
}

RegistrationInput ToInput(const v1::RegisterPrefixRequest& request) {
  RegistrationInput out;
  out.name = request.name();
  switch (request.content_case()) {
    case v1::RegisterPrefixRequest::kText:
      out.content = PromptInput::Text(request.text());
      break;
    case v1::RegisterPrefixRequest::kTokenIds:
      out.content = PromptInput::TokenIds(
          {request.token_ids().ids().begin(), request.token_ids().ids().end()});
      break;
    case v1::RegisterPrefixRequest::kMessages:
      out.content = PromptInput::Messages(Messages(request.messages()));
      break;
    case v1::RegisterPrefixRequest::CONTENT_NOT_SET:
      break;
  }
  out.shared = request.shared();
  const v1::PrefixOptions& o = request.options();
  if (o.has_pinned()) out.pinned = o.pinned();
  out.retention = o.retention();
  out.ttl_seconds = o.ttl_seconds();
  out.cache_implementation = o.cache_implementation();
  return out;
}

SessionInput ToInput(const v1::SessionOptions& options) {
  SessionInput out;
  out.cache = ToInput(options.cache());
  out.prefix = options.prefix();
  out.ttl_seconds = options.ttl_seconds();
  return out;
}

TokenizeInput ToInput(const v1::TokenizeRequest& request) {
  TokenizeInput out;
  switch (request.input_case()) {
    case v1::TokenizeRequest::kText:
      out.input = PromptInput::Text(request.text());
      break;
    case v1::TokenizeRequest::kMessages:
      out.input = PromptInput::Messages(Messages(request.messages()));
      break;
    case v1::TokenizeRequest::INPUT_NOT_SET:
      break;
  }
  out.input.template_kwargs = request.template_kwargs();
  if (request.has_add_special_tokens()) out.add_special_tokens = request.add_special_tokens();
  return out;
}

v1::TokenizeResponse ToProto(const TokenizeResult& result) {
  v1::TokenizeResponse response;
  response.mutable_token_ids()->Add(result.token_ids.begin(), result.token_ids.end());
  for (const std::string& token : result.tokens) response.add_tokens(token);
  return response;
}

}  // namespace kvserve::server::grpc_api
