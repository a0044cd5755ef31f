// Tests for model/checkpoint: single and sharded checkpoints, dtype conversion, name checks.
#include "model/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/safetensors.h"

namespace kvserve::model {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

template <typename T>
std::span<const uint8_t> AsBytes(const std::vector<T>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)};
}

const std::vector<float> kWeight = {1.0f, -2.5f, 3.0f, 0.1f, 1e-20f, -0.0f};

std::string OneTensorFile(const std::string& name, const std::vector<float>& values) {
  const std::vector<TensorToWrite> tensors = {
      {name, SafetensorsDtype::kF32, {static_cast<int64_t>(values.size())}, AsBytes(values)}};
  return SerializeSafetensors(tensors, {});
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(CheckpointTest, OpensASingleFile) {
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC040};
  const std::vector<int64_t> ids = {1, 2, 3};
  const std::vector<TensorToWrite> tensors = {
      {"model.norm.weight", SafetensorsDtype::kBF16, {2}, AsBytes(bf16)},
      {"lm_head.weight", SafetensorsDtype::kF32, {2, 3}, AsBytes(kWeight)},
      {"ids", SafetensorsDtype::kI64, {3}, AsBytes(ids)}};
  base::ModelSource source =
      base::ModelSource::FromMemory({{"model.safetensors", SerializeSafetensors(tensors, {})}});
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(source);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->TensorNames(),
            (std::vector<std::string>{"ids", "lm_head.weight", "model.norm.weight"}));
  EXPECT_TRUE(checkpoint->Has("lm_head.weight"));
  EXPECT_FALSE(checkpoint->Has("lm_head"));
  EXPECT_EQ(checkpoint->Shape("lm_head.weight"), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(checkpoint->Shape("nope").empty());
  EXPECT_EQ(checkpoint->Dtype("model.norm.weight"), SafetensorsDtype::kBF16);
  EXPECT_EQ(checkpoint->Dtype("nope"), std::nullopt);

  absl::StatusOr<at::Tensor> weight = checkpoint->Load("lm_head.weight", at::kFloat);
  ASSERT_TRUE(weight.ok()) << weight.status();
  EXPECT_EQ(weight->scalar_type(), at::kFloat);
  EXPECT_EQ(weight->sizes().vec(), (std::vector<int64_t>{2, 3}));
  ASSERT_TRUE(weight->is_contiguous());
  EXPECT_EQ(std::memcmp(weight->data_ptr<float>(), kWeight.data(), 24), 0);

  // Each load owns its storage: writing to one does not change the next.
  weight->fill_(7.0f);
  absl::StatusOr<at::Tensor> again = checkpoint->Load("lm_head.weight", at::kFloat);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->data_ptr<float>()[1], -2.5f);

  absl::StatusOr<at::Tensor> ints = checkpoint->Load("ids", at::kFloat);
  ASSERT_FALSE(ints.ok());
  EXPECT_EQ(ints.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(ints.status()), HasSubstr("tensor 'ids': dtype I64 is not F32, F16 or BF16"));

  absl::StatusOr<at::Tensor> missing = checkpoint->Load("model.embed_tokens.weight", at::kFloat);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(missing.status()), HasSubstr("'model.embed_tokens.weight'"));

  absl::StatusOr<at::Tensor> as_long = checkpoint->Load("lm_head.weight", at::kLong);
  ASSERT_FALSE(as_long.ok());
  EXPECT_EQ(as_long.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, LoadShapedNamesATensorOfAnotherShape) {
  base::ModelSource source = base::ModelSource::FromMemory(
      {{"model.safetensors", OneTensorFile("norm.weight", {1.0f, 2.0f, 3.0f})}});
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(source);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  absl::StatusOr<at::Tensor> ok = checkpoint->LoadShaped("norm.weight", at::kFloat, {3});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(0), 3);
  absl::StatusOr<at::Tensor> wrong = checkpoint->LoadShaped("norm.weight", at::kFloat, {4});
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(wrong.status()), HasSubstr("tensor norm.weight has shape [3], expected [4]"));
  EXPECT_EQ(checkpoint->LoadShaped("nope", at::kFloat, {3}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointTest, ConvertsBf16AndF16ToF32Exactly) {
  // bfloat16 is the top half of a float32: conversion appends 16 zero bits.
  const std::vector<uint16_t> bf16 = {0x3F80, 0xC040, 0x3FC0, 0x0001,
                                      0x7F80, 0x8000, 0x4049, 0x3E4D};
  // float16 -> float32 reference values, all exactly representable.
  const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7BFF, 0xFC00, 0x8000};
  const std::vector<float> f16_expected = {1.0f,
                                           -2.0f,
                                           0.333251953125f,
                                           5.9604644775390625e-08f,
                                           65504.0f,
                                           -std::numeric_limits<float>::infinity(),
                                           -0.0f};
  const std::vector<TensorToWrite> tensors = {{"b", SafetensorsDtype::kBF16, {8}, AsBytes(bf16)},
                                              {"h", SafetensorsDtype::kF16, {7}, AsBytes(f16)}};
  base::ModelSource source =
      base::ModelSource::FromMemory({{"model.safetensors", SerializeSafetensors(tensors, {})}});
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(source);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();

  absl::StatusOr<at::Tensor> b = checkpoint->Load("b", at::kFloat);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->scalar_type(), at::kFloat);
  for (size_t i = 0; i < bf16.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(b->data_ptr<float>()[i]), uint32_t{bf16[i]} << 16) << i;
  }
  EXPECT_EQ(b->data_ptr<float>()[0], 1.0f);
  EXPECT_EQ(b->data_ptr<float>()[1], -3.0f);
  EXPECT_EQ(b->data_ptr<float>()[2], 1.5f);

  absl::StatusOr<at::Tensor> h = checkpoint->Load("h", at::kFloat);
  ASSERT_TRUE(h.ok()) << h.status();
  for (size_t i = 0; i < f16.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(h->data_ptr<float>()[i]),
              std::bit_cast<uint32_t>(f16_expected[i]))
        << i;
  }

  // Same dtype in and out keeps the bits; F32 -> BF16 rounds as ATen does.
  absl::StatusOr<at::Tensor> b_same = checkpoint->Load("b", at::kBFloat16);
  ASSERT_TRUE(b_same.ok());
  EXPECT_EQ(b_same->scalar_type(), at::kBFloat16);
  EXPECT_EQ(std::memcmp(b_same->data_ptr(), bf16.data(), bf16.size() * 2), 0);
  absl::StatusOr<at::Tensor> h_double = checkpoint->Load("h", at::kDouble);
  ASSERT_TRUE(h_double.ok());
  EXPECT_EQ(h_double->data_ptr<double>()[2], 0.333251953125);
}

// The index of two shards: "a" and "b" in shard 1, "c" in shard 2.
std::map<std::string, std::string> ShardedFiles() {
  const std::vector<float> a = {1, 2}, b = {3}, c = {4, 5, 6};
  const std::vector<TensorToWrite> first = {{"a", SafetensorsDtype::kF32, {2}, AsBytes(a)},
                                            {"b", SafetensorsDtype::kF32, {1}, AsBytes(b)}};
  const std::vector<TensorToWrite> second = {{"c", SafetensorsDtype::kF32, {3}, AsBytes(c)}};
  return {{"model-00001-of-00002.safetensors", SerializeSafetensors(first, {})},
          {"model-00002-of-00002.safetensors", SerializeSafetensors(second, {})},
          {"model.safetensors.index.json",
           R"({"metadata": {"total_size": 24}, "weight_map": {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00001-of-00002.safetensors",
                "c": "model-00002-of-00002.safetensors"}})"}};
}

TEST(CheckpointTest, OpensShardsOfAnIndex) {
  absl::StatusOr<Checkpoint> checkpoint =
      Checkpoint::Open(base::ModelSource::FromMemory(ShardedFiles()));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->TensorNames(), (std::vector<std::string>{"a", "b", "c"}));
  absl::StatusOr<at::Tensor> c = checkpoint->Load("c", at::kFloat);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_ptr<float>()[2], 6.0f);
  absl::StatusOr<at::Tensor> b = checkpoint->Load("b", at::kFloat);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data_ptr<float>()[0], 3.0f);
}

TEST(CheckpointTest, OpensAFolderOnDisk) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kvserve_checkpoint_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& [name, contents] : ShardedFiles()) {
    std::ofstream(dir / name, std::ios::binary) << contents;
  }
  absl::StatusOr<base::ModelSource> source = base::ModelSource::FromDirectory(dir.string());
  ASSERT_TRUE(source.ok());
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(*source);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  absl::StatusOr<at::Tensor> a = checkpoint->Load("a", at::kFloat);
  fs::remove_all(dir);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data_ptr<float>()[1], 2.0f);
}

TEST(CheckpointTest, RefusesSpecialFilesByName) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("kvserve_checkpoint_special_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "model.safetensors");
  absl::StatusOr<base::ModelSource> source = base::ModelSource::FromDirectory(dir.string());
  ASSERT_TRUE(source.ok());
  absl::StatusOr<Checkpoint> folder = Checkpoint::Open(*source);
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(folder.status().message()),
            (dir / "model.safetensors").string() + ": not a regular file (a directory)");

  fs::create_symlink("/dev/zero", dir / "model.safetensors.index.json");
  absl::StatusOr<Checkpoint> zero = Checkpoint::Open(*source);
  fs::remove_all(dir);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(zero.status().message()), (dir / "model.safetensors.index.json").string() +
                                                      ": not a regular file (a character device)");
}

absl::Status OpenError(std::map<std::string, std::string> files) {
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(base::ModelSource::FromMemory(files));
  return checkpoint.ok() ? absl::OkStatus() : checkpoint.status();
}

TEST(CheckpointTest, RejectsAModelWithoutWeights) {
  absl::Status status = OpenError({{"config.json", "{}"}});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(status), HasSubstr("neither model.safetensors nor"));
}

TEST(CheckpointTest, RejectsBadIndexJson) {
  auto files = ShardedFiles();
  files["model.safetensors.index.json"] = "{\"weight_map\": ";
  absl::Status status = OpenError(files);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("model.safetensors.index.json: not valid JSON"));

  files["model.safetensors.index.json"] = R"({"metadata": {}})";
  EXPECT_THAT(Message(OpenError(files)), HasSubstr("weight_map is missing or not an object"));
  files["model.safetensors.index.json"] = R"({"weight_map": {}})";
  EXPECT_THAT(Message(OpenError(files)), HasSubstr("weight_map is empty"));
  files["model.safetensors.index.json"] = R"({"weight_map": {"a": 3}})";
  EXPECT_THAT(Message(OpenError(files)), HasSubstr("weight_map entry 'a' must be a shard"));
  files["model.safetensors.index.json"] = R"({"weight_map": {"a": "../model.safetensors"}})";
  EXPECT_EQ(OpenError(files).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, RejectsMissingShard) {
  auto files = ShardedFiles();
  files.erase("model-00002-of-00002.safetensors");
  absl::Status status = OpenError(files);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(status),
              HasSubstr("lists shard 'model-00002-of-00002.safetensors', which does not exist"));
}

TEST(CheckpointTest, RejectsTensorInTwoShards) {
  auto files = ShardedFiles();
  files["model-00002-of-00002.safetensors"] = OneTensorFile("a", {9, 9});
  files["model.safetensors.index.json"] = R"({"weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})";
  absl::Status status = OpenError(files);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("tensor 'a' appears in both"));
}

TEST(CheckpointTest, RejectsTensorMissingFromItsShard) {
  auto files = ShardedFiles();
  files["model.safetensors.index.json"] = R"({"weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors"}})";
  absl::Status status = OpenError(files);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status),
              HasSubstr("tensor 'b' is not in shard 'model-00002-of-00002.safetensors'"));
  files["model.safetensors.index.json"] =
      R"({"weight_map": {"zz": "model-00001-of-00002.safetensors"}})";
  EXPECT_THAT(Message(OpenError(files)), HasSubstr("tensor 'zz' is not in shard"));
}

TEST(CheckpointTest, RejectsAMalformedShard) {
  auto files = ShardedFiles();
  files["model-00002-of-00002.safetensors"] = "short";
  absl::Status status = OpenError(files);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Message(status), HasSubstr("<in-memory model>/model-00002-of-00002.safetensors"));
}

TEST(CheckpointTest, CheckNamesListsMissingAndUnexpected) {
  absl::StatusOr<Checkpoint> checkpoint =
      Checkpoint::Open(base::ModelSource::FromMemory(ShardedFiles()));
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_TRUE(checkpoint->CheckNames({"a", "b", "c"}).ok());

  absl::Status status = checkpoint->CheckNames({"a", "b", "d"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(status), HasSubstr("missing 1 (d); unexpected 1 (c)"));

  std::set<std::string> many = {"a", "b", "c"};
  for (int i = 0; i < 12; ++i) many.insert(absl::StrCat("x", i + 10));
  status = checkpoint->CheckNames(many);
  EXPECT_THAT(Message(status), HasSubstr("missing 12 (x10, x11, x12, x13, x14, x15, x16, x17, "
                                         "x18, x19 and 2 more)"));
  EXPECT_THAT(Message(status), Not(HasSubstr("unexpected")));
}

}  // namespace
}  // namespace kvserve::model
