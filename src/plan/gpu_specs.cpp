// The compiled-in GPU spec sheet and its cards by name (see include/batchsweep/gpu_specs.hpp).
#include "batchsweep/gpu_specs.hpp"

#include <algorithm>
#include <cctype>

namespace bsw {
namespace detail {
extern const std::string_view kGpusJson;  // generated from configs/gpus.json (src/CMakeLists.txt)
}  // namespace detail

namespace {

// "NVIDIA GeForce RTX-4090" -> "rtx4090": the spelling a user types and the sheet's name compare in.
std::string normalized(std::string_view text) {
  std::string out;
  for (const char c : text)
    if (c != ' ' && c != '-' && c != '_')
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string_view prefix : {"nvidia", "geforce"})
    if (out.starts_with(prefix) && out.size() > prefix.size()) out.erase(0, prefix.size());
  return out;
}

}  // namespace

const nlohmann::json& gpu_spec_sheet() {
  static const nlohmann::json sheet = nlohmann::json::parse(detail::kGpusJson);
  return sheet;
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus"))
    names.push_back(gpu.at("name").get<std::string>());
  return names;
}

std::vector<GpuMemory> gpus_named(std::string_view text) {
  const std::string wanted = normalized(text);
  if (wanted.empty()) return {};
  std::vector<GpuMemory> whole, begun;
  for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus")) {
    const std::string name = gpu.at("name").get<std::string>();
    const std::string key = normalized(name);
    const GpuMemory card{name, gpu.at("memory_mib").get<uint64_t>() * 1024 * 1024};
    if (key == wanted)
      whole.push_back(card);
    else if (key.starts_with(wanted))
      begun.push_back(card);
  }
  return whole.empty() ? begun : whole;
}

}  // namespace bsw
