// PrefixJournal: the write-behind, append-only journal of the named-prefix catalog
// (STATE_DIR/prefixes.journal), replayed at start-up so that a restarted server registers
// exactly the prefixes that were live.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "kvserve/v1/prefix.pb.h"

namespace kvserve::server {

struct PrefixJournalOptions {
  // Folder of prefixes.journal, created if needed. Empty: nothing is persisted; Open returns a
  // journal that recovers nothing and reports every record saved.
  std::string state_dir;
  // The time TTLs are measured by, at recovery and compaction. Not owned; outlives the journal.
  const base::Clock* clock = base::RealClock::Get();
  // The journal is rewritten as one put per live prefix when it holds more than
  // max(compact_live_factor * live prefixes, compact_min_records) records, so it stays
  // proportional to what is registered. >= 1 and >= 0.
  int64_t compact_live_factor = 2;
  int64_t compact_min_records = 64;
};

// A registration that survived the replay of the journal.
struct RecoveredPrefix {
  // As it was recorded (its content and the options the client sent).
  v1::RegisterPrefixRequest request;
  // The options it was kept with, defaults applied.
  v1::PrefixOptions options;
  // When this content was registered. With options.ttl_seconds > 0 it expires at
  // created_at + ttl_seconds, which was after the clock's now at recovery.
  absl::Time created_at;
};

// The persistence of the named-prefix catalog: the catalog reports every change (a put, a
// delete, an eviction or expiry as a delete) and the journal follows it exactly, in the order
// reported. A record whose write failed is followed all the same: the next write rewrites the
// whole journal from what was reported, so the catalog may undo a failed change by reporting
// the undo, or keep it and have it saved with the next record. Thread-safe.
class PrefixJournal {
 public:
  // Called once per record when it is durable (OK) or could not be written (Internal "could
  // not save the prefix state: <reason>", without server paths, which are logged). Called from
  // the journal's writer thread (inline by the null journal); must not call Flush.
  using Done = std::function<void(absl::Status)>;

  // With a state directory: creates it if needed and replays STATE_DIR/prefixes.journal or,
  // when there is none yet, migrates a legacy STATE_DIR/prefixes.json (kvserve.v1.PrefixState,
  // renamed to prefixes.json.migrated once the journal holds it). Lines that are torn, do not
  // parse or name an unknown op are skipped with a warning naming the file and line; a file
  // needing it is compacted before anything is appended. Errors: InvalidArgument for bad
  // options, a state directory that cannot be created, or a journal or legacy file that is not
  // a regular file or is over 256 MiB (each naming the path); Internal when one cannot be read.
  static absl::StatusOr<std::unique_ptr<PrefixJournal>> Open(const PrefixJournalOptions& options);

  // Flushes what is queued and stops the writer thread. Not from a Done.
  virtual ~PrefixJournal() = default;

  // The live registrations the journal held at Open, in registration order (a replaced prefix
  // keeps its place), those whose TTL had run out by the clock's now left out. Any thread.
  virtual const std::vector<RecoveredPrefix>& recovered() const = 0;

  // Records that `request` (with `options`, defaults applied, registered at `created_at`) is
  // live under request.name(), replacing what was recorded under that name. Never waits for
  // I/O: queues the record and returns; `done` (may be null) is called once it is written.
  virtual void RecordPut(const v1::RegisterPrefixRequest& request, const v1::PrefixOptions& options,
                         absl::Time created_at, Done done) = 0;
  // Records that no prefix is live under `name` (deleted, evicted or expired); as RecordPut.
  virtual void RecordDelete(const std::string& name, Done done) = 0;

  // Blocks until every record queued before the call is durable or failed and its Done has
  // returned. Returns the first error since the previous Flush, or OK. Not from a Done.
  virtual absl::Status Flush() = 0;
};

}  // namespace kvserve::server
