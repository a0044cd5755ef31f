// Tests of Attached: null (and UNAVAILABLE) until a value is attached, then that value.
#include "server/grpc_api/attached.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace kvserve::server::grpc_api {
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
  // The readers start first and are all seen polling (a null value) before the value is
  // attached, so that the attachment happens while they read. Each keeps reading until it
  // has seen the value many times, and every read must be null before the first non-null
  // one and then always the same, whole value: never a half-built one, never null again
  // (ThreadSanitizer also checks the hand-off in `make sanitize`).
  constexpr int kReaders = 4;
  constexpr int kReadsOfTheValue = 200;
  constexpr size_t kSize = 1000;
  constexpr auto kTimeout = std::chrono::seconds(30);
  Attached<std::vector<int>> attached;
  std::atomic<int> polling{0};  // readers that have read null at least once
  std::vector<std::string> errors(kReaders);
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      const auto deadline = std::chrono::steady_clock::now() + kTimeout;
      const std::vector<int>* first = nullptr;
      bool counted = false;
      for (int reads_of_value = 0; reads_of_value < kReadsOfTheValue;) {
        const std::vector<int>* value = attached.get();
        if (value == nullptr) {
          if (first != nullptr) {
            errors[r] = "null after the value was seen";
            return;
          }
          if (!counted) {
            counted = true;
            polling.fetch_add(1);
          }
          if (std::chrono::steady_clock::now() > deadline) {
            errors[r] = "the value never came";
            return;
          }
          std::this_thread::yield();
          continue;
        }
        if (!counted) {
          errors[r] = "the value was attached before this reader read null";
          return;
        }
        if (first == nullptr) first = value;
        if (value != first) {
          errors[r] = "a second value";
          return;
        }
        if (value->size() != kSize ||
            static_cast<size_t>(std::count(value->begin(), value->end(), 7)) != kSize) {
          errors[r] = "a value that is not whole";
          return;
        }
        ++reads_of_value;
      }
    });
  }
  // Attach only once every reader is polling (or, if one never starts, after the timeout,
  // which fails below); the readers are then reading while the value is attached.
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (polling.load() < kReaders && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(polling.load(), kReaders) << "readers polling before the value was attached";
  attached.Attach(std::vector<int>(kSize, 7));
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(errors, std::vector<std::string>(kReaders)) << "errors of readers 0.." << kReaders - 1;
}

TEST(AttachedTest, LoadingIsUnavailable) {
  EXPECT_EQ(ModelLoadingError().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ModelLoadingError().message(), "the model is still loading; retry");
}

}  // namespace
}  // namespace kvserve::server::grpc_api
