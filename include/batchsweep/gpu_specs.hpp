// The GPU spec sheet (configs/gpus.json, compiled in): datasheet rates, and the memory each card's driver
// reports, which `plan --memory NAME` and `run --memory-limit NAME` size a card by.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace bsw {

// The whole document, parsed once.
[[nodiscard]] const nlohmann::json& gpu_spec_sheet();

struct GpuMemory {
  std::string name;    // the sheet's name: "H100 SXM"
  uint64_t bytes = 0;  // memory_mib MiB: the total nvidia-smi reports for the card
};

// The cards of the sheet that `text` names, ignoring case, spaces, '-' and '_', and a "GeForce" or "NVIDIA"
// before the name: the one whose whole name it is ("h100-sxm", "rtx4090"), else every card whose name it
// begins ("H100": PCIe, NVL and SXM). Empty where it names none.
[[nodiscard]] std::vector<GpuMemory> gpus_named(std::string_view text);

// Every card's name, in the sheet's order.
[[nodiscard]] std::vector<std::string> gpu_names();

}  // namespace bsw
