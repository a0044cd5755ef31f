// HttpApiServer: routes, callers, request ids, the access log and metrics of the HTTP port;
// the generation endpoints run through GenerationCall (generation_call.h).
#include "server/http_api/http_server.h"

#include <httplib.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "base/string_cat.h"
#include "server/http_api/bounded_pool.h"
#include "server/http_api/generation_call.h"
#include "server/http_api/http_status.h"
#include "server/metrics.h"
#include "server/metrics_http_server.h"

namespace kvserve::server::http_api {

// The routes' handlers and the state they share.
class HttpApiServer::Handlers {
 public:
  explicit Handlers(const HttpApiOptions& options) : options_(options) {
    if (options.metrics != nullptr) {
      http_requests_ = &prometheus::BuildCounter()
                            .Name("kvserve_http_requests_total")
                            .Help(
                                "Requests of the OpenAI-compatible HTTP API, by method, path "
                                "and HTTP status")
                            .Register(*options.metrics->registry());
    }
  }

  void Attach(HttpServedModel model) {
    absl::MutexLock lock(&mu_);
    served_ = std::make_unique<const HttpServedModel>(std::move(model));
  }
  const HttpServedModel* served() const {
    absl::MutexLock lock(&mu_);
    return served_.get();
  }

  void Install(httplib::Server& http) {
    // Every route refuses first when its connection came while all workers were busy. The
    // refusal comes after httplib has read the request's body: closing a socket whose body is
    // still unread resets the connection, and the client would see that instead of the 429.
    http.Post("/v1/chat/completions",
              Route([this](const httplib::Request& req, httplib::Response& res) {
                Generation(Endpoint::kChatCompletions, req, res);
              }));
    http.Post("/v1/completions", Route([this](const httplib::Request& req, httplib::Response& res) {
                Generation(Endpoint::kCompletions, req, res);
              }));
    http.Get("/v1/models", Route([this](const httplib::Request& req, httplib::Response& res) {
               Models(req, res, "");
             }));
    http.Get(R"(/v1/models/([^/]+))",
             Route([this](const httplib::Request& req, httplib::Response& res) {
               Models(req, res, req.matches[1].str());
             }));
    http.Get("/health", Route([this](const httplib::Request& req, httplib::Response& res) {
               CallLog log = Begin(req, res);
               if (served() == nullptr) {
                 Fail(log, res, ToHttpError(absl::UnavailableError("the model is still loading")));
                 return;
               }
               res.set_content(R"({"status":"ok"})", "application/json");
               log.Finish(200, "OK", "ok");
             }));
    // Statuses httplib answers itself (404 no route, 413 body too large, 400 malformed) get
    // the OpenAI error object too.
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          CallLog log = Begin(req, res);
          HttpError error;
          error.status = res.status;
          error.type = "invalid_request_error";
          if (res.status == 404) {
            error.message = base::Cat("no route ", req.method, " ", req.path.substr(0, 128));
          } else if (res.status == 413) {
            error.message = base::Cat("the request body is larger than --http-max-body-bytes (",
                                      options_.max_body_bytes, ")");
          } else if (res.status == 405) {
            error.message = base::Cat(req.method, " is not allowed on ", req.path.substr(0, 128));
          } else {
            error.message = "malformed HTTP request";
          }
          Fail(log, res, error);
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          CallLog log = Begin(req, res);
          std::string what = "(not a std::exception)";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          Fail(log, res, ToHttpError(InternalError(log.request_id(), req.path, what)));
        });
  }

 private:
  // `handler`, or a 429 that closes the connection on an overflow worker.
  httplib::Server::Handler Route(httplib::Server::Handler handler) {
    return
        [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
          if (!BoundedPool::refusing()) {
            handler(req, res);
            return;
          }
          CallLog log = Begin(req, res);
          res.set_header("Connection", "close");
          Fail(log, res,
               ToHttpError(absl::ResourceExhaustedError(
                   "every HTTP worker is busy (--http-workers); retry later")));
        };
  }

  CallLog Begin(const httplib::Request& req, httplib::Response& res) {
    CallLog log(req, options_.metrics, http_requests_);
    res.set_header("x-request-id", log.request_id());
    return log;
  }

  void Fail(CallLog& log, httplib::Response& res, const HttpError& error) {
    res.status = error.status;
    res.set_content(ErrorBody(error), "application/json");
    log.Finish(error.status, error.message);
  }

  // The caller of `req`, or Unauthenticated.
  absl::StatusOr<Principal> Caller(const httplib::Request& req) const {
    Principal caller{.tenant = kDefaultTenant, .role = Role::kAdmin};
    const bool keys = options_.keys != nullptr;
    if (!keys && !options_.tenant_from_client_cert) return caller;
    const bool has_auth = req.has_header("Authorization");
    if (keys && (has_auth || !options_.tenant_from_client_cert)) {
      const std::string authorization = req.get_header_value("Authorization");
      return options_.keys->Authenticate(has_auth ? std::optional<std::string_view>(authorization)
                                                  : std::nullopt);
    }
    return CertificatePrincipal(req);
  }

  absl::StatusOr<Principal> CertificatePrincipal(const httplib::Request& req) const {
    const SSL* ssl = req.ssl;
    X509* cert = ssl != nullptr ? SSL_get_peer_certificate(ssl) : nullptr;
    if (cert == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
      if (cert != nullptr) X509_free(cert);
      return absl::UnauthenticatedError(
          "no API key: send 'Authorization: Bearer <key>' or a client certificate");
    }
    char cn[128] = {};
    const int length =
        X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
    X509_free(cert);
    const std::string name = length > 0 ? std::string(cn, length) : std::string();
    if (!IsValidTenantName(name)) {
      return absl::UnauthenticatedError(
          "the client certificate's subject CN is not a tenant name (1 to 64 characters of "
          "[A-Za-z0-9._-])");
    }
    const bool admin = std::find(options_.cert_admins.begin(), options_.cert_admins.end(), name) !=
                       options_.cert_admins.end();
    return Principal{.tenant = name, .role = admin ? Role::kAdmin : Role::kUser};
  }

  void Models(const httplib::Request& req, httplib::Response& res, const std::string& id) {
    CallLog log = Begin(req, res);
    const HttpServedModel* served = this->served();
    if (served == nullptr) {
      Fail(log, res, ToHttpError(absl::UnavailableError("the model is still loading; retry")));
      return;
    }
    absl::StatusOr<Principal> caller = Caller(req);
    if (!caller.ok()) {
      Fail(log, res, ToHttpError(caller.status()));
      return;
    }
    log.SetTenant(caller->tenant);
    const nlohmann::json model = {{"id", served->model_name},
                                  {"object", "model"},
                                  {"created", created_},
                                  {"owned_by", "kvserve"}};
    if (!id.empty() && id != served->model_name) {
      HttpError error = ToHttpError(
          absl::NotFoundError(base::Cat("the model '", id.substr(0, 128), "' does not exist")),
          "model");
      error.code = "model_not_found";
      Fail(log, res, error);
      return;
    }
    const nlohmann::json body =
        id.empty() ? nlohmann::json{{"object", "list"}, {"data", nlohmann::json::array({model})}}
                   : model;
    res.set_content(body.dump(), "application/json");
    log.Finish(200, "");
  }

  void Generation(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    auto log = std::make_shared<CallLog>(Begin(req, res));
    log->MarkGeneration();
    const HttpServedModel* served = this->served();
    if (served == nullptr) {
      Fail(*log, res, ToHttpError(absl::UnavailableError("the model is still loading; retry")));
      return;
    }
    absl::StatusOr<Principal> caller = Caller(req);
    if (!caller.ok()) {
      Fail(*log, res, ToHttpError(caller.status()));
      return;
    }
    log->SetTenant(caller->tenant);
    GenerationCall::Run(endpoint, *served, *caller, created_, req, res, std::move(log));
  }

  const HttpApiOptions& options_;
  prometheus::Family<prometheus::Counter>* http_requests_ = nullptr;
  const int64_t created_ = std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
  mutable absl::Mutex mu_;
  std::unique_ptr<const HttpServedModel> served_ ABSL_GUARDED_BY(mu_);
};

HttpApiServer::HttpApiServer(HttpApiOptions options)
    : options_(std::move(options)), handlers_(std::make_unique<Handlers>(options_)) {}

HttpApiServer::~HttpApiServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpApiServer>> HttpApiServer::Start(HttpApiOptions options) {
  absl::StatusOr<MetricsListenAddress> address = ParseMetricsListenAddress(options.listen);
  if (!address.ok()) {
    return absl::InvalidArgumentError(
        base::Cat("--http-listen '", options.listen.substr(0, 128), "' is not HOST:PORT"));
  }
  std::unique_ptr<HttpApiServer> server(new HttpApiServer(std::move(options)));
  const HttpApiOptions& o = server->options_;
  if (!o.tls_cert_file.empty()) {
    auto tls = std::make_unique<httplib::SSLServer>(
        o.tls_cert_file.c_str(), o.tls_key_file.c_str(),
        o.tls_client_ca_file.empty() ? nullptr : o.tls_client_ca_file.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(base::Cat("--tls-cert-file '", o.tls_cert_file,
                                                  "' and --tls-key-file '", o.tls_key_file,
                                                  "': the HTTP port cannot serve TLS with them"));
    }
    server->http_ = std::move(tls);
  } else {
    server->http_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& http = *server->http_;
  const int workers = o.workers;
  http.new_task_queue = [workers] { return new BoundedPool(workers, /*overflow_workers=*/2); };
  http.set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
  // Streamed events are small writes that must leave at once (Nagle would hold each until the
  // previous one is acknowledged).
  http.set_tcp_nodelay(true);
  http.set_keep_alive_max_count(1000);
  http.set_keep_alive_timeout(5);
  http.set_read_timeout(30);
  http.set_write_timeout(30);
  // httplib's own options add SO_REUSEPORT: a second server on a taken port would silently
  // share its connections. Only SO_REUSEADDR, as the gRPC port.
  // The listening socket is the last one these options are applied to (httplib tries each
  // address of the host until one binds).
  auto listener = std::make_shared<int>(-1);
  http.set_socket_options([listener](auto sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listener = static_cast<int>(sock);
  });
  server->handlers_->Install(http);
  const std::string host = address->host;
  if (address->port == 0) {
    server->port_ = http.bind_to_any_port(host);
  } else if (http.bind_to_port(host, address->port)) {
    server->port_ = address->port;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(
        base::Cat("--http-listen '", o.listen, "': cannot listen (is the port taken?)"));
  }
  // httplib 0.11 listens with a backlog of 5 (fixed when the library was built): a burst of
  // connections beyond it has its handshakes dropped and retried a second or more later.
  // Listening again on the bound socket raises the backlog to the system's limit.
  int accepting = 0;
  socklen_t size = sizeof(accepting);
  if (*listener >= 0 &&
      ::getsockopt(*listener, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) == 0 && accepting) {
    ::listen(*listener, SOMAXCONN);
  }
  server->thread_ = std::thread([&http] { http.listen_after_bind(); });
  return server;
}

void HttpApiServer::Attach(HttpServedModel model) { handlers_->Attach(std::move(model)); }

void HttpApiServer::Stop() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kvserve::server::http_api
