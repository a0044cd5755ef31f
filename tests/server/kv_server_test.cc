// In-process kvserve on 127.0.0.1:0 driven through the real gRPC stubs: unary and streamed
// results against the plain generation loop, concurrency across cache strategies, cancel,
// deadline, queue limit, malformed requests, health, metrics and graceful shutdown.
#include "server/kv_server.h"

#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/text_format.h>

#include "absl/strings/str_cat.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "grpc_health/v1/health.grpc.pb.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "model/generator.h"
#include "model/model.h"
#include "server/engine.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// What a stream delivered.
struct StreamResult {
  std::string text;
  std::vector<int32_t> token_ids;
  v1::GenerateStreamResponse last;
  grpc::Status status;
  int num_messages = 0;
};

class KvServerTest : public ::testing::Test {
 protected:
  void StartServer(ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.threads = 1;
    absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Generation::NewStub(channel_);
    health_ = grpc::health::v1::Health::NewStub(channel_);
  }

  void ServeEmbeddedModel() {
    ServerOptions options;
    options.threads = 1;
    absl::StatusOr<LoadedModel> model = LoadModel(options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = model->model.get();
    tokenizer_ = model->tokenizer.get();
    const absl::Status serving = server_->Serve(*std::move(model));
    ASSERT_TRUE(serving.ok()) << serving;
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health() {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status =
        health_->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.status();
  }

  grpc::Status Generate(const v1::GenerateRequest& request, v1::GenerateResponse* response,
                        int deadline_ms = 0) {
    grpc::ClientContext context;
    if (deadline_ms > 0) {
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(deadline_ms));
    }
    return stub_->Generate(&context, request, response);
  }

  StreamResult Stream(const v1::GenerateRequest& request) {
    StreamResult result;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader =
        stub_->GenerateStream(&context, request);
    v1::GenerateStreamResponse message;
    while (reader->Read(&message)) {
      result.text += message.text();
      result.token_ids.insert(result.token_ids.end(), message.token_ids().begin(),
                              message.token_ids().end());
      result.last = message;
      ++result.num_messages;
    }
    result.status = reader->Finish();
    return result;
  }

  static v1::GenerateRequest Request(const std::string& text_proto) {
    v1::GenerateRequest request;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text_proto, &request)) << text_proto;
    return request;
  }

  std::unique_ptr<KvServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Generation::Stub> stub_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  model::Model* model_ = nullptr;
  const model::Tokenizer* tokenizer_ = nullptr;
};

TEST_F(KvServerTest, HealthIsNotServingUntilTheModelIsWarm) {
  StartServer();
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  v1::GenerateResponse response;
  EXPECT_EQ(Generate(Request("token_ids { ids: 1 }"), &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  ServeEmbeddedModel();
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(KvServerTest, UnaryAndStreamEqualThePlainGenerationLoop) {
  StartServer();
  ServeEmbeddedModel();
  const v1::GenerateRequest request =
      Request(R"pb(prompt: "Once upon a time"
                   sampling { max_new_tokens: 24 ignore_eos: true })pb");
  v1::GenerateResponse unary;
  ASSERT_TRUE(Generate(request, &unary).ok());
  const StreamResult stream = Stream(request);
  ASSERT_TRUE(stream.status.ok()) << stream.status.error_message();

  // The same prompt through model::Generate (what kvserve-generate runs), on the same model.
  absl::StatusOr<std::vector<int32_t>> prompt = tokenizer_->Encode("Once upon a time", true);
  ASSERT_TRUE(prompt.ok());
  absl::StatusOr<std::unique_ptr<cache::KvCache>> cache =
      cache::MakeCache(cache::CacheSpec(), model_->info().layer_specs);
  ASSERT_TRUE(cache.ok());
  model::GenerateOptions options;
  options.max_new_tokens = 24;
  options.ignore_eos = true;
  absl::StatusOr<model::GenerateResult> direct =
      model::Generate(*model_, *prompt, cache->get(), options);
  ASSERT_TRUE(direct.ok()) << direct.status();

  EXPECT_THAT(unary.token_ids(), ElementsAreArray(direct->tokens));
  EXPECT_EQ(unary.text(), tokenizer_->Decode(direct->tokens, true));
  EXPECT_THAT(stream.token_ids, ElementsAreArray(direct->tokens));
  EXPECT_EQ(stream.text, unary.text());
  EXPECT_GT(stream.num_messages, 1);
  EXPECT_EQ(unary.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(stream.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(unary.usage().prompt_tokens(), static_cast<int32_t>(prompt->size()));
  EXPECT_EQ(unary.usage().completion_tokens(), 24);
  EXPECT_EQ(stream.last.usage().completion_tokens(), 24);
  EXPECT_EQ(unary.cache_report().cache_implementation(), "dynamic");
  EXPECT_GT(unary.timings().ttft_ms(), 0);
}

TEST_F(KvServerTest, ConcurrentStreamsWithDifferentStrategiesEqualTheirSoloRuns) {
  ServerOptions options;
  options.scheduler.max_batch_size = 16;
  options.scheduler.max_batch_tokens = 64;  // longer prompts are chunked beside decodes
  StartServer(options);
  ServeEmbeddedModel();
  const std::vector<std::string> caches = {
      R"pb(cache_implementation: "dynamic")pb",   R"pb(cache_implementation: "static")pb",
      R"pb(cache_implementation: "offloaded")pb", R"pb(cache_implementation: "offloaded_static")pb",
      R"pb(cache_implementation: "quantized"
           quantization { backend: "hqq" nbits: 8 residual_length: 4 q_group_size: 32 })pb",
      R"pb(cache_implementation: "quantized"
           quantization { backend: "quanto" nbits: 4 residual_length: 2 q_group_size: 32 })pb",
      R"pb(cache_implementation: "quantized"
           quantization { backend: "fp8" })pb",     R"pb(use_cache: false)pb",
  };
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 16; ++i) {
    std::string ids;
    for (int t = 0; t < 5 + 7 * i; ++t)
      absl::StrAppend(&ids, t ? ", " : "", (37 * i + 11 * t) % 500);
    requests.push_back(
        Request(absl::StrCat("token_ids { ids: [", ids, "] } sampling { max_new_tokens: ", 4 + i,
                             " ignore_eos: true } cache { ", caches[i % 8], " }")));
  }
  std::vector<v1::GenerateResponse> solo(16);
  for (int i = 0; i < 16; ++i) {
    grpc::Status status = Generate(requests[i], &solo[i]);
    ASSERT_TRUE(status.ok()) << i << ": " << status.error_message();
  }
  std::vector<StreamResult> together(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] { together[i] = Stream(requests[i]); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(together[i].status.ok()) << i << ": " << together[i].status.error_message();
    EXPECT_THAT(together[i].token_ids, ElementsAreArray(solo[i].token_ids())) << "request " << i;
    EXPECT_EQ(together[i].text, solo[i].text()) << "request " << i;
    EXPECT_EQ(together[i].last.cache_report().cache_implementation(),
              solo[i].cache_report().cache_implementation());
  }
  EXPECT_EQ(solo[7].cache_report().cache_implementation(), "none");
  EXPECT_TRUE(server_->engine()->WaitIdle(absl::Seconds(30)));
}

TEST_F(KvServerTest, CancelMidStreamFreesTheCache) {
  StartServer();
  ServeEmbeddedModel();
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateStreamResponse>> reader = stub_->GenerateStream(
      &context, Request(R"pb(token_ids { ids: [ 1, 2, 3 ] }
                             sampling { max_new_tokens: 4000 ignore_eos: true })pb"));
  v1::GenerateStreamResponse message;
  ASSERT_TRUE(reader->Read(&message));
  // Stats are published after each step; the first message may come before that.
  for (int i = 0; i < 10000 && server_->engine()->Stats().kv_device_bytes == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(server_->engine()->Stats().kv_device_bytes, 0);
  context.TryCancel();
  while (reader->Read(&message)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(server_->engine()->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(server_->engine()->Stats().kv_device_bytes, 0);
  // Still serving.
  v1::GenerateResponse response;
  EXPECT_TRUE(
      Generate(Request("token_ids { ids: 1 } sampling { max_new_tokens: 2 }"), &response).ok());
}

TEST_F(KvServerTest, ShortDeadlineOnALongGenerationIsDeadlineExceeded) {
  StartServer();
  ServeEmbeddedModel();
  v1::GenerateResponse response;
  grpc::Status status = Generate(
      Request("token_ids { ids: [1, 2] } sampling { max_new_tokens: 4000 ignore_eos: true }"),
      &response, /*deadline_ms=*/50);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(server_->engine()->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(server_->engine()->Stats().kv_device_bytes, 0);
}

TEST_F(KvServerTest, FullQueueIsResourceExhausted) {
  ServerOptions options;
  options.scheduler.max_batch_size = 1;
  options.scheduler.max_batch_tokens = 16;
  options.scheduler.max_queue = 1;
  StartServer(options);
  ServeEmbeddedModel();
  // A long stream holds the only batch slot; one request may wait; the next is refused.
  grpc::ClientContext long_context;
  auto reader = stub_->GenerateStream(
      &long_context,
      Request("token_ids { ids: [1] } sampling { max_new_tokens: 4000 ignore_eos: true }"));
  v1::GenerateStreamResponse message;
  ASSERT_TRUE(reader->Read(&message));
  v1::GenerateResponse queued_response;
  grpc::Status queued_status;
  std::thread queued([&] {
    queued_status = Generate(Request("token_ids { ids: [2] } sampling { max_new_tokens: 2 }"),
                             &queued_response);
  });
  // Wait until the second request is in the queue.
  for (int i = 0; i < 3000 && server_->engine()->Stats().num_waiting < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  v1::GenerateResponse refused;
  grpc::Status status =
      Generate(Request("token_ids { ids: [3] } sampling { max_new_tokens: 2 }"), &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("--max-queue"));
  long_context.TryCancel();
  while (reader->Read(&message)) {
  }
  reader->Finish();
  queued.join();
  EXPECT_TRUE(queued_status.ok()) << queued_status.error_message();
}

TEST_F(KvServerTest, MalformedRequestsAreInvalidArgumentNamingTheFieldAndServingGoesOn) {
  StartServer();
  ServeEmbeddedModel();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "input"},
      {"token_ids {}", "token_ids.ids"},
      {"token_ids { ids: 512 }", "token_ids.ids[0]"},
      {"token_ids { ids: -5 }", "token_ids.ids[0]"},
      {"messages {}", "messages.messages"},
      {"messages { messages { content: \"hi\" } }", "messages.messages[0].role"},
      {"prefix: \"no/slash\" prompt: \"x\"", "prefix"},
      {"prompt: \"x\" sampling { max_new_tokens: 0 }", "sampling.max_new_tokens"},
      {"prompt: \"x\" sampling { max_new_tokens: 5000 }", "sampling.max_new_tokens"},
      {"prompt: \"x\" sampling { do_sample: true temperature: -0.5 }", "sampling.temperature"},
      {"prompt: \"x\" sampling { top_k: -2 }", "sampling.top_k"},
      {"prompt: \"x\" sampling { top_p: 0 }", "sampling.top_p"},
      {"prompt: \"x\" sampling { min_p: 1.5 }", "sampling.min_p"},
      {"prompt: \"x\" sampling { repetition_penalty: -1 }", "sampling.repetition_penalty"},
      {"prompt: \"x\" sampling { stop: \"\" }", "sampling.stop[0]"},
      {"prompt: \"x\" sampling { stop_token_ids: 100000 }", "sampling.stop_token_ids[0]"},
      {"prompt: \"x\" cache { cache_implementation: \"paged\" }", "cache.cache_implementation"},
      {"prompt: \"x\" cache { quantization { nbits: 2 } }", "cache.quantization"},
      {"prompt: \"x\" cache { cache_implementation: \"quantized\" quantization { backend: \"hqq\" "
       "nbits: 5 } }",
       "cache.quantization.nbits"},
      {"prompt: \"x\" cache { cache_implementation: \"static\" max_cache_len: -4 }",
       "cache.max_cache_len"},
      {"prompt: \"x\" cache { cache_implementation: \"static\" max_cache_len: 999999 }",
       "cache.max_cache_len"},
      {"prompt: \"x\" cache { offload_only_non_sliding: false }", "cache.offload_only_non_sliding"},
  };
  ASSERT_GE(cases.size(), 20u);
  for (const auto& [text, field] : cases) {
    v1::GenerateResponse response;
    grpc::Status status = Generate(Request(text), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << text;
    EXPECT_THAT(status.error_message(), StartsWith(field + ":")) << text;
    const StreamResult stream = Stream(Request(text));
    EXPECT_EQ(stream.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << text;
  }
  v1::GenerateResponse response;
  EXPECT_TRUE(Generate(Request("prompt: \"fine\" sampling { max_new_tokens: 3 }"), &response).ok());
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(KvServerTest, TokenizeAndModelInfo) {
  StartServer();
  ServeEmbeddedModel();
  grpc::ClientContext context;
  v1::TokenizeRequest request;
  request.set_text("hello");
  v1::TokenizeResponse tokens;
  ASSERT_TRUE(stub_->Tokenize(&context, request, &tokens).ok());
  absl::StatusOr<std::vector<int32_t>> expected = tokenizer_->Encode("hello", true);
  EXPECT_THAT(tokens.token_ids(), ElementsAreArray(*expected));
  grpc::ClientContext info_context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.name(), "embedded-tiny");
  EXPECT_EQ(info.vocab_size(), model_->info().vocab_size);
  EXPECT_EQ(info.layers_size(), model_->info().num_layers);
  EXPECT_EQ(info.dtype(), "float32");
  EXPECT_EQ(info.weight_dtype(), "float32");  // the embedded model is a float32 checkpoint
  EXPECT_EQ(info.max_new_tokens_limit(), 4096);
}

// Fetches http://127.0.0.1:port/metrics with a plain socket.
std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n\r\n";
  ::send(fd, request.data(), request.size(), 0);
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) response.append(buffer, n);
  ::close(fd);
  return response;
}

TEST_F(KvServerTest, MetricsEndpointServesPrometheusText) {
  ServerOptions options;
  options.metrics_listen = "127.0.0.1:0";
  StartServer(options);
  ServeEmbeddedModel();
  ASSERT_GT(server_->metrics_port(), 0);
  v1::GenerateResponse response;
  ASSERT_TRUE(
      Generate(Request("token_ids { ids: [1, 2] } sampling { max_new_tokens: 3 ignore_eos: true }"),
               &response)
          .ok());
  const std::string page = HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(page, StartsWith("HTTP/1.1 200 OK"));
  // Only this request counts: the start-up warm-up is not a request.
  EXPECT_THAT(page, HasSubstr("kvserve_requests_total{outcome=\"length\"} 1"));
  EXPECT_THAT(page, HasSubstr("kvserve_generation_tokens_total 3"));
  EXPECT_THAT(page, HasSubstr("kvserve_time_to_first_token_seconds_count 1"));
  EXPECT_THAT(page, HasSubstr("kvserve_kv_cache_bytes{"));
  EXPECT_THAT(page, HasSubstr("kvserve_prefix_cache_queries_total{kind=\"automatic\"}"));
  EXPECT_THAT(page, HasSubstr("kvserve_prefix_cache_bytes "));
  EXPECT_THAT(HttpGet(server_->metrics_port(), "/other"), StartsWith("HTTP/1.1 404"));
}

TEST_F(KvServerTest, ShutdownEndsAStreamWithCancelledAndItsPartialOutput) {
  StartServer();
  ServeEmbeddedModel();
  grpc::ClientContext context;
  auto reader = stub_->GenerateStream(
      &context,
      Request("token_ids { ids: [1] } sampling { max_new_tokens: 4000 ignore_eos: true }"));
  v1::GenerateStreamResponse message;
  ASSERT_TRUE(reader->Read(&message));
  int tokens = message.token_ids_size();
  std::thread stopper([&] { server_->Shutdown(absl::ZeroDuration()); });
  v1::GenerateStreamResponse last = message;
  while (reader->Read(&message)) {
    tokens += message.token_ids_size();
    last = message;
  }
  EXPECT_TRUE(reader->Finish().ok());
  stopper.join();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_CANCELLED);
  EXPECT_EQ(last.usage().completion_tokens(), tokens);
  EXPECT_LT(tokens, 4000);
}

}  // namespace
}  // namespace kvserve::server
