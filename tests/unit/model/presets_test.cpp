// The embedded presets: all present, all parse and lower, match their files, round-trip through to_json, and
// have the published shapes where a published model is named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"
#include "unit/model/model_test_util.hpp"

namespace bsw {
namespace {

using nlohmann::json;

const std::vector<std::string> kExpectedPresets = {"bert-base", "gpt2-small",   "mlp",     "mlp-large",
                                                   "resnet-50", "resnet-small", "tiny-lm", "vit-base"};

TEST(Presets, NamesAreSortedAndComplete) {
  const std::vector<std::string> names = preset_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string& expected : kExpectedPresets)
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  EXPECT_TRUE(preset_text("no-such-preset").empty());
}

TEST(Presets, EmbeddedTextMatchesTheConfigFile) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    std::ifstream file(std::string(BSW_SOURCE_DIR) + "/configs/models/" + name + ".json", std::ios::binary);
    ASSERT_TRUE(file) << "no configs/models/" << name << ".json";
    std::stringstream text;
    text << file.rdbuf();
    EXPECT_EQ(preset_text(name), text.str());
  }
}

TEST(Presets, EveryPresetLoadsLowersAndIsNamedAfterItsFile) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelSpec m = load_model(name);
    EXPECT_EQ(m.name, name);
    EXPECT_EQ(m.source, "preset:" + name);
    const Graph g = lower(m);
    EXPECT_GT(g.parameters, 0);
    EXPECT_GT(g.forward_flops_per_sample, 0.0);
  }
}

TEST(Presets, RoundTripThroughToJson) {
  for (const std::string& name : preset_names()) {
    SCOPED_TRACE(name);
    const ModelSpec m = load_model(name);
    const json resolved = to_json(m);
    EXPECT_FALSE(resolved.contains("source"));
    test::expect_same_model(parse_model(resolved, m.source), m);
    // Through text as well: what `batchsweep` writes into a report must read back the same.
    test::expect_same_model(parse_model(json::parse(resolved.dump(2)), m.source), m);
    // Resolving is idempotent.
    EXPECT_EQ(to_json(parse_model(resolved, m.source)), resolved);
  }
}

TEST(Presets, ToJsonWritesEveryDefault) {
  const json j = to_json(load_model("tiny-lm"));
  EXPECT_EQ(j["loss"], "cross_entropy");
  EXPECT_EQ(j["optimizer"]["type"], "adamw");
  EXPECT_EQ(j["optimizer"]["beta1"], 0.9);
  EXPECT_EQ(j["optimizer"]["weight_decay"], 0.01);
  EXPECT_FALSE(j["optimizer"].contains("momentum"));
  const json& block = j["layers"][1];
  EXPECT_EQ(block["type"], "transformer_block");
  EXPECT_EQ(block["repeat"], 2);
  EXPECT_EQ(block["mlp_ratio"], 4);
  EXPECT_EQ(block["causal"], true);
  EXPECT_FALSE(block.contains("json_path"));
  EXPECT_FALSE(block.contains("out_features"));
  EXPECT_EQ(j["layers"][3]["bias"], true);
  EXPECT_EQ(j["layers"][3]["activation"], "none");
}

TEST(Presets, MlpIsSmall) {
  const Graph g = lower(load_model("mlp"));
  // The default model trains a batch of 256 in milliseconds on a small CPU: keep it under ~1 MFLOP per
  // sample.
  EXPECT_LT(g.forward_flops_per_sample, 1e6);
  EXPECT_EQ(g.output_shape, std::vector<int64_t>{10});
}

TEST(Presets, Gpt2SmallHasThePublishedShape) {
  const Graph g = lower(load_model("gpt2-small"));
  // GPT-2 small has 124,439,808 parameters with the LM head tied to the token embedding; here the head is a
  // separate bias-free linear 768 -> 50257.
  EXPECT_EQ(g.parameters, 124439808 + 768 * 50257);
  EXPECT_EQ(g.output_shape, (std::vector<int64_t>{1024, 50257}));
  EXPECT_EQ(g.tokens_per_sample, 1024);
}

TEST(Presets, VitBaseHasThePublishedShape) {
  const Graph g = lower(load_model("vit-base"));
  // ViT-B/16 has 86,567,656 parameters including a class token (768) and its position row (768), which
  // global_avgpool pooling does without.
  EXPECT_EQ(g.parameters, 86567656 - 2 * 768);
  EXPECT_EQ(g.output_shape, std::vector<int64_t>{1000});
}

TEST(Presets, BertBaseAndResnetSmallShapes) {
  const ModelSpec bert = load_model("bert-base");
  EXPECT_EQ(bert.input.sequence_length, 512);
  EXPECT_EQ(bert.input.vocab_size, 30522);
  const Graph bg = lower(bert);
  EXPECT_EQ(bg.output_shape, (std::vector<int64_t>{512, 30522}));

  const Graph rg = lower(load_model("resnet-small"));
  EXPECT_EQ(rg.input_shape, (std::vector<int64_t>{3, 32, 32}));
  EXPECT_EQ(rg.output_shape, std::vector<int64_t>{10});
  EXPECT_EQ(rg.max_residual_depth, 1);
}

// torchvision's resnet50 (v1.5: the stride on the 3x3 conv), with projection shortcuts at each stage's first
// block: its 25,557,032 parameters and 4.09 G multiply-adds per 224x224 image.
TEST(Presets, Resnet50IsTorchvisionsResnet50) {
  const Graph g = lower(load_model("resnet-50"));
  EXPECT_EQ(g.parameters, 25'557'032);
  EXPECT_DOUBLE_EQ(g.forward_flops_per_sample, 8'178'368'512.0);
  EXPECT_EQ(g.output_shape, std::vector<int64_t>{1000});
  int shortcuts = 0, blocks = 0;
  for (const Op& op : g.ops) {
    blocks += op.kind == OpKind::residual_add;
    shortcuts += op.kind == OpKind::residual_branch;
  }
  EXPECT_EQ(blocks, 16);
  EXPECT_EQ(shortcuts, 4);
}

}  // namespace
}  // namespace bsw
