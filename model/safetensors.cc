// Parses and writes safetensors files: an 8-byte little-endian header length, a JSON header,
// then the data section that the header's data_offsets index.
#include "model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/string_cat.h"
#include "tokenizer/tokenizer_json_util.h"

namespace kvserve::model {

using base::Cat;

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

using Json = nlohmann::json;

constexpr size_t kHeaderLengthBytes = 8;
// The reference implementation refuses headers over 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;
constexpr std::string_view kMetadataKey = "__metadata__";

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  size_t size;
};

constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, "F64", 8}, {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF16, "F16", 2}, {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI64, "I64", 8}, {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2}, {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kU8, "U8", 1},   {SafetensorsDtype::kBool, "BOOL", 1},
};

const DtypeInfo& InfoOf(SafetensorsDtype dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  KVSERVE_CHECK(false) << "invalid SafetensorsDtype " << static_cast<int>(dtype);
  __builtin_unreachable();
}

[[noreturn]] void Fail(std::string_view message) {
  KVSERVE_CHECK(false) << message;
  __builtin_unreachable();
}

// Builds "<file>: <problem>" errors.
class ErrorFor {
 public:
  explicit ErrorFor(const std::string& file) : file_(file) {}
  template <typename... Args>
  absl::Status Invalid(const Args&... args) const {
    return absl::InvalidArgumentError(Cat(file_, ": ", args...));
  }
  template <typename... Args>
  absl::Status Truncated(const Args&... args) const {
    return absl::DataLossError(Cat(file_, ": ", args...));
  }

 private:
  const std::string& file_;
};

// A header value as errors quote it: at most 64 bytes of its JSON, "..." after, so that a huge
// shape or offsets array cannot make a huge message.
std::string Quoted(const Json& value) {
  constexpr size_t kMaxBytes = 64;
  std::string text = value.dump();
  if (text.size() <= kMaxBytes) return text;
  text.resize(kMaxBytes);
  return text + "...";
}

// Reads a non-negative JSON integer; a negative one, a float or anything else is an error.
absl::StatusOr<uint64_t> ReadUnsigned(const Json& value, const ErrorFor& error,
                                      std::string_view what) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) return error.Invalid(what, " is negative (", value.dump(), ")");
  return error.Invalid(what, " must be a non-negative integer, got ",
                       tokenizer::JsonKindPhrase(value));
}

absl::StatusOr<TensorEntry> ParseEntry(const std::string& name, const Json& info,
                                       uint64_t data_size, const ErrorFor& error) {
  const std::string where = Cat("tensor '", name, "'");
  if (!info.is_object())
    return error.Invalid(where, " must be an object, got ", tokenizer::JsonKindPhrase(info));
  TensorEntry entry;
  entry.name = name;

  auto dtype_it = info.find("dtype");
  if (dtype_it == info.end()) return error.Invalid(where, " has no dtype");
  if (!dtype_it->is_string()) {
    return error.Invalid(where, " dtype must be a string, got ",
                         tokenizer::JsonKindPhrase(*dtype_it));
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  std::optional<SafetensorsDtype> dtype = ParseSafetensorsDtype(dtype_name);
  if (!dtype.has_value()) {
    return error.Invalid(where, " has unknown dtype '", dtype_name,
                         "' (supported: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  }
  entry.dtype = *dtype;

  auto shape_it = info.find("shape");
  if (shape_it == info.end()) return error.Invalid(where, " has no shape");
  if (!shape_it->is_array()) {
    return error.Invalid(where, " shape must be an array, got ",
                         tokenizer::JsonKindPhrase(*shape_it));
  }
  uint64_t num_bytes = SafetensorsDtypeSize(entry.dtype);
  for (size_t i = 0; i < shape_it->size(); ++i) {
    absl::StatusOr<uint64_t> dim =
        ReadUnsigned((*shape_it)[i], error, Cat(where, " shape[", i, "]"));
    if (!dim.ok()) return dim.status();
    if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(num_bytes, *dim, &num_bytes)) {
      return error.Invalid(where, " shape ", Quoted(*shape_it), " overflows the byte size");
    }
    entry.shape.push_back(static_cast<int64_t>(*dim));
  }

  auto offsets_it = info.find("data_offsets");
  if (offsets_it == info.end()) return error.Invalid(where, " has no data_offsets");
  if (!offsets_it->is_array() || offsets_it->size() != 2) {
    return error.Invalid(where, " data_offsets must be an array [begin, end], got ",
                         Quoted(*offsets_it));
  }
  absl::StatusOr<uint64_t> begin =
      ReadUnsigned((*offsets_it)[0], error, Cat(where, " data_offsets begin"));
  if (!begin.ok()) return begin.status();
  absl::StatusOr<uint64_t> end =
      ReadUnsigned((*offsets_it)[1], error, Cat(where, " data_offsets end"));
  if (!end.ok()) return end.status();
  if (*begin > *end) {
    return error.Invalid(where, " data_offsets begin ", *begin, " is after end ", *end);
  }
  if (*end > data_size) {
    return error.Truncated(where, " data_offsets end ", *end,
                           " is past the end of the data section (", data_size, " bytes)");
  }
  if (*end - *begin != num_bytes) {
    return error.Invalid(where, " has ", *end - *begin, " bytes but dtype ", dtype_name,
                         " and shape ", Quoted(*shape_it), " need ", num_bytes);
  }
  entry.begin = *begin;
  entry.end = *end;
  return entry;
}

absl::StatusOr<std::map<std::string, std::string>> ParseMetadata(const Json& value,
                                                                 const ErrorFor& error) {
  if (!value.is_object()) {
    return error.Invalid("__metadata__ must be a string-to-string object, got ",
                         tokenizer::JsonKindPhrase(value));
  }
  std::map<std::string, std::string> metadata;
  for (auto it = value.begin(); it != value.end(); ++it) {
    if (!it->is_string()) {
      return error.Invalid("__metadata__ value of '", it.key(), "' must be a string, got ",
                           tokenizer::JsonKindPhrase(*it));
    }
    metadata.emplace(it.key(), it->get<std::string>());
  }
  return metadata;
}

// Two tensors may not share a byte; empty tensors own no bytes, so they never overlap.
absl::Status CheckNoOverlap(const std::vector<TensorEntry>& entries, const ErrorFor& error) {
  std::vector<const TensorEntry*> by_offset;
  for (const TensorEntry& e : entries) {
    if (e.begin != e.end) by_offset.push_back(&e);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const TensorEntry* a, const TensorEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorEntry& prev = *by_offset[i - 1];
    const TensorEntry& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      return error.Invalid("tensors '", prev.name, "' [", prev.begin, ", ", prev.end, ") and '",
                           cur.name, "' [", cur.begin, ", ", cur.end, ") overlap");
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return InfoOf(dtype).size; }

std::string_view SafetensorsDtypeName(SafetensorsDtype dtype) { return InfoOf(dtype).name; }

std::optional<SafetensorsDtype> ParseSafetensorsDtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(
    std::shared_ptr<const base::MappedFile> file) {
  if (file == nullptr) return absl::InvalidArgumentError("SafetensorsFile::Parse: null file");
  const ErrorFor error(file->name());
  const std::span<const uint8_t> bytes = file->bytes();
  if (bytes.size() < kHeaderLengthBytes) {
    return error.Truncated("file has ", bytes.size(),
                           " bytes, fewer than the 8-byte header length");
  }
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), kHeaderLengthBytes);
  const uint64_t available = bytes.size() - kHeaderLengthBytes;
  if (header_size > available) {
    return error.Truncated("header length ", header_size, " runs past the end of the file (",
                           available, " bytes after the length)");
  }
  if (header_size > kMaxHeaderBytes) {
    return error.Invalid("header length ", header_size, " exceeds the limit of ", kMaxHeaderBytes,
                         " bytes");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes.data()) + kHeaderLengthBytes;
  const std::string_view header_text(header_begin, header_size);
  // nlohmann parses any depth, but printing a value (the errors below) recurses once per level:
  // a 100 MB header of nested arrays would overflow the stack. Real headers nest 3 levels.
  if (absl::Status depth = tokenizer::CheckJsonDepth(header_text, tokenizer::kMaxJsonDepth);
      !depth.ok()) {
    return error.Invalid("header is ", depth.message());
  }
  Json header;
  try {
    header = Json::parse(header_text);
  } catch (const Json::exception& e) {
    return error.Invalid("header is not valid JSON: ", e.what());
  }
  if (!header.is_object()) {
    return error.Invalid("header must be a JSON object, got ", tokenizer::JsonKindPhrase(header));
  }

  SafetensorsFile result;
  result.file_ = std::move(file);
  result.data_ = bytes.subspan(kHeaderLengthBytes + header_size);
  // nlohmann's object is a std::map, so entries come out sorted by name.
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      absl::StatusOr<std::map<std::string, std::string>> metadata = ParseMetadata(*it, error);
      if (!metadata.ok()) return metadata.status();
      result.metadata_ = *std::move(metadata);
      continue;
    }
    absl::StatusOr<TensorEntry> entry = ParseEntry(it.key(), *it, result.data_.size(), error);
    if (!entry.ok()) return entry.status();
    result.entries_.push_back(*std::move(entry));
  }
  if (absl::Status status = CheckNoOverlap(result.entries_, error); !status.ok()) return status;
  return result;
}

const TensorEntry* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const TensorEntry& e, std::string_view n) { return e.name < n; });
  if (it == entries_.end() || it->name != name) return nullptr;
  return &*it;
}

std::span<const uint8_t> SafetensorsFile::Data(const TensorEntry& e) const {
  if (e.begin > e.end || e.end > data_.size()) {
    Fail(Cat("SafetensorsFile::Data: tensor '", e.name, "' is not inside ", name()));
  }
  return data_.subspan(e.begin, e.end - e.begin);
}

std::string SerializeSafetensors(std::span<const TensorToWrite> tensors,
                                 const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const TensorToWrite& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorToWrite* a, const TensorToWrite* b) { return a->name < b->name; });

  Json header = Json::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorToWrite& t = *sorted[i];
    if (t.name == kMetadataKey || (i > 0 && sorted[i - 1]->name == t.name)) {
      Fail(Cat("SerializeSafetensors: duplicate or reserved tensor name '", t.name, "'"));
    }
    uint64_t num_bytes = SafetensorsDtypeSize(t.dtype);
    for (int64_t dim : t.shape) {
      if (dim < 0) Fail(Cat("SerializeSafetensors: negative dim in '", t.name, "'"));
      num_bytes *= static_cast<uint64_t>(dim);
    }
    if (num_bytes != t.data.size()) {
      Fail(Cat("SerializeSafetensors: tensor '", t.name, "' has ", t.data.size(),
               " bytes, its dtype and shape need ", num_bytes));
    }
    header[t.name] = {{"dtype", std::string(SafetensorsDtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + num_bytes}}};
    offset += num_bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string out;
  out.reserve(kHeaderLengthBytes + header_text.size() + offset);
  const uint64_t header_size = header_text.size();
  out.append(reinterpret_cast<const char*>(&header_size), kHeaderLengthBytes);
  out += header_text;
  for (const TensorToWrite* t : sorted) {
    out.append(reinterpret_cast<const char*>(t->data.data()), t->data.size());
  }
  return out;
}

}  // namespace kvserve::model
