// WireCodec: protobuf messages to and from the raw byte buffers of kvserve's services. The
// services take raw bytes so that a request that is not a valid message (truncated bytes,
// invalid UTF-8 in a string field) is INVALID_ARGUMENT naming the message, not the
// UNIMPLEMENTED with an empty message that gRPC's callback API answers on its own.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <climits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::server::grpc_api {

// Parses `raw` into `message` (cleared first). InvalidArgument naming the message type when
// the bytes are not one. `raw` is not modified.
template <typename Message>
absl::Status ParseWireMessage(const grpc::ByteBuffer& raw, Message* message) {
  message->Clear();
  grpc::ByteBuffer copy(raw);  // shares the slices; the reader consumes its own view
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !message->ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "request: not a valid ", message->GetDescriptor()->full_name(),
        " message (malformed protobuf bytes, or a string field that is not valid UTF-8)"));
  }
  return absl::OkStatus();
}

// Serializes `message` into `raw`. Internal only when protobuf itself fails (a message over
// 2 GiB).
template <typename Message>
absl::Status SerializeWireMessage(const Message& message, grpc::ByteBuffer* raw) {
  raw->Clear();
  const size_t size = message.ByteSizeLong();
  if (size > static_cast<size_t>(INT_MAX)) {
    return absl::InternalError(absl::StrCat("a ", message.GetDescriptor()->full_name(), " of ",
                                            size, " bytes is too large to send"));
  }
  grpc::ProtoBufferWriter writer(raw, grpc::kProtoBufferWriterMaxBufferLength,
                                 static_cast<int>(size));
  if (!message.SerializeToZeroCopyStream(&writer)) {
    return absl::InternalError(
        absl::StrCat("could not serialize a ", message.GetDescriptor()->full_name()));
  }
  return absl::OkStatus();
}

}  // namespace kvserve::server::grpc_api
