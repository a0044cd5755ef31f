// GenerationCall: an OpenAI generation request through the builder and the engine.
#include "server/http_api/generation_call.h"

#include <httplib.h>
#include <openssl/ssl.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <initializer_list>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "base/string_cat.h"
#include "cache/snapshot.h"
#include "server/engine.h"
#include "server/http_api/connection_watch.h"
#include "server/http_api/http_status.h"
#include "server/http_api/openai_response.h"
#include "server/http_api/response_channel.h"
#include "server/logging.h"
#include "server/metrics.h"
#include "server/request_builder.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server::http_api {
namespace {

using nlohmann::json;

// How often a waiting request looks at its client.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(20);

bool IsAcceptableRequestId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
           c == '-';
  });
}

// The outcome label of a status without a summary ("invalid_argument", ...).
std::string OutcomeOf(int status) {
  switch (status) {
    case 200:
      return "ok";
    case 400:
      return "invalid_argument";
    case 401:
      return "unauthenticated";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 409:
      return "aborted";
    case 413:
    case 429:
      return "resource_exhausted";
    case 415:
      return "invalid_argument";
    case 499:
      return "cancelled";
    case 503:
      return "unavailable";
    case 504:
      return "deadline_exceeded";
    default:
      return status >= 500 ? "internal" : "invalid_argument";
  }
}

// A known route's path, or "other" (paths clients make up are no metric label).
std::string PathLabel(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health"}) {
    if (path == known) return known;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{model}";
  return "other";
}

// A 64-bit FNV-1a hash of token ids: the name of the prefix a breakpoint registers.
uint64_t HashIds(absl::Span<const int32_t> ids) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (int32_t id : ids) {
    for (int b = 0; b < 4; ++b) {
      h ^= static_cast<uint8_t>(static_cast<uint32_t>(id) >> (8 * b));
      h *= 0x100000001b3ULL;
    }
  }
  return h;
}

void SendError(httplib::Response& res, CallLog& log, const HttpError& error) {
  res.status = error.status;
  res.set_content(ErrorBody(error), "application/json");
  log.Finish(error.status, error.message);
}

void SendStatus(httplib::Response& res, CallLog& log, const absl::Status& status) {
  SendError(res, log, ToHttpError(status, FieldPathOf(status)));
}

// The deadline x-kvserve-timeout-ms sets (wall clock), InfiniteFuture without it.
absl::StatusOr<absl::Time> DeadlineOf(const httplib::Request& req) {
  if (!req.has_header(kTimeoutHeader)) return absl::InfiniteFuture();
  const std::string value = req.get_header_value(kTimeoutHeader);
  int64_t ms = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), ms);
  if (error != std::errc() || end != value.data() + value.size() || ms <= 0) {
    return WithFieldPath(absl::InvalidArgumentError(base::Cat(
                             kTimeoutHeader, ": must be a positive number of milliseconds")),
                         kTimeoutHeader);
  }
  return absl::Now() + absl::Milliseconds(ms);
}

// Registers the prompt up to each cache_control breakpoint as a named prefix of the caller's
// tenant (the prompt's longest common token prefix with the breakpoint's rendering, so that it
// is a prefix of this prompt and of every later one that repeats the conversation), waiting for
// each. Best effort: a registration the store refuses is logged; the request runs anyway.
// The request then starts from the longest of them (unless it names a prefix itself).
void RegisterBreakpoints(const OpenAiRequest& request, GenerationRequest& generation,
                         const HttpServedModel& served, const BuildContext& context,
                         const std::string& request_id) {
  std::optional<ResolvedPrefix> longest;
  auto consider = [&](std::optional<ResolvedPrefix> resolved) {
    if (!resolved) return;
    const std::vector<int32_t>& ids = resolved->tokens;
    if (ids.size() >= generation.prompt_ids.size() ||
        !std::equal(ids.begin(), ids.end(), generation.prompt_ids.begin())) {
      return;
    }
    if (!longest || longest->tokens.size() < ids.size()) longest = resolved;
  };
  for (const CacheBreakpoint& breakpoint : request.breakpoints) {
    // Templates that fold the system message into the first user turn render a conversation
    // that ends on a system message as nothing: it is also rendered with an empty turn after
    // it, and the longer common prefix wins.
    const std::vector<tokenizer::ChatMessage>& marked = breakpoint.messages;
    std::vector<tokenizer::ChatMessage> probe = marked;
    probe.push_back({.role = probe.back().role == "user" ? "assistant" : "user", .content = ""});
    const std::vector<int32_t>& prompt = generation.prompt_ids;
    size_t common = 0;
    for (const std::vector<tokenizer::ChatMessage>* messages :
         std::initializer_list<const std::vector<tokenizer::ChatMessage>*>{&marked, &probe}) {
      RegistrationInput rendered;
      rendered.name = "cc";
      rendered.content = PromptInput::Messages(*messages);
      absl::StatusOr<PrefixRegistration> tokens = served.builder->Registration(rendered, context);
      if (!tokens.ok()) continue;
      size_t n = 0;
      while (n < tokens->token_ids.size() && n + 1 < prompt.size() &&
             tokens->token_ids[n] == prompt[n]) {
        ++n;
      }
      common = std::max(common, n);
    }
    if (common == 0) continue;
    const absl::Span<const int32_t> ids(prompt.data(), common);
    const std::string name = absl::StrFormat("cache-control-%016x", HashIds(ids));
    if (std::optional<ResolvedPrefix> known =
            served.builder->ResolvePrefix(context.caller.tenant, name)) {
      // On the device, or in a lower tier that the request promotes it from.
      consider(std::move(known));
      continue;
    }
    RegistrationInput input;
    input.name = name;
    input.content = PromptInput::TokenIds(std::vector<int32_t>(ids.begin(), ids.end()));
    input.ttl_seconds = absl::ToInt64Seconds(breakpoint.ttl);
    input.retention = breakpoint.retention;
    absl::StatusOr<PrefixRegistration> registration = served.builder->Registration(input, context);
    if (!registration.ok()) {
      spdlog::warn("request {}: {} not registered: {}", request_id, breakpoint.param,
                   std::string(registration.status().message()));
      continue;
    }
    auto done = std::make_shared<absl::Notification>();
    auto status = std::make_shared<absl::Status>();
    served.engine->RegisterPrefix(
        registration->name, registration->token_ids, registration->strategy, registration->options,
        [done, status](absl::StatusOr<cache::PrefixInfo> info) {
          *status = info.status();
          done->Notify();
        },
        registration->encoder_ids);
    while (!done->WaitForNotificationWithTimeout(kWatchInterval)) {
      if ((context.cancelled && context.cancelled()) || absl::Now() > context.deadline) return;
    }
    if (!status->ok()) {
      spdlog::warn("request {}: {} not registered: {}", request_id, breakpoint.param,
                   std::string(status->message()));
      continue;
    }
    consider(served.builder->ResolvePrefix(context.caller.tenant, name));
  }
  if (longest && generation.prefix.empty()) {
    generation.prefix = longest->qualified_name;
    generation.prefix_snapshot = std::move(longest->snapshot);
  }
}

// A streamed answer: the content provider's state, which outlives the handler.
struct Stream {
  std::shared_ptr<ResponseChannel> channel;
  Engine* engine = nullptr;
  RequestId id = 0;
  ResponseHeader header;
  TokenText token_text;
  bool logprobs = false;
  bool include_usage = false;
  int n = 1;
  std::set<int> started;   // choices whose role was sent
  std::set<int> finished;  // choices whose finish_reason was sent
  bool done = false;       // [DONE] written
  std::unique_ptr<ConnectionWatch> watch;
  std::shared_ptr<CallLog> log;
};

void AppendEvent(std::string* out, const json& data) {
  absl::StrAppend(out, "data: ", data.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

// One call of httplib's content provider: what came since the last call, or the end, written
// in one piece (one TCP segment where it fits).
bool Pump(Stream& s, httplib::DataSink& sink) {
  ChannelBatch batch = s.channel->Take(kWatchInterval);
  std::string out;
  for (const SequenceDelta& delta : batch.deltas) {
    const bool role = s.started.insert(delta.index).second;
    if (!delta.text.empty() || !delta.logprobs.empty() || role) {
      AppendEvent(&out, DeltaChunk(s.header, delta, role, s.logprobs, s.token_text));
    }
    if (delta.finish && s.finished.insert(delta.index).second) {
      AppendEvent(&out, FinishChunk(s.header, delta.index, *delta.finish));
    }
  }
  if (batch.error) {
    const absl::Status& error = *batch.error;
    s.log->Finish(200, std::string(error.message()), OutcomeOf(HttpStatusOf(error.code())));
    AppendEvent(&out, json::parse(ErrorBody(ToHttpError(error))));
  } else if (batch.summary) {
    const GenerationSummary& summary = *batch.summary;
    for (int i = 0; i < std::max(s.n, summary.num_sequences); ++i) {
      if (s.finished.insert(i).second) {
        AppendEvent(&out, FinishChunk(s.header, i, summary.finish_reason));
      }
    }
    if (s.include_usage) AppendEvent(&out, UsageChunk(s.header, summary));
    out += "data: [DONE]\n\n";
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (batch.ended()) {
    if (batch.summary) {
      s.log->SetSummary(*batch.summary);
      s.log->Finish(200, "");
    }
    s.done = true;
    sink.done();
    return true;
  }
  // Nothing new: a client that went away ends the stream (the releaser cancels the request).
  return !out.empty() || !s.watch->PeerClosed();
}

}  // namespace

std::string HttpRequestId(const std::string& client_id) {
  if (IsAcceptableRequestId(client_id)) return client_id;
  static const uint64_t salt = [] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }();
  static std::atomic<uint64_t> counter{0};
  uint64_t x = salt + 0x9e3779b97f4a7c15ULL * (counter.fetch_add(1) + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return absl::StrFormat("%016x", x ^ (x >> 31));
}

absl::Status InternalError(const std::string& request_id, const std::string& path,
                           const std::string& what) {
  spdlog::error("request {} {}: unexpected exception: {}", request_id, path, what);
  return absl::InternalError(base::Cat("internal error while serving ", path,
                                       "; the server logged it under request id ", request_id));
}

CallLog::CallLog(const httplib::Request& req, ServerMetrics* metrics,
                 prometheus::Family<prometheus::Counter>* http_requests)
    : request_id_(HttpRequestId(req.get_header_value("x-request-id"))),
      method_(req.method),
      path_(PathLabel(req.path)),
      peer_(base::Cat("http:", req.remote_addr, ":", req.remote_port)),
      metrics_(metrics),
      http_requests_(http_requests),
      start_(std::chrono::steady_clock::now()) {}

CallLog::CallLog(CallLog&& other) noexcept
    : request_id_(std::move(other.request_id_)),
      method_(std::move(other.method_)),
      path_(std::move(other.path_)),
      peer_(std::move(other.peer_)),
      tenant_(std::move(other.tenant_)),
      metrics_(other.metrics_),
      http_requests_(other.http_requests_),
      start_(other.start_),
      generation_(other.generation_),
      counted_by_engine_(other.counted_by_engine_),
      finished_(other.finished_),
      prompt_tokens_(other.prompt_tokens_),
      summary_(std::move(other.summary_)) {
  other.finished_ = true;
}

CallLog::~CallLog() {
  if (!finished_) Finish(499, "the request ended without an answer");
}

void CallLog::Finish(int status, const std::string& error, std::string outcome) {
  if (finished_) return;
  finished_ = true;
  const double total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (outcome.empty()) {
    outcome = summary_ ? FinishReasonName(summary_->finish_reason) : OutcomeOf(status);
  }
  if (http_requests_ != nullptr) {
    http_requests_
        ->Add({{"method", method_ == "GET" || method_ == "POST" ? method_ : "other"},
               {"path", path_},
               {"status", std::to_string(status)}})
        .Increment();
  }
  if (generation_ && metrics_ != nullptr) {
    if (!counted_by_engine_) metrics_->CountRequest(outcome);
    metrics_->CountTenantRequest(tenant_, outcome);
    if (summary_) {
      metrics_->ObserveEndToEndLatency(total_seconds);
      if (summary_->ttft_ms > 0) {
        metrics_->ObservePrefillTime(std::max(0.0, summary_->ttft_ms - summary_->queue_ms) / 1000);
      }
    }
  }
  AccessRecord line;
  line.request_id = request_id_;
  line.tenant = tenant_;
  line.method = base::Cat(method_, " ", path_);
  line.peer = peer_;
  line.outcome = outcome;
  line.code = std::to_string(status);
  line.error = error;
  if (summary_) {
    line.prompt_tokens = summary_->prompt_tokens;
    line.cached_tokens = summary_->cached_tokens;
    line.completion_tokens = summary_->completion_tokens;
    if (summary_->queue_ms > 0 || summary_->ttft_ms > 0) line.queue_ms = summary_->queue_ms;
    if (summary_->ttft_ms > 0) line.ttft_ms = summary_->ttft_ms;
  } else if (generation_) {
    line.prompt_tokens = prompt_tokens_;
  }
  line.total_ms = total_seconds * 1000;
  LogAccess(line);
}

void GenerationCall::Run(Endpoint endpoint, const HttpServedModel& served, const Principal& caller,
                         int64_t created, const httplib::Request& req, httplib::Response& res,
                         std::shared_ptr<CallLog> log) {
  const absl::Time arrival = served.clock->Now();
  const std::string content_type = absl::AsciiStrToLower(req.get_header_value("Content-Type"));
  if (content_type.rfind("application/json", 0) != 0) {
    HttpError error =
        ToHttpError(absl::InvalidArgumentError("Content-Type must be application/json"));
    error.status = 415;
    SendError(res, *log, error);
    return;
  }
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::exception& e) {
    SendError(res, *log,
              ToHttpError(absl::InvalidArgumentError(
                  base::Cat("the body is not valid JSON (UTF-8): ", e.what()))));
    return;
  }
  absl::StatusOr<OpenAiRequest> request = ParseOpenAiRequest(endpoint, body, req.body);
  if (!request.ok()) {
    SendStatus(res, *log, request.status());
    return;
  }
  if (request->model != served.model_name) {
    HttpError error =
        ToHttpError(absl::NotFoundError(base::Cat("the model '", request->model.substr(0, 128),
                                                  "' does not exist; this server serves '",
                                                  served.model_name, "'")),
                    "model");
    error.code = "model_not_found";
    SendError(res, *log, error);
    return;
  }
  absl::StatusOr<absl::Time> deadline = DeadlineOf(req);
  if (!deadline.ok()) {
    SendStatus(res, *log, deadline.status());
    return;
  }
  auto watch = std::make_unique<ConnectionWatch>(req.remote_addr, req.remote_port, req.local_port,
                                                 req.ssl != nullptr ? SSL_get_fd(req.ssl) : -1);
  const ConnectionWatch* watch_ptr = watch.get();
  const BuildContext context{.deadline = *deadline,
                             .cancelled = [watch_ptr] { return watch_ptr->PeerClosed(); },
                             .caller = caller};
  absl::StatusOr<GenerationRequest> generation =
      served.builder->Generation(request->generation, context);
  if (!generation.ok()) {
    SendStatus(res, *log, ToOpenAiParam(generation.status(), *request));
    return;
  }
  generation->arrival_time = arrival;
  generation->deadline = *deadline == absl::InfiniteFuture() ? absl::InfiniteFuture()
                                                             : arrival + (*deadline - absl::Now());
  if (!request->breakpoints.empty()) {
    RegisterBreakpoints(*request, *generation, served, context, log->request_id());
  }
  log->SetPromptTokens(static_cast<int64_t>(generation->prompt_ids.size()));
  log->MarkCountedByEngine();
  auto channel = std::make_shared<ResponseChannel>();
  absl::StatusOr<RequestId> id = served.engine->Submit(*std::move(generation), channel);
  if (!id.ok()) {
    SendStatus(res, *log, id.status());
    return;
  }
  const tokenizer::Tokenizer* tokenizer = served.tokenizer;
  TokenText token_text = [tokenizer](int32_t token) {
    if (tokenizer == nullptr) return base::Cat("<", token, ">");
    return tokenizer->Decode(absl::Span<const int32_t>(&token, 1), /*skip_special_tokens=*/false);
  };
  ResponseHeader header{
      .endpoint = endpoint,
      .id = base::Cat(endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
                      log->request_id()),
      .created = created,
      .model = served.model_name};
  const bool logprobs = request->generation.sampling.logprobs;
  if (request->stream) {
    auto stream = std::make_shared<Stream>();
    stream->channel = channel;
    stream->engine = served.engine;
    stream->id = *id;
    stream->header = std::move(header);
    stream->token_text = std::move(token_text);
    stream->logprobs = logprobs;
    stream->include_usage = request->include_usage;
    stream->n = request->n;
    stream->watch = std::move(watch);
    stream->log = log;
    res.set_header("Cache-Control", "no-cache");
    // cpp-httplib 0.11 compresses text/* for a client that accepts gzip or br (the SDKs do),
    // and its compressor holds small writes back: events would arrive late, in bursts. The
    // stream goes out uncompressed.
    const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream](size_t, httplib::DataSink& sink) { return Pump(*stream, sink); },
        [stream](bool) {
          if (!stream->done) {
            stream->engine->Cancel(stream->id);
            stream->log->Finish(499, "the client closed the stream");
          }
        });
    return;
  }
  std::vector<Choice> choices(request->n);
  bool cancelled = false;
  while (true) {
    ChannelBatch batch = channel->Take(kWatchInterval);
    for (SequenceDelta& delta : batch.deltas) {
      if (delta.index >= static_cast<int>(choices.size())) choices.resize(delta.index + 1);
      Choice& choice = choices[delta.index];
      choice.text += delta.text;
      choice.logprobs.insert(choice.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
      if (delta.finish) choice.finish = delta.finish;
    }
    if (batch.error) {
      SendStatus(res, *log, *batch.error);
      return;
    }
    if (batch.summary) {
      log->SetSummary(*batch.summary);
      res.set_content(ResponseBody(header, choices, *batch.summary, logprobs, token_text)
                          .dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
      log->Finish(200, "");
      return;
    }
    if (!cancelled && watch_ptr->PeerClosed()) {
      served.engine->Cancel(*id);
      cancelled = true;
    }
  }
}

}  // namespace kvserve::server::http_api
