// Canonical codes to HTTP statuses and OpenAI's error object.
#include "server/http_api/http_status.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kvserve::server::http_api {
namespace {

TEST(HttpStatusTest, CodesMapToStatuses) {
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kCancelled), 499);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatusOf(absl::StatusCode::kDeadlineExceeded), 504);
}

TEST(HttpStatusTest, ErrorObject) {
  const HttpError error = ToHttpError(absl::InvalidArgumentError("top_p: must be <= 1"), "top_p");
  const nlohmann::json body = nlohmann::json::parse(ErrorBody(error));
  EXPECT_EQ(body["error"]["message"], "top_p: must be <= 1");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "top_p");
  const nlohmann::json limited =
      nlohmann::json::parse(ErrorBody(ToHttpError(absl::ResourceExhaustedError("full"))));
  EXPECT_EQ(limited["error"]["type"], "rate_limit_error");
  EXPECT_EQ(limited["error"]["code"], "rate_limit_exceeded");
  EXPECT_TRUE(limited["error"]["param"].is_null());
  // Bytes that are not UTF-8 in a message never make the body invalid JSON.
  EXPECT_NO_THROW(nlohmann::json::parse(ErrorBody(ToHttpError(absl::NotFoundError("\xff")))));
}

}  // namespace
}  // namespace kvserve::server::http_api
