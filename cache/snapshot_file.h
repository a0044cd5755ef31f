// SnapshotFile: a prefix snapshot on disk, self-describing (model, strategy, dtype, namespace,
// tokens, checksums), written to a temporary file and renamed into place.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cache/prefix_info.h"
#include "cache/retention.h"

namespace kvserve::cache {

class Snapshot;

// What a file must have been written for to be used: the serving model's fingerprint (which
// digests weights, config, tokenizer and dtypes, see server/model_fingerprint.h) and the
// strategy fingerprint (how the K/V was laid out: layer count, heads, head size, element size).
struct SnapshotFileIdentity {
  std::string model_fingerprint;
  std::string strategy;
};

// What a file keeps of its entry's standing beside space and hits: its retention class, and for a
// named prefix its qualified name, options (TTL, class, strategy) and creation time, so that an
// entry found after a restart keeps its class and a named prefix stays one.
struct SnapshotFileExtras {
  RetentionClass retention = RetentionClass::kNormal;
  std::optional<PrefixInfo> named;
};

// What a file's header says.
struct SnapshotFileHeader {
  std::string model_fingerprint;
  std::string strategy;
  std::string dtype;  // the tensors' element type ("Float", "Half", "BFloat16")
  std::string space;  // the prefix-store namespace the entry belonged to
  std::vector<int32_t> tokens;
  int64_t hits = 0;        // uses of the entry before it was written (retention)
  int64_t file_bytes = 0;  // the whole file's size
  RetentionClass retention = RetentionClass::kNormal;
  // A named prefix's name, options and creation time (num_tokens and hits filled in too).
  std::optional<PrefixInfo> named;
};

// The file name used for the entry of `tokens` in namespace `space` ("<16 hex>.kvsnap").
std::string SnapshotFileName(std::string_view space, absl::Span<const int32_t> tokens);
// The bytes a file of `snapshot` with `space` and `identity` takes.
int64_t SnapshotFileBytes(const Snapshot& snapshot, std::string_view space,
                          const SnapshotFileIdentity& identity,
                          const SnapshotFileExtras& extras = {});

// Writes `snapshot` (of namespace `space`, used `hits` times) to `path`: to a temporary file in
// the same folder, then renamed over `path`, so that `path` is either absent, the old file or
// the whole new one. A failed write (a full disk, a file-size limit) removes the temporary
// file and returns ResourceExhausted (no space, too large) or Internal naming the path and the
// system's reason. Any thread (the snapshot is immutable).
absl::Status WriteSnapshotFile(const std::string& path, const Snapshot& snapshot,
                               std::string_view space, int64_t hits,
                               const SnapshotFileIdentity& identity,
                               const SnapshotFileExtras& extras = {});

// Reads and checks a file's header (not its tensors): DataLoss for a file that is truncated,
// corrupt (bad magic, header checksum, sizes), not a snapshot file or of the first format
// (written before files kept retention classes and names: a cache entry, refused and removed);
// FailedPrecondition naming both sides when it was written for another model or strategy; NotFound
// when absent.
absl::StatusOr<SnapshotFileHeader> ReadSnapshotFileHeader(const std::string& path,
                                                          const SnapshotFileIdentity& expected);

// Reads a whole file back into a snapshot (CPU tensors) with fingerprint
// expected.model_fingerprint, after the checks of ReadSnapshotFileHeader and these: its tokens
// must equal `expected_tokens` (FailedPrecondition otherwise) and the tensors' checksum must
// match (DataLoss otherwise). Any thread.
absl::StatusOr<std::shared_ptr<const Snapshot>> ReadSnapshotFile(
    const std::string& path, const SnapshotFileIdentity& expected,
    absl::Span<const int32_t> expected_tokens);

}  // namespace kvserve::cache
