// ModelSpec -> config JSON with every default written out, from the same tables parse.cpp reads with, so that
// parse_model(to_json(m)) gives m back.
#include <string>

#include "batchsweep/model.hpp"
#include "model/schema.hpp"

namespace bsw {
namespace {

using nlohmann::json;
namespace schema = model_schema;

json layer_json(const LayerSpec& layer);

json layers_json(const std::vector<LayerSpec>& layers) {
  json list = json::array();
  for (const LayerSpec& layer : layers) list.push_back(layer_json(layer));
  return list;
}

json layer_json(const LayerSpec& layer) {
  const schema::LayerInfo& info = schema::layer_info(layer.type);
  json out = json::object();
  out[std::string(schema::kLayerTypeKey)] = info.name;
  for (const auto& f : info.fields) {
    const std::string key(f.key);
    if (f.int_member && !(f.emit_only_nonzero && layer.*f.int_member == 0)) out[key] = layer.*f.int_member;
    if (f.bool_member) out[key] = layer.*f.bool_member;
    if (f.activation_member && !(f.emit_only_nonzero && layer.*f.activation_member == Activation::none))
      out[key] = to_string(layer.*f.activation_member);
  }
  if (info.has_layers) out[std::string(schema::kInnerLayersKey)] = layers_json(layer.layers);
  // Only where there is one: a config without it (the identity) resolves as before shortcuts existed.
  if (!layer.shortcut.empty()) out[std::string(schema::kShortcutKey)] = layers_json(layer.shortcut);
  out[std::string(schema::kRepeatKey)] = layer.repeat;
  return out;
}

json input_json(const InputSpec& input) {
  const schema::InputInfo& info = schema::input_info(input.type);
  json out = json::object();
  out["type"] = info.name;
  for (const auto& f : info.fields) out[std::string(f.key)] = input.*f.member;
  return out;
}

json optimizer_json(const OptimizerSpec& optimizer) {
  const schema::OptimizerInfo& info = schema::optimizer_info(optimizer.type);
  json out = json::object();
  out["type"] = info.name;
  for (const auto& f : info.fields) {
    if (f.bool_member) {
      if (optimizer.*f.bool_member || !f.emit_only_nonzero)
        out[std::string(f.key)] = optimizer.*f.bool_member;
    } else if (optimizer.*f.member != 0.0 || !f.emit_only_nonzero) {
      out[std::string(f.key)] = optimizer.*f.member;
    }
  }
  return out;
}

}  // namespace

nlohmann::json to_json(const ModelSpec& model) {
  json out = json::object();
  out["name"] = model.name;
  out["input"] = input_json(model.input);
  out["layers"] = layers_json(model.layers);
  out["loss"] = to_string(model.loss);
  out["optimizer"] = optimizer_json(model.optimizer);
  return out;
}

}  // namespace bsw
