// ConfigureLogging: spdlog's default logger in kvserve's text or JSON-lines format (gRPC's and
// protobuf's own lines included), and the access log (one line per call).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvserve::server {

// Logs go to stderr. "text": "2026-11-29 13:00:00.123 info  message" (control characters and
// bytes that are not UTF-8 escaped, so a record is one line); "json": one object per line with
// time, level and msg (the message escaped as a JSON string). Other formats keep spdlog's
// default. `level` is one of trace, debug, info, warn, error, critical, off (others: info).
// gRPC's and protobuf's lines go through the same logger (RouteLibraryLogs), so that in JSON
// every line of stderr is one object. Call once at start-up, before other threads log.
void ConfigureLogging(const std::string& format, const std::string& level = "info");

// Sends what gRPC (gpr_log) and protobuf log to spdlog's default logger of the moment of each
// line, as "grpc: FILE:LINE: message" and "protobuf: FILE:LINE: message" (FILE without its
// folders) at the library's level: gRPC's ERROR is error, its INFO and DEBUG (its own
// machinery: "grpc epoll fd: 5") are debug; protobuf's INFO, WARNING, ERROR and FATAL are info,
// warn, error and critical. gRPC formats only the lines `level` (as ConfigureLogging takes it)
// keeps, unless the GRPC_VERBOSITY environment variable sets its threshold. Call before gRPC
// starts; not thread-safe.
void RouteLibraryLogs(const std::string& level);

// `text` as the body of a JSON string literal: quotes, backslashes and control characters
// escaped, every byte that is not part of valid UTF-8 replaced by \ufffd, so that the result
// is valid UTF-8 and valid JSON whatever `text` holds.
std::string JsonEscape(std::string_view text);

// `text` on one line of valid UTF-8: control characters as \n, \r, \t or \xNN, bytes that are
// not part of valid UTF-8 as \xNN; with `quoted`, also " and \ escaped (for a "..." value).
std::string TextEscape(std::string_view text, bool quoted = false);

// One call as its access-log line tells it.
struct AccessRecord {
  std::string request_id;
  std::string tenant;  // "default" until API keys name tenants
  std::string method;  // the RPC's name: "Generate", "RegisterPrefix", ...
  std::string peer;    // gRPC's peer string: "ipv4:127.0.0.1:53124"
  // A generation's finish reason ("length", "stop", "eos", "cancelled"), else the status
  // code in lower case ("ok", "invalid_argument", "not_found", ...).
  std::string outcome;
  std::string code;   // the gRPC status code's name: "OK", "INVALID_ARGUMENT", ...
  std::string error;  // the status message of a failed call; empty on success
  // What the call has of these: a finished generation all but the times it never reached, a
  // generation that ended otherwise after it was parsed its prompt, other calls none. The
  // line holds only those set.
  std::optional<int64_t> prompt_tokens;
  std::optional<int64_t> cached_tokens;
  std::optional<int64_t> completion_tokens;  // over every returned sequence
  std::optional<double> queue_ms;            // arrival to admission
  std::optional<double> ttft_ms;             // arrival to the first token
  double total_ms = 0;                       // the call from its start to its status
};

// The line's text: "access request_id=... tenant=... method=... ..." (values with spaces,
// quotes or anything escaped are quoted); the optional fields only when set.
std::string AccessLogText(const AccessRecord& record);
// The JSON object's members after time and level: "msg":"access","request_id":"...",...
// (the optional fields only when set).
std::string AccessLogJsonMembers(const AccessRecord& record);

// Writes the record's line at info level in the configured format. Thread-safe.
void LogAccess(const AccessRecord& record);

}  // namespace kvserve::server
