// A driver for kvserve's fuzz targets without libFuzzer: built by gcc in the main tree and run by
// `make test` (fuzz/replay.cmake). It feeds LLVMFuzzerTestOneInput every seed of the corpus
// directories and files it is given, then a fixed number of mutants of each seed (byte flips,
// insertions, deletions, repeated and spliced chunks, dictionary words), from a fixed seed so a
// run is reproducible. A crash, a broken KVSERVE_CHECK or a harness assertion aborts the process
// (the test fails); the input that did it is written to the --artifact file first.
//
// Coverage-guided fuzzing with the sanitizers is scripts/fuzz.sh (clang and libFuzzer); this is
// its regression and smoke run, cheap enough for every build.
//
// usage: kvserve_fuzz_replay_TARGET [--mutations N] [--seed S] [--dict FILE] [--artifact FILE]
//                                   CORPUS_DIR_OR_FILE...
#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

using Bytes = std::string;

// The input being run, for the signal handler (written with write(2) only).
const Bytes* g_current = nullptr;
std::string g_artifact = "fuzz-replay-crash";

void OnFatalSignal(int signal_number) {
  if (g_current != nullptr) {
    int fd = ::open(g_artifact.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t ignored = ::write(fd, g_current->data(), g_current->size());
      (void)ignored;
      ::close(fd);
    }
    static const char kMessage[] =
        "fuzz replay: fatal signal; the input is in the --artifact file\n";
    ssize_t ignored = ::write(2, kMessage, sizeof(kMessage) - 1);
    (void)ignored;
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

Bytes ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// libFuzzer's dictionary format: one quoted string per line, optionally `name=` before it, with
// \\, \" and \xNN escapes; '#' starts a comment line.
std::vector<Bytes> ReadDictionary(const std::string& path) {
  std::vector<Bytes> words;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t open = line.find('"');
    size_t close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
    Bytes word;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] != '\\' || i + 1 >= close) {
        word.push_back(line[i]);
      } else if (line[i + 1] == 'x' && i + 3 < close) {
        word.push_back(static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
        i += 3;
      } else {
        word.push_back(line[i + 1]);
        ++i;
      }
    }
    if (!word.empty()) words.push_back(word);
  }
  return words;
}

class Mutator {
 public:
  Mutator(uint64_t seed, std::vector<Bytes> dictionary, const std::vector<Bytes>* seeds)
      : rng_(seed), dictionary_(std::move(dictionary)), seeds_(seeds) {}

  // One to four edits of `input`.
  Bytes Mutate(Bytes input) {
    int edits = 1 + static_cast<int>(Below(4));
    for (int i = 0; i < edits; ++i) Edit(input);
    return input;
  }

 private:
  size_t Below(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }

  void Edit(Bytes& data) {
    size_t at = Below(data.size() + 1);
    switch (Below(7)) {
      case 0:  // flip a bit
        if (!data.empty()) data[Below(data.size())] ^= static_cast<char>(1u << Below(8));
        break;
      case 1:  // an interesting byte
      {
        static const char kBytes[] = {'\0', '\x7f', '\x80', '\xff', '"',  '{', '}',
                                      '[',  ']',    '\\',   '%',    '\n', '-', '9'};
        data.insert(at, 1, kBytes[Below(sizeof(kBytes))]);
        break;
      }
      case 2:  // delete a chunk
        if (!data.empty()) {
          size_t from = Below(data.size());
          data.erase(from, 1 + Below(std::min<size_t>(16, data.size() - from)));
        }
        break;
      case 3:  // repeat a chunk
        if (!data.empty() && data.size() < (1u << 20)) {
          size_t from = Below(data.size());
          Bytes chunk = data.substr(from, 1 + Below(32));
          data.insert(at, chunk);
        }
        break;
      case 4:  // a dictionary word
        if (!dictionary_.empty()) data.insert(at, dictionary_[Below(dictionary_.size())]);
        break;
      case 5:  // splice another seed's tail
        if (!seeds_->empty()) {
          const Bytes& other = (*seeds_)[Below(seeds_->size())];
          data = data.substr(0, at) + other.substr(Below(other.size() + 1));
        }
        break;
      default:  // truncate
        data.resize(at);
        break;
    }
  }

  std::mt19937_64 rng_;
  std::vector<Bytes> dictionary_;
  const std::vector<Bytes>* seeds_;
};

int Usage(const char* program, const std::string& why) {
  std::cerr << program << ": " << why << "\nusage: " << program
            << " [--mutations N] [--seed S] [--dict FILE] [--artifact FILE] CORPUS...\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 200;
  uint64_t seed = 1;
  std::string dictionary_path;
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool has_value = i + 1 < argc;
    if (arg == "--mutations" && has_value) {
      mutations = std::strtol(argv[++i], nullptr, 10);
    } else if (arg == "--seed" && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--dict" && has_value) {
      dictionary_path = argv[++i];
    } else if (arg == "--artifact" && has_value) {
      g_artifact = argv[++i];
    } else if (arg.rfind("--", 0) == 0) {
      return Usage(argv[0], "unknown or incomplete option '" + arg + "'");
    } else {
      inputs.emplace_back(arg);
    }
  }
  if (inputs.empty()) return Usage(argv[0], "no corpus given");
  if (mutations < 0) return Usage(argv[0], "--mutations must be >= 0");

  std::vector<Bytes> seeds;
  for (const auto& input : inputs) {
    std::error_code error;
    if (std::filesystem::is_directory(input, error)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(input)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());  // the same order on every machine
      for (const auto& file : files) seeds.push_back(ReadFile(file));
    } else if (std::filesystem::is_regular_file(input, error)) {
      seeds.push_back(ReadFile(input));
    } else {
      return Usage(argv[0], "no such file or directory: " + input.string());
    }
  }
  if (seeds.empty()) return Usage(argv[0], "the corpus holds no files");

  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  for (int signal_number : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    std::signal(signal_number, OnFatalSignal);
  }

  auto run = [](const Bytes& data) {
    g_current = &data;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    g_current = nullptr;
  };
  long executions = 0;
  for (const Bytes& data : seeds) {
    run(data);
    ++executions;
  }
  Mutator mutator(seed,
                  dictionary_path.empty() ? std::vector<Bytes>{} : ReadDictionary(dictionary_path),
                  &seeds);
  for (const Bytes& data : seeds) {
    for (long i = 0; i < mutations; ++i) {
      run(mutator.Mutate(data));
      ++executions;
    }
  }
  std::cout << "fuzz replay: " << seeds.size() << " seeds, " << executions << " executions (seed "
            << seed << "), no crash\n";
  return 0;
}
