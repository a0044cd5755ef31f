// Tests for model/model_source: folders on disk and in-memory models.
#include "base/model_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/status/status.h"

namespace kvserve::base {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A fresh folder under the test temp dir, removed at the end of the test.
class ModelSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("kvserve_model_source_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& contents) {
    std::ofstream(dir_ / name, std::ios::binary) << contents;
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

std::string ToString(std::span<const uint8_t> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

TEST_F(ModelSourceTest, FromDirectoryRefusesMissingFolderAndFiles) {
  absl::StatusOr<ModelSource> missing = ModelSource::FromDirectory(dir() + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(dir() + "/nope"));

  Write("file.txt", "x");
  absl::StatusOr<ModelSource> file = ModelSource::FromDirectory(dir() + "/file.txt");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelSourceTest, ReadsAndMapsFilesOfAFolder) {
  Write("config.json", "{\"a\": 1}");
  Write("empty.bin", "");
  fs::create_directories(fs::path(dir()) / "sub");
  absl::StatusOr<ModelSource> source = ModelSource::FromDirectory(dir());
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->Describe(), dir());

  EXPECT_TRUE(source->Has("config.json"));
  EXPECT_FALSE(source->Has("tokenizer.json"));
  EXPECT_TRUE(source->Has("sub"));  // present, so that reading it is refused by name

  absl::StatusOr<std::string> text = source->ReadText("config.json");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"a\": 1}");

  absl::StatusOr<std::shared_ptr<const MappedFile>> mapped = source->Map("config.json");
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(ToString((*mapped)->bytes()), "{\"a\": 1}");
  EXPECT_EQ((*mapped)->name(), dir() + "/config.json");

  absl::StatusOr<std::shared_ptr<const MappedFile>> empty = source->Map("empty.bin");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE((*empty)->bytes().empty());

  absl::StatusOr<std::string> absent = source->ReadText("tokenizer.json");
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(absent.status().message()), HasSubstr(dir() + "/tokenizer.json"));

  absl::StatusOr<std::shared_ptr<const MappedFile>> folder = source->Map("sub");
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(folder.status().message()),
            dir() + "/sub: not a regular file (a directory)");
}

TEST_F(ModelSourceTest, SpecialFilesAreRefusedByName) {
  // A tokenizer.json that links to /dev/zero used to be skipped as absent (and reading it
  // would never end).
  fs::create_symlink("/dev/zero", fs::path(dir()) / "tokenizer.json");
  ASSERT_EQ(::mkfifo((fs::path(dir()) / "config.json").c_str(), 0600), 0);
  fs::create_symlink(fs::path(dir()) / "missing", fs::path(dir()) / "dangling.json");
  absl::StatusOr<ModelSource> source = ModelSource::FromDirectory(dir());
  ASSERT_TRUE(source.ok()) << source.status();

  EXPECT_TRUE(source->Has("tokenizer.json"));
  absl::StatusOr<std::string> zero = source->ReadText("tokenizer.json");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(zero.status().message()),
            dir() + "/tokenizer.json: not a regular file (a character device)");

  // Refused without opening: opening a FIFO with no writer would block.
  EXPECT_TRUE(source->Has("config.json"));
  absl::StatusOr<std::shared_ptr<const MappedFile>> fifo = source->Map("config.json");
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(fifo.status().message()),
            dir() + "/config.json: not a regular file (a FIFO)");

  EXPECT_FALSE(source->Has("dangling.json"));
  EXPECT_EQ(source->ReadText("dangling.json").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelSourceTest, ReadTextRefusesFilesOver256MiB) {
  // Sparse: no disk space is used.
  Write("tokenizer.json", "");
  fs::resize_file(fs::path(dir()) / "tokenizer.json", ModelSource::kMaxTextFileBytes + 1);
  absl::StatusOr<ModelSource> source = ModelSource::FromDirectory(dir());
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<std::string> text = source->ReadText("tokenizer.json");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(text.status().message()),
            dir() +
                "/tokenizer.json: 268435457 bytes is more than the "
                "268435456 bytes (256 MiB) a JSON file may have");
  // Weights are mapped whatever their size.
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapped = source->Map("tokenizer.json");
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ((*mapped)->bytes().size(), ModelSource::kMaxTextFileBytes + 1);
}

TEST_F(ModelSourceTest, MappingOutlivesTheFileAndTheSource) {
  Write("w.bin", "weights");
  std::shared_ptr<const MappedFile> mapped;
  {
    absl::StatusOr<ModelSource> source = ModelSource::FromDirectory(dir());
    ASSERT_TRUE(source.ok());
    absl::StatusOr<std::shared_ptr<const MappedFile>> m = source->Map("w.bin");
    ASSERT_TRUE(m.ok()) << m.status();
    mapped = *m;
  }
  fs::remove(fs::path(dir()) / "w.bin");
  EXPECT_EQ(ToString(mapped->bytes()), "weights");
}

TEST_F(ModelSourceTest, RefusesNamesOutsideTheModel) {
  Write("config.json", "{}");
  absl::StatusOr<ModelSource> source = ModelSource::FromDirectory(dir() + "/.");
  ASSERT_TRUE(source.ok());
  for (const char* name : {"../config.json", "/etc/passwd", "", "a/../../x"}) {
    EXPECT_FALSE(source->Has(name)) << name;
    absl::StatusOr<std::shared_ptr<const MappedFile>> mapped = source->Map(name);
    ASSERT_FALSE(mapped.ok()) << name;
    EXPECT_EQ(mapped.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_THAT(std::string(source->Map("../x").status().message()), HasSubstr("'..'"));
}

TEST(ModelSourceMemoryTest, ServesFilesFromMemory) {
  ModelSource source = ModelSource::FromMemory({{"config.json", "{}"}, {"w.bin", "abc"}});
  EXPECT_EQ(source.Describe(), "<in-memory model>");
  EXPECT_TRUE(source.Has("config.json"));
  EXPECT_FALSE(source.Has("tokenizer.json"));
  EXPECT_FALSE(source.Has("../config.json"));

  absl::StatusOr<std::string> text = source.ReadText("config.json");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{}");

  absl::StatusOr<std::shared_ptr<const MappedFile>> a = source.Map("w.bin");
  absl::StatusOr<std::shared_ptr<const MappedFile>> b = source.Map("w.bin");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(ToString((*a)->bytes()), "abc");
  EXPECT_EQ((*a)->bytes().data(), (*b)->bytes().data());  // shared, not copied
  EXPECT_EQ((*a)->name(), "<in-memory model>/w.bin");

  ModelSource copy = source;  // copies share the contents
  absl::StatusOr<std::shared_ptr<const MappedFile>> c = copy.Map("w.bin");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->bytes().data(), (*a)->bytes().data());

  absl::StatusOr<std::string> missing = source.ReadText("tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("<in-memory model>/tokenizer.json"));
}

}  // namespace
}  // namespace kvserve::base
