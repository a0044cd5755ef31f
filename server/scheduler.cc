// Scheduler: admission, chunked prefill and decode priority over a token budget per step.
#include "server/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::server {

int64_t StepPlan::num_tokens() const {
  int64_t total = 0;
  for (const ScheduledSequence& s : sequences) total += s.num_tokens * s.rows;
  return total;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& options, std::unique_ptr<AdmissionPolicy> policy) {
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be >= 1, got ", options.max_batch_size));
  }
  if (options.max_batch_tokens < options.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_batch_tokens must be >= max_batch_size (", options.max_batch_size,
        ") so that every running decode fits in a step, got ", options.max_batch_tokens));
  }
  if (options.max_queue < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_queue must be >= 1, got ", options.max_queue));
  }
  if (options.max_running_per_tenant < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_running_per_tenant must be >= 0 (0: no limit), got ", options.max_running_per_tenant));
  }
  if (options.max_queued_per_tenant < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_queued_per_tenant must be >= 0 (0: no limit), got ", options.max_queued_per_tenant));
  }
  if (policy == nullptr) policy = std::make_unique<AdmitAllPolicy>();
  return std::unique_ptr<Scheduler>(new Scheduler(options, std::move(policy)));
}

Scheduler::Scheduler(const SchedulerOptions& options, std::unique_ptr<AdmissionPolicy> policy)
    : options_(options), policy_(std::move(policy)) {}

absl::Status Scheduler::Add(RequestId id, int64_t num_prompt_tokens, int64_t max_new_tokens,
                            int64_t num_cached_tokens, PrefillMode prefill, int64_t rows,
                            std::string_view tenant) {
  if (rows < 1 || rows > options_.max_batch_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", id, ": its ", rows, " rows (beams or sequences) must be in [1, ",
                     options_.max_batch_tokens, "] (--max-batch-tokens)"));
  }
  if (num_prompt_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", id, ": num_prompt_tokens must be >= 1, got ", num_prompt_tokens));
  }
  if (max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", id, ": max_new_tokens must be >= 1, got ", max_new_tokens));
  }
  if (num_cached_tokens < 0 || num_cached_tokens >= num_prompt_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", id, ": num_cached_tokens must be in [0, num_prompt_tokens = ",
                     num_prompt_tokens, "), got ", num_cached_tokens));
  }
  if (requests_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("request ", id, " is already scheduled"));
  }
  if (num_waiting() >= options_.max_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the queue is full (", options_.max_queue, " requests waiting)"));
  }
  if (!tenant.empty() && options_.max_queued_per_tenant > 0) {
    auto count = tenants_.find(tenant);
    if (count != tenants_.end() && count->second.waiting >= options_.max_queued_per_tenant) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tenant '", std::string(tenant), "' already has ", count->second.waiting,
          " requests waiting, its limit (--tenant-max-queued-requests = ",
          options_.max_queued_per_tenant, "); ", count->second.running, " of its requests run",
          options_.max_running_per_tenant > 0 ? absl::StrCat(" (--tenant-max-running-requests = ",
                                                             options_.max_running_per_tenant, ")")
                                              : std::string()));
    }
  }
  Request request;
  request.num_prompt_tokens = num_prompt_tokens;
  request.max_new_tokens = max_new_tokens;
  request.num_cached_tokens = num_cached_tokens;
  request.num_computed = num_cached_tokens;
  request.prefill = prefill;
  request.rows = rows;
  request.tenant = std::string(tenant);
  if (!tenant.empty()) ++tenants_[request.tenant].waiting;
  requests_.emplace(id, std::move(request));
  waiting_.push_back(id);
  return absl::OkStatus();
}

absl::Status Scheduler::SetRows(RequestId id, int64_t rows) {
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return absl::NotFoundError(absl::StrCat("request ", id, " is not held"));
  }
  if (rows < 1 || rows > it->second.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", id, ": rows must be in [1, ", it->second.rows, "], got ", rows));
  }
  it->second.rows = rows;
  return absl::OkStatus();
}

void Scheduler::CountTenant(const Request& r, int waiting, int running) {
  if (r.tenant.empty()) return;
  auto it = tenants_.find(r.tenant);
  if (it == tenants_.end()) it = tenants_.emplace(r.tenant, TenantCount()).first;
  it->second.waiting += waiting;
  it->second.running += running;
  if (it->second.waiting == 0 && it->second.running == 0) tenants_.erase(it);
}

bool Scheduler::AtRunningLimit(const Request& r) const {
  if (r.tenant.empty() || options_.max_running_per_tenant <= 0) return false;
  auto it = tenants_.find(r.tenant);
  return it != tenants_.end() && it->second.running >= options_.max_running_per_tenant;
}

void Scheduler::Forget(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  if (it->second.running) {
    auto pos = std::find(running_.begin(), running_.end(), id);
    KVSERVE_CHECK(pos != running_.end()) << "request " << id << " is running but not in the batch";
    running_.erase(pos);
  } else {
    auto pos = std::find(waiting_.begin(), waiting_.end(), id);
    KVSERVE_CHECK(pos != waiting_.end()) << "request " << id << " is waiting but not queued";
    waiting_.erase(pos);
  }
  CountTenant(it->second, /*waiting=*/it->second.running ? 0 : -1,
              /*running=*/it->second.running ? -1 : 0);
  requests_.erase(it);
}

bool Scheduler::Abort(RequestId id) {
  if (!requests_.contains(id)) return false;
  Forget(id);
  if (in_flight_.has_value()) {
    std::vector<ScheduledSequence>& seqs = in_flight_->sequences;
    auto it = std::find_if(seqs.begin(), seqs.end(),
                           [id](const ScheduledSequence& s) { return s.id == id; });
    if (it != seqs.end()) {
      seqs.erase(it);
      aborted_in_flight_.insert(id);
    }
  }
  return true;
}

absl::StatusOr<StepPlan> Scheduler::Schedule() {
  if (in_flight_.has_value()) {
    return absl::FailedPreconditionError(
        "Schedule called while the previous plan is in flight; call Update first");
  }
  StepPlan plan;
  int64_t budget = options_.max_batch_tokens;

  // Decodes first: one token per row each; admission keeps the rows of the running requests
  // within max_batch_tokens, so they all fit.
  int64_t reserved_rows = 0;
  for (RequestId id : running_) {
    const Request& r = requests_.at(id);
    reserved_rows += r.rows;
    if (r.num_computed < r.num_prompt_tokens) continue;
    // The prompt's step samples from one row; the rows exist from the first token on.
    const int64_t rows = r.num_generated > 0 ? r.rows : 1;
    plan.sequences.push_back({.id = id,
                              .num_tokens = 1,
                              .start_position = r.num_computed,
                              .is_prefill = false,
                              .samples = true,
                              .newly_admitted = false,
                              .rows = rows});
    budget -= rows;
  }
  KVSERVE_DCHECK(budget >= 0) << "the running decodes exceed max_batch_tokens";
  // Forced tokens ride along with their decode from what the budget has left; a decode that
  // cannot run all of them this step does not sample (its last position is not the end).
  for (ScheduledSequence& s : plan.sequences) {
    const Request& r = requests_.at(s.id);
    const int64_t unrun = r.num_prompt_tokens + r.num_generated - r.num_computed;
    if (r.rows != 1 || unrun <= 1) continue;
    const int64_t extra = std::min(unrun - 1, budget);
    s.num_tokens += extra;
    s.samples = extra == unrun - 1;
    budget -= extra;
  }
  // Schedules the next prompt chunk of `r` that fits in the remaining budget (all of the
  // prompt for PrefillMode::kWhole, which is admitted only when it fits or runs alone).
  auto add_prefill_chunk = [&](RequestId id, const Request& r, bool newly_admitted) {
    const int64_t remaining = r.num_prompt_tokens - r.num_computed;
    const int64_t n = r.prefill == PrefillMode::kWhole ? remaining : std::min(remaining, budget);
    KVSERVE_DCHECK(n >= 1) << "request " << id << ": an empty prefill chunk";
    plan.sequences.push_back({.id = id,
                              .num_tokens = n,
                              .start_position = r.num_computed,
                              .is_prefill = true,
                              .samples = r.num_computed + n == r.num_prompt_tokens,
                              .newly_admitted = newly_admitted});
    budget -= n;
  };
  // Then the next prompt chunks of admitted requests still prefilling, oldest first.
  for (RequestId id : running_) {
    if (budget == 0) break;
    const Request& r = requests_.at(id);
    if (r.num_computed >= r.num_prompt_tokens) continue;
    add_prefill_chunk(id, r, /*newly_admitted=*/false);
  }
  // Then admissions, FCFS: the head of the queue blocks the rest until it is admitted. A
  // request whose tenant runs its limit already is passed over (it keeps its place).
  std::vector<RequestId> admitted;
  size_t next = 0;
  while (next < waiting_.size() && budget > 0 &&
         static_cast<int>(running_.size()) < options_.max_batch_size) {
    const RequestId id = waiting_[next];
    Request& r = requests_.at(id);
    if (AtRunningLimit(r)) {
      ++next;
      continue;
    }
    // Its decode rows must fit beside the running ones' (alone, they always do).
    if (!running_.empty() && reserved_rows + r.rows > options_.max_batch_tokens) break;
    const AdmissionPolicy::Answer answer = policy_->Admit({.id = id,
                                                           .num_prompt_tokens = r.num_prompt_tokens,
                                                           .num_cached_tokens = r.num_cached_tokens,
                                                           .max_new_tokens = r.max_new_tokens,
                                                           .admitted_this_step = admitted});
    AdmissionPolicy::Decision decision = answer.decision;
    const int64_t num_cached = std::clamp<int64_t>(
        answer.num_cached_tokens.value_or(r.num_cached_tokens), 0, r.num_prompt_tokens - 1);
    // A whole-prompt request waits (blocking those behind it) for a step with room, or for a
    // step of its own when its prompt exceeds the budget. (Admit has no side effects, so its
    // answer may be dropped.)
    if (decision == AdmissionPolicy::Decision::kAdmit && r.prefill == PrefillMode::kWhole &&
        r.num_prompt_tokens - num_cached > budget && !plan.sequences.empty()) {
      break;
    }
    if (decision == AdmissionPolicy::Decision::kDefer && running_.empty()) {
      decision = AdmissionPolicy::Decision::kReject;
    }
    if (decision == AdmissionPolicy::Decision::kDefer) break;
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(next));
    if (decision == AdmissionPolicy::Decision::kReject) {
      CountTenant(r, /*waiting=*/-1, /*running=*/0);
      requests_.erase(id);
      plan.rejected.push_back(id);
      continue;
    }
    r.num_cached_tokens = num_cached;
    r.num_computed = num_cached;
    r.running = true;
    CountTenant(r, /*waiting=*/-1, /*running=*/1);
    reserved_rows += r.rows;
    running_.push_back(id);
    admitted.push_back(id);
    add_prefill_chunk(id, r, /*newly_admitted=*/true);
  }

  if (!plan.sequences.empty()) in_flight_ = plan;
  return plan;
}

absl::Status Scheduler::Update(absl::Span<const SequenceResult> results) {
  if (!in_flight_.has_value()) {
    return absl::FailedPreconditionError("Update called without a plan in flight");
  }
  const std::vector<ScheduledSequence>& planned = in_flight_->sequences;
  absl::flat_hash_map<RequestId, size_t> index;
  for (size_t i = 0; i < planned.size(); ++i) index[planned[i].id] = i;

  // Check everything before changing anything.
  std::vector<bool> seen(planned.size(), false);
  for (const SequenceResult& result : results) {
    if (aborted_in_flight_.contains(result.id)) continue;
    auto it = index.find(result.id);
    if (it == index.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", result.id, " is not in the plan in flight"));
    }
    if (seen[it->second]) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", result.id, " has more than one result"));
    }
    seen[it->second] = true;
    const ScheduledSequence& s = planned[it->second];
    auto held = requests_.find(s.id);
    KVSERVE_CHECK(held != requests_.end())
        << "request " << s.id << " is in the plan in flight but no longer held";
    const Request& r = held->second;
    if (result.forced_tokens < 0 || (result.forced_tokens > 0 && (!s.samples || r.rows != 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", s.id, " forced ", result.forced_tokens,
                       " tokens in a step that did not sample one row"));
    }
    if (s.samples && r.num_generated + 1 + result.forced_tokens >= r.max_new_tokens &&
        !result.finished) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", s.id, " sampled its last allowed token (max_new_tokens = ", r.max_new_tokens,
          ") but is not finished"));
    }
  }
  for (size_t i = 0; i < planned.size(); ++i) {
    if (!seen[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", planned[i].id, " was scheduled but has no result"));
    }
  }

  for (const SequenceResult& result : results) {
    if (aborted_in_flight_.contains(result.id)) continue;
    // Checked above: every result not aborted is of a held request in the plan.
    auto planned_at = index.find(result.id);
    KVSERVE_CHECK(planned_at != index.end()) << "request " << result.id << " left the plan";
    const ScheduledSequence& s = planned[planned_at->second];
    auto held = requests_.find(s.id);
    KVSERVE_CHECK(held != requests_.end()) << "request " << s.id << " left the scheduler";
    Request& r = held->second;
    r.num_computed += s.num_tokens;
    if (s.samples) ++r.num_generated;
    r.num_generated += result.forced_tokens;
    if (result.finished) Forget(s.id);
  }
  in_flight_.reset();
  aborted_in_flight_.clear();
  return absl::OkStatus();
}

std::optional<int64_t> Scheduler::num_generated(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return std::nullopt;
  return it->second.num_generated;
}

}  // namespace kvserve::server
