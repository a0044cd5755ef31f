// tokenizer.json decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
#include "tokenizer/tokenizer_decoder.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {
namespace {

class ByteLevelDecoder : public TokenDecoder {
 public:
  explicit ByteLevelDecoder(const absl::flat_hash_set<std::string>* added_tokens)
      : added_tokens_(added_tokens) {}

  void DecodeChain(std::vector<std::string>* tokens) const override {
    const auto& char_to_byte = GetByteLevelTables().char_to_byte;
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (!bytes.empty()) out.push_back(Utf8Lossy(bytes));
      bytes.clear();
    };
    for (const std::string& token : *tokens) {
      if (added_tokens_ != nullptr && added_tokens_->contains(token)) {
        flush();
        out.push_back(token);
        continue;
      }
      const size_t mark = bytes.size();
      bool mapped = true;
      size_t pos = 0;
      while (pos < token.size()) {
        const char32_t cp = DecodeUtf8(token, &pos);
        if (cp >= 512 || char_to_byte[cp] < 0) {
          mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(char_to_byte[cp]));
      }
      if (!mapped) {
        bytes.resize(mark);
        bytes.append(token);
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  const absl::flat_hash_set<std::string>* added_tokens_;
};

class MetaspaceDecoder : public TokenDecoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      std::string out;
      out.reserve(token.size());
      for (size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(token[pos++]);
        }
      }
      if (i == 0 && strip_first_ && !out.empty() && out.front() == ' ') out.erase(0, 1);
      token = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// Parses "<0xAB>" into its byte value, or -1.
int ParseByteToken(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = token[static_cast<size_t>(i)];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

class ByteFallbackDecoder : public TokenDecoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      // Lossy like @huggingface/tokenizers (one U+FFFD per maximal invalid subpart). The Rust
      // crate instead turns a whole invalid run into one U+FFFD per byte, which would let a
      // later byte rewrite text already streamed; runs from encoding are always valid.
      out.push_back(Utf8Lossy(bytes));
      bytes.clear();
    };
    for (std::string& token : *tokens) {
      const int byte = ParseByteToken(token);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    *tokens = std::move(out);
  }
};

class FuseDecoder : public TokenDecoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string fused;
    for (const auto& t : *tokens) fused.append(t);
    tokens->assign(1, std::move(fused));
  }
};

class StripDecoder : public TokenDecoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      for (int i = 0; i < start_ && token.starts_with(content_); ++i) {
        token.erase(0, content_.size());
      }
      for (int i = 0; i < stop_ && token.ends_with(content_); ++i) {
        token.resize(token.size() - content_.size());
      }
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class ReplaceDecoder : public TokenDecoder {
 public:
  explicit ReplaceDecoder(StringReplacer replacer) : replacer_(std::move(replacer)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) token = replacer_.Apply(token);
  }

 private:
  StringReplacer replacer_;
};

class SequenceDecoder : public TokenDecoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<TokenDecoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<TokenDecoder>> steps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TokenDecoder>> CreateTokenDecoder(
    const nlohmann::json& config, std::string_view path,
    const absl::flat_hash_set<std::string>* added_tokens) {
  if (absl::Status s = ExpectJsonObject(config, path); !s.ok()) return s;
  auto type = GetString(config, "type", path);
  if (!type.ok()) return type.status();
  if (*type == "ByteLevel") return std::make_unique<ByteLevelDecoder>(added_tokens);
  if (*type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (*type == "Fuse") return std::make_unique<FuseDecoder>();
  if (*type == "Metaspace") {
    auto strip_first = GetBool(config, "add_prefix_space", path, true);
    if (!strip_first.ok()) return strip_first.status();
    if (config.contains("prepend_scheme") && !config["prepend_scheme"].is_null()) {
      auto scheme = GetString(config, "prepend_scheme", path);
      if (!scheme.ok()) return scheme.status();
      strip_first = *scheme != "never";
    }
    auto replacement = GetOptionalString(config, "replacement", path, "\xE2\x96\x81");
    if (!replacement.ok()) return replacement.status();
    if (replacement->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(JsonMemberPath(path, "replacement"), ": must not be empty"));
    }
    return std::make_unique<MetaspaceDecoder>(*std::move(replacement), *strip_first);
  }
  if (*type == "Strip") {
    auto content = GetString(config, "content", path);
    if (!content.ok()) return content.status();
    if (content->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(JsonMemberPath(path, "content"), ": must not be empty"));
    }
    // Counts of strip repetitions; any count past a token's length strips it all.
    constexpr int64_t kMaxStrip = std::numeric_limits<int32_t>::max();
    auto start = GetInt(config, "start", path, 0, 0, kMaxStrip);
    if (!start.ok()) return start.status();
    auto stop = GetInt(config, "stop", path, 0, 0, kMaxStrip);
    if (!stop.ok()) return stop.status();
    return std::make_unique<StripDecoder>(*std::move(content), static_cast<int>(*start),
                                          static_cast<int>(*stop));
  }
  if (*type == "Replace") {
    auto replacer = StringReplacer::FromJson(config, path);
    if (!replacer.ok()) return replacer.status();
    return std::make_unique<ReplaceDecoder>(*std::move(replacer));
  }
  if (*type == "Sequence") {
    auto listed = GetArray(config, "decoders", path);
    if (!listed.ok()) return listed.status();
    const std::string steps_path = JsonMemberPath(path, "decoders");
    std::vector<std::unique_ptr<TokenDecoder>> steps;
    for (size_t i = 0; i < (*listed)->size(); ++i) {
      auto decoder =
          CreateTokenDecoder((**listed)[i], JsonElementPath(steps_path, i), added_tokens);
      if (!decoder.ok()) return decoder.status();
      steps.push_back(*std::move(decoder));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(JsonMemberPath(path, "type"), ": unsupported decoder type '", *type, "'"));
}

}  // namespace kvserve::tokenizer
