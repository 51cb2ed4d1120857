// The --batch grammar (lists, arithmetic and geometric ranges, `auto`), byte sizes (--memory-limit) and their
// formatting. Every error is a UsageError that names the flag and the item that is wrong.
#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "batchsweep/errors.hpp"
#include "batchsweep/sweep.hpp"

namespace bsw {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = s.find(sep, begin);
    parts.push_back(s.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  return parts;
}

// Context for error messages: "--batch: '8:2' in '1,8:2': stop 2 is below start 8".
// A --batch value quoted back in a message: a long list (thousands of batches) clipped to its start, so the
// error is a line, not the whole list again.
std::string quoted_spec(std::string_view text) {
  text = trim(text);
  constexpr std::size_t kShown = 60;
  if (text.size() <= kShown + 20) return std::string(text);
  return fmt::format("{}\u2026 ({} characters)", text.substr(0, kShown), text.size());
}

struct ItemContext {
  std::string_view flag;
  std::string_view text;
  std::string_view item;

  [[noreturn]] void fail(const std::string& why) const {
    if (trim(text) == trim(item)) throw UsageError(fmt::format("{}: '{}': {}", flag, quoted_spec(item), why));
    throw UsageError(fmt::format("{}: '{}' in '{}': {}", flag, quoted_spec(item), quoted_spec(text), why));
  }
};

// An integer in [lowest, highest]; `what` names the number in errors ("batch", "step", "factor").
int64_t parse_integer(std::string_view token, const ItemContext& ctx, std::string_view what, int64_t lowest,
                      int64_t highest) {
  token = trim(token);
  if (token.empty()) ctx.fail(fmt::format("the {} is missing", what));
  const std::string maximum = what == "batch" ? fmt::format("the maximum {} (2^24)", highest)
                                              : fmt::format("the maximum {}", highest);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (ec != std::errc() || end != token.data() + token.size()) {
    // Integral scientific notation ("1e9") or a number too large for 64 bits: read as a double to say how
    // large.
    double real = 0;
    const auto [rend, rec] = std::from_chars(token.data(), token.data() + token.size(), real);
    const bool is_number = (rec == std::errc() || rec == std::errc::result_out_of_range) &&
                           rend == token.data() + token.size() && !std::isnan(real);
    // Out of a double's range from_chars leaves `real` as it was: huge (1e400) or tiny (1e-400) by the
    // exponent's sign, and below zero by the number's.
    if (is_number && rec == std::errc::result_out_of_range) {
      const std::size_t e = token.find_first_of("eE");
      const bool tiny = e != std::string_view::npos && e + 1 < token.size() && token[e + 1] == '-';
      real = tiny ? 0.5 : token.front() == '-' ? -HUGE_VAL : HUGE_VAL;
    }
    if (!is_number || (std::isfinite(real) && real != std::floor(real))) {
      // "1-64" or "1..64", a range written as other tools write it.
      for (const std::string_view dash : {std::string_view(".."), std::string_view("-")}) {
        const std::size_t at = token.find(dash, 1);
        if (what != "batch" || at == std::string_view::npos) continue;
        const std::string_view lo = token.substr(0, at), hi = token.substr(at + dash.size());
        const auto digits = [](std::string_view s) {
          return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
        };
        if (digits(lo) && digits(hi))
          ctx.fail(
              fmt::format("batch '{}' is not an integer: a range is start:stop, e.g. {}:{}:*2 (doubling) "
                          "or {}:{}:+8",
                          token, lo, hi, lo, hi));
      }
      ctx.fail(fmt::format("{} '{}' is not an integer", what, token));
    }
    if (real < static_cast<double>(lowest))
      ctx.fail(fmt::format("{} {} is below the minimum {}", what, token, lowest));
    if (real > static_cast<double>(highest)) ctx.fail(fmt::format("{} {} is above {}", what, token, maximum));
    value = static_cast<int64_t>(real);
  }
  if (value < lowest) ctx.fail(fmt::format("{} {} is below the minimum {}", what, value, lowest));
  if (value > highest) ctx.fail(fmt::format("{} {} is above {}", what, token, maximum));
  return value;
}

void check_count(std::size_t count, const ItemContext& ctx) {
  if (count > kMaxBatchCount)
    ctx.fail(fmt::format("expands to more than {} batches; use a larger step or `auto`", kMaxBatchCount));
}

// Appends the batches of one range item "start:stop[:+step|:*factor]".
void expand_range(std::string_view item, const ItemContext& ctx, std::vector<int64_t>& out) {
  const auto fields = split(item, ':');
  if (fields.size() > 3) ctx.fail("a range is start:stop, start:stop:+step or start:stop:*factor");
  // "1:" and ":8": which end is missing, as "the step is missing" says of "1:8:+".
  if (trim(fields[0]).empty()) ctx.fail("the range's start is missing (start:stop)");
  if (trim(fields[1]).empty()) ctx.fail("the range's stop is missing (start:stop)");
  const int64_t start = parse_integer(fields[0], ctx, "batch", 1, kMaxBatch);
  const int64_t stop = parse_integer(fields[1], ctx, "batch", 1, kMaxBatch);
  if (stop < start) ctx.fail(fmt::format("stop {} is below start {}", stop, start));

  bool geometric = true;  // `16:128` means `16:128:*2`
  int64_t step = 2;
  if (fields.size() == 3) {
    const std::string_view spec = trim(fields[2]);
    if (spec.empty()) ctx.fail("the step is missing (write +N or *N)");
    if (spec.front() == '+') {
      geometric = false;
      step = parse_integer(spec.substr(1), ctx, "step", 1, kMaxBatch);
    } else if (spec.front() == '*') {
      step = parse_integer(spec.substr(1), ctx, "factor", 2, kMaxBatch);
    } else {
      // A bare number: both readings of it, where each is a valid step.
      int64_t n = 0;
      const bool number = spec.size() <= 9 &&
                          std::all_of(spec.begin(), spec.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (number)
        for (char c : spec) n = n * 10 + (c - '0');
      const std::string_view from = trim(fields[0]), to = trim(fields[1]);
      std::vector<std::string> readings;
      if (number && n >= 2 && n <= kMaxBatch)
        readings.push_back(fmt::format("{}:{}:*{} multiplies by {}", from, to, n, n));
      if (number && n >= 1 && n <= kMaxBatch)
        readings.push_back(fmt::format("{}:{}:+{} adds {}", from, to, n, n));
      ctx.fail(fmt::format("step '{}' must start with + (arithmetic) or * (geometric){}", spec,
                           readings.empty()       ? std::string()
                           : readings.size() == 1 ? ": " + readings[0]
                                                  : ": " + readings[0] + ", " + readings[1]));
    }
  }

  if (geometric) {
    std::size_t count = 0;
    for (int64_t b = start; b <= stop; b *= step) {
      check_count(++count, ctx);
      out.push_back(b);
      if (b > stop / step) break;  // the next one is past stop (and would overflow for huge factors)
    }
  } else {
    check_count(static_cast<std::size_t>((stop - start) / step) + 1, ctx);
    for (int64_t b = start; b <= stop; b += step) out.push_back(b);
  }
}

struct Unit {
  std::string_view name;  // lower case
  uint64_t bytes;
};

// Sizes are accumulated in 128 bits so that overflow past 64 bits is detected, not wrapped.
__extension__ using u128 = unsigned __int128;

constexpr uint64_t kKi = 1024;
constexpr std::array<Unit, 11> kUnits{{
    {"b", 1},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", 1000ULL * 1000 * 1000},
    {"tb", 1000ULL * 1000 * 1000 * 1000},
    {"pb", 1000ULL * 1000 * 1000 * 1000 * 1000},
    {"kib", kKi},
    {"mib", kKi* kKi},
    {"gib", kKi* kKi* kKi},
    {"tib", kKi* kKi* kKi* kKi},
    {"pib", kKi* kKi* kKi* kKi* kKi},
}};

}  // namespace

BatchSpec parse_batch_spec(std::string_view text, std::string_view flag) {
  BatchSpec spec;
  spec.text = std::string(trim(text));
  if (spec.text.empty()) throw UsageError(fmt::format("{}: the batch list is empty", flag));

  std::vector<int64_t> batches;
  for (const std::string_view raw : split(text, ',')) {
    const ItemContext ctx{flag, text, raw};
    const std::string_view item = trim(raw);
    if (item.empty()) ctx.fail("empty item in the batch list");
    if (item.size() == 4 && item != "auto" &&
        std::equal(item.begin(), item.end(), "auto",
                   [](char a, char b) { return std::tolower(static_cast<unsigned char>(a)) == b; }))
      ctx.fail("did you mean auto (lower case)?");
    if (item == "auto") {
      if (trim(text) != "auto") ctx.fail("`auto` cannot be combined with other batches");
      spec.auto_search = true;
      return spec;
    }
    if (item.find(':') != std::string_view::npos) {
      expand_range(item, ctx, batches);
    } else {
      batches.push_back(parse_integer(item, ctx, "batch", 1, kMaxBatch));
    }
    if (batches.size() > kMaxBatchCount) {
      std::sort(batches.begin(), batches.end());
      batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
      if (batches.size() > kMaxBatchCount)
        throw UsageError(
            fmt::format("{}: '{}' {} more than {} batches; {}", flag, quoted_spec(spec.text),
                        text.find(':') == std::string_view::npos ? "lists" : "expands to", kMaxBatchCount,
                        text.find(':') == std::string_view::npos ? "give fewer, a range (1:4096:*2) or `auto`"
                                                                 : "use larger steps or `auto`"));
    }
  }
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  spec.batches = std::move(batches);
  return spec;
}

void check_samples_per_step(int64_t largest_batch, int64_t accumulation) {
  if (largest_batch > max_micro_batch(accumulation))
    throw UsageError(fmt::format(
        "--accumulation: batch {} x accumulation {} is more than {} (2^24) samples per step; lower the "
        "accumulation or the largest batch",
        largest_batch, accumulation, kMaxBatch));
}

uint64_t parse_size(std::string_view text, std::string_view flag) {
  const std::string_view s = trim(text);
  const auto fail = [&](const std::string& why) -> uint64_t {
    throw UsageError(
        fmt::format("{}: invalid size '{}': {} (examples: 24GiB, 80GB, 512MiB, 4096B)", flag, s, why));
  };
  if (s.empty()) return fail("empty");
  if (s.front() == '-') return fail("a size cannot be negative");

  // Digits, an optional fraction, then the unit.
  std::size_t pos = 0;
  u128 integer_part = 0;
  std::size_t integer_digits = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
    integer_part = integer_part * 10 + static_cast<unsigned>(s[pos] - '0');
    if (++integer_digits > 20) return fail("does not fit in 64 bits");
    ++pos;
  }
  u128 fraction = 0;
  u128 fraction_scale = 1;
  std::size_t fraction_digits = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos]))) {
      if (++fraction_digits > 18) return fail("more than 18 digits after the decimal point");
      fraction = fraction * 10 + static_cast<unsigned>(s[pos] - '0');
      fraction_scale *= 10;
      ++pos;
    }
  }
  if (integer_digits == 0 && fraction_digits == 0)
    return fail("it does not start with a number");  // a card's name is the CLI's (parse_memory)
  // An exponent, as --batch takes one: 1e9, 1.5e+10, 2e3MiB.
  u128 power = 1;
  if (pos + 1 < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
    std::size_t at = pos + 1;
    if (s[at] == '-' && at + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[at + 1]))) {
      // Said as the decimal it is: 5e-1TiB is 0.5TiB.
      std::size_t end = at + 1;
      unsigned shift = 0;
      while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end])) && shift < 100)
        shift = shift * 10 + static_cast<unsigned>(s[end++] - '0');
      std::string digits(s.substr(0, pos));
      std::size_t point = digits.find('.');
      if (point == std::string::npos) point = digits.size();
      digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
      if (shift > 30) return fail("a negative exponent (write the size as a decimal: 0.5TiB, not 5e-1TiB)");
      while (point < shift + 1) {
        digits.insert(digits.begin(), '0');
        ++point;
      }
      std::string decimal = digits.substr(0, point - shift) + "." + digits.substr(point - shift);
      while (decimal.ends_with('0')) decimal.pop_back();
      if (decimal.ends_with('.')) decimal.pop_back();
      return fail(fmt::format("a negative exponent (write it as a decimal: {}{})", decimal, s.substr(end)));
    }
    if (s[at] == '+') ++at;
    std::size_t exponent_digits = 0;
    unsigned exponent = 0;
    while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at]))) {
      exponent = std::min(exponent * 10 + static_cast<unsigned>(s[at] - '0'), 100u);  // 1e005 is 1e5
      ++exponent_digits;
      ++at;
    }
    if (exponent_digits > 0) {
      if (exponent > 19) return fail("does not fit in 64 bits");
      for (unsigned i = 0; i < exponent; ++i) power *= 10;
      pos = at;
    }
  }

  std::string unit(trim(s.substr(pos)));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  uint64_t multiplier = 1;
  if (!unit.empty()) {
    // A prefix in capitals and a lower-case b is bits (80Gb is 10 GB), not taken for bytes; all lower case
    // (80gb) is the casual spelling of bytes.
    if (const std::string_view written = trim(s.substr(pos));
        written.size() >= 2 && written.back() == 'b' &&
        std::isupper(static_cast<unsigned char>(written.front())) != 0 &&
        std::find_if(kUnits.begin(), kUnits.end(), [&](const Unit& u) { return u.name == unit; }) !=
            kUnits.end())
      return fail(
          fmt::format("'{}' is bits (a capital prefix and a lower-case b, as network speeds are "
                      "written); sizes are in bytes: {}B",
                      written, written.substr(0, written.size() - 1)));
    const auto it = std::find_if(kUnits.begin(), kUnits.end(), [&](const Unit& u) { return u.name == unit; });
    if (it == kUnits.end()) {
      const std::string_view written = trim(s.substr(pos));
      // A decimal comma (80,5GiB) or a second point (80.5.1GiB): said as the number it is not.
      if (written.starts_with(',') && written.size() > 1 &&
          std::isdigit(static_cast<unsigned char>(written[1]))) {
        // Three digits after it (1,024MiB) may be a thousands separator: both readings are offered.
        std::size_t digits = 1;
        while (digits < written.size() && std::isdigit(static_cast<unsigned char>(written[digits]))) ++digits;
        if (digits == 4)
          return fail(fmt::format("a comma: write {0}{1} (thousands) or {0}.{1} (a decimal)",
                                  s.substr(0, pos), written.substr(1)));
        return fail(fmt::format("a decimal comma: write {}.{}", s.substr(0, pos), written.substr(1)));
      }
      if (written.starts_with('.')) return fail("more than one decimal point");
      // docker's 40g and Kubernetes' 40G mean 2^30 and 10^9: which one is not guessed.
      if (written.size() == 1 && std::string_view("kKmMgGtTpP").find(written[0]) != std::string_view::npos) {
        const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(written[0])));
        return fail(
            fmt::format("'{0}' could be binary or decimal: write {1}{2}iB (powers of 2, as CUDA and "
                        "docker count) or {1}{2}B (powers of 10, as a datasheet does)",
                        written, s.substr(0, pos), u));
      }
      return fail(
          fmt::format("unknown unit '{}' (use B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB or PiB)", written));
    }
    multiplier = it->bytes;
  }

  // Checked in floating point first, so the exact products below cannot overflow 128 bits.
  const long double approx = (static_cast<long double>(integer_part) +
                              static_cast<long double>(fraction) / static_cast<long double>(fraction_scale)) *
                             static_cast<long double>(multiplier) * static_cast<long double>(power);
  if (approx > 2.0L * static_cast<long double>(UINT64_MAX)) return fail("does not fit in 64 bits");
  const u128 scale = static_cast<u128>(multiplier) * power;
  // A fraction of a unit rounds to the nearest byte (0.001GiB); a fraction of a byte is a typo.
  if (multiplier == 1 && fraction * scale % fraction_scale != 0)
    return fail(unit.empty()
                    ? "that is not a whole number of bytes (give a unit: 1.5GiB)"
                    : "that is not a whole number of bytes (a fraction takes a larger unit, as in 1.5KiB)");
  const u128 whole_bytes = integer_part * scale;
  // Round the fractional bytes to the nearest byte.
  const u128 fraction_bytes = (fraction * scale * 2 + fraction_scale) / (fraction_scale * 2);
  const u128 total = whole_bytes + fraction_bytes;
  if (total > static_cast<u128>(UINT64_MAX)) return fail("does not fit in 64 bits");
  if (total == 0) return fail("a size must be at least 1 byte");
  // `--memory 24` meant 24 GiB: no device has under a MiB, so a small bare number is a missing unit.
  if (unit.empty() && total < (u128{1} << 20))
    return fail(
        total <= 4096
            ? fmt::format("a number without a unit is bytes; write {0}GiB (or {0}B if bytes are meant)", s)
            : fmt::format("a number without a unit is bytes, and {0} B is under a MiB; give it a unit "
                          "({0}B if bytes are meant)",
                          s));
  return static_cast<uint64_t>(total);
}

}  // namespace bsw
