// The names and descriptions of prefix-store entries (no LibTorch): namespaces, qualified
// names, what a named entry is kept with and what the store tells of one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/time/time.h"
#include "cache/retention.h"

namespace kvserve::cache {

// Namespaces. Every entry belongs to one: a tenant's (named after the tenant) or the shared
// one (kSharedSpace), which every tenant reads. Named entries are stored under qualified names,
// "<tenant>/<name>" in a tenant's namespace and "<name>" alone in the shared one (names and
// tenants hold no '/'); automatic entries belong to the namespace of the sequence that
// computed them. A lookup for a tenant sees its own namespace and the shared one, never
// another tenant's.
inline constexpr std::string_view kSharedSpace = "";

// The qualified name of `name` in namespace `space`.
std::string QualifiedPrefixName(std::string_view space, std::string_view name);
// {namespace, name} of a qualified name (the text before the first '/', if any).
std::pair<std::string_view, std::string_view> SplitQualifiedPrefixName(std::string_view qualified);

struct NamedPrefixOptions {
  // A pinned entry is never evicted for space (its TTL still applies).
  bool pinned = true;
  // An unpinned entry's class in the retention order (see retention.h): when the device store
  // needs room it is demoted to the host and disk tiers (when there are any) in that order.
  RetentionClass retention = RetentionClass::kNormal;
  // > 0. The entry is dropped once created_at + ttl has been reached.
  absl::Duration ttl = absl::InfiniteDuration();
  // The cache strategy the prefix was registered for ("static", ...), as it was given.
  std::string cache_implementation;

  bool operator==(const NamedPrefixOptions&) const = default;
};

// What the store knows about a named entry.
struct PrefixInfo {
  std::string name;  // qualified (see QualifiedPrefixName)
  int64_t num_tokens = 0;
  int64_t bytes = 0;
  std::string fingerprint;
  absl::Time created_at;    // when this content was put (a replacement resets it)
  absl::Time last_used_at;  // last put, GetNamed or Lookup hit
  int64_t hits = 0;         // GetNamed and Lookup hits on this content
  NamedPrefixOptions options;
  bool referenced = false;  // someone outside the store holds the snapshot now
  // "device" (the prefix store), "host" or "disk" (a lower tier holds it; see snapshot_tiers.h).
  std::string tier = "device";
};

}  // namespace kvserve::cache
