// kvctl bench: N streaming requests of synthetic prompts, C at a time, measuring time to first
// token, inter-token latency, output tokens/s and requests/s.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/command_line.h"
#include "client/bench_stats.h"
#include "client/client.h"
#include "client/flags.h"
#include "kvserve/v1/generation.pb.h"

namespace kvserve::client {

// What the requests' prompts look like.
enum class BenchWorkload {
  // Every prompt its own: --prompt-tokens pseudo-random ids, no two sharing a prefix.
  kRandom,
  // SGLang's "generated-shared-prefix": groups x prompts_per_group requests; each group has its
  // own system prompt of system_prompt_tokens, each request appends its own question of
  // question_tokens. Requests go round-robin over the groups (request i: group i % groups),
  // so a group's first request computes its system prompt while others of the group follow.
  kSharedPrefix,
};

struct BenchOptions {
  BenchWorkload workload = BenchWorkload::kRandom;
  // kSharedPrefix (requests = groups * prompts_per_group; defaults scaled to a 2-core CPU).
  int groups = 4;
  int prompts_per_group = 8;
  int system_prompt_tokens = 512;
  int question_tokens = 64;
  int concurrency = 1;               // requests in flight at once, >= 1
  int requests = 16;                 // measured requests, >= 1
  int prompt_tokens = 32;            // synthetic input tokens per request, >= 1
  int max_new_tokens = 32;           // tokens generated per request (EOS ignored), >= 1
  int warmup = 1;                    // unmeasured requests run first, >= 0
  std::string prefix;                // GenerateRequest.prefix; empty: none
  std::string cache_implementation;  // CacheOptions.cache_implementation; empty: unset
  bool skip_prefix_reuse = false;    // CacheOptions.skip_prefix_reuse
  CallOptions call;                  // per-request deadline
};

// What one benchmark run measured (warm-up requests excluded).
struct BenchReport {
  BenchOptions options;
  int succeeded = 0;          // requests whose stream ended OK
  int errors = 0;             // requests whose stream ended with an error
  std::string first_error;    // "CODE: message" of the first error; empty when none
  int64_t output_tokens = 0;  // tokens received, over all requests
  double wall_s = 0;          // from the first request sent to the last stream's end
  double output_tokens_per_s = 0;
  double requests_per_s = 0;  // succeeded / wall_s
  LatencySummary ttft_ms;     // send to first message with tokens, per request
  LatencySummary itl_ms;      // gap between token arrivals, per token
  // From the servers' usage (requests whose stream ended OK): prompt tokens, and of them those
  // a cached prefix supplied; requests with any cached token.
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int requests_with_cache_hit = 0;
  double cache_hit_rate = 0;  // cached_tokens / prompt_tokens
  // Requests (failed ones included) by the replica that served them (x-kvserve-replica); those
  // whose server named none are under "".
  std::map<std::string, int> requests_by_replica;
};

// The flags of `kvctl bench`.
std::vector<base::FlagSpec> BenchFlagSpecs();

// Options from flags parsed with BenchFlagSpecs() (the per-call timeout is the caller's);
// InvalidArgument naming the flag when a value is malformed or out of range.
absl::StatusOr<BenchOptions> ParseBenchOptions(const ParsedFlags& flags);

// InvalidArgument when the requests cannot be served by this model: prompt + new tokens
// beyond its context, max_new_tokens beyond the server's limit, or no token id left to use.
absl::Status CheckBenchFitsModel(const BenchOptions& options, const v1::ModelInfo& info);

// `length` deterministic pseudo-random ids in [0, vocab_size) for request `request_index`,
// different for each index and never one of `avoid_ids` (the model's special tokens).
// Requires vocab_size > avoid_ids.size().
std::vector<int32_t> SyntheticPrompt(int64_t request_index, int length, int32_t vocab_size,
                                     const std::vector<int32_t>& avoid_ids);

// The prompt of request `index` (measured requests 0..requests-1, warm-up ones after) under
// options.workload; warm-up prompts never share a prefix with measured ones.
std::vector<int32_t> BenchPrompt(const BenchOptions& options, int64_t index, int32_t vocab_size,
                                 const std::vector<int32_t>& avoid_ids);

// The streaming request bench sends: `prompt` as token ids, max_new_tokens, ignore_eos, and
// the prefix and cache implementation when set.
v1::GenerateRequest BenchRequest(const BenchOptions& options, const std::vector<int32_t>& prompt);

// Called on RunBench's thread about every 100 ms and at the end of each phase ("warmup",
// "bench") with the requests finished and the phase's total.
using BenchProgress = std::function<void(const std::string& phase, int finished, int total)>;

// Runs options.warmup then options.requests requests, options.concurrency at a time, against
// the model `info` describes; a failed request is counted, not fatal. Blocks until done.
BenchReport RunBench(const Client& client, const BenchOptions& options, const v1::ModelInfo& info,
                     const BenchProgress& progress);

// Human-readable report, several lines.
std::string BenchReportText(const BenchReport& report);
// One JSON object (one line) with every number of the report; absent latencies are null.
std::string BenchReportJson(const BenchReport& report);

}  // namespace kvserve::client
