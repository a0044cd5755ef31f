// Tests of ServerOptions: defaults, every flag parsed, bad values refused naming the flag,
// --help.
#include "server/server_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvserve::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// The outcome of one command line.
struct Parsed {
  absl::StatusOr<ServerOptions> options;
  bool help = false;
  std::string usage;
};

// Runs FromCommandLine on "kvserve" followed by `args`.
Parsed Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "kvserve");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  Parsed parsed;
  parsed.options = ServerOptions::FromCommandLine(static_cast<int>(args.size()), argv.data(),
                                                  &parsed.help, &parsed.usage);
  return parsed;
}

// The message of a refused command line (empty when it was accepted).
std::string Error(std::vector<std::string> args) {
  const Parsed parsed = Parse(std::move(args));
  EXPECT_EQ(parsed.options.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(parsed.options.status().message());
}

TEST(ServerOptionsTest, NoFlagsGiveTheDocumentedDefaults) {
  const Parsed parsed = Parse({});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  EXPECT_FALSE(parsed.help);
  const ServerOptions& o = *parsed.options;
  EXPECT_EQ(o.model_dir, "");
  EXPECT_EQ(o.listen, "127.0.0.1:50051");
  EXPECT_EQ(o.metrics_listen, "");
  EXPECT_EQ(o.device, "cpu");
  EXPECT_EQ(o.dtype, "float32");
  EXPECT_EQ(o.threads, 0);
  EXPECT_EQ(o.scheduler.max_batch_size, 32);
  EXPECT_EQ(o.scheduler.max_batch_tokens, 2048);
  EXPECT_EQ(o.scheduler.max_queue, 256);
  EXPECT_EQ(o.limits.max_new_tokens_limit, 4096);
  EXPECT_EQ(o.prefix_cache_bytes, 0);  // follows the device and the model
  EXPECT_TRUE(o.auto_prefix_cache);
  EXPECT_EQ(o.auto_prefix_min_tokens, 32);
  EXPECT_EQ(o.state_dir, "");
  EXPECT_EQ(o.prefixes_file, "");
  EXPECT_EQ(o.kv_device_bytes, -1);
  EXPECT_EQ(o.fault_inject_oom_rate, 0.0);
  EXPECT_EQ(o.log_format, "text");
  EXPECT_EQ(o.log_level, "info");
  EXPECT_EQ(o.max_request_bytes, 64 << 20);
  EXPECT_EQ(o.limits.max_stop_strings, 16);
  EXPECT_EQ(o.limits.max_messages, 4096);
  EXPECT_EQ(o.limits.max_stop_token_ids, 1024);
  EXPECT_EQ(o.shutdown_grace, absl::Seconds(30));
  EXPECT_EQ(o.tls_cert_file, "");
  EXPECT_EQ(o.tls_key_file, "");
  EXPECT_EQ(o.tls_client_ca_file, "");
  EXPECT_FALSE(o.insecure);
  EXPECT_FALSE(o.tls());
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_TRUE(ServerOptions().Validate().ok());
}

TEST(ServerOptionsTest, EveryFlagIsParsed) {
  const Parsed parsed = Parse({"--model",
                               "/models/tiny",
                               "--listen",
                               "0.0.0.0:7000",
                               "--insecure",
                               "--metrics-listen=127.0.0.1:9100",
                               "--device",
                               "cuda:1",
                               "--dtype",
                               "bfloat16",
                               "--threads",
                               "3",
                               "--max-batch-size",
                               "4",
                               "--max-batch-tokens",
                               "64",
                               "--max-queue",
                               "9",
                               "--max-new-tokens-limit",
                               "100",
                               "--prefix-cache-bytes",
                               "1000",
                               "--no-auto-prefix-cache",
                               "--auto-prefix-min-tokens",
                               "8",
                               "--state-dir",
                               "/var/lib/kvserve",
                               "--prefixes-file",
                               "/etc/prefixes.yaml",
                               "--kv-device-bytes",
                               "123456",
                               "--fault-inject-oom-rate",
                               "0.25",
                               "--log-format",
                               "json",
                               "--log-level",
                               "warn",
                               "--max-request-bytes",
                               "1048576",
                               "--shutdown-grace-seconds",
                               "1.5"});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  const ServerOptions& o = *parsed.options;
  EXPECT_EQ(o.model_dir, "/models/tiny");
  EXPECT_EQ(o.listen, "0.0.0.0:7000");
  EXPECT_TRUE(o.insecure);
  EXPECT_EQ(o.metrics_listen, "127.0.0.1:9100");
  EXPECT_EQ(o.device, "cuda:1");
  EXPECT_EQ(o.dtype, "bfloat16");
  EXPECT_EQ(o.threads, 3);
  EXPECT_EQ(o.scheduler.max_batch_size, 4);
  EXPECT_EQ(o.scheduler.max_batch_tokens, 64);
  EXPECT_EQ(o.scheduler.max_queue, 9);
  EXPECT_EQ(o.limits.max_new_tokens_limit, 100);
  EXPECT_EQ(o.prefix_cache_bytes, 1000);
  EXPECT_FALSE(o.auto_prefix_cache);
  EXPECT_EQ(o.auto_prefix_min_tokens, 8);
  EXPECT_EQ(o.state_dir, "/var/lib/kvserve");
  EXPECT_EQ(o.prefixes_file, "/etc/prefixes.yaml");
  EXPECT_EQ(o.kv_device_bytes, 123456);
  EXPECT_EQ(o.fault_inject_oom_rate, 0.25);
  EXPECT_EQ(o.log_format, "json");
  EXPECT_EQ(o.log_level, "warn");
  EXPECT_EQ(o.max_request_bytes, 1 << 20);
  EXPECT_EQ(o.shutdown_grace, absl::Milliseconds(1500));
}

TEST(ServerOptionsTest, EqualsSignFormAndBooleanSwitchValues) {
  const Parsed on = Parse({"--max-batch-size=2", "--no-auto-prefix-cache=false"});
  ASSERT_TRUE(on.options.ok()) << on.options.status();
  EXPECT_EQ(on.options->scheduler.max_batch_size, 2);
  EXPECT_TRUE(on.options->auto_prefix_cache);
  const Parsed off = Parse({"--no-auto-prefix-cache=true"});
  ASSERT_TRUE(off.options.ok()) << off.options.status();
  EXPECT_FALSE(off.options->auto_prefix_cache);
}

TEST(ServerOptionsTest, BatchTokensBelowBatchSizeIsRefused) {
  EXPECT_THAT(Error({"--max-batch-size", "8", "--max-batch-tokens", "7"}),
              HasSubstr("--max-batch-tokens"));
  EXPECT_TRUE(Parse({"--max-batch-size", "8", "--max-batch-tokens", "8"}).options.ok());
}

TEST(ServerOptionsTest, UnknownDtypeIsRefused) {
  EXPECT_THAT(Error({"--dtype", "foo"}), StartsWith("--dtype 'foo'"));
}

TEST(ServerOptionsTest, WeightDtypeIsAutoOrAKnownDtype) {
  EXPECT_EQ(Parse({}).options->weight_dtype, "auto");
  EXPECT_EQ(Parse({"--weight-dtype", "bfloat16"}).options->weight_dtype, "bfloat16");
  EXPECT_THAT(Error({"--weight-dtype", "int8"}), StartsWith("--weight-dtype 'int8'"));
}

TEST(ServerOptionsTest, UnknownLogFormatIsRefused) {
  EXPECT_THAT(Error({"--log-format", "xml"}), StartsWith("--log-format 'xml'"));
}

TEST(ServerOptionsTest, FaultRateOutsideZeroToOneIsRefused) {
  EXPECT_THAT(Error({"--fault-inject-oom-rate", "2"}), HasSubstr("--fault-inject-oom-rate"));
  EXPECT_THAT(Error({"--fault-inject-oom-rate", "-0.5"}), HasSubstr("--fault-inject-oom-rate"));
  EXPECT_THAT(Error({"--fault-inject-oom-rate", "nan"}), HasSubstr("--fault-inject-oom-rate"));
  EXPECT_TRUE(Parse({"--fault-inject-oom-rate", "1"}).options.ok());
}

TEST(ServerOptionsTest, ZeroPrefixCacheBytesIsRefused) {
  EXPECT_THAT(Error({"--prefix-cache-bytes", "-1"}), HasSubstr("--prefix-cache-bytes"));
}

TEST(ServerOptionsTest, OtherOutOfRangeValuesNameTheirFlag) {
  EXPECT_THAT(Error({"--max-batch-size", "0"}), HasSubstr("--max-batch-size"));
  EXPECT_THAT(Error({"--max-queue", "0"}), HasSubstr("--max-queue"));
  EXPECT_THAT(Error({"--threads", "-1"}), HasSubstr("--threads"));
  EXPECT_THAT(Error({"--auto-prefix-min-tokens", "0"}), HasSubstr("--auto-prefix-min-tokens"));
  EXPECT_THAT(Error({"--max-new-tokens-limit", "0"}), HasSubstr("--max-new-tokens-limit"));
  EXPECT_THAT(Error({"--shutdown-grace-seconds", "-1"}), HasSubstr("--shutdown-grace-seconds"));
  EXPECT_THAT(Error({"--listen", ""}), HasSubstr("--listen"));
}

TEST(ServerOptionsTest, ListenPortOutOfRangeIsRefusedNotRemapped) {
  EXPECT_EQ(Error({"--listen", "127.0.0.1:99999"}),
            "--listen '127.0.0.1:99999' is not HOST:PORT with a port in [0, 65535]");
  EXPECT_THAT(Error({"--listen", "127.0.0.1"}), HasSubstr("--listen '127.0.0.1'"));
  EXPECT_THAT(Error({"--listen", "127.0.0.1:http"}), HasSubstr("--listen"));
  EXPECT_TRUE(Parse({"--listen", "[::1]:0"}).options.ok());
  EXPECT_TRUE(Parse({"--listen", "unix:/tmp/kvserve.sock"}).options.ok());
}

TEST(ServerOptionsTest, UnparsableListenAddressesNameTheFlagAndSayWhy) {
  EXPECT_EQ(Error({"--listen", ":50051"}),
            "--listen ':50051' has no host (0.0.0.0:PORT listens on every interface)");
  EXPECT_EQ(Error({"--listen", "::1:50051"}),
            "--listen '::1:50051' has an IPv6 host without brackets ([::1]:PORT)");
  EXPECT_EQ(Error({"--listen", "local host:1"}),
            "--listen 'local host:1' is not HOST:PORT: the host is not a host name or an IPv4 "
            "address");
  EXPECT_EQ(Error({"--listen", "[127.0.0.1]:1"}),
            "--listen '[127.0.0.1]:1' is not [IPV6]:PORT: the host is not an IPv6 address");
  EXPECT_THAT(Error({"--listen", "[::1:1"}), HasSubstr("is not HOST:PORT with a port"));
  EXPECT_THAT(Error({"--listen", "[::1]:65536"}), HasSubstr("is not HOST:PORT with a port"));
  EXPECT_THAT(Error({"--listen", "127.0.0.1:-1"}), HasSubstr("is not HOST:PORT with a port"));
  EXPECT_THAT(Error({"--listen", "127.0.0.1:"}), HasSubstr("is not HOST:PORT with a port"));
  EXPECT_EQ(Error({"--listen", "unix:"}), "--listen 'unix:' names no socket path");
  EXPECT_TRUE(Parse({"--listen", "localhost:65535"}).options.ok());
  EXPECT_TRUE(Parse({"--listen", "0.0.0.0:0", "--insecure"}).options.ok());
  EXPECT_TRUE(Parse({"--listen", "[::]:50051", "--insecure"}).options.ok());
}

TEST(ServerOptionsTest, MetricsListenIsCheckedWithTheOtherFlags) {
  EXPECT_EQ(Error({"--metrics-listen", "127.0.0.1:99999"}),
            "--metrics-listen '127.0.0.1:99999': the port must be a number in [0, 65535]");
  EXPECT_THAT(Error({"--metrics-listen", "nowhere"}), StartsWith("--metrics-listen 'nowhere'"));
  EXPECT_TRUE(Parse({"--metrics-listen", ":9100"}).options.ok());
}

TEST(ServerOptionsTest, LogLevelIsOneOfTheNamedLevels) {
  for (const char* level : {"trace", "debug", "info", "warn", "error", "critical", "off"}) {
    const Parsed parsed = Parse({"--log-level", level});
    ASSERT_TRUE(parsed.options.ok()) << level << ": " << parsed.options.status();
    EXPECT_EQ(parsed.options->log_level, level);
  }
  EXPECT_EQ(Error({"--log-level", "verbose"}),
            "--log-level 'verbose' is not one of trace, debug, info, warn, error, critical, off");
  EXPECT_THAT(Error({"--log-level", "INFO"}), HasSubstr("--log-level"));
}

TEST(ServerOptionsTest, MaxRequestBytesIsBounded) {
  EXPECT_EQ(Parse({"--max-request-bytes", "4096"}).options->max_request_bytes, 4096);
  EXPECT_EQ(Error({"--max-request-bytes", "4095"}),
            "--max-request-bytes must be in [4096, 2147483647] (got 4095)");
  EXPECT_THAT(Error({"--max-request-bytes", "2147483648"}), HasSubstr("--max-request-bytes"));
  EXPECT_THAT(Error({"--max-request-bytes", "64MB"}), HasSubstr("--max-request-bytes"));
}

TEST(ServerOptionsTest, ReplicaIdIsPrintableAndBounded) {
  const Parsed parsed = Parse({"--replica-id", "kvserve-0.kvserve"});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  EXPECT_EQ(parsed.options->replica_id, "kvserve-0.kvserve");
  EXPECT_THAT(Error({"--replica-id", std::string(129, 'r')}), HasSubstr("--replica-id"));
  EXPECT_THAT(Error({"--replica-id", "tab\there"}), HasSubstr("--replica-id"));
}

TEST(ServerOptionsTest, NonNumericValuesNameTheirFlag) {
  EXPECT_THAT(Error({"--max-batch-size", "many"}), HasSubstr("--max-batch-size"));
  EXPECT_THAT(Error({"--kv-device-bytes", "1GB"}), HasSubstr("--kv-device-bytes"));
  EXPECT_THAT(Error({"--shutdown-grace-seconds", "soon"}), HasSubstr("--shutdown-grace-seconds"));
}

TEST(ServerOptionsTest, UnknownFlagIsRefusedByName) {
  EXPECT_THAT(Error({"--max-batch-sise", "4"}), HasSubstr("--max-batch-sise"));
}

TEST(ServerOptionsTest, MissingValueIsRefused) {
  EXPECT_THAT(Error({"--listen"}), HasSubstr("--listen"));
}

TEST(ServerOptionsTest, VersionIsASwitchThatSkipsTheOtherFlags) {
  EXPECT_FALSE(Parse({}).options->version);
  const Parsed parsed = Parse({"--max-batch-size", "4", "--version"});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  EXPECT_TRUE(parsed.options->version);
  EXPECT_EQ(parsed.options->scheduler.max_batch_size, 32);
  EXPECT_THAT(parsed.usage, HasSubstr("--version"));
}

TEST(ServerOptionsTest, HelpSetsHelpAndFillsUsage) {
  const Parsed parsed = Parse({"--max-batch-size", "4", "--help"});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  EXPECT_TRUE(parsed.help);
  // The options are the defaults: flags next to --help are not applied.
  EXPECT_EQ(parsed.options->scheduler.max_batch_size, 32);
  EXPECT_THAT(parsed.usage, StartsWith("usage: kvserve [flags]\n"));
  EXPECT_THAT(parsed.usage, HasSubstr("--kv-device-bytes"));
  EXPECT_THAT(parsed.usage, HasSubstr("--no-auto-prefix-cache"));
  EXPECT_THAT(parsed.usage, HasSubstr("(default: 127.0.0.1:50051)"));
}

TEST(ServerOptionsTest, ValidateChecksAHandBuiltStruct) {
  ServerOptions o;
  o.scheduler.max_batch_size = 16;
  o.scheduler.max_batch_tokens = 15;
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("--max-batch-tokens"));
  o.scheduler.max_batch_tokens = 16;
  EXPECT_TRUE(o.Validate().ok());
  o.dtype = "float64";
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServerOptionsTest, SessionFlagsHaveTheirDefaultsAndAreParsed) {
  const Parsed defaults = Parse({});
  ASSERT_TRUE(defaults.options.ok()) << defaults.options.status();
  EXPECT_EQ(defaults.options->session_idle_offload, absl::Seconds(60));
  EXPECT_EQ(defaults.options->session_cache_bytes, int64_t{1} << 30);
  EXPECT_EQ(defaults.options->session_ttl, absl::Minutes(30));
  EXPECT_EQ(defaults.options->max_sessions, 1024);

  const Parsed parsed =
      Parse({"--session-idle-offload-seconds", "2.5", "--session-cache-bytes=4096",
             "--session-ttl-seconds", "90", "--max-sessions", "3"});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  const ServerOptions& o = *parsed.options;
  EXPECT_EQ(o.session_idle_offload, absl::Milliseconds(2500));
  EXPECT_EQ(o.session_cache_bytes, 4096);
  EXPECT_EQ(o.session_ttl, absl::Seconds(90));
  EXPECT_EQ(o.max_sessions, 3);

  // 0: an idle session's cache moves to the host at once.
  const Parsed at_once = Parse({"--session-idle-offload-seconds", "0"});
  ASSERT_TRUE(at_once.options.ok()) << at_once.options.status();
  EXPECT_EQ(at_once.options->session_idle_offload, absl::ZeroDuration());

  EXPECT_THAT(defaults.usage, HasSubstr("--session-idle-offload-seconds"));
  EXPECT_THAT(defaults.usage, HasSubstr("--session-cache-bytes"));
  EXPECT_THAT(defaults.usage, HasSubstr("--session-ttl-seconds"));
  EXPECT_THAT(defaults.usage, HasSubstr("--max-sessions"));
}

TEST(ServerOptionsTest, SessionFlagsOutOfRangeAreRefusedNamingTheFlag) {
  EXPECT_EQ(Error({"--session-idle-offload-seconds", "-1"}),
            "--session-idle-offload-seconds must be >= 0");
  EXPECT_EQ(Error({"--session-idle-offload-seconds", "nan"}),
            "--session-idle-offload-seconds must be >= 0");
  EXPECT_EQ(Error({"--session-ttl-seconds", "0"}), "--session-ttl-seconds must be > 0");
  EXPECT_EQ(Error({"--session-ttl-seconds", "-30"}), "--session-ttl-seconds must be > 0");
  EXPECT_EQ(Error({"--session-ttl-seconds", "nan"}), "--session-ttl-seconds must be > 0");
  EXPECT_EQ(Error({"--session-cache-bytes", "0"}), "--session-cache-bytes must be >= 1");
  EXPECT_EQ(Error({"--session-cache-bytes", "-4096"}), "--session-cache-bytes must be >= 1");
  EXPECT_EQ(Error({"--max-sessions", "0"}), "--max-sessions must be >= 1");
  EXPECT_THAT(Error({"--max-sessions", "many"}), HasSubstr("--max-sessions"));
  EXPECT_THAT(Error({"--session-cache-bytes", "1GiB"}), HasSubstr("--session-cache-bytes"));
  EXPECT_THAT(Error({"--session-ttl-seconds", "soon"}), HasSubstr("--session-ttl-seconds"));
  EXPECT_TRUE(Parse({"--session-cache-bytes", "1", "--max-sessions", "1"}).options.ok());

  ServerOptions o;
  o.session_cache_bytes = 0;
  EXPECT_EQ(o.Validate().message(), "--session-cache-bytes must be >= 1");
  o.session_cache_bytes = 1;
  o.max_sessions = 0;
  EXPECT_EQ(o.Validate().message(), "--max-sessions must be >= 1");
}

// Issue 27 items 15 and 16: per-tenant limits (unset: fair shares with keys), the sessions' TTL
// cap, and bounds on one request's rows x tokens and answer bytes.
TEST(ServerOptionsTest, TenantAndRequestBoundFlagsHaveTheirDefaultsAndAreParsed) {
  const Parsed defaults = Parse({});
  ASSERT_TRUE(defaults.options.ok()) << defaults.options.status();
  const ServerOptions& d = *defaults.options;
  EXPECT_EQ(d.tenant_max_sessions, -1);
  EXPECT_EQ(d.tenant_queued_requests, -1);
  EXPECT_EQ(d.tenant_prefix_bytes, -1);
  EXPECT_EQ(d.session_max_ttl, absl::Hours(24));
  EXPECT_EQ(d.limits.max_request_token_rows, 131072);
  EXPECT_EQ(d.limits.max_response_bytes, 16 << 20);
  for (const char* flag : {"--tenant-max-sessions", "--session-max-ttl-seconds",
                           "--max-request-token-rows", "--max-response-bytes"}) {
    EXPECT_THAT(defaults.usage, HasSubstr(flag));
  }

  const Parsed parsed =
      Parse({"--tenant-max-sessions", "3", "--tenant-max-queued-requests", "0",
             "--tenant-max-prefix-bytes=4096", "--session-max-ttl-seconds", "3600",
             "--max-request-token-rows", "1000", "--max-response-bytes", "0"});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  const ServerOptions& o = *parsed.options;
  EXPECT_EQ(o.tenant_max_sessions, 3);
  EXPECT_EQ(o.tenant_queued_requests, 0);
  EXPECT_EQ(o.tenant_prefix_bytes, 4096);
  EXPECT_EQ(o.session_max_ttl, absl::Hours(1));
  EXPECT_EQ(o.limits.max_request_token_rows, 1000);
  EXPECT_EQ(o.limits.max_response_bytes, 0);
}

TEST(ServerOptionsTest, TenantAndRequestBoundFlagsOutOfRangeAreRefusedNamingTheFlag) {
  EXPECT_EQ(Error({"--tenant-max-sessions", "-1"}), "--tenant-max-sessions must be >= 0");
  EXPECT_EQ(Error({"--tenant-max-prefix-bytes", "-1"}), "--tenant-max-prefix-bytes must be >= 0");
  EXPECT_EQ(Error({"--tenant-max-queued-requests", "-1"}),
            "--tenant-max-queued-requests must be in [0, 2^31)");
  EXPECT_EQ(Error({"--session-max-ttl-seconds", "0"}), "--session-max-ttl-seconds must be > 0");
  EXPECT_THAT(Error({"--session-ttl-seconds", "7200", "--session-max-ttl-seconds", "3600"}),
              HasSubstr("--session-ttl-seconds must be <= --session-max-ttl-seconds"));
  EXPECT_EQ(Error({"--max-request-token-rows", "-5"}),
            "--max-request-token-rows must be >= 0 (0: no limit)");
  EXPECT_EQ(Error({"--max-response-bytes", "-1"}),
            "--max-response-bytes must be >= 0 (0: no limit)");
  EXPECT_THAT(Error({"--max-response-bytes", "lots"}), HasSubstr("--max-response-bytes"));
}

TEST(ServerOptionsTest, TlsFlagsAreParsed) {
  const Parsed parsed =
      Parse({"--tls-cert-file", "/etc/kvserve/tls.crt", "--tls-key-file=/etc/kvserve/tls.key",
             "--tls-client-ca-file", "/etc/kvserve/clients.crt", "--listen", "0.0.0.0:50051"});
  ASSERT_TRUE(parsed.options.ok()) << parsed.options.status();
  EXPECT_EQ(parsed.options->tls_cert_file, "/etc/kvserve/tls.crt");
  EXPECT_EQ(parsed.options->tls_key_file, "/etc/kvserve/tls.key");
  EXPECT_EQ(parsed.options->tls_client_ca_file, "/etc/kvserve/clients.crt");
  EXPECT_TRUE(parsed.options->tls());
  EXPECT_FALSE(parsed.options->insecure);
  EXPECT_THAT(parsed.usage, HasSubstr("--tls-cert-file"));
  EXPECT_THAT(Parse({"--help"}).usage, HasSubstr("--tls-client-ca-file"));
  EXPECT_THAT(Parse({"--help"}).usage, HasSubstr("--insecure"));
}

TEST(ServerOptionsTest, CertificateAndKeyGoTogether) {
  EXPECT_EQ(Error({"--tls-cert-file", "/c.pem"}),
            "--tls-cert-file needs --tls-key-file (both or neither)");
  EXPECT_EQ(Error({"--tls-key-file", "/k.pem"}),
            "--tls-key-file needs --tls-cert-file (both or neither)");
  EXPECT_THAT(Error({"--tls-client-ca-file", "/ca.pem"}),
              StartsWith("--tls-client-ca-file needs --tls-cert-file and --tls-key-file"));
  EXPECT_THAT(Error({"--tls-client-ca-file", "/ca.pem", "--tls-key-file", "/k.pem"}),
              StartsWith("--tls-key-file needs --tls-cert-file"));
  EXPECT_THAT(Error({"--tls-cert-file"}), HasSubstr("--tls-cert-file"));
}

TEST(ServerOptionsTest, PlaintextOnANonLoopbackAddressNeedsInsecure) {
  for (const char* address :
       {"0.0.0.0:50051", "[::]:0", "10.1.2.3:7000", "kvserve.example:443", "[2001:db8::1]:1"}) {
    const std::string error = Error({"--listen", address});
    EXPECT_THAT(error, StartsWith(std::string("--listen '") + address + "' is not a loopback"));
    EXPECT_THAT(error, HasSubstr("--tls-cert-file"));
    EXPECT_THAT(error, HasSubstr("--insecure"));
    EXPECT_TRUE(Parse({"--listen", address, "--insecure"}).options.ok()) << address;
    EXPECT_TRUE(Parse({"--listen", address, "--insecure=true"}).options.ok()) << address;
    EXPECT_FALSE(Parse({"--listen", address, "--insecure=false"}).options.ok()) << address;
    EXPECT_TRUE(
        Parse({"--listen", address, "--tls-cert-file", "/c.pem", "--tls-key-file", "/k.pem"})
            .options.ok())
        << address;
  }
  for (const char* address :
       {"127.0.0.1:0", "127.1.2.3:50051", "[::1]:0", "localhost:1", "unix:/tmp/kvserve.sock"}) {
    EXPECT_TRUE(Parse({"--listen", address}).options.ok()) << address;
  }
  // A hand-built struct is held to the same rule.
  ServerOptions o;
  o.listen = "0.0.0.0:50051";
  EXPECT_THAT(std::string(o.Validate().message()), HasSubstr("--insecure"));
  o.insecure = true;
  EXPECT_TRUE(o.Validate().ok());
}

TEST(ServerOptionsTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:50051"));
  EXPECT_TRUE(IsLoopbackAddress("127.255.255.254:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:0"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/run/kvserve.sock"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:1"));
  EXPECT_FALSE(IsLoopbackAddress("128.0.0.1:1"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:1"));
  EXPECT_FALSE(IsLoopbackAddress("[::ffff:10.0.0.1]:1"));
  EXPECT_FALSE(IsLoopbackAddress("localhost.example:1"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1.example:1"));
}

// A temporary directory holding the files a test writes; removed with it.
class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_tls_files_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  ServerOptions Options(const std::string& cert, const std::string& key,
                        const std::string& ca = "") {
    ServerOptions o;
    o.tls_cert_file = cert;
    o.tls_key_file = key;
    o.tls_client_ca_file = ca;
    return o;
  }

  std::string Error(const ServerOptions& o) {
    const absl::StatusOr<TlsFiles> files = ReadTlsFiles(o);
    EXPECT_EQ(files.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(files.status().message());
  }

  static constexpr char kCert[] =
      "subject=CN=x\n-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  static constexpr char kKey[] = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";
  std::filesystem::path dir_;
};

TEST_F(TlsFilesTest, WithoutTlsNothingIsRead) {
  const absl::StatusOr<TlsFiles> files = ReadTlsFiles(ServerOptions());
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->cert_chain_pem, "");
}

TEST_F(TlsFilesTest, ReadsCertificateKeyAndClientCa) {
  const std::string cert = Write("tls.crt", kCert);
  const std::string rsa_key =
      Write("rsa.key", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n");
  const std::string ca = Write("ca.crt", kCert);
  absl::StatusOr<TlsFiles> files = ReadTlsFiles(Options(cert, Write("tls.key", kKey), ca));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->cert_chain_pem, kCert);
  EXPECT_EQ(files->private_key_pem, kKey);
  EXPECT_EQ(files->client_ca_pem, kCert);
  files = ReadTlsFiles(Options(cert, rsa_key));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->client_ca_pem, "");
}

TEST_F(TlsFilesTest, EachBadFileIsNamedByItsFlag) {
  const std::string cert = Write("tls.crt", kCert);
  const std::string key = Write("tls.key", kKey);
  const std::string missing = (dir_ / "missing.pem").string();
  EXPECT_EQ(Error(Options(missing, key)), "--tls-cert-file '" + missing + "': no such file");
  EXPECT_EQ(Error(Options(cert, missing)), "--tls-key-file '" + missing + "': no such file");
  EXPECT_EQ(Error(Options(cert, key, missing)),
            "--tls-client-ca-file '" + missing + "': no such file");
  EXPECT_THAT(Error(Options(dir_.string(), key)),
              StartsWith("--tls-cert-file '" + dir_.string() + "': is a directory"));
  // Not PEM, or PEM of the wrong kind: a key given as the certificate and the other way round.
  const std::string text = Write("text.txt", "hello\n");
  EXPECT_EQ(Error(Options(text, key)),
            "--tls-cert-file '" + text +
                "': is not PEM holding a CERTIFICATE (-----BEGIN ...CERTIFICATE----- block)");
  EXPECT_THAT(Error(Options(key, cert)), StartsWith("--tls-cert-file '" + key + "': is not PEM"));
  EXPECT_THAT(Error(Options(cert, cert)),
              StartsWith("--tls-key-file '" + cert + "': is not PEM holding a PRIVATE KEY"));
  EXPECT_THAT(Error(Options(cert, key, key)),
              StartsWith("--tls-client-ca-file '" + key + "': is not PEM"));
  const std::string unterminated = Write("open.crt", "-----BEGIN CERTIFICATE-----\nMIIB\n");
  EXPECT_THAT(Error(Options(unterminated, key)), HasSubstr("is not PEM"));
  const std::string empty = Write("empty.crt", "");
  EXPECT_THAT(Error(Options(empty, key)), HasSubstr("is not PEM"));
  const std::string huge = Write("huge.crt", std::string(kCert) + std::string(2 << 20, 'x'));
  EXPECT_THAT(Error(Options(huge, key)), HasSubstr("is over 1 MiB"));
  if (::geteuid() != 0) {
    const std::string unreadable = Write("unreadable.key", kKey);
    std::filesystem::permissions(unreadable, std::filesystem::perms::none);
    EXPECT_THAT(Error(Options(cert, unreadable)),
                StartsWith("--tls-key-file '" + unreadable + "': cannot read it: "));
  }
}

}  // namespace
}  // namespace kvserve::server
