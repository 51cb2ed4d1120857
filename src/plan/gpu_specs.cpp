// The compiled-in GPU spec sheet and its cards by name (see include/batchsweep/gpu_specs.hpp).
#include "batchsweep/gpu_specs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <cctype>

namespace bsw {
namespace detail {
extern const std::string_view kGpusJson;  // generated from configs/gpus.json (src/CMakeLists.txt)
}  // namespace detail

namespace {

// Words that say whose a card is, not which: "Tesla V100" is a V100 (PCIe or SXM2, as "V100" is).
bool is_brand(std::string_view word) {
  return word == "nvidia" || word == "geforce" || word == "tesla";
}

// The name's words, lower case, without a brand: "NVIDIA GeForce RTX-4090" -> {"rtx", "4090"}.
std::vector<std::string> words_of(std::string_view name) {
  std::vector<std::string> words;
  std::string word;
  for (const char c : std::string(name) + " ") {
    if (c == ' ' || c == '-' || c == '_') {
      if (!word.empty() && !is_brand(word)) words.push_back(word);
      word.clear();
    } else {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  // A size spelt apart from its unit ("H100 80 GB") is one word, as "80GB" is.
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string& number = words[i - 1];
    if ((words[i] == "gb" || words[i] == "g") && !number.empty() &&
        std::all_of(number.begin(), number.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
      words[i - 1] += "gb";
      words.erase(words.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  return words;
}

// The spelling a user types and the sheet's name compare in: the words joined ("rtx4090").
std::string normalized(std::string_view text) {
  std::string out;
  for (const std::string& word : words_of(text)) out += word;
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Whether `pattern` occurs in `name` (both lower case) as whole tokens: no letter or digit right before or
// after it, so "h200" is not found in "nvidia gh200 480gb", nor "a10" in "nvidia a10g".
bool contains_tokens(const std::string& name, const std::string& pattern) {
  const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  for (size_t at = name.find(pattern); at != std::string::npos; at = name.find(pattern, at + 1)) {
    const size_t end = at + pattern.size();
    const bool left = at == 0 || !alnum(name[at - 1]) || !alnum(pattern.front());
    const bool right = end == name.size() || !alnum(name[end]) || !alnum(pattern.back());
    if (left && right) return true;
  }
  return false;
}

GpuCard card_of(const nlohmann::json& gpu) {
  return {gpu.at("name").get<std::string>(), gpu.at("cuda_mib").get<uint64_t>() * 1024 * 1024,
          gpu.at("memory_gb").get<int64_t>()};
}

// The sheet's entries `wanted` (a normalized name) is the whole name of, else those whose first words it is
// ("h100", then "h100sxm"; never part of a word: "l40" of "l40s").
std::vector<const nlohmann::json*> entries_named(const std::string& wanted) {
  if (wanted.empty()) return {};
  std::vector<const nlohmann::json*> whole, begun;
  for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus")) {
    const std::string name = gpu.at("name").get<std::string>();
    if (normalized(name) == wanted) {
      whole.push_back(&gpu);
      continue;
    }
    std::string words;
    for (const std::string& word : words_of(name)) {
      words += word;
      if (words == wanted) {
        begun.push_back(&gpu);
        break;
      }
    }
  }
  return whole.empty() ? begun : whole;
}

// The GB of a size as a card's name gives it: "80gb", or "40g" as people shorten it (lower case, from
// words_of); nullopt for any other word.
std::optional<int64_t> size_word_gb(const std::string& word) {
  const size_t unit = word.ends_with("gb") ? 2 : word.ends_with("g") ? 1 : 0;
  const size_t digits = word.size() - unit;
  if (unit == 0 || digits == 0 || digits > 6 ||
      !std::all_of(word.begin(), word.begin() + static_cast<std::ptrdiff_t>(digits),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
    return std::nullopt;
  return std::stoll(word.substr(0, digits));
}

bool is_size_word(const std::string& word) {
  return size_word_gb(word).has_value();
}

// "H100 80GB" -> {"h100", 80}: the other words normalized, and the one size word's GB; nullopt without
// exactly one size word and another word.
std::optional<std::pair<std::string, int64_t>> without_size(std::string_view text) {
  std::string rest;
  std::optional<int64_t> gb;
  for (const std::string& word : words_of(text)) {
    if (!is_size_word(word)) {
      rest += word;
    } else if (gb) {
      return std::nullopt;
    } else {
      gb = size_word_gb(word);
    }
  }
  if (!gb || rest.empty()) return std::nullopt;
  return std::pair{rest, *gb};
}

// The card a device name as nvidia-smi or CUDA prints it names ("NVIDIA A100-SXM4-80GB", "Tesla
// V100-SXM2-32GB"), by the sheet's own tokens: with its vendor, or by a match string of more than the model
// number (the peak-rate matcher ignores sizes, so "A100 80" would find the 40 GB entry; "A100-SXM4-80GB",
// nvidia-smi's name without its vendor, says it), and no laptop part. `other_size`: its "16GB" is not the
// card's memory_gb (a V100 SXM2 16GB, a variant the sheet lacks).
struct DeviceNameMatch {
  const nlohmann::json* gpu = nullptr;
  bool other_size = false;
};

DeviceNameMatch device_name_match(std::string_view text) {
  if (is_laptop_part(text) || is_mig_slice(text)) return {};
  const std::vector<std::string> words = words_of(text);  // lower case already, without a brand
  const nlohmann::json* gpu = gpu_spec_for_device(text);
  if (gpu == nullptr) return {};
  // Only by a match string of more than the model number ("A100-SXM4-80GB", spelt with spaces or dashes
  // alike: "A100 SXM4 80GB"; "H100 SXM5"), with a vendor or without: "H100 80GB" holds one of the H100 PCIe
  // and SXM, both 80 GB, and the sheet's first is no answer; "A100 SXM" is none of the three A100s, nor is
  // "NVIDIA A100 PCIe" the 40 GB one whose catch-all "A100" it holds. (A device as CUDA names it always
  // holds its form or size: "NVIDIA A100-PCIE-40GB", "NVIDIA H100 80GB HBM3".)
  bool specific = false;
  for (const nlohmann::json& pattern : gpu->at("match")) {
    const std::vector<std::string> p = words_of(pattern.get<std::string>());
    specific = specific ||
               (p.size() >= 2 && std::search(words.begin(), words.end(), p.begin(), p.end()) != words.end());
  }
  if (!specific) return {};
  for (const std::string& word : words)
    if (const auto gb = size_word_gb(word); gb && *gb != gpu->at("memory_gb").get<int64_t>())
      return {gpu, true};
  return {gpu, false};
}

}  // namespace

bool is_mig_slice(std::string_view name) {
  for (const std::string& word : words_of(name)) {
    if (word == "mig") return true;
    // "1g.10gb": compute slices, a point, the slice's memory.
    const size_t g = word.find("g.");
    if (g == std::string::npos || g == 0 || !word.ends_with("gb") || g + 4 > word.size()) continue;
    const auto digits = [](std::string_view part) {
      return !part.empty() &&
             std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (digits(std::string_view(word).substr(0, g)) &&
        digits(std::string_view(word).substr(g + 2, word.size() - g - 4)))
      return true;
  }
  return false;
}

bool is_laptop_part(std::string_view name) {
  const std::string low = lower(name);
  return contains_tokens(low, "laptop") || contains_tokens(low, "mobile") || contains_tokens(low, "max-q");
}

const nlohmann::json& gpu_spec_sheet() {
  static const nlohmann::json sheet = nlohmann::json::parse(detail::kGpusJson);
  return sheet;
}

const nlohmann::json* gpu_spec_for_device(std::string_view device_name) {
  // A MIG slice has a fraction of the card's SMs and memory: the card's peak rates would put its MFU several
  // times too low.
  if (is_mig_slice(device_name)) return nullptr;
  // A laptop part ("RTX 4090 Laptop GPU") has fewer SMs at lower clocks than the desktop card its name holds:
  // that card's peak would put its MFU about 2.5x too low.
  if (is_laptop_part(device_name)) return nullptr;
  // Lower case, '-' and '_' as spaces: "A100 SXM4 80GB" is the "A100-SXM4-80GB" a pattern spells.
  const auto spaced = [](std::string_view text) {
    std::string out = lower(text);
    std::replace_if(
        out.begin(), out.end(), [](char c) { return c == '-' || c == '_'; }, ' ');
    return out;
  };
  const std::string name = spaced(device_name);
  const auto any_in_name = [&](const nlohmann::json& gpu, const char* key) {
    if (!gpu.contains(key)) return false;
    for (const nlohmann::json& pattern : gpu.at(key))
      if (contains_tokens(name, spaced(pattern.get<std::string>()))) return true;
    return false;
  };
  for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus"))
    if (any_in_name(gpu, "match") && !any_in_name(gpu, "exclude")) return &gpu;
  return nullptr;
}

std::optional<std::vector<std::string>> gpus_with_numbers_of(std::string_view text) {
  std::vector<std::string> numbers;
  for (const std::string& word : words_of(text))
    if (std::any_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; }))
      numbers.push_back(word);
  if (numbers.empty()) return std::nullopt;
  std::vector<std::string> cards;
  for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus")) {
    const std::string name = gpu.at("name").get<std::string>();
    const std::vector<std::string> words = words_of(name);
    if (std::all_of(numbers.begin(), numbers.end(), [&](const std::string& n) {
          return std::find(words.begin(), words.end(), n) != words.end();
        }))
      cards.push_back(name);
  }
  return cards;
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus"))
    names.push_back(gpu.at("name").get<std::string>());
  return names;
}

std::vector<GpuCard> gpus_named(std::string_view text) {
  const auto cards = [](const std::vector<const nlohmann::json*>& entries) {
    std::vector<GpuCard> out;
    for (const nlohmann::json* gpu : entries) out.push_back(card_of(*gpu));
    return out;
  };
  if (const auto named = entries_named(normalized(text)); !named.empty()) return cards(named);
  // Loose words with a size ("H100 80GB", "H200 141GB"): the cards the other words name, of that size.
  if (const auto sized = without_size(text)) {
    std::vector<const nlohmann::json*> of_size;
    for (const nlohmann::json* gpu : entries_named(sized->first))
      if (gpu->at("memory_gb").get<int64_t>() == sized->second) of_size.push_back(gpu);
    if (!of_size.empty()) return cards(of_size);
  }
  const DeviceNameMatch match = device_name_match(text);
  if (match.gpu == nullptr || match.other_size) return {};
  return {card_of(*match.gpu)};
}

std::optional<std::string> gpu_of_other_size(std::string_view text) {
  if (!gpus_named(text).empty()) return std::nullopt;
  const auto known_as = [](const std::vector<const nlohmann::json*>& entries) {
    std::vector<std::string> names;
    for (const nlohmann::json* gpu : entries) names.push_back(gpu->at("name").get<std::string>());
    const nlohmann::json& first = *entries.front();
    return fmt::format("{}, which configs/gpus.json knows as {} GB ({} MiB as CUDA reports it)",
                       fmt::join(names, " or "), first.at("memory_gb").get<int64_t>(),
                       first.at("cuda_mib").get<uint64_t>());
  };
  // "V100 16GB": the V100s, all of another size (cards of several sizes are listed by the caller instead).
  if (const auto sized = without_size(text)) {
    const std::vector<const nlohmann::json*> named = entries_named(sized->first);
    if (!named.empty() && std::all_of(named.begin(), named.end(), [&](const nlohmann::json* gpu) {
          return gpu->at("cuda_mib") == named.front()->at("cuda_mib");
        }))
      return known_as(named);
  }
  const DeviceNameMatch match = device_name_match(text);
  if (match.gpu == nullptr || !match.other_size) return std::nullopt;
  return known_as({match.gpu});
}

}  // namespace bsw
