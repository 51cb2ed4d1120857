// "Did you mean ...?": the known name closest to a mistyped one, for error messages about keys, types and
// presets.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace bsw::model_detail {

// The candidate nearest to `word` — ignoring case and treating '-' and '_' alike — when it is close enough to
// be a likely typo (a small edit distance, or one name a prefix of the other); nullopt otherwise.
[[nodiscard]] std::optional<std::string_view> nearest_name(std::string_view word,
                                                           std::span<const std::string_view> candidates);

// "a, b, c" — for messages that list what is allowed.
[[nodiscard]] std::string join_names(std::span<const std::string_view> names);

}  // namespace bsw::model_detail
