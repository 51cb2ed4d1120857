// Nesting depth of JSON text, counted without parsing, and syntax errors said by line and column (see
// include/batchsweep/json_depth.hpp).
#include "batchsweep/json_depth.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace bsw {

std::optional<std::size_t> json_too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

namespace {

// The common ways a hand-written file is not JSON, judged from the character the parser stopped at.
std::string likely_mistake(std::string_view text, std::size_t at, std::string_view what) {
  if (at >= text.size()) return {};
  const char c = text[at];
  // The parser skips one byte-order mark; a second (an editor that added its own) is a stray byte.
  if (text.starts_with("\xEF\xBB\xBF\xEF\xBB\xBF") && at < 6)
    return " (the file starts with two UTF-8 byte-order marks: remove one, or both)";
  if (what.find("ill-formed UTF-8 byte") != std::string_view::npos)
    return " (the file is not UTF-8 here, maybe Latin-1 or Windows-1252 text: save it as UTF-8)";
  // A number written with a leading zero (0768, -01.5): JSON reads the 0 alone, then the rest as a second
  // number where a ',' had to come; the parser stops in that number. 1.05 and 1e05 are JSON.
  // Only a number after a number gives this error: a bad \u escape also stops on a hex digit, in a string.
  if (std::isdigit(static_cast<unsigned char>(c)) != 0 &&
      what.find("unexpected number literal") != std::string_view::npos) {
    const auto in_number = [&](std::size_t i) {
      const char p = text[i];
      return std::isdigit(static_cast<unsigned char>(p)) != 0 || p == '.' || p == 'e' || p == 'E' ||
             ((p == '+' || p == '-') && i > 0 && (text[i - 1] == 'e' || text[i - 1] == 'E'));
    };
    std::size_t start = at;
    while (start > 0 && in_number(start - 1)) --start;
    if (text[start] == '0' && start < at && std::isdigit(static_cast<unsigned char>(text[start + 1])) != 0) {
      std::size_t end = at + 1;  // -007 stops at its second 0: the number goes on past it
      while (end < text.size() && in_number(end)) ++end;
      const std::string_view written = text.substr(start, end - start);
      std::size_t from = 0;
      while (from + 1 < written.size() && written[from] == '0' &&
             std::isdigit(static_cast<unsigned char>(written[from + 1])) != 0)
        ++from;
      const char* sign = start > 0 && text[start - 1] == '-' ? "-" : "";
      return fmt::format(" (JSON numbers take no leading zero: write {}{}, not {}{})", sign,
                         written.substr(from), sign, written);
    }
  }
  // Another member or element where a ',' or the closing bracket had to come: {"a": 1 "b": 2}, [1 2].
  if ((what.starts_with("syntax error while parsing object - unexpected ") &&
       what.ends_with("expected '}'")) ||
      (what.starts_with("syntax error while parsing array - unexpected ") && what.ends_with("expected ']'")))
    // Not a closing bracket of the other kind ({"a": [1}): that is a mismatched bracket, not a comma.
    if (what.find("end of input") == std::string_view::npos &&
        what.find("unexpected ']'") == std::string_view::npos &&
        what.find("unexpected '}'") == std::string_view::npos)
      return " (a missing comma before it?)";
  if (c == ']' || c == '}') {
    std::size_t i = at;
    while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t' || text[i - 1] == '\n' || text[i - 1] == '\r'))
      --i;
    if (i > 0 && text[i - 1] == ',')
      return fmt::format(" (a trailing comma before '{}': JSON allows none)", c);
  }
  if (c == '/' || c == '#') return " (comments are not JSON)";
  if (c == '\'') return " (JSON strings take double quotes)";
  if (what.starts_with("syntax error while parsing object key - invalid literal"))
    return " (keys take double quotes)";
  // nlohmann stops inside a literal: find where the word began.
  std::size_t start = at;
  while (start > 0 && std::isalpha(static_cast<unsigned char>(text[start - 1])) != 0) --start;
  if (start > 0 && text[start - 1] == '-') --start;
  std::size_t end = std::max(start, at);
  while (end < text.size() && std::isalpha(static_cast<unsigned char>(text[end])) != 0) ++end;
  std::string_view word = text.substr(start, end - start);
  if (word.starts_with("-")) word.remove_prefix(1);
  for (const std::string_view bad : {"NaN", "nan", "Infinity", "inf"})
    if (word == bad) return " (NaN and Infinity are not JSON numbers)";
  for (const std::string_view python : {"True", "False", "None", "T", "F", "N"})
    if (word == python && end - start > 0) return " (JSON writes true, false and null, in lower case)";
  return {};
}

// Calls visit(i) for each byte outside JSON strings and their quotes; visit returns the index to go on from
// (i for the next byte, a token's last byte to skip it) or npos to stop there: the index it stopped at, or
// npos where it never did.
template <class Visit>
std::size_t scan_outside_strings(std::string_view text, Visit visit) {
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    const std::size_t next = visit(i);
    if (next == std::string_view::npos) return i;
    i = next;
  }
  return std::string_view::npos;
}

// Where `token` stands as a number in `text`: outside strings, not part of a longer token; npos if nowhere.
std::size_t number_at(std::string_view text, std::string_view token) {
  if (token.empty()) return std::string_view::npos;
  const auto part_of_number = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-';
  };
  return scan_outside_strings(text, [&](std::size_t i) {
    const bool here = text.compare(i, token.size(), token) == 0 && (i == 0 || !part_of_number(text[i - 1])) &&
                      (i + token.size() == text.size() || !part_of_number(text[i + token.size()]));
    return here ? std::string_view::npos : i;
  });
}

}  // namespace

std::optional<std::string> json_number_underflow(std::string_view text) {
  std::string token;
  const std::size_t at = scan_outside_strings(text, [&](std::size_t i) {
    const char c = text[i];
    if (c != '-' && std::isdigit(static_cast<unsigned char>(c)) == 0) return i;
    // A number token (the text parsed: it is JSON's grammar); only one with an exponent can underflow.
    std::size_t end = i + 1;
    bool nonzero = c >= '1' && c <= '9', exponent = false;
    while (end < text.size()) {
      const char d = text[end];
      if (d == 'e' || d == 'E') {
        exponent = true;
      } else if (std::isdigit(static_cast<unsigned char>(d)) != 0) {
        if (!exponent && d != '0') nonzero = true;
      } else if (d != '.' && d != '+' && d != '-') {
        break;
      }
      ++end;
    }
    token.assign(text.substr(i, end - i));
    if (exponent && nonzero && std::strtod(token.c_str(), nullptr) == 0.0) return std::string_view::npos;
    return end - 1;
  });
  if (at == std::string_view::npos) return std::nullopt;
  const std::size_t line_start =
      text.rfind('\n', at) == std::string_view::npos ? 0 : text.rfind('\n', at) + 1;
  const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
  return fmt::format("line {}, column {}: the number {} is too small for a double (it reads as 0)", line,
                     at - line_start + 1, token);
}

namespace {

// The length of the well-formed UTF-8 sequence at `at` (1 for ASCII), or 0 where the bytes there are none.
std::size_t utf8_sequence(std::string_view s, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b = byte(at);
  if (b < 0x80) return 1;
  const std::size_t n = b >= 0xC2 && b <= 0xDF   ? 2
                        : b >= 0xE0 && b <= 0xEF ? 3
                        : b >= 0xF0 && b <= 0xF4 ? 4
                                                 : 0;
  if (n == 0 || at + n > s.size()) return 0;
  for (std::size_t i = 1; i < n; ++i)
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
  const unsigned char second = byte(at + 1);
  if ((b == 0xE0 && second < 0xA0) || (b == 0xED && second > 0x9F) || (b == 0xF0 && second < 0x90) ||
      (b == 0xF4 && second > 0x8F))
    return 0;  // overlong, a surrogate, or beyond U+10FFFF
  return n;
}

// The code point of one well-formed UTF-8 sequence.
char32_t code_point(std::string_view seq) {
  const auto byte = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(seq[i])); };
  if (seq.size() == 1) return byte(0);
  char32_t c = byte(0) & (0xFFu >> (seq.size() + 1));
  for (std::size_t i = 1; i < seq.size(); ++i) c = (c << 6) | (byte(i) & 0x3Fu);
  return c;
}

// Characters a terminal shows as nothing, or acts on: C0 and C1 controls, DEL, zero-width characters and
// direction marks, bidirectional embeddings and overrides (U+202E turns what follows around), the BOM.
bool is_invisible(char32_t c) {
  return c < 0x20 || (c >= 0x7F && c <= 0x9F) || (c >= 0x200B && c <= 0x200F) ||
         (c >= 0x202A && c <= 0x202E) || (c >= 0x2066 && c <= 0x2069) || c == 0xFEFF;
}

// The parser's message with what it quotes of the file printable and visible: bytes that are not UTF-8 (a
// Latin-1 "é"), control characters and a byte-order mark as \xE9, so a terminal or log reader gets valid
// text that shows them.
std::string printable(std::string_view what) {
  std::string out;
  for (std::size_t i = 0; i < what.size();) {
    const std::size_t n = utf8_sequence(what, i);
    const unsigned char b = static_cast<unsigned char>(what[i]);
    const bool invisible = n > 0 && is_invisible(code_point(what.substr(i, n)));
    if (n == 0 || invisible) {
      out += fmt::format("\\x{:02X}", b);
      ++i;
    } else {
      out.append(what.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace

std::string printable_text(std::string_view text) {
  return printable(text);
}

std::string json_syntax_error(std::string_view text, std::size_t byte, std::string_view raw_what) {
  const std::string printed = printable(raw_what);
  std::string_view what = printed;
  if (!what.empty() && what.front() == '[') {
    const std::size_t end = what.find("] ");
    if (end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  // "parse error at line 3, column 14: syntax error while parsing value - ..." -> the part after the
  // position.
  if (what.starts_with("parse error")) {
    const std::size_t colon = what.find(": ");
    if (colon != std::string_view::npos) what.remove_prefix(colon + 2);
  }
  // nlohmann says where a syntax error is, but not a number beyond a double's range (out_of_range.406,
  // "number overflow parsing '1e400'"): its first occurrence in the text is.
  std::string overflow;
  constexpr std::string_view kOverflow = "number overflow parsing '";
  if (byte == 0 && what.starts_with(kOverflow) && what.ends_with("'")) {
    const std::string_view token = what.substr(kOverflow.size(), what.size() - kOverflow.size() - 1);
    if (const std::size_t at = number_at(text, token); at != std::string_view::npos) byte = at + 1;
    overflow = fmt::format("the number {} is beyond a double's range", token);
    what = overflow;
  }
  if (byte == 0 || text.empty()) return std::string(what);
  // 0-based index of the last character read; the end of the text where the parser read past it (EOF).
  const std::size_t at = std::min(byte - 1, text.size());
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < at; ++i)
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  return fmt::format("line {}, column {}: {}{}", line, at - line_start + 1, what,
                     likely_mistake(text, at, what));
}

}  // namespace bsw
