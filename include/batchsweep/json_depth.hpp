// A guard for untrusted JSON text: nlohmann's parser recurses once per nesting level, so documents are
// checked for depth by counting brackets outside strings before they are parsed (configs and reports alike).
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace bsw {

// Deepest nesting a config or report may have.
inline constexpr int kMaxJsonDepth = 64;

// The 0-based byte offset of the bracket that takes `text` deeper than `max_depth` levels, or nullopt.
[[nodiscard]] std::optional<std::size_t> json_too_deep_at(std::string_view text,
                                                          int max_depth = kMaxJsonDepth);

}  // namespace bsw
