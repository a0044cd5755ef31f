// PrefixJournal: JSON-lines records appended by a writer thread with group commit, replayed
// and compacted at Open, compacted again as they pile up.
#include "server/prefix_journal.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/prefixes_file.h"

namespace kvserve::server {
namespace {

constexpr char kJournalFileName[] = "prefixes.journal";
constexpr char kLegacyFileName[] = "prefixes.json";
// Skipped lines are each logged up to this many; then one line counts the rest.
constexpr int kMaxSkipWarnings = 16;

std::string SaveError(int err) {
  return absl::StrCat("could not save the prefix state: ", std::strerror(err));
}

// The options a legacy prefixes.json entry was registered with, with the request parser's
// defaults (pinned, no TTL, a static cache): that file kept only what the client sent.
v1::PrefixOptions WithDefaults(const v1::PrefixOptions& sent) {
  v1::PrefixOptions options;
  options.set_pinned(!sent.has_pinned() || sent.pinned());
  options.set_ttl_seconds(sent.ttl_seconds());
  options.set_cache_implementation(
      sent.cache_implementation().empty() ? "static" : sent.cache_implementation());
  return options;
}

// When a prefix registered at `created_at` with `options` expires; InfiniteFuture without a TTL.
absl::Time ExpiresAt(const v1::PrefixOptions& options, absl::Time created_at) {
  if (options.ttl_seconds() <= 0) return absl::InfiniteFuture();
  return created_at + absl::Seconds(options.ttl_seconds());
}

// Values by name in the order their names were first put; putting a known name again replaces
// its value in place, and erasing forgets the place.
template <typename T>
class InsertionOrderedMap {
 public:
  void Put(const std::string& name, T value) {
    auto [it, inserted] = seq_by_name_.try_emplace(name, next_seq_);
    if (inserted) ++next_seq_;
    by_seq_.insert_or_assign(it->second, std::move(value));
  }
  void Erase(const std::string& name) {
    auto it = seq_by_name_.find(name);
    if (it == seq_by_name_.end()) return;
    by_seq_.erase(it->second);
    seq_by_name_.erase(it);
  }
  int64_t size() const { return static_cast<int64_t>(by_seq_.size()); }
  // The values in order (for reading; the order is kept by the map's keys).
  const std::map<int64_t, T>& values() const { return by_seq_; }

 private:
  absl::flat_hash_map<std::string, int64_t> seq_by_name_;
  std::map<int64_t, T> by_seq_;
  int64_t next_seq_ = 0;
};

// One line of the journal: {"op":"put","created_at":RFC3339,"options":PrefixOptions,
// "request":RegisterPrefixRequest} (both proto3 JSON) or {"op":"delete","name":NAME}.
absl::StatusOr<std::string> PutLine(const v1::RegisterPrefixRequest& request,
                                    const v1::PrefixOptions& options, absl::Time created_at) {
  google::protobuf::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  std::string request_json;
  std::string options_json;
  auto status = google::protobuf::util::MessageToJsonString(request, &request_json, print);
  if (status.ok())
    status = google::protobuf::util::MessageToJsonString(options, &options_json, print);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("could not save the prefix state: ", status.ToString()));
  }
  return absl::StrCat(R"({"op":"put","created_at":")",
                      absl::FormatTime(absl::RFC3339_full, created_at, absl::UTCTimeZone()),
                      R"(","options":)", options_json, R"(,"request":)", request_json, "}\n");
}

absl::StatusOr<std::string> DeleteLine(const std::string& name) {
  try {
    return absl::StrCat(R"({"op":"delete","name":)", nlohmann::json(name).dump(), "}\n");
  } catch (const nlohmann::json::exception&) {  // not UTF-8
    return absl::InternalError("could not save the prefix state: the name is not UTF-8");
  }
}

// A parsed line: a put (`put` set) or a delete of `name`.
struct Record {
  std::string name;
  std::optional<RecoveredPrefix> put;
};

// `line` (without its newline) as a record; the reason it is not one otherwise.
absl::StatusOr<Record> ParseLine(std::string_view line) {
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError("not JSON");
  if (!json.is_object()) return absl::InvalidArgumentError("not a JSON object");
  auto op = json.find("op");
  if (op == json.end() || !op->is_string()) {
    return absl::InvalidArgumentError("no \"op\" string");
  }
  Record record;
  if (*op == "delete") {
    auto name = json.find("name");
    if (name == json.end() || !name->is_string() || name->get<std::string>().empty()) {
      return absl::InvalidArgumentError("a delete without a \"name\" string");
    }
    record.name = name->get<std::string>();
    return record;
  }
  if (*op != "put") {
    return absl::InvalidArgumentError(absl::StrCat("unknown op ", op->dump()));
  }
  auto request = json.find("request");
  auto options = json.find("options");
  auto created_at = json.find("created_at");
  if (request == json.end() || !request->is_object() || options == json.end() ||
      !options->is_object() || created_at == json.end() || !created_at->is_string()) {
    return absl::InvalidArgumentError(
        "a put without \"request\", \"options\" objects and a \"created_at\" string");
  }
  RecoveredPrefix put;
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;  // what a later kvserve adds does not lose the record
  if (auto status =
          google::protobuf::util::JsonStringToMessage(request->dump(), &put.request, parse);
      !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("request: ", status.ToString()));
  }
  if (auto status =
          google::protobuf::util::JsonStringToMessage(options->dump(), &put.options, parse);
      !status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("options: ", status.ToString()));
  }
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, created_at->get<std::string>(), &put.created_at,
                       &error)) {
    return absl::InvalidArgumentError(absl::StrCat("created_at: ", error));
  }
  if (put.request.name().empty()) return absl::InvalidArgumentError("a put without a name");
  record.name = put.request.name();
  record.put = std::move(put);
  return record;
}

// What Open read: the live registrations in order and whether the file must be rewritten
// before anything is appended to it.
struct Replay {
  InsertionOrderedMap<RecoveredPrefix> live;
  // Records read (skipped lines not counted).
  int64_t records = 0;
  // Lines were skipped (a torn tail among them): appending after them is not safe.
  bool dirty = false;
  // The entries came from the legacy file, which the journal does not hold yet.
  bool migrated = false;
};

// Replays the journal text `text` read from `path`.
void ReplayJournal(const std::string& path, const std::string& text, Replay* replay) {
  int64_t line_number = 0;
  int64_t skipped = 0;
  size_t start = 0;
  while (start < text.size()) {
    ++line_number;
    const size_t end = text.find('\n', start);
    const bool terminated = end != std::string::npos;
    const std::string_view line(text.data() + start, (terminated ? end : text.size()) - start);
    start = terminated ? end + 1 : text.size();
    if (!terminated) replay->dirty = true;  // appending would continue this line
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) {
      replay->dirty = true;
      continue;
    }
    absl::StatusOr<Record> record = ParseLine(line);
    if (!record.ok()) {
      replay->dirty = true;
      if (++skipped <= kMaxSkipWarnings) {
        spdlog::warn("{}:{}: skipped: {}{}", path, line_number,
                     std::string(record.status().message()),
                     terminated ? "" : " (an incomplete last line: a write cut short)");
      }
      continue;
    }
    ++replay->records;
    if (record->put.has_value()) {
      replay->live.Put(record->name, *std::move(record->put));
    } else {
      replay->live.Erase(record->name);
    }
  }
  if (skipped > kMaxSkipWarnings) {
    spdlog::warn("{}: {} more lines skipped", path, skipped - kMaxSkipWarnings);
  }
}

// The entries of a legacy prefixes.json, registered (for their TTL) at `now`; none when there
// is no such file. A file that does not parse is left where it is with a warning; errors are
// for special or oversize files.
absl::Status ReplayLegacy(const std::string& path, absl::Time now, Replay* replay) {
  absl::StatusOr<std::string> text = ReadPrefixFileBytes(path);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  if (!text.ok()) return text.status();
  absl::StatusOr<v1::PrefixState> state = ParsePrefixState(*text, path);
  if (!state.ok()) {
    spdlog::warn("{}; its prefixes are not recovered", std::string(state.status().message()));
    return absl::OkStatus();
  }
  for (const v1::RegisterPrefixRequest& request : state->prefixes()) {
    if (request.name().empty()) continue;
    replay->live.Put(request.name(),
                     RecoveredPrefix{request, WithDefaults(request.options()), now});
  }
  replay->migrated = true;
  spdlog::info("{}: {} prefixes migrated to {}", path, replay->live.size(), kJournalFileName);
  return absl::OkStatus();
}

// Writes all of `data` to `fd`; 0 or the errno.
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

// Makes the directory's entries (a created or renamed file) durable; best effort, as some
// file systems refuse fsync on directories.
void SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Persists nothing: recovers nothing and reports every record saved, inline.
class NullPrefixJournal final : public PrefixJournal {
 public:
  const std::vector<RecoveredPrefix>& recovered() const override { return recovered_; }
  void RecordPut(const v1::RegisterPrefixRequest&, const v1::PrefixOptions&, absl::Time,
                 Done done) override {
    if (done) done(absl::OkStatus());
  }
  void RecordDelete(const std::string&, Done done) override {
    if (done) done(absl::OkStatus());
  }
  absl::Status Flush() override { return absl::OkStatus(); }

 private:
  const std::vector<RecoveredPrefix> recovered_;
};

// The journal in a state directory. Callers queue records under `mu_`; the writer thread owns
// the file and the live set it stands for.
class FilePrefixJournal final : public PrefixJournal {
 public:
  // Takes what Open replayed; rewrites the file when `replay` says it must be (on failure the
  // writer retries before its first append), then starts the writer thread.
  FilePrefixJournal(const PrefixJournalOptions& options, std::string dir, Replay replay);
  ~FilePrefixJournal() override;

  const std::vector<RecoveredPrefix>& recovered() const override { return recovered_; }
  void RecordPut(const v1::RegisterPrefixRequest& request, const v1::PrefixOptions& options,
                 absl::Time created_at, Done done) override;
  void RecordDelete(const std::string& name, Done done) override;
  absl::Status Flush() override;

 private:
  // A queued record: a put when `put` is set, else a delete of `name`.
  struct Pending {
    std::string name;
    std::optional<RecoveredPrefix> put;
    Done done;
  };
  // A live prefix as the writer keeps it: its put line and when it expires.
  struct LiveLine {
    std::string name;
    std::string line;
    absl::Time expires_at;
  };

  void Enqueue(Pending pending);
  void WriterLoop();
  // Follows `batch` in the live set and writes it (appended, or the whole file rewritten after
  // a failure); then compacts if the file has grown past the threshold. One status per record.
  std::vector<absl::Status> WriteBatch(std::vector<Pending>& batch);
  // Appends `lines` with one write and one fdatasync, opening the file first if needed.
  absl::Status Append(const std::string& lines);
  // Replaces the file with one put per unexpired live prefix: a temporary file, fsync, rename,
  // fsync of the directory. On failure the old file and descriptor are kept.
  absl::Status Rewrite();
  // Logs `what` ("open PATH") failing with `err` (paths are the server's business) and returns
  // the client-safe error.
  absl::Status Failed(const std::string& what, int err) const;
  int64_t CompactionThreshold() const {
    return std::max(options_.compact_live_factor * live_.size(), options_.compact_min_records);
  }

  const PrefixJournalOptions options_;
  const std::string dir_;
  const std::string path_;
  std::vector<RecoveredPrefix> recovered_;

  // Writer thread only (and the constructor, before the thread starts).
  InsertionOrderedMap<LiveLine> live_;
  int fd_ = -1;                 // open for appending; -1: opened at the next append
  int64_t records_ = 0;         // records in the file
  bool needs_rewrite_ = false;  // the file may end in a partial line, or lag the live set
  std::string legacy_path_;     // renamed once the journal holds its entries

  absl::Mutex mu_;
  std::vector<Pending> queue_ ABSL_GUARDED_BY(mu_);
  int64_t num_queued_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_finished_ ABSL_GUARDED_BY(mu_) = 0;  // written or failed, Done returned
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

FilePrefixJournal::FilePrefixJournal(const PrefixJournalOptions& options, std::string dir,
                                     Replay replay)
    : options_(options),
      dir_(std::move(dir)),
      path_((std::filesystem::path(dir_) / kJournalFileName).string()) {
  const absl::Time now = options_.clock->Now();
  bool dropped = false;
  for (const auto& [seq, prefix] : replay.live.values()) {
    if (ExpiresAt(prefix.options, prefix.created_at) <= now) {
      dropped = true;
      continue;
    }
    absl::StatusOr<std::string> line = PutLine(prefix.request, prefix.options, prefix.created_at);
    if (!line.ok()) continue;  // it parsed from JSON, so it prints as JSON
    live_.Put(prefix.request.name(), {prefix.request.name(), *std::move(line),
                                      ExpiresAt(prefix.options, prefix.created_at)});
    recovered_.push_back(prefix);
  }
  records_ = replay.records;
  if (replay.migrated) {
    legacy_path_ = (std::filesystem::path(dir_) / kLegacyFileName).string();
  }
  if (dropped) {
    spdlog::info("{}: {} expired prefixes dropped", path_, replay.live.size() - live_.size());
  }
  needs_rewrite_ = replay.dirty || replay.migrated || records_ > CompactionThreshold();
  if (needs_rewrite_) {
    if (absl::Status status = Rewrite(); !status.ok()) {
      spdlog::warn("{}: not compacted at start-up ({}); retried before the next record", path_,
                   std::string(status.message()));
    }
  }
  writer_ = std::thread(&FilePrefixJournal::WriterLoop, this);
}

FilePrefixJournal::~FilePrefixJournal() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
  if (fd_ >= 0) ::close(fd_);
}

void FilePrefixJournal::RecordPut(const v1::RegisterPrefixRequest& request,
                                  const v1::PrefixOptions& options, absl::Time created_at,
                                  Done done) {
  Enqueue({request.name(), RecoveredPrefix{request, options, created_at}, std::move(done)});
}

void FilePrefixJournal::RecordDelete(const std::string& name, Done done) {
  Enqueue({name, std::nullopt, std::move(done)});
}

void FilePrefixJournal::Enqueue(Pending pending) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(pending));
  ++num_queued_;
}

absl::Status FilePrefixJournal::Flush() {
  absl::MutexLock lock(&mu_);
  const int64_t target = num_queued_;
  auto finished = [this, target]()
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return num_finished_ >= target; };
  mu_.Await(absl::Condition(&finished));
  return std::exchange(first_error_, absl::OkStatus());
}

void FilePrefixJournal::WriterLoop() {
  while (true) {
    std::vector<Pending> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything queued is written
      batch.swap(queue_);
    }
    const std::vector<absl::Status> results = WriteBatch(batch);
    absl::Status first_error;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (first_error.ok()) first_error = results[i];
      if (batch[i].done) batch[i].done(results[i]);
    }
    absl::MutexLock lock(&mu_);
    num_finished_ += static_cast<int64_t>(batch.size());
    if (first_error_.ok()) first_error_ = first_error;
  }
}

std::vector<absl::Status> FilePrefixJournal::WriteBatch(std::vector<Pending>& batch) {
  std::vector<absl::Status> results(batch.size());
  std::string lines;
  std::vector<size_t> written;  // the records in `lines`
  for (size_t i = 0; i < batch.size(); ++i) {
    Pending& pending = batch[i];
    if (!pending.put.has_value()) {
      live_.Erase(pending.name);
      absl::StatusOr<std::string> line = DeleteLine(pending.name);
      if (!line.ok()) {
        results[i] = line.status();
        continue;
      }
      lines += *line;
      written.push_back(i);
      continue;
    }
    const RecoveredPrefix& put = *pending.put;
    absl::StatusOr<std::string> line = PutLine(put.request, put.options, put.created_at);
    if (!line.ok()) {
      // What was recorded under the name is stale now; forgetting it is closest.
      live_.Erase(pending.name);
      if (absl::StatusOr<std::string> erase = DeleteLine(pending.name); erase.ok()) lines += *erase;
      results[i] = line.status();
      continue;
    }
    lines += *line;
    live_.Put(pending.name,
              {pending.name, *std::move(line), ExpiresAt(put.options, put.created_at)});
    written.push_back(i);
  }
  if (lines.empty()) return results;
  absl::Status status;
  if (needs_rewrite_) {
    status = Rewrite();  // the live set already includes this batch
  } else {
    status = Append(lines);
    if (status.ok()) {
      records_ += static_cast<int64_t>(std::count(lines.begin(), lines.end(), '\n'));
    } else {
      // Part of the batch may be in the file, a partial line last: rewrite before appending.
      needs_rewrite_ = true;
      if (fd_ >= 0) ::close(fd_);
      fd_ = -1;
    }
  }
  for (size_t i : written) results[i] = status;
  if (status.ok() && records_ > CompactionThreshold()) {
    // The records are durable already: a compaction that fails is retried after the next.
    if (absl::Status compacted = Rewrite(); !compacted.ok()) {
      spdlog::warn("{}: not compacted ({}); retried after the next record", path_,
                   std::string(compacted.message()));
    }
  }
  return results;
}

absl::Status FilePrefixJournal::Append(const std::string& lines) {
  if (fd_ < 0) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int err = errno;
      return Failed(absl::StrCat("open ", path_), err);
    }
    SyncDirectory(dir_);  // the file may have just been created
  }
  if (const int err = WriteAll(fd_, lines); err != 0) {
    return Failed(absl::StrCat("append to ", path_), err);
  }
  if (::fdatasync(fd_) != 0) {
    const int err = errno;
    return Failed(absl::StrCat("fdatasync ", path_), err);
  }
  return absl::OkStatus();
}

absl::Status FilePrefixJournal::Rewrite() {
  const std::string tmp = path_ + ".tmp";
  const absl::Time now = options_.clock->Now();
  std::vector<std::string> expired;
  std::string data;
  for (const auto& [seq, entry] : live_.values()) {
    if (entry.expires_at <= now) {
      expired.push_back(entry.name);
      continue;
    }
    data += entry.line;
  }
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return Failed(absl::StrCat("create ", tmp), err);
  }
  // `what` failed with `err`: the temporary file goes, the journal stays as it was.
  auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return Failed(what, err);
  };
  if (const int err = WriteAll(fd, data); err != 0) return fail("write " + tmp, err);
  if (::fsync(fd) != 0) {
    const int err = errno;
    return fail("fsync " + tmp, err);
  }
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    return fail(absl::StrCat("rename ", tmp, " to ", path_), err);
  }
  SyncDirectory(dir_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  records_ = std::count(data.begin(), data.end(), '\n');
  needs_rewrite_ = false;
  // Dropped from the file, so from the live set too; a later delete of them is harmless.
  for (const std::string& name : expired) live_.Erase(name);
  if (!legacy_path_.empty()) {
    const std::string migrated = legacy_path_ + ".migrated";
    if (::rename(legacy_path_.c_str(), migrated.c_str()) != 0) {
      spdlog::warn("{}: not renamed to {} ({}); ignored now that {} exists", legacy_path_, migrated,
                   std::strerror(errno), path_);
    } else {
      SyncDirectory(dir_);
    }
    legacy_path_.clear();
  }
  return absl::OkStatus();
}

absl::Status FilePrefixJournal::Failed(const std::string& what, int err) const {
  spdlog::error("could not save the prefix state: {}: {}", what, std::strerror(err));
  return absl::InternalError(SaveError(err));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefixJournal>> PrefixJournal::Open(
    const PrefixJournalOptions& options) {
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError("PrefixJournalOptions.clock: must not be null");
  }
  if (options.compact_live_factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrefixJournalOptions.compact_live_factor: must be >= 1 (got ",
                     options.compact_live_factor, ")"));
  }
  if (options.compact_min_records < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PrefixJournalOptions.compact_min_records: must be >= 0 (got ",
                     options.compact_min_records, ")"));
  }
  if (options.state_dir.empty()) return std::make_unique<NullPrefixJournal>();

  std::error_code error;
  std::filesystem::create_directories(options.state_dir, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state-dir ", options.state_dir, ": cannot create (", error.message(), ")"));
  }
  const std::filesystem::path dir(options.state_dir);
  const std::string journal = (dir / kJournalFileName).string();
  // A compaction cut short; the journal itself is whole.
  ::unlink((journal + ".tmp").c_str());

  Replay replay;
  absl::StatusOr<std::string> text = ReadPrefixFileBytes(journal);
  if (text.ok()) {
    ReplayJournal(journal, *text, &replay);
  } else if (absl::IsNotFound(text.status())) {
    const std::string legacy = (dir / kLegacyFileName).string();
    if (absl::Status status = ReplayLegacy(legacy, options.clock->Now(), &replay); !status.ok()) {
      return status;
    }
  } else {
    return text.status();
  }
  return std::make_unique<FilePrefixJournal>(options, options.state_dir, std::move(replay));
}

}  // namespace kvserve::server
