// Internal to the CUDA backend: the library versions, one device's description, and the process's calibration
// results (filled by calibrate()) that a backend consults for its MFU peak before the spec sheet.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "batchsweep/plan.hpp"

namespace bsw::cuda {

[[nodiscard]] nlohmann::json library_versions();
[[nodiscard]] nlohmann::json describe_device(int device);
[[nodiscard]] std::optional<nlohmann::json> calibrated(int device);
[[nodiscard]] std::optional<double> calibrated_peak_flops(int device, Precision precision);

}  // namespace bsw::cuda
