// kvserve: the server binary. Binds first (health NOT_SERVING), loads and warms the model,
// serves until SIGTERM or SIGINT, then shuts down gracefully.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "server/kv_server.h"
#include "server/logging.h"
#include "server/server_options.h"

namespace {

using kvserve::server::KvServer;
using kvserve::server::ServerOptions;

int Run(const ServerOptions& options, const sigset_t& signals) {
  absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
  if (!server.ok()) {
    spdlog::error("{}", std::string(server.status().message()));
    return 1;
  }
  // The first line on stdout: scripts and tests read the port from it.
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  std::printf("kvserve listening on %s:%d\n", host.c_str(), (*server)->port());
  std::fflush(stdout);
  if ((*server)->metrics_port() != 0) {
    spdlog::info("metrics on http://{}/metrics (port {})", options.metrics_listen,
                 (*server)->metrics_port());
  }

  // Load and warm the model while health says NOT_SERVING; a signal during loading is noticed
  // once loading ends.
  absl::StatusOr<kvserve::server::LoadedModel> model = kvserve::server::LoadModel(options);
  if (!model.ok()) {
    spdlog::error("cannot load the model: {}", std::string(model.status().message()));
    return 1;
  }
  absl::Status serving = (*server)->Serve(*std::move(model));
  if (!serving.ok()) {
    spdlog::error("cannot serve: {}", std::string(serving.message()));
    return 1;
  }
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: shutting down (grace {})", signal_number,
               absl::FormatDuration(options.shutdown_grace));
  (*server)->Shutdown(options.shutdown_grace);
  spdlog::info("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool help = false;
  std::string usage;
  absl::StatusOr<ServerOptions> options = ServerOptions::FromCommandLine(argc, argv, &help, &usage);
  if (!options.ok()) {
    std::cerr << "kvserve: " << options.status().message() << "\n";
    return 2;
  }
  if (help) {
    std::cout << usage;
    return 0;
  }
  kvserve::server::ConfigureLogging(options->log_format);
  // Every thread started from here on inherits the blocked signals; main waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return Run(*options, signals);
}
