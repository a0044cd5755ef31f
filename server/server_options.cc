// ServerOptions: the kvserve command line.
#include "server/server_options.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/command_line.h"
#include "model/transformer.h"
#include "server/api_keys.h"
#include "server/metrics_http_server.h"

namespace kvserve::server {
namespace {

// The default of the --tenant-max-* flags that have a fair share (tenant_limits.h).
constexpr char kFairShareDefault[] =
    "with --api-keys-file: a fair share of the global limit; else no limit";

constexpr std::string_view kLogLevels[] = {"trace", "debug",    "info", "warn",
                                           "error", "critical", "off"};

std::vector<base::FlagSpec> Flags() {
  return {
      {"model", "Hugging Face model folder (config.json, model.safetensors, tokenizer.json)",
       "the embedded tiny model"},
      {"listen", "gRPC listen address (port 0: any free port)", "127.0.0.1:50051"},
      {"tls-cert-file", "server certificate chain (PEM); with --tls-key-file, gRPC serves TLS",
       "none: plaintext"},
      {"tls-key-file", "private key (PEM) of --tls-cert-file", "none: plaintext"},
      {"tls-client-ca-file",
       "CA certificates (PEM): clients must present a certificate they sign (mutual TLS)", "none"},
      {"insecure",
       "allow plaintext gRPC on an address that is not loopback (TLS terminated elsewhere)", "",
       true},
      {"api-keys-file",
       "YAML or JSON list of {key_sha256, tenant, role}: calls must send 'authorization: Bearer "
       "KEY' (reloaded on SIGHUP)",
       "none: no authentication"},
      {"tenant-from-client-cert",
       "with --tls-client-ca-file: a call without an API key is made for the tenant its client "
       "certificate's subject CN names",
       "", true},
      {"client-cert-admins",
       "comma-separated certificate CNs (tenants) with the admin role (--tenant-from-client-cert)",
       "none"},
      {"tenant-max-running-requests",
       "requests of one tenant running at once at most; its others wait", "0: no limit"},
      {"tenant-max-queued-requests",
       "requests of one tenant waiting at most (beyond: RESOURCE_EXHAUSTED); 0: no limit",
       kFairShareDefault},
      {"tenant-max-prefix-bytes",
       "bytes of prefix snapshots (named and automatic) one tenant may hold; 0: no limit",
       kFairShareDefault},
      {"tenant-max-sessions",
       "sessions one tenant may hold open at once (beyond: RESOURCE_EXHAUSTED); 0: no limit",
       kFairShareDefault},
      {"metrics-listen", "Prometheus /metrics listen address (plaintext)", "off"},
      {"http-listen", "OpenAI-compatible HTTP API address (TLS, keys and tenants as on --listen)",
       "off"},
      {"http-workers", "HTTP connections served at once (beyond: 429)", "64"},
      {"http-max-body-bytes", "largest HTTP request body (beyond: 413)", "8388608 (8 MiB)"},
      {"device", "cpu | cuda | cuda:N", "cpu"},
      {"dtype", "float32 | bfloat16 | float16", "float32"},
      {"weight-dtype", model::kWeightDtypeFlagHelp, "auto"},
      {"bf16-compute", model::kBf16ComputeFlagHelp, "auto"},
      {"threads", "CPU threads for LibTorch", "0: all cores"},
      {"max-batch-size", "sequences in the running batch at most", "32"},
      {"max-batch-tokens", "tokens per step at most (long prefills are chunked to fit)", "2048"},
      {"max-queue", "requests waiting for admission at most (beyond: RESOURCE_EXHAUSTED)", "256"},
      {"max-new-tokens-limit", "the largest max_new_tokens a request may ask for", "4096"},
      {"max-request-token-rows",
       "rows (beams or samples) x (prompt + max_new_tokens) one request may ask for; 0: no limit",
       "131072"},
      {"max-response-bytes",
       "estimated bytes of one request's answer (sequences x tokens x log-probabilities) at "
       "most; 0: no limit",
       "16777216 (16 MiB)"},
      {"max-forced-tokens",
       "output constraints: tokens appended without sampling where only one continuation is "
       "allowed (jump-forward), per sampled token; 0: off",
       "16"},
      {"constraint-cache-entries",
       "output constraints compiled for the vocabulary and kept for reuse (least recently "
       "used leave first); 0: none kept",
       "256"},
      {"prefix-cache-bytes", "bytes of prefix snapshots kept (named and automatic)",
       "0: follows the device and model: CUDA 1/4 of the KV budget, CPU 4 full contexts (64 "
       "MiB-1 GiB)"},
      {"prefix-host-bytes",
       "bytes of evicted automatic prefixes kept in host memory (a tier below the device)",
       "0: none"},
      {"prefix-disk-bytes", "bytes of automatic prefix files kept in --prefix-disk-dir", "0: none"},
      {"prefix-disk-dir", "folder of prefix snapshot files (found again after a restart)", "none"},
      {"prefix-retention-half-life-seconds",
       "a tiered prefix's priority, (1 + hits) x 2^(-age / half-life), halves in this time", "600"},
      {"no-auto-prefix-cache", "do not reuse shared prompt prefixes automatically", "", true},
      {"auto-prefix-min-tokens", "shortest prompt prefix kept and reused automatically", "32"},
      {"prefix-kv-mode",
       "how a cached prefix reaches a request's cache: shared (read in place by the strategies "
       "that allow it: dynamic) or copy",
       "shared"},
      {"kv-events-buffer", "KV-event batches kept for subscribers that reconnect", "4096"},
      {"session-idle-offload-seconds",
       "an idle session's cache moves to host memory after this many seconds", "60"},
      {"session-cache-bytes",
       "bytes idle sessions' caches may hold; the least recently used are evicted beyond",
       "1073741824 (1 GiB)"},
      {"session-ttl-seconds", "a session closes this long after its last use (unless it says)",
       "1800"},
      {"max-sessions", "sessions open at once at most", "1024"},
      {"session-max-ttl-seconds",
       "the longest life a session may ask for (longer ones are capped to it)", "86400 (24 h)"},
      {"state-dir", "directory where registered prefixes survive restarts", "none"},
      {"prefixes-file", "prefixes to register at start-up (JSON or YAML)", "none"},
      {"kv-device-bytes",
       "device bytes the KV caches may hold; beyond, the largest move to the host",
       "CPU: unlimited; CUDA: 90% of free memory"},
      {"fault-inject-oom-rate", "fraction of KV allocations that fail as out of memory (tests)",
       "0"},
      {"log-format", "text | json", "text"},
      {"log-level", "trace | debug | info | warn | error | critical | off", "info"},
      {"max-request-bytes",
       "largest request message accepted (beyond: RESOURCE_EXHAUSTED); at least 4096",
       "67108864 (64 MiB)"},
      {"shutdown-grace-seconds", "time in-flight requests get to finish after SIGTERM", "30"},
      {"replica-id", "this replica's name in x-kvserve-replica trailers and GetModelInfo",
       "the HOST:PORT or unix:PATH it listens on"},
      {"version", "print the version, git revision, LibTorch and CUDA versions, and exit", "",
       true},
  };
}

// Whether `c` may appear in a host name or an IPv4 address.
bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// Whether `address` is HOST:PORT or [IPV6]:PORT with a port in [0, 65535], or unix:PATH.
// InvalidArgument naming `flag` and saying what is wrong otherwise.
absl::Status CheckListenAddress(const std::string& flag, const std::string& address) {
  const auto refuse = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", address.substr(0, 128), "' ", std::string(why)));
  };
  constexpr std::string_view kNotHostPort = "is not HOST:PORT with a port in [0, 65535]";
  if (address.rfind("unix:", 0) == 0) {
    return address.size() > 5 ? absl::OkStatus() : refuse("names no socket path");
  }
  std::string_view host;
  std::string_view port;
  const std::string_view text = address;
  if (text.starts_with('[')) {
    const size_t bracket = text.find(']');
    if (bracket == std::string_view::npos || text.substr(bracket + 1, 1) != ":") {
      return refuse(kNotHostPort);
    }
    host = text.substr(1, bracket - 1);
    port = text.substr(bracket + 2);
    const bool ipv6 = std::all_of(host.begin(), host.end(),
                                  [](char c) { return IsHostChar(c) || c == ':' || c == '%'; });
    if (host.find(':') == std::string_view::npos || !ipv6) {
      return refuse("is not [IPV6]:PORT: the host is not an IPv6 address");
    }
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return refuse(kNotHostPort);
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return refuse("has an IPv6 host without brackets ([::1]:PORT)");
    }
    if (!std::all_of(host.begin(), host.end(), IsHostChar)) {
      return refuse("is not HOST:PORT: the host is not a host name or an IPv4 address");
    }
  }
  const bool digits =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || std::stoi(std::string(port)) > 65535) return refuse(kNotHostPort);
  if (host.empty()) return refuse("has no host (0.0.0.0:PORT listens on every interface)");
  return absl::OkStatus();
}

// The contents of `path`, the file of `flag`, checked to be PEM holding a block whose label
// ends with `label_suffix` ("CERTIFICATE", "PRIVATE KEY"). InvalidArgument naming both.
absl::StatusOr<std::string> ReadPemFile(const std::string& flag, const std::string& path,
                                        std::string_view label_suffix) {
  constexpr std::streamsize kMaxBytes = std::streamsize{1} << 20;
  const auto refuse = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path.substr(0, 256), "': ", std::string(why)));
  };
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return refuse("no such file");
  if (std::filesystem::is_directory(path, error)) return refuse("is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return refuse(absl::StrCat("cannot read it: ", std::strerror(errno)));
  std::string text(static_cast<size_t>(kMaxBytes) + 1, '\0');
  in.read(text.data(), kMaxBytes + 1);
  if (in.bad()) return refuse(absl::StrCat("cannot read it: ", std::strerror(errno)));
  text.resize(static_cast<size_t>(in.gcount()));
  if (std::ssize(text) > kMaxBytes) return refuse("is over 1 MiB: not a PEM file");
  // A PEM block: "-----BEGIN <label>-----" ... "-----END <label>-----".
  bool found = false;
  for (size_t at = text.find("-----BEGIN "); at != std::string::npos && !found;
       at = text.find("-----BEGIN ", at + 1)) {
    const size_t label_at = at + 11;
    const size_t close = text.find("-----", label_at);
    if (close == std::string::npos) break;
    const std::string_view label(text.data() + label_at, close - label_at);
    found = label.ends_with(label_suffix) &&
            text.find(absl::StrCat("-----END ", std::string(label), "-----"), close) !=
                std::string::npos;
  }
  if (!found) {
    return refuse(absl::StrCat("is not PEM holding a ", std::string(label_suffix),
                               " (-----BEGIN ...", std::string(label_suffix), "----- block)"));
  }
  return text;
}

}  // namespace

bool IsLoopbackAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

absl::StatusOr<TlsFiles> ReadTlsFiles(const ServerOptions& options) {
  TlsFiles files;
  if (!options.tls()) return files;
  absl::StatusOr<std::string> cert =
      ReadPemFile("--tls-cert-file", options.tls_cert_file, "CERTIFICATE");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key =
      ReadPemFile("--tls-key-file", options.tls_key_file, "PRIVATE KEY");
  if (!key.ok()) return key.status();
  files.cert_chain_pem = *std::move(cert);
  files.private_key_pem = *std::move(key);
  if (!options.tls_client_ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPemFile("--tls-client-ca-file", options.tls_client_ca_file, "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    files.client_ca_pem = *std::move(ca);
  }
  return files;
}

absl::StatusOr<ServerOptions> ServerOptions::FromCommandLine(int argc, char** argv, bool* help,
                                                             std::string* usage) {
  absl::StatusOr<base::CommandLine> cl = base::CommandLine::Parse(argc, argv, Flags());
  if (!cl.ok()) return cl.status();
  *usage = cl->Usage("kvserve", "Serves a causal language model over gRPC (kvserve.v1).");
  *help = cl->help_requested();
  ServerOptions o;
  if (*help) return o;
  o.version = cl->GetBool("version");
  if (o.version) return o;
  o.model_dir = cl->GetString("model", "");
  o.listen = cl->GetString("listen", o.listen);
  o.metrics_listen = cl->GetString("metrics-listen", "");
  o.http_listen = cl->GetString("http-listen", "");
  absl::StatusOr<int64_t> http_workers = cl->GetInt("http-workers", o.http_workers);
  if (!http_workers.ok()) return http_workers.status();
  if (*http_workers < 1 || *http_workers > 4096) {
    return absl::InvalidArgumentError("--http-workers must be in [1, 4096]");
  }
  o.http_workers = static_cast<int>(*http_workers);
  absl::StatusOr<int64_t> http_body = cl->GetInt("http-max-body-bytes", o.http_max_body_bytes);
  if (!http_body.ok()) return http_body.status();
  o.http_max_body_bytes = *http_body;
  o.tls_cert_file = cl->GetString("tls-cert-file", "");
  o.tls_key_file = cl->GetString("tls-key-file", "");
  o.tls_client_ca_file = cl->GetString("tls-client-ca-file", "");
  o.insecure = cl->GetBool("insecure");
  o.api_keys_file = cl->GetString("api-keys-file", "");
  o.tenant_from_client_cert = cl->GetBool("tenant-from-client-cert");
  const std::vector<std::string> admins =
      absl::StrSplit(cl->GetString("client-cert-admins", ""), ',', absl::SkipWhitespace());
  for (const std::string& admin : admins) {
    o.client_cert_admins.push_back(std::string(absl::StripAsciiWhitespace(admin)));
  }
  absl::StatusOr<int64_t> tenant_running = cl->GetInt("tenant-max-running-requests", 0);
  absl::StatusOr<int64_t> tenant_queued = cl->GetInt("tenant-max-queued-requests", -1);
  absl::StatusOr<int64_t> tenant_prefix = cl->GetInt("tenant-max-prefix-bytes", -1);
  absl::StatusOr<int64_t> tenant_sessions = cl->GetInt("tenant-max-sessions", -1);
  for (const absl::Status& s : {tenant_running.status(), tenant_queued.status(),
                                tenant_prefix.status(), tenant_sessions.status()}) {
    if (!s.ok()) return s;
  }
  if (*tenant_running < 0 || *tenant_running > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError("--tenant-max-running-requests must be in [0, 2^31)");
  }
  // Given, each must be >= 0 (-1 is the unset default).
  const auto given = [&](const char* flag, int64_t value) {
    return value >= 0 || !cl->Has(std::string(flag));
  };
  if (!given("tenant-max-queued-requests", *tenant_queued) ||
      *tenant_queued > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError("--tenant-max-queued-requests must be in [0, 2^31)");
  }
  if (!given("tenant-max-prefix-bytes", *tenant_prefix)) {
    return absl::InvalidArgumentError("--tenant-max-prefix-bytes must be >= 0");
  }
  if (!given("tenant-max-sessions", *tenant_sessions)) {
    return absl::InvalidArgumentError("--tenant-max-sessions must be >= 0");
  }
  o.scheduler.max_running_per_tenant = static_cast<int>(*tenant_running);
  o.tenant_queued_requests = *tenant_queued;
  o.tenant_prefix_bytes = *tenant_prefix;
  o.tenant_max_sessions = *tenant_sessions;
  o.device = cl->GetString("device", o.device);
  o.dtype = cl->GetString("dtype", o.dtype);
  o.weight_dtype = cl->GetString("weight-dtype", o.weight_dtype);
  o.bf16_compute = cl->GetString("bf16-compute", o.bf16_compute);
  o.log_format = cl->GetString("log-format", o.log_format);
  o.log_level = cl->GetString("log-level", o.log_level);
  absl::StatusOr<int64_t> request_bytes = cl->GetInt("max-request-bytes", o.max_request_bytes);
  if (!request_bytes.ok()) return request_bytes.status();
  o.max_request_bytes = *request_bytes;
  o.replica_id = cl->GetString("replica-id", "");
  absl::StatusOr<int64_t> threads = cl->GetInt("threads", 0);
  absl::StatusOr<int64_t> batch = cl->GetInt("max-batch-size", o.scheduler.max_batch_size);
  absl::StatusOr<int64_t> tokens = cl->GetInt("max-batch-tokens", o.scheduler.max_batch_tokens);
  absl::StatusOr<int64_t> queue = cl->GetInt("max-queue", o.scheduler.max_queue);
  absl::StatusOr<int64_t> limit = cl->GetInt("max-new-tokens-limit", o.limits.max_new_tokens_limit);
  absl::StatusOr<int64_t> token_rows =
      cl->GetInt("max-request-token-rows", o.limits.max_request_token_rows);
  absl::StatusOr<int64_t> response_bytes =
      cl->GetInt("max-response-bytes", o.limits.max_response_bytes);
  if (!token_rows.ok()) return token_rows.status();
  if (!response_bytes.ok()) return response_bytes.status();
  o.limits.max_request_token_rows = *token_rows;
  o.limits.max_response_bytes = *response_bytes;
  absl::StatusOr<int64_t> forced = cl->GetInt("max-forced-tokens", o.max_forced_tokens);
  if (!forced.ok()) return forced.status();
  if (*forced < 0 || *forced > 1024) {
    return absl::InvalidArgumentError("--max-forced-tokens must be in [0, 1024] (0: off)");
  }
  o.max_forced_tokens = static_cast<int>(*forced);
  absl::StatusOr<int64_t> constraint_entries =
      cl->GetInt("constraint-cache-entries", o.limits.constraint_cache_entries);
  if (!constraint_entries.ok()) return constraint_entries.status();
  if (*constraint_entries < 0) {
    return absl::InvalidArgumentError("--constraint-cache-entries must be >= 0");
  }
  o.limits.constraint_cache_entries = *constraint_entries;
  absl::StatusOr<double> grace = cl->GetDouble("shutdown-grace-seconds", 30);
  absl::StatusOr<int64_t> prefix_bytes = cl->GetInt("prefix-cache-bytes", o.prefix_cache_bytes);
  absl::StatusOr<int64_t> auto_min = cl->GetInt("auto-prefix-min-tokens", o.auto_prefix_min_tokens);
  if (!prefix_bytes.ok()) return prefix_bytes.status();
  if (!auto_min.ok()) return auto_min.status();
  o.prefix_cache_bytes = *prefix_bytes;
  o.auto_prefix_min_tokens = *auto_min;
  o.auto_prefix_cache = !cl->GetBool("no-auto-prefix-cache");
  absl::StatusOr<cache::PrefixKvMode> kv_mode =
      cache::ParsePrefixKvMode(cl->GetString("prefix-kv-mode", "shared"));
  if (!kv_mode.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix-kv-mode: ", kv_mode.status().message()));
  }
  o.prefix_kv_mode = *kv_mode;
  absl::StatusOr<int64_t> host_bytes = cl->GetInt("prefix-host-bytes", 0);
  absl::StatusOr<int64_t> disk_bytes = cl->GetInt("prefix-disk-bytes", 0);
  absl::StatusOr<double> half_life = cl->GetDouble("prefix-retention-half-life-seconds", 600);
  for (const absl::Status& s : {host_bytes.status(), disk_bytes.status(), half_life.status()}) {
    if (!s.ok()) return s;
  }
  if (!(*half_life > 0)) {
    return absl::InvalidArgumentError("--prefix-retention-half-life-seconds must be > 0");
  }
  o.prefix_host_bytes = *host_bytes;
  o.prefix_disk_bytes = *disk_bytes;
  o.prefix_disk_dir = cl->GetString("prefix-disk-dir", "");
  o.prefix_retention_half_life = absl::Seconds(*half_life);
  absl::StatusOr<int64_t> kv_events = cl->GetInt("kv-events-buffer", o.kv_events_buffer);
  if (!kv_events.ok()) return kv_events.status();
  o.kv_events_buffer = *kv_events;
  absl::StatusOr<double> idle_offload = cl->GetDouble("session-idle-offload-seconds", 60);
  absl::StatusOr<int64_t> session_bytes = cl->GetInt("session-cache-bytes", o.session_cache_bytes);
  absl::StatusOr<double> session_ttl = cl->GetDouble("session-ttl-seconds", 1800);
  absl::StatusOr<int64_t> max_sessions = cl->GetInt("max-sessions", o.max_sessions);
  absl::StatusOr<double> max_ttl = cl->GetDouble("session-max-ttl-seconds", 86400);
  for (const absl::Status& s : {idle_offload.status(), session_bytes.status(), session_ttl.status(),
                                max_sessions.status(), max_ttl.status()}) {
    if (!s.ok()) return s;
  }
  if (!(*max_ttl > 0)) return absl::InvalidArgumentError("--session-max-ttl-seconds must be > 0");
  o.session_max_ttl = absl::Seconds(*max_ttl);
  if (!(*idle_offload >= 0)) {
    return absl::InvalidArgumentError("--session-idle-offload-seconds must be >= 0");
  }
  if (!(*session_ttl > 0)) return absl::InvalidArgumentError("--session-ttl-seconds must be > 0");
  o.session_idle_offload = absl::Seconds(*idle_offload);
  o.session_cache_bytes = *session_bytes;
  o.session_ttl = absl::Seconds(*session_ttl);
  o.max_sessions = *max_sessions;
  o.state_dir = cl->GetString("state-dir", "");
  o.prefixes_file = cl->GetString("prefixes-file", "");
  absl::StatusOr<int64_t> kv_bytes = cl->GetInt("kv-device-bytes", -1);
  absl::StatusOr<double> fault_rate = cl->GetDouble("fault-inject-oom-rate", 0);
  if (!kv_bytes.ok()) return kv_bytes.status();
  if (!fault_rate.ok()) return fault_rate.status();
  o.kv_device_bytes = *kv_bytes;
  o.fault_inject_oom_rate = *fault_rate;
  for (const absl::Status& s : {threads.status(), batch.status(), tokens.status(), queue.status(),
                                limit.status(), grace.status()}) {
    if (!s.ok()) return s;
  }
  // Range checks happen in Validate; clamp only what would overflow the narrower fields.
  auto to_int = [](int64_t v) {
    return static_cast<int>(std::clamp<int64_t>(v, -1, std::numeric_limits<int>::max()));
  };
  o.threads = to_int(*threads);
  o.scheduler.max_batch_size = to_int(*batch);
  o.scheduler.max_batch_tokens = *tokens;
  o.scheduler.max_queue = to_int(*queue);
  o.limits.max_new_tokens_limit = *limit;
  if (*grace < 0) return absl::InvalidArgumentError("--shutdown-grace-seconds must be >= 0");
  o.shutdown_grace = absl::Seconds(*grace);
  absl::Status valid = o.Validate();
  if (!valid.ok()) return valid;
  return o;
}

absl::Status ServerOptions::Validate() const {
  if (listen.empty()) return absl::InvalidArgumentError("--listen must not be empty");
  if (absl::Status s = CheckListenAddress("--listen", listen); !s.ok()) return s;
  if (tls_cert_file.empty() != tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        tls_cert_file.empty() ? "--tls-key-file needs --tls-cert-file (both or neither)"
                              : "--tls-cert-file needs --tls-key-file (both or neither)");
  }
  if (!tls_client_ca_file.empty() && tls_cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca-file needs --tls-cert-file and --tls-key-file (mutual TLS is TLS)");
  }
  if (tenant_from_client_cert && tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError(
        "--tenant-from-client-cert needs --tls-client-ca-file (verified client certificates)");
  }
  if (!client_cert_admins.empty() && !tenant_from_client_cert) {
    return absl::InvalidArgumentError("--client-cert-admins needs --tenant-from-client-cert");
  }
  for (const std::string& admin : client_cert_admins) {
    if (!IsValidTenantName(admin)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--client-cert-admins: '", admin.substr(0, 64),
                       "' is not a tenant name (1 to 64 characters of [A-Za-z0-9._-])"));
    }
  }
  if (!tls() && !insecure && !IsLoopbackAddress(listen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen '", listen.substr(0, 128),
        "' is not a loopback address: serve TLS on it (--tls-cert-file and --tls-key-file) "
        "or pass --insecure to serve plaintext (TLS terminated by a mesh or a gateway)"));
  }
  if (!metrics_listen.empty()) {
    if (absl::StatusOr<MetricsListenAddress> metrics = ParseMetricsListenAddress(metrics_listen);
        !metrics.ok()) {
      return metrics.status();
    }
  }
  if (!http_listen.empty()) {
    if (absl::StatusOr<MetricsListenAddress> http = ParseMetricsListenAddress(http_listen);
        !http.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-listen '", http_listen.substr(0, 128), "' is not HOST:PORT"));
    }
    if (!tls() && !insecure && !IsLoopbackAddress(http_listen)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-listen '", http_listen.substr(0, 128),
                       "' is not a loopback address: serve TLS on it or pass --insecure"));
    }
  }
  if (http_max_body_bytes < 4096) {
    return absl::InvalidArgumentError("--http-max-body-bytes must be >= 4096");
  }
  // Metadata values must be printable ASCII.
  if (replica_id.size() > 128 || !std::all_of(replica_id.begin(), replica_id.end(),
                                              [](char c) { return c >= 0x20 && c < 0x7f; })) {
    return absl::InvalidArgumentError(
        "--replica-id must be at most 128 printable ASCII characters");
  }
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype '", dtype, "' is not one of float32, bfloat16, float16"));
  }
  if (absl::StatusOr<std::optional<at::ScalarType>> w = model::ParseWeightDtype(weight_dtype);
      !w.ok()) {
    return w.status();
  }
  if (absl::StatusOr<model::Bf16Compute> b = model::ParseBf16Compute(bf16_compute); !b.ok()) {
    return b.status();
  }
  if (log_format != "text" && log_format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-format '", log_format, "' is not one of text, json"));
  }
  if (std::find(std::begin(kLogLevels), std::end(kLogLevels), log_level) == std::end(kLogLevels)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-level '", log_level,
                     "' is not one of trace, debug, info, warn, error, critical, off"));
  }
  if (max_request_bytes < 4096 || max_request_bytes > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("--max-request-bytes must be in [4096, ",
                                                   std::numeric_limits<int32_t>::max(), "] (got ",
                                                   max_request_bytes, ")"));
  }
  if (threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  if (scheduler.max_batch_size < 1) {
    return absl::InvalidArgumentError("--max-batch-size must be >= 1");
  }
  if (scheduler.max_batch_tokens < scheduler.max_batch_size) {
    return absl::InvalidArgumentError(
        "--max-batch-tokens must be >= --max-batch-size (every running decode needs a token)");
  }
  if (scheduler.max_queue < 1) return absl::InvalidArgumentError("--max-queue must be >= 1");
  if (!(fault_inject_oom_rate >= 0 && fault_inject_oom_rate <= 1)) {
    return absl::InvalidArgumentError("--fault-inject-oom-rate must be in [0, 1]");
  }
  if (prefix_cache_bytes < 0) {
    return absl::InvalidArgumentError("--prefix-cache-bytes must be >= 0 (0: automatic)");
  }
  if (auto_prefix_min_tokens < 1) {
    return absl::InvalidArgumentError("--auto-prefix-min-tokens must be >= 1");
  }
  if (prefix_host_bytes < 0) return absl::InvalidArgumentError("--prefix-host-bytes must be >= 0");
  if (prefix_disk_bytes < 0) return absl::InvalidArgumentError("--prefix-disk-bytes must be >= 0");
  if (prefix_disk_bytes > 0 && prefix_disk_dir.empty()) {
    return absl::InvalidArgumentError("--prefix-disk-bytes > 0 needs --prefix-disk-dir");
  }
  if (kv_events_buffer < 1) return absl::InvalidArgumentError("--kv-events-buffer must be >= 1");
  if (session_idle_offload < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-idle-offload-seconds must be >= 0");
  }
  if (session_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-ttl-seconds must be > 0");
  }
  if (session_cache_bytes < 1) {
    return absl::InvalidArgumentError("--session-cache-bytes must be >= 1");
  }
  if (max_sessions < 1) return absl::InvalidArgumentError("--max-sessions must be >= 1");
  if (session_max_ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--session-max-ttl-seconds must be > 0");
  }
  if (session_ttl > session_max_ttl) {
    return absl::InvalidArgumentError(
        "--session-ttl-seconds must be <= --session-max-ttl-seconds (the default life is a life "
        "sessions may ask for)");
  }
  if (tenant_max_sessions < -1 || tenant_prefix_bytes < -1 || tenant_queued_requests < -1) {
    return absl::InvalidArgumentError(
        "--tenant-max-sessions, --tenant-max-prefix-bytes and --tenant-max-queued-requests must "
        "be >= 0 (-1: unset)");
  }
  if (limits.max_new_tokens_limit < 1) {
    return absl::InvalidArgumentError("--max-new-tokens-limit must be >= 1");
  }
  if (limits.max_request_token_rows < 0) {
    return absl::InvalidArgumentError("--max-request-token-rows must be >= 0 (0: no limit)");
  }
  if (limits.max_response_bytes < 0) {
    return absl::InvalidArgumentError("--max-response-bytes must be >= 0 (0: no limit)");
  }
  return absl::OkStatus();
}

}  // namespace kvserve::server
