// Internal to the CUDA backend: the library versions, one device's description, and the calibration results
// a backend consults for its MFU peak before the spec sheet: this process's (calibrate()), else the cache
// file `devices --calibrate` wrote for the same GPU, driver and cuBLASLt.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "batchsweep/plan.hpp"

namespace bsw::cuda {

[[nodiscard]] nlohmann::json library_versions();
// `free_memory`: also memory_free_bytes from cudaMemGetInfo, which creates the CUDA context on the device
// when this process has none there (hundreds of MiB of that GPU's memory, until the process exits).
[[nodiscard]] nlohmann::json describe_device(int device, bool free_memory = true);
[[nodiscard]] std::optional<nlohmann::json> calibrated(int device);
// The peak FLOP/s of a calibrated() result at this precision, when it holds a usable rate.
[[nodiscard]] std::optional<double> calibrated_peak_flops(const nlohmann::json& calibration,
                                                          Precision precision);

// ---- the calibration cache (calibration_cache.cpp)
// $BATCHSWEEP_CACHE_DIR/calibration.json, else $XDG_CACHE_HOME/batchsweep/calibration.json, else
// $HOME/.cache/batchsweep/calibration.json; nullopt when none of them is set.
[[nodiscard]] std::optional<std::filesystem::path> calibration_cache_file();
// What a cached calibration must match: {name, uuid} of a describe_device() and {cuda_driver, cublaslt} of
// library_versions().
[[nodiscard]] nlohmann::json calibration_identity(const nlohmann::json& device,
                                                  const nlohmann::json& versions);
// The entry of `entries` measured on `identity`, or null.
[[nodiscard]] nlohmann::json select_calibration(const nlohmann::json& entries,
                                                const nlohmann::json& identity);
// `entries` with this GPU's older entries (same name and UUID, any driver) replaced by the new one.
[[nodiscard]] nlohmann::json merge_calibration(const nlohmann::json& entries, const nlohmann::json& identity,
                                               const nlohmann::json& result, const std::string& measured_at);
// Writes the result into the cache file (atomically); returns "saved to PATH" or "not saved: why".
[[nodiscard]] std::string save_calibration(const nlohmann::json& identity, const nlohmann::json& result);
// The cached result for identity, with "measured_at" and "cache_file" added; nullopt when there is none.
[[nodiscard]] std::optional<nlohmann::json> load_calibration(const nlohmann::json& identity);

}  // namespace bsw::cuda
