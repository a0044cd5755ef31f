// TenantLimits: the per-tenant limits in force, from the --tenant-max-* flags or their
// fair-share defaults when an API keys file makes several tenants.
#pragma once

#include <cstdint>
#include <string>

#include "server/server_options.h"

namespace kvserve::server {

// What one tenant may hold at most; 0: no limit of its own (the global limits only).
struct TenantLimits {
  int64_t max_sessions = 0;      // open sessions (--tenant-max-sessions)
  int max_queued_requests = 0;   // requests waiting for admission (--tenant-max-queued-requests)
  int64_t max_prefix_bytes = 0;  // prefix snapshot bytes (--tenant-max-prefix-bytes)

  bool operator==(const TenantLimits&) const = default;
};

// The limits of `options`: a flag given (>= 0) is kept; an unset one (-1) is, with
// --api-keys-file, a fair share of its global limit -- the limit divided by the keys file's
// tenants plus one (the shared namespace and tenants from client certificates), at least 1 --
// and no limit without keys. `num_key_tenants`: the distinct tenants the keys file names at
// start-up (a SIGHUP reload keeps the limits); `prefix_cache_bytes`: the prefix budget in force
// (--prefix-cache-bytes resolved).
TenantLimits ResolveTenantLimits(const ServerOptions& options, int64_t num_key_tenants,
                                 int64_t prefix_cache_bytes);

// One line for the start-up log: the limits and where they come from.
std::string DescribeTenantLimits(const TenantLimits& limits, const ServerOptions& options,
                                 int64_t num_key_tenants);

}  // namespace kvserve::server
