// ToHttpError: the one mapping of canonical (absl) status codes to HTTP statuses and OpenAI's
// error object ({"error": {"message", "type", "param", "code"}}).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace kvserve::server::http_api {

// What an error response says.
struct HttpError {
  int status = 500;
  std::string type;  // OpenAI's error type: "invalid_request_error", "authentication_error", ...
  std::string code;  // OpenAI's error code ("model_not_found", "rate_limit_exceeded"); may be empty
  std::string param;  // the request parameter at fault; empty: none
  std::string message;
};

// The HTTP status of a canonical code: InvalidArgument, OutOfRange and FailedPrecondition 400,
// Unauthenticated 401, PermissionDenied 403, NotFound 404, AlreadyExists and Aborted 409,
// ResourceExhausted 429, Cancelled 499 (the client went away), Unimplemented 501,
// Unavailable 503, DeadlineExceeded 504, everything else 500.
int HttpStatusOf(absl::StatusCode code);

// `status` (not OK) as an error response: its HTTP status, OpenAI's type for it, `param`,
// and the message (an Internal one already names the request id; see InternalErrorFor).
HttpError ToHttpError(const absl::Status& status, std::string_view param = {});

// The response body: {"error": {"message": ..., "type": ..., "param": ... | null, "code": ...
// | null}}.
std::string ErrorBody(const HttpError& error);

}  // namespace kvserve::server::http_api
