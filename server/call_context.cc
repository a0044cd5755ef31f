// CallContext: request ids, routing-key logging and the served-by trailer.
#include "server/call_context.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>

#include "absl/strings/str_format.h"
#include "base/string_cat.h"

namespace kvserve::server {
namespace {

constexpr size_t kMaxClientRequestIdChars = 64;
constexpr size_t kMaxLoggedRouteChars = 128;

bool IsAcceptableRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxClientRequestIdChars) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// The value of metadata `key` the client sent, or empty.
std::string_view ClientMetadata(const grpc::CallbackServerContext& context, std::string_view key) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(grpc::string_ref(key.data(), key.size()));
  if (it == metadata.end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

uint64_t Mix(uint64_t x) {
  // splitmix64's finalizer: consecutive counters become unrelated-looking ids.
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string NewRequestId() {
  static const uint64_t process_salt = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device() ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  static std::atomic<uint64_t> counter{0};
  return absl::StrFormat("%016x", Mix(process_salt + counter.fetch_add(1)));
}

std::string BeginCall(grpc::CallbackServerContext* context, const ReplicaIdentity& replica,
                      std::string_view method) {
  std::string_view client_id = ClientMetadata(*context, kRequestIdMetadata);
  std::string request_id =
      IsAcceptableRequestId(client_id) ? std::string(client_id) : NewRequestId();
  const std::string replica_id = replica.Get();
  if (!replica_id.empty()) context->AddTrailingMetadata(kReplicaMetadata, replica_id);
  context->AddTrailingMetadata(kRequestIdMetadata, request_id);
  if (spdlog::should_log(spdlog::level::debug)) {
    std::string_view route = ClientMetadata(*context, kRouteKeyMetadata);
    spdlog::debug("request {} {} from {} route '{}'", request_id, method, context->peer(),
                  route.substr(0, kMaxLoggedRouteChars));
  }
  return request_id;
}

absl::Status InternalErrorFor(std::string_view request_id, std::string_view method,
                              const std::exception* exception) {
  spdlog::error("request {} {}: unexpected exception: {}", request_id, method,
                exception != nullptr ? exception->what() : "(not a std::exception)");
  return absl::InternalError(base::Cat("internal error while serving ", method,
                                       "; the server logged it under request id ", request_id));
}

}  // namespace kvserve::server
