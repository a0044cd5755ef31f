// The kvserve.v1 wire messages read into the request builder's typed inputs, and its results
// written back: the only place where the builder meets generated proto code.
#pragma once

#include "kvserve/v1/generation.pb.h"
#include "kvserve/v1/prefix.pb.h"
#include "kvserve/v1/session.pb.h"
#include "server/request_inputs.h"

namespace kvserve::server::grpc_api {

// Each field as sent: set/unset kept, nothing validated (the builder does that).
GenerationInput ToInput(const v1::GenerateRequest& request);
RegistrationInput ToInput(const v1::RegisterPrefixRequest& request);
// The constraint oneof; a message with no kind is kUnset (the builder refuses it by name).
constraint::ConstraintSpec ToInput(const v1::Constraint& constraint);
SessionInput ToInput(const v1::SessionOptions& options);
TokenizeInput ToInput(const v1::TokenizeRequest& request);

v1::TokenizeResponse ToProto(const TokenizeResult& result);

}  // namespace kvserve::server::grpc_api
