// Qualified prefix names (see prefix_info.h).
#include "cache/prefix_info.h"

namespace kvserve::cache {

std::string QualifiedPrefixName(std::string_view space, std::string_view name) {
  if (space.empty()) return std::string(name);
  std::string qualified(space);
  qualified += '/';
  qualified += name;
  return qualified;
}

std::pair<std::string_view, std::string_view> SplitQualifiedPrefixName(std::string_view qualified) {
  const size_t slash = qualified.find('/');
  if (slash == std::string_view::npos) return {kSharedSpace, qualified};
  return {qualified.substr(0, slash), qualified.substr(slash + 1)};
}

}  // namespace kvserve::cache
