// The tables behind the config format (see schema.hpp) and the to_string functions of model.hpp.
#include "model/schema.hpp"

#include <array>

namespace bsw {
namespace model_schema {
namespace {

using IR = IntRule;

constexpr std::array<LayerField, 3> kLinearFields{{
    {.key = "out_features", .required = true, .int_member = &LayerSpec::out_features},
    {.key = "bias", .bool_member = &LayerSpec::bias},
    {.key = "activation", .activation_member = &LayerSpec::activation},
}};
constexpr std::array<LayerField, 6> kConv2dFields{{
    {.key = "out_channels", .required = true, .int_member = &LayerSpec::out_channels},
    {.key = "kernel_size", .required = true, .int_member = &LayerSpec::kernel_size},
    {.key = "stride", .int_member = &LayerSpec::stride},
    {.key = "padding", .rule = IR::non_negative, .int_member = &LayerSpec::padding},
    {.key = "bias", .bool_member = &LayerSpec::bias},
    {.key = "activation", .activation_member = &LayerSpec::activation},
}};
constexpr std::array<LayerField, 3> kPoolFields{{
    {.key = "kernel_size", .required = true, .int_member = &LayerSpec::kernel_size},
    {.key = "stride", .int_member = &LayerSpec::stride},
    {.key = "padding",
     .rule = IR::non_negative,
     .int_member = &LayerSpec::padding,
     .emit_only_nonzero = true},
}};
constexpr std::array<LayerField, 1> kBatchNormFields{{
    {.key = "activation", .activation_member = &LayerSpec::activation},
}};
// A residual's activation came after reports were written: "none" is left out of the resolved model.
constexpr std::array<LayerField, 1> kResidualFields{{
    {.key = "activation", .activation_member = &LayerSpec::activation, .emit_only_nonzero = true},
}};
constexpr std::array<LayerField, 1> kEmbeddingFields{{
    {.key = "dim", .required = true, .int_member = &LayerSpec::dim},
}};
constexpr std::array<LayerField, 2> kPatchEmbeddingFields{{
    {.key = "patch_size", .required = true, .int_member = &LayerSpec::patch_size},
    {.key = "dim", .required = true, .int_member = &LayerSpec::dim},
}};
constexpr std::array<LayerField, 2> kAttentionFields{{
    {.key = "heads", .required = true, .int_member = &LayerSpec::heads},
    {.key = "causal", .bool_member = &LayerSpec::causal},
}};
constexpr std::array<LayerField, 3> kTransformerFields{{
    {.key = "heads", .required = true, .int_member = &LayerSpec::heads},
    {.key = "mlp_ratio", .int_member = &LayerSpec::mlp_ratio},
    {.key = "causal", .bool_member = &LayerSpec::causal},
}};

constexpr std::array<LayerInfo, 13> kLayers{{
    {LayerType::linear, "linear", kLinearFields},
    {LayerType::conv2d, "conv2d", kConv2dFields},
    {LayerType::maxpool2d, "maxpool2d", kPoolFields},
    {LayerType::avgpool2d, "avgpool2d", kPoolFields},
    {LayerType::global_avgpool, "global_avgpool", {}},
    {LayerType::flatten, "flatten", {}},
    {LayerType::layernorm, "layernorm", {}},
    {LayerType::batchnorm, "batchnorm", kBatchNormFields},
    {LayerType::embedding, "embedding", kEmbeddingFields},
    {LayerType::patch_embedding, "patch_embedding", kPatchEmbeddingFields},
    {LayerType::attention, "attention", kAttentionFields},
    {LayerType::transformer_block, "transformer_block", kTransformerFields},
    {LayerType::residual, "residual", kResidualFields, true},
}};

constexpr std::array<InputField, 1> kVectorFields{{{"features", &InputSpec::features}}};
constexpr std::array<InputField, 3> kImageFields{{
    {"channels", &InputSpec::channels},
    {"height", &InputSpec::height},
    {"width", &InputSpec::width},
}};
constexpr std::array<InputField, 2> kTokenFields{{
    {"sequence_length", &InputSpec::sequence_length},
    {"vocab_size", &InputSpec::vocab_size},
}};
constexpr std::array<InputInfo, 3> kInputs{{
    {InputType::vector, "vector", kVectorFields},
    {InputType::image, "image", kImageFields},
    {InputType::tokens, "tokens", kTokenFields},
}};

constexpr std::array<OptimizerField, 5> kAdamwFields{{
    {"learning_rate", &OptimizerSpec::learning_rate, 3e-4, 0, false, std::nullopt, "a number > 0"},
    {"beta1", &OptimizerSpec::beta1, 0.9, 0, true, 1.0, "a number in [0, 1)"},
    {"beta2", &OptimizerSpec::beta2, 0.999, 0, true, 1.0, "a number in [0, 1)"},
    // Under fp32's smallest normal the CPU's steps flush eps to zero (FTZ/DAZ), and AdamW divides by it.
    {"eps", &OptimizerSpec::eps, 1e-8, 1.1754943508222875e-38, true, std::nullopt,
     "a number >= 1.18e-38 (fp32's smallest normal: a smaller one flushes to zero, and AdamW divides by it)"},
    {"weight_decay", &OptimizerSpec::weight_decay, 0.01, 0, true, std::nullopt, "a number >= 0"},
}};
constexpr std::array<OptimizerField, 4> kSgdFields{{
    {"learning_rate", &OptimizerSpec::learning_rate, 0.01, 0, false, std::nullopt, "a number > 0"},
    {"momentum", &OptimizerSpec::momentum, 0.9, 0, true, 1.0, "a number in [0, 1)"},
    {"weight_decay", &OptimizerSpec::weight_decay, 0.0, 0, true, std::nullopt, "a number >= 0", nullptr,
     true},
    {"nesterov", nullptr, 0.0, 0, false, std::nullopt, "true or false", &OptimizerSpec::nesterov, true},
}};
constexpr std::array<OptimizerInfo, 2> kOptimizers{{
    {OptimizerType::adamw, "adamw", kAdamwFields},
    {OptimizerType::sgd, "sgd", kSgdFields},
}};

constexpr std::array<ActivationName, 5> kActivations{{
    {Activation::none, "none"},
    {Activation::relu, "relu"},
    {Activation::gelu, "gelu"},
    {Activation::silu, "silu"},
    {Activation::tanh, "tanh"},
}};
constexpr std::array<LossName, 2> kLosses{{
    {LossType::cross_entropy, "cross_entropy"},
    {LossType::mse, "mse"},
}};

}  // namespace

std::span<const LayerInfo> layer_infos() {
  return kLayers;
}
std::span<const InputInfo> input_infos() {
  return kInputs;
}
std::span<const OptimizerInfo> optimizer_infos() {
  return kOptimizers;
}
std::span<const ActivationName> activation_names() {
  return kActivations;
}
std::span<const LossName> loss_names() {
  return kLosses;
}

const LayerInfo& layer_info(LayerType type) {
  return kLayers.at(static_cast<size_t>(type));
}
const InputInfo& input_info(InputType type) {
  return kInputs.at(static_cast<size_t>(type));
}
const OptimizerInfo& optimizer_info(OptimizerType type) {
  return kOptimizers.at(static_cast<size_t>(type));
}

// The tables are indexed by enum value: they must list every value in declaration order.
template <typename Table, typename Get>
constexpr bool in_enum_order(const Table& table, Get get) {
  for (size_t i = 0; i < table.size(); ++i)
    if (static_cast<size_t>(get(table[i])) != i) return false;
  return true;
}
static_assert(in_enum_order(kLayers, [](const LayerInfo& e) { return e.type; }));
static_assert(kLayers.size() == static_cast<size_t>(LayerType::residual) + 1);
static_assert(in_enum_order(kInputs, [](const InputInfo& e) { return e.type; }));
static_assert(kInputs.size() == static_cast<size_t>(InputType::tokens) + 1);
static_assert(in_enum_order(kOptimizers, [](const OptimizerInfo& e) { return e.type; }));
static_assert(kOptimizers.size() == static_cast<size_t>(OptimizerType::sgd) + 1);
static_assert(in_enum_order(kActivations, [](const ActivationName& e) { return e.value; }));
static_assert(kActivations.size() == static_cast<size_t>(Activation::tanh) + 1);
static_assert(in_enum_order(kLosses, [](const LossName& e) { return e.value; }));
static_assert(kLosses.size() == static_cast<size_t>(LossType::mse) + 1);

}  // namespace model_schema

std::string_view to_string(InputType v) {
  return model_schema::input_info(v).name;
}
std::string_view to_string(LayerType v) {
  return model_schema::layer_info(v).name;
}
std::string_view to_string(Activation v) {
  return model_schema::kActivations.at(static_cast<size_t>(v)).name;
}
std::string_view to_string(LossType v) {
  return model_schema::kLosses.at(static_cast<size_t>(v)).name;
}
std::string_view to_string(OptimizerType v) {
  return model_schema::optimizer_info(v).name;
}

}  // namespace bsw
