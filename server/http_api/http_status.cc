// ToHttpError: canonical codes to HTTP statuses and OpenAI error objects.
#include "server/http_api/http_status.h"

#include <nlohmann/json.hpp>

namespace kvserve::server::http_api {

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      // nginx's "client closed request": nobody reads it, but logs and metrics say why.
      return 499;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

namespace {

const char* TypeOf(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 409:
      return "conflict_error";
    case 429:
      return "rate_limit_error";
    case 504:
      return "timeout_error";
    case 503:
      return "service_unavailable_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

}  // namespace

HttpError ToHttpError(const absl::Status& status, std::string_view param) {
  HttpError error;
  error.status = HttpStatusOf(status.code());
  error.type = TypeOf(error.status);
  error.param = std::string(param);
  error.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kUnauthenticated:
      error.code = "invalid_api_key";
      break;
    case absl::StatusCode::kResourceExhausted:
      error.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kInvalidArgument:
      if (!error.param.empty()) error.code = "invalid_value";
      break;
    default:
      break;
  }
  return error;
}

std::string ErrorBody(const HttpError& error) {
  nlohmann::json body;
  nlohmann::json& e = body["error"];
  e["message"] = error.message;
  e["type"] = error.type;
  e["param"] = error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param);
  e["code"] = error.code.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.code);
  // Messages may quote request bytes that are not UTF-8: replaced, never an exception.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvserve::server::http_api
