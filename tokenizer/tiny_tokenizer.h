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

// The Gemma flavour of the tiny tokenizer (the gemma2 and gemma3_text presets): the same byte
// BPE, with <bos> and <eos> at kTinyBosId and kTinyEosId, the words up to `vocab_size` - 3,
// and the turn markers <start_of_turn> and <end_of_turn> as added special tokens at
// TinyGemmaStartOfTurnId and TinyGemmaEndOfTurnId; the post-processor prepends <bos>.
std::string MakeTinyGemmaTokenizerJson(int32_t vocab_size);
inline int32_t TinyGemmaStartOfTurnId(int32_t vocab_size) { return vocab_size - 2; }
inline int32_t TinyGemmaEndOfTurnId(int32_t vocab_size) { return vocab_size - 1; }

// tokenizer_config.json of the Gemma flavour: bos_token <bos>, eos_token <eos> and a
// Gemma-style chat template: turns are `<start_of_turn>ROLE\nTEXT<end_of_turn>\n` with the
// assistant's role named `model`, a system message is put before the first user turn's text,
// roles must alternate user/assistant (raise_exception otherwise), and the generation prompt
// is `<start_of_turn>model\n`.
std::string MakeTinyGemmaTokenizerConfigJson();

}  // namespace kvserve::tokenizer
