// StopStringMatcher: stop-string search with a minimal hold-back.
#include "server/stop_string_matcher.h"

#include <algorithm>
#include <utility>

namespace kvserve::server {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {}

std::string StopStringMatcher::Feed(std::string_view delta) {
  if (matched_) return "";
  if (stop_strings_.empty()) return std::string(delta);
  held_.append(delta);
  // Earliest match wins. No stop string can start in text already returned: that text was
  // returned only once no stop string could begin there.
  size_t match = std::string::npos;
  for (const std::string& stop : stop_strings_) {
    match = std::min(match, held_.find(stop));
  }
  if (match != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, match);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix of held_ that begins some stop string.
  size_t keep = 0;
  for (const std::string& stop : stop_strings_) {
    const size_t longest = std::min(stop.size() - 1, held_.size());
    for (size_t n = longest; n > keep; --n) {
      if (std::string_view(held_).substr(held_.size() - n) == std::string_view(stop).substr(0, n)) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace kvserve::server
