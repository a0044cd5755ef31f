// API keys (see api_keys.h).
#include "server/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/regular_file.h"

namespace kvserve::server {
namespace {

// Keys files are small; anything near this is a mistake.
constexpr int64_t kMaxKeysFileBytes = int64_t{16} << 20;

absl::Status EntryError(std::string_view source, size_t index, std::string_view field,
                        std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": keys[", index, "]",
                                                 field.empty() ? "" : ".", std::string(field), ": ",
                                                 std::string(what)));
}

// The 32 bytes of 64 hexadecimal digits (either case), or nullopt.
std::optional<std::array<uint8_t, 32>> ParseDigest(std::string_view hex) {
  if (hex.size() != 64) return std::nullopt;
  std::array<uint8_t, 32> out{};
  for (size_t i = 0; i < 64; ++i) {
    const char c = hex[i];
    int v = 0;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    out[i / 2] = static_cast<uint8_t>(out[i / 2] << 4 | v);
  }
  return out;
}

}  // namespace

const char* RoleName(Role role) { return role == Role::kAdmin ? "admin" : "user"; }

bool IsValidTenantName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

std::array<uint8_t, 32> Sha256(std::string_view data) {
  std::array<uint8_t, 32> digest{};
  unsigned int length = 0;
  const int ok =
      EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(), nullptr);
  // SHA-256 from the default provider cannot fail on valid arguments.
  if (ok != 1 || length != digest.size()) digest.fill(0);
  return digest;
}

std::string HexDigest(const std::array<uint8_t, 32>& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : digest) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const ApiKeys>> ApiKeys::Parse(std::string_view text,
                                                              std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": not YAML or JSON: ", e.what()));
  }
  YAML::Node list = root;
  if (root.IsMap()) {
    for (const auto& field : root) {
      const std::string key = field.first.IsScalar() ? field.first.Scalar() : "?";
      if (key != "keys") {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(source), ": unknown field '", key,
                         "' (the file is a list of keys or {keys: [...]})"));
      }
    }
    list = root["keys"];
  }
  if (!list.IsSequence()) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source),
                     ": must be a list of {key_sha256, tenant, role} entries or {keys: [...]}"));
  }
  if (list.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": holds no keys"));
  }
  std::vector<Entry> entries;
  std::set<std::array<uint8_t, 32>> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    if (!item.IsMap()) return EntryError(source, i, "", "must be a map {key_sha256, tenant, role}");
    Entry entry;
    bool has_digest = false;
    bool has_tenant = false;
    for (const auto& field : item) {
      const std::string key = field.first.IsScalar() ? field.first.Scalar() : "?";
      if (!field.second.IsScalar()) return EntryError(source, i, key, "must be a string");
      const std::string value = field.second.Scalar();
      if (key == "key_sha256") {
        std::optional<std::array<uint8_t, 32>> digest = ParseDigest(value);
        if (!digest) {
          return EntryError(source, i, key,
                            "must be the 64 hexadecimal digits of the key's SHA-256 (e.g. "
                            "`printf %s KEY | sha256sum`)");
        }
        entry.digest = *digest;
        has_digest = true;
      } else if (key == "tenant") {
        if (!IsValidTenantName(value)) {
          return EntryError(source, i, key, "must be 1 to 64 characters of [A-Za-z0-9._-]");
        }
        if (value == kDefaultTenant) {
          // Its namespace holds what was registered without keys: no key may own it.
          return EntryError(source, i, key,
                            absl::StrCat("'", kDefaultTenant,
                                         "' is reserved (the tenant of calls made without API "
                                         "keys); name the tenant otherwise"));
        }
        entry.principal.tenant = value;
        has_tenant = true;
      } else if (key == "role") {
        if (value == "user") {
          entry.principal.role = Role::kUser;
        } else if (value == "admin") {
          entry.principal.role = Role::kAdmin;
        } else {
          return EntryError(source, i, key, absl::StrCat("'", value, "' is not user or admin"));
        }
      } else {
        return EntryError(source, i, key, "unknown field (key_sha256, tenant, role)");
      }
    }
    if (!has_digest) return EntryError(source, i, "key_sha256", "is required");
    if (!has_tenant) return EntryError(source, i, "tenant", "is required");
    if (!seen.insert(entry.digest).second) {
      return EntryError(source, i, "key_sha256", "the same key is listed twice");
    }
    entries.push_back(std::move(entry));
  }
  return std::shared_ptr<const ApiKeys>(new ApiKeys(std::move(entries)));
}

absl::StatusOr<std::shared_ptr<const ApiKeys>> ApiKeys::Load(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadRegularFile(path, kMaxKeysFileBytes);
  if (!text.ok()) return text.status();
  return Parse(*text, path);
}

std::optional<Principal> ApiKeys::Find(std::string_view key) const {
  const std::array<uint8_t, 32> digest = Sha256(key);
  const Entry* found = nullptr;
  for (const Entry& entry : entries_) {
    // CRYPTO_memcmp takes the same time whether and where the digests differ; every entry is
    // compared, so the time does not say which one matched either.
    const bool same = CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0;
    if (same) found = &entry;
  }
  if (found == nullptr) return std::nullopt;
  return found->principal;
}

std::vector<std::string> ApiKeys::tenants() const {
  std::vector<std::string> tenants;
  for (const Entry& entry : entries_) tenants.push_back(entry.principal.tenant);
  std::sort(tenants.begin(), tenants.end());
  tenants.erase(std::unique(tenants.begin(), tenants.end()), tenants.end());
  return tenants;
}

absl::StatusOr<std::string_view> BearerKey(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(std::string(authorization.substr(0, kScheme.size())),
                              std::string(kScheme)) ||
      authorization[kScheme.size()] != ' ') {
    return absl::InvalidArgumentError("the authorization metadata must be 'Bearer <key>'");
  }
  std::string_view key = authorization.substr(kScheme.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  if (key.empty()) return absl::InvalidArgumentError("the authorization metadata has no key");
  return key;
}

absl::StatusOr<std::unique_ptr<ApiKeyRegistry>> ApiKeyRegistry::Open(std::string path) {
  absl::StatusOr<std::shared_ptr<const ApiKeys>> keys = ApiKeys::Load(path);
  if (!keys.ok()) {
    return absl::Status(keys.status().code(),
                        absl::StrCat("--api-keys-file: ", keys.status().message()));
  }
  return std::unique_ptr<ApiKeyRegistry>(new ApiKeyRegistry(std::move(path), *std::move(keys)));
}

absl::Status ApiKeyRegistry::Reload() {
  absl::StatusOr<std::shared_ptr<const ApiKeys>> keys = ApiKeys::Load(path_);
  if (!keys.ok()) return keys.status();
  absl::MutexLock lock(&mu_);
  keys_ = *std::move(keys);
  return absl::OkStatus();
}

std::shared_ptr<const ApiKeys> ApiKeyRegistry::keys() const {
  absl::MutexLock lock(&mu_);
  return keys_;
}

absl::StatusOr<Principal> ApiKeyRegistry::Authenticate(
    std::optional<std::string_view> authorization) const {
  if (!authorization) {
    return absl::UnauthenticatedError(
        "this server requires an API key: send the metadata 'authorization: Bearer <key>'");
  }
  absl::StatusOr<std::string_view> key = BearerKey(*authorization);
  if (!key.ok()) return absl::UnauthenticatedError(key.status().message());
  std::optional<Principal> principal = keys()->Find(*key);
  if (!principal) return absl::UnauthenticatedError("the API key is not valid");
  return *std::move(principal);
}

}  // namespace kvserve::server
