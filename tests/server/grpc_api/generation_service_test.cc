// GenerationService through a real kvserve on 127.0.0.1:0: the reactor/engine hand-off under
// cancels at every point (run it under ThreadSanitizer: `make sanitize`), malformed bytes,
// the trailing metadata every response carries, and errors that stay small.
#include "server/grpc_api/generation_service.h"

#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "server/engine.h"
#include "server/kv_server.h"

namespace kvserve::server::grpc_api {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::StartsWith;

class GenerationServiceTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.threads = 1;
    absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    absl::StatusOr<LoadedModel> model = LoadModel(options);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(server_->Serve(*std::move(model)).ok());
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
  }

  // Sends `bytes` as the request of `method` ("/kvserve.v1.Generation/Generate").
  grpc::Status SendRaw(const std::string& method, const std::string& bytes) {
    grpc::GenericStub generic(channel_);
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&done](grpc::Status status) { done.set_value(std::move(status)); });
    return done.get_future().get();
  }

  std::unique_ptr<KvServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

v1::GenerateRequest Request(int max_new_tokens, const std::string& strategy) {
  v1::GenerateRequest request;
  request.set_prompt("the quick brown fox jumps over the lazy dog");
  request.mutable_sampling()->set_max_new_tokens(max_new_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  request.mutable_cache()->set_cache_implementation(strategy);
  return request;
}

// A stream read on the callback API, cancelled by the test at a chosen point.
class CancellableStream final : public grpc::ClientReadReactor<v1::GenerateStreamResponse> {
 public:
  // Cancels after `cancel_after_messages` messages (-1: never).
  CancellableStream(v1::Generation::Stub* stub, const v1::GenerateRequest& request,
                    int cancel_after_messages)
      : cancel_after_(cancel_after_messages) {
    stub->async()->GenerateStream(&context_, &request, this);
    StartRead(&message_);
    StartCall();
  }
  void Cancel() { context_.TryCancel(); }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    ++messages_;
    if (messages_ == cancel_after_) context_.TryCancel();
    StartRead(&message_);
  }
  void OnDone(const grpc::Status& status) override { done_.set_value(status); }
  grpc::Status Wait() { return done_.get_future().get(); }

 private:
  grpc::ClientContext context_;
  v1::GenerateStreamResponse message_;
  const int cancel_after_;
  int messages_ = 0;
  std::promise<grpc::Status> done_;
};

TEST_F(GenerationServiceTest, CancelsAtEveryPointOfTheHandOffLoseNothing) {
  Start();
  const std::vector<std::string> strategies = {"dynamic", "static", "offloaded"};
  std::atomic<int> ok{0}, cancelled{0}, other{0};
  absl::Mutex mu;
  std::map<std::string, int> unexpected;
  auto count = [&](const grpc::Status& status) {
    if (status.ok()) {
      ++ok;
    } else if (status.error_code() == grpc::StatusCode::CANCELLED) {
      ++cancelled;
    } else {
      ++other;
      absl::MutexLock lock(&mu);
      ++unexpected[absl::StrCat(status.error_code(), " ", status.error_message())];
    }
  };
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 30; ++i) {
        const v1::GenerateRequest request =
            Request(2 + static_cast<int>(rng() % 6), strategies[rng() % strategies.size()]);
        const int point = static_cast<int>(rng() % 5);
        if (i % 2 == 0) {
          // Unary: cancel before the call starts, at once, a little later, or never.
          grpc::ClientContext context;
          v1::GenerateResponse response;
          std::promise<grpc::Status> done;
          if (point == 0) context.TryCancel();
          stub_->async()->Generate(&context, &request, &response,
                                   [&done](grpc::Status s) { done.set_value(std::move(s)); });
          if (point == 1) context.TryCancel();
          if (point == 2) {
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
            context.TryCancel();
          }
          count(done.get_future().get());
        } else {
          // Stream: cancel at once, after the first or second message, or never.
          CancellableStream stream(stub_.get(), request, point >= 3 ? point - 2 : -1);
          if (point == 0) stream.Cancel();
          if (point == 1) {
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
            stream.Cancel();
          }
          count(stream.Wait());
        }
      }
    });
  }
  for (std::thread& c : clients) c.join();
  EXPECT_EQ(other.load(), 0) << "unexpected outcomes: " << unexpected.size();
  for (const auto& [what, n] : unexpected) ADD_FAILURE() << n << " x " << what;
  EXPECT_EQ(ok + cancelled + other, 180);
  EXPECT_GT(ok.load(), 0);
  EXPECT_GT(cancelled.load(), 0);
  // Every cancelled request left the engine and freed its cache.
  ASSERT_TRUE(server_->engine()->WaitIdle(absl::Seconds(30)));
  const EngineStats stats = server_->engine()->Stats();
  EXPECT_EQ(stats.num_running, 0);
  EXPECT_EQ(stats.num_waiting, 0);
  EXPECT_EQ(stats.kv_device_bytes, 0);
  // And the server still answers.
  grpc::ClientContext context;
  v1::GenerateResponse response;
  ASSERT_TRUE(stub_->Generate(&context, Request(3, "dynamic"), &response).ok());
  EXPECT_EQ(response.usage().completion_tokens(), 3);
}

TEST_F(GenerationServiceTest, MalformedBytesAreInvalidArgumentNamingTheMessage) {
  Start();
  const std::string garbage = "\xff\xff\xff\xff\x0f";
  for (const auto& [method, message] : std::vector<std::pair<std::string, std::string>>{
           {"/kvserve.v1.Generation/Generate", "kvserve.v1.GenerateRequest"},
           {"/kvserve.v1.Generation/GenerateStream", "kvserve.v1.GenerateRequest"},
           {"/kvserve.v1.Generation/Tokenize", "kvserve.v1.TokenizeRequest"},
           {"/kvserve.v1.Generation/GetModelInfo", "kvserve.v1.GetModelInfoRequest"},
           {"/kvserve.v1.PrefixCache/RegisterPrefix", "kvserve.v1.RegisterPrefixRequest"},
           {"/kvserve.v1.PrefixCache/GetPrefix", "kvserve.v1.GetPrefixRequest"},
           {"/kvserve.v1.PrefixCache/ListPrefixes", "kvserve.v1.ListPrefixesRequest"},
           {"/kvserve.v1.PrefixCache/DeletePrefix", "kvserve.v1.DeletePrefixRequest"},
       }) {
    SCOPED_TRACE(method);
    const grpc::Status status = SendRaw(method, garbage);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), StartsWith("request: not a valid " + message));
  }
  // Field 1 (prompt, a string) holding bytes that are not UTF-8.
  const std::string bad_utf8 = std::string("\x0a\x02\xc3\x28", 4);
  const grpc::Status status = SendRaw("/kvserve.v1.Generation/Generate", bad_utf8);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("not valid UTF-8"));
  // The same bytes with valid UTF-8 are served.
  const std::string good = std::string("\x0a\x02\x68\x69", 4);
  EXPECT_TRUE(SendRaw("/kvserve.v1.Generation/Generate", good).ok());
}

TEST_F(GenerationServiceTest, EveryResponseNamesItsReplicaAndRequestId) {
  Start();
  const std::string replica = absl::StrCat("127.0.0.1:", server_->port());
  {
    grpc::ClientContext context;
    context.AddMetadata("x-request-id", "client-id-7");
    context.AddMetadata("x-kvserve-route", "tenant-a");
    v1::GenerateResponse response;
    ASSERT_TRUE(stub_->Generate(&context, Request(2, "dynamic"), &response).ok());
    const auto& trailers = context.GetServerTrailingMetadata();
    ASSERT_EQ(trailers.count("x-kvserve-replica"), 1u);
    EXPECT_EQ(std::string(trailers.find("x-kvserve-replica")->second.data(),
                          trailers.find("x-kvserve-replica")->second.size()),
              replica);
    ASSERT_EQ(trailers.count("x-request-id"), 1u);
    EXPECT_EQ(std::string(trailers.find("x-request-id")->second.data(),
                          trailers.find("x-request-id")->second.size()),
              "client-id-7");
  }
  {
    // An error still names the replica; an unusable client id is replaced by a fresh one.
    grpc::ClientContext context;
    context.AddMetadata("x-request-id", "has spaces and is not an id");
    v1::TokenizeRequest request;
    v1::TokenizeResponse response;
    ASSERT_EQ(stub_->Tokenize(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    const auto& trailers = context.GetServerTrailingMetadata();
    ASSERT_EQ(trailers.count("x-kvserve-replica"), 1u);
    ASSERT_EQ(trailers.count("x-request-id"), 1u);
    const grpc::string_ref id = trailers.find("x-request-id")->second;
    EXPECT_EQ(std::string(id.data(), id.size()).find_first_not_of("0123456789abcdef"),
              std::string::npos);
    EXPECT_EQ(id.size(), 16u);
  }
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.replica_id(), replica);
}

TEST_F(GenerationServiceTest, ReplicaIdFlagNamesTheReplica) {
  ServerOptions options;
  options.replica_id = "kvserve-2";
  Start(options);
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.replica_id(), "kvserve-2");
  const grpc::string_ref trailer =
      context.GetServerTrailingMetadata().find("x-kvserve-replica")->second;
  EXPECT_EQ(std::string(trailer.data(), trailer.size()), "kvserve-2");
}

TEST_F(GenerationServiceTest, HugeEchoedStringsKeepTheErrorSmallAndTheChannelUsable) {
  Start();
  v1::GenerateRequest request = Request(2, std::string(10000, 'x'));
  grpc::ClientContext context;
  v1::GenerateResponse response;
  const grpc::Status status = stub_->Generate(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), StartsWith("cache.cache_implementation: 'xxx"));
  EXPECT_LT(status.error_message().size(), 300u);
  // The next call on the same channel is served.
  grpc::ClientContext next;
  EXPECT_TRUE(stub_->Generate(&next, Request(2, "dynamic"), &response).ok());
}

TEST_F(GenerationServiceTest, InputTextBeyondWhatTheContextHoldsIsRefusedUnread) {
  Start();
  grpc::ClientContext info_context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  // Far more text than max_position_embeddings tokens could ever hold.
  const std::string text(static_cast<size_t>(info.max_position_embeddings()) * 1024, 'a');
  {
    v1::GenerateRequest request = Request(2, "dynamic");
    request.set_prompt(text);
    grpc::ClientContext context;
    v1::GenerateResponse response;
    const grpc::Status status = stub_->Generate(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                StartsWith(absl::StrCat("prompt: ", text.size(), " bytes is more than the ")));
  }
  {
    v1::TokenizeRequest request;
    request.set_text(text);
    grpc::ClientContext context;
    v1::TokenizeResponse response;
    const grpc::Status status = stub_->Tokenize(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), StartsWith("text: "));
  }
}

}  // namespace
}  // namespace kvserve::server::grpc_api
