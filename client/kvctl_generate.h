// kvctl generate and kvctl stream: their bodies and their entries in kvctl's command table.
#pragma once

#include <ostream>
#include <string>

#include "client/flags.h"
#include "client/kvctl_command.h"

namespace kvserve::client {

// `kvctl generate` and `kvctl stream` for kvctl's command table (flags: GenerateFlagSpecs());
// they print to stdout and stderr. Their --help ends with OutputFormatHelp().
Command GenerateCommand();
Command StreamCommand();

// What --help of generate and stream says of the text output: one sequence, several, and
// log-probabilities.
std::string OutputFormatHelp();

// The commands' bodies: call the server at globals.target with flags parsed against
// GenerateFlagSpecs(), write the answer to `out` and the summary line and errors to `err`, and
// return the exit code (kExitOk, kExitRpcError, kExitBadFlags, or kExitCancelled when a
// sequence finished CANCELLED, the partial output printed all the same).
// - generate: text mode writes GenerateResponseText to `out` and GenerateSummaryText plus
//   " replica=ID" to `err`; JSON mode the whole GenerateResponse (sequences and log-
//   probabilities included) on one line.
// - stream: text mode feeds a StreamTextPrinter (several sequences when the request's
//   num_return_sequences > 1) and writes the summary line (finish reason and score of sequence
//   0) to `err`; JSON mode one GenerateStreamResponse per line, as they arrive.
int RunGenerate(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
                std::ostream& err);
int RunStream(const Globals& globals, const ParsedFlags& flags, std::ostream& out,
              std::ostream& err);

}  // namespace kvserve::client
