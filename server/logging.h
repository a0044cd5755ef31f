// ConfigureLogging: spdlog's default logger in kvserve's text or JSON-lines format, and the
// access log (one line per call).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::server {

// Logs go to stderr. "text": "2026-11-29 13:00:00.123 info  message" (control characters and
// bytes that are not UTF-8 escaped, so a record is one line); "json": one object per line with
// time, level and msg (the message escaped as a JSON string). Other formats keep spdlog's
// default. `level` is one of trace, debug, info, warn, error, critical, off (others: info).
// Call once at start-up, before other threads log.
void ConfigureLogging(const std::string& format, const std::string& level = "info");

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
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;  // over every returned sequence
  double queue_ms = 0;            // arrival to admission (generations)
  double ttft_ms = 0;             // arrival to the first token (0: none was generated)
  double total_ms = 0;            // the call from its start to its status
};

// The line's text: "access request_id=... tenant=... method=... ..." (values with spaces,
// quotes or anything escaped are quoted).
std::string AccessLogText(const AccessRecord& record);
// The JSON object's members after time and level: "msg":"access","request_id":"...",...
std::string AccessLogJsonMembers(const AccessRecord& record);

// Writes the record's line at info level in the configured format. Thread-safe.
void LogAccess(const AccessRecord& record);

}  // namespace kvserve::server
