// A small GPT-2-style byte-level BPE tokenizer (tokenizer.json + tokenizer_config.json) for the
// tiny models that tests and the demo generate.
#pragma once

#include <cstdint>
#include <string>

namespace kvserve::tokenizer {

// Ids 0..255 are the 256 byte symbols; <s> and </s> are added special tokens.
inline constexpr int32_t kTinyBosId = 256, kTinyEosId = 257;

// tokenizer.json text: ByteLevel pre-tokenizer (GPT-2 regex) and decoder, a BPE model whose
// ids 0..255 are the bytes, merges of common English pairs with ids 258.. (only as many as fit
// below `vocab_size_hint`), then whole words after a space (" time", ...; then made-up ones:
// " ba", " be", ...) up to `vocab_size_hint` - 1, <s>/</s> as added special tokens, and a
// TemplateProcessing post-processor that prepends <s>. Every id below the hint (past 257) is a
// token, so whatever id a model of that vocabulary samples decodes to text; no merge makes the
// words, so they never change how text encodes. Deterministic: the same hint gives the same
// bytes.
std::string MakeTinyTokenizerJson(int32_t vocab_size_hint);

// tokenizer_config.json text with bos_token <s>, eos_token </s> and a Llama-3-like chat
// template whose turns end with </s>.
std::string MakeTinyTokenizerConfigJson();

}  // namespace kvserve::tokenizer
