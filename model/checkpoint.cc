// Opens single-file and sharded safetensors checkpoints and loads tensors as ATen tensors.
#include "model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/string_cat.h"

namespace kvserve::model {

using base::Cat;

namespace {

using Json = nlohmann::json;

constexpr std::string_view kSingleFile = "model.safetensors";
constexpr std::string_view kIndexFile = "model.safetensors.index.json";
constexpr size_t kMaxNamesListed = 10;

// The tensor -> shard map of an index file.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const base::ModelSource& source) {
  const std::string where = Cat(source.Describe(), "/", kIndexFile);
  absl::StatusOr<std::string> text = source.ReadText(kIndexFile);
  if (!text.ok()) return text.status();
  Json index;
  try {
    index = Json::parse(*text);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(Cat(where, ": not valid JSON: ", e.what()));
  }
  if (!index.is_object()) {
    return absl::InvalidArgumentError(Cat(where, ": must be a JSON object"));
  }
  auto weight_map = index.find("weight_map");
  if (weight_map == index.end() || !weight_map->is_object()) {
    return absl::InvalidArgumentError(Cat(where, ": weight_map is missing or not an object"));
  }
  if (weight_map->empty()) {
    return absl::InvalidArgumentError(Cat(where, ": weight_map is empty"));
  }
  std::map<std::string, std::string> result;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          Cat(where, ": weight_map entry '", it.key(), "' must be a shard file name"));
    }
    result.emplace(it.key(), it->get<std::string>());
  }
  return result;
}

// "a, b, c and 4 more" of at most kMaxNamesListed names.
std::string ListNames(const std::vector<std::string>& names) {
  std::vector<std::string> shown(names.begin(),
                                 names.begin() + std::min(names.size(), kMaxNamesListed));
  std::string text = absl::StrJoin(shown, ", ");
  if (names.size() > kMaxNamesListed) {
    text += Cat(" and ", names.size() - kMaxNamesListed, " more");
  }
  return text;
}

absl::StatusOr<at::ScalarType> AtenDtype(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32:
      return at::kFloat;
    case SafetensorsDtype::kF16:
      return at::kHalf;
    case SafetensorsDtype::kBF16:
      return at::kBFloat16;
    default:
      return absl::InvalidArgumentError(
          Cat("dtype ", SafetensorsDtypeName(dtype), " is not F32, F16 or BF16"));
  }
}

}  // namespace

absl::StatusOr<Checkpoint> Checkpoint::Open(const base::ModelSource& source) {
  Checkpoint checkpoint;
  checkpoint.description_ = source.Describe();
  std::map<std::string, std::string> weight_map;  // tensor -> shard, empty for one file
  std::vector<std::string> shard_files;
  if (source.Has(kIndexFile)) {
    absl::StatusOr<std::map<std::string, std::string>> read;
    // Every value is type-checked; the catch keeps a missed check from ending the process.
    try {
      read = ReadWeightMap(source);
    } catch (const Json::exception& e) {
      return absl::InvalidArgumentError(
          Cat(source.Describe(), "/", kIndexFile, ": unexpected value: ", e.what()));
    }
    if (!read.ok()) return read.status();
    weight_map = *std::move(read);
    std::set<std::string> unique;
    for (const auto& [tensor, shard] : weight_map) unique.insert(shard);
    shard_files.assign(unique.begin(), unique.end());
  } else if (source.Has(kSingleFile)) {
    shard_files.emplace_back(kSingleFile);
  } else {
    return absl::NotFoundError(
        Cat(source.Describe(), ": neither ", kSingleFile, " nor ", kIndexFile, " exists"));
  }

  for (const std::string& shard_file : shard_files) {
    absl::StatusOr<std::shared_ptr<const base::MappedFile>> mapped = source.Map(shard_file);
    if (!mapped.ok()) {
      if (!weight_map.empty() && absl::IsNotFound(mapped.status())) {
        return absl::NotFoundError(Cat(source.Describe(), "/", kIndexFile, ": lists shard '",
                                       shard_file, "', which does not exist"));
      }
      return mapped.status();
    }
    absl::StatusOr<SafetensorsFile> parsed = SafetensorsFile::Parse(*std::move(mapped));
    if (!parsed.ok()) return parsed.status();
    const size_t shard = checkpoint.shards_.size();
    const std::vector<TensorEntry>& entries = parsed->entries();
    for (size_t i = 0; i < entries.size(); ++i) {
      auto [it, inserted] = checkpoint.tensors_.emplace(entries[i].name, Location{shard, i});
      if (!inserted) {
        return absl::InvalidArgumentError(
            Cat(source.Describe(), ": tensor '", entries[i].name, "' appears in both ",
                checkpoint.shards_[it->second.shard].name(), " and ", parsed->name()));
      }
    }
    checkpoint.shards_.push_back(*std::move(parsed));
  }

  for (const auto& [tensor, shard_file] : weight_map) {
    auto it = checkpoint.tensors_.find(tensor);
    // shards_[i] was parsed from shard_files[i].
    if (it == checkpoint.tensors_.end() || shard_files[it->second.shard] != shard_file) {
      return absl::InvalidArgumentError(Cat(source.Describe(), "/", kIndexFile, ": tensor '",
                                            tensor, "' is not in shard '", shard_file, "'"));
    }
  }
  return checkpoint;
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, location] : tensors_) names.push_back(name);
  return names;
}

bool Checkpoint::Has(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

const TensorEntry* Checkpoint::Entry(std::string_view name, size_t* shard) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return nullptr;
  if (shard != nullptr) *shard = it->second.shard;
  return &shards_[it->second.shard].entries()[it->second.entry];
}

std::vector<int64_t> Checkpoint::Shape(std::string_view name) const {
  const TensorEntry* entry = Entry(name, nullptr);
  return entry != nullptr ? entry->shape : std::vector<int64_t>();
}

std::optional<SafetensorsDtype> Checkpoint::Dtype(std::string_view name) const {
  const TensorEntry* entry = Entry(name, nullptr);
  if (entry == nullptr) return std::nullopt;
  return entry->dtype;
}

absl::StatusOr<at::Tensor> Checkpoint::LoadShaped(std::string_view name, at::ScalarType dtype,
                                                  at::IntArrayRef shape) const {
  absl::StatusOr<at::Tensor> t = Load(name, dtype);
  if (t.ok() && !t->sizes().equals(shape)) {
    return absl::InvalidArgumentError(Cat(description_, ": tensor ", name, " has shape ",
                                          c10::str(t->sizes()), ", expected ", c10::str(shape),
                                          " from config.json"));
  }
  return t;
}

absl::StatusOr<at::Tensor> Checkpoint::Load(std::string_view name, at::ScalarType dtype) const {
  size_t shard = 0;
  const TensorEntry* entry = Entry(name, &shard);
  if (entry == nullptr) {
    return absl::NotFoundError(Cat(description_, ": checkpoint has no tensor '", name, "'"));
  }
  if (!at::isFloatingType(dtype)) {
    return absl::InvalidArgumentError(Cat("cannot load tensor '", name, "' as ",
                                          c10::toString(dtype), ": not a floating-point dtype"));
  }
  absl::StatusOr<at::ScalarType> source_dtype = AtenDtype(entry->dtype);
  if (!source_dtype.ok()) {
    return absl::InvalidArgumentError(
        Cat(shards_[shard].name(), ": tensor '", name, "': ", source_dtype.status().message()));
  }
  std::span<const uint8_t> bytes = shards_[shard].Data(*entry);
  at::Tensor tensor =
      at::empty(entry->shape, at::TensorOptions().dtype(*source_dtype).device(at::kCPU));
  if (!bytes.empty()) std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
  if (*source_dtype == dtype) return tensor;
  return tensor.to(dtype);
}

absl::Status Checkpoint::CheckNames(const std::set<std::string>& expected) const {
  std::vector<std::string> missing, unexpected;
  for (const std::string& name : expected) {
    if (!Has(name)) missing.push_back(name);
  }
  for (const auto& [name, location] : tensors_) {
    if (expected.count(name) == 0) unexpected.push_back(name);
  }
  if (missing.empty() && unexpected.empty()) return absl::OkStatus();
  std::string message = Cat(description_, ": checkpoint tensors do not match the model:");
  if (!missing.empty()) {
    message += Cat(" missing ", missing.size(), " (", ListNames(missing), ")");
  }
  if (!unexpected.empty()) {
    message += Cat(missing.empty() ? "" : ";", " unexpected ", unexpected.size(), " (",
                   ListNames(unexpected), ")");
  }
  return absl::InvalidArgumentError(message);
}

}  // namespace kvserve::model
