// The GPU spec sheet (configs/gpus.json, compiled in): datasheet rates, and the memory CUDA reports for each
// card (cuda_mib, under nvidia-smi's total by what the driver reserves), which `run` sizes a device by and so
// `plan --memory NAME` and `run --memory-limit NAME` size a card by.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bsw {

// The whole document, parsed once.
[[nodiscard]] const nlohmann::json& gpu_spec_sheet();

struct GpuCard {
  std::string name;       // the sheet's name: "H100 SXM"
  uint64_t bytes = 0;     // cuda_mib MiB: the total CUDA reports for the card (totalGlobalMem)
  int64_t memory_gb = 0;  // the datasheet's memory_gb: the size its name is sold by ("H100 80GB")
};

// The cards of the sheet that `text` names, ignoring case, spaces, '-' and '_', and a "GeForce", "NVIDIA" or
// "Tesla" before the name: the one whose whole name it is ("h100-sxm", "rtx4090"), else every card whose
// name's first words it is ("H100": PCIe, NVL and SXM; "A100 80GB": PCIe and SXM; "Tesla V100": PCIe and
// SXM2; not "L40" for L40S, nor "v"), else those of them with a size among the words ("H100 80GB": PCIe and
// SXM; "H100 94GB": NVL), else the card a device name as nvidia-smi prints it names, with its
// vendor or its size ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"; a size that is not the card's names none).
// Empty where it names none, and for a laptop part.
[[nodiscard]] std::vector<GpuCard> gpus_named(std::string_view text);

// Where `text` names cards but a size that is not theirs, so gpus_named finds none: a device name
// ("V100-SXM2-16GB": "V100 SXM2, which configs/gpus.json knows as 32 GB (32494 MiB as CUDA reports it)") or
// loose words whose cards share one memory ("V100 16GB": "V100 PCIe or V100 SXM2, which ..."); else nullopt.
[[nodiscard]] std::optional<std::string> gpu_of_other_size(std::string_view text);

// The sheet's entry for a device name as CUDA or nvidia-smi gives it ("NVIDIA H100 80GB HBM3"): the first
// entry one of whose `match` strings the name contains as whole tokens and none of whose `exclude` tokens it
// contains (H200 is not found in GH200, A10 not in A10G); nullptr where none, and for a MIG slice.
[[nodiscard]] const nlohmann::json* gpu_spec_for_device(std::string_view device_name);

// Whether a device name is a laptop part ("... Laptop GPU", "Mobile", "Max-Q"): the sheet's cards are
// desktop and datacenter boards, and a laptop's namesake has other memory (a laptop RTX 4090 has 16 GB).
[[nodiscard]] bool is_laptop_part(std::string_view name);
// A MIG slice of a card ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "3g.40gb"): a fraction of the card's memory,
// which no card of the sheet is.
[[nodiscard]] bool is_mig_slice(std::string_view name);

// Every card's name, in the sheet's order.
[[nodiscard]] std::vector<std::string> gpu_names();

// The cards whose names hold, as whole words, every word of `text` with a digit in it (model numbers and
// sizes: "A100", "94gb"), in the sheet's order: where a name fails to match, the cards it could mean, never
// one a near spelling swaps in (H20 is no H200, V100S no V100 SXM2). nullopt where `text` has no such word.
[[nodiscard]] std::optional<std::vector<std::string>> gpus_with_numbers_of(std::string_view text);

}  // namespace bsw
