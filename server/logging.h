// ConfigureLogging: spdlog's default logger in kvserve's text or JSON-lines format.
#pragma once

#include <string>

namespace kvserve::server {

// Logs go to stderr. "text": "2026-11-29 13:00:00.123 info  message"; "json": one object per line
// with time, level and msg (the message escaped as a JSON string). Other values keep spdlog's
// default. Call once at start-up, before other threads log.
void ConfigureLogging(const std::string& format);

// `text` as the body of a JSON string literal (quotes, backslashes and control characters
// escaped).
std::string JsonEscape(const std::string& text);

}  // namespace kvserve::server
