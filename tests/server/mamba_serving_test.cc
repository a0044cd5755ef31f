// Mamba through a real in-process server: named and automatic prefixes resume from the stored
// states (only at a stored entry's exact end) and give the tokens of a cold run; session turns
// continue the states, and a rollback (which would need a crop) recomputes; beams after a
// prefix hit; strategies that need K/V refused naming the family and the strategy.
#include <gmock/gmock.h>
#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>

#include <google/protobuf/text_format.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/model_source.h"
#include "kvserve/v1/generation.grpc.pb.h"
#include "kvserve/v1/prefix.grpc.pb.h"
#include "kvserve/v1/session.grpc.pb.h"
#include "model/mamba_model.h"
#include "model/tiny_model_maker.h"
#include "server/engine.h"
#include "server/kv_server.h"
#include "server/model_fingerprint.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::server {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

LoadedModel TinyMamba() {
  absl::StatusOr<std::map<std::string, std::string>> files =
      model::MakeTinyModel({.arch = "mamba", .preset = "tiny", .seed = 2});
  EXPECT_TRUE(files.ok()) << files.status();
  const base::ModelSource source = base::ModelSource::FromMemory(*files);
  LoadedModel loaded;
  loaded.model = *model::LoadModel(source, {});
  loaded.tokenizer = *tokenizer::Tokenizer::FromJson(*source.ReadText("tokenizer.json"),
                                                     *source.ReadText("tokenizer_config.json"));
  loaded.fingerprint = *ModelFingerprint(source, loaded.model->info());
  loaded.name = "mamba";
  return loaded;
}

std::vector<int32_t> Ids(int n, int seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((seed * 131 + i * 17 + 3) % 250);
  return ids;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class MambaServingTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    options.threads = 1;
    options.auto_prefix_min_tokens = 8;
    absl::StatusOr<std::unique_ptr<KvServer>> server = KvServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    const absl::Status serving = server_->Serve(TinyMamba());
    ASSERT_TRUE(serving.ok()) << serving;
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    generation_ = v1::Generation::NewStub(channel);
    prefixes_ = v1::PrefixCache::NewStub(channel);
    sessions_ = v1::Sessions::NewStub(channel);
  }

  grpc::Status Register(const std::string& name, const std::vector<int32_t>& ids) {
    v1::RegisterPrefixRequest request;
    request.set_name(name);
    request.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
    v1::Prefix response;
    grpc::ClientContext context;
    return prefixes_->RegisterPrefix(&context, request, &response);
  }

  // Greedy generation of `max_new` tokens (`extra`: more request fields in text format).
  grpc::Status Call(const std::vector<int32_t>& ids, const std::string& extra,
                    v1::GenerateResponse* response, int max_new = 10) {
    v1::GenerateRequest request;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(extra, &request)) << extra;
    request.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
    request.mutable_sampling()->set_max_new_tokens(max_new);
    request.mutable_sampling()->set_ignore_eos(true);
    grpc::ClientContext context;
    return generation_->Generate(&context, request, response);
  }
  v1::GenerateResponse Generate(const std::vector<int32_t>& ids, const std::string& extra = "",
                                int max_new = 10) {
    v1::GenerateResponse response;
    const grpc::Status status = Call(ids, extra, &response, max_new);
    EXPECT_TRUE(status.ok()) << status.error_message() << " for " << extra;
    return response;
  }
  v1::GenerateResponse Cold(const std::vector<int32_t>& ids, int max_new = 10) {
    return Generate(ids, "cache { skip_prefix_reuse: true }", max_new);
  }

  std::unique_ptr<KvServer> server_;
  std::unique_ptr<v1::Generation::Stub> generation_;
  std::unique_ptr<v1::PrefixCache::Stub> prefixes_;
  std::unique_ptr<v1::Sessions::Stub> sessions_;
};

TEST_F(MambaServingTest, NamedPrefixResumesFromItsStates) {
  ServerOptions options;
  options.auto_prefix_cache = false;  // only the named prefix may supply cached tokens
  Start(options);
  const std::vector<int32_t> prefix = Ids(20, 1);
  ASSERT_TRUE(Register("sys", prefix).ok());
  const std::vector<int32_t> suffix = Ids(6, 9);
  const v1::GenerateResponse reused = Generate(suffix, R"pb(prefix: "sys")pb");
  const v1::GenerateResponse cold = Cold(Concat(prefix, suffix));
  EXPECT_THAT(reused.token_ids(), ElementsAreArray(cold.token_ids()));
  EXPECT_EQ(reused.usage().cached_tokens(), 20);
  EXPECT_EQ(reused.cache_report().prefix(), "sys");
  EXPECT_EQ(cold.usage().cached_tokens(), 0);
  // A prompt that is the prefix itself: the state after its last token cannot be cut back to
  // compute that token's logits, so nothing is reused.
  const v1::GenerateResponse whole = Generate(prefix);
  EXPECT_EQ(whole.usage().cached_tokens(), 0);
  EXPECT_THAT(whole.token_ids(), ElementsAreArray(Cold(prefix).token_ids()));
}

TEST_F(MambaServingTest, AutomaticPrefixHitsOnlyAtAStoredEnd) {
  Start();
  const std::vector<int32_t> first = Ids(24, 3);
  const v1::GenerateResponse a = Generate(first);
  EXPECT_EQ(a.usage().cached_tokens(), 0);
  // A prompt extending the stored one resumes at its end.
  const std::vector<int32_t> longer = Concat(first, Ids(7, 4));
  const v1::GenerateResponse warm = Generate(longer);
  EXPECT_EQ(warm.usage().cached_tokens(), 24);
  EXPECT_THAT(warm.token_ids(), ElementsAreArray(Cold(longer).token_ids()));
  // One sharing only 12 tokens with the stored prompts is a miss: a state cannot be cropped.
  const std::vector<int32_t> partial =
      Concat(std::vector<int32_t>(first.begin(), first.begin() + 12), Ids(9, 5));
  const v1::GenerateResponse miss = Generate(partial);
  EXPECT_EQ(miss.usage().cached_tokens(), 0);
  EXPECT_THAT(miss.token_ids(), ElementsAreArray(Cold(partial).token_ids()));
  // The longer prompt was stored too: the longest stored end wins.
  const std::vector<int32_t> longest = Concat(longer, Ids(3, 6));
  const v1::GenerateResponse hit = Generate(longest);
  EXPECT_EQ(hit.usage().cached_tokens(), 31);
  EXPECT_THAT(hit.token_ids(), ElementsAreArray(Cold(longest).token_ids()));
  EXPECT_GE(server_->engine()->Stats().prefixes.automatic_hits, 2);
}

TEST_F(MambaServingTest, SessionTurnsContinueTheStates) {
  Start();
  v1::Session session;
  {
    v1::CreateSessionRequest request;
    grpc::ClientContext context;
    ASSERT_TRUE(sessions_->CreateSession(&context, request, &session).ok());
  }
  const std::string turn = absl::StrCat("session: \"", session.id(), "\"");
  const std::vector<int32_t> first = Ids(12, 7);
  const v1::GenerateResponse t1 = Generate(first, turn, 6);
  std::vector<int32_t> history = Concat(first, {t1.token_ids().begin(), t1.token_ids().end()});
  const std::vector<int32_t> second = Ids(5, 8);
  const v1::GenerateResponse t2 = Generate(second, turn, 6);
  history = Concat(history, second);
  // Everything but the last answer token (never fed) comes from the session's states.
  EXPECT_EQ(t2.usage().cached_tokens(), 12 + 5);
  EXPECT_EQ(t2.cache_report().session_recompute_reason(), "");
  EXPECT_THAT(t2.token_ids(), ElementsAreArray(Cold(history, 6).token_ids()));
  history = Concat(history, {t2.token_ids().begin(), t2.token_ids().end()});

  // Rolling back needs a crop, which a state cannot do: the next turn recomputes, exactly.
  {
    v1::RollbackSessionRequest request;
    request.set_id(session.id());
    request.set_n(3);
    v1::Session after;
    grpc::ClientContext context;
    ASSERT_TRUE(sessions_->RollbackSession(&context, request, &after).ok());
    history.resize(history.size() - 3);
  }
  const std::vector<int32_t> third = Ids(4, 10);
  const v1::GenerateResponse t3 = Generate(third, turn, 6);
  history = Concat(history, third);
  EXPECT_THAT(t3.cache_report().session_recompute_reason(), HasSubstr("cannot be cropped"));
  EXPECT_THAT(t3.token_ids(), ElementsAreArray(Cold(history, 6).token_ids()));
}

TEST_F(MambaServingTest, BeamsFromAPrefixEqualBeamsFromScratch) {
  ServerOptions options;
  options.auto_prefix_cache = false;
  Start(options);
  const std::vector<int32_t> prefix = Ids(16, 11);
  ASSERT_TRUE(Register("sys", prefix).ok());
  const std::string beams = "sampling { num_beams: 3 num_return_sequences: 3 }";
  const std::vector<int32_t> suffix = Ids(4, 12);
  v1::GenerateResponse reused, cold;
  ASSERT_TRUE(Call(suffix, absl::StrCat("prefix: \"sys\" ", beams), &reused, 8).ok());
  ASSERT_TRUE(Call(Concat(prefix, suffix),
                   absl::StrCat("cache { skip_prefix_reuse: true } ", beams), &cold, 8)
                  .ok());
  EXPECT_EQ(reused.usage().cached_tokens(), 16);
  ASSERT_EQ(reused.sequences_size(), 3);
  ASSERT_EQ(cold.sequences_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(reused.sequences(i).token_ids(), ElementsAreArray(cold.sequences(i).token_ids()));
    EXPECT_NEAR(reused.sequences(i).score(), cold.sequences(i).score(), 1e-4);
  }
}

TEST_F(MambaServingTest, StrategiesThatNeedKeysAndValuesAreRefused) {
  Start();
  for (const char* impl : {"static", "offloaded", "offloaded_static", "quantized"}) {
    v1::GenerateResponse response;
    const grpc::Status status =
        Call(Ids(5, 1), absl::StrCat("cache { cache_implementation: \"", impl, "\" }"), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << impl;
    EXPECT_THAT(status.error_message(), HasSubstr(absl::StrCat("'", impl, "'")));
    EXPECT_THAT(status.error_message(), HasSubstr("mamba"));
  }
}

}  // namespace
}  // namespace kvserve::server
