// Tests of PrefixRegistry: the state file written on Put/Remove and read back on Open, Options,
// refusal of a corrupt file, and --prefixes-file in JSON and YAML.
#include "server/prefix_registry.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace kvserve::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::RegisterPrefixRequest Text(const std::string& name, const std::string& text) {
  v1::RegisterPrefixRequest request;
  request.set_name(name);
  request.set_text(text);
  return request;
}

v1::PrefixOptions Opts(bool pinned, int64_t ttl_seconds, const std::string& implementation) {
  v1::PrefixOptions options;
  options.set_pinned(pinned);
  options.set_ttl_seconds(ttl_seconds);
  options.set_cache_implementation(implementation);
  return options;
}

std::vector<std::string> Names(const std::vector<v1::RegisterPrefixRequest>& prefixes) {
  std::vector<std::string> names;
  for (const v1::RegisterPrefixRequest& p : prefixes) names.push_back(p.name());
  return names;
}

// A fresh, not yet created folder per test, removed at the end.
class PrefixRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("kvserve_prefix_registry_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string dir() const { return dir_.string(); }
  fs::path state_file() const { return dir_ / "prefixes.json"; }

  void Write(const fs::path& path, const std::string& contents) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << contents;
  }

  // The state file parsed as kvserve.v1.PrefixState.
  v1::PrefixState ReadState() {
    std::ifstream in(state_file(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    v1::PrefixState state;
    const auto status = google::protobuf::util::JsonStringToMessage(text.str(), &state);
    EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << text.str();
    return state;
  }

  std::vector<std::string> StateNames() {
    const v1::PrefixState state = ReadState();
    std::vector<std::string> names;
    for (const v1::RegisterPrefixRequest& p : state.prefixes()) names.push_back(p.name());
    return names;
  }

  std::unique_ptr<PrefixRegistry> OpenOrDie(const std::string& state_dir) {
    absl::StatusOr<std::unique_ptr<PrefixRegistry>> registry = PrefixRegistry::Open(state_dir);
    EXPECT_TRUE(registry.ok()) << registry.status();
    return registry.ok() ? *std::move(registry) : nullptr;
  }

  fs::path dir_;
};

TEST_F(PrefixRegistryTest, EmptyStateDirPersistsNothing) {
  std::unique_ptr<PrefixRegistry> registry = OpenOrDie("");
  ASSERT_NE(registry, nullptr);
  EXPECT_TRUE(registry->persisted().empty());
  EXPECT_TRUE(registry->Put(Text("sys", "You are terse."), Opts(true, 0, "static")).ok());
  EXPECT_FALSE(fs::exists("prefixes.json"));
  EXPECT_FALSE(fs::exists(dir_));
  // Still recorded in memory.
  ASSERT_TRUE(registry->Options("sys").has_value());
  EXPECT_EQ(registry->Options("sys")->cache_implementation(), "static");
  EXPECT_TRUE(registry->Remove("sys").ok());
  EXPECT_FALSE(registry->Options("sys").has_value());
}

TEST_F(PrefixRegistryTest, OpenCreatesTheDirectory) {
  const std::string nested = dir() + "/a/b";
  std::unique_ptr<PrefixRegistry> registry = OpenOrDie(nested);
  ASSERT_NE(registry, nullptr);
  EXPECT_TRUE(fs::is_directory(nested));
  EXPECT_TRUE(registry->persisted().empty());
  // Nothing is written before the first registration.
  EXPECT_FALSE(fs::exists(fs::path(nested) / "prefixes.json"));
}

TEST_F(PrefixRegistryTest, PutAndRemoveRewriteTheStateFileInOrder) {
  std::unique_ptr<PrefixRegistry> registry = OpenOrDie(dir());
  ASSERT_NE(registry, nullptr);
  ASSERT_TRUE(registry->Put(Text("b", "second letter"), Opts(true, 0, "")).ok());
  EXPECT_THAT(StateNames(), ElementsAre("b"));
  ASSERT_TRUE(registry->Put(Text("a", "first letter"), Opts(true, 0, "")).ok());
  ASSERT_TRUE(registry->Put(Text("c", "third letter"), Opts(true, 0, "")).ok());
  EXPECT_THAT(StateNames(), ElementsAre("b", "a", "c"));

  // A replacement keeps its place and takes the new content.
  ASSERT_TRUE(registry->Put(Text("a", "alpha"), Opts(false, 60, "dynamic")).ok());
  v1::PrefixState state = ReadState();
  ASSERT_EQ(state.prefixes_size(), 3);
  EXPECT_EQ(state.prefixes(1).name(), "a");
  EXPECT_EQ(state.prefixes(1).text(), "alpha");

  ASSERT_TRUE(registry->Remove("b").ok());
  EXPECT_THAT(StateNames(), ElementsAre("a", "c"));
  EXPECT_TRUE(registry->Remove("never-registered").ok());
  EXPECT_THAT(StateNames(), ElementsAre("a", "c"));
  EXPECT_FALSE(fs::exists(dir_ / "prefixes.json.tmp"));
}

TEST_F(PrefixRegistryTest, NewRegistryReturnsPersistedPrefixesInRegistrationOrder) {
  {
    std::unique_ptr<PrefixRegistry> registry = OpenOrDie(dir());
    ASSERT_NE(registry, nullptr);
    v1::RegisterPrefixRequest ids;
    ids.set_name("ids");
    ids.mutable_token_ids()->add_ids(5);
    ids.mutable_token_ids()->add_ids(7);
    ASSERT_TRUE(registry->Put(Text("zeta", "last letter"), Opts(true, 0, "")).ok());
    ASSERT_TRUE(registry->Put(ids, Opts(true, 0, "")).ok());
    ASSERT_TRUE(registry->Put(Text("alpha", "first letter"), Opts(true, 0, "")).ok());
    ASSERT_TRUE(registry->Remove("alpha").ok());
  }
  std::unique_ptr<PrefixRegistry> reopened = OpenOrDie(dir());
  ASSERT_NE(reopened, nullptr);
  const std::vector<v1::RegisterPrefixRequest>& persisted = reopened->persisted();
  EXPECT_THAT(Names(persisted), ElementsAre("zeta", "ids"));
  ASSERT_EQ(persisted.size(), 2u);
  EXPECT_EQ(persisted[0].text(), "last letter");
  EXPECT_THAT(persisted[1].token_ids().ids(), ElementsAre(5, 7));
}

TEST_F(PrefixRegistryTest, OptionsReturnsWhatPutStored) {
  std::unique_ptr<PrefixRegistry> registry = OpenOrDie(dir());
  ASSERT_NE(registry, nullptr);
  ASSERT_TRUE(registry->Put(Text("sys", "hello"), Opts(false, 3600, "dynamic")).ok());
  std::optional<v1::PrefixOptions> options = registry->Options("sys");
  ASSERT_TRUE(options.has_value());
  EXPECT_TRUE(options->has_pinned());
  EXPECT_FALSE(options->pinned());
  EXPECT_EQ(options->ttl_seconds(), 3600);
  EXPECT_EQ(options->cache_implementation(), "dynamic");
  EXPECT_FALSE(registry->Options("other").has_value());

  ASSERT_TRUE(registry->Put(Text("sys", "hello"), Opts(true, 0, "static")).ok());
  EXPECT_TRUE(registry->Options("sys")->pinned());
  EXPECT_EQ(registry->Options("sys")->cache_implementation(), "static");
}

TEST_F(PrefixRegistryTest, CorruptStateFileIsInvalidArgumentNamingIt) {
  Write(state_file(), "{\"prefixes\": [ {\"name\": ");
  absl::StatusOr<std::unique_ptr<PrefixRegistry>> registry = PrefixRegistry::Open(dir());
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(registry.status().message()), HasSubstr(state_file().string()));
}

TEST_F(PrefixRegistryTest, ReadPrefixesFileAcceptsJson) {
  const fs::path file = dir_ / "prefixes.json";
  Write(file, R"({
    "prefixes": [
      {"name": "sys", "text": "You are helpful.",
       "options": {"pinned": false, "ttlSeconds": "120", "cacheImplementation": "dynamic"}},
      {"name": "ids", "token_ids": {"ids": [1, 2, 3]}}
    ]
  })");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes =
      PrefixRegistry::ReadPrefixesFile(file.string());
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_THAT(Names(*prefixes), ElementsAre("sys", "ids"));
  EXPECT_EQ((*prefixes)[0].text(), "You are helpful.");
  EXPECT_TRUE((*prefixes)[0].options().has_pinned());
  EXPECT_FALSE((*prefixes)[0].options().pinned());
  EXPECT_EQ((*prefixes)[0].options().ttl_seconds(), 120);
  EXPECT_EQ((*prefixes)[0].options().cache_implementation(), "dynamic");
  EXPECT_THAT((*prefixes)[1].token_ids().ids(), ElementsAre(1, 2, 3));
}

TEST_F(PrefixRegistryTest, ReadPrefixesFileAcceptsYaml) {
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
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes =
      PrefixRegistry::ReadPrefixesFile(file.string());
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

TEST_F(PrefixRegistryTest, YamlNumbersInStringFieldsStayStringsAndOverflowIsRefused) {
  const fs::path file = dir_ / "numbers.yaml";
  Write(file, "prefixes:\n  - name: 2024\n    text: 42\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes =
      PrefixRegistry::ReadPrefixesFile(file.string());
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_EQ((*prefixes)[0].name(), "2024");
  EXPECT_EQ((*prefixes)[0].text(), "42");
  Write(
      file,
      "prefixes:\n  - name: big\n    text: x\n    options: {ttl_seconds: 99999999999999999999}\n");
  prefixes = PrefixRegistry::ReadPrefixesFile(file.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(prefixes.status().message()), HasSubstr(file.string()));
}

TEST_F(PrefixRegistryTest, ReadPrefixesFileRefusesAnUnknownFieldNamingTheFile) {
  const fs::path json = dir_ / "bad.json";
  Write(json, R"({"prefixes": [{"name": "sys", "text": "hi", "colour": "red"}]})");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> from_json =
      PrefixRegistry::ReadPrefixesFile(json.string());
  EXPECT_EQ(from_json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(from_json.status().message()), HasSubstr(json.string()));

  const fs::path yaml = dir_ / "bad.yaml";
  Write(yaml, "prefixes:\n  - name: sys\n    text: hi\n    colour: red\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> from_yaml =
      PrefixRegistry::ReadPrefixesFile(yaml.string());
  EXPECT_EQ(from_yaml.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(from_yaml.status().message()), HasSubstr(yaml.string()));
}

TEST_F(PrefixRegistryTest, ReadPrefixesFileRefusesMissingAndMalformedFiles) {
  const std::string missing = dir() + "/missing.yaml";
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> absent =
      PrefixRegistry::ReadPrefixesFile(missing);
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(absent.status().message()), HasSubstr(missing));

  const fs::path yaml = dir_ / "broken.yaml";
  Write(yaml, "prefixes: [unclosed\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> broken =
      PrefixRegistry::ReadPrefixesFile(yaml.string());
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr(yaml.string()));
}

// tests/data/hostile/prefixes/NAME, found from this file's path (CMake compiles it by its
// absolute path).
std::string HostilePrefixes(const std::string& name) {
  return (fs::path(__FILE__).parent_path().parent_path() / "data/hostile/prefixes" / name).string();
}

TEST_F(PrefixRegistryTest, YamlAliasesExpandingPastTheBoundAreRefused) {
  // Nine levels of ten aliases: 10^9 nodes once expanded, which used to run out of memory.
  const std::string laughs = HostilePrefixes("billion_laughs.yaml");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes =
      PrefixRegistry::ReadPrefixesFile(laughs);
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + laughs +
                ": not JSON or YAML: yaml-cpp: error at line 8, column 20: aliases expand the "
                "document past 4194304 nodes");

  // Within the bound, aliases are expanded as usual.
  prefixes = PrefixRegistry::ReadPrefixesFile(HostilePrefixes("few_aliases.yaml"));
  ASSERT_TRUE(prefixes.ok()) << prefixes.status();
  EXPECT_THAT(Names(*prefixes), ElementsAre("a", "b"));
  EXPECT_EQ((*prefixes)[1].options().ttl_seconds(), 60);

  // Long scalars repeated through aliases count by their bytes.
  std::string wide = "x: &x \"" + std::string(1 << 20, 'a') + "\"\ny: &y [";
  for (int i = 0; i < 300; ++i) wide += "*x, ";
  wide += "*x]\n";
  const fs::path file = dir_ / "wide.yaml";
  Write(file, wide);
  prefixes = PrefixRegistry::ReadPrefixesFile(file.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(prefixes.status().message()),
              HasSubstr("aliases expand the document past 268435456 bytes of text"));
}

TEST_F(PrefixRegistryTest, YamlThatIsNotUtf8IsRefused) {
  const fs::path file = dir_ / "latin1.yaml";
  Write(file, "prefixes:\n  - name: caf\xE9\n    text: x\n");
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes =
      PrefixRegistry::ReadPrefixesFile(file.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + file.string() + ": YAML text is not valid UTF-8");
}

TEST_F(PrefixRegistryTest, SpecialFilesAreRefusedByName) {
  fs::create_directories(dir_);
  const fs::path zero = dir_ / "zero.yaml";
  fs::create_symlink("/dev/zero", zero);
  absl::StatusOr<std::vector<v1::RegisterPrefixRequest>> prefixes =
      PrefixRegistry::ReadPrefixesFile(zero.string());
  EXPECT_EQ(prefixes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + zero.string() + ": not a regular file (a character device)");

  const fs::path fifo = dir_ / "fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  prefixes = PrefixRegistry::ReadPrefixesFile(fifo.string());
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + fifo.string() + ": not a regular file (a FIFO)");

  const fs::path big = dir_ / "big.json";
  Write(big, "");
  fs::resize_file(big, (int64_t{256} << 20) + 1);  // sparse
  prefixes = PrefixRegistry::ReadPrefixesFile(big.string());
  EXPECT_EQ(std::string(prefixes.status().message()),
            "--prefixes-file " + big.string() +
                ": 268435457 bytes is more than the 268435456 bytes (256 MiB) allowed");

  // The state file too.
  fs::create_directories(state_file());
  absl::StatusOr<std::unique_ptr<PrefixRegistry>> registry = PrefixRegistry::Open(dir());
  EXPECT_EQ(registry.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(registry.status().message()),
            state_file().string() + ": not a regular file (a directory)");
}

TEST_F(PrefixRegistryTest, AFailedSaveChangesNothingAndHidesServerPaths) {
  std::unique_ptr<PrefixRegistry> registry = OpenOrDie(dir());
  ASSERT_NE(registry, nullptr);
  ASSERT_TRUE(registry->Put(Text("a", "alpha"), Opts(true, 0, "static")).ok());
  // A directory where the temporary file goes makes every save fail, even for root.
  fs::create_directories(dir_ / "prefixes.json.tmp");

  absl::Status added = registry->Put(Text("b", "beta"), Opts(true, 0, ""));
  EXPECT_EQ(added.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(std::string(added.message()), "could not save the prefix state: Is a directory");
  EXPECT_FALSE(registry->Options("b").has_value());

  absl::Status replaced = registry->Put(Text("a", "other"), Opts(false, 60, "dynamic"));
  EXPECT_EQ(std::string(replaced.message()), "could not save the prefix state: Is a directory");
  EXPECT_EQ(registry->Options("a")->cache_implementation(), "static");

  absl::Status removed = registry->Remove("a");
  EXPECT_EQ(std::string(removed.message()), "could not save the prefix state: Is a directory");
  EXPECT_TRUE(registry->Options("a").has_value());
  v1::PrefixState state = ReadState();
  ASSERT_EQ(state.prefixes_size(), 1);
  EXPECT_EQ(state.prefixes(0).text(), "alpha");

  // Once the file can be written, the record is what the successful calls made it.
  fs::remove(dir_ / "prefixes.json.tmp");
  ASSERT_TRUE(registry->Put(Text("c", "gamma"), Opts(true, 0, "")).ok());
  EXPECT_THAT(StateNames(), ElementsAre("a", "c"));
}

}  // namespace
}  // namespace kvserve::server
