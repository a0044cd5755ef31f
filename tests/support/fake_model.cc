// FakeModel: predictable logits and realistic cache growth without weights.
#include "tests/support/fake_model.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cache/kv_cache.h"

namespace kvserve::model::testing {

absl::StatusOr<std::unique_ptr<FakeModel>> FakeModel::Create(FakeModelOptions options) {
  if (options.vocab_size < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab_size must be >= 2, got ", options.vocab_size));
  }
  if (options.num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_layers must be >= 1, got ", options.num_layers));
  }
  if (options.num_kv_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_kv_heads must be >= 1, got ", options.num_kv_heads));
  }
  if (options.head_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be >= 1, got ", options.head_dim));
  }
  if (options.max_position_embeddings < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_position_embeddings must be >= 1, got ",
                                                   options.max_position_embeddings));
  }
  if (options.layer_specs.empty()) {
    options.layer_specs.assign(options.num_layers, cache::LayerSpec{});
  }
  if (static_cast<int64_t>(options.layer_specs.size()) != options.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("layer_specs has ", options.layer_specs.size(),
                                                   " entries for ", options.num_layers, " layers"));
  }
  for (size_t i = 0; i < options.layer_specs.size(); ++i) {
    absl::Status status = cache::ValidateLayerSpec(options.layer_specs[i], static_cast<int>(i));
    if (!status.ok()) return status;
  }
  for (int32_t id : options.eos_token_ids) {
    if (id < 0 || id >= options.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("eos_token_ids: ", id, " is outside the vocabulary"));
    }
  }
  if (options.bos_token_id.has_value() &&
      (*options.bos_token_id < 0 || *options.bos_token_id >= options.vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bos_token_id: ", *options.bos_token_id, " is outside the vocabulary"));
  }
  if (!at::isFloatingType(options.dtype)) {
    return absl::InvalidArgumentError("dtype must be a floating-point type");
  }

  model::ModelInfo info;
  info.model_type = options.model_type;
  info.vocab_size = options.vocab_size;
  info.num_layers = options.num_layers;
  info.num_kv_heads = options.num_kv_heads;
  info.head_dim = options.head_dim;
  info.max_position_embeddings = options.max_position_embeddings;
  info.layer_specs = options.layer_specs;
  info.eos_token_ids = options.eos_token_ids;
  info.bos_token_id = options.bos_token_id;
  info.dtype = options.dtype;
  info.device = options.device;
  return std::unique_ptr<FakeModel>(new FakeModel(std::move(options), std::move(info)));
}

FakeModel::FakeModel(FakeModelOptions options, model::ModelInfo info)
    : options_(std::move(options)), info_(std::move(info)) {}

int32_t FakeModel::DefaultNextToken(int32_t last_token, int64_t position, int64_t vocab_size) {
  return static_cast<int32_t>((static_cast<int64_t>(last_token) + position + 1) % vocab_size);
}

int32_t FakeModel::NextToken(int32_t last_token, int64_t position) const {
  if (options_.next_token) return options_.next_token(last_token, position);
  return DefaultNextToken(last_token, position, options_.vocab_size);
}

absl::StatusOr<model::ForwardOutput> FakeModel::Forward(const model::Batch& batch) {
  const size_t num_seqs = batch.sequences.size();
  const int64_t vocab = info_.vocab_size;

  // Check every sequence and work out its predictions before any cache changes.
  std::vector<int64_t> starts(num_seqs, 0);
  std::vector<std::vector<int32_t>> predicted(num_seqs);  // per logits row
  for (size_t s = 0; s < num_seqs; ++s) {
    const model::SequenceInput& seq = batch.sequences[s];
    if (seq.token_ids.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " has no tokens to run"));
    }
    if (seq.rows != 1) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " has ", seq.rows,
                                                     " rows; FakeModel runs one per sequence"));
    }
    if (seq.cache != nullptr && seq.cache->num_layers() != info_.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, "'s cache has ",
                                                     seq.cache->num_layers(), " layers, the model ",
                                                     info_.num_layers));
    }
    for (int32_t id : seq.token_ids) {
      if (id < 0 || id >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
      }
    }
    starts[s] = seq.cache != nullptr ? seq.cache->SeqLength() : 0;
    const int64_t n = static_cast<int64_t>(seq.token_ids.size());
    for (int64_t t = seq.all_logits ? 0 : n - 1; t < n; ++t) {
      const int32_t next = NextToken(seq.token_ids[t], starts[s] + t);
      if (next < 0 || next >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "next_token rule returned ", next, ", outside the vocabulary [0, ", vocab, ")"));
      }
      predicted[s].push_back(next);
    }
  }

  ++num_forward_calls_;
  model::ForwardOutput output;
  output.logits.reserve(num_seqs);
  const at::TensorOptions host_float = at::TensorOptions().dtype(at::kFloat);
  for (size_t s = 0; s < num_seqs; ++s) {
    const model::SequenceInput& seq = batch.sequences[s];
    const int64_t n = static_cast<int64_t>(seq.token_ids.size());
    num_tokens_run_ += n;
    if (seq.cache != nullptr) {
      std::vector<float> ids(seq.token_ids.begin(), seq.token_ids.end());
      std::vector<float> positions(n);
      for (int64_t t = 0; t < n; ++t) positions[t] = static_cast<float>(starts[s] + t);
      const std::vector<int64_t> shape = {1, info_.num_kv_heads, n, info_.head_dim};
      const auto broadcast = [&](std::vector<float>& row) {
        // A copy, so that the cache never aliases `row`.
        return at::from_blob(row.data(), {1, 1, n, 1}, host_float)
            .to(info_.device, info_.dtype, /*non_blocking=*/false, /*copy=*/true)
            .expand(shape)
            .contiguous();
      };
      const at::Tensor keys = broadcast(ids);          // [1, kv_heads, n, head_dim]
      const at::Tensor values = broadcast(positions);  // [1, kv_heads, n, head_dim]
      for (int64_t layer = 0; layer < info_.num_layers; ++layer) {
        absl::StatusOr<cache::LayerView> updated =
            seq.cache->Update(static_cast<int>(layer), keys, values);
        if (!updated.ok()) {
          return absl::Status(updated.status().code(),
                              absl::StrCat("sequence ", s, ", layer ", layer, ": ",
                                           std::string(updated.status().message())));
        }
      }
    }
    const int64_t rows = static_cast<int64_t>(predicted[s].size());
    at::Tensor logits = at::zeros({rows, vocab}, host_float);  // [rows, vocab]
    float* data = logits.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) data[r * vocab + predicted[s][r]] = kPeakLogit;
    output.logits.push_back(seq.all_logits ? logits : logits.select(0, 0));
  }
  return output;
}

}  // namespace kvserve::model::testing
