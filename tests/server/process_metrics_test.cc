// Tests of ProcessMetrics: /proc/PID/stat parsed exactly (a command name with spaces and
// parentheses included), and the live figures agree with what the kernel says otherwise.
#include "server/process_metrics.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/times.h>
#include <unistd.h>

#include <ctime>
#include <map>
#include <string>

namespace kvserve::server {
namespace {

// A /proc/PID/stat line: pid 4242, command "a) b (c", utime 250 and stime 150 ticks, start
// 1000 ticks after boot, 8 MiB of virtual memory, 300 resident pages.
constexpr char kStat[] =
    "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 3 0 1000 8388608 300 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";

TEST(ProcessMetricsTest, ParsesTheFieldsAfterTheCommandName) {
  const std::optional<ProcessStat> stat =
      ParseProcessStat(kStat, /*ticks_per_second=*/100, /*page_bytes=*/4096,
                       /*boot_time_seconds=*/1'700'000'000);
  ASSERT_TRUE(stat.has_value());
  EXPECT_DOUBLE_EQ(stat->cpu_seconds, 4.0);
  EXPECT_EQ(stat->virtual_bytes, 8388608);
  EXPECT_EQ(stat->resident_bytes, 300 * 4096);
  EXPECT_DOUBLE_EQ(stat->start_time_seconds, 1'700'000'010);
}

TEST(ProcessMetricsTest, RefusesTextThatIsNotAStatLine) {
  EXPECT_FALSE(ParseProcessStat("", 100, 4096, 0).has_value());
  EXPECT_FALSE(ParseProcessStat("4242 (cut", 100, 4096, 0).has_value());
  EXPECT_FALSE(ParseProcessStat("4242 (x) S 1 2 3", 100, 4096, 0).has_value());
  std::string bad = kStat;
  bad.replace(bad.find(" 250 "), 5, " 2x0 ");
  EXPECT_FALSE(ParseProcessStat(bad, 100, 4096, 0).has_value());
  EXPECT_FALSE(ParseProcessStat(kStat, 0, 4096, 0).has_value());
}

// The value of each family's one sample, by name.
std::map<std::string, double> Values(const std::vector<prometheus::MetricFamily>& families) {
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& family : families) {
    EXPECT_EQ(family.metric.size(), 1u) << family.name;
    if (family.metric.empty()) continue;
    values[family.name] = family.type == prometheus::MetricType::Counter
                              ? family.metric[0].counter.value
                              : family.metric[0].gauge.value;
  }
  return values;
}

double CpuSecondsNow() {
  tms now{};
  ::times(&now);
  return static_cast<double>(now.tms_utime + now.tms_stime) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

TEST(ProcessMetricsTest, LiveFiguresMatchTheKernelsOtherAccounts) {
  ProcessMetrics process;
  const double cpu_before = CpuSecondsNow();
  std::map<std::string, double> values = Values(process.Collect());
  const double cpu_after = CpuSecondsNow();
  ASSERT_TRUE(values.contains("process_cpu_seconds_total"));
  // times() reads the same clock-tick counts: the metric lies between two readings of it.
  EXPECT_GE(values["process_cpu_seconds_total"], cpu_before);
  EXPECT_LE(values["process_cpu_seconds_total"], cpu_after);
  EXPECT_GT(values["process_resident_memory_bytes"], 0);
  EXPECT_GE(values["process_virtual_memory_bytes"], values["process_resident_memory_bytes"]);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(values["process_start_time_seconds"], now + 1);
  EXPECT_GT(values["process_start_time_seconds"], now - 24 * 3600);
  EXPECT_GT(values["process_max_fds"], 0);

  // One more descriptor open is one more counted.
  const double fds = values["process_open_fds"];
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  values = Values(process.Collect());
  ::close(fd);
  EXPECT_EQ(values["process_open_fds"], fds + 1);
}

}  // namespace
}  // namespace kvserve::server
