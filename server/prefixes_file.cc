// Prefix files: the bounded read of a regular file, and --prefixes-file in JSON or YAML.
#include "server/prefixes_file.h"

#include <fcntl.h>
#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/regular_file.h"

namespace kvserve::server {
namespace {

// What YAML aliases may expand to: each alias re-reads its anchored node, so a few lines of
// nested aliases ("billion laughs") can stand for 10^9 nodes.
constexpr int64_t kMaxYamlNodes = int64_t{1} << 22;
constexpr int64_t kMaxYamlScalarBytes = kMaxPrefixFileBytes;

// Counts what a YAML document expands to, aliases expanded, without building it: each
// anchor's expanded size is recorded when its node ends and added again at every alias.
// Throws ExpansionTooLarge (a YAML::Exception) past kMaxYamlNodes or kMaxYamlScalarBytes.
class ExpansionCounter : public YAML::EventHandler {
 public:
  struct Size {
    int64_t nodes = 0;
    int64_t bytes = 0;
  };
  class ExpansionTooLarge : public YAML::Exception {
   public:
    explicit ExpansionTooLarge(const YAML::Mark& mark, const std::string& message)
        : YAML::Exception(mark, message) {}
  };
  class AliasCycle : public YAML::Exception {
   public:
    explicit AliasCycle(const YAML::Mark& mark, const std::string& message)
        : YAML::Exception(mark, message) {}
  };

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    Leaf(mark, anchor, {1, 0});
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = anchors_.find(anchor);
    if (it == anchors_.end()) {
      // yaml-cpp resolves an alias inside the node its anchor names to that node, making a
      // cycle that would expand forever ("&a {k: *a}").
      for (const Frame& frame : open_) {
        if (frame.anchor == anchor) {
          throw AliasCycle(mark, "an alias refers to a node that contains it (a cycle)");
        }
      }
    }
    Add(mark, it == anchors_.end() ? Size{1, 0} : it->second);
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string& value) override {
    Leaf(mark, anchor, {1, static_cast<int64_t>(value.size())});
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    Open(mark, anchor);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    YAML::anchor_t anchor;
    Size size;
    YAML::Mark mark;
  };

  void Leaf(const YAML::Mark& mark, YAML::anchor_t anchor, Size size) {
    if (anchor != YAML::NullAnchor) anchors_[anchor] = size;
    Add(mark, size);
  }
  void Open(const YAML::Mark& mark, YAML::anchor_t anchor) {
    open_.push_back({anchor, {1, 0}, mark});
  }
  void Close() {
    Frame frame = open_.back();
    open_.pop_back();
    if (frame.anchor != YAML::NullAnchor) anchors_[frame.anchor] = frame.size;
    Add(frame.mark, frame.size);
  }
  // Adds `size` to the innermost open node (or the document); sizes are checked as they grow,
  // so no sum can overflow.
  void Add(const YAML::Mark& mark, Size size) {
    Size& total = open_.empty() ? document_ : open_.back().size;
    total.nodes += size.nodes;
    total.bytes += size.bytes;
    if (total.nodes > kMaxYamlNodes) {
      throw ExpansionTooLarge(
          mark, absl::StrCat("aliases expand the document past ", kMaxYamlNodes, " nodes"));
    }
    if (total.bytes > kMaxYamlScalarBytes) {
      throw ExpansionTooLarge(mark, absl::StrCat("aliases expand the document past ",
                                                 kMaxYamlScalarBytes, " bytes of text"));
    }
  }

  std::map<YAML::anchor_t, Size> anchors_;
  std::vector<Frame> open_;
  Size document_;
};

// How deeply YamlToJson, which recurses once per level, follows nested nodes (aliases
// included). kvserve.v1.PrefixState nests 5 levels; the proto3 JSON parser refuses past 100.
constexpr int kMaxYamlDepth = 100;

class YamlTooDeep : public YAML::Exception {
 public:
  explicit YamlTooDeep(const YAML::Mark& mark)
      : YAML::Exception(mark, absl::StrCat("nested deeper than ", kMaxYamlDepth, " levels")) {}
};

// YAML to the equivalent JSON value. Unquoted true/false become booleans; every other scalar
// becomes a string, which the proto3 JSON parser reads into string and integer fields alike
// (so `name: 2024` stays a name, and an out-of-range integer is refused, not clamped). Throws
// YamlTooDeep past kMaxYamlDepth levels.
nlohmann::json YamlToJson(const YAML::Node& node, int depth = 0) {
  if (depth > kMaxYamlDepth && (node.IsSequence() || node.IsMap())) throw YamlTooDeep(node.Mark());
  switch (node.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const YAML::Node& item : node) array.push_back(YamlToJson(item, depth + 1));
      return array;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& item : node) {
        object[item.first.as<std::string>()] = YamlToJson(item.second, depth + 1);
      }
      return object;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() != "!" && (text == "true" || text == "false")) return text == "true";
      return text;
    }
    default:
      return nullptr;
  }
}

// Expands `text` (YAML) to JSON text, refusing documents whose aliases expand past the
// bounds. Throws YAML::Exception for malformed YAML or too large an expansion.
std::string YamlTextToJson(const std::string& text) {
  {
    std::istringstream in(text);
    YAML::Parser parser(in);
    ExpansionCounter counter;
    parser.HandleNextDocument(counter);  // YAML::Load reads only the first document too
  }
  return YamlToJson(YAML::Load(text))
      .dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::strict);
}

}  // namespace

absl::StatusOr<std::string> ReadPrefixFileBytes(const std::string& path) {
  return base::ReadRegularFile(path, kMaxPrefixFileBytes);
}

absl::StatusOr<v1::PrefixState> ParsePrefixState(const std::string& json, const std::string& what) {
  v1::PrefixState state;
  google::protobuf::util::JsonParseOptions options;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &state, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a kvserve.v1.PrefixState: ", status.ToString()));
  }
  return state;
}

absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> ReadPrefixesFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadPrefixFileBytes(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--prefixes-file ", text.status().message()));
  }
  return ParsePrefixesText(*text, path);
}

absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> ParsePrefixesText(const std::string& text,
                                                                         const std::string& path) {
  std::string json = text;
  const size_t first = json.find_first_not_of(" \t\r\n");
  const bool is_json = first != std::string::npos && json[first] == '{';
  if (!is_json) {
    try {
      json = YamlTextToJson(text);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prefixes-file ", path, ": not JSON or YAML: ", e.what()));
    } catch (const nlohmann::json::exception&) {  // the only one dump throws
      return absl::InvalidArgumentError(
          absl::StrCat("--prefixes-file ", path, ": YAML text is not valid UTF-8"));
    }
  }
  absl::StatusOr<v1::PrefixState> state = ParsePrefixState(json, "--prefixes-file " + path);
  if (!state.ok()) return state.status();
  return std::vector<v1::RegisterPrefixRequest>(state->prefixes().begin(), state->prefixes().end());
}

}  // namespace kvserve::server
