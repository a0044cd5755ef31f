// The retention priority of prefix snapshots (see retention.h).
#include "cache/retention.h"

#include <algorithm>
#include <cmath>

namespace kvserve::cache {

std::string_view RetentionClassName(RetentionClass retention) {
  switch (retention) {
    case RetentionClass::kLow:
      return "low";
    case RetentionClass::kNormal:
      return "normal";
    case RetentionClass::kHigh:
      return "high";
  }
  return "normal";
}

std::optional<RetentionClass> ParseRetentionClass(std::string_view name) {
  for (RetentionClass c : {RetentionClass::kLow, RetentionClass::kNormal, RetentionClass::kHigh}) {
    if (name == RetentionClassName(c)) return c;
  }
  return std::nullopt;
}

double RetentionWeight(RetentionClass retention) {
  switch (retention) {
    case RetentionClass::kLow:
      return 0.25;
    case RetentionClass::kNormal:
      return 1.0;
    case RetentionClass::kHigh:
      return 4.0;
  }
  return 1.0;
}

double RetentionPriority(RetentionClass retention, int64_t hits, absl::Time last_used,
                         absl::Time now, absl::Duration half_life) {
  const double age = absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), now - last_used));
  return RetentionWeight(retention) * static_cast<double>(1 + std::max<int64_t>(0, hits)) *
         std::exp2(-age / absl::ToDoubleSeconds(half_life));
}

}  // namespace kvserve::cache
