// JSON text read straight into template values, keeping the order of object members.
#include "tokenizer/jinja_json.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvserve::tokenizer::jinja {
namespace {

// An object with more members than this finds repeated keys through a hash index instead of a
// scan, so that a text with many members parses in linear time.
constexpr size_t kMembersBeforeIndex = 16;
// Longest reason quoted from the JSON parser (its messages quote the token they stopped at).
constexpr size_t kMaxReasonBytes = 200;

// The parser's exception text without its "[json.exception.parse_error.101] " prefix and
// without the input it quotes ("; last read: '<last_token>'"), at most kMaxReasonBytes long.
std::string ParseErrorReason(const std::string& what, const std::string& last_token) {
  std::string reason = what;
  if (!reason.empty() && reason.front() == '[') {
    if (size_t close = reason.find("] "); close != std::string::npos) reason.erase(0, close + 2);
  }
  const std::string quoted = "; last read: '" + last_token + "'";
  if (size_t at = reason.find(quoted); at != std::string::npos) reason.erase(at, quoted.size());
  if (reason.size() > kMaxReasonBytes) {
    size_t cut = kMaxReasonBytes;
    while (cut > 0 && (static_cast<unsigned char>(reason[cut]) & 0xC0) == 0x80) --cut;
    reason.resize(cut);
    reason.append("...");
  }
  return reason;
}

// A SAX consumer of nlohmann's (iterative) parser building Values with an explicit stack.
class ValueBuilder {
 public:
  explicit ValueBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() { return Add(Value::None()); }
  bool boolean(bool b) { return Add(Value(b)); }
  bool number_integer(int64_t i) { return Add(Value(i)); }
  bool number_unsigned(uint64_t u) {
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Add(Value(static_cast<double>(u)));
    return Add(Value(static_cast<int64_t>(u)));
  }
  bool number_float(double d, const std::string& /*text*/) { return Add(Value(d)); }
  bool string(std::string& s) { return Add(Value(std::move(s))); }
  bool binary(nlohmann::json::binary_t& /*bytes*/) {
    error_ = "not valid JSON: binary value";  // only binary formats produce these
    return false;
  }
  bool start_object(size_t /*elements*/) {
    if (!Enter()) return false;
    frames_.emplace_back();
    frames_.back().is_object = true;
    return true;
  }
  bool key(std::string& key) {
    frames_.back().key = std::move(key);
    return true;
  }
  bool end_object() {
    Frame frame = std::move(frames_.back());
    frames_.pop_back();
    return Add(MakeObject(std::move(frame.members)));
  }
  bool start_array(size_t /*elements*/) {
    if (!Enter()) return false;
    frames_.emplace_back();
    return true;
  }
  bool end_array() {
    Frame frame = std::move(frames_.back());
    frames_.pop_back();
    return Add(Value(std::move(frame.items)));
  }
  bool parse_error(size_t /*position*/, const std::string& last_token,
                   const nlohmann::detail::exception& error) {
    error_ = absl::StrCat("not valid JSON: ", ParseErrorReason(error.what(), last_token));
    return false;
  }

  // The parsed value, or the error that stopped the parse.
  absl::StatusOr<Value> Finish(bool parsed) {
    if (!parsed || !result_.has_value()) {
      return absl::InvalidArgumentError(error_.empty() ? "not valid JSON" : error_);
    }
    return *std::move(result_);
  }

 private:
  struct Frame {
    bool is_object = false;
    Array items;                                         // of a list
    std::vector<std::pair<std::string, Value>> members;  // of an object
    absl::flat_hash_map<std::string, size_t> index;      // key -> member, once past the scan limit
    std::string key;                                     // of the value being read
  };

  bool Enter() {
    if (static_cast<int64_t>(frames_.size()) + 1 > max_depth_) {
      error_ = absl::StrCat("nested deeper than ", max_depth_, " levels");
      return false;
    }
    return true;
  }

  bool Add(Value value) {
    if (frames_.empty()) {
      result_ = std::move(value);
      return true;
    }
    Frame& frame = frames_.back();
    if (!frame.is_object) {
      frame.items.push_back(std::move(value));
      return true;
    }
    if (std::optional<size_t> existing = FindMember(frame)) {
      frame.members[*existing].second = std::move(value);
      return true;
    }
    if (!frame.index.empty() || frame.members.size() == kMembersBeforeIndex) {
      if (frame.index.empty()) {
        for (size_t i = 0; i < frame.members.size(); ++i) frame.index[frame.members[i].first] = i;
      }
      frame.index.emplace(frame.key, frame.members.size());
    }
    frame.members.emplace_back(std::move(frame.key), std::move(value));
    return true;
  }

  static std::optional<size_t> FindMember(const Frame& frame) {
    if (!frame.index.empty()) {
      auto it = frame.index.find(frame.key);
      if (it == frame.index.end()) return std::nullopt;
      return it->second;
    }
    for (size_t i = 0; i < frame.members.size(); ++i) {
      if (frame.members[i].first == frame.key) return i;
    }
    return std::nullopt;
  }

  const int max_depth_;
  std::vector<Frame> frames_;
  std::optional<Value> result_;
  std::string error_;
};

}  // namespace

absl::StatusOr<Value> ParseJsonValue(std::string_view text, int max_depth) {
  ValueBuilder builder(max_depth);
  const bool parsed = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  return builder.Finish(parsed);
}

}  // namespace kvserve::tokenizer::jinja
