// PrefixCatalog: the named prefixes as the engine last published them, an immutable value that
// any thread may read (request validation, the prefix services), and who may see which.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cache/prefix_info.h"

namespace kvserve::cache {

class Snapshot;

// A named prefix as the catalog publishes it; immutable.
struct CatalogEntry {
  PrefixInfo info;
  // Weak: the catalog must not keep a snapshot the store would evict or replace. Empty for a
  // prefix a lower tier holds (info.tier "host" or "disk": demoted, or found on disk at
  // start): a request naming it sends its `tokens` before its own and waits for the prefix to
  // be promoted back.
  std::weak_ptr<const Snapshot> snapshot;
  std::vector<int32_t> tokens;  // host and disk entries only
};

// The named prefixes at one point, sorted by qualified name.
using PrefixCatalog = std::map<std::string, CatalogEntry>;

// The entry the name `name` resolves to for `tenant`: the tenant's own prefix of that name,
// else the shared one (see QualifiedPrefixName); null when neither exists. `*qualified` (may
// be null) gets the entry's catalog key.
const CatalogEntry* FindVisiblePrefix(const PrefixCatalog& catalog, std::string_view tenant,
                                      std::string_view name, std::string* qualified = nullptr);

class PrefixStore;
class SnapshotTiers;

// The named prefixes `store` holds and, for names it does not hold, those `tiers` (may be null)
// hold.
std::shared_ptr<const PrefixCatalog> BuildCatalog(PrefixStore& store, SnapshotTiers* tiers);

// The last published catalog. Set by the engine thread, read by any thread. Thread-safe.
class PublishedCatalog {
 public:
  PublishedCatalog() : catalog_(std::make_shared<const PrefixCatalog>()) {}

  // The catalog as last published; cheap (a shared pointer copy).
  std::shared_ptr<const PrefixCatalog> Get() const ABSL_LOCKS_EXCLUDED(mu_);
  void Set(std::shared_ptr<const PrefixCatalog> catalog) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const PrefixCatalog> catalog_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::cache
