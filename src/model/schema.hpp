// The config format as data: for each input, layer and optimizer type, its name and the keys it takes, with
// the ModelSpec member each key fills. parse.cpp reads documents and emit.cpp writes them from these same
// tables, so a key cannot be accepted by one and forgotten by the other.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "batchsweep/model.hpp"

namespace bsw::model_schema {

// The largest value any integer field may hold; products of fields are checked later by lower().
inline constexpr int64_t kMaxIntField = 2147483647;
// Residual nesting beyond this many levels is refused (lower() refuses the same).
inline constexpr int kMaxResidualDepth = 32;
// A model may expand (after `repeat`) to at most this many layers, which bounds the work and memory of
// lower().
inline constexpr int64_t kMaxExpandedLayers = 10000;

enum class IntRule { positive, non_negative };

// One key of a layer. Exactly one of the member pointers is set. Absent optional keys keep LayerSpec{}'s
// value, except a pool's `stride`, which defaults to its kernel_size.
struct LayerField {
  std::string_view key;
  bool required = false;
  IntRule rule = IntRule::positive;
  int64_t LayerSpec::*int_member = nullptr;
  bool LayerSpec::*bool_member = nullptr;
  Activation LayerSpec::*activation_member = nullptr;
  // Written out only where it is not 0 (an activation: not none): a field added after reports were written (a
  // pool's padding, a residual's activation), so the resolved model (settings.model) of a config without it
  // reads as it did, and compare and --resume match.
  bool emit_only_nonzero = false;
};

struct LayerInfo {
  LayerType type;
  std::string_view name;
  std::span<const LayerField> fields;
  bool has_layers = false;  // residual: an inner "layers" list
};

struct InputField {
  std::string_view key;
  int64_t InputSpec::*member = nullptr;  // every input key is a required positive integer
};

struct InputInfo {
  InputType type;
  std::string_view name;
  std::span<const InputField> fields;
};

// An optimizer key with its default (per optimizer type): a real number in an open/closed range (member), or
// a flag (bool_member, read as true or false; default_value 0 or 1).
struct OptimizerField {
  std::string_view key;
  double OptimizerSpec::*member = nullptr;
  double default_value = 0;
  double min = 0;
  bool min_inclusive = false;
  std::optional<double> max;    // exclusive
  std::string_view range_text;  // e.g. "a number > 0", "a number in [0, 1)"
  bool OptimizerSpec::*bool_member = nullptr;
  // Written out only where it is not 0 (false): a key added after reports were written (sgd's weight_decay
  // and nesterov), so the resolved model of a config without it reads as it did, and compare and --resume
  // match.
  bool emit_only_nonzero = false;
};

struct OptimizerInfo {
  OptimizerType type;
  std::string_view name;
  std::span<const OptimizerField> fields;
};

// Keys every layer takes, besides its own fields.
inline constexpr std::string_view kLayerTypeKey = "type";
inline constexpr std::string_view kRepeatKey = "repeat";
inline constexpr std::string_view kInnerLayersKey = "layers";
inline constexpr std::string_view kShortcutKey = "shortcut";  // a residual's projection layers (optional)

[[nodiscard]] std::span<const LayerInfo> layer_infos();
[[nodiscard]] std::span<const InputInfo> input_infos();
[[nodiscard]] std::span<const OptimizerInfo> optimizer_infos();
[[nodiscard]] const LayerInfo& layer_info(LayerType type);
[[nodiscard]] const InputInfo& input_info(InputType type);
[[nodiscard]] const OptimizerInfo& optimizer_info(OptimizerType type);

// Names of the small enums, in declaration order.
struct ActivationName {
  Activation value;
  std::string_view name;
};
struct LossName {
  LossType value;
  std::string_view name;
};
[[nodiscard]] std::span<const ActivationName> activation_names();
[[nodiscard]] std::span<const LossName> loss_names();

}  // namespace bsw::model_schema
