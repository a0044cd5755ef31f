// kvserve-generate: the generation demo. Loads a model folder (or the embedded default),
// generates from a prompt, prints the result on stdout and prefill/decode speed on stderr.
#include <ATen/Parallel.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/command_line.h"
#include "cache/cache_factory.h"
#include "cache/cache_spec.h"
#include "cache/kv_cache.h"
#include "cache/torch_compat.h"
#include "model/bart_model.h"
#include "model/device_check.h"
#include "model/embedded_model.h"
#include "model/generator.h"
#include "model/mamba_model.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace {

using kvserve::base::CommandLine;

std::vector<kvserve::base::FlagSpec> Flags() {
  return {
      {"model", "Hugging Face model folder", "the embedded tiny model"},
      {"prompt", "prompt text (tokenized with the model's tokenizer.json)", ""},
      {"prompt-ids", "prompt as comma-separated token ids instead of text", ""},
      {"decoder-prompt-ids",
       "encoder-decoder models (bart): the decoder's first ids, comma-separated (the prompt is "
       "the encoder input)",
       "decoder_start_token_id"},
      {"max-new-tokens", "tokens to generate", "32"},
      {"threads", "CPU threads for LibTorch", "all cores"},
      {"dtype", "float32 | bfloat16 | float16", "float32"},
      {"weight-dtype", kvserve::model::kWeightDtypeFlagHelp, "auto"},
      {"bf16-compute", kvserve::model::kBf16ComputeFlagHelp, "auto"},
      {"device", "cpu | cuda | cuda:N", "cpu"},
      {"do-sample", "sample instead of greedy decoding", "", true},
      {"temperature", "sampling temperature", "1.0"},
      {"top-k", "keep the k most likely tokens (0: off)", "50"},
      {"top-p", "nucleus sampling mass", "1.0"},
      {"min-p", "drop tokens below min-p times the top probability", "0"},
      {"repetition-penalty", "penalty for tokens already in the sequence", "1.0"},
      {"seed", "sampling seed: same seed, same tokens", "0"},
      {"ignore-eos", "keep generating past an end-of-sequence token", "", true},
      {"output", "text | ids | json", "text"},
      {"logits-out", "write the prompt's last-position logits, one per line, to this file", ""},
      {"cache-implementation",
       "dynamic | static | offloaded | offloaded_static | quantized (as the reference's "
       "generate())",
       "dynamic"},
      {"cache-config", "quantization config as JSON, e.g. {\"backend\": \"hqq\", \"nbits\": 8}",
       ""},
      {"max-cache-len", "slots of a static cache", "prompt + max-new-tokens - 1"},
      {"no-cache", "recompute the whole sequence every step (use_cache=False)", "", true},
  };
}

absl::StatusOr<at::ScalarType> ParseDtype(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16") return at::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype '", name, "' is not supported; use float32, bfloat16 or float16"));
}

absl::Status Run(const CommandLine& cl) {
  namespace m = kvserve::model;
  absl::StatusOr<int64_t> threads =
      cl.GetInt("threads", std::max(1u, std::thread::hardware_concurrency()));
  if (!threads.ok()) return threads.status();
  if (*threads < 1) return absl::InvalidArgumentError("--threads must be >= 1");
  kvserve::compat::SetNumThreads(static_cast<int>(*threads));

  m::TransformerOptions options;
  absl::StatusOr<at::ScalarType> dtype = ParseDtype(cl.GetString("dtype", "float32"));
  if (!dtype.ok()) return dtype.status();
  options.dtype = *dtype;
  absl::StatusOr<std::optional<at::ScalarType>> weight_dtype =
      m::ParseWeightDtype(cl.GetString("weight-dtype", "auto"));
  if (!weight_dtype.ok()) return weight_dtype.status();
  options.weight_dtype = *weight_dtype;
  absl::StatusOr<m::Bf16Compute> bf16_compute =
      m::ParseBf16Compute(cl.GetString("bf16-compute", "auto"));
  if (!bf16_compute.ok()) return bf16_compute.status();
  options.bf16_compute = *bf16_compute;
  try {
    options.device = c10::Device(cl.GetString("device", "cpu"));
  } catch (const c10::Error&) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device '", cl.GetString("device"), "' is not a device (cpu, cuda:0)"));
  }

  absl::StatusOr<kvserve::base::ModelSource> source =
      cl.Has("model") ? kvserve::base::ModelSource::FromDirectory(cl.GetString("model"))
                      : m::EmbeddedDefaultModel();
  if (!source.ok()) return source.status();
  absl::StatusOr<std::string> config_text = source->ReadText("config.json");
  if (!config_text.ok()) return config_text.status();
  const absl::StatusOr<std::string> model_type = m::ReadModelType(*config_text);
  std::unique_ptr<m::BartModel> bart;
  absl::StatusOr<std::unique_ptr<m::Model>> model = std::unique_ptr<m::Model>();
  if (model_type.ok() && *model_type == "bart") {
    absl::StatusOr<std::unique_ptr<m::BartModel>> loaded = m::BartModel::Load(*source, options);
    if (!loaded.ok()) return loaded.status();
    bart = *std::move(loaded);
  } else {
    model = m::LoadModel(*source, options);
    if (!model.ok()) return model.status();
  }
  const m::ModelInfo& info = bart != nullptr ? bart->info() : (*model)->info();

  std::unique_ptr<kvserve::tokenizer::Tokenizer> tokenizer;
  if (source->Has("tokenizer.json")) {
    absl::StatusOr<std::unique_ptr<kvserve::tokenizer::Tokenizer>> t =
        kvserve::tokenizer::Tokenizer::FromModelSource(*source);
    if (!t.ok()) return t.status();
    if (absl::Status fits = (*t)->CheckFitsModel(info.vocab_size); !fits.ok()) {
      return fits;
    }
    tokenizer = *std::move(t);
  }

  std::vector<int32_t> prompt;
  if (cl.Has("prompt-ids")) {
    absl::StatusOr<std::vector<int32_t>> ids = cl.GetIntList("prompt-ids");
    if (!ids.ok()) return ids.status();
    prompt = *std::move(ids);
  } else {
    if (tokenizer == nullptr) {
      return absl::FailedPreconditionError(
          "the model folder has no tokenizer.json: pass --prompt-ids instead of --prompt");
    }
    absl::StatusOr<std::vector<int32_t>> ids =
        tokenizer->Encode(cl.GetString("prompt", "Once upon a time"), /*add_special_tokens=*/true);
    if (!ids.ok()) return ids.status();
    prompt = *std::move(ids);
  }
  if (prompt.empty()) return absl::InvalidArgumentError("--prompt-ids: the prompt is empty");

  m::GenerateOptions gen;
  absl::StatusOr<int64_t> max_new = cl.GetInt("max-new-tokens", 32);
  absl::StatusOr<double> temperature = cl.GetDouble("temperature", 1.0);
  absl::StatusOr<int64_t> top_k = cl.GetInt("top-k", 50);
  absl::StatusOr<double> top_p = cl.GetDouble("top-p", 1.0);
  absl::StatusOr<double> min_p = cl.GetDouble("min-p", 0.0);
  absl::StatusOr<double> rep = cl.GetDouble("repetition-penalty", 1.0);
  absl::StatusOr<int64_t> seed = cl.GetInt("seed", 0);
  for (const absl::Status& s : {max_new.status(), temperature.status(), top_k.status(),
                                top_p.status(), min_p.status(), rep.status(), seed.status()}) {
    if (!s.ok()) return s;
  }
  gen.max_new_tokens = *max_new;
  gen.ignore_eos = cl.GetBool("ignore-eos");
  gen.sampling.do_sample = cl.GetBool("do-sample");
  gen.sampling.temperature = *temperature;
  gen.sampling.top_k = static_cast<int32_t>(*top_k);
  gen.sampling.top_p = *top_p;
  gen.sampling.min_p = *min_p;
  gen.sampling.repetition_penalty = *rep;
  gen.sampling.seed = static_cast<uint64_t>(*seed);
  const std::string output = cl.GetString("output", "text");
  if (output != "text" && output != "ids" && output != "json") {
    return absl::InvalidArgumentError("--output must be text, ids or json");
  }

  namespace c = kvserve::cache;
  c::QuantizationConfig quantization;
  if (cl.Has("cache-config")) {
    absl::StatusOr<c::QuantizationConfig> parsed =
        c::ParseQuantizationConfigJson(cl.GetString("cache-config"));
    if (!parsed.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("--cache-config: ", parsed.status().message()));
    quantization = *parsed;
  }
  std::optional<int64_t> max_cache_len;
  if (cl.Has("max-cache-len")) {
    absl::StatusOr<int64_t> len = cl.GetInt("max-cache-len", 0);
    if (!len.ok()) return len.status();
    max_cache_len = *len;
  }
  absl::StatusOr<c::CacheSpec> spec =
      c::CacheSpec::Parse(cl.GetString("cache-implementation", ""), quantization,
                          !cl.GetBool("no-cache"), max_cache_len);
  if (!spec.ok()) return spec.status();
  std::vector<int32_t> decoder_prompt;
  if (cl.Has("decoder-prompt-ids")) {
    if (bart == nullptr) {
      return absl::InvalidArgumentError(
          "--decoder-prompt-ids is for encoder-decoder models (model_type bart) only");
    }
    absl::StatusOr<std::vector<int32_t>> ids = cl.GetIntList("decoder-prompt-ids");
    if (!ids.ok()) return ids.status();
    decoder_prompt = *std::move(ids);
  }
  // The self-attention cache holds the decoder's tokens: the decoder prompt (or its start
  // token) and the generated ones.
  const int64_t cached_prompt =
      bart != nullptr ? std::max<int64_t>(1, static_cast<int64_t>(decoder_prompt.size()))
                      : static_cast<int64_t>(prompt.size());
  if (spec->is_static()) {
    spec->max_cache_len =
        c::StaticCacheLength(cached_prompt + gen.max_new_tokens, spec->max_cache_len);
  }
  absl::StatusOr<m::GenerateResult> result;
  int64_t kv_bytes = 0;
  if (bart != nullptr) {
    absl::StatusOr<std::unique_ptr<c::EncoderDecoderCache>> cache =
        c::MakeEncoderDecoderCache(*spec, info.layer_specs, static_cast<int64_t>(prompt.size()));
    if (!cache.ok()) return cache.status();
    result = m::GenerateBart(*bart, prompt, decoder_prompt, cache->get(), gen);
    if (*cache) kv_bytes = (*cache)->Memory().total();
  } else {
    absl::StatusOr<std::unique_ptr<c::KvCache>> cache = c::MakeCache(*spec, info.layer_specs);
    if (!cache.ok()) return cache.status();
    result = m::Generate(**model, prompt, cache->get(), gen);
    if (*cache) kv_bytes = (*cache)->Memory().total();
  }
  if (!result.ok()) return result.status();

  if (cl.Has("logits-out")) {
    std::ofstream out(cl.GetString("logits-out"));
    const at::Tensor logits = result->prompt_logits.contiguous();
    const float* data = logits.data_ptr<float>();
    for (int64_t i = 0; i < logits.numel(); ++i) out << absl::StrFormat("%.9g\n", data[i]);
    if (!out) return absl::InternalError("cannot write --logits-out " + cl.GetString("logits-out"));
  }

  const std::string text = tokenizer ? tokenizer->Decode(result->tokens, true) : "";
  const double prefill_tps = result->prompt_tokens / (result->prefill_ms / 1000.0);
  const double decode_tps =
      result->decode_steps > 0 ? result->decode_steps / (result->decode_ms / 1000.0) : 0.0;
  if (output == "json") {
    nlohmann::json j;
    j["text"] = text;
    j["token_ids"] = result->tokens;
    j["finish_reason"] = result->finish_reason;
    j["prompt_tokens"] = result->prompt_tokens;
    j["cache_implementation"] = std::string(c::CacheImplementationName(spec->implementation));
    j["kv_bytes"] = kv_bytes;
    j["timings"] = {{"prefill_ms", result->prefill_ms},
                    {"decode_ms", result->decode_ms},
                    {"prefill_tokens_per_s", prefill_tps},
                    {"decode_tokens_per_s", decode_tps}};
    std::cout << j.dump() << "\n";
  } else if (output == "ids") {
    std::string line;
    for (size_t i = 0; i < result->tokens.size(); ++i) {
      absl::StrAppend(&line, i ? "," : "", result->tokens[i]);
    }
    std::cout << line << "\n";
  } else {
    std::cout << text << "\n";
  }
  std::cerr << absl::StrFormat(
      "prefill: %d tokens in %.1f ms (%.1f tokens/s); decode: %d tokens in %.1f ms (%.1f "
      "tokens/s); threads %d\n",
      result->prompt_tokens, result->prefill_ms, prefill_tps, result->decode_steps,
      result->decode_ms, decode_tps, *threads);
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(argc, argv, Flags());
  if (!cl.ok()) {
    std::cerr << "kvserve-generate: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->help_requested()) {
    std::cout << cl->Usage("kvserve-generate", "Generates text with a causal language model.");
    return 0;
  }
  if (absl::Status device = kvserve::model::CheckDeviceUsable(cl->GetString("device", "cpu"));
      !device.ok()) {
    std::cerr << "kvserve-generate: " << device.message() << "\n";
    return 2;
  }
  absl::Status status = Run(*cl);
  if (!status.ok()) {
    std::cerr << "kvserve-generate: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
