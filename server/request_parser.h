// RequestParser: wire requests (kvserve.v1) to validated, tokenized engine requests, with an
// INVALID_ARGUMENT naming the field for anything malformed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/kv_cache_manager.h"
#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/prefix.pb.h"
#include "kvserve/v1/session.pb.h"
#include "model/model.h"
#include "server/api_keys.h"
#include "server/generation_request.h"

namespace kvserve::model {
class Tokenizer;
}  // namespace kvserve::model

namespace kvserve::server {

// A validated RegisterPrefix call.
struct PrefixRegistration {
  std::string name;
  std::vector<int32_t> token_ids;     // >= 1 token, within the model's context
  cache::CacheSpec strategy;          // options.cache_implementation, checked against the model
  cache::NamedPrefixOptions options;  // what the store keeps (defaults applied)
};

// The named prefixes a parser resolves GenerateRequest.prefix against: the engine's
// published catalog. Thread-safe.
using CatalogSource = std::function<std::shared_ptr<const cache::PrefixCatalog>()>;
// The open sessions a parser resolves GenerateRequest.session against (null: not open).
// Thread-safe.
using SessionSource =
    std::function<std::shared_ptr<const cache::SessionOptions>(const std::string& id)>;

struct RequestLimits {
  // --max-new-tokens-limit: the largest max_new_tokens a request may ask for.
  int64_t max_new_tokens_limit = 4096;
  // Stop strings per request at most, and bytes per stop string at most.
  int max_stop_strings = 16;
  int64_t max_stop_string_bytes = 1024;
  // Beams (num_beams) and returned sequences (num_return_sequences) per request at most.
  int max_sequences_per_request = 64;
  // Chat messages per request (messages.messages) at most.
  int max_messages = 4096;
  // Stop token ids per request (sampling.stop_token_ids) at most. Input token ids
  // (token_ids.ids) are bounded by the model's context.
  int max_stop_token_ids = 1024;
};

// The most alternatives SamplingParams.top_logprobs may ask for.
inline constexpr int kMaxTopLogprobs = 20;

// What parsing knows of the call it serves: long work (rendering a chat template) stops when
// the deadline passes or the client cancels.
struct ParseContext {
  absl::Time deadline = absl::InfiniteFuture();  // wall-clock time (absl::Now())
  std::function<bool()> cancelled;               // null: never cancelled
  // The caller's tenant: prefix names resolve in its namespace, then the shared one; another
  // tenant's sessions are NOT_FOUND.
  std::string tenant = kDefaultTenant;
};

// A named prefix resolved for a tenant.
struct ResolvedPrefix {
  std::string qualified_name;  // its catalog key (see cache::QualifiedPrefixName)
  std::shared_ptr<const cache::Snapshot> snapshot;
};

// Immutable after construction; Parse and Tokenize may run on any number of threads at once
// (the tokenizer is thread-safe). `model_info` and `tokenizer` (null when the model has no
// tokenizer.json: then only token_ids inputs are accepted) must outlive the parser.
class RequestParser {
 public:
  // `catalog` (null: every prefix name is NOT_FOUND) resolves GenerateRequest.prefix without
  // counting a hit (the engine counts the one use at admission).
  // `sessions` (null: every session is NOT_FOUND) resolves GenerateRequest.session.
  RequestParser(const model::ModelInfo& model_info, const model::Tokenizer* tokenizer,
                RequestLimits limits, CatalogSource catalog = nullptr,
                SessionSource sessions = nullptr);

  // Applies the defaults of the proto's comments and checks every field. InvalidArgument
  // whose message starts with the field's path ("sampling.top_p: ...", "input: ...") for the
  // first malformed field; NotFound for an unknown prefix name.
  // Input text (prompt, or the messages' contents together) longer than max_input_bytes() is
  // refused before it is tokenized. DeadlineExceeded or Cancelled when `context` says so
  // while the chat template renders.
  absl::StatusOr<GenerationRequest> Parse(const v1::GenerateRequest& request,
                                          const ParseContext& context = {}) const;

  // Validates a RegisterPrefix call and tokenizes its content (text with the model's
  // sequence-start tokens; messages rendered without a generation prompt). InvalidArgument
  // naming the field.
  absl::StatusOr<PrefixRegistration> ParseRegisterPrefix(
      const v1::RegisterPrefixRequest& request) const;

  // Validates CreateSession's options (the cache as GenerateRequest.cache, a registered
  // prefix, ttl_seconds >= 0). InvalidArgument naming the field ("options.cache....");
  // NotFound "options.prefix: ..." for an unknown prefix.
  // The session belongs to `tenant`, and its prefix resolves in that tenant's namespace.
  absl::StatusOr<cache::SessionOptions> ParseSessionOptions(const v1::SessionOptions& options,
                                                            const std::string& tenant) const;

  // `name` resolved for `tenant`: its own prefix of that name, else the shared one; nullopt
  // when neither is registered.
  std::optional<ResolvedPrefix> ResolvePrefix(const std::string& tenant,
                                              const std::string& name) const;

  // Token ids (and their strings) of a TokenizeRequest. InvalidArgument naming the field,
  // also for text longer than max_input_bytes().
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request,
                                                const ParseContext& context = {}) const;

  const RequestLimits& limits() const { return limits_; }
  // The most bytes of input text a request may carry: what the model's context could hold at
  // the longest token string of the vocabulary, with room for normalizers that shrink text.
  int64_t max_input_bytes() const { return max_input_bytes_; }

 private:
  // The token ids of the request's input (prompt text, ids or chat messages).
  absl::StatusOr<std::vector<int32_t>> InputIds(const v1::GenerateRequest& request,
                                                const ParseContext& context) const;
  // Ids of a chat rendered with the model's template; `field` names the input in errors.
  // `template_kwargs` is a JSON object text of extra template variables (empty: none).
  absl::StatusOr<std::vector<int32_t>> ChatIds(const v1::ChatMessages& messages,
                                               const std::string& field, bool add_generation_prompt,
                                               const ParseContext& context,
                                               const std::string& template_kwargs = "") const;
  // Ids of `text` (the input named `field`), refused unread when over max_input_bytes().
  absl::StatusOr<std::vector<int32_t>> TextIds(const std::string& text, const std::string& field,
                                               bool add_special_tokens) const;
  absl::Status ParseSampling(const v1::SamplingParams& sampling, GenerationRequest* out) const;
  // Beams, returned sequences and log-probabilities (after the sampling fields).
  absl::Status ParseSequences(const v1::SamplingParams& sampling, GenerationRequest* out) const;
  absl::Status ParseCache(const v1::CacheOptions& cache, GenerationRequest* out) const;
  // The snapshot of the prefix of qualified name `qualified` in the published catalog; null
  // when absent.
  std::shared_ptr<const cache::Snapshot> FindPrefix(const std::string& qualified) const;
  // A session turn: `request` names an open session.
  absl::StatusOr<GenerationRequest> ParseSessionTurn(const v1::GenerateRequest& request,
                                                     const ParseContext& context) const;

  const model::ModelInfo& model_info_;
  const model::Tokenizer* tokenizer_;
  RequestLimits limits_;
  CatalogSource catalog_;
  SessionSource sessions_;
  int64_t max_input_bytes_;
};

}  // namespace kvserve::server
