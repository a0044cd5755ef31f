// Tests of ServerReflectionV1's answers over a pool of three small files (an import chain with
// an extension), and of one stream of several requests through a real server.
#include "server/grpc_api/server_reflection_v1.h"

#include <gmock/gmock.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/text_format.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace kvserve::server::grpc_api {
namespace {

using google::protobuf::FileDescriptorProto;
using grpc::reflection::v1::ServerReflectionRequest;
using grpc::reflection::v1::ServerReflectionResponse;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// base.proto declares Base (with an extension range) and Echo; ext.proto imports it and
// extends Base with fields 100 and 101; top.proto imports both.
class ReflectionPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Build(R"pb(
      name: "base.proto"
      package: "t"
      syntax: "proto2"
      message_type {
        name: "Base"
        extension_range { start: 100 end: 200 }
      }
      service {
        name: "Echo"
        method { name: "Say" input_type: ".t.Base" output_type: ".t.Base" }
      }
    )pb");
    Build(R"pb(
      name: "ext.proto"
      package: "t"
      syntax: "proto2"
      dependency: "base.proto"
      extension {
        name: "tag"
        number: 100
        label: LABEL_OPTIONAL
        type: TYPE_INT32
        extendee: ".t.Base"
      }
      extension {
        name: "note"
        number: 101
        label: LABEL_OPTIONAL
        type: TYPE_STRING
        extendee: ".t.Base"
      }
    )pb");
    Build(R"pb(
      name: "top.proto"
      package: "t"
      syntax: "proto2"
      dependency: "ext.proto"
      dependency: "base.proto"
      message_type { name: "Top" }
    )pb");
  }

  void Build(const char* text) {
    FileDescriptorProto file;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &file)) << text;
    ASSERT_NE(pool_.BuildFile(file), nullptr) << text;
  }

  // The names of the files a response carries, in order.
  static std::vector<std::string> FileNames(const ServerReflectionResponse& response) {
    std::vector<std::string> names;
    for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
      FileDescriptorProto file;
      EXPECT_TRUE(file.ParseFromString(bytes));
      names.push_back(file.name());
    }
    return names;
  }

  google::protobuf::DescriptorPool pool_;
  ServerReflectionV1 service_{{"t.Echo", "grpc.reflection.v1.ServerReflection"}, &pool_};
};

TEST_F(ReflectionPoolTest, ListsTheServicesItWasGiven) {
  ServerReflectionRequest request;
  request.set_host("h");
  request.set_list_services("*");
  const ServerReflectionResponse response = service_.Answer(request);
  EXPECT_EQ(response.valid_host(), "h");
  EXPECT_EQ(response.original_request().list_services(), "*");
  std::vector<std::string> names;
  for (const auto& service : response.list_services_response().service()) {
    names.push_back(service.name());
  }
  EXPECT_THAT(names, ElementsAre("t.Echo", "grpc.reflection.v1.ServerReflection"));
}

TEST_F(ReflectionPoolTest, AFileComesWithEachFileItImportsOnce) {
  ServerReflectionRequest request;
  request.set_file_by_filename("top.proto");
  // ext.proto imports base.proto, which top.proto imports again: sent once.
  EXPECT_THAT(FileNames(service_.Answer(request)),
              ElementsAre("top.proto", "ext.proto", "base.proto"));
  request.set_file_by_filename("absent.proto");
  const ServerReflectionResponse absent = service_.Answer(request);
  EXPECT_EQ(absent.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(absent.has_file_descriptor_response());
}

TEST_F(ReflectionPoolTest, SymbolsResolveToTheirFile) {
  ServerReflectionRequest request;
  for (const char* symbol : {"t.Echo", "t.Echo.Say", "t.Base"}) {
    request.set_file_containing_symbol(symbol);
    EXPECT_THAT(FileNames(service_.Answer(request)), ElementsAre("base.proto")) << symbol;
  }
  request.set_file_containing_symbol("t.Top");
  EXPECT_THAT(FileNames(service_.Answer(request)),
              ElementsAre("top.proto", "ext.proto", "base.proto"));
  request.set_file_containing_symbol("t.Nothing");
  EXPECT_EQ(service_.Answer(request).error_response().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ReflectionPoolTest, ExtensionsResolveByTypeAndNumber) {
  ServerReflectionRequest request;
  request.mutable_file_containing_extension()->set_containing_type("t.Base");
  request.mutable_file_containing_extension()->set_extension_number(101);
  EXPECT_THAT(FileNames(service_.Answer(request)), ElementsAre("ext.proto", "base.proto"));
  request.mutable_file_containing_extension()->set_extension_number(150);
  EXPECT_EQ(service_.Answer(request).error_response().error_code(), grpc::StatusCode::NOT_FOUND);
  request.mutable_file_containing_extension()->set_containing_type("t.Nothing");
  EXPECT_EQ(service_.Answer(request).error_response().error_code(), grpc::StatusCode::NOT_FOUND);

  ServerReflectionRequest numbers;
  numbers.set_all_extension_numbers_of_type("t.Base");
  const ServerReflectionResponse response = service_.Answer(numbers);
  EXPECT_EQ(response.all_extension_numbers_response().base_type_name(), "t.Base");
  EXPECT_THAT(response.all_extension_numbers_response().extension_number(),
              UnorderedElementsAre(100, 101));
  numbers.set_all_extension_numbers_of_type("t.Nothing");
  EXPECT_EQ(service_.Answer(numbers).error_response().error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ReflectionPoolTest, ARequestOfNoKindIsUnimplemented) {
  const ServerReflectionResponse response = service_.Answer(ServerReflectionRequest());
  EXPECT_EQ(response.error_response().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(ReflectionPoolTest, OneStreamAnswersEachRequestInOrder) {
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service_);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto stub = grpc::reflection::v1::ServerReflection::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);
  std::vector<std::string> answers;
  for (const char* symbol : {"t.Top", "t.Nothing", "t.Echo"}) {
    ServerReflectionRequest request;
    request.set_file_containing_symbol(symbol);
    ASSERT_TRUE(stream->Write(request));
    ServerReflectionResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.original_request().file_containing_symbol(), symbol);
    answers.push_back(response.has_error_response() ? "error" : FileNames(response).front());
  }
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_THAT(answers, ElementsAre("top.proto", "error", "base.proto"));
  server->Shutdown();
}

}  // namespace
}  // namespace kvserve::server::grpc_api
