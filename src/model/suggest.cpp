// Edit distance (optimal string alignment: insertions, deletions, substitutions, adjacent swaps) for
// suggestions.
#include "model/suggest.hpp"

#include <algorithm>
#include <vector>

namespace bsw::model_detail {
namespace {

// Words longer than this are not compared: a suggestion for them is unlikely to help and the cost is
// quadratic.
constexpr size_t kMaxComparedLength = 64;

std::string normalized(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c == '-') c = '_';
  }
  return out;
}

size_t osa_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

}  // namespace

std::optional<std::string_view> nearest_name(std::string_view word,
                                             std::span<const std::string_view> candidates) {
  if (word.empty() || word.size() > kMaxComparedLength) return std::nullopt;
  const std::string w = normalized(word);
  std::optional<std::string_view> best;
  size_t best_distance = 0;
  for (std::string_view candidate : candidates) {
    const std::string c = normalized(candidate);
    size_t distance = osa_distance(w, c);
    const size_t shorter = std::min(w.size(), c.size());
    // Allow about one edit per three characters (at least one), so "bais" -> "bias" but "dim" -/-> "heads".
    const size_t allowed = std::max<size_t>(1, shorter / 3);
    const bool prefix = shorter >= 3 && (c.starts_with(w) || w.starts_with(c));
    if (distance > allowed && !prefix) continue;
    if (prefix) distance = std::min(distance, allowed);
    if (!best || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string join_names(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

}  // namespace bsw::model_detail
