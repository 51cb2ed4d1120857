// The walk behind first_difference: the first key (sorted, of either side) or index where two JSON values
// disagree.
#include "batchsweep/json_diff.hpp"
#include "batchsweep/json_keys.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace bsw {

namespace {

std::string shown(const nlohmann::json& v, std::size_t width) {
  std::string text = json_text(v);
  if (text.size() > width) text = text.substr(0, width > 3 ? width - 3 : 0) + "...";
  return text;
}

}  // namespace

std::optional<JsonDifference> first_difference(const nlohmann::json& a, const nlohmann::json& b,
                                               const std::string& root, std::size_t width) {
  if (a == b) return std::nullopt;
  const auto below = [&root](const std::string& key) { return root.empty() ? key : root + "." + key; };
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& item : a.items()) keys.insert(item.key());
    for (const auto& item : b.items()) keys.insert(item.key());
    for (const std::string& key : keys) {
      const auto x = a.find(key);
      const auto y = b.find(key);
      if (x != a.end() && y != b.end()) {
        if (auto d = first_difference(*x, *y, below(key), width)) return d;
        continue;
      }
      return JsonDifference{below(key), x != a.end() ? std::optional(shown(*x, width)) : std::nullopt,
                            y != b.end() ? std::optional(shown(*y, width)) : std::nullopt};
    }
  }
  if (a.is_array() && b.is_array()) {
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      if (auto d = first_difference(a[i], b[i], fmt::format("{}[{}]", root, i), width)) return d;
    const auto entries = [](std::size_t n) { return fmt::format("{} {}", n, n == 1 ? "entry" : "entries"); };
    return JsonDifference{root, entries(a.size()), entries(b.size())};
  }
  return JsonDifference{root, shown(a, width), shown(b, width)};
}

}  // namespace bsw
