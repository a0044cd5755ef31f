// The random walk of SampleString.
#include "constraint/sampler.h"

#include <vector>

namespace kvserve::constraint {

std::optional<std::string> SampleString(Matcher& matcher, std::mt19937_64& rng,
                                        const SampleOptions& options) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::string out;
  MatchState state = matcher.initial();
  static constexpr char kClosing[] = {'"', ',', ':', '}', ']', ')'};
  while (static_cast<int64_t>(out.size()) <= options.max_bytes) {
    if (state.accepting && (state.finished() || unit(rng) < options.stop_probability)) {
      return out;
    }
    const ByteSet next = matcher.NextBytes(state);
    std::vector<uint8_t> closing;
    for (char c : kClosing) {
      if (next.Has(static_cast<uint8_t>(c))) closing.push_back(static_cast<uint8_t>(c));
    }
    // Later in a long walk, close more eagerly.
    const double bias =
        static_cast<int64_t>(out.size()) > options.max_bytes / 4 ? 0.9 : options.closing_bias;
    uint8_t byte = 0;
    if (!closing.empty() && unit(rng) < bias) {
      byte = closing[rng() % closing.size()];
    } else {
      std::vector<uint8_t> all;
      for (int b = 0; b < 256; ++b) {
        if (next.Has(static_cast<uint8_t>(b))) all.push_back(static_cast<uint8_t>(b));
      }
      byte = all[rng() % all.size()];
    }
    out.push_back(static_cast<char>(byte));
    state = matcher.Advance(state, byte);
  }
  return std::nullopt;
}

}  // namespace kvserve::constraint
