// Fuzzes the --prefixes-file reader (JSON or YAML shaped as kvserve.v1.PrefixState, aliases
// bounded) on the file's text, and ParsePrefixState, the JSON reader that state files go through.
// Checked: errors are InvalidArgument naming the file, and what is accepted serializes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "base/check.h"
#include "server/prefixes_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<kvserve::v1::RegisterPrefixRequest>> prefixes =
      kvserve::server::ParsePrefixesText(text, "fuzz.yaml");
  if (prefixes.ok()) {
    for (const kvserve::v1::RegisterPrefixRequest& p : *prefixes) {
      std::string wire;
      KVSERVE_CHECK(p.SerializeToString(&wire));
    }
  } else {
    KVSERVE_CHECK(absl::IsInvalidArgument(prefixes.status())) << prefixes.status();
    KVSERVE_CHECK(absl::StartsWith(prefixes.status().message(), "--prefixes-file fuzz.yaml: "))
        << prefixes.status();
  }
  absl::StatusOr<kvserve::v1::PrefixState> state =
      kvserve::server::ParsePrefixState(text, "state.json");
  if (!state.ok()) KVSERVE_CHECK(absl::IsInvalidArgument(state.status())) << state.status();
  return 0;
}
