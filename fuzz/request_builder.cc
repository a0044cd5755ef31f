// Fuzzes RequestBuilder through the gRPC adapter's reading of wire messages: the input is a
// serialized kvserve.v1.GenerateRequest, read into a GenerationInput and built by two builders
// over a tiny model (512 tokens, 64 positions, a full and a sliding layer) and the tiny
// byte-level tokenizer: one without generation_config.json defaults, one with sampling and beam
// defaults. The catalog holds a prefix "sys"; sessions "s1" (dynamic), "s2" (static, starting
// with "sys") and "s3" (starting with a prefix since deleted) are open. The same bytes are also
// read as a RegisterPrefixRequest, a TokenizeRequest and SessionOptions.
//
// Checked for every request the builder accepts: what GenerationRequest documents (a non-empty
// prompt of in-vocabulary ids that fits the context with max_new_tokens, valid sampling
// parameters, consistent beams and sequences, a cache the model can use) holds; and every
// refusal is INVALID_ARGUMENT or NOT_FOUND.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/check.h"
#include "cache/cache_factory.h"
#include "cache/kv_cache.h"
#include "cache/kv_cache_manager.h"
#include "cache/layer_type.h"
#include "cache/snapshot.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/prefix.pb.h"
#include "kvserve/v1/session.pb.h"
#include "model/model.h"
#include "server/grpc_api/proto_inputs.h"
#include "server/request_builder.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

using kvserve::server::GenerationRequest;
using kvserve::server::RequestBuilder;
using kvserve::server::grpc_api::ToInput;
using kvserve::server::grpc_api::ToProto;
namespace cache = kvserve::cache;
namespace model = kvserve::model;
namespace tokenizer = kvserve::tokenizer;
namespace v1 = kvserve::v1;

struct Fixture {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  model::ModelInfo plain, with_defaults;
  kvserve::server::RequestLimits limits;
  std::map<std::string, std::shared_ptr<const cache::Snapshot>> prefixes;
  std::map<std::string, std::shared_ptr<const cache::SessionOptions>> sessions;
  std::vector<std::unique_ptr<RequestBuilder>> builders;
};

Fixture* fixture = nullptr;

std::shared_ptr<const cache::Snapshot> MakeSnapshot(const std::vector<int32_t>& tokens) {
  absl::StatusOr<std::unique_ptr<cache::KvCache>> kv =
      cache::KvCache::CreateDynamic({cache::LayerSpec{}});
  KVSERVE_CHECK(kv.ok()) << kv.status();
  const at::Tensor k = at::ones({1, 1, static_cast<int64_t>(tokens.size()), 2});
  KVSERVE_CHECK((*kv)->Update(0, k, -k).ok());
  absl::StatusOr<std::shared_ptr<const cache::Snapshot>> s =
      cache::Snapshot::Capture(**kv, tokens, "fuzz-model");
  KVSERVE_CHECK(s.ok()) << s.status();
  return *s;
}

model::ModelInfo TinyModel() {
  model::ModelInfo info;
  info.model_type = "llama";
  info.vocab_size = 512;
  info.num_layers = 2;
  info.num_kv_heads = 2;
  info.head_dim = 16;
  info.max_position_embeddings = 64;
  info.layer_specs = {cache::LayerSpec{},
                      cache::LayerSpec{cache::LayerType::kSlidingAttention, /*window=*/8}};
  info.eos_token_ids = {tokenizer::kTinyEosId};
  info.bos_token_id = tokenizer::kTinyBosId;
  return info;
}

bool IsRefusal(const absl::Status& status) {
  return absl::IsInvalidArgument(status) || absl::IsNotFound(status);
}

void CheckAccepted(const GenerationRequest& r, const model::ModelInfo& info,
                   const kvserve::server::RequestLimits& limits) {
  const int64_t context = info.max_position_embeddings;
  KVSERVE_CHECK(!r.prompt_ids.empty());
  for (int32_t id : r.prompt_ids) KVSERVE_CHECK(id >= 0 && id < info.vocab_size) << id;
  for (int32_t id : r.first_turn_ids) KVSERVE_CHECK(id >= 0 && id < info.vocab_size) << id;
  for (int32_t id : r.stop_token_ids) KVSERVE_CHECK(id >= 0 && id < info.vocab_size) << id;
  KVSERVE_CHECK(r.max_new_tokens >= 1 && r.max_new_tokens <= limits.max_new_tokens_limit)
      << r.max_new_tokens;
  KVSERVE_CHECK(static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens <= context)
      << r.prompt_ids.size() << " + " << r.max_new_tokens;
  for (const std::string& stop : r.stop_strings) {
    KVSERVE_CHECK(!stop.empty() &&
                  static_cast<int64_t>(stop.size()) <= limits.max_stop_string_bytes);
  }
  KVSERVE_CHECK(static_cast<int>(r.stop_strings.size()) <= limits.max_stop_strings);
  const model::SamplingParams& s = r.sampling;
  if (s.do_sample) {
    KVSERVE_CHECK(std::isfinite(s.temperature) && s.temperature > 0) << s.temperature;
  }
  KVSERVE_CHECK(s.top_k >= 0) << s.top_k;
  KVSERVE_CHECK(s.top_p > 0 && s.top_p <= 1) << s.top_p;
  KVSERVE_CHECK(s.min_p >= 0 && s.min_p <= 1) << s.min_p;
  KVSERVE_CHECK(std::isfinite(s.repetition_penalty) && s.repetition_penalty > 0);
  const int max_sequences = limits.max_sequences_per_request;
  KVSERVE_CHECK(r.num_beams >= 1 && r.num_beams <= max_sequences) << r.num_beams;
  KVSERVE_CHECK(r.num_return_sequences >= 1 && r.num_return_sequences <= max_sequences);
  if (r.num_beams > 1) {
    KVSERVE_CHECK(!s.do_sample && r.stop_strings.empty());
    KVSERVE_CHECK(r.num_return_sequences <= r.num_beams);
  } else if (r.num_return_sequences > 1) {
    KVSERVE_CHECK(s.do_sample);
  }
  KVSERVE_CHECK(std::isfinite(r.length_penalty));
  KVSERVE_CHECK(r.top_logprobs >= -1 && r.top_logprobs <= kvserve::server::kMaxTopLogprobs);
  if (r.num_beams > 1 || r.num_return_sequences > 1) KVSERVE_CHECK(r.cache_spec.use_cache());
  KVSERVE_CHECK(cache::CheckSpecForModel(r.cache_spec, info.layer_specs, info.head_dim).ok());
  if (r.cache_spec.is_static() && r.session.empty()) {
    KVSERVE_CHECK(r.cache_spec.max_cache_len.has_value());
    KVSERVE_CHECK(*r.cache_spec.max_cache_len >=
                  static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens - 1);
  }
  if (!r.prefix.empty() && r.session.empty()) {
    KVSERVE_CHECK(r.prefix_snapshot != nullptr);
    const auto tokens = r.prefix_snapshot->token_ids();
    KVSERVE_CHECK(r.prompt_ids.size() >= tokens.size());
    KVSERVE_CHECK(std::equal(tokens.begin(), tokens.end(), r.prompt_ids.begin()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fixture = new Fixture();
  absl::StatusOr<std::unique_ptr<tokenizer::Tokenizer>> tokenizer = tokenizer::Tokenizer::FromJson(
      tokenizer::MakeTinyTokenizerJson(512), tokenizer::MakeTinyTokenizerConfigJson());
  KVSERVE_CHECK(tokenizer.ok()) << tokenizer.status();
  fixture->tokenizer = *std::move(tokenizer);
  fixture->plain = TinyModel();
  fixture->with_defaults = TinyModel();
  model::GenerationConfig& g = fixture->with_defaults.generation;
  g.do_sample = false;
  g.temperature = 0.7;
  g.top_k = 100000;
  g.top_p = 0.9;
  g.min_p = 0.05;
  g.repetition_penalty = 1.1;
  g.max_new_tokens = 100;
  g.num_beams = 4;
  g.length_penalty = 2.0;
  g.early_stopping = model::EarlyStopping::kNever;
  fixture->limits.max_new_tokens_limit = 48;
  fixture->limits.max_stop_strings = 4;
  fixture->limits.max_stop_string_bytes = 32;
  fixture->limits.max_sequences_per_request = 8;

  fixture->prefixes["sys"] = MakeSnapshot({100, 101, 102});
  auto session = [](cache::CacheImplementation implementation, std::string prefix,
                    std::vector<int32_t> tokens) {
    auto options = std::make_shared<cache::SessionOptions>();
    options->cache.implementation = implementation;
    if (implementation == cache::CacheImplementation::kStatic) options->cache.max_cache_len = 64;
    options->prefix_name = std::move(prefix);
    options->prefix_tokens = std::move(tokens);
    return options;
  };
  fixture->sessions["s1"] = session(cache::CacheImplementation::kDynamic, "", {});
  fixture->sessions["s2"] = session(cache::CacheImplementation::kStatic, "sys", {100, 101, 102});
  fixture->sessions["s3"] = session(cache::CacheImplementation::kDynamic, "gone", {7, 8});

  auto catalog = [] {
    auto c = std::make_shared<cache::PrefixCatalog>();
    for (const auto& [name, snapshot] : fixture->prefixes) {
      (*c)[name].info.name = name;
      (*c)[name].snapshot = snapshot;
    }
    return std::shared_ptr<const cache::PrefixCatalog>(std::move(c));
  };
  auto sessions = [](const std::string& id) -> std::shared_ptr<const cache::SessionOptions> {
    auto it = fixture->sessions.find(id);
    return it == fixture->sessions.end() ? nullptr : it->second;
  };
  for (const model::ModelInfo* info : {&fixture->plain, &fixture->with_defaults}) {
    fixture->builders.push_back(std::make_unique<RequestBuilder>(
        *info, fixture->tokenizer.get(), fixture->limits, catalog, sessions));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::GenerateRequest request;
  if (request.ParseFromArray(data, static_cast<int>(size))) {
    for (size_t i = 0; i < fixture->builders.size(); ++i) {
      const model::ModelInfo& info = i == 0 ? fixture->plain : fixture->with_defaults;
      absl::StatusOr<GenerationRequest> parsed = fixture->builders[i]->Generation(ToInput(request));
      if (parsed.ok()) {
        CheckAccepted(*parsed, info, fixture->limits);
      } else {
        KVSERVE_CHECK(IsRefusal(parsed.status())) << parsed.status();
      }
    }
  }
  const RequestBuilder& builder = *fixture->builders[0];
  v1::RegisterPrefixRequest prefix;
  if (prefix.ParseFromArray(data, static_cast<int>(size))) {
    absl::StatusOr<kvserve::server::PrefixRegistration> registration =
        builder.Registration(ToInput(prefix));
    if (registration.ok()) {
      KVSERVE_CHECK(!registration->token_ids.empty());
      KVSERVE_CHECK(static_cast<int64_t>(registration->token_ids.size()) <
                    fixture->plain.max_position_embeddings);
      for (int32_t id : registration->token_ids) KVSERVE_CHECK(id >= 0 && id < 512) << id;
    } else {
      KVSERVE_CHECK(IsRefusal(registration.status())) << registration.status();
    }
  }
  v1::TokenizeRequest tokenize;
  if (tokenize.ParseFromArray(data, static_cast<int>(size))) {
    absl::StatusOr<kvserve::server::TokenizeResult> result = builder.Tokenize(ToInput(tokenize));
    if (result.ok()) {
      std::optional<v1::TokenizeResponse> response = ToProto(*result);
      KVSERVE_CHECK(response->token_ids_size() == response->tokens_size());
      // Token strings go back in proto string fields: the client's parse refuses invalid UTF-8.
      std::string wire;
      KVSERVE_CHECK(response->SerializeToString(&wire));
      v1::TokenizeResponse read_back;
      KVSERVE_CHECK(read_back.ParseFromString(wire)) << "a token string is not valid UTF-8";
    } else {
      KVSERVE_CHECK(IsRefusal(result.status())) << result.status();
    }
  }
  v1::SessionOptions options;
  if (options.ParseFromArray(data, static_cast<int>(size))) {
    absl::StatusOr<cache::SessionOptions> session = builder.Session(ToInput(options));
    if (!session.ok()) KVSERVE_CHECK(IsRefusal(session.status())) << session.status();
  }
  return 0;
}
