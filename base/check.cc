// The failure path of KVSERVE_CHECK (see check.h).
#include "base/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace kvserve::base::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* condition) {
  stream_ << file << ":" << line << ": KVSERVE_CHECK failed: " << condition;
  header_size_ = stream_.str().size();
}

CheckFailure::~CheckFailure() {
  std::string text = stream_.str();
  if (text.size() > header_size_) text.insert(header_size_, ": ");  // a message follows
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace kvserve::base::internal
