// A compiled Oniguruma regular expression over UTF-8 text (the engine Hugging Face tokenizers use).
#include "tokenizer/unicode_regex.h"

#include <oniguruma.h>

#include <mutex>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/unicode_utils.h"

namespace kvserve::tokenizer {

namespace {

void InitOnigurumaOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

// Frees an OnigRegion when a FindAll call ends.
struct RegionDeleter {
  void operator()(OnigRegion* r) const { onig_region_free(r, 1); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<UnicodeRegex>> UnicodeRegex::Create(std::string_view pattern) {
  InitOnigurumaOnce();
  regex_t* regex = nullptr;
  OnigErrorInfo error_info;
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc = onig_new(&regex, begin, begin + pattern.size(), ONIG_OPTION_CAPTURE_GROUP,
                          ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &error_info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &error_info);
    return absl::InvalidArgumentError(
        absl::StrCat("regex '", AsAbsl(pattern),
                     "' does not compile: ", reinterpret_cast<const char*>(message)));
  }
  return std::unique_ptr<UnicodeRegex>(new UnicodeRegex(regex));
}

UnicodeRegex::~UnicodeRegex() { onig_free(static_cast<regex_t*>(regex_)); }

void UnicodeRegex::FindAll(std::string_view text,
                           std::vector<std::pair<size_t, size_t>>* matches) const {
  auto* regex = static_cast<regex_t*>(regex_);
  std::unique_ptr<OnigRegion, RegionDeleter> region(onig_region_new());
  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = str + text.size();
  size_t pos = 0;
  while (pos <= text.size()) {
    const int found = onig_search(regex, str, end, str + pos, end, region.get(), ONIG_OPTION_NONE);
    if (found < 0) break;
    const auto begin = static_cast<size_t>(region->beg[0]);
    const auto finish = static_cast<size_t>(region->end[0]);
    if (finish == begin) {
      if (begin >= text.size()) break;
      pos =
          begin + static_cast<size_t>(Utf8SequenceLength(static_cast<unsigned char>(text[begin])));
      continue;
    }
    matches->emplace_back(begin, finish);
    pos = finish;
  }
}

}  // namespace kvserve::tokenizer
