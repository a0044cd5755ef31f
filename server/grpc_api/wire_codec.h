// WireCodec: protobuf messages to and from the raw byte buffers of kvserve's services. The
// services take raw bytes so that a request that is not a valid message (truncated bytes,
// invalid UTF-8 in a string field) is INVALID_ARGUMENT naming the message, not the
// UNIMPLEMENTED with an empty message that gRPC's callback API answers on its own.
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/proto_buffer_writer.h>

#include <chrono>
#include <climits>
#include <string>
#include <utility>

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

// What a request that did not parse (`parse_error`) means: a call that ended before its bytes
// were whole (`call_ended`: gRPC cancelled it) is DEADLINE_EXCEEDED when its deadline has passed
// and CANCELLED otherwise -- a cut upload, not a malformed request; a live call's is
// `parse_error` itself.
inline absl::Status UnparsedRequestStatus(absl::Status parse_error, bool call_ended,
                                          bool deadline_passed) {
  if (!call_ended) return parse_error;
  if (deadline_passed) {
    return absl::DeadlineExceededError(
        "the call's deadline passed before its request was received whole");
  }
  return absl::CancelledError("the call ended before its request was received whole");
}

// ParseWireMessage for the request of a call (`context`). The request of a call that has
// ended (its deadline, the client gone) may be cut off -- even where its bytes still parse, at a
// field's end -- so it is UnparsedRequestStatus's DEADLINE_EXCEEDED or CANCELLED.
template <typename Message>
absl::Status ParseCallRequest(const grpc::ServerContextBase& context, const grpc::ByteBuffer& raw,
                              Message* message) {
  absl::Status parsed = ParseWireMessage(raw, message);
  const bool ended = context.IsCancelled();
  if (parsed.ok() && !ended) return parsed;
  if (parsed.ok()) parsed = absl::CancelledError("");
  return UnparsedRequestStatus(std::move(parsed), ended,
                               context.deadline() <= std::chrono::system_clock::now());
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
