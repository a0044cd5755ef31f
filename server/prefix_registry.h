// PrefixRegistry: the definitions of the registered prefixes (name, content, options), kept
// so that GetPrefix can report their options and, with --state-dir, written atomically to
// disk so that a restarted server registers them again.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvserve/v1/prefix.pb.h"

namespace kvserve::server {

// Thread-safe.
class PrefixRegistry {
 public:
  // `state_dir` empty: nothing is persisted. Otherwise the directory is created if needed and
  // STATE_DIR/prefixes.json, when present, is read: its prefixes are returned by
  // `persisted()`. InvalidArgument naming the file when it does not parse.
  static absl::StatusOr<std::unique_ptr<PrefixRegistry>> Open(const std::string& state_dir);

  // Reads a --prefixes-file: JSON or YAML shaped as kvserve.v1.PrefixState ({"prefixes":
  // [{"name": ..., "text": ...}, ...]}). InvalidArgument naming the file and the problem,
  // including a file that is not a regular file, one over 256 MiB, and YAML whose aliases
  // expand past 2^22 nodes or 256 MiB of text ("billion laughs").
  static absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> ReadPrefixesFile(
      const std::string& path);

  // What the state file held when the registry was opened, in registration order.
  const std::vector<v1::RegisterPrefixRequest>& persisted() const { return persisted_; }

  // Records a successful registration (replacing one of the same name) and, with a state
  // directory, rewrites the state file atomically (a temporary file, fsync, rename): a crash
  // at any point leaves either the old or the new file whole. The file is written before
  // the record changes: when it cannot be, nothing changes (neither the record nor the file)
  // and the error is Internal "could not save the prefix state: <reason>", without server
  // paths (they are logged), so the caller can undo what it did for this registration.
  absl::Status Put(const v1::RegisterPrefixRequest& request, const v1::PrefixOptions& options);
  // Forgets a prefix and rewrites the state file; OK when it was not recorded. On a failed
  // write nothing changes and the error is as for Put.
  absl::Status Remove(const std::string& name);
  // The options a prefix was registered with (defaults applied); nullopt when unknown.
  std::optional<v1::PrefixOptions> Options(const std::string& name) const;

 private:
  explicit PrefixRegistry(std::string state_file) : state_file_(std::move(state_file)) {}
  // Writes `state` to the state file (OK without one); the error is as Put's.
  absl::Status Save(const v1::PrefixState& state) const;

  const std::string state_file_;  // empty: not persisted
  std::vector<v1::RegisterPrefixRequest> persisted_;
  mutable absl::Mutex mu_;
  // Registration order is kept through `order_`.
  std::map<std::string, v1::RegisterPrefixRequest> requests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::PrefixOptions> options_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::server
