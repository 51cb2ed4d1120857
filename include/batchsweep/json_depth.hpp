// Guards for untrusted JSON text (configs, reports, scripts alike): nlohmann's parser recurses once per
// nesting level, so documents are checked for depth by counting brackets outside strings before they are
// parsed; and a syntax error is said where an editor finds it, with the likely mistake named.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bsw {

// Deepest nesting a config or report may have.
inline constexpr int kMaxJsonDepth = 64;

// The 0-based byte offset of the bracket that takes `text` deeper than `max_depth` levels, or nullopt.
[[nodiscard]] std::optional<std::size_t> json_too_deep_at(std::string_view text,
                                                          int max_depth = kMaxJsonDepth);

// A parse error said for a person: "line 3, column 14: <problem>", from nlohmann's `byte` (1-based, the last
// character read) and its what() (its "[json.exception...] parse error at ...: " prefix dropped), with the
// usual non-JSON mistake named where the text shows one: a trailing comma, a comment, NaN or Infinity, single
// quotes.
[[nodiscard]] std::string json_syntax_error(std::string_view text, std::size_t byte, std::string_view what);

// A number written non-zero that a double cannot hold but as 0 (1e-400: nlohmann reads it as 0.0 without a
// word, so a config field would be judged as 0): "line 3, column 14: the number 1e-400 is too small for a
// double (it reads as 0)"; nullopt where every number reads as written. Run after the text parsed.
[[nodiscard]] std::optional<std::string> json_number_underflow(std::string_view text);

// `text` with what a terminal would act on or hide shown instead: bytes that are not UTF-8, control
// characters (C0, DEL, C1: ESC [ 31m would color the rest of the line), zero-width and bidirectional marks,
// as \x1B. For a message quoting a file name or a value the user typed.
[[nodiscard]] std::string printable_text(std::string_view text);

// Whether a character is an ASCII control character (C0 or DEL): a name that titles tables and lines must
// hold none (a newline would split them), and text quoted back in a message shows them replaced.
[[nodiscard]] constexpr bool is_control_character(char c) {
  return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
}
// Also the C1 controls U+0080..U+009F as UTF-8 (0xC2 0x80..0x9F): U+0085 is a line break to some readers, and
// U+009B opens a terminal escape as ESC [ does.
[[nodiscard]] constexpr bool has_control_characters(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (is_control_character(text[i])) return true;
    if (static_cast<unsigned char>(text[i]) == 0xC2 && i + 1 < text.size() &&
        static_cast<unsigned char>(text[i + 1]) >= 0x80 && static_cast<unsigned char>(text[i + 1]) <= 0x9F)
      return true;
  }
  return false;
}

}  // namespace bsw
