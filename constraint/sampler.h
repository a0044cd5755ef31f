// SampleString: random strings of a grammar's language, walked byte by byte through a matcher
// (the sample tool shows users what a constraint allows; tests validate them independently).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>

#include "constraint/matcher.h"

namespace kvserve::constraint {

struct SampleOptions {
  // A walk longer than this is given up (nullopt).
  int64_t max_bytes = 4096;
  // Where the string may end, the chance that it does.
  double stop_probability = 0.3;
  // The chance of preferring a byte that closes something (" , : } ] ) when one is allowed:
  // without it, walks in strings and arrays rarely end.
  double closing_bias = 0.5;
};

// A random string the matcher accepts whole, or nullopt when the walk passed max_bytes.
std::optional<std::string> SampleString(Matcher& matcher, std::mt19937_64& rng,
                                        const SampleOptions& options = {});

}  // namespace kvserve::constraint
