// API keys: the --api-keys-file (YAML or JSON) mapping SHA-256 digests of keys to tenants and
// roles, and the authentication of a call's `authorization: Bearer KEY` metadata. The file
// holds no plaintext keys; a presented key is hashed and compared with every entry in
// constant time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvserve::server {

// What a key may do: users generate and manage their own tenant's prefixes and sessions;
// admins may also register shared prefixes that every tenant can use.
enum class Role { kUser, kAdmin };

// "user" or "admin".
const char* RoleName(Role role);

// The tenant of every call when no caller is authenticated (no API keys, no tenants from
// client certificates): one namespace, with the admin role.
inline constexpr char kDefaultTenant[] = "default";

// Who a call is made for.
struct Principal {
  std::string tenant;
  Role role = Role::kUser;

  bool operator==(const Principal&) const = default;
};

// Whether `name` can name a tenant: 1 to 64 characters of [A-Za-z0-9._-].
bool IsValidTenantName(std::string_view name);

// The SHA-256 digest of `data`.
std::array<uint8_t, 32> Sha256(std::string_view data);
// Lower-case hexadecimal of `digest`.
std::string HexDigest(const std::array<uint8_t, 32>& digest);

// One loaded keys file. Immutable; any thread.
class ApiKeys {
 public:
  // Parses a keys file: a YAML or JSON list of entries {key_sha256: <64 hex digits>, tenant:
  // <name>, role: user|admin} (role unset: user), or an object {keys: [...]} holding that
  // list. InvalidArgument "<source>: keys[i].<field>: ..." for a malformed entry, an unknown
  // field, a duplicated digest or an empty list.
  static absl::StatusOr<std::shared_ptr<const ApiKeys>> Parse(std::string_view text,
                                                              std::string_view source);
  // Reads and parses the file at `path` (at most 16 MiB, a regular file).
  static absl::StatusOr<std::shared_ptr<const ApiKeys>> Load(const std::string& path);

  // The principal of a presented key, or nullopt. Every entry is compared, byte for byte
  // without an early exit, whatever matches.
  std::optional<Principal> Find(std::string_view key) const;

  size_t size() const { return entries_.size(); }
  // The tenants the entries name, sorted, each once.
  std::vector<std::string> tenants() const;

 private:
  struct Entry {
    std::array<uint8_t, 32> digest;
    Principal principal;
  };
  explicit ApiKeys(std::vector<Entry> entries) : entries_(std::move(entries)) {}

  std::vector<Entry> entries_;
};

// The key of an `authorization` metadata value "Bearer KEY" (the scheme case-insensitive, one
// or more spaces). InvalidArgument saying what is wrong otherwise.
absl::StatusOr<std::string_view> BearerKey(std::string_view authorization);

// The keys in force: loaded from a file at start, reloaded on demand (SIGHUP). Thread-safe.
class ApiKeyRegistry {
 public:
  // Loads `path`; the error names the file.
  static absl::StatusOr<std::unique_ptr<ApiKeyRegistry>> Open(std::string path);

  // Reads the file again; on error the keys in force stay and the error is returned.
  absl::Status Reload();

  // The caller of a call whose `authorization` metadata is `authorization` (nullopt: absent).
  // UNAUTHENTICATED when it is absent, malformed or names no key.
  absl::StatusOr<Principal> Authenticate(std::optional<std::string_view> authorization) const;

  std::shared_ptr<const ApiKeys> keys() const;
  const std::string& path() const { return path_; }

 private:
  ApiKeyRegistry(std::string path, std::shared_ptr<const ApiKeys> keys)
      : path_(std::move(path)), keys_(std::move(keys)) {}

  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const ApiKeys> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::server
