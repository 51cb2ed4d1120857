// An op's path names its layer (a JSON path, "#k" after each repeated copy) and, for the ops one layer
// lowers to, an internal part (".attn.qkv", ".mlp.fc"): errors name the layer and say the part in words,
// since the user's model file has no field called `qkv`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bsw::detail {

struct OpName {
  std::string json_path;            // the layer in the model file: "layers[2].layers[0]"
  std::vector<std::string> copies;  // each "#k" in words: "copy #1 of layers[2]'s `repeat`"
  std::string part;                 // "" for the layer itself, else words: "attention's q/k/v projection"
};

// Splits after the last "]" (and any "#k" after it): what follows is the part within that layer.
OpName split_op_path(std::string_view path);

// "layers[1]'s attention scores", or the layer alone; a repeated layer's copy said in words
// ("layers[1]'s attention scores (copy #1 of layers[1]'s `repeat`)").
std::string op_text(std::string_view path);

}  // namespace bsw::detail
