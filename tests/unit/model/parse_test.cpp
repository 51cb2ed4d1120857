// parse_model: defaults, JSON paths, and a table of bad documents with the path and words each error must
// carry.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/model.hpp"
#include "unit/model/model_test_util.hpp"

namespace bsw {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr const char* kSource = "test.json";

// A small valid model; bad cases below edit one thing in it.
json base_model() {
  return json::parse(R"({
    "name": "t",
    "input": {"type": "vector", "features": 16},
    "layers": [{"type": "linear", "out_features": 8, "activation": "relu"},
               {"type": "linear", "out_features": 4}]
  })");
}

json token_model() {
  return json::parse(R"({
    "name": "t",
    "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 50},
    "layers": [{"type": "embedding", "dim": 32},
               {"type": "transformer_block", "heads": 4},
               {"type": "linear", "out_features": 50}]
  })");
}

json image_model() {
  return json::parse(R"({
    "name": "t",
    "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
    "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
               {"type": "residual", "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3,
                                                "padding": 1, "activation": "relu"}]},
               {"type": "maxpool2d", "kernel_size": 2},
               {"type": "flatten"},
               {"type": "linear", "out_features": 10}]
  })");
}

// A name titles tables and lines: C0 controls, DEL and the C1 controls (U+0080..U+009F, U+0085 a line break
// to some readers, U+009B a terminal escape) are refused; other non-ASCII letters are a name.
TEST(ParseModel, ANameWithControlCharactersIsRefused) {
  for (const char* name : {"a\nb", "a\x1b[31mb", "a\x7f",
                           "a\xc2\x85"
                           "b",
                           "a\xc2\x9b"
                           "31m"}) {
    json doc = base_model();
    doc["name"] = name;
    try {
      (void)parse_model(doc, kSource);
      ADD_FAILURE() << "accepted " << name;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("name: must not contain control characters"));
    }
  }
  json doc = base_model();
  doc["name"] = "r\xc3\xa9seau-\xc2\xa0\xe6\xa8\xa1\xe5\x9e\x8b";  // é, a no-break space, CJK
  EXPECT_NO_THROW((void)parse_model(doc, kSource));
}

TEST(ParseModel, AppliesDefaults) {
  const ModelSpec m = parse_model(base_model(), kSource);
  EXPECT_EQ(m.name, "t");
  EXPECT_EQ(m.source, kSource);
  EXPECT_EQ(m.input.type, InputType::vector);
  EXPECT_EQ(m.input.features, 16);
  ASSERT_EQ(m.layers.size(), 2u);
  EXPECT_EQ(m.layers[0].activation, Activation::relu);
  EXPECT_TRUE(m.layers[0].bias);
  EXPECT_EQ(m.layers[0].repeat, 1);
  EXPECT_EQ(m.layers[1].activation, Activation::none);
  EXPECT_EQ(m.loss, LossType::cross_entropy);
  EXPECT_EQ(m.optimizer.type, OptimizerType::adamw);
  EXPECT_DOUBLE_EQ(m.optimizer.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(m.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(m.optimizer.beta2, 0.999);
  EXPECT_DOUBLE_EQ(m.optimizer.eps, 1e-8);
  EXPECT_DOUBLE_EQ(m.optimizer.weight_decay, 0.01);
}

TEST(ParseModel, SgdDefaultsAndOverrides) {
  json doc = base_model();
  doc["optimizer"] = {{"type", "sgd"}};
  ModelSpec m = parse_model(doc, kSource);
  EXPECT_EQ(m.optimizer.type, OptimizerType::sgd);
  EXPECT_DOUBLE_EQ(m.optimizer.learning_rate, 0.01);
  EXPECT_DOUBLE_EQ(m.optimizer.momentum, 0.9);
  doc["optimizer"] = {{"type", "sgd"}, {"learning_rate", 0.5}, {"momentum", 0}};
  m = parse_model(doc, kSource);
  EXPECT_DOUBLE_EQ(m.optimizer.learning_rate, 0.5);
  EXPECT_DOUBLE_EQ(m.optimizer.momentum, 0.0);
  EXPECT_DOUBLE_EQ(m.optimizer.weight_decay, 0.0);  // torch.optim.SGD's default, not adamw's 0.01
  EXPECT_FALSE(m.optimizer.nesterov);
  doc["optimizer"] = {{"beta2", 0.95}};  // type defaults to adamw
  m = parse_model(doc, kSource);
  EXPECT_EQ(m.optimizer.type, OptimizerType::adamw);
  EXPECT_DOUBLE_EQ(m.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(m.optimizer.learning_rate, 3e-4);
  EXPECT_DOUBLE_EQ(m.optimizer.weight_decay, 0.01);
}

// A repeated residual with a shortcut repeats the projection and the strides: valid, but rarely what a
// torchvision user means, so it is noted (once per such layer), and other configs have no note.
TEST(ParseModel, ARepeatedProjectionBlockIsNoted) {
  json doc = image_model();
  doc["layers"][1]["shortcut"] = json::array({{{"type", "conv2d"}, {"out_channels", 4}, {"kernel_size", 1}}});
  EXPECT_TRUE(parse_model(doc, kSource).notes.empty());
  doc["layers"][1]["repeat"] = 3;
  const ModelSpec m = parse_model(doc, kSource);
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_THAT(m.notes[0],
              testing::StartsWith(std::string(kSource) + ": layers[1]: `repeat` 3 copies the whole block"));
  EXPECT_THAT(m.notes[0], testing::HasSubstr("write the first block on its own"));
  EXPECT_FALSE(to_json(m).contains("notes"));
  EXPECT_TRUE(parse_model(image_model(), kSource).notes.empty());
}

TEST(ParseModel, SgdNesterovAndWeightDecay) {
  json doc = base_model();
  doc["optimizer"] = {{"type", "sgd"}, {"momentum", 0.9}, {"nesterov", true}, {"weight_decay", 1e-4}};
  const ModelSpec m = parse_model(doc, kSource);
  EXPECT_TRUE(m.optimizer.nesterov);
  EXPECT_DOUBLE_EQ(m.optimizer.weight_decay, 1e-4);
  // The resolved model carries them, and reads back the same.
  const json resolved = to_json(m);
  EXPECT_EQ(resolved["optimizer"]["nesterov"], true);
  EXPECT_DOUBLE_EQ(resolved["optimizer"]["weight_decay"].get<double>(), 1e-4);
  EXPECT_EQ(to_json(parse_model(resolved, kSource)), resolved);
}

TEST(ParseModel, SgdWithoutDecayOrNesterovResolvesAsBeforeTheyExisted) {
  // Reports written before sgd took weight_decay and nesterov hold {type, learning_rate, momentum}; the same
  // config must resolve to the same JSON so compare and --resume still match them.
  json doc = base_model();
  doc["optimizer"] = {{"type", "sgd"}, {"learning_rate", 0.1}, {"nesterov", false}, {"weight_decay", 0}};
  const json optimizer = to_json(parse_model(doc, kSource))["optimizer"];
  EXPECT_EQ(optimizer, (json{{"type", "sgd"}, {"learning_rate", 0.1}, {"momentum", 0.9}}));
}

TEST(ParseModel, TransformerDefaultsAndIntegralFloats) {
  json doc = token_model();
  ModelSpec m = parse_model(doc, kSource);
  EXPECT_EQ(m.layers[1].type, LayerType::transformer_block);
  EXPECT_EQ(m.layers[1].heads, 4);
  EXPECT_EQ(m.layers[1].mlp_ratio, 4);
  EXPECT_FALSE(m.layers[1].causal);
  doc["layers"][1]["mlp_ratio"] = 2.0;  // an integral value written as a float is an integer
  doc["layers"][1]["causal"] = true;
  m = parse_model(doc, kSource);
  EXPECT_EQ(m.layers[1].mlp_ratio, 2);
  EXPECT_TRUE(m.layers[1].causal);
}

TEST(ParseModel, PoolStrideDefaultsToKernelAndPathsAreSet) {
  const ModelSpec m = parse_model(image_model(), kSource);
  ASSERT_EQ(m.layers.size(), 5u);
  EXPECT_EQ(m.layers[0].stride, 1);
  EXPECT_EQ(m.layers[0].padding, 1);
  EXPECT_EQ(m.layers[2].type, LayerType::maxpool2d);
  EXPECT_EQ(m.layers[2].kernel_size, 2);
  EXPECT_EQ(m.layers[2].stride, 2);
  EXPECT_EQ(m.layers[0].json_path, "layers[0]");
  EXPECT_EQ(m.layers[1].json_path, "layers[1]");
  ASSERT_EQ(m.layers[1].layers.size(), 1u);
  EXPECT_EQ(m.layers[1].layers[0].json_path, "layers[1].layers[0]");
  EXPECT_EQ(m.layers[1].layers[0].activation, Activation::relu);
}

TEST(ParseModel, AcceptsNestingUpToTheLimit) {
  json inner = json::array({{{"type", "linear"}, {"out_features", 16}}});
  for (int i = 0; i < 32; ++i) inner = json::array({{{"type", "residual"}, {"layers", inner}}});
  json doc = base_model();
  doc["layers"] = inner;
  doc["layers"].push_back({{"type", "linear"}, {"out_features", 4}});
  const ModelSpec m = parse_model(doc, kSource);
  const LayerSpec* deepest = &m.layers[0];
  int levels = 1;
  while (deepest->type == LayerType::residual && deepest->layers[0].type == LayerType::residual) {
    deepest = &deepest->layers[0];
    ++levels;
  }
  EXPECT_EQ(levels, 32);
}

struct BadCase {
  const char* label;
  json doc;
  std::string path;                // expected ConfigError::json_path
  std::vector<std::string> words;  // each must appear in what()
};

json with(json doc, const json::json_pointer& where, json value) {
  doc[where] = std::move(value);
  return doc;
}

json without(json doc, const json::json_pointer& parent, const std::string& key) {
  doc[parent].erase(key);
  return doc;
}

json nested_residuals(int levels) {
  json inner = json::array({{{"type", "linear"}, {"out_features", 16}}});
  for (int i = 0; i < levels; ++i) inner = json::array({{{"type", "residual"}, {"layers", inner}}});
  json doc = base_model();
  doc["layers"] = inner;
  return doc;
}

// The path of the 33rd nested residual: layers[0].layers[0]... with 32 ".layers[0]" after the first.
std::string deep_residual_path() {
  std::string path = "layers[0]";
  for (int i = 0; i < 32; ++i) path += ".layers[0]";
  return path;
}

std::vector<BadCase> bad_cases() {
  using P = json::json_pointer;
  const json b = base_model();
  const json t = token_model();
  const json im = image_model();
  return {
      {"not an object", json::array({1, 2}), "", {"must be a JSON object", "an array"}},
      {"unknown top-level key with suggestion",
       with(b, P("/layer"), json::array()),
       "layer",
       {"unknown key 'layer'", "did you mean 'layers'?"}},
      {"unknown layer key with suggestion",
       with(b, P("/layers/0/out_feature"), 3),
       "layers[0].out_feature",
       {"unknown key 'out_feature'", "for layer type `linear`", "did you mean 'out_features'?"}},
      {"key of another layer type",
       with(b, P("/layers/1/heads"), 2),
       "layers[1].heads",
       {"unknown key 'heads'", "belongs to attention, transformer_block",
        "allowed here: type, repeat, out_features"}},
      {"unknown key without suggestion",
       with(b, P("/layers/0/zzzzzz"), 1),
       "layers[0].zzzzzz",
       {"unknown key 'zzzzzz'", "allowed here"}},
      {"wrong type string",
       with(b, P("/layers/0/out_features"), "abc"),
       "layers[0].out_features",
       {"expected a positive integer, got \"abc\""}},
      {"wrong type bool", with(b, P("/layers/0/bias"), "yes"), "layers[0].bias", {"expected true or false"}},
      {"zero size",
       with(b, P("/layers/0/out_features"), 0),
       "layers[0].out_features",
       {"expected a positive integer, got 0"}},
      {"negative size", with(b, P("/input/features"), -5), "input.features", {"positive integer, got -5"}},
      {"negative padding",
       with(im, P("/layers/0/padding"), -1),
       "layers[0].padding",
       {"expected a non-negative integer, got -1"}},
      {"size above bound",
       with(b, P("/layers/0/out_features"), 4294967296LL),
       "layers[0].out_features",
       {"too large", "2147483647"}},
      {"huge float size",
       with(b, P("/layers/0/out_features"), 1e300),
       "layers[0].out_features",
       {"too large"}},
      {"mlp_ratio 2.5",
       with(t, P("/layers/1/mlp_ratio"), 2.5),
       "layers[1].mlp_ratio",
       {"expected a positive integer, got 2.5"}},
      {"repeat zero", with(b, P("/layers/0/repeat"), 0), "layers[0].repeat", {"positive integer, got 0"}},
      {"repeat explodes", with(b, P("/layers/0/repeat"), 2000000000), "layers[0].repeat", {"at most 10000"}},
      {"unknown layer type",
       with(b, P("/layers/1/type"), "dense"),
       "layers[1].type",
       {"unknown layer type 'dense'", "did you mean 'linear'? (Keras's Dense is a linear layer here)",
        "allowed: linear, conv2d, maxpool2d", "residual"}},
      {"PyTorch's lr",
       with(b, P("/optimizer"), {{"lr", 0.1}}),
       "optimizer.lr",
       {"unknown key 'lr'", "did you mean 'learning_rate'? (PyTorch's lr is learning_rate here)"}},
      {"Keras's units",
       with(b, P("/layers/0/units"), 8),
       "layers[0].units",
       {"did you mean 'out_features'?"}},
      {"Keras's filters",
       with(im, P("/layers/0/filters"), 8),
       "layers[0].filters",
       {"did you mean 'out_channels'?"}},
      {"PyTorch's nhead",
       with(t, P("/layers/1/nhead"), 4),
       "layers[1].nhead",
       {"did you mean 'heads'? (PyTorch's nhead is heads here)"}},
      // Other frameworks' names: suggested by what they mean, however far their spelling.
      {"PyTorch's embedding_dim",
       with(t, P("/layers/0/embedding_dim"), 8),
       "layers[0].embedding_dim",
       {"did you mean 'dim'? (PyTorch's embedding_dim is dim here)"}},
      {"PyTorch's is_causal",
       with(t, P("/layers/1/is_causal"), true),
       "layers[1].is_causal",
       {"did you mean 'causal'?"}},
      {"seq_len", with(t, P("/input/seq_len"), 8), "input.seq_len", {"did you mean 'sequence_length'?"}},
      {"in_channels",
       with(im, P("/input/in_channels"), 3),
       "input.in_channels",
       {"did you mean 'channels'?"}},
      // Keys batchsweep works out or fixes: why, not the nearest allowed key (in_features is not
      // out_features).
      {"a layer's in_features",
       with(b, P("/layers/0/in_features"), 8),
       "layers[0].in_features",
       {"unknown key 'in_features' for layer type `linear`: a layer's input width is not written: it is the "
        "previous layer's output (the input's, for the first), so remove it"}},
      {"a conv's in_channels",
       with(im, P("/layers/0/in_channels"), 3),
       "layers[0].in_channels",
       {"input channels are not written"}},
      {"layernorm's eps",
       with(t, P("/layers/1"), {{"type", "layernorm"}, {"eps", 1e-6}}),
       "layers[1].eps",
       {"eps is fixed at 1e-5, PyTorch's default"}},
      {"a conv's groups", with(im, P("/layers/0/groups"), 32), "layers[0].groups", {"depthwise"}},
      // Outside a layer the same words are another object's keys: said as belonging there, not as fixed.
      {"adamw's momentum",
       with(b, P("/optimizer"), {{"type", "adamw"}, {"momentum", 0.9}}),
       "optimizer.momentum",
       {"unknown key 'momentum' for optimizer `adamw`: it belongs to sgd"}},
      {"the input's in_features",
       with(b, P("/input/in_features"), 8),
       "input.in_features",
       {"did you mean 'features'?"}},
      {"attn", with(t, P("/layers/1/type"), "attn"), "layers[1].type", {"did you mean 'attention'?"}},
      {"bn", with(b, P("/layers/1/type"), "bn"), "layers[1].type", {"did you mean 'batchnorm'?"}},
      {"dropout as a layer",
       with(b, P("/layers/1/type"), "Dropout"),
       "layers[1].type",
       {"unknown layer type 'Dropout': dropout is not modelled"}},
      {"swish",
       with(b, P("/layers/0/activation"), "swish"),
       "layers[0].activation",
       {"did you mean 'silu'?"}},
      {"ce", with(b, P("/loss"), "ce"), "loss", {"did you mean 'cross_entropy'?"}},
      {"adaptive pool",
       with(b, P("/layers/1/type"), "AdaptiveAvgPool2d"),
       "layers[1].type",
       {"did you mean 'global_avgpool'?"}},
      {"an activation as a layer",
       with(b, P("/layers/1/type"), "ReLU"),
       "layers[1].type",
       {"unknown layer type 'ReLU': an activation is no layer here but a field of the layer it follows: "
        "\"activation\": \"relu\" on a linear, conv2d, batchnorm or residual"}},
      {"PyTorch's betas",
       with(b, P("/optimizer"), {{"betas", {0.9, 0.95}}}),
       "optimizer.betas",
       {"unknown key 'betas' for optimizer `adamw`: PyTorch's betas [b1, b2] are two keys here: \"beta1\": "
        "b1, "
        "\"beta2\": b2"}},
      {"optimizer by name alone",
       with(b, P("/optimizer"), "sgd"),
       "optimizer",
       {"got \"sgd\": write {\"type\": \"sgd\"}"}},
      {"optimizer by another name alone",
       with(b, P("/optimizer"), "Adam"),
       "optimizer",
       {"got \"Adam\": write {\"type\": \"adamw\"} (with"}},
      {"optimizer by a name of none",
       with(b, P("/optimizer"), "rmsprop"),
       "optimizer",
       {"got \"rmsprop\": write {\"type\": \"adamw\"} or {\"type\": \"sgd\"} (with"}},
      {"layer type typo",
       with(b, P("/layers/1/type"), "Conv2D"),
       "layers[1].type",
       {"did you mean 'conv2d'?"}},
      {"missing layer type",
       without(b, P("/layers/0"), "type"),
       "layers[0].type",
       {"missing", "needs a type"}},
      {"layer type key capitalised",
       with(without(b, P("/layers/0"), "type"), P("/layers/0/Type"), "linear"),
       "layers[0].Type",
       {"unknown key 'Type' for a layer; did you mean 'type'?", "every layer needs a type"}},
      {"unknown activation",
       with(b, P("/layers/0/activation"), "relu6"),
       "layers[0].activation",
       {"unknown activation 'relu6'", "did you mean 'relu'?", "none, relu, gelu, silu, tanh"}},
      {"unknown input type",
       with(b, P("/input/type"), "audio"),
       "input.type",
       {"unknown input type 'audio'", "vector, image, tokens"}},
      {"input key of another input",
       with(b, P("/input/height"), 3),
       "input.height",
       {"unknown key 'height'", "for input type `vector`", "belongs to image"}},
      {"missing input", without(b, P(""), "input"), "input", {"missing"}},
      {"missing input field", without(im, P("/input"), "width"), "input.width", {"missing", "'width'"}},
      {"unknown loss", with(b, P("/loss"), "hinge"), "loss", {"unknown loss 'hinge'", "cross_entropy, mse"}},
      {"unknown optimizer",
       with(b, P("/optimizer"), {{"type", "adam"}}),
       "optimizer.type",
       {"unknown optimizer type 'adam'", "did you mean 'adamw'?", "adamw, sgd"}},
      {"optimizer key of the other optimizer",
       with(b, P("/optimizer"), {{"type", "sgd"}, {"beta1", 0.9}}),
       "optimizer.beta1",
       {"unknown key 'beta1'", "for optimizer `sgd`", "belongs to adamw"}},
      {"negative learning rate",
       with(b, P("/optimizer"), {{"learning_rate", -1}}),
       "optimizer.learning_rate",
       {"expected a number > 0, got -1"}},
      {"beta2 of one", with(b, P("/optimizer"), {{"beta2", 1.0}}), "optimizer.beta2", {"in [0, 1)"}},
      // Under 1, but 1 in fp32, where the steps run: every point failed, blamed on the learning rate.
      {"beta1 that is one in fp32",
       with(b, P("/optimizer"), {{"beta1", 0.99999999}}),
       "optimizer.beta1",
       {"got 0.99999999, which is 1 in fp32, the precision the optimizer's steps use (at most 0.99999994)"}},
      {"momentum that is one in fp32",
       with(b, P("/optimizer"), {{"type", "sgd"}, {"momentum", 0.9999999999}}),
       "optimizer.momentum",
       {"which is 1 in fp32"}},
      {"learning rate zero in fp32",
       with(b, P("/optimizer"), {{"learning_rate", 5e-324}}),
       "optimizer.learning_rate",
       {"which underflows fp32, the precision the optimizer's steps use (at least 1.18e-38)"}},
      {"eps flushed to zero",
       with(b, P("/optimizer"), {{"eps", 1e-39}}),
       "optimizer.eps",
       {"expected a number >= 1.18e-38 (fp32's smallest normal", "got 1e-39"}},
      {"learning rate as text",
       with(b, P("/optimizer"), {{"learning_rate", "fast"}}),
       "optimizer.learning_rate",
       {"expected a number > 0, got \"fast\""}},
      {"nesterov not a flag",
       with(b, P("/optimizer"), {{"type", "sgd"}, {"nesterov", 1}}),
       "optimizer.nesterov",
       {"expected true or false, got 1"}},
      {"nesterov without momentum",
       with(b, P("/optimizer"), {{"type", "sgd"}, {"momentum", 0}, {"nesterov", true}}),
       "optimizer.nesterov",
       {"Nesterov momentum needs a momentum > 0"}},
      {"nesterov for adamw",
       with(b, P("/optimizer"), {{"type", "adamw"}, {"nesterov", true}}),
       "optimizer.nesterov",
       {"unknown key 'nesterov'", "belongs to sgd"}},
      {"negative sgd weight decay",
       with(b, P("/optimizer"), {{"type", "sgd"}, {"weight_decay", -0.1}}),
       "optimizer.weight_decay",
       {"expected a number >= 0, got -0.1"}},
      {"optimizer not an object",
       with(b, P("/optimizer"), "adamw"),
       "optimizer",
       {"expected", "JSON object"}},
      {"empty layers", with(b, P("/layers"), json::array()), "layers", {"at least one layer"}},
      {"layers not a list", with(b, P("/layers"), json::object()), "layers", {"expected a list of layers"}},
      {"missing layers", without(b, P(""), "layers"), "layers", {"missing"}},
      {"non-object layer", with(b, P("/layers/1"), 5), "layers[1]", {"expected a layer", "got 5"}},
      {"missing required field",
       without(b, P("/layers/0"), "out_features"),
       "layers[0].out_features",
       {"missing", "layer type `linear` needs 'out_features'"}},
      {"missing name", without(b, P(""), "name"), "name", {"missing"}},
      {"empty name", with(b, P("/name"), ""), "name", {"must not be empty"}},
      {"name not a string", with(b, P("/name"), 7), "name", {"expected a string, got 7"}},
      {"residual without layers",
       with(im, P("/layers/1"), {{"type", "residual"}}),
       "layers[1].layers",
       {"missing", "inner layers"}},
      {"residual with empty layers",
       with(im, P("/layers/1/layers"), json::array()),
       "layers[1].layers",
       {"at least one inner layer"}},
      {"shortcut not a list",
       with(im, P("/layers/1/shortcut"), json{{"type", "conv2d"}}),
       "layers[1].shortcut",
       {"expected a list of layers"}},
      {"empty shortcut",
       with(im, P("/layers/1/shortcut"), json::array()),
       "layers[1].shortcut",
       {"leave `shortcut` out for the identity"}},
      {"bad key inside a shortcut",
       with(im, P("/layers/1/shortcut"), json::array({{{"type", "conv2d"}, {"out_channel", 4}}})),
       "layers[1].shortcut[0].out_channel",
       {"did you mean 'out_channels'?"}},
      {"torchvision's name for the shortcut",
       with(im, P("/layers/1/downsample"), json::array()),
       "layers[1].downsample",
       {"did you mean 'shortcut'?", "torchvision's downsample is a residual's shortcut here"}},
      {"shortcut on a conv2d",
       with(im, P("/layers/0/shortcut"), json::array()),
       "layers[0].shortcut",
       {"unknown key 'shortcut'", "belongs to residual"}},
      {"bad key inside a residual",
       with(im, P("/layers/1/layers/0/kernel"), 3),
       "layers[1].layers[0].kernel",
       {"did you mean 'kernel_size'?"}},
      {"deep nesting", nested_residuals(40), deep_residual_path(), {"nesting too deep", "at most 32 levels"}},
      {"shape error from lower",
       with(t, P("/layers/1/heads"), 5),
       "layers[1].heads",
       {"does not divide dim 32"}},
      {"token ids into a linear",
       with(t, P("/layers/0"), {{"type", "linear"}, {"out_features", 4}}),
       "layers[0]",
       {"embedding"}},
  };
}

TEST(ParseModel, RejectsBadDocumentsWithPathAndMessage) {
  for (const BadCase& c : bad_cases()) {
    SCOPED_TRACE(c.label);
    try {
      static_cast<void>(parse_model(c.doc, kSource));
      ADD_FAILURE() << "no error for: " << c.label;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.source(), kSource);
      EXPECT_EQ(e.json_path(), c.path);
      EXPECT_EQ(e.exit_code(), kExitUsage);
      const std::string prefix =
          c.path.empty() ? std::string(kSource) + ": " : std::string(kSource) + ": " + c.path + ": ";
      EXPECT_THAT(e.what(), ::testing::StartsWith(prefix));
      for (const std::string& word : c.words) EXPECT_THAT(e.what(), HasSubstr(word));
    }
  }
}

TEST(ParseModel, CountsRepeatsThroughResiduals) {
  // 200 x (100 inner layers) = 20000 expanded layers: refused though each repeat alone is small.
  json inner = json::array();
  for (int i = 0; i < 100; ++i) inner.push_back({{"type", "linear"}, {"out_features", 16}});
  json doc = base_model();
  doc["layers"] = json::array({{{"type", "residual"}, {"repeat", 200}, {"layers", inner}}});
  try {
    static_cast<void>(parse_model(doc, kSource));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.json_path(), "layers[0].repeat");
    EXPECT_THAT(e.what(), HasSubstr("20000 layers"));
  }
}

TEST(ParseModel, ClipsLongUserTextInMessages) {
  json doc = base_model();
  doc["layers"][0]["type"] = std::string(100000, 'x');
  try {
    static_cast<void>(parse_model(doc, kSource));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u);
    EXPECT_THAT(e.what(), HasSubstr("..."));
  }
}

TEST(ParseModel, ClipsLongUnknownKeysInThePath) {
  json doc = base_model();
  doc["layers"][0][std::string(100000, 'k')] = 1;
  try {
    static_cast<void>(parse_model(doc, kSource));
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_LT(e.json_path().size(), 80u);
    EXPECT_THAT(e.json_path(), ::testing::StartsWith("layers[0].kkk"));
  }
}

TEST(ToString, NamesMatchTheConfigFormat) {
  EXPECT_EQ(to_string(InputType::tokens), "tokens");
  EXPECT_EQ(to_string(LayerType::transformer_block), "transformer_block");
  EXPECT_EQ(to_string(LayerType::global_avgpool), "global_avgpool");
  EXPECT_EQ(to_string(Activation::silu), "silu");
  EXPECT_EQ(to_string(LossType::mse), "mse");
  EXPECT_EQ(to_string(OptimizerType::sgd), "sgd");
}

}  // namespace
}  // namespace bsw
