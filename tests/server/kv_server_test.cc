// In-process kvserve on 127.0.0.1:0 driven through the real gRPC stubs: unary and streamed
// results against the plain generation loop, concurrency across cache strategies, cancel,
// deadline, queue limit, malformed requests, health (per service), reflection (v1 and
// v1alpha), metrics and graceful shutdown; request ids, access-log lines and the count of
// every outcome; a taken port; a unix socket; request size limits.
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
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "grpc_health/v1/health.grpc.pb.h"
#ifdef KVSERVE_OWN_REFLECTION_V1
#include "grpc_reflection/v1/reflection.pb.h"
#endif
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "model/generator.h"
#include "model/model.h"
#include "server/api_keys.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;
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
  // Starts a server on `listen` (a unix: socket, or 127.0.0.1:0 by default) and connects.
  void StartServer(ServerOptions options = {}, const std::string& listen = "127.0.0.1:0") {
    options.listen = listen;
    options.threads = 1;
    absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(
        listen.rfind("unix:", 0) == 0 ? listen : absl::StrCat("127.0.0.1:", server_->port()),
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

  grpc::health::v1::HealthCheckResponse::ServingStatus Health(const std::string& service = "") {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = health_->Check(&context, request, &response);
    EXPECT_TRUE(status.ok()) << service << ": " << status.error_message();
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
  const tokenizer::Tokenizer* tokenizer_ = nullptr;
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

TEST_F(KvServerTest, HealthReportsEachKvserveServiceByName) {
  StartServer();
  const std::vector<std::string> services = {"kvserve.v1.Generation", "kvserve.v1.PrefixCache",
                                             "kvserve.v1.Sessions"};
  for (const std::string& service : services) {
    EXPECT_EQ(Health(service), grpc::health::v1::HealthCheckResponse::NOT_SERVING) << service;
  }
  ServeEmbeddedModel();
  for (const std::string& service : services) {
    EXPECT_EQ(Health(service), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  EXPECT_EQ(Health(), grpc::health::v1::HealthCheckResponse::SERVING);
  // A name the server does not serve is NOT_FOUND, as the protocol says.
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("kvserve.v1.Nothing");
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_EQ(health_->Check(&context, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

#ifdef KVSERVE_OWN_REFLECTION_V1
// (With a gRPC whose plugin serves v1 itself, this build has no copy of its messages.)
// One request of server reflection over `method` (v1 or v1alpha: their messages are the same
// on the wire), on a stream of its own. The call's status, when not OK, is in error_response.
grpc::reflection::v1::ServerReflectionResponse Reflect(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
    const grpc::reflection::v1::ServerReflectionRequest& request) {
  grpc::ClientContext context;
  const grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::reflection::v1::ServerReflectionRequest,
                                           grpc::reflection::v1::ServerReflectionResponse>>
      stream(grpc::internal::ClientReaderWriterFactory<
             grpc::reflection::v1::ServerReflectionRequest,
             grpc::reflection::v1::ServerReflectionResponse>::Create(channel.get(), rpc, &context));
  grpc::reflection::v1::ServerReflectionResponse response;
  stream->Write(request);
  stream->WritesDone();
  const bool read = stream->Read(&response);
  const grpc::Status status = stream->Finish();
  if (!status.ok() || !read) {
    response.mutable_error_response()->set_error_code(status.ok() ? -1 : status.error_code());
    response.mutable_error_response()->set_error_message(status.error_message());
  }
  return response;
}

constexpr char kReflectionV1[] = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
constexpr char kReflectionV1alpha[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

TEST_F(KvServerTest, ReflectionV1AndV1alphaListTheSameServicesAndResolveEach) {
  StartServer();
  ServeEmbeddedModel();
  grpc::reflection::v1::ServerReflectionRequest list;
  list.set_list_services("");
  std::map<std::string, std::set<std::string>> listed;
  for (const char* method : {kReflectionV1, kReflectionV1alpha}) {
    const grpc::reflection::v1::ServerReflectionResponse response = Reflect(channel_, method, list);
    ASSERT_FALSE(response.has_error_response())
        << method << ": " << response.error_response().ShortDebugString();
    for (const auto& service : response.list_services_response().service()) {
      listed[method].insert(service.name());
    }
  }
  EXPECT_EQ(listed[kReflectionV1], listed[kReflectionV1alpha]);
  for (const char* name : {"kvserve.v1.Generation", "kvserve.v1.PrefixCache", "kvserve.v1.Sessions",
                           "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                           "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_TRUE(listed[kReflectionV1].contains(name)) << name;
  }
  // Every listed service resolves, through either version, to the file that declares it.
  for (const std::string& service : listed[kReflectionV1]) {
    for (const char* method : {kReflectionV1, kReflectionV1alpha}) {
      grpc::reflection::v1::ServerReflectionRequest request;
      request.set_file_containing_symbol(service);
      const grpc::reflection::v1::ServerReflectionResponse response =
          Reflect(channel_, method, request);
      ASSERT_TRUE(response.has_file_descriptor_response())
          << method << " " << service << ": " << response.error_response().ShortDebugString();
      google::protobuf::FileDescriptorProto file;
      ASSERT_TRUE(
          file.ParseFromString(response.file_descriptor_response().file_descriptor_proto(0)));
      bool declared = false;
      for (const auto& declared_service : file.service()) {
        declared |= file.package() + "." + declared_service.name() == service;
      }
      EXPECT_TRUE(declared) << method << ": " << service << " is not in " << file.name();
    }
  }
  grpc::reflection::v1::ServerReflectionRequest unknown;
  unknown.set_file_containing_symbol("kvserve.v1.Nothing");
  EXPECT_EQ(Reflect(channel_, kReflectionV1, unknown).error_response().error_code(),
            grpc::StatusCode::NOT_FOUND);
}

#endif  // KVSERVE_OWN_REFLECTION_V1

TEST_F(KvServerTest, AUnixSocketIsReportedByItsPath) {
  char folder[] = "/tmp/kvserve-unix-XXXXXX";
  ASSERT_NE(::mkdtemp(folder), nullptr);
  const std::string listen = absl::StrCat("unix:", folder, "/grpc.sock");
  StartServer({}, listen);
  EXPECT_EQ(server_->address(), listen);
  ServeEmbeddedModel();
  grpc::ClientContext context;
  v1::GenerateResponse response;
  ASSERT_TRUE(stub_
                  ->Generate(&context,
                             Request("token_ids { ids: [1] } "
                                     "sampling { max_new_tokens: 1 }"),
                             &response)
                  .ok());
  auto trailer = context.GetServerTrailingMetadata().find("x-kvserve-replica");
  ASSERT_NE(trailer, context.GetServerTrailingMetadata().end());
  EXPECT_EQ(std::string(trailer->second.data(), trailer->second.size()), listen);
  grpc::ClientContext info_context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub_->GetModelInfo(&info_context, v1::GetModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.replica_id(), listen);
  server_.reset();
  std::filesystem::remove_all(folder);
}

TEST(BoundAddressTest, TheBoundPortReplacesPortZeroAndASocketKeepsItsPath) {
  EXPECT_EQ(BoundAddress("127.0.0.1:0", 40123), "127.0.0.1:40123");
  EXPECT_EQ(BoundAddress("[::1]:0", 40123), "[::1]:40123");
  EXPECT_EQ(BoundAddress("localhost:50051", 50051), "localhost:50051");
  EXPECT_EQ(BoundAddress("unix:/run/kvserve/grpc.sock", 1), "unix:/run/kvserve/grpc.sock");
  EXPECT_EQ(BoundAddress("unix:relative.sock", 1), "unix:relative.sock");
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
  // gRPC cancels the call at its deadline: counted as deadline_exceeded, not cancelled.
  const std::string text = server_->metrics().TextFormat();
  EXPECT_THAT(text, HasSubstr("\nkvserve_requests_total{outcome=\"deadline_exceeded\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("outcome=\"cancelled\"")));
}

// More than one `authorization` value: none decides, the call is refused naming the header.
TEST_F(KvServerTest, TwoAuthorizationValuesAreUnauthenticated) {
  const std::string keys_path = ::testing::TempDir() + "kvserve-two-authorization-keys.yaml";
  {
    std::ofstream keys(keys_path);
    keys << "- key_sha256: " << HexDigest(Sha256("first")) << "\n  tenant: a\n"
         << "- key_sha256: " << HexDigest(Sha256("second")) << "\n  tenant: b\n";
  }
  ServerOptions options;
  options.api_keys_file = keys_path;
  StartServer(options);
  ServeEmbeddedModel();
  const auto call = [&](std::vector<std::string> keys) {
    grpc::ClientContext context;
    for (const std::string& key : keys) context.AddMetadata("authorization", "Bearer " + key);
    v1::GenerateResponse response;
    return stub_->Generate(
        &context, Request("token_ids { ids: [1, 2] } sampling { max_new_tokens: 1 }"), &response);
  };
  EXPECT_TRUE(call({"first"}).ok());
  for (const auto& keys :
       {std::vector<std::string>{"first", "second"}, std::vector<std::string>{"first", "first"}}) {
    const grpc::Status status = call(keys);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_THAT(status.error_message(), HasSubstr("more than one 'authorization'"));
  }
  std::filesystem::remove(keys_path);
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
  EXPECT_THAT(status.error_message(), HasSubstr("--max-queue 1"));
  // How many requests wait (other tenants' among them) is not the caller's business.
  EXPECT_THAT(status.error_message(), Not(HasSubstr("requests wait")));
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

// The value of `key` in gRPC metadata (empty when absent).
std::string MetadataValue(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                          const std::string& key) {
  auto it = metadata.find(key);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

// A whole line of the Prometheus text format.
std::string Line(const std::string& line) { return "\n" + line + "\n"; }

TEST_F(KvServerTest, ASecondServerOnATakenPortFailsNamingTheAddress) {
  ServerOptions options;
  options.metrics_listen = "127.0.0.1:0";
  StartServer(options);
  ServerOptions second;
  second.threads = 1;
  second.listen = absl::StrCat("127.0.0.1:", server_->port());
  absl::StatusOr<std::unique_ptr<KvServer>> refused = KvServer::Start(second);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()),
              StartsWith(absl::StrCat("--listen '127.0.0.1:", server_->port(),
                                      "': cannot listen: Address already in use")));
  second.listen = "127.0.0.1:0";
  second.metrics_listen = absl::StrCat("127.0.0.1:", server_->metrics_port());
  refused = KvServer::Start(second);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("--metrics-listen '127.0.0.1:", server_->metrics_port(),
                         "': cannot bind (Address already in use)"));
  // The first server still serves.
  ServeEmbeddedModel();
  v1::GenerateResponse response;
  EXPECT_TRUE(
      Generate(Request("token_ids { ids: [1] } sampling { max_new_tokens: 1 }"), &response).ok());
}

TEST_F(KvServerTest, RequestIdsComeBackInInitialAndTrailingMetadata) {
  StartServer();
  ServeEmbeddedModel();
  const v1::GenerateRequest request =
      Request("token_ids { ids: [1, 2] } sampling { max_new_tokens: 2 ignore_eos: true }");
  {
    grpc::ClientContext context;
    context.AddMetadata("x-request-id", "trace-42.a:b_c");
    v1::GenerateResponse response;
    ASSERT_TRUE(stub_->Generate(&context, request, &response).ok());
    EXPECT_EQ(MetadataValue(context.GetServerInitialMetadata(), "x-request-id"), "trace-42.a:b_c");
    EXPECT_EQ(MetadataValue(context.GetServerTrailingMetadata(), "x-request-id"), "trace-42.a:b_c");
  }
  {
    // Generated for a stream that sent none, the same in both.
    grpc::ClientContext context;
    auto reader = stub_->GenerateStream(&context, request);
    v1::GenerateStreamResponse message;
    while (reader->Read(&message)) {
    }
    ASSERT_TRUE(reader->Finish().ok());
    const std::string id = MetadataValue(context.GetServerInitialMetadata(), "x-request-id");
    EXPECT_EQ(id.size(), 16u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_EQ(MetadataValue(context.GetServerTrailingMetadata(), "x-request-id"), id);
  }
  {
    // An error too, with an id too long to keep replaced.
    grpc::ClientContext context;
    context.AddMetadata("x-request-id", std::string(65, 'x'));
    v1::GenerateResponse response;
    ASSERT_EQ(stub_->Generate(&context, Request(""), &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    const std::string id = MetadataValue(context.GetServerTrailingMetadata(), "x-request-id");
    EXPECT_EQ(id.size(), 16u);
    EXPECT_EQ(MetadataValue(context.GetServerInitialMetadata(), "x-request-id"), id);
  }
}

// Sends spdlog's default logger to a string while alive (the access log writes there when
// ConfigureLogging was not called).
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>(
        "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(stream_));
    logger->set_pattern("%v");
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(std::move(logger));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  // The captured lines that start with `prefix`.
  std::vector<std::string> Lines(const std::string& prefix) {
    std::vector<std::string> lines;
    std::istringstream in(stream_.str());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0) lines.push_back(line);
    }
    return lines;
  }

 private:
  std::ostringstream stream_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(KvServerTest, EveryCallHasOneAccessLogLine) {
  StartServer();
  ServeEmbeddedModel();
  LogCapture capture;
  {
    grpc::ClientContext context;
    context.AddMetadata("x-request-id", "access-1");
    v1::GenerateResponse response;
    ASSERT_TRUE(stub_
                    ->Generate(&context,
                               Request("token_ids { ids: [1, 2, 3] } "
                                       "sampling { max_new_tokens: 4 ignore_eos: true }"),
                               &response)
                    .ok());
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("x-request-id", "access-2");
    v1::GenerateResponse response;
    ASSERT_FALSE(
        stub_->Generate(&context, Request("prefix: \"nope\" prompt: \"x\""), &response).ok());
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("x-request-id", "access-3");
    v1::TokenizeRequest request;
    request.set_text("hello");
    v1::TokenizeResponse response;
    ASSERT_TRUE(stub_->Tokenize(&context, request, &response).ok());
  }
  Health();  // not a kvserve call: no line
  const std::vector<std::string> lines = capture.Lines("access ");
  ASSERT_EQ(lines.size(), 3u) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], StartsWith("access request_id=access-1 tenant=default method=Generate "
                                   "peer=ipv"));
  EXPECT_THAT(lines[0], HasSubstr(" outcome=length code=OK prompt_tokens=3 cached_tokens=0 "
                                  "completion_tokens=4 queue_ms="));
  EXPECT_THAT(lines[0], Not(HasSubstr("ttft_ms=0.000")));
  EXPECT_THAT(lines[0], Not(HasSubstr("error=")));
  EXPECT_THAT(lines[1], StartsWith("access request_id=access-2 tenant=default method=Generate "));
  // Refused before its prompt was known: no token field at all, rather than zeros.
  EXPECT_THAT(lines[1], HasSubstr(" outcome=not_found code=NOT_FOUND total_ms="));
  EXPECT_THAT(lines[1], HasSubstr(R"(error="prefix: no prefix named 'nope' is registered")"));
  EXPECT_THAT(lines[2], StartsWith("access request_id=access-3 tenant=default method=Tokenize "));
  // A method without tokens, queue or first token has none of those fields.
  EXPECT_THAT(lines[2], HasSubstr(" outcome=ok code=OK total_ms="));
  for (const char* field :
       {"prompt_tokens=", "cached_tokens=", "completion_tokens=", "queue_ms=", "ttft_ms="}) {
    EXPECT_THAT(lines[1], Not(HasSubstr(field)));
    EXPECT_THAT(lines[2], Not(HasSubstr(field)));
  }
}

TEST_F(KvServerTest, ARequestRefusedForMemoryLogsItsPromptTokens) {
  ServerOptions options;
  options.kv_device_bytes = 1024;  // far below what 4 + 100 tokens need even offloaded
  StartServer(options);
  ServeEmbeddedModel();
  LogCapture capture;
  grpc::ClientContext context;
  context.AddMetadata("x-request-id", "too-big");
  v1::GenerateResponse response;
  const grpc::Status status = stub_->Generate(
      &context,
      Request("token_ids { ids: [1, 2, 3, 4] } sampling { max_new_tokens: 100 ignore_eos: true }"),
      &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  const std::vector<std::string> lines = capture.Lines("access request_id=too-big ");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0],
              HasSubstr(" outcome=resource_exhausted code=RESOURCE_EXHAUSTED prompt_tokens=4 "
                        "total_ms="));
  EXPECT_THAT(lines[0], Not(HasSubstr("completion_tokens=")));
  EXPECT_THAT(lines[0], Not(HasSubstr("ttft_ms=")));
}

TEST_F(KvServerTest, EveryOutcomeIsCountedOnceAndTheWarmUpIsNot) {
  StartServer();
  ServeEmbeddedModel();
  const std::string fresh = server_->metrics().TextFormat();
  // Nothing but the start-up ran: the warm-up generation is not a request.
  EXPECT_THAT(fresh, Not(HasSubstr("kvserve_requests_total{")));
  EXPECT_THAT(fresh, Not(HasSubstr("kvserve_rpcs_total{")));
  EXPECT_THAT(fresh, HasSubstr(Line("kvserve_e2e_request_latency_seconds_count 0")));
  EXPECT_THAT(fresh, HasSubstr("kvserve_build_info{cuda=\""));
  EXPECT_THAT(fresh, HasSubstr(",version=\"0.1.0\"} 1"));

  v1::GenerateResponse response;
  EXPECT_TRUE(Generate(Request("token_ids { ids: [1, 2] } "
                               "sampling { max_new_tokens: 3 ignore_eos: true }"),
                       &response)
                  .ok());
  EXPECT_EQ(
      Generate(Request("prompt: \"x\" sampling { do_sample: true temperature: -1 }"), &response)
          .error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Stream(Request("token_ids { ids: -1 }")).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Generate(Request("prefix: \"missing\" prompt: \"x\""), &response).error_code(),
            grpc::StatusCode::NOT_FOUND);
  // A prefix call that finds nothing is an RPC, not a generation request.
  std::unique_ptr<v1::PrefixCache::Stub> prefixes = v1::PrefixCache::NewStub(channel_);
  grpc::ClientContext context;
  v1::GetPrefixRequest get;
  get.set_name("missing");
  v1::Prefix prefix;
  EXPECT_EQ(prefixes->GetPrefix(&context, get, &prefix).error_code(), grpc::StatusCode::NOT_FOUND);
  Health();

  const std::string text = server_->metrics().TextFormat();
  EXPECT_THAT(text, HasSubstr(Line("kvserve_requests_total{outcome=\"length\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_requests_total{outcome=\"invalid_argument\"} 2")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_requests_total{outcome=\"not_found\"} 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_rpcs_total{code=\"OK\",method=\"Generate\"} 1")));
  EXPECT_THAT(
      text, HasSubstr(Line("kvserve_rpcs_total{code=\"INVALID_ARGUMENT\",method=\"Generate\"} 1")));
  EXPECT_THAT(
      text,
      HasSubstr(Line("kvserve_rpcs_total{code=\"INVALID_ARGUMENT\",method=\"GenerateStream\"} 1")));
  EXPECT_THAT(text,
              HasSubstr(Line("kvserve_rpcs_total{code=\"NOT_FOUND\",method=\"Generate\"} 1")));
  EXPECT_THAT(text,
              HasSubstr(Line("kvserve_rpcs_total{code=\"NOT_FOUND\",method=\"GetPrefix\"} 1")));
  EXPECT_THAT(text, Not(HasSubstr("Check")));  // health calls are not counted
  // Only the request that finished has a latency and a prefill time.
  EXPECT_THAT(text, HasSubstr(Line("kvserve_e2e_request_latency_seconds_count 1")));
  EXPECT_THAT(text, HasSubstr(Line("kvserve_request_prefill_time_seconds_count 1")));
  // The CPU's KV budget is unlimited; the caches were freed at the end.
  EXPECT_THAT(text, HasSubstr(Line("kvserve_kv_device_bytes_limit +Inf")));
}

// The value of the unlabelled sample `name` in Prometheus text (-1 when absent).
double Sample(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

TEST_F(KvServerTest, KvDeviceBudgetIsExported) {
  ServerOptions options;
  options.kv_device_bytes = 64 << 20;
  StartServer(options);
  EXPECT_EQ(Sample(server_->metrics().TextFormat(), "kvserve_kv_device_bytes_limit"), 64 << 20);
  ServeEmbeddedModel();
  // A registered prefix's snapshot stays in the budget once the engine is idle.
  std::unique_ptr<v1::PrefixCache::Stub> prefixes = v1::PrefixCache::NewStub(channel_);
  grpc::ClientContext context;
  v1::RegisterPrefixRequest request;
  request.set_name("sys");
  for (int i = 1; i <= 40; ++i) request.mutable_token_ids()->add_ids(i);
  v1::Prefix prefix;
  ASSERT_TRUE(prefixes->RegisterPrefix(&context, request, &prefix).ok());
  // A request's steps publish the stats again; once idle, the last publication came after it.
  v1::GenerateResponse response;
  ASSERT_TRUE(
      Generate(Request("token_ids { ids: [1] } sampling { max_new_tokens: 3 ignore_eos: true }"),
               &response)
          .ok());
  ASSERT_TRUE(server_->engine()->WaitIdle(absl::Seconds(30)));
  const std::string text = server_->metrics().TextFormat();
  EXPECT_EQ(Sample(text, "kvserve_kv_device_bytes_limit"), 64 << 20);
  const double used = Sample(text, "kvserve_kv_device_bytes_used");
  EXPECT_GT(used, 0);
  EXPECT_EQ(used, server_->engine()->Stats().prefix_bytes);
}

TEST_F(KvServerTest, AnOversizeRequestIsResourceExhaustedAndServingGoesOn) {
  ServerOptions options;
  options.max_request_bytes = 4096;
  StartServer(options);
  ServeEmbeddedModel();
  v1::GenerateRequest big;
  big.set_prompt(std::string(5000, 'a'));
  v1::GenerateResponse response;
  const grpc::Status status = Generate(big, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_TRUE(
      Generate(Request("token_ids { ids: [1] } sampling { max_new_tokens: 1 }"), &response).ok());
}

TEST_F(KvServerTest, CountsOfMessagesAndTokenIdsAreBoundedByField) {
  StartServer();
  ServeEmbeddedModel();
  v1::GenerateRequest messages;
  for (int i = 0; i < 4097; ++i) {
    v1::ChatMessage* m = messages.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content("x");
  }
  v1::GenerateResponse response;
  grpc::Status status = Generate(messages, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "messages.messages: 4097 messages; at most 4096 are allowed");

  v1::GenerateRequest stops = Request("token_ids { ids: [1] }");
  for (int i = 0; i < 1025; ++i) stops.mutable_sampling()->add_stop_token_ids(1);
  status = Generate(stops, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "sampling.stop_token_ids: 1025 ids given; at most 1024 are allowed");

  const int64_t context = model_->info().max_position_embeddings;
  v1::GenerateRequest ids;
  for (int64_t i = 0; i <= context; ++i) ids.mutable_token_ids()->add_ids(1);
  status = Generate(ids, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), absl::StrCat("token_ids.ids: ", context + 1,
                                                 " ids; the model's context holds ", context));
}

}  // namespace
}  // namespace kvserve::server
