// StopStringMatcher: cuts streamed text at the first stop string, holding back only what could
// still become one, so that streamed deltas and the unary text agree.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvserve::server {

// Feed text deltas in order; each call returns the text that can be sent now. A stop string
// that spans several deltas is still found; the text from the stop string on is never
// returned. Without stop strings every delta passes through unchanged. Not thread-safe.
class StopStringMatcher {
 public:
  // Stop strings must be non-empty (valid UTF-8 keeps the returned text UTF-8-complete).
  explicit StopStringMatcher(std::vector<std::string> stop_strings = {});

  // Appends `delta`; returns the text now final. After a match, returns the text up to the
  // stop string and then only empty strings.
  std::string Feed(std::string_view delta);
  // The text still held back (call at the end of generation; empty after a match).
  std::string Flush();
  // Whether a stop string was found.
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;  // text not yet returned: a possible start of a stop string
  bool matched_ = false;
};

}  // namespace kvserve::server
