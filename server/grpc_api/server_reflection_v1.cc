// ServerReflectionV1: lookups in the descriptor pool and the bidirectional stream answering
// them one by one.
#include "server/grpc_api/server_reflection_v1.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <grpcpp/support/server_callback.h>

#include <set>
#include <utility>

namespace kvserve::server::grpc_api {
namespace {

namespace reflection = grpc::reflection::v1;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// Adds `file` and, depth first, the files it imports, skipping those already in `sent`.
void AddFileAndImports(const FileDescriptor* file, std::set<std::string>* sent,
                       reflection::FileDescriptorResponse* out) {
  if (!sent->insert(file->name()).second) return;
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFileAndImports(file->dependency(i), sent, out);
  }
}

void SetError(grpc::StatusCode code, std::string message,
              reflection::ServerReflectionResponse* out) {
  out->mutable_error_response()->set_error_code(code);
  out->mutable_error_response()->set_error_message(std::move(message));
}

// One stream: reads a request, writes its answer, reads the next; one operation in flight.
class ReflectionStream final
    : public grpc::ServerBidiReactor<reflection::ServerReflectionRequest,
                                     reflection::ServerReflectionResponse> {
 public:
  explicit ReflectionStream(const ServerReflectionV1* service) : service_(service) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side (or the call ended)
      Finish(grpc::Status::OK);
      return;
    }
    response_ = service_->Answer(request_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ServerReflectionV1* const service_;
  reflection::ServerReflectionRequest request_;
  reflection::ServerReflectionResponse response_;
};

}  // namespace

ServerReflectionV1::ServerReflectionV1(std::vector<std::string> services,
                                       const DescriptorPool* pool)
    : services_(std::move(services)),
      pool_(pool != nullptr ? pool : DescriptorPool::generated_pool()) {}

grpc::ServerBidiReactor<reflection::ServerReflectionRequest, reflection::ServerReflectionResponse>*
ServerReflectionV1::ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) {
  return new ReflectionStream(this);
}

reflection::ServerReflectionResponse ServerReflectionV1::Answer(
    const reflection::ServerReflectionRequest& request) const {
  reflection::ServerReflectionResponse out;
  out.set_valid_host(request.host());
  *out.mutable_original_request() = request;
  std::set<std::string> sent;
  switch (request.message_request_case()) {
    case reflection::ServerReflectionRequest::kFileByFilename: {
      const FileDescriptor* file = pool_->FindFileByName(request.file_by_filename());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "File not found.", &out);
      } else {
        AddFileAndImports(file, &sent, out.mutable_file_descriptor_response());
      }
      break;
    }
    case reflection::ServerReflectionRequest::kFileContainingSymbol: {
      const FileDescriptor* file =
          pool_->FindFileContainingSymbol(request.file_containing_symbol());
      if (file == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Symbol not found.", &out);
      } else {
        AddFileAndImports(file, &sent, out.mutable_file_descriptor_response());
      }
      break;
    }
    case reflection::ServerReflectionRequest::kFileContainingExtension: {
      const reflection::ExtensionRequest& wanted = request.file_containing_extension();
      const google::protobuf::Descriptor* type =
          pool_->FindMessageTypeByName(wanted.containing_type());
      const google::protobuf::FieldDescriptor* extension =
          type == nullptr ? nullptr : pool_->FindExtensionByNumber(type, wanted.extension_number());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Type not found.", &out);
      } else if (extension == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Extension not found.", &out);
      } else {
        AddFileAndImports(extension->file(), &sent, out.mutable_file_descriptor_response());
      }
      break;
    }
    case reflection::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const google::protobuf::Descriptor* type =
          pool_->FindMessageTypeByName(request.all_extension_numbers_of_type());
      if (type == nullptr) {
        SetError(grpc::StatusCode::NOT_FOUND, "Type not found.", &out);
        break;
      }
      std::vector<const google::protobuf::FieldDescriptor*> extensions;
      pool_->FindAllExtensions(type, &extensions);
      reflection::ExtensionNumberResponse* numbers = out.mutable_all_extension_numbers_response();
      numbers->set_base_type_name(type->full_name());
      for (const google::protobuf::FieldDescriptor* extension : extensions) {
        numbers->add_extension_number(extension->number());
      }
      break;
    }
    case reflection::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) {
        out.mutable_list_services_response()->add_service()->set_name(name);
      }
      break;
    case reflection::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(grpc::StatusCode::UNIMPLEMENTED, "The request names nothing to look up.", &out);
      break;
  }
  return out;
}

}  // namespace kvserve::server::grpc_api
