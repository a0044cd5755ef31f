// TenantLimits: fair shares of the global limits by default with an API keys file.
#include "server/tenant_limits.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace kvserve::server {
namespace {

// `flag` when given (>= 0), else `global / shares` (at least 1) with keys, else 0.
int64_t Resolve(int64_t flag, bool keys, int64_t global, int64_t shares) {
  if (flag >= 0) return flag;
  if (!keys) return 0;
  return std::max<int64_t>(1, global / shares);
}

}  // namespace

TenantLimits ResolveTenantLimits(const ServerOptions& options, int64_t num_key_tenants,
                                 int64_t prefix_cache_bytes) {
  const bool keys = !options.api_keys_file.empty();
  const int64_t shares = std::max<int64_t>(num_key_tenants, 1) + 1;
  TenantLimits limits;
  limits.max_sessions = Resolve(options.tenant_max_sessions, keys, options.max_sessions, shares);
  limits.max_queued_requests = static_cast<int>(std::min<int64_t>(
      Resolve(options.tenant_queued_requests, keys, options.scheduler.max_queue, shares),
      std::numeric_limits<int>::max()));
  limits.max_prefix_bytes = Resolve(options.tenant_prefix_bytes, keys, prefix_cache_bytes, shares);
  return limits;
}

std::string DescribeTenantLimits(const TenantLimits& limits, const ServerOptions& options,
                                 int64_t num_key_tenants) {
  const auto show = [](int64_t value) {
    return value > 0 ? absl::StrCat(value) : std::string("no limit");
  };
  std::string text = absl::StrCat(
      "per-tenant limits: ", show(limits.max_sessions), " sessions (--tenant-max-sessions), ",
      show(limits.max_queued_requests), " queued requests (--tenant-max-queued-requests), ",
      show(limits.max_prefix_bytes), " prefix bytes (--tenant-max-prefix-bytes)");
  if (!options.api_keys_file.empty()) {
    absl::StrAppend(&text, "; unset ones are fair shares among the ", num_key_tenants,
                    " tenants of --api-keys-file and one more");
  }
  return text;
}

}  // namespace kvserve::server
