// Tests for model/safetensors: the deterministic writer and the validating reader.
#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvserve::model {
namespace {

using ::testing::HasSubstr;

constexpr char kFileName[] = "bad.safetensors";

// 8-byte little-endian header length, then `header`, then `data`.
std::string RawFile(const std::string& header, const std::string& data = "") {
  uint64_t size = header.size();
  std::string out(reinterpret_cast<const char*>(&size), 8);
  return out + header + data;
}

absl::StatusOr<SafetensorsFile> ParseBytes(std::string bytes) {
  return SafetensorsFile::Parse(base::MappedFile::FromString(kFileName, std::move(bytes)));
}

std::span<const uint8_t> AsBytes(const std::vector<float>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)};
}

// Parsing must fail with `code` and a message naming the file and containing `problem`.
void ExpectError(const std::string& bytes, absl::StatusCode code, const std::string& problem) {
  absl::StatusOr<SafetensorsFile> parsed = ParseBytes(bytes);
  ASSERT_FALSE(parsed.ok()) << "expected an error containing: " << problem;
  EXPECT_EQ(parsed.status().code(), code) << parsed.status();
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(kFileName));
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(problem));
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const std::vector<float> weight = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.125f};
  const std::vector<uint8_t> flags = {1, 0, 1};
  const std::vector<uint16_t> half = {0x3C00, 0xC000};
  const std::vector<TensorToWrite> tensors = {
      {"z.weight", SafetensorsDtype::kF32, {2, 3}, AsBytes(weight)},
      {"a.flags", SafetensorsDtype::kBool, {3}, flags},
      {"m.half", SafetensorsDtype::kF16, {2}, {reinterpret_cast<const uint8_t*>(half.data()), 4}},
      {"empty", SafetensorsDtype::kI64, {0, 5}, {}},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"seed", "7"}};
  const std::string bytes = SerializeSafetensors(tensors, metadata);

  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_size + 24 + 3 + 4);

  absl::StatusOr<SafetensorsFile> parsed = ParseBytes(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->metadata(), metadata);
  ASSERT_EQ(parsed->entries().size(), 4u);
  EXPECT_EQ(parsed->entries()[0].name, "a.flags");  // sorted by name
  EXPECT_EQ(parsed->entries()[1].name, "empty");
  EXPECT_EQ(parsed->entries()[2].name, "m.half");
  EXPECT_EQ(parsed->entries()[3].name, "z.weight");

  const TensorEntry* w = parsed->Find("z.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  std::span<const uint8_t> data = parsed->Data(*w);
  ASSERT_EQ(data.size(), 24u);
  std::vector<float> read(6);
  std::memcpy(read.data(), data.data(), 24);
  EXPECT_EQ(read, weight);

  const TensorEntry* f = parsed->Find("a.flags");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->dtype, SafetensorsDtype::kBool);
  std::span<const uint8_t> flag_data = parsed->Data(*f);
  EXPECT_EQ(std::vector<uint8_t>(flag_data.begin(), flag_data.end()), flags);

  const TensorEntry* e = parsed->Find("empty");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(parsed->Data(*e).size(), 0u);
  EXPECT_EQ(parsed->Find("missing"), nullptr);
}

TEST(SafetensorsTest, SerializationIsDeterministicAndOrderIndependent) {
  const std::vector<float> a = {1, 2}, b = {3, 4, 5};
  std::vector<TensorToWrite> tensors = {{"b", SafetensorsDtype::kF32, {3}, AsBytes(b)},
                                        {"a", SafetensorsDtype::kF32, {2}, AsBytes(a)}};
  const std::string first = SerializeSafetensors(tensors, {});
  std::swap(tensors[0], tensors[1]);
  EXPECT_EQ(SerializeSafetensors(tensors, {}), first);
  // Tensors are laid out in name order: "a" first.
  absl::StatusOr<SafetensorsFile> parsed = ParseBytes(first);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Find("a")->begin, 0u);
  EXPECT_EQ(parsed->Find("b")->begin, 8u);
  EXPECT_TRUE(parsed->metadata().empty());
}

TEST(SafetensorsTest, ScalarAndEmptyHeader) {
  const std::vector<float> one = {42.0f};
  const std::vector<TensorToWrite> tensors = {{"s", SafetensorsDtype::kF32, {}, AsBytes(one)}};
  absl::StatusOr<SafetensorsFile> parsed = ParseBytes(SerializeSafetensors(tensors, {}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Find("s")->shape.empty());
  EXPECT_EQ(parsed->Data(*parsed->Find("s")).size(), 4u);

  absl::StatusOr<SafetensorsFile> empty = ParseBytes(RawFile("{}"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->entries().empty());
}

TEST(SafetensorsTest, DtypeNamesAndSizes) {
  EXPECT_EQ(ParseSafetensorsDtype("BF16"), SafetensorsDtype::kBF16);
  EXPECT_EQ(ParseSafetensorsDtype("BOOL"), SafetensorsDtype::kBool);
  EXPECT_EQ(ParseSafetensorsDtype("F8_E4M3"), std::nullopt);
  EXPECT_EQ(SafetensorsDtypeName(SafetensorsDtype::kI16), "I16");
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kF64), 8u);
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kBF16), 2u);
  EXPECT_EQ(SafetensorsDtypeSize(SafetensorsDtype::kU8), 1u);
}

TEST(SafetensorsTest, RejectsFileShorterThanHeaderLength) {
  ExpectError("", absl::StatusCode::kDataLoss, "fewer than the 8-byte header length");
  ExpectError("abcde", absl::StatusCode::kDataLoss, "fewer than the 8-byte header length");
}

TEST(SafetensorsTest, RejectsHeaderLengthPastEndOfFile) {
  std::string bytes = RawFile("{}");
  bytes[0] = 100;
  ExpectError(bytes, absl::StatusCode::kDataLoss, "header length 100 runs past the end");
  std::string huge(8, '\xff');  // 2^64 - 1: must not overflow the bounds check
  ExpectError(huge + "{}", absl::StatusCode::kDataLoss, "runs past the end");
}

TEST(SafetensorsTest, RejectsNonJsonHeader) {
  ExpectError(RawFile("{\"a\": "), absl::StatusCode::kInvalidArgument, "header is not valid JSON");
  ExpectError(RawFile("\xff\xfe"), absl::StatusCode::kInvalidArgument, "header is not valid JSON");
}

TEST(SafetensorsTest, RejectsHeaderThatIsNotAnObject) {
  ExpectError(RawFile("[1, 2]"), absl::StatusCode::kInvalidArgument,
              "header must be a JSON object, got an array");
}

TEST(SafetensorsTest, SurvivesDeeplyNestedHeader) {
  ExpectError(RawFile(std::string(200000, '[') + std::string(200000, ']')),
              absl::StatusCode::kInvalidArgument, "header is nested deeper than 64 levels");
  // Found by fuzz/safetensors: the error for malformed data_offsets printed the value, which
  // recursed once per level and overflowed the stack.
  ExpectError(RawFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": )" +
                      std::string(200000, '[') + std::string(200000, ']') + "}}"),
              absl::StatusCode::kInvalidArgument, "header is nested deeper than 64 levels");
  // 64 levels are fine (the error then quotes the value).
  ExpectError(RawFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": )" +
                      std::string(62, '[') + std::string(62, ']') + "}}"),
              absl::StatusCode::kInvalidArgument, "data_offsets must be an array [begin, end]");
}

TEST(SafetensorsTest, ErrorsQuoteAtMost64BytesOfAValue) {
  std::string offsets = "[0";
  for (int i = 0; i < 100000; ++i) offsets += ", 1";
  offsets += "]";
  absl::StatusOr<SafetensorsFile> parsed = ParseBytes(
      RawFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": )" + offsets + "}}", "x"));
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(std::string(parsed.status().message()),
              HasSubstr("data_offsets must be an array [begin, end], got [0,1,1,"));
  EXPECT_LT(parsed.status().message().size(), 200u) << parsed.status();
}

TEST(SafetensorsTest, RejectsEntryThatIsNotAnObject) {
  ExpectError(RawFile(R"({"w": 3})"), absl::StatusCode::kInvalidArgument,
              "tensor 'w' must be an object");
}

TEST(SafetensorsTest, RejectsMissingFields) {
  ExpectError(RawFile(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "1234"),
              absl::StatusCode::kInvalidArgument, "tensor 'w' has no dtype");
  ExpectError(RawFile(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", "1234"),
              absl::StatusCode::kInvalidArgument, "tensor 'w' has no shape");
  ExpectError(RawFile(R"({"w": {"dtype": "F32", "shape": [1]}})", "1234"),
              absl::StatusCode::kInvalidArgument, "tensor 'w' has no data_offsets");
}

TEST(SafetensorsTest, RejectsUnknownDtype) {
  ExpectError(RawFile(R"({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}})", "1234"),
              absl::StatusCode::kInvalidArgument, "tensor 'w' has unknown dtype 'Q4'");
  ExpectError(RawFile(R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", "1234"),
              absl::StatusCode::kInvalidArgument, "tensor 'w' dtype must be a string");
}

TEST(SafetensorsTest, RejectsNegativeOrNonIntegerShape) {
  ExpectError(
      RawFile(R"({"w": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 4]}})", "1234"),
      absl::StatusCode::kInvalidArgument, "tensor 'w' shape[0] is negative (-1)");
  ExpectError(RawFile(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "1234"),
              absl::StatusCode::kInvalidArgument, "shape[0] must be a non-negative integer");
  ExpectError(RawFile(R"({"w": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})",
                      std::string(16, 'x')),
              absl::StatusCode::kInvalidArgument, "tensor 'w' shape must be an array");
}

TEST(SafetensorsTest, RejectsOffsetsPastDataSection) {
  ExpectError(RawFile(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                      std::string(8, 'x')),
              absl::StatusCode::kDataLoss,
              "tensor 'w' data_offsets end 16 is past the end of the data section (8 bytes)");
}

TEST(SafetensorsTest, RejectsSizeNotMatchingDtypeAndShape) {
  ExpectError(RawFile(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})",
                      std::string(8, 'x')),
              absl::StatusCode::kInvalidArgument,
              "tensor 'w' has 8 bytes but dtype F32 and shape [3] need 12");
}

TEST(SafetensorsTest, RejectsOverlappingTensors) {
  ExpectError(RawFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                      R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                      std::string(12, 'x')),
              absl::StatusCode::kInvalidArgument, "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
  // Identical ranges overlap too.
  ExpectError(RawFile(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                      R"( "b": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]}})",
                      std::string(4, 'x')),
              absl::StatusCode::kInvalidArgument, "overlap");
}

TEST(SafetensorsTest, EmptyTensorsNeverOverlap) {
  absl::StatusOr<SafetensorsFile> parsed =
      ParseBytes(RawFile(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                         R"( "b": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
                         std::string(8, 'x')));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
}

TEST(SafetensorsTest, RejectsBeginAfterEnd) {
  ExpectError(RawFile(R"({"w": {"dtype": "U8", "shape": [0], "data_offsets": [8, 0]}})",
                      std::string(8, 'x')),
              absl::StatusCode::kInvalidArgument, "tensor 'w' data_offsets begin 8 is after end 0");
}

TEST(SafetensorsTest, RejectsMalformedOffsets) {
  ExpectError(RawFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0]}})", "x"),
              absl::StatusCode::kInvalidArgument, "data_offsets must be an array [begin, end]");
  ExpectError(RawFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]}})", "x"),
              absl::StatusCode::kInvalidArgument, "data_offsets begin is negative");
  ExpectError(RawFile(R"({"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, "1"]}})", "x"),
              absl::StatusCode::kInvalidArgument,
              "data_offsets end must be a non-negative integer");
}

TEST(SafetensorsTest, RejectsShapeWhoseByteSizeOverflows) {
  // 2^62 * 16 * 4 bytes overflows 64 bits; a naive product would wrap to 0 and match [0, 0].
  ExpectError(
      RawFile(
          R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 16], "data_offsets": [0, 0]}})"),
      absl::StatusCode::kInvalidArgument, "overflows the byte size");
  ExpectError(
      RawFile(R"({"w": {"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 0]}})"),
      absl::StatusCode::kInvalidArgument, "overflows the byte size");
}

TEST(SafetensorsTest, RejectsMetadataThatIsNotAStringMap) {
  ExpectError(RawFile(R"({"__metadata__": {"format": 1}})"), absl::StatusCode::kInvalidArgument,
              "__metadata__ value of 'format' must be a string, got an integer");
  ExpectError(RawFile(R"({"__metadata__": ["pt"]})"), absl::StatusCode::kInvalidArgument,
              "__metadata__ must be a string-to-string object, got an array");
}

TEST(SafetensorsTest, EveryTruncationOfAValidFileIsAnError) {
  const std::vector<float> values = {1, 2, 3, 4};
  const std::vector<TensorToWrite> tensors = {
      {"w", SafetensorsDtype::kF32, {2, 2}, AsBytes(values)}};
  const std::string bytes = SerializeSafetensors(tensors, {{"k", "v"}});
  for (size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_FALSE(ParseBytes(bytes.substr(0, length)).ok()) << "length " << length;
  }
  EXPECT_TRUE(ParseBytes(bytes).ok());
}

TEST(SafetensorsTest, RandomCorruptionNeverEscapesTheFile) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  const std::vector<TensorToWrite> tensors = {{"a", SafetensorsDtype::kF32, {4}, AsBytes(a)},
                                              {"b", SafetensorsDtype::kF32, {2}, AsBytes(b)}};
  const std::string bytes = SerializeSafetensors(tensors, {});
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string corrupt = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) {
      corrupt[rng() % corrupt.size()] = static_cast<char>(rng() % 256);
    }
    auto file = base::MappedFile::FromString(kFileName, corrupt);
    absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(file);
    if (!parsed.ok()) {
      EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(kFileName));
      continue;
    }
    ++accepted;
    const uint8_t* lo = file->bytes().data();
    const uint8_t* hi = lo + file->bytes().size();
    for (const TensorEntry& e : parsed->entries()) {
      std::span<const uint8_t> data = parsed->Data(e);
      EXPECT_TRUE(data.empty() || (data.data() >= lo && data.data() + data.size() <= hi));
    }
  }
  EXPECT_GT(accepted, 0);  // data-byte flips keep the file valid
}

}  // namespace
}  // namespace kvserve::model
