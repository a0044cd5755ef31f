// HttpApiServer: kvserve's OpenAI-compatible HTTP API (cpp-httplib, HTTP/1.1, TLS with the
// gRPC port's certificates): POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
// GET /health. Requests are read into the request builder's inputs, built by RequestBuilder and
// submitted to the Engine, as the gRPC adapter does; API keys, tenants, request ids, the
// access log and metrics are the server's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "server/api_keys.h"

namespace httplib {
class Server;
}  // namespace httplib
namespace kvserve::tokenizer {
class Tokenizer;
}  // namespace kvserve::tokenizer

namespace kvserve::server {
class Engine;
class RequestBuilder;
class ServerMetrics;
}  // namespace kvserve::server

namespace kvserve::server::http_api {

struct HttpApiOptions {
  // --http-listen: HOST:PORT ([IPV6]:PORT); port 0 picks a free one.
  std::string listen;
  // The gRPC port's TLS files (--tls-cert-file, --tls-key-file, --tls-client-ca-file); empty:
  // plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // --http-workers: connections served at once; a connection beyond them is answered 429.
  int workers = 64;
  // --http-max-body-bytes: larger request bodies are answered 413.
  int64_t max_body_bytes = int64_t{8} << 20;
  // Callers: API keys (Authorization: Bearer KEY; null: none) and tenants from verified client
  // certificates, as over gRPC. Must outlive the server.
  const ApiKeyRegistry* keys = nullptr;
  bool tenant_from_client_cert = false;
  std::vector<std::string> cert_admins;
  // Counts kvserve_http_requests_total{method,path,status} and the generation metrics the
  // gRPC calls count. Must outlive the server.
  ServerMetrics* metrics = nullptr;
};

// What the server serves once the model is loaded; every pointer must outlive the server.
struct HttpServedModel {
  Engine* engine = nullptr;
  const RequestBuilder* builder = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;    // null: logprobs name tokens by id
  std::string model_name;                             // the `model` requests must name
  const base::Clock* clock = base::RealClock::Get();  // the engine's
};

// Thread-safe. Until Attach, /health is 503 and every other endpoint 503 "loading".
class HttpApiServer {
 public:
  // Binds `options.listen` and starts serving on its own threads. InvalidArgument naming the
  // flag for bad TLS files; Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpApiServer>> Start(HttpApiOptions options);
  ~HttpApiServer();
  HttpApiServer(const HttpApiServer&) = delete;
  HttpApiServer& operator=(const HttpApiServer&) = delete;

  // Starts serving `model`. Call once.
  void Attach(HttpServedModel model);
  // Stops accepting, ends the connections and joins the threads. Idempotent. Live requests
  // should have been ended by the engine first.
  void Stop();

  int port() const { return port_; }

 private:
  class Handlers;
  explicit HttpApiServer(HttpApiOptions options);

  const HttpApiOptions options_;
  std::unique_ptr<Handlers> handlers_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace kvserve::server::http_api
