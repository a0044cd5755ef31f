// OpenAiRequest: OpenAI request bodies to the request builder's typed inputs.
#include "server/http_api/openai_request.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "base/string_cat.h"
#include "cache/retention.h"
#include "server/request_builder.h"

namespace kvserve::server::http_api {
namespace {

using base::Cat;
using nlohmann::json;

const char* TypeName(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

// Reads the fields of one JSON object, each once; Unread lists what no reader took.
class Fields {
 public:
  Fields(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  // The field's value, nullptr when absent or null (null means "not set", as in OpenAI's API).
  const json* Get(std::string_view name) {
    taken_.emplace_back(name);
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string Path(std::string_view name) const { return Cat(prefix_, name); }

  absl::Status String(std::string_view name, std::string* out, bool required = false) {
    const json* v = Get(name);
    if (v == nullptr) {
      return required ? FieldError(Path(name), "is required") : absl::OkStatus();
    }
    if (!v->is_string()) return FieldError(Path(name), Cat("must be a string, not ", TypeName(*v)));
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  absl::Status Bool(std::string_view name, std::optional<bool>* out) {
    const json* v = Get(name);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_boolean()) {
      return FieldError(Path(name), Cat("must be a boolean, not ", TypeName(*v)));
    }
    *out = v->get<bool>();
    return absl::OkStatus();
  }
  absl::Status Number(std::string_view name, std::optional<double>* out) {
    const json* v = Get(name);
    if (v == nullptr) return absl::OkStatus();
    if (!v->is_number()) return FieldError(Path(name), Cat("must be a number, not ", TypeName(*v)));
    *out = v->get<double>();
    if (!std::isfinite(**out)) return FieldError(Path(name), "must be a finite number");
    return absl::OkStatus();
  }
  absl::Status Integer(std::string_view name, std::optional<int64_t>* out) {
    const json* v = Get(name);
    if (v == nullptr) return absl::OkStatus();
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() &&
          v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return FieldError(Path(name), "is too large");
      }
      *out = v->get<int64_t>();
      return absl::OkStatus();
    }
    return FieldError(Path(name), Cat("must be an integer, not ", TypeName(*v)));
  }

  // InvalidArgument naming the first field no reader took (and that is not null).
  absl::Status Unread() const {
    for (auto it = object_.begin(); it != object_.end(); ++it) {
      if (it->is_null()) continue;
      bool taken = false;
      for (const std::string& t : taken_) taken = taken || t == it.key();
      if (!taken) {
        return FieldError(Path(it.key()), "is not supported by kvserve (remove it)");
      }
    }
    return absl::OkStatus();
  }

 private:
  const json& object_;
  const std::string prefix_;
  std::vector<std::string> taken_;
};

absl::Status ReadBreakpoint(const json& value, const std::string& path,
                            CacheBreakpoint* breakpoint) {
  absl::Duration* ttl = &breakpoint->ttl;
  if (!value.is_object()) return FieldError(path, "must be an object");
  Fields f(value, path + ".");
  std::string type;
  std::string ttl_text = "5m";
  if (absl::Status s = f.String("type", &type, /*required=*/true); !s.ok()) return s;
  if (type != "ephemeral") return FieldError(path + ".type", "must be \"ephemeral\"");
  if (absl::Status s = f.String("ttl", &ttl_text); !s.ok()) return s;
  if (ttl_text == "5m") {
    *ttl = absl::Minutes(5);
  } else if (ttl_text == "1h") {
    *ttl = absl::Hours(1);
  } else {
    return FieldError(path + ".ttl", "must be \"5m\" or \"1h\"");
  }
  if (absl::Status s = f.String("retention", &breakpoint->retention); !s.ok()) return s;
  if (!breakpoint->retention.empty() && breakpoint->retention != "pinned" &&
      !cache::ParseRetentionClass(breakpoint->retention)) {
    return FieldError(path + ".retention", "must be \"pinned\", \"high\", \"normal\" or \"low\"");
  }
  return f.Unread();
}

// messages[]: roles and text content (a string, or an array of text parts joined by "\n"),
// with the cache_control breakpoints found on parts.
absl::Status ReadMessages(const json* messages, OpenAiRequest* out) {
  if (messages == nullptr) return FieldError("messages", "is required");
  if (!messages->is_array() || messages->empty()) {
    return FieldError("messages", "must be a non-empty array of messages");
  }
  std::vector<tokenizer::ChatMessage> chat;
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string path = Cat("messages[", i, "]");
    const json& m = (*messages)[i];
    if (!m.is_object()) return FieldError(path, "must be an object");
    Fields f(m, path + ".");
    tokenizer::ChatMessage message;
    if (absl::Status s = f.String("role", &message.role, /*required=*/true); !s.ok()) return s;
    if (message.role == "developer") message.role = "system";
    if (message.role != "system" && message.role != "user" && message.role != "assistant") {
      return FieldError(path + ".role",
                        "must be one of system, developer, user, assistant (tools are not "
                        "supported)");
    }
    const json* content = f.Get("content");
    if (content == nullptr) return FieldError(path + ".content", "is required");
    if (content->is_string()) {
      message.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const std::string part_path = Cat(path, ".content[", j, "]");
        const json& part = (*content)[j];
        if (!part.is_object()) return FieldError(part_path, "must be an object");
        Fields pf(part, part_path + ".");
        std::string type;
        std::string text;
        if (absl::Status s = pf.String("type", &type, /*required=*/true); !s.ok()) return s;
        if (type != "text") {
          return FieldError(part_path + ".type", "must be \"text\" (only text is supported)");
        }
        if (absl::Status s = pf.String("text", &text, /*required=*/true); !s.ok()) return s;
        if (j > 0) message.content += "\n";
        message.content += text;
        if (const json* cc = pf.Get("cache_control"); cc != nullptr) {
          CacheBreakpoint breakpoint;
          breakpoint.param = part_path + ".cache_control";
          if (absl::Status s = ReadBreakpoint(*cc, breakpoint.param, &breakpoint); !s.ok()) {
            return s;
          }
          if (static_cast<int>(out->breakpoints.size()) == kMaxCacheBreakpoints) {
            return FieldError(breakpoint.param, Cat("at most ", kMaxCacheBreakpoints,
                                                    " cache_control breakpoints per request"));
          }
          breakpoint.messages = chat;
          breakpoint.messages.push_back(message);
          out->breakpoints.push_back(std::move(breakpoint));
        }
        if (absl::Status s = pf.Unread(); !s.ok()) return s;
      }
    } else {
      return FieldError(path + ".content", Cat("must be a string or an array of text parts, not ",
                                               TypeName(*content)));
    }
    if (absl::Status s = f.Unread(); !s.ok()) return s;
    chat.push_back(std::move(message));
  }
  out->generation.input = PromptInput::Messages(std::move(chat));
  return absl::OkStatus();
}

// prompt: a string, an array of token ids, or an array holding one of either.
absl::Status ReadPrompt(const json* prompt, OpenAiRequest* out) {
  if (prompt == nullptr) return FieldError("prompt", "is required");
  const json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    p = &(*p)[0];
  }
  if (p->is_string()) {
    out->generation.input = PromptInput::Text(p->get<std::string>());
    return absl::OkStatus();
  }
  if (p->is_array()) {
    std::vector<int32_t> ids;
    for (const json& id : *p) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return FieldError("prompt",
                          "must be a string or an array of token ids (several prompts in one "
                          "request are not supported)");
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    out->generation.input = PromptInput::TokenIds(std::move(ids));
    return absl::OkStatus();
  }
  return FieldError("prompt", Cat("must be a string or an array of token ids, not ", TypeName(*p)));
}

absl::Status ReadStop(const json* stop, SamplingInput* sampling) {
  if (stop == nullptr) return absl::OkStatus();
  if (stop->is_string()) {
    sampling->stop.push_back(stop->get<std::string>());
    return absl::OkStatus();
  }
  if (!stop->is_array()) return FieldError("stop", "must be a string or an array of strings");
  for (const json& s : *stop) {
    if (!s.is_string()) return FieldError("stop", "must be a string or an array of strings");
    sampling->stop.push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

// The kvserve extension object: {"prefix", "session", "cache_implementation",
// "skip_prefix_reuse", "ignore_eos"}.
absl::Status ReadExtension(const json* ext, GenerationInput* generation) {
  if (ext == nullptr) return absl::OkStatus();
  if (!ext->is_object()) return FieldError("kvserve", "must be an object");
  Fields f(*ext, "kvserve.");
  if (absl::Status s = f.String("prefix", &generation->prefix); !s.ok()) return s;
  if (absl::Status s = f.String("session", &generation->session); !s.ok()) return s;
  std::string strategy;
  if (absl::Status s = f.String("cache_implementation", &strategy); !s.ok()) return s;
  std::optional<bool> skip;
  if (absl::Status s = f.Bool("skip_prefix_reuse", &skip); !s.ok()) return s;
  std::optional<bool> ignore_eos;
  if (absl::Status s = f.Bool("ignore_eos", &ignore_eos); !s.ok()) return s;
  generation->sampling.ignore_eos = ignore_eos.value_or(false);
  if (!strategy.empty() || skip.value_or(false)) {
    CacheInput cache;
    cache.cache_implementation = strategy;
    cache.skip_prefix_reuse = skip.value_or(false);
    generation->cache = cache;
  }
  return f.Unread();
}

// The text of the schema at `pointer` in the raw body, its keys in the order sent; `schema`'s
// own dump when the raw body is absent or does not parse.
std::string SchemaText(const json& schema, std::string_view raw_body,
                       const json::json_pointer& pointer) {
  if (!raw_body.empty()) {
    nlohmann::ordered_json ordered =
        nlohmann::ordered_json::parse(raw_body, nullptr, /*allow_exceptions=*/false);
    const nlohmann::ordered_json::json_pointer at(pointer.to_string());
    if (!ordered.is_discarded() && ordered.contains(at)) {
      const nlohmann::ordered_json& value = ordered.at(at);
      if (value.is_string()) return value.get<std::string>();
      return value.dump();
    }
  }
  return schema.is_string() ? schema.get<std::string>() : schema.dump();
}

// Sets the request's one output constraint, refusing a second one by name.
absl::Status SetConstraint(constraint::ConstraintSpec spec, std::string param, OpenAiRequest* out) {
  if (out->generation.sampling.constraint) {
    return FieldError(param, Cat("cannot be combined with ", out->constraint_param,
                                 ": a request has one output constraint"));
  }
  out->generation.sampling.constraint = std::move(spec);
  out->constraint_param = std::move(param);
  return absl::OkStatus();
}

// response_format: {"type": "text"}, {"type": "json_object"}, or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict", "description"}}.
absl::Status ReadResponseFormat(const json* format, std::string_view raw_body, OpenAiRequest* out) {
  using Kind = constraint::ConstraintSpec::Kind;
  if (format == nullptr) return absl::OkStatus();
  if (!format->is_object()) return FieldError("response_format", "must be an object");
  Fields f(*format, "response_format.");
  std::string type;
  if (absl::Status s = f.String("type", &type, /*required=*/true); !s.ok()) return s;
  constraint::ConstraintSpec spec;
  if (type == "text") {
    return f.Unread();
  } else if (type == "json_object") {
    spec.kind = Kind::kJsonObject;
    if (absl::Status s = f.Unread(); !s.ok()) return s;
    return SetConstraint(std::move(spec), "response_format", out);
  } else if (type != "json_schema") {
    return FieldError(
        "response_format.type",
        Cat("must be \"text\", \"json_object\" or \"json_schema\", not \"", type, "\""));
  }
  const json* js = f.Get("json_schema");
  if (js == nullptr) return FieldError("response_format.json_schema", "is required");
  if (!js->is_object()) return FieldError("response_format.json_schema", "must be an object");
  Fields jf(*js, "response_format.json_schema.");
  std::string name;
  std::string description;
  std::optional<bool> strict;
  if (absl::Status s = jf.String("name", &name, /*required=*/true); !s.ok()) return s;
  if (absl::Status s = jf.String("description", &description); !s.ok()) return s;
  if (absl::Status s = jf.Bool("strict", &strict); !s.ok()) return s;
  const json* schema = jf.Get("schema");
  spec.kind = Kind::kJsonSchema;
  if (schema == nullptr) {
    // OpenAI: no schema is any JSON value; kvserve keeps it to an object, as json_object.
    spec.kind = Kind::kJsonObject;
  } else if (!schema->is_object() && !schema->is_boolean()) {
    return FieldError("response_format.json_schema.schema", "must be a JSON Schema object");
  } else {
    spec.text =
        SchemaText(*schema, raw_body, json::json_pointer("/response_format/json_schema/schema"));
  }
  if (absl::Status s = jf.Unread(); !s.ok()) return s;
  if (absl::Status s = f.Unread(); !s.ok()) return s;
  return SetConstraint(std::move(spec), "response_format.json_schema.schema", out);
}

// vLLM's structured_outputs: {"json": schema, "regex": str, "choice": [str], "grammar": str,
// "json_object": bool}, exactly one of them; and its older guided_json, guided_regex,
// guided_choice, guided_grammar top-level fields.
absl::Status ReadStructuredOutputs(Fields& top, std::string_view raw_body, OpenAiRequest* out) {
  using Kind = constraint::ConstraintSpec::Kind;
  auto read = [&](Fields& f, const std::string& prefix, const std::string& json_key,
                  const std::string& regex_key, const std::string& choice_key,
                  const std::string& grammar_key, const std::string& pointer_base) -> absl::Status {
    if (const json* v = f.Get(json_key); v != nullptr && !v->is_null()) {
      if (!v->is_object() && !v->is_string() && !v->is_boolean()) {
        return FieldError(prefix + json_key, "must be a JSON Schema (an object or its text)");
      }
      constraint::ConstraintSpec spec;
      spec.kind = Kind::kJsonSchema;
      spec.text = SchemaText(*v, raw_body, json::json_pointer(pointer_base + json_key));
      if (absl::Status s = SetConstraint(std::move(spec), prefix + json_key, out); !s.ok()) {
        return s;
      }
    }
    for (const auto& [key, kind] :
         {std::pair{regex_key, Kind::kRegex}, std::pair{grammar_key, Kind::kGrammar}}) {
      std::string text;
      if (absl::Status s = f.String(key, &text); !s.ok()) return s;
      if (f.Get(key) == nullptr || f.Get(key)->is_null()) continue;
      constraint::ConstraintSpec spec;
      spec.kind = kind;
      spec.text = std::move(text);
      if (absl::Status s = SetConstraint(std::move(spec), prefix + key, out); !s.ok()) return s;
    }
    if (const json* v = f.Get(choice_key); v != nullptr && !v->is_null()) {
      if (!v->is_array()) return FieldError(prefix + choice_key, "must be an array of strings");
      constraint::ConstraintSpec spec;
      spec.kind = Kind::kChoice;
      for (const json& c : *v) {
        if (!c.is_string()) return FieldError(prefix + choice_key, "must be an array of strings");
        spec.choices.push_back(c.get<std::string>());
      }
      if (absl::Status s = SetConstraint(std::move(spec), prefix + choice_key, out); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  };
  if (const json* so = top.Get("structured_outputs"); so != nullptr) {
    if (!so->is_object()) return FieldError("structured_outputs", "must be an object");
    Fields f(*so, "structured_outputs.");
    if (absl::Status s = read(f, "structured_outputs.", "json", "regex", "choice", "grammar",
                              "/structured_outputs/");
        !s.ok()) {
      return s;
    }
    std::optional<bool> json_object;
    if (absl::Status s = f.Bool("json_object", &json_object); !s.ok()) return s;
    if (json_object.value_or(false)) {
      constraint::ConstraintSpec spec;
      spec.kind = Kind::kJsonObject;
      if (absl::Status s = SetConstraint(std::move(spec), "structured_outputs.json_object", out);
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = f.Unread(); !s.ok()) return s;
  }
  return read(top, "", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "/");
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Endpoint endpoint, const json& body,
                                                 std::string_view raw_body) {
  if (!body.is_object()) return FieldError("body", "must be a JSON object");
  OpenAiRequest out;
  out.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::kChatCompletions;
  Fields f(body, "");
  SamplingInput& sampling = out.generation.sampling;
  if (absl::Status s = f.String("model", &out.model, /*required=*/true); !s.ok()) return s;
  if (chat) {
    if (absl::Status s = ReadMessages(f.Get("messages"), &out); !s.ok()) return s;
  } else {
    if (absl::Status s = ReadPrompt(f.Get("prompt"), &out); !s.ok()) return s;
  }
  std::optional<int64_t> max_tokens;
  std::optional<int64_t> max_completion_tokens;
  if (absl::Status s = f.Integer("max_tokens", &max_tokens); !s.ok()) return s;
  if (chat) {
    if (absl::Status s = f.Integer("max_completion_tokens", &max_completion_tokens); !s.ok()) {
      return s;
    }
    if (max_tokens && max_completion_tokens) {
      return FieldError("max_completion_tokens",
                        "give max_tokens or max_completion_tokens, not both");
    }
  }
  if (max_completion_tokens) out.max_tokens_param = "max_completion_tokens";
  sampling.max_new_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  // The legacy completions endpoint generates 16 tokens unless told otherwise.
  if (!chat && !sampling.max_new_tokens) sampling.max_new_tokens = 16;
  std::optional<double> temperature;
  if (absl::Status s = f.Number("temperature", &temperature); !s.ok()) return s;
  if (temperature) {
    if (*temperature < 0 || *temperature > 2) return FieldError("temperature", "must be in [0, 2]");
    // 0 is greedy decoding, as OpenAI documents it.
    sampling.do_sample = *temperature > 0;
    if (*temperature > 0) sampling.temperature = *temperature;
  }
  if (absl::Status s = f.Number("top_p", &sampling.top_p); !s.ok()) return s;
  std::optional<int64_t> seed;
  if (absl::Status s = f.Integer("seed", &seed); !s.ok()) return s;
  if (seed) {
    if (*seed < 0) return FieldError("seed", "must be >= 0");
    sampling.seed = static_cast<uint64_t>(*seed);
  }
  if (absl::Status s = ReadStop(f.Get("stop"), &sampling); !s.ok()) return s;
  std::optional<int64_t> n;
  if (absl::Status s = f.Integer("n", &n); !s.ok()) return s;
  if (n) {
    if (*n < 1 || *n > 128) return FieldError("n", "must be in [1, 128]");
    out.n = static_cast<int>(*n);
    sampling.num_return_sequences = *n;
    // Several choices are independent samples; OpenAI samples at temperature 1 by default.
    if (*n > 1 && !sampling.do_sample) sampling.do_sample = true;
  }
  if (chat) {
    std::optional<bool> logprobs;
    std::optional<int64_t> top_logprobs;
    if (absl::Status s = f.Bool("logprobs", &logprobs); !s.ok()) return s;
    if (absl::Status s = f.Integer("top_logprobs", &top_logprobs); !s.ok()) return s;
    if (top_logprobs && !logprobs.value_or(false)) {
      return FieldError("top_logprobs", "needs logprobs: true");
    }
    if (top_logprobs && (*top_logprobs < 0 || *top_logprobs > kMaxTopLogprobs)) {
      return FieldError("top_logprobs", Cat("must be in [0, ", kMaxTopLogprobs, "]"));
    }
    sampling.logprobs = logprobs.value_or(false);
    sampling.top_logprobs = top_logprobs.value_or(0);
  } else {
    std::optional<int64_t> logprobs;
    if (absl::Status s = f.Integer("logprobs", &logprobs); !s.ok()) return s;
    if (logprobs) {
      if (*logprobs < 0 || *logprobs > 5) return FieldError("logprobs", "must be in [0, 5]");
      sampling.logprobs = true;
      sampling.top_logprobs = *logprobs;
    }
    std::optional<bool> echo;
    if (absl::Status s = f.Bool("echo", &echo); !s.ok()) return s;
    if (echo.value_or(false)) return FieldError("echo", "is not supported by kvserve");
  }
  std::optional<bool> stream;
  if (absl::Status s = f.Bool("stream", &stream); !s.ok()) return s;
  out.stream = stream.value_or(false);
  if (const json* options = f.Get("stream_options"); options != nullptr) {
    if (!out.stream) return FieldError("stream_options", "is only allowed with stream: true");
    if (!options->is_object()) return FieldError("stream_options", "must be an object");
    Fields so(*options, "stream_options.");
    std::optional<bool> include_usage;
    if (absl::Status s = so.Bool("include_usage", &include_usage); !s.ok()) return s;
    out.include_usage = include_usage.value_or(false);
    if (absl::Status s = so.Unread(); !s.ok()) return s;
  }
  if (absl::Status s = f.String("user", &out.user); !s.ok()) return s;
  if (absl::Status s = f.String("prompt_cache_key", &out.prompt_cache_key); !s.ok()) return s;
  if (absl::Status s = ReadExtension(f.Get("kvserve"), &out.generation); !s.ok()) return s;
  if (absl::Status s = ReadResponseFormat(f.Get("response_format"), raw_body, &out); !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadStructuredOutputs(f, raw_body, &out); !s.ok()) return s;
  if (!out.breakpoints.empty() && !out.generation.session.empty()) {
    return FieldError(out.breakpoints[0].param, "a session turn cannot register cache breakpoints");
  }
  if (absl::Status s = f.Unread(); !s.ok()) return s;
  return out;
}

absl::Status ToOpenAiParam(const absl::Status& status, const OpenAiRequest& request) {
  const std::string path = FieldPathOf(status);
  if (path.empty()) return status;
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  std::string param = path;
  auto starts = [&](std::string_view p) { return std::string_view(path).starts_with(p); };
  if (starts("sampling.max_new_tokens")) {
    param = request.max_tokens_param;
  } else if (starts("sampling.temperature") || starts("sampling.do_sample")) {
    param = "temperature";
  } else if (starts("sampling.top_p")) {
    param = "top_p";
  } else if (starts("sampling.seed")) {
    param = "seed";
  } else if (starts("sampling.stop")) {
    param = "stop";
  } else if (starts("sampling.num_return_sequences") || starts("sampling.num_beams")) {
    param = "n";
  } else if (starts("sampling.top_logprobs")) {
    param = chat ? "top_logprobs" : "logprobs";
  } else if (starts("prompt") || starts("token_ids") || starts("input") || starts("text")) {
    param = chat ? "messages" : "prompt";
  } else if (starts("template_kwargs")) {
    param = "messages";
  } else if (starts("prefix")) {
    param = "kvserve.prefix";
  } else if (starts("session")) {
    param = "kvserve.session";
  } else if (starts("cache")) {
    param = "kvserve.cache_implementation";
  } else if (starts("constraint") && !request.constraint_param.empty()) {
    param = request.constraint_param;
  }
  std::string message(status.message());
  if (message.rfind(path, 0) == 0) message.erase(0, path.size());
  return WithFieldPath(absl::Status(status.code(), Cat(param, message)), param);
}

}  // namespace kvserve::server::http_api
