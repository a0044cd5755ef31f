// kvserve-make-model: writes a seeded tiny Hugging Face model folder for tests and benchmarks.
#include <cstdio>
#include <iostream>

#include "base/command_line.h"
#include "model/tiny_model_maker.h"

int main(int argc, char** argv) {
  using kvserve::base::CommandLine;
  absl::StatusOr<CommandLine> cl = CommandLine::Parse(
      argc, argv,
      {{"arch", "llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3 | mamba | bart", "llama"},
       {"preset", "tiny | small | bench-small | bench-medium", "tiny"},
       {"seed", "weights seed; the same seed writes the same bytes", "0"},
       {"weights-dtype", "f32 | bf16 | f16: the dtype stored in model.safetensors", "f32"},
       {"out", "output folder (created if needed)", ""}});
  if (!cl.ok()) {
    std::cerr << "kvserve-make-model: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->help_requested()) {
    std::cout << cl->Usage("kvserve-make-model",
                           "Writes config.json, model.safetensors, tokenizer.json and "
                           "tokenizer_config.json of a seeded random model.");
    return 0;
  }
  kvserve::model::TinyModelOptions options;
  options.arch = cl->GetString("arch", "llama");
  options.preset = cl->GetString("preset", "tiny");
  absl::StatusOr<int64_t> seed = cl->GetInt("seed", 0);
  const std::string dtype = cl->GetString("weights-dtype", "f32");
  const std::string out = cl->GetString("out");
  absl::Status status = seed.status();
  if (status.ok() && out.empty()) status = absl::InvalidArgumentError("--out is required");
  if (status.ok()) {
    options.seed = static_cast<uint64_t>(*seed);
    if (dtype == "f32") {
      options.weights_dtype = kvserve::model::WeightsDtype::kF32;
    } else if (dtype == "bf16") {
      options.weights_dtype = kvserve::model::WeightsDtype::kBF16;
    } else if (dtype == "f16") {
      options.weights_dtype = kvserve::model::WeightsDtype::kF16;
    } else {
      status = absl::InvalidArgumentError("--weights-dtype must be f32, bf16 or f16");
    }
  }
  if (status.ok()) {
    absl::StatusOr<std::map<std::string, std::string>> files =
        kvserve::model::MakeTinyModel(options);
    status = files.ok() ? kvserve::model::WriteModelFiles(*files, out) : files.status();
  }
  if (!status.ok()) {
    std::cerr << "kvserve-make-model: " << status.message() << "\n";
    return 1;
  }
  std::cerr << "wrote " << options.arch << "/" << options.preset << " (seed " << options.seed
            << ") to " << out << "\n";
  return 0;
}
