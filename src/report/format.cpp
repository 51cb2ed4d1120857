// Text helpers shared by the printers; see format.hpp.
#include "report/format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "batchsweep/cost.hpp"

namespace bsw::report_format {

namespace {

// Decimals that give three significant digits for |v| (after rounding), at least 0.
int decimals_for_sig3(double v) {
  const double magnitude = std::fabs(v);
  if (magnitude == 0) return 0;
  int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(magnitude))));
  decimals = std::min(decimals, 9);
  // 9.996 with two decimals rounds to 10.00: one digit too many.
  const double scale = std::pow(10.0, decimals);
  if (decimals > 0 && std::round(magnitude * scale) / scale >= std::pow(10.0, 3 - decimals)) --decimals;
  return decimals;
}

// |v| as sig3() prints it, as a number.
double rounded_magnitude(double v) {
  const double scale = std::pow(10.0, decimals_for_sig3(v));
  return std::round(std::fabs(v) * scale) / scale;
}

}  // namespace

// A figure at or above this is printed with an exponent whatever the column: no measurement reaches it.
constexpr double kHugeFigure = 1e15;

bool is_serving_cost(double cost, std::optional<double> price_per_hour, double request_rate) {
  if (!price_per_hour || !(request_rate > 0) || !(cost > 0)) return false;
  const double serving = cost_per_million(*price_per_hour, request_rate);
  return std::fabs(cost - serving) <= 1e-9 * cost;
}

std::string sig3(double v) {
  if (!std::isfinite(v)) return std::string(kAbsent);
  // Under a millionth (a TFLOP/s of hour-long steps), three significant digits in scientific notation, not
  // "0": a measured value is never shown as nothing.
  if (v != 0 && std::fabs(v) < 1e-6) return fmt::format("{:.3g}", v);
  // Beyond any measured figure (a hand-edited 1e300): three digits and an exponent, not 301 digits.
  if (std::fabs(v) >= kHugeFigure) return fmt::format("{:.3g}", v);
  std::string out = fmt::format("{:.{}f}", v, decimals_for_sig3(v));
  if (out == "-0" || out.find_first_not_of("-0.") == std::string::npos) out = fmt::format("{:.{}f}", 0.0, 0);
  return out;
}

std::string fixed(double v, int decimals) {
  if (!std::isfinite(v)) return std::string(kAbsent);
  if (std::fabs(v) >= kHugeFigure) return fmt::format("{:.3g}", v);
  std::string out = fmt::format("{:.{}f}", v, decimals);
  if (out.front() == '-' && out.find_first_not_of("-0.") == std::string::npos) out.erase(0, 1);
  return out;
}

std::string human_rate(double v) {
  if (!std::isfinite(v)) return std::string(kAbsent);
  // Up to E: a plan's FLOP per step passes 10^15 at large batches of a large model.
  static constexpr const char* kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  double scaled = v;
  size_t unit = 0;
  // Move up while the value rounds to 1000 or more at three significant digits.
  while (unit + 1 < std::size(kPrefixes) && rounded_magnitude(scaled) >= 1000) {
    scaled /= 1000;
    ++unit;
  }
  // Past the largest prefix (no real device, but a hand-made report may say so): scientific notation.
  if (rounded_magnitude(scaled) >= 1000) return fmt::format("{:.3g}", v);
  return sig3(scaled) + kPrefixes[unit];
}

std::string human_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double scaled = static_cast<double>(bytes);
  size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && rounded_magnitude(scaled) >= 1000) {
    scaled /= 1024;
    ++unit;
  }
  return sig3(scaled) + " " + kUnits[unit];
}

size_t display_width(std::string_view text) {
  size_t width = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80) ++width;
  }
  return width;
}

std::vector<std::string> render_lines(const TextTable& table) {
  const size_t columns = table.headers.size();
  std::vector<size_t> width(columns, 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t c = 0; c < columns && c < row.size(); ++c)
      width[c] = std::max(width[c], display_width(row[c]));
  };
  measure(table.headers);
  for (const auto& row : table.rows) measure(row);

  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < columns; ++c) {
      const std::string& cell = c < row.size() ? row[c] : std::string();
      const size_t pad = width[c] - display_width(cell);
      const bool last = c + 1 == columns;
      if (c > 0) out += "  ";
      if (table.align[c] == Align::right) {
        out.append(pad, ' ');
        out += cell;
      } else {
        out += cell;
        if (!last) out.append(pad, ' ');
      }
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out;
  };
  std::vector<std::string> lines;
  lines.reserve(table.rows.size() + 1);
  lines.push_back(line(table.headers));
  for (const auto& row : table.rows) lines.push_back(line(row));
  return lines;
}

// Markdown-significant characters backslash-escaped (& too: "A&amp;B" must not render as "A&B"), a line
// break a space.
std::string markdown_cell(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '|' || c == '\\' || c == '*' || c == '_' || c == '`' || c == '<' || c == '>' || c == '[' ||
        c == '&' || c == ']') {
      out += '\\';
      out += c;
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string render_markdown(const TextTable& table) {
  std::string out = "|";
  for (const auto& h : table.headers) {
    out += ' ';
    out += markdown_cell(h);
    out += " |";
  }
  out += "\n|";
  for (Align a : table.align) out += a == Align::right ? " ---: |" : " :--- |";
  out += "\n";
  for (const auto& row : table.rows) {
    out += "|";
    for (size_t c = 0; c < table.headers.size(); ++c) {
      out += ' ';
      out += markdown_cell(c < row.size() ? row[c] : std::string());
      out += " |";
    }
    out += "\n";
  }
  return out;
}

}  // namespace bsw::report_format
