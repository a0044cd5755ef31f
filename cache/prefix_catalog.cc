// The published catalog of named prefixes (see prefix_catalog.h).
#include "cache/prefix_catalog.h"

#include <utility>

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

std::shared_ptr<const PrefixCatalog> PublishedCatalog::Get() const {
  absl::MutexLock lock(&mu_);
  return catalog_;
}

void PublishedCatalog::Set(std::shared_ptr<const PrefixCatalog> catalog) {
  absl::MutexLock lock(&mu_);
  catalog_ = std::move(catalog);
}

}  // namespace kvserve::cache
