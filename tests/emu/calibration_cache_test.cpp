// The calibration cache (src/backends/cuda/calibration_cache.cpp): where it lives, which entry serves which
// GPU, that a new measurement replaces the old one of the same GPU, that a broken or unwritable cache costs
// the user nothing but the cache, and that a backend made in a later process takes its MFU peak from it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "backends/cuda/calibration.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "gpu_test_util.hpp"

namespace bsw {
namespace {

namespace fs = std::filesystem;

// Saves and restores the environment variables the cache path comes from.
class CacheEnvironment {
 public:
  CacheEnvironment() {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v != nullptr ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(name);
    }
  }
  ~CacheEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name, value->c_str(), 1);
      else
        unsetenv(name);
    }
  }
  CacheEnvironment(const CacheEnvironment&) = delete;
  CacheEnvironment& operator=(const CacheEnvironment&) = delete;

 private:
  static constexpr const char* kNames[] = {"BATCHSWEEP_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

class CalibrationCache : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bsw-calibration-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    setenv("BATCHSWEEP_CACHE_DIR", dir_.c_str(), 1);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A cache whose one entry is this (emulated) GPU's, with `measured_at` and `result` as JSON text.
  void write_entry_for_this_gpu(const std::string& measured_at, const std::string& result) const {
    const nlohmann::json identity =
        cuda::calibration_identity(cuda::describe_device(0), cuda::library_versions());
    fs::create_directories(dir_);
    std::ofstream(dir_ / "calibration.json") << R"({"batchsweep_calibration": 1, "entries": [{"identity": )" +
                                                    identity.dump() + R"(, "measured_at": )" + measured_at +
                                                    R"(, "result": )" + result + "}]}";
  }

  CacheEnvironment env_;
  fs::path dir_;
};

const nlohmann::json kH200 = {{"name", "NVIDIA H200"},
                              {"uuid", "GPU-11111111-2222-3333-4444-555555555555"},
                              {"cuda_driver", "13.0"},
                              {"cublaslt", "13.1.0"}};
const nlohmann::json kRates = {{"bf16_tflops", 781.5}, {"fp16_tflops", 779.0}, {"copy_gbps", 4301.0}};

TEST_F(CalibrationCache, PathFollowsTheEnvironment) {
  EXPECT_EQ(cuda::calibration_cache_file(), dir_ / "calibration.json");
  unsetenv("BATCHSWEEP_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(cuda::calibration_cache_file(), fs::path("/xdg/batchsweep/calibration.json"));
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(cuda::calibration_cache_file(), fs::path("/home/u/.cache/batchsweep/calibration.json"));
  unsetenv("HOME");
  EXPECT_EQ(cuda::calibration_cache_file(), std::nullopt);
  EXPECT_EQ(cuda::save_calibration(kH200, kRates).rfind("not saved: ", 0), 0U);
  EXPECT_EQ(cuda::load_calibration(kH200), std::nullopt);
}

TEST_F(CalibrationCache, AnEntryServesOnlyItsGpuDriverAndCublasLt) {
  const nlohmann::json entries =
      cuda::merge_calibration(nlohmann::json::array(), kH200, kRates, "2026-11-30T08:00:00Z");
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(cuda::select_calibration(entries, kH200).at("result"), kRates);
  for (const char* field : {"name", "uuid", "cuda_driver", "cublaslt"}) {
    nlohmann::json other = kH200;
    other[field] = "something else";
    EXPECT_TRUE(cuda::select_calibration(entries, other).is_null()) << field;
  }
  EXPECT_TRUE(cuda::select_calibration(nlohmann::json::object(), kH200).is_null());
  EXPECT_TRUE(
      cuda::select_calibration(nlohmann::json::array({1, "x", {{"identity", kH200}}}), kH200).is_null());
}

TEST_F(CalibrationCache, ANewMeasurementReplacesTheSameGpusOldOneAndKeepsOtherGpus) {
  nlohmann::json other_gpu = kH200;
  other_gpu["uuid"] = "GPU-99999999-2222-3333-4444-555555555555";
  nlohmann::json entries = cuda::merge_calibration(nlohmann::json::array(), kH200, kRates, "t1");
  entries = cuda::merge_calibration(entries, other_gpu, kRates, "t2");
  nlohmann::json new_driver = kH200;
  new_driver["cuda_driver"] = "13.1";
  const nlohmann::json faster = {{"bf16_tflops", 790.0}};
  entries = cuda::merge_calibration(entries, new_driver, faster, "t3");
  ASSERT_EQ(entries.size(), 2U) << entries.dump();
  EXPECT_TRUE(cuda::select_calibration(entries, kH200).is_null());
  EXPECT_EQ(cuda::select_calibration(entries, new_driver).at("result"), faster);
  EXPECT_EQ(cuda::select_calibration(entries, other_gpu).at("measured_at"), "t2");
}

TEST_F(CalibrationCache, SavedResultsComeBackWithTheirDateAndFile) {
  const std::string said = cuda::save_calibration(kH200, kRates);
  EXPECT_EQ(said, "saved to " + (dir_ / "calibration.json").string());
  const std::optional<nlohmann::json> loaded = cuda::load_calibration(kH200);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->at("bf16_tflops"), 781.5);
  EXPECT_EQ(loaded->at("cache_file"), (dir_ / "calibration.json").string());
  const std::string when = loaded->at("measured_at");
  EXPECT_EQ(when.size(), 20U) << when;  // 2026-11-30T08:00:00Z
  EXPECT_EQ(when.back(), 'Z') << when;
  nlohmann::json other = kH200;
  other["cublaslt"] = "13.2.0";
  EXPECT_EQ(cuda::load_calibration(other), std::nullopt);
  // No temporary file is left beside the cache (and its lock file).
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"calibration.json", "calibration.json.lock"}));
}

TEST_F(CalibrationCache, ABrokenCacheIsIgnoredThenRewritten) {
  fs::create_directories(dir_);
  const std::string id = kH200.dump();
  for (const std::string& text :
       {std::string("{ not json"), std::string("[]"),
        std::string(R"({"batchsweep_calibration": 2, "entries": []})"),
        std::string(R"({"batchsweep_calibration": "1", "entries": []})"),
        std::string(R"({"batchsweep_calibration": 1, "entries": {}})"),
        std::string(R"({"batchsweep_calibration": 1, "entries": [1, "x", null, {"identity": 5}]})"),
        R"({"batchsweep_calibration": 1, "entries": [{"identity": )" + id + R"(, "result": [1]}]})"}) {
    std::ofstream(dir_ / "calibration.json") << text;
    EXPECT_EQ(cuda::load_calibration(kH200), std::nullopt) << text;
    EXPECT_EQ(cuda::save_calibration(kH200, kRates).rfind("saved to ", 0), 0U) << text;
    EXPECT_TRUE(cuda::load_calibration(kH200).has_value()) << text;
  }
  // Fields of the wrong type in a matching entry: the date is unknown, the rates are no peak.
  std::ofstream(dir_ / "calibration.json")
      << R"({"batchsweep_calibration": 1, "entries": [{"identity": )" + id +
             R"(, "measured_at": 5, "result": {"bf16_tflops": "fast", "fp16_tflops": -3}}]})";
  const std::optional<nlohmann::json> odd = cuda::load_calibration(kH200);
  ASSERT_TRUE(odd.has_value());
  EXPECT_EQ(odd->at("measured_at"), "an unknown time");
}

TEST_F(CalibrationCache, AnEditedCacheNeverTakesARunDown) {
  BSW_REQUIRE_DEVICE();
  write_entry_for_this_gpu("[]", R"({"bf16_tflops": "fast", "fp16_tflops": -3, "tf32_tflops": 0})");
  for (Precision p : {Precision::bf16, Precision::fp16, Precision::tf32, Precision::fp32}) {
    const DeviceInfo info = cuda::make_cuda_backend(0)->device(p);
    EXPECT_FALSE(info.peak_flops.has_value()) << to_string(p);  // the emulator is on no spec sheet either
  }
  EXPECT_NO_THROW(static_cast<void>(cuda::describe_device(0)));
}

// A precision this GPU's cuBLASLt could not run is null with its reason; the others still serve as peaks.
TEST_F(CalibrationCache, APrecisionThatCouldNotBeMeasuredLeavesTheOthers) {
  BSW_REQUIRE_DEVICE();
  write_entry_for_this_gpu(R"("2026-12-01T10:00:00Z")",
                           R"({"bf16_tflops": null, "bf16_unavailable": "CUBLAS_STATUS_NOT_SUPPORTED",
                               "fp16_tflops": 120.5, "tf32_tflops": 60, "fp32_tflops": 19.5})");
  EXPECT_FALSE(cuda::make_cuda_backend(0)->device(Precision::bf16).peak_flops.has_value());
  const DeviceInfo fp16 = cuda::make_cuda_backend(0)->device(Precision::fp16);
  ASSERT_TRUE(fp16.peak_flops.has_value());
  EXPECT_DOUBLE_EQ(*fp16.peak_flops, 120.5e12);
}

TEST_F(CalibrationCache, AnUnwritableCacheSaysWhyAndThrowsNothing) {
  fs::create_directories(dir_.parent_path());
  std::ofstream(dir_) << "a file where the cache directory should be";
  const std::string said = cuda::save_calibration(kH200, kRates);
  EXPECT_EQ(said.rfind("not saved: cannot create " + dir_.string(), 0), 0U) << said;
  EXPECT_EQ(cuda::load_calibration(kH200), std::nullopt);
  fs::remove(dir_);
}

TEST_F(CalibrationCache, ABackendInALaterProcessTakesItsPeakFromTheCache) {
  BSW_REQUIRE_DEVICE();
  const nlohmann::json identity =
      cuda::calibration_identity(cuda::describe_device(0), cuda::library_versions());
  EXPECT_EQ(identity.at("uuid").get<std::string>().rfind("GPU-", 0), 0U) << identity.dump();
  // Nothing cached: the emulator is on no spec sheet, so there is no peak.
  EXPECT_FALSE(cuda::make_cuda_backend(0)->device(Precision::bf16).peak_flops.has_value());
  ASSERT_EQ(cuda::save_calibration(identity, {{"bf16_tflops", 0.002}}).rfind("saved to ", 0), 0U);
  const DeviceInfo bf16 = cuda::make_cuda_backend(0)->device(Precision::bf16);
  ASSERT_TRUE(bf16.peak_flops.has_value());
  EXPECT_DOUBLE_EQ(*bf16.peak_flops, 0.002e12);
  EXPECT_NE(bf16.peak_flops_source.find("calibrated by `batchsweep devices --calibrate` at "),
            std::string::npos)
      << bf16.peak_flops_source;
  EXPECT_NE(bf16.peak_flops_source.find((dir_ / "calibration.json").string()), std::string::npos);
  // A precision the calibration did not measure still has no peak.
  EXPECT_FALSE(cuda::make_cuda_backend(0)->device(Precision::fp32).peak_flops.has_value());
  EXPECT_EQ(cuda::describe_device(0).at("calibrated").at("bf16_tflops"), 0.002);
}

}  // namespace
}  // namespace bsw
