// kvctl bench (see kvctl_bench.h).
#include "client/kvctl_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"

namespace kvserve::client {
namespace {

using SteadyClock = std::chrono::steady_clock;

double MillisBetween(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// SplitMix64: a fixed, well-mixed sequence from any seed.
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// What one streamed request measured.
struct Sample {
  absl::Status status;
  std::optional<double> ttft_ms;
  std::vector<double> itl_ms;  // one per token after the first message's
  int64_t tokens = 0;
  std::string replica_id;     // who served it; empty when unknown
  int64_t prompt_tokens = 0;  // the server's usage, from the stream's last message
  int64_t cached_tokens = 0;
};

Sample RunOne(const Client& client, const v1::GenerateRequest& request, const CallOptions& call) {
  Sample sample;
  CallInfo info;
  const SteadyClock::time_point sent = SteadyClock::now();
  SteadyClock::time_point last = sent;
  sample.status = client.GenerateStream(
      request,
      [&](const v1::GenerateStreamResponse& message) {
        if (message.has_usage()) {
          sample.prompt_tokens = message.usage().prompt_tokens();
          sample.cached_tokens = message.usage().cached_tokens();
        }
        const int n = message.token_ids_size();
        if (n == 0) return true;
        const SteadyClock::time_point now = SteadyClock::now();
        if (!sample.ttft_ms.has_value()) {
          sample.ttft_ms = MillisBetween(sent, now);
        } else {
          // A message carrying several tokens spreads its gap evenly over them.
          sample.itl_ms.insert(sample.itl_ms.end(), n, MillisBetween(last, now) / n);
        }
        last = now;
        sample.tokens += n;
        return true;
      },
      call, &info);
  sample.replica_id = std::move(info.replica_id);
  return sample;
}

// Runs requests [first_index, first_index + count), `concurrency` at a time.
std::vector<Sample> RunPhase(const Client& client, const BenchOptions& options,
                             const v1::ModelInfo& info, const std::vector<int32_t>& avoid,
                             int64_t first_index, int count, const std::string& phase,
                             const BenchProgress& progress) {
  std::vector<Sample> samples(count);
  if (count == 0) return samples;
  std::atomic<int> next{0};
  struct Finished {
    absl::Mutex mu;
    int count ABSL_GUARDED_BY(mu) = 0;
  } finished;
  auto worker = [&] {
    for (int i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
      const v1::GenerateRequest request =
          BenchRequest(options, BenchPrompt(options, first_index + i, info.vocab_size(), avoid));
      samples[i] = RunOne(client, request, options.call);
      absl::MutexLock lock(&finished.mu);
      ++finished.count;
    }
  };
  std::vector<std::thread> threads;
  const int num_threads = std::min(options.concurrency, count);
  threads.reserve(num_threads);
  for (int t = 0; t < num_threads; ++t) threads.emplace_back(worker);
  {
    auto all_finished = [&finished, count]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return finished.count == count;  // Await calls it with the mutex held
    };
    absl::MutexLock lock(&finished.mu);
    while (!finished.mu.AwaitWithTimeout(absl::Condition(&all_finished), absl::Milliseconds(100))) {
      if (progress) progress(phase, finished.count, count);
    }
  }
  for (std::thread& t : threads) t.join();
  if (progress) progress(phase, count, count);
  return samples;
}

nlohmann::json OptionalJson(const std::optional<double>& value) {
  return value.has_value() ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

nlohmann::json SummaryJson(const LatencySummary& s) {
  return {{"p50", OptionalJson(s.p50)},
          {"p99", OptionalJson(s.p99)},
          {"mean", OptionalJson(s.mean)},
          {"count", s.count}};
}

std::string FormatMs(const std::optional<double>& value) {
  return value.has_value() ? absl::StrFormat("%.2f", *value) : "n/a";
}

}  // namespace

std::vector<base::FlagSpec> BenchFlagSpecs() {
  return {
      {"concurrency", "requests in flight at once", "1"},
      {"requests", "measured requests", "16"},
      {"prompt-tokens", "synthetic prompt length in tokens", "32"},
      {"max-new-tokens", "tokens generated per request (EOS ignored)", "32"},
      {"warmup", "unmeasured requests sent first", "1"},
      {"prefix", "registered prefix every request starts with", ""},
      {"cache-implementation", "cache strategy of every request", "server: dynamic"},
      {"no-prefix-reuse", "compute every prompt in full (no cached-prefix copies)", "", true},
      {"workload",
       "random (every prompt its own) | shared-prefix (groups of prompts sharing a system "
       "prompt, SGLang's generated-shared-prefix)",
       "random"},
      {"groups", "shared-prefix: system prompts (groups)", "4"},
      {"prompts-per-group", "shared-prefix: requests per group", "8"},
      {"system-prompt-tokens", "shared-prefix: tokens of each group's system prompt", "512"},
      {"question-tokens", "shared-prefix: tokens each request adds to its system prompt", "64"},
  };
}

absl::StatusOr<BenchOptions> ParseBenchOptions(const ParsedFlags& flags) {
  BenchOptions options;
  struct IntFlag {
    const char* name;
    int* out;
    int min;
  };
  for (const IntFlag& f :
       {IntFlag{"concurrency", &options.concurrency, 1}, IntFlag{"requests", &options.requests, 1},
        IntFlag{"prompt-tokens", &options.prompt_tokens, 1},
        IntFlag{"max-new-tokens", &options.max_new_tokens, 1},
        IntFlag{"warmup", &options.warmup, 0}, IntFlag{"groups", &options.groups, 1},
        IntFlag{"prompts-per-group", &options.prompts_per_group, 1},
        IntFlag{"system-prompt-tokens", &options.system_prompt_tokens, 1},
        IntFlag{"question-tokens", &options.question_tokens, 1}}) {
    absl::StatusOr<std::optional<int32_t>> value = flags.GetInt32(f.name);
    if (!value.ok()) return value.status();
    if (!value->has_value()) continue;
    if (**value < f.min) {
      return absl::InvalidArgumentError(absl::StrCat("--", f.name, " must be >= ", f.min));
    }
    *f.out = **value;
  }
  const std::string workload = flags.flags.GetString("workload");
  if (workload == "shared-prefix") {
    options.workload = BenchWorkload::kSharedPrefix;
    const bool sized = flags.flags.Has("requests") || flags.flags.Has("prompt-tokens");
    if (sized) {
      return absl::InvalidArgumentError(
          "--workload shared-prefix sizes its requests with --groups, --prompts-per-group, "
          "--system-prompt-tokens and --question-tokens; leave --requests and --prompt-tokens "
          "unset");
    }
    options.requests = options.groups * options.prompts_per_group;
    options.prompt_tokens = options.system_prompt_tokens + options.question_tokens;
  } else if (!workload.empty() && workload != "random") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--workload must be random or shared-prefix, got '", workload.substr(0, 64), "'"));
  }
  options.prefix = flags.flags.GetString("prefix");
  options.cache_implementation = flags.flags.GetString("cache-implementation");
  options.skip_prefix_reuse = flags.GetSwitch("no-prefix-reuse").value_or(false);
  return options;
}

absl::Status CheckBenchFitsModel(const BenchOptions& options, const v1::ModelInfo& info) {
  const int64_t total = int64_t{options.prompt_tokens} + options.max_new_tokens;
  if (info.max_position_embeddings() > 0 && total > info.max_position_embeddings()) {
    return absl::InvalidArgumentError(absl::StrCat("--prompt-tokens + --max-new-tokens = ", total,
                                                   " exceeds the model's context of ",
                                                   info.max_position_embeddings()));
  }
  if (info.max_new_tokens_limit() > 0 && options.max_new_tokens > info.max_new_tokens_limit()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-new-tokens exceeds the server's limit of ", info.max_new_tokens_limit()));
  }
  const int64_t special = info.eos_token_ids_size() + (info.has_bos_token_id() ? 1 : 0);
  if (info.vocab_size() <= special) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's vocabulary (", info.vocab_size(), ") has no ordinary token"));
  }
  return absl::OkStatus();
}

std::vector<int32_t> SyntheticPrompt(int64_t request_index, int length, int32_t vocab_size,
                                     const std::vector<int32_t>& avoid_ids) {
  std::vector<int32_t> avoid;
  for (int32_t id : avoid_ids) {
    if (id >= 0 && id < vocab_size) avoid.push_back(id);
  }
  std::sort(avoid.begin(), avoid.end());
  avoid.erase(std::unique(avoid.begin(), avoid.end()), avoid.end());
  const uint64_t usable = static_cast<uint64_t>(vocab_size) - avoid.size();
  // The r-th id in [0, vocab_size) that is not avoided.
  auto usable_id = [&](uint64_t r) {
    int64_t id = static_cast<int64_t>(r);
    for (int32_t a : avoid) {
      if (a <= id) ++id;
    }
    return static_cast<int32_t>(id);
  };
  std::vector<int32_t> ids;
  ids.reserve(length);
  uint64_t state = static_cast<uint64_t>(request_index);
  for (int i = 0; i < length; ++i) {
    // The first id alone tells requests apart (up to `usable` of them), so that no two
    // share a cached prefix.
    const uint64_t r =
        i == 0 ? static_cast<uint64_t>(request_index) % usable : SplitMix64(state) % usable;
    ids.push_back(usable_id(r));
  }
  return ids;
}

std::vector<int32_t> BenchPrompt(const BenchOptions& options, int64_t index, int32_t vocab_size,
                                 const std::vector<int32_t>& avoid_ids) {
  if (options.workload == BenchWorkload::kRandom || index >= options.requests) {
    return SyntheticPrompt(index, options.prompt_tokens, vocab_size, avoid_ids);
  }
  // System prompts and questions draw from index ranges of their own, past any request's.
  const int64_t group = index % options.groups;
  const int64_t base = int64_t{options.requests} + options.warmup;
  std::vector<int32_t> prompt =
      SyntheticPrompt(base + group, options.system_prompt_tokens, vocab_size, avoid_ids);
  const std::vector<int32_t> question = SyntheticPrompt(
      base + options.groups + index, options.question_tokens, vocab_size, avoid_ids);
  prompt.insert(prompt.end(), question.begin(), question.end());
  return prompt;
}

v1::GenerateRequest BenchRequest(const BenchOptions& options, const std::vector<int32_t>& prompt) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
  if (!options.prefix.empty()) request.set_prefix(options.prefix);
  request.mutable_sampling()->set_max_new_tokens(options.max_new_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  if (!options.cache_implementation.empty()) {
    request.mutable_cache()->set_cache_implementation(options.cache_implementation);
  }
  if (options.skip_prefix_reuse) request.mutable_cache()->set_skip_prefix_reuse(true);
  return request;
}

BenchReport RunBench(const Client& client, const BenchOptions& options, const v1::ModelInfo& info,
                     const BenchProgress& progress) {
  std::vector<int32_t> avoid(info.eos_token_ids().begin(), info.eos_token_ids().end());
  if (info.has_bos_token_id()) avoid.push_back(info.bos_token_id());
  // Warm-up prompts come after the measured ones, so that none is cached for a measured one.
  RunPhase(client, options, info, avoid, options.requests, options.warmup, "warmup", progress);
  const SteadyClock::time_point start = SteadyClock::now();
  std::vector<Sample> samples =
      RunPhase(client, options, info, avoid, 0, options.requests, "bench", progress);
  BenchReport report;
  report.options = options;
  report.wall_s = MillisBetween(start, SteadyClock::now()) / 1000.0;
  std::vector<double> ttft_ms;
  std::vector<double> itl_ms;
  for (const Sample& s : samples) {
    ++report.requests_by_replica[s.replica_id];
    report.output_tokens += s.tokens;
    if (s.status.ok()) {
      ++report.succeeded;
    } else {
      if (report.errors++ == 0) {
        report.first_error =
            absl::StrCat(absl::StatusCodeToString(s.status.code()), ": ", s.status.message());
      }
    }
    if (s.status.ok()) {
      report.prompt_tokens += s.prompt_tokens;
      report.cached_tokens += s.cached_tokens;
      if (s.cached_tokens > 0) ++report.requests_with_cache_hit;
    }
    if (s.ttft_ms.has_value()) ttft_ms.push_back(*s.ttft_ms);
    itl_ms.insert(itl_ms.end(), s.itl_ms.begin(), s.itl_ms.end());
  }
  if (report.wall_s > 0) {
    report.output_tokens_per_s = report.output_tokens / report.wall_s;
    report.requests_per_s = report.succeeded / report.wall_s;
  }
  report.ttft_ms = Summarize(ttft_ms);
  report.itl_ms = Summarize(itl_ms);
  if (report.prompt_tokens > 0) {
    report.cache_hit_rate =
        static_cast<double>(report.cached_tokens) / static_cast<double>(report.prompt_tokens);
  }
  return report;
}

std::string BenchReportText(const BenchReport& r) {
  const BenchOptions& o = r.options;
  std::string out =
      absl::StrFormat("requests: %d (concurrency %d, prompt %d tokens, %d new tokens, warmup %d)\n",
                      o.requests, o.concurrency, o.prompt_tokens, o.max_new_tokens, o.warmup);
  if (o.workload == BenchWorkload::kSharedPrefix) {
    absl::StrAppend(&out, absl::StrFormat("workload: shared-prefix, %d groups x %d prompts, system "
                                          "prompt %d tokens + question %d tokens\n",
                                          o.groups, o.prompts_per_group, o.system_prompt_tokens,
                                          o.question_tokens));
  }
  absl::StrAppend(&out, "succeeded: ", r.succeeded, "  errors: ", r.errors, "\n");
  if (!r.first_error.empty()) absl::StrAppend(&out, "first error: ", r.first_error, "\n");
  absl::StrAppend(&out, "TTFT ms: p50 ", FormatMs(r.ttft_ms.p50), "  p99 ", FormatMs(r.ttft_ms.p99),
                  "  mean ", FormatMs(r.ttft_ms.mean), "\n");
  absl::StrAppend(&out, "ITL ms:  p50 ", FormatMs(r.itl_ms.p50), "  p99 ", FormatMs(r.itl_ms.p99),
                  "  mean ", FormatMs(r.itl_ms.mean), "\n");
  absl::StrAppend(
      &out, absl::StrFormat("output tokens: %d in %.3f s: %.1f tokens/s, %.2f requests/s\n",
                            r.output_tokens, r.wall_s, r.output_tokens_per_s, r.requests_per_s));
  absl::StrAppend(&out,
                  absl::StrFormat("cache hits: %d of %d prompt tokens (%.1f %%), %d requests\n",
                                  r.cached_tokens, r.prompt_tokens, 100.0 * r.cache_hit_rate,
                                  r.requests_with_cache_hit));
  // Through a gateway: how the requests spread over the replicas.
  const bool any_named = std::any_of(r.requests_by_replica.begin(), r.requests_by_replica.end(),
                                     [](const auto& entry) { return !entry.first.empty(); });
  if (any_named) {
    std::vector<std::string> counts;
    for (const auto& [replica, n] : r.requests_by_replica) {
      counts.push_back(absl::StrCat(replica.empty() ? "unknown" : replica, "=", n));
    }
    absl::StrAppend(&out, "replicas: ", absl::StrJoin(counts, " "), "\n");
  }
  return out;
}

std::string BenchReportJson(const BenchReport& r) {
  const BenchOptions& o = r.options;
  nlohmann::json json = {
      {"concurrency", o.concurrency},
      {"requests", o.requests},
      {"prompt_tokens", o.prompt_tokens},
      {"max_new_tokens", o.max_new_tokens},
      {"warmup", o.warmup},
      {"prefix", o.prefix},
      {"cache_implementation", o.cache_implementation},
      {"skip_prefix_reuse", o.skip_prefix_reuse},
      {"workload", o.workload == BenchWorkload::kSharedPrefix ? "shared-prefix" : "random"},
      {"groups", o.groups},
      {"prompts_per_group", o.prompts_per_group},
      {"system_prompt_tokens", o.system_prompt_tokens},
      {"question_tokens", o.question_tokens},
      {"prompt_tokens_total", r.prompt_tokens},
      {"cached_tokens", r.cached_tokens},
      {"requests_with_cache_hit", r.requests_with_cache_hit},
      {"cache_hit_rate", r.cache_hit_rate},
      {"succeeded", r.succeeded},
      {"errors", r.errors},
      {"first_error", r.first_error},
      {"output_tokens", r.output_tokens},
      {"wall_s", r.wall_s},
      {"output_tokens_per_s", r.output_tokens_per_s},
      {"requests_per_s", r.requests_per_s},
      {"ttft_ms", SummaryJson(r.ttft_ms)},
      {"itl_ms", SummaryJson(r.itl_ms)},
      {"route", o.call.route},
      {"requests_by_replica", r.requests_by_replica},
  };
  return json.dump();
}

}  // namespace kvserve::client
