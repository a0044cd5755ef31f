// Tests of the API keys file, SHA-256, bearer parsing and the registry's reload.
#include "server/api_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string DigestOf(std::string_view key) { return HexDigest(Sha256(key)); }

// A temporary file removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/kvserve-keys-XXXXXX";
    const int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    Write(text);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  void Write(const std::string& text) {
    std::ofstream out(path_, std::ios::trunc);
    out << text;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(DigestOf(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(DigestOf("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiKeysTest, YamlAndJsonListsMapKeysToTenantsAndRoles) {
  const std::string yaml = absl::StrCat("- key_sha256: ", DigestOf("alpha-key"),
                                        "\n  tenant: alpha\n- key_sha256: ", DigestOf("root-key"),
                                        "\n  tenant: ops\n  role: admin\n");
  auto keys = ApiKeys::Parse(yaml, "keys.yaml");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2u);
  EXPECT_EQ((*keys)->Find("alpha-key"), (Principal{"alpha", Role::kUser}));
  EXPECT_EQ((*keys)->Find("root-key"), (Principal{"ops", Role::kAdmin}));
  EXPECT_EQ((*keys)->Find("alpha-key "), std::nullopt);
  EXPECT_EQ((*keys)->Find(DigestOf("alpha-key")), std::nullopt);  // the digest is no key
  EXPECT_EQ((*keys)->tenants(), (std::vector<std::string>{"alpha", "ops"}));

  // JSON, upper-case hex, wrapped in {keys: [...]}.
  std::string upper = DigestOf("beta");
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  const std::string json =
      absl::StrCat(R"({"keys": [{"key_sha256": ")", upper, R"(", "tenant": "beta"}]})");
  keys = ApiKeys::Parse(json, "keys.json");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->Find("beta"), (Principal{"beta", Role::kUser}));
}

TEST(ApiKeysTest, MalformedFilesNameTheEntryAndField) {
  const std::string good = DigestOf("k");
  const struct {
    std::string text;
    std::string error;
  } cases[] = {
      {"[]", "keys.yaml: holds no keys"},
      {"{other: 1}", "keys.yaml: unknown field 'other'"},
      {"just text", "keys.yaml: must be a list"},
      {"[1]", "keys.yaml: keys[0]: must be a map"},
      {"- tenant: a", "keys.yaml: keys[0].key_sha256: is required"},
      {absl::StrCat("- key_sha256: ", good), "keys.yaml: keys[0].tenant: is required"},
      {"- key_sha256: abc\n  tenant: a", "keys.yaml: keys[0].key_sha256: must be the 64"},
      {absl::StrCat("- key_sha256: ", good, "\n  tenant: 'a b'"),
       "keys.yaml: keys[0].tenant: must be 1 to 64"},
      {absl::StrCat("- key_sha256: ", good, "\n  tenant: a\n  role: root"),
       "keys.yaml: keys[0].role: 'root' is not user or admin"},
      {absl::StrCat("- key_sha256: ", good, "\n  tenant: a\n  key: secret"),
       "keys.yaml: keys[0].key: unknown field"},
      {absl::StrCat("- key_sha256: ", good, "\n  tenant: a\n- key_sha256: ", good, "\n  tenant: b"),
       "keys.yaml: keys[1].key_sha256: the same key is listed twice"},
      {absl::StrCat("- key_sha256: [", good, "]\n  tenant: a"),
       "keys.yaml: keys[0].key_sha256: must be a string"},
      {"- {", "keys.yaml: not YAML or JSON"},
      // The tenant of calls without keys owns what they registered: no key may be it.
      {absl::StrCat("- key_sha256: ", good, "\n  tenant: default"),
       "keys.yaml: keys[0].tenant: 'default' is reserved"},
  };
  for (const auto& c : cases) {
    auto keys = ApiKeys::Parse(c.text, "keys.yaml");
    ASSERT_FALSE(keys.ok()) << c.text;
    EXPECT_EQ(keys.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(keys.status().message()), StartsWith(c.error)) << c.text;
  }
}

TEST(ApiKeysTest, BearerKeys) {
  EXPECT_EQ(*BearerKey("Bearer abc"), "abc");
  EXPECT_EQ(*BearerKey("bearer   abc  "), "abc");
  EXPECT_EQ(*BearerKey("BEARER x.y-z"), "x.y-z");
  EXPECT_FALSE(BearerKey("Basic abc").ok());
  EXPECT_FALSE(BearerKey("Bearer").ok());
  EXPECT_FALSE(BearerKey("Bearer    ").ok());
  EXPECT_FALSE(BearerKey("Bearerabc").ok());
  EXPECT_FALSE(BearerKey("").ok());
}

TEST(ApiKeyRegistryTest, AuthenticatesAndReloads) {
  TempFile file(absl::StrCat("- key_sha256: ", DigestOf("one"), "\n  tenant: t1\n"));
  auto registry = ApiKeyRegistry::Open(file.path());
  ASSERT_TRUE(registry.ok()) << registry.status();
  auto who = (*registry)->Authenticate("Bearer one");
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->tenant, "t1");
  EXPECT_EQ((*registry)->Authenticate(std::nullopt).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*registry)->Authenticate("Bearer two").status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string((*registry)->Authenticate("Token one").status().message()),
              HasSubstr("Bearer"));

  // A new file: the old key goes, the new one works.
  file.Write(absl::StrCat("- key_sha256: ", DigestOf("two"), "\n  tenant: t2\n  role: admin\n"));
  ASSERT_TRUE((*registry)->Reload().ok());
  EXPECT_EQ((*registry)->Authenticate("Bearer one").status().code(),
            absl::StatusCode::kUnauthenticated);
  who = (*registry)->Authenticate("Bearer two");
  ASSERT_TRUE(who.ok());
  EXPECT_EQ(*who, (Principal{"t2", Role::kAdmin}));

  // A broken file is refused and the keys in force stay.
  file.Write("- tenant: nobody\n");
  const absl::Status broken = (*registry)->Reload();
  EXPECT_EQ(broken.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.message()), StartsWith(file.path()));
  EXPECT_TRUE((*registry)->Authenticate("Bearer two").ok());
}

TEST(ApiKeyRegistryTest, OpenNamesTheFlag) {
  auto registry = ApiKeyRegistry::Open("/nonexistent/keys.yaml");
  ASSERT_FALSE(registry.ok());
  EXPECT_THAT(std::string(registry.status().message()),
              StartsWith("--api-keys-file: /nonexistent/keys.yaml"));
}

TEST(TenantNameTest, Validity) {
  EXPECT_TRUE(IsValidTenantName("team-a.prod_1"));
  EXPECT_FALSE(IsValidTenantName(""));
  EXPECT_FALSE(IsValidTenantName("a/b"));
  EXPECT_FALSE(IsValidTenantName(std::string(65, 'a')));
  EXPECT_TRUE(IsValidTenantName(std::string(64, 'a')));
}

}  // namespace
}  // namespace kvserve::server
