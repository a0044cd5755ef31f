// ProcessMetrics: /proc/self/stat, /proc/stat, /proc/self/fd and RLIMIT_NOFILE as
// Prometheus families.
#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace kvserve::server {
namespace {

// `text`'s fields separated by spaces (runs of them count as one).
std::vector<std::string_view> Fields(std::string_view text) {
  std::vector<std::string_view> fields;
  size_t at = 0;
  while (true) {
    at = text.find_first_not_of(" \n", at);
    if (at == std::string_view::npos) break;
    const size_t end = std::min(text.find_first_of(" \n", at), text.size());
    fields.push_back(text.substr(at, end - at));
    at = end;
  }
  return fields;
}

// `text` as a whole decimal number.
template <typename Int>
bool ParseInt(std::string_view text, Int* value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

// The whole of a (small) file, or nullopt when it cannot be read.
std::optional<std::string> ReadSmallFile(const char* path) {
  std::ifstream file(path);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return std::nullopt;
  return text.str();
}

// /proc/stat's "btime SECONDS" (the boot time since the Unix epoch).
std::optional<double> BootTimeSeconds() {
  const std::optional<std::string> stat = ReadSmallFile("/proc/stat");
  if (!stat) return std::nullopt;
  std::istringstream lines(*stat);
  for (std::string line; std::getline(lines, line);) {
    constexpr std::string_view kBtime = "btime ";
    if (!line.starts_with(kBtime)) continue;
    int64_t seconds = 0;
    if (ParseInt(std::string_view(line).substr(kBtime.size()), &seconds)) {
      return static_cast<double>(seconds);
    }
  }
  return std::nullopt;
}

// Entries of /proc/self/fd (the descriptor reading the folder included, as the Prometheus
// clients count it), or nullopt.
std::optional<int64_t> OpenFileDescriptors() {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return std::nullopt;
  int64_t count = 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(dir);
  return count;
}

prometheus::MetricFamily Family(const char* name, const char* help, prometheus::MetricType type,
                                double value) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  prometheus::ClientMetric metric;
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(metric);
  return family;
}

}  // namespace

std::optional<ProcessStat> ParseProcessStat(std::string_view stat, int64_t ticks_per_second,
                                            int64_t page_bytes, double boot_time_seconds) {
  // "PID (COMM) STATE PPID ...": COMM may hold anything, so fields count from its last ')'.
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string_view::npos || ticks_per_second <= 0) return std::nullopt;
  const std::vector<std::string_view> fields = Fields(stat.substr(comm_end + 1));
  // fields[0] is field 3 of proc(5) (state): field n is fields[n - 3].
  constexpr size_t kUtime = 14 - 3, kStime = 15 - 3, kStartTime = 22 - 3, kVsize = 23 - 3,
                   kRss = 24 - 3;
  if (fields.size() <= kRss) return std::nullopt;
  uint64_t utime = 0, stime = 0, start_ticks = 0, vsize = 0;
  int64_t rss_pages = 0;
  if (!ParseInt(fields[kUtime], &utime) || !ParseInt(fields[kStime], &stime) ||
      !ParseInt(fields[kStartTime], &start_ticks) || !ParseInt(fields[kVsize], &vsize) ||
      !ParseInt(fields[kRss], &rss_pages)) {
    return std::nullopt;
  }
  const double ticks = static_cast<double>(ticks_per_second);
  ProcessStat out;
  out.cpu_seconds = static_cast<double>(utime + stime) / ticks;
  out.virtual_bytes = static_cast<int64_t>(vsize);
  out.resident_bytes = rss_pages * page_bytes;
  out.start_time_seconds = boot_time_seconds + static_cast<double>(start_ticks) / ticks;
  return out;
}

ProcessMetrics::ProcessMetrics()
    : ticks_per_second_(::sysconf(_SC_CLK_TCK)),
      page_bytes_(::sysconf(_SC_PAGESIZE)),
      boot_time_seconds_(BootTimeSeconds()) {}

std::vector<prometheus::MetricFamily> ProcessMetrics::Collect() const {
  using prometheus::MetricType;
  std::vector<prometheus::MetricFamily> families;
  const std::optional<std::string> text = ReadSmallFile("/proc/self/stat");
  const std::optional<ProcessStat> stat =
      text && boot_time_seconds_
          ? ParseProcessStat(*text, ticks_per_second_, page_bytes_, *boot_time_seconds_)
          : std::nullopt;
  if (stat) {
    families.push_back(Family("process_cpu_seconds_total",
                              "User and system CPU time of every thread of the process, in seconds",
                              MetricType::Counter, stat->cpu_seconds));
    families.push_back(Family("process_resident_memory_bytes",
                              "Bytes of the process's memory resident in RAM", MetricType::Gauge,
                              static_cast<double>(stat->resident_bytes)));
    families.push_back(Family("process_virtual_memory_bytes",
                              "Bytes of the process's virtual address space", MetricType::Gauge,
                              static_cast<double>(stat->virtual_bytes)));
    families.push_back(Family("process_start_time_seconds",
                              "When the process started, in seconds since the Unix epoch",
                              MetricType::Gauge, stat->start_time_seconds));
  }
  if (const std::optional<int64_t> fds = OpenFileDescriptors()) {
    families.push_back(Family("process_open_fds", "File descriptors the process holds open",
                              MetricType::Gauge, static_cast<double>(*fds)));
  }
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    families.push_back(Family("process_max_fds",
                              "File descriptors the process may hold open at most (RLIMIT_NOFILE)",
                              MetricType::Gauge, static_cast<double>(limit.rlim_cur)));
  }
  return families;
}

}  // namespace kvserve::server
