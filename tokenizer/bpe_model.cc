// The BPE model of tokenizer.json: vocabulary, ranked merges, byte fallback, unknown tokens.
#include "tokenizer/bpe_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

// "<0xAB>", the byte-fallback token of byte 0xAB.
std::string ByteTokenName(int b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string("<0x") + kHex[b >> 4] + kHex[b & 15] + ">";
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& config,
                                                             std::string_view path) {
  if (absl::Status s = ExpectJsonObject(config, path); !s.ok()) return s;
  auto type = GetOptionalString(config, "type", path, "BPE");
  if (!type.ok()) return type.status();
  if (*type != "BPE") {
    return absl::InvalidArgumentError(
        absl::StrCat(JsonMemberPath(path, "type"), ": unsupported model type '", *type, "'"));
  }
  auto dropout = GetOptionalNumber(config, "dropout", path);
  if (!dropout.ok()) return dropout.status();
  if (dropout->has_value() && **dropout != 0.0) {
    return absl::InvalidArgumentError(absl::StrCat(JsonMemberPath(path, "dropout"),
                                                   ": unsupported BPE option (got ", **dropout,
                                                   "; only 0 or null is supported)"));
  }
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  static std::atomic<uint64_t> next_instance_id{1};
  model->instance_id_ = next_instance_id.fetch_add(1);
  auto vocab = GetObject(config, "vocab", path);
  if (!vocab.ok()) return vocab.status();
  const std::string vocab_path = JsonMemberPath(path, "vocab");
  model->vocab_.reserve((*vocab)->size());
  int32_t max_id = -1;
  for (const auto& [token, id] : (*vocab)->items()) {
    // The token is quoted: it may hold dots, brackets or spaces.
    auto checked = JsonToInt(id, absl::StrCat(vocab_path, "[", nlohmann::json(token).dump(), "]"),
                             0, kMaxVocabId);
    if (!checked.ok()) return checked.status();
    const auto i = static_cast<int32_t>(*checked);
    model->vocab_[token] = i;
    max_id = std::max(max_id, i);
  }
  model->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  model->has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : model->vocab_) {
    model->id_to_token_[static_cast<size_t>(id)] = token;
    model->has_id_[static_cast<size_t>(id)] = true;
  }

  auto prefix = GetOptionalString(config, "continuing_subword_prefix", path, "");
  if (!prefix.ok()) return prefix.status();
  model->continuing_subword_prefix_ = *std::move(prefix);
  auto suffix = GetOptionalString(config, "end_of_word_suffix", path, "");
  if (!suffix.ok()) return suffix.status();
  model->end_of_word_suffix_ = *std::move(suffix);
  for (auto [key, field] : {std::pair{"fuse_unk", &model->fuse_unk_},
                            std::pair{"byte_fallback", &model->byte_fallback_},
                            std::pair{"ignore_merges", &model->ignore_merges_}}) {
    auto value = GetBool(config, key, path, false);
    if (!value.ok()) return value.status();
    *field = *value;
  }
  auto unk = GetOptionalString(config, "unk_token", path, "");
  if (!unk.ok()) return unk.status();
  if (!unk->empty()) {
    auto it = model->vocab_.find(*unk);
    if (it == model->vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(JsonMemberPath(path, "unk_token"), ": '", *unk, "' is not in the vocab"));
    }
    model->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = model->vocab_.find(ByteTokenName(b));
    model->byte_fallback_ids_[b] = it == model->vocab_.end() ? -1 : it->second;
  }

  auto merges = GetArray(config, "merges", path);
  if (!merges.ok()) return merges.status();
  const std::string merges_path = JsonMemberPath(path, "merges");
  model->merges_.reserve((*merges)->size());
  const size_t prefix_len = model->continuing_subword_prefix_.size();
  int32_t rank = 0;
  std::string merged;
  for (const auto& merge : **merges) {
    const std::string merge_path = JsonElementPath(merges_path, static_cast<size_t>(rank));
    std::string_view left, right;
    if (merge.is_string()) {
      const std::string& s = merge.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(merge_path, ": merge '", s, "' is not two tokens"));
      }
      left = std::string_view(s).substr(0, space);
      right = std::string_view(s).substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get_ref<const std::string&>();
      right = merge[1].get_ref<const std::string&>();
    } else {
      return JsonTypeError(merge_path, "a string \"left right\" or a pair of strings", merge);
    }
    auto a = model->vocab_.find(AsAbsl(left));
    auto b = model->vocab_.find(AsAbsl(right));
    merged.assign(left);
    merged.append(prefix_len > 0 && right.starts_with(model->continuing_subword_prefix_)
                      ? right.substr(prefix_len)
                      : right);
    auto c = model->vocab_.find(merged);
    if (a == model->vocab_.end() || b == model->vocab_.end() || c == model->vocab_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(merge_path, ": merge '", AsAbsl(left), " ",
                                                     AsAbsl(right),
                                                     "' uses a token missing from the vocab"));
    }
    model->merges_.try_emplace(PairKey(a->second, b->second), Merge{rank, c->second});
    ++rank;
  }
  return model;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(AsAbsl(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= size() || !has_id_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<int32_t>* symbols) const {
  std::string scratch;
  bool previous_unk = false;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    pos += static_cast<size_t>(Utf8SequenceLength(static_cast<unsigned char>(word[pos])));
    if (pos > word.size()) pos = word.size();
    std::string_view ch = word.substr(begin, pos - begin);
    const bool decorate = (begin > 0 && !continuing_subword_prefix_.empty()) ||
                          (pos == word.size() && !end_of_word_suffix_.empty());
    if (decorate) {
      scratch.clear();
      if (begin > 0) scratch.append(continuing_subword_prefix_);
      scratch.append(ch);
      if (pos == word.size()) scratch.append(end_of_word_suffix_);
      ch = scratch;
    }
    if (auto it = vocab_.find(AsAbsl(ch)); it != vocab_.end()) {
      symbols->push_back(it->second);
      previous_unk = false;
      continue;
    }
    if (byte_fallback_) {
      const std::string_view raw = word.substr(begin, pos - begin);
      bool all = true;
      for (unsigned char c : raw) all = all && byte_fallback_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : raw) symbols->push_back(byte_fallback_ids_[c]);
        previous_unk = false;
        continue;
      }
    }
    if (unk_id_.has_value()) {
      if (!(fuse_unk_ && previous_unk)) symbols->push_back(*unk_id_);
      previous_unk = true;
    }
  }
}

void BpeModel::Encode(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(AsAbsl(word)); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  // Words repeat, so each thread caches the ids of short words per model (no locking).
  thread_local absl::flat_hash_map<uint64_t, WordCache> caches;
  if (word.size() > kMaxCachedWordBytes) {
    EncodeUncached(word, ids);
    return;
  }
  if (caches.size() > kMaxCachedModels && !caches.contains(instance_id_)) caches.clear();
  WordCache& cache = caches[instance_id_];
  if (auto it = cache.find(AsAbsl(word)); it != cache.end()) {
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t begin = ids->size();
  EncodeUncached(word, ids);
  if (cache.size() >= kMaxCachedWords) cache.clear();
  cache.emplace(
      std::string(word),
      std::vector<int32_t>(ids->begin() + static_cast<std::ptrdiff_t>(begin), ids->end()));
}

void BpeModel::EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const {
  thread_local std::vector<int32_t> symbols;
  thread_local std::vector<int32_t> prev, next;
  symbols.clear();
  InitialSymbols(word, &symbols);
  const int n = static_cast<int>(symbols.size());
  if (n <= 1) {
    ids->insert(ids->end(), symbols.begin(), symbols.end());
    return;
  }
  prev.resize(static_cast<size_t>(n));
  next.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  // (rank, left position, expected new id); the lowest rank merges first, leftmost on ties.
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Candidate> heap_storage;
  heap_storage.clear();
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(
      std::greater<>(), std::move(heap_storage));
  auto push_pair = [&](int left) {
    const int right = next[static_cast<size_t>(left)];
    if (right < 0) return;
    auto it = merges_.find(
        PairKey(symbols[static_cast<size_t>(left)], symbols[static_cast<size_t>(right)]));
    if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const auto pos = static_cast<size_t>(top.pos);
    if (symbols[pos] < 0) continue;  // merged away
    const int right = next[pos];
    if (right < 0) continue;
    auto it = merges_.find(PairKey(symbols[pos], symbols[static_cast<size_t>(right)]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale
    symbols[pos] = top.new_id;
    symbols[static_cast<size_t>(right)] = -1;
    const int after = next[static_cast<size_t>(right)];
    next[pos] = after;
    if (after >= 0) prev[static_cast<size_t>(after)] = top.pos;
    if (prev[pos] >= 0) push_pair(prev[pos]);
    push_pair(top.pos);
  }
  for (int i = 0; i >= 0; i = next[static_cast<size_t>(i)]) {
    ids->push_back(symbols[static_cast<size_t>(i)]);
  }
}

}  // namespace kvserve::tokenizer
