// Tests for snapshot files: round trip, and refusal of corrupt, truncated, foreign and
// mismatching files; a write that hits a file-size limit leaves nothing behind.
#include "cache/snapshot_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cache/snapshot.h"

namespace kvserve::cache {
namespace {

using ::testing::HasSubstr;

const SnapshotFileIdentity kIdentity{.model_fingerprint = "model-a", .strategy = "dynamic/2"};

// Two layers of [1, 2, n, 4] with distinct, position-dependent values.
std::shared_ptr<const Snapshot> MakeSnapshot(std::vector<int32_t> tokens, float salt = 0) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<at::Tensor> keys, values;
  for (int layer = 0; layer < 2; ++layer) {
    at::Tensor base = at::arange(2 * n * 4, at::kFloat).view({1, 2, n, 4});
    keys.push_back((base * 0.5 + layer + salt).contiguous());
    values.push_back((base * -0.25 + layer * 3 + salt).contiguous());
  }
  return *Snapshot::FromTensors(std::move(tokens), "model-a", std::move(keys), std::move(values));
}

class SnapshotFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("snapfile_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "a.kvsnap").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Bytes() {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void Put(const std::string& bytes) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << bytes;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(SnapshotFileTest, RoundTripKeepsTokensTensorsAndHeader) {
  auto snapshot = MakeSnapshot({5, 6, 7});
  ASSERT_TRUE(WriteSnapshotFile(path_, *snapshot, "tenant", 4, kIdentity).ok());
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path_)),
            SnapshotFileBytes(*snapshot, "tenant", kIdentity));
  absl::StatusOr<SnapshotFileHeader> header = ReadSnapshotFileHeader(path_, kIdentity);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->space, "tenant");
  EXPECT_EQ(header->hits, 4);
  EXPECT_EQ(header->dtype, "Float");
  EXPECT_EQ(header->tokens, (std::vector<int32_t>{5, 6, 7}));
  absl::StatusOr<std::shared_ptr<const Snapshot>> read =
      ReadSnapshotFile(path_, kIdentity, std::vector<int32_t>{5, 6, 7});
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ((*read)->num_layers(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(at::equal((*read)->keys(i), snapshot->keys(i)));
    EXPECT_TRUE(at::equal((*read)->values(i), snapshot->values(i)));
  }
  EXPECT_EQ((*read)->fingerprint(), "model-a");
  // No temporary file is left.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);
}

TEST_F(SnapshotFileTest, TheHeaderKeepsTheRetentionClassAndANamedPrefixsDescription) {
  auto snapshot = MakeSnapshot({5, 6, 7});
  SnapshotFileExtras extras;
  extras.retention = RetentionClass::kHigh;
  PrefixInfo& named = extras.named.emplace();
  named.name = "tenant/sys";
  named.created_at = absl::FromUnixMicros(1'700'000'000'123'456);
  named.options.ttl = absl::Hours(1);
  named.options.cache_implementation = "offloaded";
  ASSERT_TRUE(WriteSnapshotFile(path_, *snapshot, "tenant", 2, kIdentity, extras).ok());
  EXPECT_EQ(static_cast<int64_t>(std::filesystem::file_size(path_)),
            SnapshotFileBytes(*snapshot, "tenant", kIdentity, extras));
  absl::StatusOr<SnapshotFileHeader> header = ReadSnapshotFileHeader(path_, kIdentity);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->retention, RetentionClass::kHigh);
  ASSERT_TRUE(header->named.has_value());
  EXPECT_EQ(header->named->name, "tenant/sys");
  EXPECT_EQ(header->named->created_at, named.created_at);
  EXPECT_EQ(header->named->options.ttl, absl::Hours(1));
  EXPECT_EQ(header->named->options.cache_implementation, "offloaded");
  EXPECT_EQ(header->named->options.retention, RetentionClass::kHigh);
  EXPECT_FALSE(header->named->options.pinned);
  EXPECT_EQ(header->named->num_tokens, 3);
  EXPECT_EQ(header->named->hits, 2);
  EXPECT_EQ(header->named->bytes, snapshot->bytes());
  // An automatic entry's file: no name, and an infinite TTL needs no field.
  ASSERT_TRUE(
      WriteSnapshotFile(path_, *snapshot, "", 0, kIdentity, {.retention = RetentionClass::kLow})
          .ok());
  header = ReadSnapshotFileHeader(path_, kIdentity);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->retention, RetentionClass::kLow);
  EXPECT_FALSE(header->named.has_value());
}

TEST_F(SnapshotFileTest, AFileOfTheFirstFormatIsRefusedByName) {
  ASSERT_TRUE(WriteSnapshotFile(path_, *MakeSnapshot({1, 2}), "", 0, kIdentity).ok());
  std::string bytes = Bytes();
  bytes[6] = '1';  // "KVSNAP1\n"
  Put(bytes);
  absl::StatusOr<SnapshotFileHeader> header = ReadSnapshotFileHeader(path_, kIdentity);
  EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(header.status().message(), HasSubstr("first snapshot file format"));
}

TEST_F(SnapshotFileTest, FileNameDependsOnSpaceAndTokens) {
  EXPECT_EQ(SnapshotFileName("", std::vector<int32_t>{1, 2}),
            SnapshotFileName("", std::vector<int32_t>{1, 2}));
  EXPECT_NE(SnapshotFileName("", std::vector<int32_t>{1, 2}),
            SnapshotFileName("t", std::vector<int32_t>{1, 2}));
  EXPECT_NE(SnapshotFileName("", std::vector<int32_t>{1, 2}),
            SnapshotFileName("", std::vector<int32_t>{1, 3}));
}

TEST_F(SnapshotFileTest, CorruptTensorsAreRefusedAtLoad) {
  ASSERT_TRUE(WriteSnapshotFile(path_, *MakeSnapshot({1, 2}), "", 0, kIdentity).ok());
  std::string bytes = Bytes();
  bytes[bytes.size() - 20] ^= 0x5A;  // inside the last tensor
  Put(bytes);
  EXPECT_TRUE(ReadSnapshotFileHeader(path_, kIdentity).ok());  // the header is intact
  absl::StatusOr<std::shared_ptr<const Snapshot>> read =
      ReadSnapshotFile(path_, kIdentity, std::vector<int32_t>{1, 2});
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("checksum"));
}

TEST_F(SnapshotFileTest, CorruptHeaderIsRefused) {
  ASSERT_TRUE(WriteSnapshotFile(path_, *MakeSnapshot({1, 2}), "", 0, kIdentity).ok());
  std::string bytes = Bytes();
  bytes[20] ^= 0x01;  // inside the header
  Put(bytes);
  EXPECT_EQ(ReadSnapshotFileHeader(path_, kIdentity).status().code(), absl::StatusCode::kDataLoss);
  Put("not a snapshot at all");
  EXPECT_EQ(ReadSnapshotFileHeader(path_, kIdentity).status().code(), absl::StatusCode::kDataLoss);
  Put("");
  EXPECT_EQ(ReadSnapshotFileHeader(path_, kIdentity).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SnapshotFileTest, TruncatedFileIsRefused) {
  ASSERT_TRUE(WriteSnapshotFile(path_, *MakeSnapshot({1, 2, 3}), "", 0, kIdentity).ok());
  const std::string bytes = Bytes();
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{30}, size_t{9}}) {
    Put(bytes.substr(0, keep));
    absl::StatusOr<SnapshotFileHeader> header = ReadSnapshotFileHeader(path_, kIdentity);
    EXPECT_EQ(header.status().code(), absl::StatusCode::kDataLoss) << keep;
  }
}

TEST_F(SnapshotFileTest, ForeignModelOrStrategyOrTokensAreRefused) {
  ASSERT_TRUE(WriteSnapshotFile(path_, *MakeSnapshot({1, 2}), "", 0, kIdentity).ok());
  absl::StatusOr<SnapshotFileHeader> other_model = ReadSnapshotFileHeader(
      path_, {.model_fingerprint = "model-b", .strategy = kIdentity.strategy});
  EXPECT_EQ(other_model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other_model.status().message(), HasSubstr("model-b"));
  EXPECT_EQ(ReadSnapshotFileHeader(path_, {.model_fingerprint = "model-a", .strategy = "x"})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // The tokens are checked again at load.
  EXPECT_EQ(ReadSnapshotFile(path_, kIdentity, std::vector<int32_t>{1, 3}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadSnapshotFile((dir_ / "absent").string(), kIdentity, {}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SnapshotFileTest, FileSizeLimitFailsCleanly) {
  auto snapshot = MakeSnapshot(std::vector<int32_t>(64, 3));
  ASSERT_GT(SnapshotFileBytes(*snapshot, "", kIdentity), 4096);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A full disk as a file-size limit: writes past it fail with EFBIG.
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{.rlim_cur = 4096, .rlim_max = 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    absl::Status written = WriteSnapshotFile(path_, *snapshot, "", 0, kIdentity);
    const bool clean = std::filesystem::is_empty(dir_);
    ::_exit(absl::IsResourceExhausted(written) && clean ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the write did not fail cleanly";
}

}  // namespace
}  // namespace kvserve::cache
