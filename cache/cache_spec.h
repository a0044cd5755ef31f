// CacheSpec: the validated form of a request's cache_implementation + cache_config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace kvserve::cache {

// Which cache a request gets (the reference's generate() cache_implementation values).
enum class CacheImplementation {
  kNone,             // use_cache=false: no cache, every step recomputes the whole sequence
  kDynamic,          // grows with every token (the default)
  kStatic,           // preallocated to max_cache_len
  kOffloaded,        // dynamic, layers kept on the host between their updates
  kOffloadedStatic,  // static, layers kept on the host between their updates
  kQuantized,        // dynamic, old tokens quantized (quanto, hqq or fp8)
};

// The name as the reference spells it ("dynamic", "offloaded_static", ...; "none" for kNone).
std::string_view CacheImplementationName(CacheImplementation implementation);

enum class QuantizationBackend { kQuanto, kHqq, kFp8 };
std::string_view QuantizationBackendName(QuantizationBackend backend);

// cache_config as the caller gave it: every field is optional so that "given" can be told
// from "defaulted" (fp8 refuses any group-wise parameter that was given at all).
struct QuantizationConfig {
  std::optional<std::string> backend;
  std::optional<int64_t> nbits;
  std::optional<int64_t> axis_key;
  std::optional<int64_t> axis_value;
  std::optional<int64_t> q_group_size;
  std::optional<int64_t> residual_length;

  bool empty() const {
    return !backend && !nbits && !axis_key && !axis_value && !q_group_size && !residual_length;
  }
};

// Parses a cache_config JSON object ({"backend": "hqq", "nbits": 8, ...}). InvalidArgument
// naming the key for malformed JSON, a non-object, an unknown key (the allowed keys are
// listed) or a value of the wrong type.
absl::StatusOr<QuantizationConfig> ParseQuantizationConfigJson(std::string_view json);

// The validated quantization parameters (defaults of the reference's QuantizedCache).
struct QuantizedSpec {
  QuantizationBackend backend = QuantizationBackend::kQuanto;
  int nbits = 4;                  // quanto: 2, 4; hqq: 1, 2, 3, 4, 8; fp8: 8 (e4m3)
  int axis_key = 0;               // quanto: 0 or -1; hqq: 0 or 1; unused by fp8
  int axis_value = 0;             // as axis_key
  int64_t q_group_size = 64;      // > 0; unused by fp8
  int64_t residual_length = 128;  // >= 0; unused by fp8 (no residual)
};

// A validated cache specification. Build it with Parse; the factory (MakeCache) turns it into
// a KvCache for a model's layers.
struct CacheSpec {
  CacheImplementation implementation = CacheImplementation::kDynamic;
  // Static caches only: slots per layer. Unset means the caller (the generator) sizes it to
  // prompt + max_new_tokens - 1, as the reference's generate() does.
  std::optional<int64_t> max_cache_len;
  // Offloaded caches only: keep sliding and chunked layers on the device. Defaults as the
  // reference: false for 'offloaded', true for 'offloaded_static'.
  bool offload_only_non_sliding = false;
  // Quantized caches only.
  QuantizedSpec quantized;

  bool use_cache() const { return implementation != CacheImplementation::kNone; }
  bool is_static() const {
    return implementation == CacheImplementation::kStatic ||
           implementation == CacheImplementation::kOffloadedStatic;
  }
  bool is_offloaded() const {
    return implementation == CacheImplementation::kOffloaded ||
           implementation == CacheImplementation::kOffloadedStatic;
  }

  // Validates `cache_implementation` ("" means the default, dynamic) and `cache_config`.
  // Names are case-sensitive as in the reference. With use_cache=false the result is kNone
  // (the name is still validated, as the reference validates its generation config).
  // InvalidArgument naming the parameter and its allowed values for: an unknown name, a
  // cache_config with a non-quantized implementation, an unknown backend, nbits or an axis
  // the backend does not allow, q_group_size <= 0, residual_length < 0, any group-wise
  // parameter given with fp8, and max_cache_len <= 0.
  static absl::StatusOr<CacheSpec> Parse(std::string_view cache_implementation,
                                         const QuantizationConfig& cache_config = {},
                                         bool use_cache = true,
                                         std::optional<int64_t> max_cache_len = std::nullopt);
};

}  // namespace kvserve::cache
