// Tests of ReadPrefixesFile (--prefixes-file in JSON and YAML, with its bounds on special files,
// size and YAML aliases) and of the bounded file read and PrefixState parsing beneath it.
#include "server/prefixes_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvserve::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Names(const std::vector<v1::RegisterPrefixRequest>& prefixes) {
  std::vector<std::string> names;
  for (const v1::RegisterPrefixRequest& p : prefixes) names.push_back(p.name());
  return names;
}

// A fresh, not yet created folder per test, removed at the end.
class PrefixesFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("kvserve_prefixes_file_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir() const { return dir_.string(); }

  void Write(const fs::path& path, const std::string& contents) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << contents;
  }

  fs::path dir_;
};

TEST_F(PrefixesFileTest, ReadPrefixesFileAcceptsJson) {
  const fs::path file = dir_ / "prefixes.json";
  Write(file, R"({
    "prefixes": [
      {"name": "sys", "text": "You are helpful.",
       "options": {"pinned": false, "ttlSeconds": "120", "cacheImplementation": "dynamic"}},
      {"name": "ids", "token_ids": {"ids": [1, 2, 3]}}
    ]
  })");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes = ReadPrefixesFile(file.string());
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_THAT(Names(*prefixes), ElementsAre("sys", "ids"));
  EXPECT_EQ((*prefixes)[0].text(), "You are helpful.");
  EXPECT_TRUE((*prefixes)[0].options().has_pinned());
  EXPECT_FALSE((*prefixes)[0].options().pinned());
  EXPECT_EQ((*prefixes)[0].options().ttl_seconds(), 120);
  EXPECT_EQ((*prefixes)[0].options().cache_implementation(), "dynamic");
  EXPECT_THAT((*prefixes)[1].token_ids().ids(), ElementsAre(1, 2, 3));
}

TEST_F(PrefixesFileTest, ReadPrefixesFileAcceptsYaml) {
  const fs::path file = dir_ / "prefixes.yaml";
  Write(file, R"(# deployment prefixes
prefixes:
  - name: sys
    text: "true"
    options:
      pinned: false
      ttl_seconds: 9007199254740993
      cache_implementation: dynamic
  - name: ids
    token_ids:
      ids: [4, 5]
)");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes = ReadPrefixesFile(file.string());
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_THAT(Names(*prefixes), ElementsAre("sys", "ids"));
  // Quoted, so a string even though it reads as a boolean.
  EXPECT_EQ((*prefixes)[0].text(), "true");
  EXPECT_TRUE((*prefixes)[0].options().has_pinned());
  EXPECT_FALSE((*prefixes)[0].options().pinned());
  // 2^53 + 1: exact, so not read through a double.
  EXPECT_EQ((*prefixes)[0].options().ttl_seconds(), int64_t{9007199254740993});
  EXPECT_EQ((*prefixes)[0].options().cache_implementation(), "dynamic");
  EXPECT_THAT((*prefixes)[1].token_ids().ids(), ElementsAre(4, 5));
}

TEST_F(PrefixesFileTest, YamlNumbersInStringFieldsStayStringsAndOverflowIsRefused) {
  const fs::path file = dir_ / "numbers.yaml";
  Write(file, "prefixes:\n  - name: 2024\n    text: 42\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes = ReadPrefixesFile(file.string());
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_EQ((*prefixes)[0].name(), "2024");
  EXPECT_EQ((*prefixes)[0].text(), "42");
  Write(
      file,
      "prefixes:\n  - name: big\n    text: x\n    options: {ttl_seconds: 99999999999999999999}\n");
  prefixes = ReadPrefixesFile(file.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(prefixes.status().message()), HasSubstr(file.string()));
}

TEST_F(PrefixesFileTest, ReadPrefixesFileRefusesAnUnknownFieldNamingTheFile) {
  const fs::path json = dir_ / "bad.json";
  Write(json, R"({"prefixes": [{"name": "sys", "text": "hi", "colour": "red"}]})");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> from_json =
      ReadPrefixesFile(json.string());
  EXPECT_EQ(from_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(from_json.status().message()), HasSubstr(json.string()));

  const fs::path yaml = dir_ / "bad.yaml";
  Write(yaml, "prefixes:\n  - name: sys\n    text: hi\n    colour: red\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> from_yaml =
      ReadPrefixesFile(yaml.string());
  EXPECT_EQ(from_yaml.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(from_yaml.status().message()), HasSubstr(yaml.string()));
}

TEST_F(PrefixesFileTest, ReadPrefixesFileRefusesMissingAndMalformedFiles) {
  const std::string missing = dir() + "/missing.yaml";
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> absent = ReadPrefixesFile(missing);
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(absent.status().message()), HasSubstr(missing));

  const fs::path yaml = dir_ / "broken.yaml";
  Write(yaml, "prefixes: [unclosed\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> broken = ReadPrefixesFile(yaml.string());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr(yaml.string()));
}

// tests/data/hostile/prefixes/NAME (CMake names the source tree's tests/data: this file's own
// path may be relative, e.g. under ccache's base_dir).
std::string HostilePrefixes(const std::string& name) {
  return (fs::path(KVSERVE_TEST_DATA_DIR) / "hostile/prefixes" / name).string();
}

TEST_F(PrefixesFileTest, YamlAliasesExpandingPastTheBoundAreRefused) {
  // Nine levels of ten aliases: 10^9 nodes once expanded, which used to run out of memory.
  const std::string laughs = HostilePrefixes("billion_laughs.yaml");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes = ReadPrefixesFile(laughs);
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + laughs +
                ": not JSON or YAML: yaml-cpp: error at line 8, column 20: aliases expand the "
                "document past 4194304 nodes");

  // Within the bound, aliases are expanded as usual.
  prefixes = ReadPrefixesFile(HostilePrefixes("few_aliases.yaml"));
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_THAT(Names(*prefixes), ElementsAre("a", "b"));
  EXPECT_EQ((*prefixes)[1].options().ttl_seconds(), 60);

  // Long scalars repeated through aliases count by their bytes.
  std::string wide = "x: &x \"" + std::string(1 << 20, 'a') + "\"\ny: &y [";
  for (int i = 0; i < 300; ++i) wide += "*x, ";
  wide += "*x]\n";
  const fs::path file = dir_ / "wide.yaml";
  Write(file, wide);
  prefixes = ReadPrefixesFile(file.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(prefixes.status().message()),
              HasSubstr("aliases expand the document past 268435456 bytes of text"));
}

// Found by fuzz/prefixes_file: yaml-cpp resolves an alias inside its own anchored node to that
// node, and converting the cycle to JSON recursed until the stack overflowed.
TEST_F(PrefixesFileTest, YamlAliasCyclesAndDeepNestingAreRefused) {
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes =
      ParsePrefixesText("x: &opts {pinned: false, again: *opts}\nprefixes: []\n", "cycle.yaml");
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(prefixes.status().message()),
              HasSubstr("--prefixes-file cycle.yaml: not JSON or YAML: yaml-cpp: error at line 1, "
                        "column 33: an alias refers to a node that contains it (a cycle)"));
  prefixes = ParsePrefixesText(
      "prefixes:\n  - &p {name: a, text: b, options: {pinned: true, more: [*p]}}\n", "item.yaml");
  EXPECT_THAT(std::string(prefixes.status().message()), HasSubstr("(a cycle)"));

  const std::string deep = "prefixes: " + std::string(150, '[') + std::string(150, ']') + "\n";
  prefixes = ParsePrefixesText(deep, "deep.yaml");
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(prefixes.status().message()), HasSubstr("nested deeper than 100 levels"));

  // What ReadPrefixesFile reads goes through the same parser.
  prefixes = ParsePrefixesText("prefixes: [{name: a, text: b}]", "ok.yaml");
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_THAT(Names(*prefixes), ElementsAre("a"));
}

TEST_F(PrefixesFileTest, YamlThatIsNotUtf8IsRefused) {
  const fs::path file = dir_ / "latin1.yaml";
  Write(file, "prefixes:\n  - name: caf\xE9\n    text: x\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes = ReadPrefixesFile(file.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + file.string() + ": YAML text is not valid UTF-8");
}

TEST_F(PrefixesFileTest, SpecialFilesAreRefusedByName) {
  fs::create_directories(dir_);
  const fs::path zero = dir_ / "zero.yaml";
  fs::create_symlink("/dev/zero", zero);
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes = ReadPrefixesFile(zero.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + zero.string() + ": not a regular file (a character device)");

  const fs::path fifo = dir_ / "fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  prefixes = ReadPrefixesFile(fifo.string());
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + fifo.string() + ": not a regular file (a FIFO)");

  const fs::path big = dir_ / "big.json";
  Write(big, "");
  fs::resize_file(big, (int64_t{256} << 20) + 1);  // sparse
  prefixes = ReadPrefixesFile(big.string());
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + big.string() +
                ": 268435457 bytes is more than the 268435456 bytes (256 MiB) allowed");
}

TEST_F(PrefixesFileTest, ReadPrefixFileBytesReadsRegularFilesAndSaysWhatIsMissing) {
  const fs::path file = dir_ / "state.json";
  Write(file, "{\"prefixes\": []}\n");
  absl::StatusOr<std::string> text = ReadPrefixFileBytes(file.string());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"prefixes\": []}\n");

  const std::string missing = dir() + "/missing.json";
  text = ReadPrefixFileBytes(missing);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(std::string(text.status().message()),
            missing + ": cannot open: No such file or directory");

  text = ReadPrefixFileBytes(dir());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(text.status().message()), dir() + ": not a regular file (a directory)");
}

TEST_F(PrefixesFileTest, ParsePrefixStateNamesWhatItParses) {
  absl::StatusOr<v1::PrefixState> state =
      ParsePrefixState(R"({"prefixes": [{"name": "a", "text": "alpha"}]})", "state");
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(state->prefixes_size(), 1);
  EXPECT_EQ(state->prefixes(0).text(), "alpha");

  state = ParsePrefixState("{\"prefixes\": [ {\"name\": ", "/srv/state/prefixes.json");
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(state.status().message()),
              HasSubstr("/srv/state/prefixes.json: not a kvserve.v1.PrefixState: "));
}

}  // namespace
}  // namespace kvserve::server
