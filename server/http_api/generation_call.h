// GenerationCall: one POST /v1/chat/completions or /v1/completions from body to answer: parsed,
// built, its cache_control breakpoints registered, submitted, then answered whole or streamed
// as server-sent events; a client that goes away cancels it. CallLog: the access-log line and
// metrics of every HTTP request.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "server/api_keys.h"
#include "server/generation_request.h"
#include "server/http_api/http_server.h"
#include "server/http_api/openai_request.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib
namespace prometheus {
class Counter;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvserve::server::http_api {

// The request id of an HTTP request: the client's x-request-id when it is 1 to 64 characters
// of [A-Za-z0-9._:-], else a fresh one (16 hex digits).
std::string HttpRequestId(const std::string& client_id);

// Internal naming the request id; what happened is logged with the id, not sent.
absl::Status InternalError(const std::string& request_id, const std::string& path,
                           const std::string& what);

// The header a client sets to bound a request: milliseconds from its arrival (> 0).
inline constexpr char kTimeoutHeader[] = "x-kvserve-timeout-ms";

// One HTTP request's access-log line and metrics, written once by Finish (or, never finished,
// by the destructor as 499). Thread-compatible: one thread at a time.
class CallLog {
 public:
  CallLog(const httplib::Request& req, ServerMetrics* metrics,
          prometheus::Family<prometheus::Counter>* http_requests);
  CallLog(CallLog&& other) noexcept;
  CallLog& operator=(CallLog&&) = delete;
  ~CallLog();

  const std::string& request_id() const { return request_id_; }
  void SetTenant(std::string tenant) { tenant_ = std::move(tenant); }
  // A generation request (counted in kvserve_requests_total and by tenant).
  void MarkGeneration() { generation_ = true; }
  // The engine counts it in kvserve_requests_total from now on.
  void MarkCountedByEngine() { counted_by_engine_ = true; }
  void SetPromptTokens(int64_t n) { prompt_tokens_ = n; }
  void SetSummary(const GenerationSummary& summary) { summary_ = summary; }
  // Logs and counts the request: its HTTP status, the error message of a failure, and its
  // outcome (empty: the finish reason when a summary is set, else the status's meaning).
  void Finish(int status, const std::string& error, std::string outcome = "");

 private:
  std::string request_id_;
  std::string method_;
  std::string path_;
  std::string peer_;
  std::string tenant_ = kDefaultTenant;
  ServerMetrics* metrics_;
  prometheus::Family<prometheus::Counter>* http_requests_;
  std::chrono::steady_clock::time_point start_;
  bool generation_ = false;
  bool counted_by_engine_ = false;
  bool finished_ = false;
  std::optional<int64_t> prompt_tokens_;
  std::optional<GenerationSummary> summary_;
};

class GenerationCall {
 public:
  // Serves one generation request for `caller` on the worker thread that calls it; a stream
  // goes on in `res`'s content provider after it returns. `log` is finished when the answer
  // ends.
  static void Run(Endpoint endpoint, const HttpServedModel& served, const Principal& caller,
                  int64_t created, const httplib::Request& req, httplib::Response& res,
                  std::shared_ptr<CallLog> log);
};

}  // namespace kvserve::server::http_api
