// Text helpers shared by the printers: human units with fixed rules (so output is deterministic), UTF-8 aware
// padding, and a plain-text table renderer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bsw::report_format {

// Whether a recommended cost per million samples is the serving one, the price over the request rate (what
// analysis writes where the serving batch is the answer: a million requests at that rate), rather than a
// point's, the price over its throughput. Told by the value, so a report analyzed before that rule is worded
// as what it holds.
[[nodiscard]] bool is_serving_cost(double cost, std::optional<double> price_per_hour, double request_rate);

// "—" for a value that is not there.
inline constexpr std::string_view kAbsent = "\u2014";

// Three significant digits, no exponent: 0.981, 12.3, 123, 1234 (integers keep all their digits). "—" for
// NaN/Inf.
[[nodiscard]] std::string sig3(double v);
// Fixed decimals, "—" for NaN/Inf.
[[nodiscard]] std::string fixed(double v, int decimals);
// 950, 12.3k, 1.23M, 4.56G (decimal SI prefixes, three significant digits).
[[nodiscard]] std::string human_rate(double v);
// 512 B, 1.50 KiB, 12.3 MiB, 1.23 GiB (binary prefixes, three significant digits).
[[nodiscard]] std::string human_bytes(uint64_t bytes);
// Terminal columns taken by UTF-8 text (one per code point; the printers use no wide characters).
[[nodiscard]] size_t display_width(std::string_view text);

enum class Align { left, right };

struct TextTable {
  std::vector<std::string> headers;
  std::vector<Align> align;                    // one per column
  std::vector<std::vector<std::string>> rows;  // each as long as headers
};

// Columns separated by two spaces, trailing blanks removed; one string per line (header first), no newlines.
// The last column is not padded, so a long reason there does not widen the others.
[[nodiscard]] std::vector<std::string> render_lines(const TextTable& table);

// A GitHub markdown table ('|' in cells escaped), ending with a newline.
[[nodiscard]] std::string render_markdown(const TextTable& table);

// Escapes markdown punctuation (| \ * _ ` < > [ ]) and turns newlines into spaces, so text stays literal and
// inside one table cell.
[[nodiscard]] std::string markdown_cell(std::string_view text);

}  // namespace bsw::report_format
