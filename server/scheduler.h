// Scheduler: the engine's continuous-batching state machine (admission, chunked prefill,
// decode priority); pure bookkeeping, no threads, no I/O, no tensors.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvserve::server {

// The engine's id of a request; unique among the requests a Scheduler holds.
using RequestId = uint64_t;

// Validated by Scheduler::Create. Flag names are the server's.
struct SchedulerOptions {
  // --max-batch-size: sequences in the running batch at most (admitted and not finished,
  // whether prefilling or decoding). >= 1.
  int max_batch_size = 32;
  // --max-batch-tokens: tokens one step runs at most, decodes and prefill chunks together.
  // >= max_batch_size, so that every running decode fits in every step.
  int64_t max_batch_tokens = 2048;
  // --max-queue: requests waiting for admission at most; Add beyond it is RESOURCE_EXHAUSTED.
  // >= 1.
  int max_queue = 256;
  // --tenant-max-running-requests: requests of one tenant in the running batch at most; the
  // tenant's others wait without blocking other tenants' requests behind them. 0: no limit.
  int max_running_per_tenant = 0;
  // --tenant-max-queued-requests: requests of one tenant waiting at most; Add beyond it is
  // RESOURCE_EXHAUSTED naming the flag. 0: no limit.
  int max_queued_per_tenant = 0;
};

// How a request's prompt may be split over steps.
enum class PrefillMode {
  // In chunks that fit each step's token budget beside the running decodes (the default).
  kChunked,
  // In one step, as the reference's generate() does: for caches whose contents depend on how
  // updates are split (quantized caches quantize per update and show a prefill's own keys
  // unquantized). The request waits at the head of the queue until a step has room for its
  // whole prompt; a prompt longer than max_batch_tokens runs in a step of its own.
  kWhole,
};

// What the engine is asked about a waiting request before it is admitted.
struct AdmissionQuery {
  RequestId id = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // of the prompt, supplied by a prefix snapshot
  int64_t max_new_tokens = 0;
  // Requests admitted earlier in the same Schedule call: their caches are not built yet, so
  // the answer must count them as if they were.
  absl::Span<const RequestId> admitted_this_step;

  // Tokens the request's cache may hold at most: its prompt plus max_new_tokens - 1 (the last
  // generated token is never run).
  int64_t max_cache_tokens() const { return num_prompt_tokens + max_new_tokens - 1; }
};

// The KV-memory hook: the engine decides whether a request's cache fits next to the caches
// of the running requests. Called only from Scheduler::Schedule, on the engine thread; must
// have no side effects (the scheduler may ask again next step).
class AdmissionPolicy {
 public:
  enum class Decision {
    kAdmit,   // fits now
    kDefer,   // does not fit yet; wait until running requests finish (FCFS: later requests
              // wait too). Treated as kReject when nothing is running, since nothing will free.
    kReject,  // can never fit; the request leaves the queue and is listed in StepPlan::rejected
  };
  struct Answer {
    Decision decision = Decision::kAdmit;
    // Prompt tokens a prefix supplies if the request is admitted now (the prefix is chosen at
    // admission); nullopt keeps what Add was given. Must be in [0, num_prompt_tokens).
    std::optional<int64_t> num_cached_tokens;
  };
  virtual ~AdmissionPolicy() = default;
  virtual Answer Admit(const AdmissionQuery& query) = 0;
};

// The default policy: every request fits.
class AdmitAllPolicy final : public AdmissionPolicy {
 public:
  Answer Admit(const AdmissionQuery& query) override { return {}; }
};

// One sequence's work in a step.
struct ScheduledSequence {
  RequestId id = 0;
  // Tokens to run this step (>= 1): 1 for a decode, a chunk of the prompt for a prefill.
  int64_t num_tokens = 0;
  // Absolute position of the first of them: the tokens the sequence's cache holds already.
  int64_t start_position = 0;
  // Runs prompt tokens (false: runs the last generated token).
  bool is_prefill = false;
  // The step ends at the sequence's last known token, so its logits pick a new token. False
  // only for a prefill chunk that stops before the prompt's end.
  bool samples = false;
  // First step since admission: the engine builds the request's cache (and copies its
  // prefix snapshot) before running it.
  bool newly_admitted = false;
  // Batch rows the tokens run in (beams or samples of one request: a decode runs one token
  // per row); a prefill always runs one row.
  int64_t rows = 1;
};

// What one step runs. Sequences come in this order: running decodes, running prefills, newly
// admitted prefills; each group in admission order.
struct StepPlan {
  std::vector<ScheduledSequence> sequences;
  // Requests the admission policy refused for good; they are gone from the scheduler and
  // the engine fails them with RESOURCE_EXHAUSTED.
  std::vector<RequestId> rejected;

  bool empty() const { return sequences.empty(); }
  // Tokens over every row.
  int64_t num_tokens() const;
};

// What the engine reports for one scheduled sequence after the step ran.
struct SequenceResult {
  RequestId id = 0;
  // The request is done (EOS, stop, length, error); the scheduler forgets it and its batch
  // slot is free for the next Schedule. A sequence that sampled its max_new_tokens-th token
  // must be finished.
  bool finished = false;
  // Tokens the request appended after the one it sampled without sampling them (a
  // constraint's jump-forward; one-row requests only): they count as generated, and the
  // request's next decode runs them with the sampled one, in one step.
  int64_t forced_tokens = 0;
};

// Continuous batching with FCFS admission. Each step, every running decode gets one token;
// the rest of the max_batch_tokens budget goes to prompt chunks of running prefills, then to
// new admissions while the batch has room and the admission policy agrees, so a long prefill
// is spread over steps without stalling decodes. The head of the queue blocks those behind
// it (no overtaking, no starvation), except that the requests of a tenant running its
// max_running_per_tenant are passed over until one of them finishes. No preemption: an admitted
// request keeps its slot.
//
// Protocol: Add/Abort at any time; Schedule, run the plan, Update with its results, repeat.
// One plan at a time is in flight. Not thread-safe: owned by the engine thread.
class Scheduler {
 public:
  // InvalidArgument naming the field when `options` is out of range. A null `policy` means
  // AdmitAllPolicy. The policy is owned.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options, std::unique_ptr<AdmissionPolicy> policy = nullptr);

  // Queues a request whose prompt has `num_prompt_tokens` tokens, the first
  // `num_cached_tokens` of which its cache will already hold (copied from a prefix
  // snapshot; the admission policy may revise it at admission). InvalidArgument for counts out of
  // range (the prompt needs >= 1 token, max_new_tokens >= 1, 0 <= cached < prompt so that the last
  // prompt token is computed and gives logits), AlreadyExists for an id the scheduler holds,
  // ResourceExhausted when max_queue requests already wait. Nothing changes on failure.
  //
  // `rows` (>= 1, <= max_batch_tokens: InvalidArgument otherwise) is how many batch rows
  // the request decodes in once its prompt is done (beams, samples); each costs a token of
  // every step's budget. A request is admitted only when the rows of the running ones and
  // its own fit in max_batch_tokens (or nothing else runs).
  //
  // `tenant` (empty: none, no per-tenant limit applies) counts the request against its
  // tenant's max_running_per_tenant and max_queued_per_tenant (ResourceExhausted).
  absl::Status Add(RequestId id, int64_t num_prompt_tokens, int64_t max_new_tokens,
                   int64_t num_cached_tokens = 0, PrefillMode prefill = PrefillMode::kChunked,
                   int64_t rows = 1, std::string_view tenant = {});

  // A running request now decodes in `rows` rows (fewer, when some of its samples ended;
  // rows only shrink). InvalidArgument when rows is not in [1, its rows now]; NotFound for
  // an id not held.
  absl::Status SetRows(RequestId id, int64_t rows);

  // Forgets a waiting or running request (client cancel, deadline), freeing its place at
  // once. If it is in the plan in flight, its result is ignored. Returns false when the id
  // is unknown (already finished or aborted).
  bool Abort(RequestId id);

  // Plans the next step and marks it in flight, unless it has no sequences (nothing can run:
  // then no Update is expected). Requests the policy rejects leave the scheduler here.
  // FailedPrecondition when the previous plan has not been updated yet (nothing changes).
  absl::StatusOr<StepPlan> Schedule();

  // Applies the results of the plan in flight: every scheduled sequence not aborted since
  // must have exactly one result, and no other id may appear. InvalidArgument naming the id
  // otherwise, or when a sequence that sampled its last allowed token is not finished;
  // FailedPrecondition when no plan is in flight. All-or-nothing: on error nothing changes
  // and the plan stays in flight.
  absl::Status Update(absl::Span<const SequenceResult> results);

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  bool has_plan_in_flight() const { return in_flight_.has_value(); }
  // Whether the request is held (waiting or running).
  bool Contains(RequestId id) const { return requests_.contains(id); }
  // Tokens generated so far by a held request; nullopt when it is not held.
  std::optional<int64_t> num_generated(RequestId id) const;

  const SchedulerOptions& options() const { return options_; }

 private:
  struct Request {
    int64_t num_prompt_tokens = 0;
    int64_t max_new_tokens = 0;
    int64_t num_cached_tokens = 0;
    // Tokens the cache holds (cached ones included) once the plans so far have run.
    int64_t num_computed = 0;
    // Tokens generated so far (forced ones included).
    int64_t num_generated = 0;
    bool running = false;
    PrefillMode prefill = PrefillMode::kChunked;
    int64_t rows = 1;    // decode rows (reserved from admission on)
    std::string tenant;  // empty: none
  };
  struct TenantCount {
    int waiting = 0;
    int running = 0;
  };

  Scheduler(const SchedulerOptions& options, std::unique_ptr<AdmissionPolicy> policy);

  // Forgets a held request: its queue entry and its state.
  void Forget(RequestId id);
  // Adds to the counts of r's tenant (none without one).
  void CountTenant(const Request& r, int waiting, int running);
  // Whether r's tenant runs max_running_per_tenant requests already.
  bool AtRunningLimit(const Request& r) const;

  SchedulerOptions options_;
  std::unique_ptr<AdmissionPolicy> policy_;
  absl::flat_hash_map<RequestId, Request> requests_;
  std::deque<RequestId> waiting_;   // FCFS
  std::vector<RequestId> running_;  // admission order
  // Per tenant (requests with one): waiting and running requests; zero counts are erased.
  std::map<std::string, TenantCount, std::less<>> tenants_;
  std::optional<StepPlan> in_flight_;
  // Ids aborted while in the plan in flight, whose results Update ignores.
  absl::flat_hash_set<RequestId> aborted_in_flight_;
};

}  // namespace kvserve::server
