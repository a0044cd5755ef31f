// The BPE model of tokenizer.json: vocabulary, ranked merges, byte fallback, unknown tokens.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace kvserve::tokenizer {

class BpeModel {
 public:
  // Vocabulary ids are in [0, kMaxVocabId]: the id -> token table is dense.
  static constexpr int32_t kMaxVocabId = (1 << 22) - 1;

  // Builds the model from tokenizer.json's "model" object (type BPE), the value at `path`
  // ("model"). InvalidArgument naming the JSON path for another model type, dropout, a field
  // of the wrong type, a vocab id outside [0, kMaxVocabId], or a merge whose parts are not in
  // the vocab.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& config,
                                                            std::string_view path);

  // Appends the ids of one pre-tokenized piece to `ids`. Thread-safe.
  void Encode(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string of `id`, or null when the vocabulary has no such id.
  const std::string* IdToToken(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> unk_id() const { return unk_id_; }

 private:
  BpeModel() = default;
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  using WordCache = absl::flat_hash_map<std::string, std::vector<int32_t>>;
  static constexpr size_t kMaxCachedWordBytes = 64;
  static constexpr size_t kMaxCachedWords = 1 << 16;  // per thread and model; then cleared
  static constexpr size_t kMaxCachedModels = 8;       // per thread; then all cleared
  // Encode without the per-thread word cache.
  void EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const;
  // Appends the initial symbols of `word` (one per character, or byte-fallback/unk ids).
  void InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const;

  uint64_t instance_id_ = 0;  // unique per model, keys the per-thread word caches
  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  std::array<int32_t, 256> byte_fallback_ids_{};  // id of "<0xXX>", -1 when absent
};

}  // namespace kvserve::tokenizer
