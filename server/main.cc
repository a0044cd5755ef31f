// kvserve: the server binary. Binds first (health NOT_SERVING), loads and warms the model,
// serves until SIGTERM or SIGINT, then shuts down gracefully.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "kvserve_git_revision.h"  // generated at build time (server/git_revision.cmake)
#include "model/device_check.h"
#include "server/kv_server.h"
#include "server/logging.h"
#include "server/server_options.h"

namespace {

using kvserve::server::KvServer;

// The write end of the pipe the signal handler reports on. Any thread may take the signal
// (libraries start threads before main can block signals); the handler only writes one byte.
int g_signal_pipe[2] = {-1, -1};

void OnSignal(int signal_number) {
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] ssize_t written = ::write(g_signal_pipe[1], &byte, 1);
}

// Routes SIGTERM, SIGINT and SIGHUP to the pipe. False when the pipe or handler cannot be set up.
bool InstallSignalHandlers() {
  if (::pipe(g_signal_pipe) != 0) return false;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  return ::sigaction(SIGTERM, &action, nullptr) == 0 &&
         ::sigaction(SIGINT, &action, nullptr) == 0 && ::sigaction(SIGHUP, &action, nullptr) == 0;
}

// Blocks until a handled signal arrives; returns its number.
int WaitForSignal() {
  unsigned char byte = 0;
  while (::read(g_signal_pipe[0], &byte, 1) != 1) {
  }
  return byte;
}
using kvserve::server::ServerOptions;

int Run(const ServerOptions& options) {
  absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
  if (!server.ok()) {
    // An address that cannot be listened on is a configuration error, as a bad flag is.
    spdlog::error("{}", std::string(server.status().message()));
    return 2;
  }
  // The first line on stdout: scripts and tests read the port (or the socket's path) from it.
  std::printf("kvserve listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  if ((*server)->metrics_port() != 0) {
    spdlog::info("metrics on http://{}/metrics (port {})", options.metrics_listen,
                 (*server)->metrics_port());
  }

  // Load and warm the model while health says NOT_SERVING; a signal during loading is noticed
  // once loading ends (the pipe keeps it).
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
  int signal_number = WaitForSignal();
  // SIGHUP reloads the API keys; the other signals stop the server.
  while (signal_number == SIGHUP) {
    if (absl::Status reloaded = (*server)->ReloadApiKeys(); reloaded.ok()) {
      spdlog::info("signal {}: API keys reloaded", signal_number);
    } else {
      spdlog::error("signal {}: the API keys were not reloaded (the previous ones stay): {}",
                    signal_number, std::string(reloaded.message()));
    }
    signal_number = WaitForSignal();
  }
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
  if (options->version) {
    const kvserve::server::BuildVersions versions = kvserve::server::GetBuildVersions();
    std::cout << "kvserve " << versions.kvserve << "\ngit revision " << KVSERVE_GIT_REVISION
              << "\nLibTorch " << versions.torch << "\nCUDA " << versions.cuda << "\n";
    return 0;
  }
  // A device this build cannot use is refused before anything listens.
  if (absl::Status device = kvserve::model::CheckDeviceUsable(options->device); !device.ok()) {
    std::cerr << "kvserve: " << device.message() << "\n";
    return 2;
  }
  kvserve::server::ConfigureLogging(options->log_format, options->log_level);
  if (!InstallSignalHandlers()) {
    std::cerr << "kvserve: cannot install the SIGTERM/SIGINT handlers\n";
    return 1;
  }
  return Run(*options);
}
