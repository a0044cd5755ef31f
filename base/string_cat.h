// Cat: absl::StrCat that also takes std::string_view (Debian's abseil has its own
// string_view type, so absl::StrCat does not accept the standard one).
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace kvserve::base {
namespace internal {

template <typename T>
const T& CatPiece(const T& value) {
  return value;
}
inline absl::string_view CatPiece(std::string_view value) { return {value.data(), value.size()}; }

}  // namespace internal

// Concatenates the arguments as absl::StrCat does.
template <typename... Args>
std::string Cat(const Args&... args) {
  return absl::StrCat(internal::CatPiece(args)...);
}

}  // namespace kvserve::base
