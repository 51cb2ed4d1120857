// Where two JSON documents first differ, for messages that say which setting of two runs disagrees
// (compare's same-name models, run --resume's settings).
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace bsw {

struct JsonDifference {
  // The path of the first difference below the root given ("settings.model.layers[0].out_features"); the root
  // itself where the two values differ at the top (or one is an object and the other not).
  std::string where;
  // Each side's value there, dumped and shortened; nullopt where that side has no such key. Arrays of other
  // lengths that agree as far as the shorter goes say "N entries".
  std::optional<std::string> first, second;
};

// The first difference between `a` and `b` in key order (keys of either, sorted), or nullopt where they are
// equal. Values longer than `width` characters are cut to it, ending in "...".
[[nodiscard]] std::optional<JsonDifference> first_difference(const nlohmann::json& a, const nlohmann::json& b,
                                                             const std::string& root = "",
                                                             std::size_t width = 60);

}  // namespace bsw
