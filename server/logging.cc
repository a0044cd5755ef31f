// ConfigureLogging: text and JSON log formats for spdlog, and the access log.
#include "server/logging.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_format.h"

namespace kvserve::server {
namespace {

// The access logger (null until ConfigureLogging: the default logger is used then) and
// whether the format is JSON. Set once at start-up, read by every call's end.
std::atomic<spdlog::logger*> g_access_logger{nullptr};
std::atomic<bool> g_json{false};

// The length of the valid UTF-8 character starting at text[i], or 0 when the bytes there are
// not one (a stray continuation byte, an overlong form, a surrogate, beyond U+10FFFF, cut).
size_t Utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80;
  unsigned char high = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;  // nothing beyond U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return length;
}

// Whether `value` can stand unquoted after "key=" in a text line.
bool IsPlainTextValue(std::string_view value) {
  if (value.empty()) return false;
  for (char c : value) {
    if (c <= ' ' || c > '~' || c == '"' || c == '\\') return false;
  }
  return true;
}

std::string TextValue(std::string_view value) {
  if (IsPlainTextValue(value)) return std::string(value);
  return "\"" + TextEscape(value, /*quoted=*/true) + "\"";
}

// A duration in milliseconds as a JSON number (finite, three decimals).
std::string Ms(double ms) { return absl::StrFormat("%.3f", std::isfinite(ms) ? ms : 0.0); }

// %j: the log message as an escaped JSON string body.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped =
        JsonEscape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// %q: the log message on one line of valid UTF-8 (see TextEscape).
class TextMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string escaped =
        TextEscape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<TextMessageFlag>();
  }
};

// `path` without its folders: "src/core/tsi/ssl_transport_security.cc" is
// "ssl_transport_security.cc".
std::string_view BaseName(const char* path) {
  if (path == nullptr) return "?";
  const std::string_view text = path;
  const size_t slash = text.rfind('/');
  return slash == std::string_view::npos ? text : text.substr(slash + 1);
}

// gpr_log's function: one line on the default logger. gRPC's INFO lines describe its own
// machinery ("grpc epoll fd: 5", "Callback server."): debug for kvserve, as DEBUG.
void LogGrpcLine(gpr_log_func_args* args) {
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR ? spdlog::level::err : spdlog::level::debug;
  spdlog::default_logger_raw()->log(level, "grpc: {}:{}: {}", BaseName(args->file), args->line,
                                    args->message != nullptr ? args->message : "");
}

// protobuf's log handler: one line on the default logger (flushed before a fatal one aborts).
void LogProtobufLine(google::protobuf::LogLevel severity, const char* file, int line,
                     const std::string& message) {
  spdlog::level::level_enum level = spdlog::level::err;
  switch (severity) {
    case google::protobuf::LOGLEVEL_INFO:
      level = spdlog::level::info;
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      level = spdlog::level::warn;
      break;
    case google::protobuf::LOGLEVEL_ERROR:
      level = spdlog::level::err;
      break;
    case google::protobuf::LOGLEVEL_FATAL:
      level = spdlog::level::critical;
      break;
  }
  spdlog::logger* logger = spdlog::default_logger_raw();
  logger->log(level, "protobuf: {}:{}: {}", BaseName(file), line, message);
  if (level == spdlog::level::critical) logger->flush();
}

// --log-level as spdlog reads it (an unknown name is info).
spdlog::level::level_enum ParseLevel(const std::string& level) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  return parsed == spdlog::level::off && level != "off" ? spdlog::level::info : parsed;
}

constexpr char kJsonTime[] = R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l",)";
constexpr char kTextTime[] = "%Y-%m-%d %H:%M:%S.%e %-5l ";

}  // namespace

std::string JsonEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t length = Utf8Length(text, i);
    if (length == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (length > 1) {
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

std::string TextEscape(std::string_view text, bool quoted) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t length = Utf8Length(text, i);
    if (length > 1) {
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    ++i;
    if (length == 0 || c < 0x20 || c == 0x7f) {
      if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else {
        out += absl::StrFormat("\\x%02x", c);
      }
    } else if (quoted && (c == '"' || c == '\\')) {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string AccessLogText(const AccessRecord& r) {
  std::string line =
      absl::StrFormat("access request_id=%s tenant=%s method=%s peer=%s outcome=%s code=%s",
                      TextValue(r.request_id), TextValue(r.tenant), TextValue(r.method),
                      TextValue(r.peer), TextValue(r.outcome), TextValue(r.code));
  if (r.prompt_tokens) absl::StrAppendFormat(&line, " prompt_tokens=%d", *r.prompt_tokens);
  if (r.cached_tokens) absl::StrAppendFormat(&line, " cached_tokens=%d", *r.cached_tokens);
  if (r.completion_tokens) {
    absl::StrAppendFormat(&line, " completion_tokens=%d", *r.completion_tokens);
  }
  if (r.queue_ms) line += " queue_ms=" + Ms(*r.queue_ms);
  if (r.ttft_ms) line += " ttft_ms=" + Ms(*r.ttft_ms);
  line += " total_ms=" + Ms(r.total_ms);
  if (!r.error.empty()) line += " error=" + TextValue(r.error);
  return line;
}

std::string AccessLogJsonMembers(const AccessRecord& r) {
  std::string members =
      absl::StrFormat(R"("msg":"access","request_id":"%s","tenant":"%s","method":"%s","peer":"%s",)"
                      R"("outcome":"%s","code":"%s")",
                      JsonEscape(r.request_id), JsonEscape(r.tenant), JsonEscape(r.method),
                      JsonEscape(r.peer), JsonEscape(r.outcome), JsonEscape(r.code));
  if (r.prompt_tokens) absl::StrAppendFormat(&members, R"(,"prompt_tokens":%d)", *r.prompt_tokens);
  if (r.cached_tokens) absl::StrAppendFormat(&members, R"(,"cached_tokens":%d)", *r.cached_tokens);
  if (r.completion_tokens) {
    absl::StrAppendFormat(&members, R"(,"completion_tokens":%d)", *r.completion_tokens);
  }
  if (r.queue_ms) members += R"(,"queue_ms":)" + Ms(*r.queue_ms);
  if (r.ttft_ms) members += R"(,"ttft_ms":)" + Ms(*r.ttft_ms);
  members += R"(,"total_ms":)" + Ms(r.total_ms);
  if (!r.error.empty()) members += R"(,"error":")" + JsonEscape(r.error) + "\"";
  return members;
}

void LogAccess(const AccessRecord& record) {
  spdlog::logger* logger = g_access_logger.load(std::memory_order_acquire);
  if (logger == nullptr) {
    spdlog::info("{}", AccessLogText(record));
    return;
  }
  if (!logger->should_log(spdlog::level::info)) return;
  const std::string line =
      g_json.load(std::memory_order_relaxed) ? AccessLogJsonMembers(record) : AccessLogText(record);
  logger->info("{}", line);
}

void ConfigureLogging(const std::string& format, const std::string& level) {
  // Logs go to stderr: stdout carries the one line scripts read (the bound address).
  std::shared_ptr<spdlog::logger> main_logger = spdlog::stderr_color_mt("kvserve");
  spdlog::set_default_logger(main_logger);
  // The access log writes to stderr through a sink of its own (a sink has one formatter; the
  // console sinks share one lock); its message is already escaped (JSON members or text).
  auto access = std::make_shared<spdlog::logger>(
      "access", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (format == "json") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(std::string(kJsonTime) +
                                                          R"("msg":"%j"})");
    main_logger->set_formatter(std::move(formatter));
    access->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        std::string(kJsonTime) + "%v}", spdlog::pattern_time_type::utc));
    g_json.store(true, std::memory_order_relaxed);
  } else if (format == "text") {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<TextMessageFlag>('q').set_pattern(std::string(kTextTime) + "%q");
    main_logger->set_formatter(std::move(formatter));
    access->set_formatter(
        std::make_unique<spdlog::pattern_formatter>(std::string(kTextTime) + "%v"));
  }
  spdlog::register_logger(access);
  spdlog::set_level(ParseLevel(level));
  g_access_logger.store(access.get(), std::memory_order_release);
  RouteLibraryLogs(level);
}

void RouteLibraryLogs(const std::string& level) {
  gpr_set_log_function(LogGrpcLine);
  google::protobuf::SetLogHandler(LogProtobufLine);
  // gRPC formats nothing the logger would drop; GRPC_VERBOSITY, when set, decides instead
  // (gRPC reads it at its start unless a threshold was set).
  if (std::getenv("GRPC_VERBOSITY") == nullptr) {
    gpr_set_log_verbosity(ParseLevel(level) <= spdlog::level::debug ? GPR_LOG_SEVERITY_DEBUG
                                                                    : GPR_LOG_SEVERITY_ERROR);
  }
}

}  // namespace kvserve::server
