// RequestBuilder: typed inputs (a generation or session turn, a prefix registration, a session,
// a tokenization) to what the engine runs: defaults applied, every field checked, text
// tokenized through the chat template, prefixes and sessions resolved for the caller's tenant,
// the server's limits enforced. Free of any wire format: each protocol is an adapter that reads
// its messages into the inputs of request_inputs.h and maps the canonical codes back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cache/prefix_catalog.h"
#include "cache/session_table.h"
#include "constraint/token_constraint.h"
#include "model/model.h"
#include "server/api_keys.h"
#include "server/generation_request.h"
#include "server/request_inputs.h"

namespace kvserve::tokenizer {
class Tokenizer;
}  // namespace kvserve::tokenizer

namespace kvserve::server {

// The path of the field an error is about ("sampling.top_p", "messages[2].role", "cache"), as
// the gRPC API names it; empty when the status carries none. Every InvalidArgument and NotFound
// of the builder carries one, and its message starts with it ("sampling.top_p: must be ...").
std::string FieldPathOf(const absl::Status& status);
// `status` with its field path attached (see FieldPathOf).
absl::Status WithFieldPath(absl::Status status, std::string_view path);
// InvalidArgument "<path>: <reason>" carrying the field path.
absl::Status FieldError(std::string_view path, std::string_view reason);

// A validated prefix registration.
struct PrefixRegistration {
  std::string name;                   // qualified: in the caller's namespace or the shared one
  std::vector<int32_t> token_ids;     // >= 1 token, within the model's context
  cache::CacheSpec strategy;          // cache_implementation, checked against the model
  cache::NamedPrefixOptions options;  // what the store keeps (defaults applied)
  // Encoder-decoder models: the content, the prefix's encoder input (token_ids are then the
  // decoder's start tokens, which the registration runs after it); empty otherwise.
  std::vector<int32_t> encoder_ids;
};

// The named prefixes the builder resolves names against: the engine's published catalog.
// Thread-safe.
using CatalogSource = std::function<std::shared_ptr<const cache::PrefixCatalog>()>;
// The open sessions' options (null: not open). Thread-safe.
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
  // --max-request-token-rows: rows (beams or samples) times the tokens each may hold
  // (prompt + max_new_tokens) at most, so that one request cannot hold a replica's memory
  // and time for minutes; 0: no bound. The default: 32 rows of a 4096-token context.
  int64_t max_request_token_rows = 131072;
  // --max-response-bytes: an estimate of the largest answer a request may ask for (every
  // returned sequence's tokens, with their log-probabilities), refused up front; 0: no bound.
  int64_t max_response_bytes = int64_t{16} << 20;
  // Output constraints: the bounds of one (schema, regex and grammar size, rules, states,
  // nesting), and how many compiled ones the server keeps for reuse.
  constraint::ConstraintLimits constraint;
  int64_t constraint_cache_entries = 256;
};

// The most alternatives top_logprobs may ask for.
inline constexpr int kMaxTopLogprobs = 20;

// What building knows of the call it serves: long work (rendering a chat template) stops when
// the deadline passes or the client cancels.
struct BuildContext {
  absl::Time deadline = absl::InfiniteFuture();  // wall-clock time (absl::Now())
  std::function<bool()> cancelled;               // null: never cancelled
  // The caller: prefix names resolve in its tenant's namespace, then the shared one; another
  // tenant's sessions are NOT_FOUND; shared prefixes are an admin's to register and delete.
  Principal caller{.tenant = kDefaultTenant, .role = Role::kAdmin};
};

// A named prefix resolved for a tenant.
struct ResolvedPrefix {
  std::string qualified_name;  // its catalog key (see cache::QualifiedPrefixName)
  // Null when a lower tier (host, disk) holds the prefix: the request then waits for its
  // promotion, which its tokens find.
  std::shared_ptr<const cache::Snapshot> snapshot;
  std::vector<int32_t> tokens;  // the prefix's tokens
};

// Immutable after construction; every method may run on any number of threads at once (the
// tokenizer is thread-safe). `model_info` and `tokenizer` (null when the model has no
// tokenizer.json: then only token-id inputs are accepted) must outlive the builder.
class RequestBuilder {
 public:
  // `catalog` (null: every prefix name is NOT_FOUND) resolves prefix names without counting a
  // hit (the engine counts the one use at admission). `sessions` (null: every session is
  // NOT_FOUND) resolves session ids.
  RequestBuilder(const model::ModelInfo& model_info, const tokenizer::Tokenizer* tokenizer,
                 RequestLimits limits, CatalogSource catalog = nullptr,
                 SessionSource sessions = nullptr);

  // A generation or, with `session`, a session turn. InvalidArgument whose message starts with
  // the field's path for the first malformed field; NotFound for an unknown prefix or session.
  // Input text longer than max_input_bytes() is refused before it is tokenized.
  // DeadlineExceeded or Cancelled when `context` says so while the chat template renders.
  absl::StatusOr<GenerationRequest> Generation(const GenerationInput& input,
                                               const BuildContext& context = {}) const;

  // A registration: its content tokenized (text with the model's sequence-start tokens;
  // messages rendered without a generation prompt), its name qualified for the caller (the
  // shared namespace needs the admin role: PermissionDenied "shared: ...").
  absl::StatusOr<PrefixRegistration> Registration(const RegistrationInput& input,
                                                  const BuildContext& context = {}) const;

  // The catalog key a deletion of `name` by the caller means: the caller's own prefix of that
  // name, else (or with `shared`) the shared one, which needs the admin role
  // (PermissionDenied "shared: ..."); another tenant's is as absent as a name never
  // registered (the engine answers NotFound).
  absl::StatusOr<std::string> DeletionTarget(const std::string& name, bool shared,
                                             const BuildContext& context = {}) const;

  // A session's options (the cache as a generation's, a registered prefix, ttl_seconds >= 0),
  // for the caller's tenant. InvalidArgument naming the field ("options.cache...."); NotFound
  // "options.prefix: ..." for an unknown prefix.
  absl::StatusOr<cache::SessionOptions> Session(const SessionInput& input,
                                                const BuildContext& context = {}) const;

  // Token ids (and their strings). InvalidArgument naming the field, also for text longer
  // than max_input_bytes().
  absl::StatusOr<TokenizeResult> Tokenize(const TokenizeInput& input,
                                          const BuildContext& context = {}) const;

  // `name` resolved for `tenant`: its own prefix of that name, else the shared one; nullopt
  // when neither is registered.
  std::optional<ResolvedPrefix> ResolvePrefix(std::string_view tenant,
                                              const std::string& name) const;

  const RequestLimits& limits() const { return limits_; }
  // The most bytes of input text a request may carry: what the model's context could hold at
  // the longest token string of the vocabulary, with room for normalizers that shrink text.
  int64_t max_input_bytes() const { return max_input_bytes_; }

 private:
  // The token ids of `input` (the field named `field` when it is text), with sequence-start
  // tokens on text when `add_special_tokens`.
  absl::StatusOr<std::vector<int32_t>> InputIds(const PromptInput& input, bool add_special_tokens,
                                                const BuildContext& context) const;
  // Ids of a chat rendered with the model's template; `field` names the input in errors.
  absl::StatusOr<std::vector<int32_t>> ChatIds(const PromptInput& input, const std::string& field,
                                               bool add_generation_prompt,
                                               const BuildContext& context) const;
  // Ids of `text` (the input named `field`), refused unread when over max_input_bytes().
  absl::StatusOr<std::vector<int32_t>> TextIds(const std::string& text, const std::string& field,
                                               bool add_special_tokens) const;
  // Compiles the output constraint (errors name "constraint.<kind>").
  absl::Status BuildConstraint(const constraint::ConstraintSpec& spec,
                               GenerationRequest* out) const;
  absl::Status BuildSampling(const SamplingInput& sampling, GenerationRequest* out) const;
  // Beams, returned sequences and log-probabilities (after the sampling fields).
  absl::Status BuildSequences(const SamplingInput& sampling, GenerationRequest* out) const;
  absl::Status BuildCache(const CacheInput& cache, GenerationRequest* out) const;
  // The request's size against the server's bounds: the context (a prompt that alone fills it
  // is refused naming `prompt_field`; empty for a session turn, whose history the engine
  // counts), rows x tokens, answer bytes.
  absl::Status CheckSize(GenerationRequest& out, std::string_view prompt_field) const;
  // A session turn: `input` names an open session.
  absl::StatusOr<GenerationRequest> SessionTurn(const GenerationInput& input,
                                                const BuildContext& context) const;
  // The snapshot of the prefix of qualified name `qualified` in the published catalog; null
  // when absent.
  std::shared_ptr<const cache::Snapshot> FindPrefix(const std::string& qualified) const;

  const model::ModelInfo& model_info_;
  const tokenizer::Tokenizer* tokenizer_;
  RequestLimits limits_;
  // Null without a tokenizer (constraints need the vocabulary's bytes).
  std::unique_ptr<constraint::ConstraintCompiler> constraints_;
  CatalogSource catalog_;
  SessionSource sessions_;
  int64_t max_input_bytes_;
};

}  // namespace kvserve::server
