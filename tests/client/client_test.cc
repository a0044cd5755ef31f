// Tests of the C++ client against an in-process fake server: every call (prefix and session
// calls included), stream cancel and deadline, the routing key, API key and replica metadata,
// and gRPC-to-absl status conversion.
#include "client/client.h"

#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "fake_generation_service.h"

namespace kvserve::client {
namespace {

using ::testing::ElementsAre;
using testing::FakeServer;
using ::testing::HasSubstr;

TEST(FromGrpcStatusTest, SameCodeAndMessage) {
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  const absl::Status status =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full"));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "queue full");
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "")).code(),
            absl::StatusCode::kUnauthenticated);
}

class ClientTest : public ::testing::Test {
 protected:
  FakeServer server_;
  std::unique_ptr<Client> client_ = Client::Connect(server_.target());
};

TEST_F(ClientTest, Generate) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->add_ids(5);
  request.mutable_token_ids()->add_ids(6);
  request.mutable_sampling()->set_max_new_tokens(2);
  absl::StatusOr<v1::GenerateResponse> response = client_->Generate(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->text(), "t0t1");
  EXPECT_THAT(response->token_ids(), ElementsAre(10, 11));
  EXPECT_EQ(response->usage().prompt_tokens(), 2);
}

TEST_F(ClientTest, GenerateErrorKeepsCodeAndMessage) {
  absl::StatusOr<v1::GenerateResponse> response = client_->Generate(v1::GenerateRequest());
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(response.status().message(), HasSubstr("input"));
}

TEST_F(ClientTest, GenerateStreamDeliversEveryMessageInOrder) {
  v1::GenerateRequest request;
  request.set_prompt("abc");
  request.mutable_sampling()->set_max_new_tokens(4);
  std::vector<v1::GenerateStreamResponse> messages;
  const absl::Status status = client_->GenerateStream(request, [&](const auto& message) {
    messages.push_back(message);
    return true;
  });
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(messages.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_THAT(messages[i].token_ids(), ElementsAre(10 + i));
  EXPECT_EQ(messages[3].finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(messages[3].usage().prompt_tokens(), 3);
  EXPECT_FALSE(messages[2].has_usage());
}

TEST_F(ClientTest, CallbackReturningFalseCancels) {
  v1::GenerateRequest request;
  request.set_prompt("hang");  // one message, then nothing until cancelled
  int received = 0;
  const absl::Status status = client_->GenerateStream(request, [&](const auto&) {
    ++received;
    return false;
  });
  EXPECT_EQ(received, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

TEST_F(ClientTest, DeadlineEndsAStreamThatStalls) {
  v1::GenerateRequest request;
  request.set_prompt("hang");
  int received = 0;
  const absl::Status status = client_->GenerateStream(
      request,
      [&](const auto&) {
        ++received;
        return true;
      },
      CallOptions{.timeout = absl::Milliseconds(50)});
  EXPECT_EQ(received, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(ClientTest, StreamErrorBeforeAnyMessage) {
  v1::GenerateRequest request;
  request.set_prompt("x");
  request.mutable_cache()->set_cache_implementation("unknown");
  int received = 0;
  const absl::Status status = client_->GenerateStream(request, [&](const auto&) {
    ++received;
    return true;
  });
  EXPECT_EQ(received, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("cache.cache_implementation"));
}

TEST_F(ClientTest, TokenizeModelInfoAndHealth) {
  v1::TokenizeRequest tokenize;
  tokenize.set_text("AB");
  absl::StatusOr<v1::TokenizeResponse> ids = client_->Tokenize(tokenize);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(ids->token_ids(), ElementsAre(1, 65, 66));

  absl::StatusOr<v1::ModelInfo> info = client_->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->vocab_size(), 100);

  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health =
      client_->CheckHealth(CallOptions{.timeout = absl::Seconds(10)});
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(ClientTest, PrefixRegisterGetListDelete) {
  v1::RegisterPrefixRequest request;
  request.set_name("sys");
  for (int id : {5, 6, 7}) request.mutable_token_ids()->add_ids(id);
  request.mutable_options()->set_ttl_seconds(60);
  absl::StatusOr<v1::Prefix> registered = client_->RegisterPrefix(request);
  ASSERT_TRUE(registered.ok()) << registered.status();
  EXPECT_EQ(registered->name(), "sys");
  EXPECT_EQ(registered->num_tokens(), 3);
  EXPECT_EQ(registered->bytes(), 3 * testing::FakePrefixCacheService::kFakeBytesPerToken);
  EXPECT_EQ(registered->options().ttl_seconds(), 60);
  EXPECT_TRUE(registered->options().pinned());
  // What went over the wire: pinned stayed unset.
  EXPECT_FALSE(server_.prefix_cache().last_register_request().options().has_pinned());

  absl::StatusOr<v1::Prefix> got = client_->GetPrefix("sys");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), registered->SerializeAsString());

  request.set_name("a-first");
  request.set_text("Hi");
  ASSERT_TRUE(client_->RegisterPrefix(request).ok());
  absl::StatusOr<v1::ListPrefixesResponse> list = client_->ListPrefixes();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->prefixes_size(), 2);
  EXPECT_EQ(list->prefixes(0).name(), "a-first");
  EXPECT_EQ(list->prefixes(0).num_tokens(), 3);  // "Hi" and BOS
  EXPECT_EQ(list->prefixes(1).name(), "sys");

  ASSERT_TRUE(client_->DeletePrefix("sys").ok());
  absl::StatusOr<v1::Prefix> gone = client_->GetPrefix("sys");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(gone.status().message(), "prefix 'sys' is not registered");
  EXPECT_EQ(client_->DeletePrefix("sys").code(), absl::StatusCode::kNotFound);
  list = client_->ListPrefixes(CallOptions{.timeout = absl::Seconds(10)});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->prefixes_size(), 1);
  EXPECT_EQ(list->prefixes(0).name(), "a-first");
}

TEST_F(ClientTest, RegisterPrefixErrorKeepsCodeAndMessage) {
  v1::RegisterPrefixRequest request;
  request.set_name("sys");
  absl::StatusOr<v1::Prefix> prefix = client_->RegisterPrefix(request);
  EXPECT_EQ(prefix.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(prefix.status().message(), "content: one of text, token_ids, messages is required");
}

TEST_F(ClientTest, SessionCreateGetListRollbackClose) {
  v1::CreateSessionRequest create;
  create.mutable_options()->set_ttl_seconds(30);
  absl::StatusOr<v1::Session> created = client_->CreateSession(create);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->id(), "00000000000000000000000000000001");
  EXPECT_EQ(created->options().ttl_seconds(), 30);
  EXPECT_EQ(created->options().cache().cache_implementation(), "dynamic");  // default applied

  // A turn on the session: its answer names it, and the session holds prompt and answer.
  v1::GenerateRequest turn;
  turn.mutable_token_ids()->add_ids(5);
  turn.mutable_token_ids()->add_ids(6);
  turn.set_session(created->id());
  absl::StatusOr<v1::GenerateResponse> response = client_->Generate(turn);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->cache_report().session(), created->id());

  absl::StatusOr<v1::Session> got = client_->GetSession(created->id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->num_tokens(), 2 + 3);
  EXPECT_EQ(got->turns(), 1);

  absl::StatusOr<v1::ListSessionsResponse> list = client_->ListSessions();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->sessions_size(), 1);
  EXPECT_EQ(list->sessions(0).id(), created->id());

  absl::StatusOr<v1::Session> rolled_back = client_->RollbackSession(created->id(), 2);
  ASSERT_TRUE(rolled_back.ok()) << rolled_back.status();
  EXPECT_EQ(rolled_back->num_tokens(), 3);

  EXPECT_TRUE(client_->CloseSession(created->id()).ok());
  EXPECT_EQ(client_->GetSession(created->id()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->CloseSession(created->id()).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->RollbackSession(created->id(), 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ListSessions()->sessions_size(), 0);
  // A turn on a closed session is the server's NOT_FOUND, streamed or not.
  EXPECT_EQ(client_->Generate(turn).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GenerateStream(turn, [](const auto&) { return true; }).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, SessionErrorsKeepCodeAndMessage) {
  v1::CreateSessionRequest create;
  create.mutable_options()->mutable_cache()->set_cache_implementation("unknown");
  absl::StatusOr<v1::Session> session = client_->CreateSession(create);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(session.status().message(), "options.cache.cache_implementation: unknown strategy");
  ASSERT_TRUE(client_->CreateSession(v1::CreateSessionRequest()).ok());
  absl::StatusOr<v1::Session> rollback =
      client_->RollbackSession("00000000000000000000000000000001", 1);
  EXPECT_EQ(rollback.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rollback.status().message(), "n: must be in [1, 0], got 1");
}

TEST(ClientRouteTest, EveryCallSendsTheRouteAndLearnsTheReplica) {
  FakeServer server("replica-7");
  const std::unique_ptr<Client> client = Client::Connect(server.target());
  const CallOptions call{.timeout = absl::Seconds(10), .route = "tenant-a"};
  v1::GenerateRequest generate;
  generate.set_prompt("abc");
  v1::TokenizeRequest tokenize;
  tokenize.set_text("A");
  v1::RegisterPrefixRequest prefix;
  prefix.set_name("sys");
  prefix.set_text("Hi");
  // Each call starts with an info naming another replica, which the call must overwrite.
  auto fresh = [] { return CallInfo{.replica_id = "stale"}; };
  std::vector<std::string> replicas;

  CallInfo info = fresh();
  ASSERT_TRUE(client->Generate(generate, call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client
                  ->GenerateStream(
                      generate, [](const auto&) { return true; }, call, &info)
                  .ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->Tokenize(tokenize, call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->GetModelInfo(call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->RegisterPrefix(prefix, call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->GetPrefix("sys", call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->ListPrefixes(call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->DeletePrefix("sys", call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->CheckHealth(call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  absl::StatusOr<v1::Session> session =
      client->CreateSession(v1::CreateSessionRequest(), call, &info);
  ASSERT_TRUE(session.ok()) << session.status();
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->GetSession(session->id(), call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->ListSessions(call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  // Nothing to drop: the fake's error, still from the replica.
  EXPECT_FALSE(client->RollbackSession(session->id(), 1, call, &info).ok());
  replicas.push_back(info.replica_id);
  info = fresh();
  ASSERT_TRUE(client->CloseSession(session->id(), call, &info).ok());
  replicas.push_back(info.replica_id);

  EXPECT_EQ(replicas, std::vector<std::string>(14, "replica-7"));
  EXPECT_EQ(server.replica().routes(), std::vector<std::string>(14, "tenant-a"));
}

TEST(ClientRouteTest, NoRouteSendsNoMetadata) {
  FakeServer server;
  const std::unique_ptr<Client> client = Client::Connect(server.target());
  ASSERT_TRUE(client->GetModelInfo(CallOptions{.timeout = absl::Seconds(10)}).ok());
  ASSERT_TRUE(client->ListPrefixes().ok());
  EXPECT_THAT(server.replica().routes(), ElementsAre("", ""));
}

TEST(ClientRouteTest, AFailedCallStillNamesItsReplica) {
  FakeServer server("replica-2");
  const std::unique_ptr<Client> client = Client::Connect(server.target());
  CallInfo info;
  absl::StatusOr<v1::GenerateResponse> response =
      client->Generate(v1::GenerateRequest(), CallOptions{.route = "k"}, &info);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(info.replica_id, "replica-2");
  v1::GenerateRequest bad;
  bad.set_prompt("x");
  bad.mutable_cache()->set_cache_implementation("unknown");
  info = CallInfo();
  EXPECT_FALSE(client
                   ->GenerateStream(
                       bad, [](const auto&) { return true; }, {}, &info)
                   .ok());
  EXPECT_EQ(info.replica_id, "replica-2");
}

TEST(ClientApiKeyTest, BearerToken) { EXPECT_EQ(BearerToken("k-1"), "Bearer k-1"); }

TEST(ClientApiKeyTest, EveryCallPresentsTheKey) {
  FakeServer server;
  const std::unique_ptr<Client> client =
      Client::Connect(server.target(), ChannelSecurity{.api_key = "secret-1"});
  const CallOptions call{.timeout = absl::Seconds(10), .route = "tenant-a"};
  v1::GenerateRequest generate;
  generate.set_prompt("abc");
  v1::TokenizeRequest tokenize;
  tokenize.set_text("A");
  v1::RegisterPrefixRequest prefix;
  prefix.set_name("sys");
  prefix.set_text("Hi");
  ASSERT_TRUE(client->Generate(generate, call).ok());
  ASSERT_TRUE(client
                  ->GenerateStream(
                      generate, [](const auto&) { return true; }, call)
                  .ok());
  ASSERT_TRUE(client->Tokenize(tokenize, call).ok());
  ASSERT_TRUE(client->GetModelInfo(call).ok());
  ASSERT_TRUE(client->RegisterPrefix(prefix, call).ok());
  ASSERT_TRUE(client->GetPrefix("sys", call).ok());
  ASSERT_TRUE(client->ListPrefixes(call).ok());
  ASSERT_TRUE(client->DeletePrefix("sys", call).ok());
  ASSERT_TRUE(client->CheckHealth(call).ok());
  absl::StatusOr<v1::Session> session = client->CreateSession(v1::CreateSessionRequest(), call);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_TRUE(client->GetSession(session->id(), call).ok());
  ASSERT_TRUE(client->ListSessions(call).ok());
  EXPECT_FALSE(client->RollbackSession(session->id(), 1, call).ok());  // nothing to drop
  ASSERT_TRUE(client->CloseSession(session->id(), call).ok());

  EXPECT_EQ(server.replica().authorizations(), std::vector<std::string>(14, "Bearer secret-1"));
  // The key rides along with the routing key, not instead of it.
  EXPECT_EQ(server.replica().routes(), std::vector<std::string>(14, "tenant-a"));
}

TEST(ClientApiKeyTest, AClientMadeFromAChannelPresentsItsKey) {
  FakeServer server;
  const Client client(grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()),
                      "k2");
  ASSERT_TRUE(client.ListPrefixes(CallOptions{.timeout = absl::Seconds(10)}).ok());
  EXPECT_THAT(server.replica().authorizations(), ElementsAre("Bearer k2"));
}

TEST(ClientApiKeyTest, NoKeySendsNoMetadata) {
  FakeServer server;
  const std::unique_ptr<Client> client = Client::Connect(server.target());
  ASSERT_TRUE(client->GetModelInfo(CallOptions{.timeout = absl::Seconds(10)}).ok());
  ASSERT_TRUE(client->CheckHealth(CallOptions{.timeout = absl::Seconds(10)}).ok());
  EXPECT_THAT(server.replica().authorizations(), ElementsAre("", ""));
}

TEST(ClientUnreachableTest, NoServerIsAnError) {
  std::string target;
  {
    FakeServer gone;
    target = gone.target();
  }
  CallInfo info{.replica_id = "stale"};
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health =
      Client::Connect(target)->CheckHealth(CallOptions{.timeout = absl::Seconds(10)}, &info);
  ASSERT_FALSE(health.ok());
  EXPECT_EQ(info.replica_id, "");  // no replica answered
  EXPECT_THAT(health.status().code(), ::testing::AnyOf(absl::StatusCode::kUnavailable,
                                                       absl::StatusCode::kDeadlineExceeded));
}

}  // namespace
}  // namespace kvserve::client
