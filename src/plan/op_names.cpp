#include "op_names.hpp"

#include <array>
#include <utility>
#include <vector>

namespace bsw::detail {

namespace {

// Every suffix lower.cpp appends to a layer's path, in words. A transformer block's attention sits under
// ".attn" (an `attention` layer's parts have no prefix).
constexpr std::array<std::pair<std::string_view, std::string_view>, 19> kParts{{
    {".attn.qkv", "attention's q/k/v projection"},
    {".attn.core", "attention scores"},
    {".attn.out", "attention's output projection"},
    {".attn.save", "attention residual"},
    {".attn.add", "attention residual's add"},
    {".mlp.fc", "MLP's first linear (mlp_ratio x dim wide)"},
    {".mlp.proj", "MLP's second linear"},
    {".mlp.save", "MLP residual"},
    {".mlp.add", "MLP residual's add"},
    {".ln1", "layernorm before attention"},
    {".ln2", "layernorm before the MLP"},
    {".qkv", "q/k/v projection"},
    {".core", "attention scores"},
    {".out", "output projection"},
    {".save", "residual input"},
    {".branch", "shortcut"},
    {".add", "residual add"},
    {".attn", "attention residual"},
    {".mlp", "MLP residual"},
}};

}  // namespace

OpName split_op_path(std::string_view path) {
  size_t end = path.rfind(']');
  if (end == std::string_view::npos) return {std::string(path), {}, ""};
  ++end;
  if (end < path.size() && path[end] == '#') {
    ++end;
    while (end < path.size() && path[end] >= '0' && path[end] <= '9') ++end;
  }
  const std::string_view suffix = path.substr(end);
  const std::string_view layer = path.substr(0, end);  // "layers[2]#1.layers[0]"
  OpName name;
  // "layers[2]#1.layers[0]" -> "layers[2].layers[0]", and which copy of each repeated layer it is in.
  for (size_t i = 0; i < layer.size(); ++i) {
    if (layer[i] != '#') {
      name.json_path += layer[i];
      continue;
    }
    std::string k;
    while (i + 1 < layer.size() && layer[i + 1] >= '0' && layer[i + 1] <= '9') k += layer[++i];
    name.copies.push_back("copy #" + k + " of " + name.json_path + "'s `repeat`");
  }
  if (suffix.empty()) return name;
  for (const auto& [key, words] : kParts) {
    if (suffix == key) {
      name.part = words;
      return name;
    }
  }
  name.part = std::string(suffix.substr(1));  // not one of ours: shown as it is
  return name;
}

std::string op_text(std::string_view path) {
  const OpName name = split_op_path(path);
  std::string out = name.part.empty() ? name.json_path : name.json_path + "'s " + name.part;
  if (!name.copies.empty()) {
    out += " (";
    for (size_t i = 0; i < name.copies.size(); ++i) out += (i ? ", " : "") + name.copies[i];
    out += ")";
  }
  return out;
}

}  // namespace bsw::detail
