// Parsing and validation of cache specifications (see cache_spec.h).
#include "cache/cache_spec.h"

#include <array>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::cache {
namespace {

constexpr char kImplementationsAllowed[] =
    "allowed: dynamic, static, offloaded, offloaded_static, quantized (case-sensitive)";
constexpr char kConfigKeysAllowed[] =
    "allowed keys: backend, nbits, axis_key, axis_value, q_group_size, residual_length";

constexpr std::array<std::pair<std::string_view, CacheImplementation>, 5> kImplementations = {{
    {"dynamic", CacheImplementation::kDynamic},
    {"static", CacheImplementation::kStatic},
    {"offloaded", CacheImplementation::kOffloaded},
    {"offloaded_static", CacheImplementation::kOffloadedStatic},
    {"quantized", CacheImplementation::kQuantized},
}};

// A caller's string as an error message quotes it: at most 64 bytes (cut on a UTF-8 character
// boundary), so that a huge value cannot make the error itself too large to send.
std::string Quoted(std::string_view value) {
  constexpr size_t kMaxBytes = 64;
  if (value.size() <= kMaxBytes) return std::string(value);
  size_t cut = kMaxBytes;
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(std::string(value.substr(0, cut)), "... (", value.size(), " bytes)");
}

absl::StatusOr<CacheImplementation> ParseImplementation(std::string_view name) {
  if (name.empty()) return CacheImplementation::kDynamic;
  for (const auto& [n, impl] : kImplementations) {
    if (n == name) return impl;
  }
  // The reference still accepts these deprecated names (all but "hybrid" as a static cache,
  // "hybrid" silently as a dynamic one); kvserve never shipped them, so it refuses them and
  // says what to use instead.
  for (std::string_view deprecated : {"sliding_window", "hybrid", "hybrid_chunked"}) {
    if (name == deprecated) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache_implementation '", std::string(name), "' is deprecated and not supported; use ",
          "'static' (sliding layers get static sliding-window layers); ", kImplementationsAllowed));
    }
  }
  for (std::string_view deprecated : {"offloaded_hybrid", "offloaded_hybrid_chunked"}) {
    if (name == deprecated) {
      return absl::InvalidArgumentError(absl::StrCat("cache_implementation '", std::string(name),
                                                     "' is deprecated and not supported; use "
                                                     "'offloaded_static'; ",
                                                     kImplementationsAllowed));
    }
  }
  if (name == "paged") {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_implementation 'paged' is not supported (kvserve batches requests itself); ",
        kImplementationsAllowed));
  }
  return absl::InvalidArgumentError(absl::StrCat("cache_implementation '", Quoted(name),
                                                 "' is not supported; ", kImplementationsAllowed));
}

absl::Status ValidateQuanto(const QuantizedSpec& q) {
  if (q.nbits != 2 && q.nbits != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_config.nbits ", q.nbits, " is not supported by backend 'quanto'; allowed: 2, 4"));
  }
  for (const auto& [name, axis] : {std::pair<std::string_view, int>{"axis_key", q.axis_key},
                                   std::pair<std::string_view, int>{"axis_value", q.axis_value}}) {
    if (axis != 0 && axis != -1) {
      return absl::InvalidArgumentError(absl::StrCat("cache_config.", std::string(name), " ", axis,
                                                     " is not supported by backend 'quanto'; "
                                                     "allowed: 0, -1"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateHqq(const QuantizedSpec& q) {
  if (q.nbits != 1 && q.nbits != 2 && q.nbits != 3 && q.nbits != 4 && q.nbits != 8) {
    return absl::InvalidArgumentError(absl::StrCat("cache_config.nbits ", q.nbits,
                                                   " is not supported by backend 'hqq'; "
                                                   "allowed: 1, 2, 3, 4, 8"));
  }
  for (const auto& [name, axis] : {std::pair<std::string_view, int>{"axis_key", q.axis_key},
                                   std::pair<std::string_view, int>{"axis_value", q.axis_value}}) {
    if (axis != 0 && axis != 1) {
      return absl::InvalidArgumentError(absl::StrCat("cache_config.", std::string(name), " ", axis,
                                                     " is not supported by backend 'hqq'; "
                                                     "allowed: 0, 1"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<QuantizedSpec> ParseQuantized(const QuantizationConfig& config) {
  QuantizedSpec q;
  const std::string backend = config.backend.value_or("quanto");
  if (backend == "quanto") {
    q.backend = QuantizationBackend::kQuanto;
  } else if (backend == "hqq") {
    q.backend = QuantizationBackend::kHqq;
  } else if (backend == "fp8") {
    q.backend = QuantizationBackend::kFp8;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("cache_config.backend '", Quoted(backend),
                                                   "' is not supported; allowed: quanto, hqq, "
                                                   "fp8 (case-sensitive)"));
  }
  if (q.backend == QuantizationBackend::kFp8) {
    // fp8 keeps one scale per tensor and no residual, so a group-wise parameter would be
    // silently meaningless: refuse it (this project's design choice, see the reference §2.5).
    const std::array<std::pair<std::string_view, bool>, 5> given = {{
        {"nbits", config.nbits.has_value()},
        {"axis_key", config.axis_key.has_value()},
        {"axis_value", config.axis_value.has_value()},
        {"q_group_size", config.q_group_size.has_value()},
        {"residual_length", config.residual_length.has_value()},
    }};
    for (const auto& [name, is_given] : given) {
      if (is_given) {
        return absl::InvalidArgumentError(
            absl::StrCat("cache_config.", std::string(name),
                         " cannot be used with backend 'fp8' (one scale per tensor, no "
                         "residual); allowed with fp8: backend only"));
      }
    }
    q.nbits = 8;
    q.residual_length = 0;
    return q;
  }
  if (config.nbits) q.nbits = static_cast<int>(*config.nbits);
  if (config.axis_key) q.axis_key = static_cast<int>(*config.axis_key);
  if (config.axis_value) q.axis_value = static_cast<int>(*config.axis_value);
  if (config.q_group_size) q.q_group_size = *config.q_group_size;
  if (config.residual_length) q.residual_length = *config.residual_length;
  // Narrowing above must not turn an out-of-range value into an allowed one.
  if (config.nbits && *config.nbits != q.nbits) q.nbits = -1;
  if (config.axis_key && *config.axis_key != q.axis_key) q.axis_key = 2;
  if (config.axis_value && *config.axis_value != q.axis_value) q.axis_value = 2;
  absl::Status s = q.backend == QuantizationBackend::kQuanto ? ValidateQuanto(q) : ValidateHqq(q);
  if (!s.ok()) return s;
  if (q.q_group_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("cache_config.q_group_size ", q.q_group_size,
                                                   " is not allowed; allowed: an integer > 0"));
  }
  if (q.residual_length < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cache_config.residual_length ",
                                                   q.residual_length,
                                                   " is not allowed; allowed: an integer >= 0"));
  }
  return q;
}

}  // namespace

std::string_view CacheImplementationName(CacheImplementation implementation) {
  if (implementation == CacheImplementation::kNone) return "none";
  for (const auto& [name, impl] : kImplementations) {
    if (impl == implementation) return name;
  }
  return "unknown";
}

std::string_view QuantizationBackendName(QuantizationBackend backend) {
  switch (backend) {
    case QuantizationBackend::kQuanto:
      return "quanto";
    case QuantizationBackend::kHqq:
      return "hqq";
    case QuantizationBackend::kFp8:
      return "fp8";
  }
  return "unknown";
}

absl::StatusOr<QuantizationConfig> ParseQuantizationConfigJson(std::string_view json) {
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_config is not valid JSON: ", Quoted(json)));
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError("cache_config must be a JSON object");
  }
  QuantizationConfig config;
  for (const auto& [key, value] : parsed.items()) {
    if (key == "backend") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(
            "cache_config.backend must be a string; allowed: quanto, hqq, fp8");
      }
      config.backend = value.get<std::string>();
      continue;
    }
    std::optional<int64_t>* field = nullptr;
    if (key == "nbits") field = &config.nbits;
    if (key == "axis_key") field = &config.axis_key;
    if (key == "axis_value") field = &config.axis_value;
    if (key == "q_group_size") field = &config.q_group_size;
    if (key == "residual_length") field = &config.residual_length;
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cache_config key '", Quoted(key),
                                                     "' is not supported; ", kConfigKeysAllowed));
    }
    if (!value.is_number_integer()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cache_config.", key, " must be an integer, got ", Quoted(value.dump())));
    }
    *field = value.get<int64_t>();
  }
  return config;
}

absl::StatusOr<CacheSpec> CacheSpec::Parse(std::string_view cache_implementation,
                                           const QuantizationConfig& cache_config, bool use_cache,
                                           std::optional<int64_t> max_cache_len) {
  absl::StatusOr<CacheImplementation> impl = ParseImplementation(cache_implementation);
  if (!impl.ok()) return impl.status();
  CacheSpec spec;
  if (!use_cache) {
    spec.implementation = CacheImplementation::kNone;
    return spec;
  }
  spec.implementation = *impl;
  if (*impl != CacheImplementation::kQuantized && !cache_config.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_config is only used with cache_implementation 'quantized', not '",
                     std::string(CacheImplementationName(*impl)), "'"));
  }
  if (*impl == CacheImplementation::kQuantized) {
    absl::StatusOr<QuantizedSpec> q = ParseQuantized(cache_config);
    if (!q.ok()) return q.status();
    spec.quantized = *q;
  }
  if (max_cache_len && *max_cache_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_cache_len ", *max_cache_len, " is not allowed; allowed: an integer > 0"));
  }
  spec.max_cache_len = max_cache_len;
  spec.offload_only_non_sliding = *impl == CacheImplementation::kOffloadedStatic;
  return spec;
}

}  // namespace kvserve::cache
