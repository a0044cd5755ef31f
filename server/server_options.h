// ServerOptions: every kvserve flag, with its default, validated once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "cache/shared_prefix.h"
#include "server/request_builder.h"
#include "server/scheduler.h"

namespace kvserve::server {

struct ServerOptions {
  // --model: a Hugging Face model folder; empty: the embedded tiny model.
  std::string model_dir;
  // --listen: gRPC address; port 0 picks a free port (printed at start-up).
  std::string listen = "127.0.0.1:50051";
  // --tls-cert-file, --tls-key-file: the server's certificate chain and private key (PEM);
  // both or neither. With them the gRPC port serves TLS only (the metrics endpoint stays
  // plaintext on its own address).
  std::string tls_cert_file;
  std::string tls_key_file;
  // --tls-client-ca-file: CA certificates (PEM) that client certificates must chain to; with
  // it every client must present one (mutual TLS). Needs the certificate and key.
  std::string tls_client_ca_file;
  // --insecure: allow plaintext gRPC on an address that is not loopback (TLS is then
  // terminated elsewhere, by a mesh or a gateway). Without TLS such an address is refused.
  bool insecure = false;
  // --api-keys-file: the API keys (see api_keys.h); empty: none, every call is served as the
  // default tenant. Reloaded on SIGHUP.
  std::string api_keys_file;
  // --tenant-from-client-cert: a call without an API key is made for the tenant its verified
  // client certificate's subject CN names (needs --tls-client-ca-file).
  bool tenant_from_client_cert = false;
  // --client-cert-admins: certificate CNs with the admin role.
  std::vector<std::string> client_cert_admins;
  // Per-tenant limits (ResolveTenantLimits, tenant_limits.h, gives the ones in force); 0: no
  // limit; -1 (unset): a fair share with --api-keys-file, no limit without.
  // --tenant-max-prefix-bytes: bytes of prefix snapshots one tenant may hold.
  int64_t tenant_prefix_bytes = -1;
  // --tenant-max-queued-requests: requests of one tenant waiting for admission at most.
  // (--tenant-max-running-requests is in `scheduler`.)
  int64_t tenant_queued_requests = -1;
  // --tenant-max-sessions: sessions one tenant may hold open at once.
  int64_t tenant_max_sessions = -1;
  // --metrics-listen: address of the Prometheus /metrics endpoint; empty: off.
  std::string metrics_listen;
  // --http-listen: HOST:PORT of the OpenAI-compatible HTTP API (server/http_api/); empty: off.
  // It serves TLS with the gRPC port's certificates, and the same keys and tenants.
  std::string http_listen;
  // --http-workers: HTTP connections served at once; one more is answered 429.
  int http_workers = 64;
  // --http-max-body-bytes: larger HTTP request bodies are answered 413.
  int64_t http_max_body_bytes = int64_t{8} << 20;
  // --device: "cpu", "cuda" or "cuda:N".
  std::string device = "cpu";
  // --dtype: "float32", "bfloat16" or "float16".
  std::string dtype = "float32";
  // --weight-dtype: "auto", "float32", "bfloat16" or "float16" (TransformerOptions).
  std::string weight_dtype = "auto";
  // --bf16-compute: "auto" or "exact" (TransformerOptions::bf16_compute).
  std::string bf16_compute = "auto";
  // --threads: CPU threads for LibTorch; 0: every core.
  int threads = 0;
  // --max-batch-size, --max-batch-tokens, --max-queue.
  SchedulerOptions scheduler;
  // --max-new-tokens-limit and the stop-string limits.
  RequestLimits limits;
  // --max-forced-tokens: jump-forward tokens per sampled token under a constraint (0: off).
  int max_forced_tokens = 16;
  // --prefix-cache-bytes: budget of prefix snapshots (named and automatic); 0 (the default)
  // follows the device and the model: a quarter of the KV device budget on a GPU, four
  // full-context prompts within [64 MiB, 1 GiB] on the CPU.
  int64_t prefix_cache_bytes = 0;
  // --auto-prefix-cache / --no-auto-prefix-cache: keep prompts as automatic prefixes and
  // reuse the longest stored prefix of each prompt.
  bool auto_prefix_cache = true;
  // --auto-prefix-min-tokens: shortest prompt kept and shortest prefix reused automatically.
  int64_t auto_prefix_min_tokens = 32;
  // --prefix-kv-mode copy|shared: how a cached prefix reaches a request's cache when the
  // request does not say (shared: read in place where the strategy allows it).
  cache::PrefixKvMode prefix_kv_mode = cache::PrefixKvMode::kShared;
  // Tiers of automatic prefixes the device store evicts (cache/snapshot_tiers.h):
  // --prefix-host-bytes (0: no host tier), --prefix-disk-bytes (0: no disk tier) in
  // --prefix-disk-dir, and --prefix-retention-half-life-seconds.
  int64_t prefix_host_bytes = 0;
  int64_t prefix_disk_bytes = 0;
  std::string prefix_disk_dir;
  absl::Duration prefix_retention_half_life = absl::Minutes(10);
  // --kv-events-buffer: KV-event batches kept for subscribers that reconnect
  // (vllm.grpc.engine.VllmEngine/SubscribeKvEvents); an older one gets the whole state.
  int64_t kv_events_buffer = 4096;
  // Sessions (iterative chat; they live in memory only). --session-idle-offload-seconds: an
  // idle session's cache moves to host memory after this long unused (0: at once).
  absl::Duration session_idle_offload = absl::Seconds(60);
  // --session-cache-bytes: bytes idle sessions' caches may hold (device and host); the least
  // recently used are evicted beyond it.
  int64_t session_cache_bytes = int64_t{1} << 30;
  // --session-ttl-seconds: a session's life after its last use when it does not set one.
  absl::Duration session_ttl = absl::Minutes(30);
  // --max-sessions: sessions open at once at most.
  int64_t max_sessions = 1024;
  // --session-max-ttl-seconds: the longest life a session may ask for (longer ones, and the
  // --session-ttl-seconds default, are capped to it).
  absl::Duration session_max_ttl = absl::Hours(24);
  // --state-dir: where registered prefixes are kept across restarts; empty: nowhere.
  std::string state_dir;
  // --prefixes-file: prefixes (JSON or YAML, kvserve.v1.PrefixState) registered at start-up.
  std::string prefixes_file;
  // --kv-device-bytes: device bytes all KV caches may hold; going over moves the largest
  // caches to the host. < 0 (unset): unlimited on CPU, 90% of the free device memory at
  // start-up on CUDA.
  int64_t kv_device_bytes = -1;
  // --fault-inject-oom-rate: fraction of KV allocations that fail as out of memory (tests).
  double fault_inject_oom_rate = 0;
  // --log-format: "text" or "json".
  std::string log_format = "text";
  // --log-level: "trace", "debug", "info", "warn", "error", "critical" or "off". Access-log
  // lines are info.
  std::string log_level = "info";
  // --max-request-bytes: the largest request message gRPC accepts; bigger ones end with
  // RESOURCE_EXHAUSTED before they are parsed.
  int64_t max_request_bytes = int64_t{64} << 20;
  // --shutdown-grace-seconds: how long in-flight requests may run after SIGTERM.
  absl::Duration shutdown_grace = absl::Seconds(30);
  // Not a flag: the time of arrivals, deadlines, TTFT and prefix TTLs (tests inject a
  // base::FakeClock). Must outlive the server.
  const base::Clock* clock = base::RealClock::Get();
  // --replica-id: this replica's name in the x-kvserve-replica trailer of every response and
  // in GetModelInfo; empty: the HOST:PORT it listens on.
  std::string replica_id;

  // --version: print what this build is and exit (the other fields keep their defaults).
  bool version = false;

  // Parses the command line. InvalidArgument naming the flag for an unknown flag or a bad
  // value; `*help` is set (and the options are defaults) for --help, with the usage text in
  // `*usage`.
  static absl::StatusOr<ServerOptions> FromCommandLine(int argc, char** argv, bool* help,
                                                       std::string* usage);
  // Checks every field (ranges, known names, the TLS flags' combinations and the plaintext
  // non-loopback refusal). InvalidArgument naming the flag. Reads no file.
  absl::Status Validate() const;
  // Whether the gRPC port serves TLS (--tls-cert-file and --tls-key-file given).
  bool tls() const { return !tls_cert_file.empty(); }
};

// The contents of the TLS flags' files.
struct TlsFiles {
  std::string cert_chain_pem;
  std::string private_key_pem;
  std::string client_ca_pem;  // empty without --tls-client-ca-file
};

// Reads the files of --tls-cert-file, --tls-key-file and --tls-client-ca-file and checks that
// each holds PEM of the right kind (certificates, a private key). InvalidArgument naming the
// flag and the file for a file that is missing, unreadable, too big (over 1 MiB) or not PEM.
// Whether the key matches the certificate is for gRPC to find when it listens.
absl::StatusOr<TlsFiles> ReadTlsFiles(const ServerOptions& options);

// Whether `address` (a valid --listen value) can only be reached from this machine:
// 127.0.0.0/8, [::1], localhost or a unix: socket.
bool IsLoopbackAddress(const std::string& address);

}  // namespace kvserve::server
