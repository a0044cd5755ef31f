// Named and automatic prefix reuse through a real in-process server: equivalence with no
// reuse for every strategy and architecture, isolation of concurrent users of one snapshot,
// the PrefixCache RPCs, and persistence across a restart.
#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/clock.h"
#include "base/model_source.h"
#include "cache/cache_factory.h"
#include "cache/dynamic_layer.h"
#include "cache/prefix_store.h"
#include "cache/snapshot.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "model/tiny_model_maker.h"
#include "model/transformer.h"
#include "server/engine.h"
#include "server/kv_server.h"
#include "server/metrics.h"
#include "server/model_fingerprint.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The tiny preset of `arch` (mistral and gemma: sliding window 16), served from memory.
LoadedModel TinyModel(const std::string& arch) {
  absl::StatusOr<std::map<std::string, std::string>> files =
      model::MakeTinyModel({.arch = arch, .preset = "tiny", .seed = 2});
  EXPECT_TRUE(files.ok()) << files.status();
  const base::ModelSource source = base::ModelSource::FromMemory(*files);
  LoadedModel loaded;
  loaded.model = *model::Transformer::Load(source, {});
  loaded.tokenizer = *tokenizer::Tokenizer::FromJson(*source.ReadText("tokenizer.json"),
                                                     *source.ReadText("tokenizer_config.json"));
  loaded.fingerprint = *ModelFingerprint(source, loaded.model->info());
  loaded.name = arch;
  return loaded;
}

std::vector<int32_t> Ids(int n, int seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((seed * 131 + i * 17 + 3) % 250);
  return ids;
}

class PrefixServerTest : public ::testing::Test {
 protected:
  void Start(const std::string& arch, ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.threads = 1;
    options.auto_prefix_min_tokens = 8;
    absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const absl::Status serving = server_->Serve(TinyModel(arch));
    ASSERT_TRUE(serving.ok()) << serving;
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    generation_ = v1::Generation::NewStub(channel);
    prefixes_ = v1::PrefixCache::NewStub(channel);
  }

  grpc::Status Register(const std::string& name, const std::vector<int32_t>& ids,
                        v1::Prefix* prefix = nullptr, v1::PrefixOptions options = {}) {
    v1::RegisterPrefixRequest request;
    request.set_name(name);
    *request.mutable_options() = options;
    request.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
    v1::Prefix response;
    grpc::ClientContext context;
    grpc::Status status = prefixes_->RegisterPrefix(&context, request, &response);
    if (prefix != nullptr) *prefix = response;
    return status;
  }

  // Greedy generation of `max_new` tokens; with `prefix` the ids follow it.
  v1::GenerateResponse Generate(const std::string& prefix, const std::vector<int32_t>& ids,
                                const std::string& cache_text, bool skip_reuse = false,
                                int max_new = 12) {
    v1::GenerateRequest request;
    request.set_prefix(prefix);
    request.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
    request.mutable_sampling()->set_max_new_tokens(max_new);
    request.mutable_sampling()->set_ignore_eos(true);
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(cache_text, request.mutable_cache()));
    request.mutable_cache()->set_skip_prefix_reuse(skip_reuse);
    v1::GenerateResponse response;
    grpc::ClientContext context;
    grpc::Status status = generation_->Generate(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message() << " for " << cache_text;
    return response;
  }

  std::unique_ptr<KvServer> server_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::PrefixCache::Stub> prefixes_;
};

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const std::vector<std::string>& Strategies() {
  static const std::vector<std::string> strategies = {
      R"pb(cache_implementation: "dynamic")pb",
      R"pb(cache_implementation: "static")pb",
      R"pb(cache_implementation: "offloaded")pb",
      R"pb(cache_implementation: "offloaded_static")pb",
  };
  return strategies;
}

const std::vector<std::string>& QuantizedStrategies() {
  static const std::vector<std::string> strategies = {
      R"pb(cache_implementation: "quantized"
           quantization { backend: "hqq" nbits: 8 q_group_size: 16 residual_length: 4 })pb",
      R"pb(cache_implementation: "quantized"
           quantization { backend: "quanto" nbits: 4 q_group_size: 16 residual_length: 4 })pb",
      R"pb(cache_implementation: "quantized"
           quantization { backend: "fp8" })pb",
  };
  return strategies;
}

class PrefixEquivalenceTest : public PrefixServerTest,
                              public ::testing::WithParamInterface<std::string> {};

TEST_P(PrefixEquivalenceTest, RegisteredPrefixGivesTheTokensOfNoReuse) {
  const std::string arch = GetParam();
  ServerOptions options;
  options.auto_prefix_cache = false;  // only the named prefix may supply cached tokens
  Start(arch, options);
  // mistral's and gemma's window is 16: one prefix shorter than it, one longer.
  for (int prefix_length : {10, 40}) {
    const std::vector<int32_t> prefix = Ids(prefix_length, prefix_length);
    const std::vector<int32_t> suffix = Ids(7, 99);
    const std::string name = absl::StrCat("p", prefix_length);
    v1::Prefix registered;
    ASSERT_TRUE(Register(name, prefix, &registered).ok());
    EXPECT_EQ(registered.num_tokens(), prefix_length);
    std::vector<std::string> strategies = Strategies();
    // The reference refuses quantized caches with sliding layers (mistral, gemma).
    if (arch == "llama" || arch == "qwen3") {
      strategies.insert(strategies.end(), QuantizedStrategies().begin(),
                        QuantizedStrategies().end());
    }
    for (const std::string& cache : strategies) {
      const v1::GenerateResponse reused = Generate(name, suffix, cache);
      const v1::GenerateResponse cold = Generate("", Concat(prefix, suffix), cache, true);
      EXPECT_THAT(reused.token_ids(), ElementsAreArray(cold.token_ids()))
          << arch << " prefix " << prefix_length << " " << cache;
      EXPECT_EQ(reused.usage().cached_tokens(), prefix_length) << cache;
      EXPECT_EQ(reused.usage().prompt_tokens(), prefix_length + 7);
      EXPECT_EQ(reused.cache_report().prefix(), name);
      EXPECT_EQ(cold.usage().cached_tokens(), 0);
      EXPECT_EQ(cold.cache_report().prefix(), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, PrefixEquivalenceTest,
                         ::testing::Values("llama", "mistral", "qwen3", "gemma2", "gemma3"));

TEST_F(PrefixServerTest, AutomaticReuseOfASharedPromptPrefix) {
  Start("llama");
  const std::vector<int32_t> shared = Ids(30, 5);
  const v1::GenerateResponse first =
      Generate("", Concat(shared, Ids(5, 6)), R"pb(cache_implementation: "dynamic")pb");
  EXPECT_EQ(first.usage().cached_tokens(), 0);
  int k = 0;
  for (const std::string& cache : Strategies()) {
    // A new suffix each time: only the shared 30 tokens can come from the cache.
    const std::vector<int32_t> prompt = Concat(shared, Ids(6, 70 + k++));
    const v1::GenerateResponse warm = Generate("", prompt, cache);
    const v1::GenerateResponse cold = Generate("", prompt, cache, /*skip_reuse=*/true);
    EXPECT_EQ(warm.usage().cached_tokens(), 30) << cache;
    EXPECT_EQ(cold.usage().cached_tokens(), 0);
    EXPECT_THAT(warm.token_ids(), ElementsAreArray(cold.token_ids())) << cache;
    EXPECT_EQ(warm.cache_report().prefix(), "");
  }
  const cache::PrefixStoreStats stats = server_->engine()->Stats().prefixes;
  EXPECT_GE(stats.automatic_hits, 4);
  EXPECT_GE(stats.automatic_entries, 1);
}

TEST_F(PrefixServerTest, ConcurrentUsersOfOnePrefixEqualTheirSoloRunsAndLeaveItUnchanged) {
  ServerOptions options;
  options.scheduler.max_batch_size = 8;
  options.auto_prefix_cache = false;  // the solo runs must not feed the concurrent ones
  Start("llama", options);
  const std::vector<int32_t> prefix = Ids(24, 1);
  ASSERT_TRUE(Register("sys", prefix).ok());
  std::shared_ptr<const cache::Snapshot> snapshot =
      server_->engine()->catalog()->at("default/sys").snapshot.lock();
  ASSERT_NE(snapshot, nullptr);
  std::vector<at::Tensor> before;
  for (int l = 0; l < snapshot->num_layers(); ++l) {
    before.push_back(snapshot->keys(l).clone());
    before.push_back(snapshot->values(l).clone());
  }
  std::vector<std::string> caches = Strategies();
  caches.insert(caches.end(), QuantizedStrategies().begin(), QuantizedStrategies().end());
  std::vector<v1::GenerateResponse> solo(8), together(8);
  for (int i = 0; i < 8; ++i) solo[i] = Generate("sys", Ids(3 + i, 40 + i), caches[i % 7]);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back(
        [&, i] { together[i] = Generate("sys", Ids(3 + i, 40 + i), caches[i % 7]); });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_THAT(together[i].token_ids(), ElementsAreArray(solo[i].token_ids())) << i;
    EXPECT_EQ(together[i].usage().cached_tokens(), 24);
  }
  for (int l = 0; l < snapshot->num_layers(); ++l) {
    EXPECT_TRUE(at::equal(snapshot->keys(l), before[2 * l])) << "layer " << l;
    EXPECT_TRUE(at::equal(snapshot->values(l), before[2 * l + 1])) << "layer " << l;
  }
}

TEST_F(PrefixServerTest, PrefixCacheRpcs) {
  Start("llama");
  v1::Prefix prefix;
  ASSERT_TRUE(Register("a.b-c_1", Ids(12, 3), &prefix).ok());
  EXPECT_EQ(prefix.name(), "a.b-c_1");
  EXPECT_EQ(prefix.num_tokens(), 12);
  EXPECT_GT(prefix.bytes(), 0);
  EXPECT_EQ(prefix.fingerprint().size(), 16u);
  EXPECT_TRUE(prefix.options().pinned());
  EXPECT_EQ(prefix.options().cache_implementation(), "dynamic");
  // Idempotent, then replaced by other content.
  ASSERT_TRUE(Register("a.b-c_1", Ids(12, 3)).ok());
  ASSERT_TRUE(Register("a.b-c_1", Ids(20, 4), &prefix).ok());
  EXPECT_EQ(prefix.num_tokens(), 20);

  EXPECT_EQ(Register("bad name", Ids(3, 1)).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  {
    v1::RegisterPrefixRequest request;
    request.set_name("empty");
    v1::Prefix response;
    grpc::ClientContext context;
    grpc::Status status = prefixes_->RegisterPrefix(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), StartsWith("content:"));
  }
  v1::ListPrefixesResponse list;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(prefixes_->ListPrefixes(&context, v1::ListPrefixesRequest(), &list).ok());
  }
  ASSERT_EQ(list.prefixes_size(), 1);
  EXPECT_EQ(list.prefixes(0).name(), "a.b-c_1");
  {
    grpc::ClientContext context;
    v1::DeletePrefixRequest request;
    request.set_name("a.b-c_1");
    v1::DeletePrefixResponse response;
    EXPECT_TRUE(prefixes_->DeletePrefix(&context, request, &response).ok());
  }
  {
    grpc::ClientContext context;
    v1::GetPrefixRequest request;
    request.set_name("a.b-c_1");
    EXPECT_EQ(prefixes_->GetPrefix(&context, request, &prefix).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  v1::GenerateRequest request;
  request.set_prefix("a.b-c_1");
  request.mutable_token_ids()->add_ids(1);
  v1::GenerateResponse response;
  grpc::ClientContext context;
  grpc::Status status = generation_->Generate(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("'a.b-c_1'"));
}

TEST_F(PrefixServerTest, EachRequestNamingAPrefixCountsOneHit) {
  Start("llama");
  ASSERT_TRUE(Register("sys", Ids(24, 3)).ok());
  for (int k = 0; k < 3; ++k) {
    const v1::GenerateResponse response = Generate("sys", Ids(4, 40 + k), R"pb()pb");
    EXPECT_EQ(response.usage().cached_tokens(), 24);
  }
  v1::Prefix prefix;
  {
    grpc::ClientContext context;
    v1::GetPrefixRequest request;
    request.set_name("sys");
    ASSERT_TRUE(prefixes_->GetPrefix(&context, request, &prefix).ok());
  }
  EXPECT_EQ(prefix.hits(), 3);
  ASSERT_TRUE(server_->engine()->WaitIdle(absl::Seconds(30)));
  EXPECT_EQ(server_->engine()->Stats().prefixes.named_hits, 3);
  // The metrics follow the engine's published counts.
  const std::string expected = R"(kvserve_prefix_cache_hits_total{kind="named"} 3)";
  std::string text;
  for (int attempt = 0; attempt < 500; ++attempt) {
    text = server_->metrics().TextFormat();
    if (text.find(expected) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_THAT(text, HasSubstr(expected));
}

TEST_F(PrefixServerTest, RegisteredPrefixesComeBackAfterARestart) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / absl::StrCat("kvserve-state-", getpid())).string();
  std::filesystem::remove_all(dir);
  ServerOptions options;
  options.state_dir = dir;
  Start("llama", options);
  ASSERT_TRUE(Register("one", Ids(9, 1)).ok());
  ASSERT_TRUE(Register("two", Ids(14, 2)).ok());
  ASSERT_TRUE(Register("gone", Ids(5, 3)).ok());
  {
    grpc::ClientContext context;
    v1::DeletePrefixRequest request;
    request.set_name("gone");
    v1::DeletePrefixResponse response;
    ASSERT_TRUE(prefixes_->DeletePrefix(&context, request, &response).ok());
  }
  const v1::GenerateResponse before = Generate("two", Ids(4, 9), R"pb()pb");
  server_->Shutdown(absl::ZeroDuration());
  server_.reset();

  Start("llama", options);
  v1::ListPrefixesResponse list;
  grpc::ClientContext context;
  ASSERT_TRUE(prefixes_->ListPrefixes(&context, v1::ListPrefixesRequest(), &list).ok());
  ASSERT_EQ(list.prefixes_size(), 2);
  EXPECT_EQ(list.prefixes(0).name(), "one");
  EXPECT_EQ(list.prefixes(0).num_tokens(), 9);
  EXPECT_EQ(list.prefixes(1).name(), "two");
  EXPECT_EQ(list.prefixes(1).num_tokens(), 14);
  const v1::GenerateResponse after = Generate("two", Ids(4, 9), R"pb()pb");
  EXPECT_THAT(after.token_ids(), ElementsAreArray(before.token_ids()));
  EXPECT_EQ(after.usage().cached_tokens(), 14);
  std::filesystem::remove_all(dir);
}

TEST_F(PrefixServerTest, ExpiredAndEvictedNamedPrefixesAreGoneAfterARestart) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("kvserve-ttl-", getpid());
  std::filesystem::remove_all(dir);
  const model::ModelInfo info = TinyModel("llama").model->info();
  const int64_t token_bytes = 2 * info.num_layers * info.num_kv_heads * info.head_dim * 4;
  base::FakeClock clock(absl::FromUnixSeconds(1700000000));
  ServerOptions options;
  options.state_dir = dir.string();
  options.clock = &clock;
  options.auto_prefix_cache = false;
  options.prefix_cache_bytes = 40 * token_bytes;  // 40 tokens of snapshots
  Start("llama", options);
  v1::PrefixOptions expiring;
  expiring.set_ttl_seconds(2);
  v1::PrefixOptions unpinned;
  unpinned.set_pinned(false);
  ASSERT_TRUE(Register("a", Ids(10, 1), nullptr, expiring).ok());
  ASSERT_TRUE(Register("b", Ids(10, 2)).ok());
  clock.Advance(absl::Seconds(3));
  // "a" expired: its room serves "c".
  ASSERT_TRUE(Register("c", Ids(10, 3)).ok());
  ASSERT_TRUE(Register("x", Ids(10, 4), nullptr, unpinned).ok());
  // 15 more tokens do not fit beside b, c and x: the unpinned x is evicted.
  ASSERT_TRUE(Register("y", Ids(15, 5), nullptr, unpinned).ok());
  server_->Shutdown(absl::ZeroDuration());
  server_.reset();

  // The restart starts, and serves exactly what was live.
  Start("llama", options);
  v1::ListPrefixesResponse list;
  grpc::ClientContext context;
  ASSERT_TRUE(prefixes_->ListPrefixes(&context, v1::ListPrefixesRequest(), &list).ok());
  std::vector<std::string> names;
  for (const v1::Prefix& p : list.prefixes()) names.push_back(p.name());
  EXPECT_EQ(names, std::vector<std::string>({"b", "c", "y"}));
  // A deleted prefix stays deleted too.
  {
    grpc::ClientContext delete_context;
    v1::DeletePrefixRequest request;
    request.set_name("b");
    v1::DeletePrefixResponse response;
    ASSERT_TRUE(prefixes_->DeletePrefix(&delete_context, request, &response).ok());
  }
  server_->Shutdown(absl::ZeroDuration());
  server_.reset();
  Start("llama", options);
  v1::ListPrefixesResponse after;
  grpc::ClientContext list_context;
  ASSERT_TRUE(prefixes_->ListPrefixes(&list_context, v1::ListPrefixesRequest(), &after).ok());
  ASSERT_EQ(after.prefixes_size(), 2);
  EXPECT_EQ(after.prefixes(0).name(), "c");
  EXPECT_EQ(after.prefixes(1).name(), "y");
  // The server reads the clock until it stops: stop it before the clock goes.
  server_->Shutdown(absl::ZeroDuration());
  server_.reset();
  std::filesystem::remove_all(dir);
}

TEST_F(PrefixServerTest, QuantizedRequestsAfterUnrelatedTrafficEqualTheirColdRuns) {
  Start("llama");
  const std::vector<int32_t> shared = Ids(30, 5);
  // Unrelated dynamic traffic leaves the shared prompt in the automatic cache.
  for (int k = 0; k < 3; ++k) Generate("", Concat(shared, Ids(4, 50 + k)), R"pb()pb");
  const std::vector<std::string> backends = {"quanto", "fp8", "hqq"};
  int reused = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string cache = absl::StrCat(R"pb(cache_implementation: "quantized"
                                                quantization { backend: ")pb",
                                           backends[i % 3], R"pb(" })pb");
    const std::vector<int32_t> prompt = Concat(shared, Ids(5, 200 + i));
    const v1::GenerateResponse warm = Generate("", prompt, cache);
    const v1::GenerateResponse cold = Generate("", prompt, cache, /*skip_reuse=*/true);
    if (warm.usage().cached_tokens() > 0) ++reused;
    EXPECT_THAT(warm.token_ids(), ElementsAreArray(cold.token_ids())) << i << " " << cache;
  }
  EXPECT_EQ(reused, 20);
}

TEST_F(PrefixServerTest, PrefixesFileInJsonOrYamlIsRegisteredAtStartup) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("kvserve-prefixes-", getpid());
  std::filesystem::create_directories(dir);
  const std::string yaml = (dir / "prefixes.yaml").string();
  const std::string json = (dir / "prefixes.json").string();
  std::ofstream(yaml) << "prefixes:\n"
                         "  - name: support\n"
                         "    text: \"You are a helpful support agent.\"\n"
                         "    options: {pinned: true, ttl_seconds: 3600}\n"
                         "  - name: ids\n"
                         "    token_ids: {ids: [5, 6, 7, 8]}\n";
  std::ofstream(json) << R"({"prefixes": [{"name": "j", "tokenIds": {"ids": [1, 2, 3]}}]})";
  for (const std::string& file : {yaml, json}) {
    ServerOptions options;
    options.prefixes_file = file;
    Start("llama", options);
    v1::ListPrefixesResponse list;
    grpc::ClientContext context;
    ASSERT_TRUE(prefixes_->ListPrefixes(&context, v1::ListPrefixesRequest(), &list).ok());
    if (file == yaml) {
      ASSERT_EQ(list.prefixes_size(), 2);
      EXPECT_EQ(list.prefixes(0).name(), "ids");
      EXPECT_EQ(list.prefixes(0).num_tokens(), 4);
      EXPECT_EQ(list.prefixes(1).name(), "support");
      EXPECT_EQ(list.prefixes(1).options().ttl_seconds(), 3600);
    } else {
      ASSERT_EQ(list.prefixes_size(), 1);
      EXPECT_EQ(list.prefixes(0).num_tokens(), 3);
    }
    server_->Shutdown(absl::ZeroDuration());
    server_.reset();
  }
  // A malformed file stops start-up with a message naming it.
  std::ofstream(json) << "{\"prefixes\": [{\"nom\": 1}]}";
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.prefixes_file = json;
  auto server = KvServer::Start(options);
  ASSERT_TRUE(server.ok());
  const absl::Status serving = (*server)->Serve(TinyModel("llama"));
  EXPECT_EQ(serving.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(serving.message()), HasSubstr(json));
  std::filesystem::remove_all(dir);
}

// Logits, not only tokens: copying a snapshot and prefilling the suffix gives the logits of
// prefilling the whole prompt (within 1e-4), for every strategy. A quantized cache keeps the
// copied prefix at full precision until the suffix arrives and quantizes both in that one
// update, as a cold prefill of the whole prompt does.
TEST(SnapshotLogitsTest, CopiedPrefixThenSuffixMatchesRecomputation) {
  for (const std::string arch : {"llama", "mistral", "gemma2", "gemma3"}) {
    LoadedModel loaded = TinyModel(arch);
    model::Model& m = *loaded.model;
    const std::vector<int32_t> prefix = Ids(40, 3), suffix = Ids(7, 4);
    const std::vector<int32_t> whole = Concat(prefix, suffix);
    std::vector<std::unique_ptr<cache::CacheLayer>> layers;
    for (int64_t i = 0; i < m.info().num_layers; ++i) {
      layers.push_back(std::make_unique<cache::DynamicLayer>());
    }
    cache::KvCache capture(std::move(layers));
    ASSERT_TRUE(m.Forward({{{prefix, &capture, false}}}).ok());
    std::shared_ptr<const cache::Snapshot> snapshot =
        *cache::Snapshot::Capture(capture, prefix, loaded.fingerprint);
    std::vector<std::string> names = {"dynamic", "static", "offloaded", "offloaded_static"};
    if (arch == "llama") names.push_back("quantized");
    for (const std::string& name : names) {
      cache::CacheSpec spec = *cache::CacheSpec::Parse(name);
      if (spec.is_static()) spec.max_cache_len = 64;
      auto copied = *cache::MakeCache(spec, m.info().layer_specs);
      ASSERT_TRUE(snapshot->LoadInto(copied.get(), 40).ok());
      const at::Tensor reused = m.Forward({{{suffix, copied.get(), true}}})->logits[0];
      auto fresh = *cache::MakeCache(spec, m.info().layer_specs);
      const at::Tensor expected =
          m.Forward({{{whole, fresh.get(), true}}})->logits[0].narrow(0, 40, 7);
      EXPECT_LE((reused - expected).abs().max().item<float>(), 1e-4) << arch << " " << name;
    }
  }
}

}  // namespace
}  // namespace kvserve::server
