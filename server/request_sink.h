// RequestSink: where the engine delivers one request's results, implemented by each protocol
// adapter (a gRPC reactor, an HTTP stream).
#pragma once

#include "absl/status/status.h"
#include "server/generation_request.h"

namespace kvserve::server {

// Called only from the engine thread, in order, never concurrently for one request;
// implementations must not block (they hand the data to their transport and return). Exactly
// one of OnFinish or OnError ends every submitted request, after which the engine drops its
// reference and calls nothing more.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // A piece of one sequence: text and token ids generated since that sequence's previous
  // call; either may be empty, not both (a multi-sequence request's last piece of a sequence
  // may be empty, carrying only its finish reason).
  virtual void OnOutput(const SequenceOutput& output) = 0;
  // The request ended normally (including finish reason kCancelled at shutdown).
  virtual void OnFinish(const GenerationSummary& summary) = 0;
  // The request failed: CANCELLED (client cancel), DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
  // INVALID_ARGUMENT (its cache spec does not suit the model) or INTERNAL.
  virtual void OnError(const absl::Status& status) = 0;
};

}  // namespace kvserve::server
