// The published catalog of named prefixes (see prefix_catalog.h).
#include "cache/prefix_catalog.h"

#include <utility>

#include "cache/prefix_store.h"
#include "cache/snapshot_tiers.h"

namespace kvserve::cache {

const CatalogEntry* FindVisiblePrefix(const PrefixCatalog& catalog, std::string_view tenant,
                                      std::string_view name, std::string* qualified) {
  for (std::string_view space : {tenant, kSharedSpace}) {
    std::string key = QualifiedPrefixName(space, name);
    auto it = catalog.find(key);
    if (it == catalog.end()) continue;
    if (qualified != nullptr) *qualified = std::move(key);
    return &it->second;
  }
  return nullptr;
}

std::shared_ptr<const PrefixCatalog> BuildCatalog(PrefixStore& store, SnapshotTiers* tiers) {
  auto catalog = std::make_shared<PrefixCatalog>();
  for (PrefixInfo& info : store.List()) {
    std::string name = info.name;
    catalog->emplace(
        std::move(name),
        CatalogEntry{.info = std::move(info), .snapshot = store.PeekNamed(name), .tokens = {}});
  }
  if (tiers != nullptr) {
    for (DemotedPrefix& demoted : tiers->NamedEntries()) {
      std::string name = demoted.info.name;
      demoted.info.tier = demoted.tier == SnapshotTier::kHost ? "host" : "disk";
      // emplace keeps the store's entry of the same name.
      catalog->emplace(std::move(name), CatalogEntry{.info = std::move(demoted.info),
                                                     .snapshot = {},
                                                     .tokens = std::move(demoted.tokens)});
    }
  }
  return catalog;
}

std::shared_ptr<const PrefixCatalog> PublishedCatalog::Get() const {
  absl::MutexLock lock(&mu_);
  return catalog_;
}

void PublishedCatalog::Set(std::shared_ptr<const PrefixCatalog> catalog) {
  absl::MutexLock lock(&mu_);
  catalog_ = std::move(catalog);
}

}  // namespace kvserve::cache
