// Config JSON -> ModelSpec: checks every key and value against the tables in schema.hpp, applies defaults,
// and reports each problem as a ConfigError with the JSON path of the offending value. Shapes are left to
// lower().
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"
#include "model/schema.hpp"
#include "model/suggest.hpp"

namespace bsw {
namespace {

using nlohmann::json;
namespace schema = model_schema;

// Longest model name accepted: it names reports and files.
constexpr size_t kMaxNameBytes = 200;
// User-supplied text quoted in a message is cut to this many bytes.
constexpr size_t kMaxQuotedBytes = 48;

// "$schema" lets an editor find configs/schema/model-v1.schema.json; it names a schema and says nothing else.
constexpr std::string_view kTopLevelKeys[] = {"$schema", "name", "input", "layers", "loss", "optimizer"};

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

std::string element(const std::string& path, size_t index) {
  return fmt::format("{}[{}]", path, index);
}

// Cuts text to at most `limit` bytes without splitting a UTF-8 sequence, marking the cut with "...".
std::string clip(std::string text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
  text.append("...");
  return text;
}

// Other frameworks' names for what the model format calls otherwise: what people type from habit, too far
// from ours in spelling for a "did you mean" by edit distance.
struct OtherName {
  std::string_view theirs;
  std::string_view ours;
  std::string_view why;
  // Said instead of "did you mean 'ours'?" where there is no one name to take (PyTorch's betas are two).
  std::string_view instead = {};
};
constexpr OtherName kOtherNames[] = {
    {"downsample", "shortcut", "torchvision's downsample is a residual's shortcut here"},
    {"lr", "learning_rate", "PyTorch's lr is learning_rate here"},
    {"units", "out_features", "Keras's Dense units are a linear layer's out_features here"},
    {"filters", "out_channels", "Keras's Conv2D filters are a conv2d's out_channels here"},
    {"num_heads", "heads", "PyTorch's num_heads is heads here"},
    {"nhead", "heads", "PyTorch's nhead is heads here"},
    {"d_model", "dim", "PyTorch's d_model is dim here"},
    {"embed_dim", "dim", "PyTorch's embed_dim is dim here"},
    {"hidden_size", "dim", "Hugging Face's hidden_size is dim here"},
    {"num_embeddings", "vocab_size", "PyTorch's num_embeddings is vocab_size here"},
    {"embedding_dim", "dim", "PyTorch's embedding_dim is dim here"},
    {"n_embd", "dim", "GPT-2's n_embd is dim here"},
    {"n_heads", "heads", "n_heads is heads here"},
    {"n_head", "heads", "GPT-2's n_head is heads here"},
    {"num_attention_heads", "heads", "Hugging Face's num_attention_heads is heads here"},
    {"is_causal", "causal", "PyTorch's is_causal is causal here"},
    {"seq_len", "sequence_length", "the tokens' seq_len is sequence_length here"},
    {"seq_length", "sequence_length", "the tokens' seq_length is sequence_length here"},
    {"max_seq_len", "sequence_length", "the tokens' max_seq_len is sequence_length here"},
    {"n_positions", "sequence_length", "GPT-2's n_positions is the input's sequence_length here"},
    {"block_size", "sequence_length", "nanoGPT's block_size is the input's sequence_length here"},
    {"in_channels", "channels", "the image input's in_channels is channels here"},
    {"in_features", "features", "the vector input's in_features is features here"},
    {"betas", "beta1", "", "PyTorch's betas [b1, b2] are two keys here: \"beta1\": b1, \"beta2\": b2"},
    {"swish", "silu", "swish is SiLU"},
    {"ce", "cross_entropy", "ce is cross_entropy here"},
    {"crossentropy", "cross_entropy", "PyTorch's CrossEntropyLoss is cross_entropy here"},
    {"crossentropyloss", "cross_entropy", "PyTorch's CrossEntropyLoss is cross_entropy here"},
    {"mseloss", "mse", "PyTorch's MSELoss is mse here"},
    {"adaptive_avgpool", "global_avgpool", "an adaptive average pool to 1x1 is global_avgpool here"},
    {"adaptive_avgpool2d", "global_avgpool", "an adaptive average pool to 1x1 is global_avgpool here"},
    {"adaptiveavgpool2d", "global_avgpool", "PyTorch's AdaptiveAvgPool2d((1, 1)) is global_avgpool here"},
    {"adaptive_avg_pool2d", "global_avgpool", "PyTorch's adaptive_avg_pool2d to 1x1 is global_avgpool here"},
    {"globalaveragepooling2d", "global_avgpool", "Keras's GlobalAveragePooling2D is global_avgpool here"},
    {"relu", "linear", "",
     "an activation is no layer here but a field of the layer it follows: \"activation\": \"relu\" on a "
     "linear, conv2d, batchnorm or residual"},
    {"gelu", "linear", "",
     "an activation is no layer here but a field of the layer it follows: \"activation\": \"gelu\" on a "
     "linear, conv2d, batchnorm or residual"},
    {"silu", "linear", "",
     "an activation is no layer here but a field of the layer it follows: \"activation\": \"silu\" on a "
     "linear, conv2d, batchnorm or residual"},
    {"tanh", "linear", "",
     "an activation is no layer here but a field of the layer it follows: \"activation\": \"tanh\" on a "
     "linear, conv2d, batchnorm or residual"},
    {"attn", "attention", "attn is attention here"},
    {"self_attention", "attention", "self-attention is attention here"},
    {"bn", "batchnorm", "bn is batchnorm here"},
    {"ln", "layernorm", "ln is layernorm here"},
    {"dropout", "linear", "",
     "dropout is not modelled: the sweep runs as with dropout 0 (in training PyTorch keeps a mask of a byte "
     "per element, which the plan does not hold); remove the layer"},
    {"dense", "linear", "Keras's Dense is a linear layer here"},
    {"fc", "linear", "a fully connected layer is linear here"},
    {"multiheadattention", "attention", "PyTorch's MultiheadAttention is attention here"},
    {"multihead_attention", "attention", "PyTorch's MultiheadAttention is attention here"},
    {"transformerencoderlayer", "transformer_block",
     "PyTorch's TransformerEncoderLayer is a transformer_block here"},
    {"transformer_encoder_layer", "transformer_block",
     "PyTorch's TransformerEncoderLayer is a transformer_block here"},
};

// Keys a layer never takes, because batchsweep works the value out or fixes it: why, and what to do, where
// one is written (the nearest allowed key would mislead: in_features is not out_features).
struct NotWritten {
  std::string_view key;
  std::string_view why;
};
constexpr NotWritten kNotWritten[] = {
    {"in_features",
     "a layer's input width is not written: it is the previous layer's output (the input's, for the first), "
     "so remove it"},
    {"in_channels",
     "a layer's input channels are not written: they are the previous layer's output (the input's, for the "
     "first), so remove it"},
    {"eps",
     "layernorm's and batchnorm's eps is fixed at 1e-5, PyTorch's default (timm's 1e-6 changes numerics, not "
     "time or memory), so remove it"},
    {"momentum",
     "batchnorm's running statistics move by a fixed momentum of 0.1, PyTorch's default (it changes "
     "numerics, not time or memory), so remove it"},
    {"approximate",
     "gelu is the tanh approximation everywhere (PyTorch's approximate=\"tanh\"; the exact erf form costs "
     "the same), so remove it"},
    {"groups",
     "grouped and depthwise convolutions, and grouped-query attention, are not modelled: a conv2d here is "
     "dense (groups 1), and attention has as many key and value heads as query heads"},
    {"dilation", "dilated convolutions are not modelled: a conv2d here has dilation 1"},
    {"dropout",
     "dropout is not modelled: the sweep runs as with dropout 0 (in training PyTorch keeps a mask of a byte "
     "per element, which the plan does not hold), so remove it"},
};

const NotWritten* not_written(std::string_view key) {
  for (const NotWritten& n : kNotWritten)
    if (n.key == key) return &n;
  return nullptr;
}

// The entry for `word` (case aside) whose name of ours is among `allowed`, or nullptr.
const OtherName* other_name(std::string_view word, std::span<const std::string_view> allowed) {
  std::string lower(word);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const OtherName& n : kOtherNames)
    if (n.theirs == lower && std::find(allowed.begin(), allowed.end(), n.ours) != allowed.end()) return &n;
  return nullptr;
}

// What an error adds for another framework's name: "; did you mean 'heads'? (PyTorch's nhead is heads here)".
std::string suggestion(const OtherName& n) {
  if (!n.instead.empty()) return fmt::format(": {}", n.instead);
  return fmt::format("; did you mean '{}'? ({})", n.ours, n.why);
}

// User-written text (a key, a name) as a message or path shows it: control characters replaced, clipped.
std::string user_text(std::string_view text) {
  std::string out(text);
  for (char& c : out)
    if (is_control_character(c)) c = '?';
  return clip(std::move(out), kMaxQuotedBytes);
}

std::string quote_user(std::string_view text) {
  return fmt::format("'{}'", user_text(text));
}

// A JSON value as a message shows it: scalars as written, containers by kind (never dumped: they may be
// deep).
std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::null:
      return "null";
    case json::value_t::discarded:
      return "a discarded value";
    default:
      return clip(v.dump(-1, ' ', false, json::error_handler_t::replace), kMaxQuotedBytes);
  }
}

template <typename Table, typename NameOf>
std::vector<std::string_view> names_of(const Table& table, NameOf name_of) {
  std::vector<std::string_view> names;
  for (const auto& entry : table) names.push_back(name_of(entry));
  return names;
}

class Parser {
 public:
  explicit Parser(const std::string& source) : source_(source) {}

  ModelSpec run(const json& doc) {
    if (!doc.is_object())
      fail("", fmt::format("a model config must be a JSON object, got {}", describe(doc)));
    check_keys(doc, "", kTopLevelKeys, "in a model config", {});
    if (const auto it = doc.find("$schema"); it != doc.end() && !it->is_string())
      fail("$schema", fmt::format("must be a string (the schema's URI or path), got {}", describe(*it)));

    ModelSpec model;
    model.source = source_;
    model.name = parse_name(doc);
    model.input = parse_input(doc);
    model.layers = parse_top_layers(doc);
    if (const auto it = doc.find("loss"); it != doc.end()) model.loss = parse_loss(*it);
    if (const auto it = doc.find("optimizer"); it != doc.end()) model.optimizer = parse_optimizer(*it);
    model.notes = std::move(notes_);
    return model;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw ConfigError(source_, path, message);
  }

  void require_object(const json& v, const std::string& path, std::string_view what) const {
    if (!v.is_object()) fail(path, fmt::format("expected {} (a JSON object), got {}", what, describe(v)));
  }

  // Every key of `obj` must be in `allowed`. `elsewhere` lists, per unknown key, where it would have been
  // valid.
  void check_keys(const json& obj, const std::string& path, std::span<const std::string_view> allowed,
                  std::string_view what,
                  const std::vector<std::pair<std::string_view, std::string_view>>& elsewhere) const {
    for (const auto& [key, value] : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string message = fmt::format("unknown key {} {}", quote_user(key), what);
      if (const OtherName* renamed = other_name(key, allowed)) {
        message += suggestion(*renamed);
      } else if (const NotWritten* fixed = what.starts_with("for layer type") ? not_written(key) : nullptr) {
        // Only on a layer: an optimizer's momentum or eps is its own (sgd's, adamw's), said as belonging
        // there.
        message += fmt::format(": {}", fixed->why);
      } else if (const auto near = model_detail::nearest_name(key, allowed)) {
        message += fmt::format("; did you mean '{}'?", *near);
      } else {
        std::vector<std::string_view> owners;
        for (const auto& [owner_key, owner] : elsewhere)
          if (owner_key == key) owners.push_back(owner);
        if (!owners.empty()) message += fmt::format(": it belongs to {}", model_detail::join_names(owners));
        message += fmt::format(" (allowed here: {})", model_detail::join_names(allowed));
      }
      fail(child(path, user_text(key)), message);
    }
  }

  [[noreturn]] void missing(const std::string& path, const std::string& why) const {
    fail(path, fmt::format("missing: {}", why));
  }

  // An integer field: a JSON integer (or a float with an integral value) in [1 or 0, kMaxIntField].
  int64_t read_int(const json& v, const std::string& path, schema::IntRule rule) const {
    const std::string_view wanted =
        rule == schema::IntRule::positive ? "a positive integer" : "a non-negative integer";
    const auto wrong = [&] { fail(path, fmt::format("expected {}, got {}", wanted, describe(v))); };
    const auto too_large = [&] {
      fail(path, fmt::format("{} is too large: at most {} is allowed", describe(v), schema::kMaxIntField));
    };
    int64_t value = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(schema::kMaxIntField)) too_large();
      value = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      value = v.get<int64_t>();
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d)) wrong();
      if (d > static_cast<double>(schema::kMaxIntField)) too_large();
      if (d < static_cast<double>(std::numeric_limits<int32_t>::min())) wrong();
      value = static_cast<int64_t>(d);
    } else {
      wrong();
    }
    if (value > schema::kMaxIntField) too_large();
    if (value < 0 || (value == 0 && rule == schema::IntRule::positive)) wrong();
    return value;
  }

  bool read_bool(const json& v, const std::string& path) const {
    if (!v.is_boolean()) fail(path, fmt::format("expected true or false, got {}", describe(v)));
    return v.get<bool>();
  }

  double read_number(const json& v, const std::string& path, const schema::OptimizerField& field) const {
    if (!v.is_number()) fail(path, fmt::format("expected {}, got {}", field.range_text, describe(v)));
    const double d = v.get<double>();
    const bool above_min = field.min_inclusive ? d >= field.min : d > field.min;
    const bool below_max = !field.max || d < *field.max;
    if (!std::isfinite(d) || !above_min || !below_max)
      fail(path, fmt::format("expected {}, got {}", field.range_text, describe(v)));
    // The optimizer's steps run in fp32: a beta of 0.99999999 is 1 there (AdamW's bias correction divides by
    // 1 - beta^t = 0, and every point failed as if training diverged), a learning rate of 5e-324 is 0, and a
    // weight decay of 1e39 is infinite.
    const auto f = static_cast<float>(d);
    if (!std::isfinite(f))
      fail(path,
           fmt::format("expected {}, got {}, which overflows fp32, the precision the optimizer's steps use "
                       "(at most {:.3g})",
                       field.range_text, describe(v), std::numeric_limits<float>::max()));
    if (field.max && !(f < static_cast<float>(*field.max)))
      fail(path, fmt::format(
                     "expected {}, got {}, which is {:g} in fp32, the precision the optimizer's steps use "
                     "(at most {:.9g})",
                     field.range_text, describe(v), f, std::nextafter(static_cast<float>(*field.max), 0.0F)));
    if (!field.min_inclusive && field.min == 0 && std::fpclassify(f) != FP_NORMAL)
      fail(path,
           fmt::format("expected {}, got {}, which underflows fp32, the precision the optimizer's steps use "
                       "(at least {:.3g})",
                       field.range_text, describe(v), std::numeric_limits<float>::min()));
    return d;
  }

  const std::string& read_string(const json& v, const std::string& path) const {
    if (!v.is_string()) fail(path, fmt::format("expected a string, got {}", describe(v)));
    return v.get_ref<const std::string&>();
  }

  // A string naming one entry of an enum table; an unknown one lists the allowed names.
  template <typename Table, typename NameOf>
  const auto& read_choice(const json& v, const std::string& path, const Table& table, NameOf name_of,
                          std::string_view what) const {
    const std::string& text = read_string(v, path);
    for (const auto& entry : table)
      if (name_of(entry) == text) return entry;
    const std::vector<std::string_view> names = names_of(table, name_of);
    std::string message = fmt::format("unknown {} {}", what, quote_user(text));
    if (const OtherName* renamed = other_name(text, names))
      message += suggestion(*renamed);
    else if (const auto near = model_detail::nearest_name(text, names))
      message += fmt::format("; did you mean '{}'?", *near);
    message += fmt::format(" (allowed: {})", model_detail::join_names(names));
    fail(path, message);
  }

  std::string parse_name(const json& doc) const {
    const auto it = doc.find("name");
    if (it == doc.end()) missing("name", "a model config needs a \"name\" (a non-empty string)");
    const std::string& name = read_string(*it, "name");
    if (name.empty()) fail("name", "must not be empty");
    if (name.size() > kMaxNameBytes)
      fail("name", fmt::format("is {} bytes long: at most {} are allowed", name.size(), kMaxNameBytes));
    if (has_control_characters(name)) fail("name", "must not contain control characters");
    return name;
  }

  InputSpec parse_input(const json& doc) const {
    const auto types = schema::input_infos();
    const auto type_names = names_of(types, [](const schema::InputInfo& i) { return i.name; });
    const auto it = doc.find("input");
    if (it == doc.end())
      missing("input", fmt::format("a model config needs an \"input\" object with a type ({})",
                                   model_detail::join_names(type_names)));
    const json& in = *it;
    require_object(in, "input", "the input description");
    const auto type_it = in.find("type");
    if (type_it == in.end())
      missing("input.type", fmt::format("the input needs a type ({})", model_detail::join_names(type_names)));
    const schema::InputInfo& info = read_choice(
        *type_it, "input.type", types, [](const schema::InputInfo& i) { return i.name; }, "input type");

    std::vector<std::string_view> allowed{"type"};
    for (const auto& f : info.fields) allowed.push_back(f.key);
    std::vector<std::pair<std::string_view, std::string_view>> elsewhere;
    for (const auto& other : types)
      for (const auto& f : other.fields) elsewhere.emplace_back(f.key, other.name);
    check_keys(in, "input", allowed, fmt::format("for input type `{}`", info.name), elsewhere);

    InputSpec spec;
    spec.type = info.type;
    for (const auto& f : info.fields) {
      const std::string path = child("input", f.key);
      const auto field_it = in.find(f.key);
      if (field_it == in.end()) missing(path, fmt::format("input type `{}` needs '{}'", info.name, f.key));
      spec.*f.member = read_int(*field_it, path, schema::IntRule::positive);
    }
    return spec;
  }

  std::vector<LayerSpec> parse_top_layers(const json& doc) {
    const auto it = doc.find("layers");
    if (it == doc.end()) missing("layers", "a model config needs a non-empty \"layers\" list");
    if (!it->is_array()) fail("layers", fmt::format("expected a list of layers, got {}", describe(*it)));
    if (it->empty()) fail("layers", "empty: a model needs at least one layer");
    int64_t expanded = 0;
    return parse_layers(*it, "layers", 0, expanded);
  }

  // Parses the layers of one list, `depth` residual levels deep; adds their expanded count (repeats
  // multiplied through) to `expanded`. Recursion is bounded by kMaxResidualDepth.
  std::vector<LayerSpec> parse_layers(const json& list, const std::string& path, int depth,
                                      int64_t& expanded) {
    std::vector<LayerSpec> layers;
    layers.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string layer_path = element(path, i);
      int64_t layer_expanded = 0;
      layers.push_back(parse_layer(list[i], layer_path, depth, layer_expanded));
      expanded += layer_expanded;
      if (expanded > schema::kMaxExpandedLayers)
        fail(layer_path,
             fmt::format("the model expands to more than {} layers (counting repeats); that is more "
                         "than batchsweep plans",
                         schema::kMaxExpandedLayers));
    }
    return layers;
  }

  LayerSpec parse_layer(const json& v, const std::string& path, int depth, int64_t& expanded) {
    const auto types = schema::layer_infos();
    const auto name_of = [](const schema::LayerInfo& i) { return i.name; };
    const auto type_names = names_of(types, name_of);
    require_object(v, path, "a layer");
    const auto type_it = v.find(schema::kLayerTypeKey);
    if (type_it == v.end()) {
      // A mistyped `type` ("Type", "typ") is the likelier mistake than none at all: named as any unknown key
      // is.
      const std::string_view type_key[] = {schema::kLayerTypeKey};
      for (const auto& [key, value] : v.items())
        if (model_detail::nearest_name(key, type_key))
          fail(child(path, user_text(key)),
               fmt::format("unknown key {} for a layer; did you mean '{}'? (every layer needs a type: {})",
                           quote_user(key), schema::kLayerTypeKey, model_detail::join_names(type_names)));
      missing(child(path, schema::kLayerTypeKey),
              fmt::format("every layer needs a type ({})", model_detail::join_names(type_names)));
    }
    const schema::LayerInfo& info =
        read_choice(*type_it, child(path, schema::kLayerTypeKey), types, name_of, "layer type");

    std::vector<std::string_view> allowed{schema::kLayerTypeKey, schema::kRepeatKey};
    for (const auto& f : info.fields) allowed.push_back(f.key);
    if (info.has_layers) {
      allowed.push_back(schema::kInnerLayersKey);
      allowed.push_back(schema::kShortcutKey);
    }
    std::vector<std::pair<std::string_view, std::string_view>> elsewhere;
    for (const auto& other : types) {
      for (const auto& f : other.fields) elsewhere.emplace_back(f.key, other.name);
      if (other.has_layers) {
        elsewhere.emplace_back(schema::kInnerLayersKey, other.name);
        elsewhere.emplace_back(schema::kShortcutKey, other.name);
      }
    }
    const std::string what = fmt::format("layer type `{}`", info.name);
    check_keys(v, path, allowed, "for " + what, elsewhere);

    LayerSpec layer;
    layer.type = info.type;
    layer.json_path = path;
    for (const auto& f : info.fields) {
      const std::string field_path = child(path, f.key);
      const auto it = v.find(f.key);
      if (it == v.end()) {
        if (f.required) missing(field_path, fmt::format("{} needs '{}'", what, f.key));
        continue;
      }
      if (f.int_member) layer.*f.int_member = read_int(*it, field_path, f.rule);
      if (f.bool_member) layer.*f.bool_member = read_bool(*it, field_path);
      if (f.activation_member)
        layer.*f.activation_member = read_choice(
                                         *it, field_path, schema::activation_names(),
                                         [](const schema::ActivationName& a) { return a.name; }, "activation")
                                         .value;
    }
    // A pool's stride defaults to its kernel size (non-overlapping windows).
    if ((info.type == LayerType::maxpool2d || info.type == LayerType::avgpool2d) && !v.contains("stride"))
      layer.stride = layer.kernel_size;
    if (const auto it = v.find(schema::kRepeatKey); it != v.end())
      layer.repeat = read_int(*it, child(path, schema::kRepeatKey), schema::IntRule::positive);

    int64_t inner_expanded = 1;
    if (info.has_layers) {
      if (depth >= schema::kMaxResidualDepth)
        fail(path, fmt::format("nesting too deep: residual layers may nest at most {} levels",
                               schema::kMaxResidualDepth));
      const std::string inner_path = child(path, schema::kInnerLayersKey);
      const auto it = v.find(schema::kInnerLayersKey);
      if (it == v.end()) missing(inner_path, fmt::format("{} needs a non-empty list of inner layers", what));
      if (!it->is_array()) fail(inner_path, fmt::format("expected a list of layers, got {}", describe(*it)));
      if (it->empty()) fail(inner_path, fmt::format("empty: {} needs at least one inner layer", what));
      inner_expanded = 0;
      layer.layers = parse_layers(*it, inner_path, depth + 1, inner_expanded);
      // The projection on the shortcut (torchvision's downsample: a strided 1x1 conv and a batchnorm).
      if (const auto sc = v.find(schema::kShortcutKey); sc != v.end()) {
        const std::string shortcut_path = child(path, schema::kShortcutKey);
        if (!sc->is_array())
          fail(shortcut_path, fmt::format("expected a list of layers, got {}", describe(*sc)));
        if (sc->empty())
          fail(shortcut_path,
               "empty: leave `shortcut` out for the identity, or give the layers that project "
               "the input to the inner layers' output shape");
        layer.shortcut = parse_layers(*sc, shortcut_path, depth + 1, inner_expanded);
      }
    }
    if (!layer.shortcut.empty() && layer.repeat > 1) {
      notes_.push_back(
          fmt::format("{}: {}: `repeat` {} copies the whole block, its `shortcut` and strides included, "
                      "where torchvision's "
                      "_make_layer gives only a stage's first block a downsample: to build that, write the "
                      "first block on "
                      "its own and repeat the identity blocks after it",
                      source_, path, layer.repeat));
    }
    // Both factors are at most kMaxIntField and kMaxExpandedLayers, so the product fits in 64 bits.
    expanded = layer.repeat * inner_expanded;
    if (expanded > schema::kMaxExpandedLayers)
      fail(child(path, schema::kRepeatKey), fmt::format("{} repeats make {} layers: at most {} are allowed",
                                                        layer.repeat, expanded, schema::kMaxExpandedLayers));
    return layer;
  }

  LossType parse_loss(const json& v) const {
    return read_choice(
               v, "loss", schema::loss_names(), [](const schema::LossName& l) { return l.name; }, "loss")
        .value;
  }

  OptimizerSpec parse_optimizer(const json& v) const {
    if (v.is_string()) {  // "optimizer": "sgd", the name alone: the object, with the type it likely meant
      const auto types = schema::optimizer_infos();
      const std::vector<std::string_view> names =
          names_of(types, [](const schema::OptimizerInfo& i) { return i.name; });
      const std::string& text = v.get_ref<const std::string&>();
      std::vector<std::string_view> meant = names;  // every type, where the name is none of them
      if (std::find(names.begin(), names.end(), text) != names.end())
        meant = {text};
      else if (const OtherName* renamed = other_name(text, names))
        meant = {renamed->ours};
      else if (const auto near = model_detail::nearest_name(text, names))
        meant = {*near};
      std::vector<std::string> objects;
      for (const std::string_view type : meant) objects.push_back(fmt::format("{{\"type\": \"{}\"}}", type));
      fail("optimizer", fmt::format("expected the optimizer settings (a JSON object), got {}: write {} (with "
                                    "\"learning_rate\" and the rest beside it)",
                                    describe(v), fmt::join(objects, " or ")));
    }
    require_object(v, "optimizer", "the optimizer settings");
    const auto types = schema::optimizer_infos();
    const auto name_of = [](const schema::OptimizerInfo& i) { return i.name; };
    const schema::OptimizerInfo* info = &schema::optimizer_info(OptimizerSpec{}.type);
    if (const auto it = v.find("type"); it != v.end())
      info = &read_choice(*it, "optimizer.type", types, name_of, "optimizer type");

    std::vector<std::string_view> allowed{"type"};
    for (const auto& f : info->fields) allowed.push_back(f.key);
    std::vector<std::pair<std::string_view, std::string_view>> elsewhere;
    for (const auto& other : types)
      for (const auto& f : other.fields) elsewhere.emplace_back(f.key, other.name);
    check_keys(v, "optimizer", allowed, fmt::format("for optimizer `{}`", info->name), elsewhere);

    OptimizerSpec spec;
    spec.type = info->type;
    for (const auto& f : info->fields) {
      const auto it = v.find(f.key);
      if (f.bool_member)
        spec.*f.bool_member =
            it == v.end() ? f.default_value != 0 : read_bool(*it, child("optimizer", f.key));
      else
        spec.*f.member = it == v.end() ? f.default_value : read_number(*it, child("optimizer", f.key), f);
    }
    // torch.optim.SGD refuses the same: Nesterov momentum needs a momentum.
    if (spec.type == OptimizerType::sgd && spec.nesterov && spec.momentum == 0.0)
      fail(child("optimizer", "nesterov"),
           "Nesterov momentum needs a momentum > 0 (optimizer.momentum is 0)");
    return spec;
  }

  const std::string& source_;
  std::vector<std::string> notes_;
};

}  // namespace

ModelSpec parse_model(const nlohmann::json& doc, const std::string& source) {
  ModelSpec model = Parser(source).run(doc);
  // Shapes through the stack: lower() throws a ConfigError naming the layer when they do not fit.
  static_cast<void>(lower(model));
  return model;
}

}  // namespace bsw
