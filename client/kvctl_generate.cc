// kvctl generate and kvctl stream (see kvctl_generate.h).
#include "client/kvctl_generate.h"

#include <iostream>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "client/output.h"
#include "client/request_flags.h"

namespace kvserve::client {
namespace {

// " replica=ID" when the server named itself; empty otherwise.
std::string ReplicaSuffix(const CallInfo& info) {
  return info.replica_id.empty() ? "" : absl::StrCat(" replica=", info.replica_id);
}

// kExitCancelled, after saying why on `err`, when the server cancelled the generation; else
// kExitOk.
int FinishedExitCode(bool cancelled, std::ostream& err) {
  if (!cancelled) return kExitOk;
  err << "kvctl: the server cancelled the generation (finish_reason=cancelled: it is shutting "
         "down); the output is partial"
      << std::endl;
  return kExitCancelled;
}

bool AnySequenceCancelled(const v1::GenerateResponse& response) {
  if (response.finish_reason() == v1::FINISH_REASON_CANCELLED) return true;
  for (const v1::Sequence& sequence : response.sequences()) {
    if (sequence.finish_reason() == v1::FINISH_REASON_CANCELLED) return true;
  }
  return false;
}

}  // namespace

std::string OutputFormatHelp() {
  return "\noutput (--output text):\n"
         "  one sequence: the text on stdout; with --logprobs then a line \"[logprobs]\" and one\n"
         "  line per generated token:\n"
         "    token=ID logprob=LP top=ID:LP,ID:LP,...   (top= with --top-logprobs K > 0)\n"
         "  stderr gets the summary line (finish reason, usage, timings, cache), with score=S\n"
         "  after beam search.\n"
         "  several sequences (--num-return-sequences N > 1): each sequence whole, as a block\n"
         "    [sequence I score S finish F]   (score only after beam search)\n"
         "    TEXT\n"
         "    [logprobs] and its lines, with --logprobs\n"
         "  generate prints them by index (beam search: best first); stream prints each when it\n"
         "  finishes (beam search: all at the end). The summary line is sequence 0's.\n"
         "  --output json prints the whole response (stream: each message) in the proto3 JSON\n"
         "  mapping: sequences, scores, logprobs with their top lists.\n"
         "\nexit code 3 (not 0) when the server cancelled the generation as it shut down\n"
         "(finish_reason=cancelled): the output is partial.\n";
}

int RunGenerate(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                std::ostream& err) {
  absl::StatusOr<v1::GenerateRequest> request = BuildGenerateRequest(flags);
  if (!request.ok()) return BadFlags("generate", request.status(), err);
  CallInfo info;
  absl::StatusOr<v1::GenerateResponse> response =
      Connect(globals)->Generate(*request, globals.call, &info);
  if (!response.ok()) return RpcError(response.status(), err);
  if (globals.json) {
    out << ToJson(*response) << std::endl;
  } else {
    out << GenerateResponseText(*response) << std::flush;
    err << GenerateSummaryText(*response) << ReplicaSuffix(info) << std::endl;
  }
  return FinishedExitCode(AnySequenceCancelled(*response), err);
}

int RunStream(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
              std::ostream& err) {
  absl::StatusOr<v1::GenerateRequest> request = BuildGenerateRequest(flags);
  if (!request.ok()) return BadFlags("stream", request.status(), err);
  StreamTextPrinter printer(request->sampling().num_return_sequences() > 1, out);
  std::optional<v1::GenerateStreamResponse> last;
  bool cancelled = false;
  CallInfo info;
  const absl::Status status = Connect(globals)->GenerateStream(
      *request,
      [&](const v1::GenerateStreamResponse& message) {
        if (globals.json) {
          out << ToJson(message) << std::endl;
        } else {
          printer.Add(message);
        }
        if (message.has_usage()) last = message;
        cancelled = cancelled || message.finish_reason() == v1::FINISH_REASON_CANCELLED;
        return true;
      },
      globals.call, &info);
  if (!globals.json) printer.Finish();
  if (!status.ok()) return RpcError(status, err);
  if (!globals.json && last.has_value()) {
    err << GenerationSummary(printer.finish_reason(), last->usage(), last->timings(),
                             last->cache_report())
        << ScoreSuffix(printer.score()) << ReplicaSuffix(info) << std::endl;
  }
  return FinishedExitCode(cancelled, err);
}

Command GenerateCommand() {
  return {"generate",
          "Generates a completion (Generation.Generate) and prints its text.",
          GenerateFlagSpecs(),
          GenerateRepeatableFlags(),
          [](const Globals& g, const ParsedFlags& f) {
            return RunGenerate(g, f, std::cout, std::cerr);
          },
          {},
          OutputFormatHelp()};
}

Command StreamCommand() {
  return {
      "stream",
      "Streams a completion (Generation.GenerateStream), printing text as it comes.",
      GenerateFlagSpecs(),
      GenerateRepeatableFlags(),
      [](const Globals& g, const ParsedFlags& f) { return RunStream(g, f, std::cout, std::cerr); },
      {},
      OutputFormatHelp()};
}

}  // namespace kvserve::client
