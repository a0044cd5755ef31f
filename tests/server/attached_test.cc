// Tests of Attached: null (and UNAVAILABLE) until a value is attached, then that value.
#include "server/attached.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kvserve::server {
namespace {

struct Served {
  int answer = 0;
};

TEST(AttachedTest, NullUntilAttachedThenTheValue) {
  Attached<Served> attached;
  EXPECT_EQ(attached.get(), nullptr);
  attached.Attach({42});
  ASSERT_NE(attached.get(), nullptr);
  EXPECT_EQ(attached.get()->answer, 42);
}

TEST(AttachedTest, ReadersRunningWhileTheValueIsAttachedSeeItWhole) {
  // Readers poll while the writer attaches: each sees null or the whole value, never a
  // half-built one (ThreadSanitizer checks the hand-off in `make sanitize`).
  Attached<std::vector<int>> attached;
  std::vector<int> seen_sizes(4, -1);
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      const std::vector<int>* value = nullptr;
      while ((value = attached.get()) == nullptr) std::this_thread::yield();
      seen_sizes[r] = static_cast<int>(value->size());
    });
  }
  std::thread writer([&] { attached.Attach(std::vector<int>(1000, 7)); });
  writer.join();
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(seen_sizes, std::vector<int>(4, 1000));
}

TEST(AttachedTest, LoadingIsUnavailable) {
  EXPECT_EQ(ModelLoadingError().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ModelLoadingError().message(), "the model is still loading; retry");
}

}  // namespace
}  // namespace kvserve::server
