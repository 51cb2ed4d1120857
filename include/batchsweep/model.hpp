// The model a user describes: a JSON config (file or embedded preset) parsed and validated into a ModelSpec.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace bsw {

enum class InputType { vector, image, tokens };
enum class LayerType {
  linear,
  conv2d,
  maxpool2d,
  avgpool2d,
  global_avgpool,
  flatten,
  layernorm,
  batchnorm,
  embedding,
  patch_embedding,
  attention,
  transformer_block,
  residual,
};
enum class Activation { none, relu, gelu, silu, tanh };
enum class LossType { cross_entropy, mse };
enum class OptimizerType { adamw, sgd };

struct InputSpec {
  InputType type = InputType::vector;
  int64_t features = 0;         // vector
  int64_t channels = 0;         // image
  int64_t height = 0;           // image
  int64_t width = 0;            // image
  int64_t sequence_length = 0;  // tokens
  int64_t vocab_size = 0;       // tokens
};

// One entry of "layers" with its defaults applied. Fields that do not apply to `type` stay 0/false.
struct LayerSpec {
  LayerType type = LayerType::linear;
  std::string
      json_path;  // e.g. "layers[2]", "layers[1].layers[0]" — used in every later error about this layer
  int64_t repeat = 1;

  int64_t out_features = 0;                  // linear
  bool bias = true;                          // linear, conv2d
  Activation activation = Activation::none;  // linear, conv2d, batchnorm, residual (after the add)

  int64_t out_channels = 0;  // conv2d
  int64_t kernel_size = 0;   // conv2d, maxpool2d, avgpool2d
  int64_t stride = 1;        // conv2d (default 1), pools (default kernel_size)
  int64_t padding = 0;       // conv2d, maxpool2d, avgpool2d

  int64_t dim = 0;         // embedding, patch_embedding
  int64_t patch_size = 0;  // patch_embedding
  int64_t heads = 0;       // attention, transformer_block
  int64_t mlp_ratio = 4;   // transformer_block: hidden = mlp_ratio * dim
  bool causal = false;     // attention, transformer_block

  std::vector<LayerSpec> layers;    // residual
  std::vector<LayerSpec> shortcut;  // residual: the projection applied to its input (empty: the identity)
};

struct OptimizerSpec {
  OptimizerType type = OptimizerType::adamw;
  double learning_rate = 3e-4;
  double momentum = 0.9;       // sgd
  double beta1 = 0.9;          // adamw
  double beta2 = 0.999;        // adamw
  double eps = 1e-8;           // adamw
  double weight_decay = 0.01;  // adamw (decoupled: w *= 1 - lr * wd); sgd (L2: g += wd * w), default 0 there
  bool nesterov = false;       // sgd (needs momentum > 0)
};

struct ModelSpec {
  std::string name;
  std::string source;  // the file path, or "preset:<name>"
  InputSpec input;
  std::vector<LayerSpec> layers;
  LossType loss = LossType::cross_entropy;
  OptimizerSpec optimizer;
  // What the config does that its author may not mean, each "<source>: <JSON path>: ...": the commands say
  // them as warnings. Not part of the model (to_json leaves them out).
  std::vector<std::string> notes;  // The --set overrides applied to the config before it was parsed, as given
                                   // ("input.sequence_length=1024"):
  // the model is the config with them, so to_json includes their values; this says where they came from.
  std::vector<std::string> overrides;
};

// One `--set PATH=VALUE`: a value put into the config document at a JSON path before it is parsed, so that a
// preset or a file can be swept at another sequence length, width or depth without writing a new file.
// PATH is written as errors name config paths: keys joined by '.', array elements as [N]
// (`layers[1].repeat`). VALUE is JSON where it parses as JSON (1024, 1e-3, true, "x", {"type": "sgd"}),
// else the text as a string (`gelu`).
struct ModelOverride {
  struct Step {
    std::string key;  // an object's key, or empty for an array element
    size_t index = 0;
  };
  std::string text;  // "path=value" as given, trimmed
  std::string path;  // "layers[1].repeat"
  std::vector<Step> steps;
  nlohmann::json value;
};

// Parses one --set argument. Throws UsageError naming --set and what is wrong.
[[nodiscard]] ModelOverride parse_model_override(std::string_view text);

// Puts each override's value at its path in `doc` (a config document, read from `source`), in order. A key
// missing from an object is added (the parser then checks it as any key: an unknown one is an error with a
// suggestion); an array element must exist. Throws UsageError naming the --set and the path.
void apply_model_overrides(nlohmann::json& doc, const std::vector<ModelOverride>& overrides,
                           const std::string& source);

// Parses and validates a config document. `source` names the file in errors. Throws ConfigError.
// Validation covers keys and types here; shapes through the stack are checked by lower() in plan.hpp, which
// parse_model calls so a ModelSpec that comes back is known to lower.
[[nodiscard]] ModelSpec parse_model(const nlohmann::json& doc, const std::string& source);

// Reads a preset by name (see preset_names()) or a JSON file by path. Throws ConfigError (exit 2) naming the
// file.
[[nodiscard]] ModelSpec load_model(std::string_view name_or_path);
// The same with --set overrides applied to the document before it is parsed (see ModelOverride). An error in
// the resulting model names the --set it comes from, or every --set where none is on its path.
[[nodiscard]] ModelSpec load_model(std::string_view name_or_path,
                                   const std::vector<ModelOverride>& overrides);

// The names of the presets embedded at build time from configs/models/*.json, sorted.
[[nodiscard]] std::vector<std::string> preset_names();
// The raw text of a preset, or empty when there is none of that name.
[[nodiscard]] std::string_view preset_text(std::string_view name);

// The resolved model (defaults applied) as JSON, in the config format; parse_model(to_json(m)) == m.
[[nodiscard]] nlohmann::json to_json(const ModelSpec& model);

[[nodiscard]] std::string_view to_string(InputType v);
[[nodiscard]] std::string_view to_string(LayerType v);
[[nodiscard]] std::string_view to_string(Activation v);
[[nodiscard]] std::string_view to_string(LossType v);
[[nodiscard]] std::string_view to_string(OptimizerType v);

}  // namespace bsw
