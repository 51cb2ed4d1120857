// --set PATH=VALUE: parsing the argument, putting the value into a config document, and loading a preset or a
// file with it, each error naming the --set.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"
#include "unit/model/model_test_util.hpp"

namespace bsw {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// The UsageError parse_model_override throws for `text`.
std::string usage_error(const std::string& text) {
  try {
    static_cast<void>(parse_model_override(text));
  } catch (const UsageError& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    return e.what();
  }
  ADD_FAILURE() << "no error for --set " << text;
  return {};
}

// The error applying `sets` to `doc`.
std::string apply_error(json doc, const std::vector<std::string>& sets) {
  std::vector<ModelOverride> overrides;
  for (const std::string& s : sets) overrides.push_back(parse_model_override(s));
  try {
    apply_model_overrides(doc, overrides, "m.json");
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error applying " << sets.front();
  return {};
}

json applied(json doc, const std::vector<std::string>& sets) {
  std::vector<ModelOverride> overrides;
  for (const std::string& s : sets) overrides.push_back(parse_model_override(s));
  apply_model_overrides(doc, overrides, "m.json");
  return doc;
}

TEST(ModelOverride, ParsesPathsAsErrorsNameThem) {
  const ModelOverride o = parse_model_override("  layers[1].layers[12].out_channels = 64 ");
  EXPECT_EQ(o.path, "layers[1].layers[12].out_channels");
  EXPECT_EQ(o.text, "layers[1].layers[12].out_channels=64");
  ASSERT_EQ(o.steps.size(), 5u);
  EXPECT_EQ(o.steps[0].key, "layers");
  EXPECT_EQ(o.steps[1].key, "");
  EXPECT_EQ(o.steps[1].index, 1u);
  EXPECT_EQ(o.steps[3].index, 12u);
  EXPECT_EQ(o.steps[4].key, "out_channels");
  EXPECT_EQ(o.value, json(64));
  // A list index may follow another ([0][1]), and the value may hold '='.
  const ModelOverride nested = parse_model_override("a[0][1]=x=y");
  ASSERT_EQ(nested.steps.size(), 3u);
  EXPECT_EQ(nested.steps[2].index, 1u);
  EXPECT_EQ(nested.value, json("x=y"));
}

TEST(ModelOverride, ValuesAreJsonOrABareWord) {
  EXPECT_EQ(parse_model_override("a=1e3").value, json(1000.0));
  EXPECT_EQ(parse_model_override("a=-2").value, json(-2));
  EXPECT_EQ(parse_model_override("a=true").value, json(true));
  EXPECT_EQ(parse_model_override("a=\"123\"").value, json("123"));
  EXPECT_EQ(parse_model_override("a=gelu").value, json("gelu"));
  EXPECT_EQ(parse_model_override("a=my model").value, json("my model"));
  EXPECT_EQ(parse_model_override(R"(optimizer={"type": "sgd", "momentum": 0})").value,
            json::parse(R"({"type": "sgd", "momentum": 0})"));
  EXPECT_EQ(parse_model_override("a=[1, 2]").value, json::parse("[1, 2]"));
}

TEST(ModelOverride, RefusesWhatIsNoPathOrValue) {
  EXPECT_THAT(usage_error("input.sequence_length"), HasSubstr("expected PATH=VALUE, e.g. --set "));
  EXPECT_THAT(usage_error("=4"), HasSubstr("no path before '='"));
  EXPECT_THAT(usage_error("name="), HasSubstr("no value after '=' (an empty string is written \"\": --set "
                                              "'name=\"\"')"));
  EXPECT_THAT(usage_error("layers[x].repeat=2"),
              HasSubstr("--set layers[x].repeat=2: layers[x].repeat is not a config path: a list index that "
                        "is not a whole number at character 8"));
  EXPECT_THAT(usage_error("layers[1.repeat=2"), HasSubstr("a '[' without its ']'"));
  EXPECT_THAT(usage_error("layers[1.repeat[0]=2"), HasSubstr("a '[' without its ']'"));
  // The ']' is there: what is wrong is the index, which is not spelled as a whole number.
  EXPECT_THAT(usage_error("layers[1e1].repeat=2"),
              HasSubstr("a list index that is not a whole number at character 9"));
  EXPECT_THAT(usage_error("layers..repeat=2"), HasSubstr("'.' at character 8"));
  EXPECT_THAT(usage_error("layers.=2"), HasSubstr("a missing key at character 8"));
  EXPECT_THAT(usage_error("[0].repeat=2"), HasSubstr("'[' at character 1"));
  EXPECT_THAT(usage_error("layers[12345678901].repeat=2"), HasSubstr("a list index too large"));
  // Numbers and JSON gone wrong are not taken as strings.
  EXPECT_THAT(usage_error("a=1O24"), HasSubstr("--set a=1O24: 1O24 is not a JSON value: line 1, column 2"));
  EXPECT_THAT(usage_error("a={\"type\": \"sgd\",}"), HasSubstr("is not a JSON value"));
  EXPECT_THAT(usage_error("a=[1, 2"), HasSubstr("is not a JSON value"));
  EXPECT_THAT(usage_error("a=1e-400"),
              HasSubstr("1e-400 is not a JSON value: line 1, column 1: the number 1e-400 is "
                        "too small for a double"));
  EXPECT_THAT(usage_error(R"(a={"b": 1, "b": 2})"), HasSubstr("gives b twice"));
  EXPECT_THAT(usage_error("layers[0].bias=False"), HasSubstr("False is Python's; JSON writes false"));
  EXPECT_THAT(usage_error("a=None"), HasSubstr("JSON writes null"));
  EXPECT_THAT(usage_error("name=a\nb"), HasSubstr("holds a control character"));
  EXPECT_THAT(usage_error("a=" + std::string(100, '[')), HasSubstr("nested deeper than 64 levels"));
  EXPECT_THAT(usage_error("a=" + std::string(70000, 'x')), HasSubstr("belongs in a model file (--model)"));
  // Cut at a character, not inside one.
  EXPECT_THAT(usage_error("name=" + std::string(42, 'x') + "\u00e9" + std::string(70000, 'x')),
              HasSubstr("--set name=" + std::string(42, 'x') + "...: is 70049 bytes long"));
  EXPECT_THAT(usage_error("name=\xff"), HasSubstr("is not UTF-8 text"));
  EXPECT_THAT(usage_error("layers[01].repeat=2"),
              HasSubstr("a list index with a leading zero at character 8"));
  EXPECT_THAT(usage_error("caf\u00e9=1"), HasSubstr("'\u00e9' at character 4"));
}

TEST(ModelOverride, SetsKeysElementsAndWholeObjects) {
  const json doc = json::parse(R"({"name": "m", "input": {"type": "tokens", "sequence_length": 64},
    "layers": [{"type": "embedding", "dim": 8}, {"type": "residual", "layers": [{"type": "linear"}]}]})");
  const json out = applied(doc, {"input.sequence_length=128", "layers[1].layers[0].out_features=8",
                                 "layers[0]={\"type\": \"embedding\", \"dim\": 16}", "layers[1].repeat=3"});
  EXPECT_EQ(out["input"]["sequence_length"], 128);
  EXPECT_EQ(out["layers"][1]["layers"][0]["out_features"], 8);
  EXPECT_EQ(out["layers"][0]["dim"], 16);
  EXPECT_EQ(out["layers"][1]["repeat"], 3);
  // A key the config leaves to its default is made, with the objects on its way.
  EXPECT_EQ(applied(doc, {"optimizer.learning_rate=0.1"})["optimizer"],
            json::parse(R"({"learning_rate": 0.1})"));
  // In order: a whole object, then a key of it.
  EXPECT_EQ(applied(doc, {R"(optimizer={"type": "sgd"})", "optimizer.momentum=0"})["optimizer"],
            json::parse(R"({"type": "sgd", "momentum": 0})"));
}

TEST(ModelOverride, RefusesPathsTheConfigDoesNotHave) {
  const json doc = json::parse(R"({"name": "m", "input": {"type": "vector", "features": 4},
    "layers": [{"type": "linear", "out_features": 3}, {"type": "linear", "out_features": 2}]})");
  EXPECT_THAT(apply_error(doc, {"layers[2].out_features=4"}),
              HasSubstr("--set layers[2].out_features=4: layers in m.json has 2 elements (layers[0] to "
                        "layers[1])"));
  EXPECT_THAT(apply_error(doc, {"input.features.x=4"}),
              HasSubstr("input.features in m.json is the number 4, which has no key x"));
  EXPECT_THAT(apply_error(doc, {"input[0]=4"}), HasSubstr("input in m.json is an object, not a list"));
  EXPECT_THAT(apply_error(doc, {"shortcut[0].kernel_size=1"}),
              HasSubstr("m.json has no shortcut, so there is no list to take element [0] of"));
  EXPECT_THAT(apply_error(doc, {"input.features=8", "input.features=16"}),
              HasSubstr("--set input.features=16: --set input.features=8 sets input.features too; give each "
                        "path once"));
  // A whole list after a change inside it would drop that change: the whole first, then its parts.
  EXPECT_THAT(apply_error(doc, {"layers[0].out_features=20", R"(layers=[{"type": "linear"}])"}),
              HasSubstr(R"(--set layers=[{"type": "linear"}]: it replaces layers, inside which --set )"
                        "layers[0].out_features=20 came first and would be lost"));
  EXPECT_EQ(applied(doc, {R"(layers=[{"type": "linear"}])", "layers[0].out_features=20"})["layers"],
            json::parse(R"([{"type": "linear", "out_features": 20}])"));
}

TEST(ModelOverride, LoadsAPresetWithThemAndRecordsThem) {
  const ModelSpec plain = load_model("tiny-lm");
  const ModelSpec longer = load_model("tiny-lm", {parse_model_override("input.sequence_length=128"),
                                                  parse_model_override("layers[1].repeat=3")});
  EXPECT_EQ(longer.input.sequence_length, 128);
  EXPECT_EQ(longer.name, plain.name);
  EXPECT_EQ(longer.source, plain.source);
  EXPECT_EQ(longer.overrides, (std::vector<std::string>{"input.sequence_length=128", "layers[1].repeat=3"}));
  EXPECT_TRUE(plain.overrides.empty());
  // The resolved model holds the values: position embeddings for 64 more tokens, and a third block.
  const Graph a = lower(plain), b = lower(longer);
  const Graph two_blocks = lower(load_model("tiny-lm", {parse_model_override("input.sequence_length=128")}));
  EXPECT_EQ(two_blocks.parameters - a.parameters, 64 * 128);
  EXPECT_GT(b.parameters, two_blocks.parameters);
  EXPECT_EQ(to_json(longer)["input"]["sequence_length"], 128);
}

TEST(ModelOverride, AnErrorNamesTheSetThatCausedIt) {
  const auto error = [](const std::vector<std::string>& sets) -> std::string {
    std::vector<ModelOverride> overrides;
    for (const std::string& s : sets) overrides.push_back(parse_model_override(s));
    try {
      static_cast<void>(load_model("tiny-lm", overrides));
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.source(), "preset:tiny-lm");
      EXPECT_EQ(e.exit_code(), kExitUsage);
      return e.what();
    }
    ADD_FAILURE() << "no error loading tiny-lm with " << sets.front();
    return {};
  };
  // On its path: that --set, not the other.
  const std::string heads = error({"layers[1].heads=3", "input.sequence_length=32"});
  EXPECT_THAT(heads, HasSubstr("preset:tiny-lm: layers[1].heads: "));
  EXPECT_THAT(heads, HasSubstr("(from --set layers[1].heads=3)"));
  EXPECT_THAT(error({"input.sequence_length=0"}), HasSubstr("(from --set input.sequence_length=0)"));
  // An unknown key is the parser's, with its suggestion.
  EXPECT_THAT(error({"layers[1].head=8"}), HasSubstr("did you mean 'heads'?"));
  EXPECT_THAT(error({"layers[1].head=8"}), HasSubstr("(from --set layers[1].head=8)"));
  // An error at the layer holding a --set may come from another (a shape an earlier layer changed): all of
  // them, not that one.
  const std::string holder = error({"layers[0].dim=130", "layers[1].causal=false"});
  EXPECT_THAT(holder, HasSubstr("(with --set layers[0].dim=130, --set layers[1].causal=false)"));
  EXPECT_THAT(holder, Not(HasSubstr("(from ")));
  std::vector<ModelOverride> resnet = {parse_model_override("layers[0].out_channels=16"),
                                       parse_model_override("layers[2].repeat=1")};
  try {
    static_cast<void>(load_model("resnet-small", resnet));
    ADD_FAILURE() << "resnet-small loaded with a stem of 16 channels";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.json_path(), "layers[2]");
    EXPECT_THAT(e.what(), HasSubstr("(with --set layers[0].out_channels=16, --set layers[2].repeat=1)"));
  }
  // Off every --set's path (a shape three layers later): all of them.
  const std::string shape = error({"layers[0].dim=130", "loss=mse"});
  EXPECT_THAT(shape, HasSubstr("preset:tiny-lm: layers[1]"));
  EXPECT_THAT(shape, HasSubstr("(with --set layers[0].dim=130, --set loss=mse)"));
  // ... but not the optimizer's, which shapes no layer.
  const std::string rate = error({"layers[0].dim=130", "optimizer.learning_rate=0.2"});
  EXPECT_THAT(rate, HasSubstr("(with --set layers[0].dim=130)"));
  EXPECT_THAT(rate, Not(HasSubstr("learning_rate")));
}

}  // namespace
}  // namespace bsw
