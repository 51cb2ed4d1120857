// `batchsweep run --backend cuda` end to end on the CPU emulator (batchsweep-emu): the CUDA session,
// cuBLASLt's fake, our kernels, graph capture, events and the allocator behave as on a GPU, so the sweep's
// handling of the CUDA backend can be held to what a user would see: every point measured, device memory
// equal to the plan, out-of-memory as a point followed by smaller batches that run, cuDNN's absence said out
// loud, telemetry matched to the device by PCI bus id.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "e2e/e2e_support.hpp"
#include "schema_support.hpp"

namespace bsw::e2e {
namespace {

std::vector<std::string> quick(std::vector<std::string> args) {
  // The emulator's timings are CPU timings and noisy: three samples a point, whatever their noise.
  for (const char* a : {"--warmup", "1", "--min-samples", "3", "--min-time", "0", "--max-noise", "100",
                        "--timeout", "60", "--quiet"})
    args.emplace_back(a);
  return args;
}

TEST(EmulatedCuda, DevicesListsTheEmulatedGpu) {
  const Result r = run({"devices", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json d = nlohmann::json::parse(r.out);
  const nlohmann::json& devices = d.at("cuda").at("devices");
  ASSERT_EQ(devices.size(), 1u) << r.out;
  EXPECT_EQ(devices[0].at("name"), "batchsweep CPU emulator");
  EXPECT_EQ(devices[0].at("memory_total_bytes"), uint64_t{16384} << 20);
  EXPECT_EQ(devices[0].at("pci_bus_id"), "00000000:1B:00.0");
}

// `devices` takes free memory from NVML where it can (no CUDA context created on a GPU someone may be
// using), with the other processes on it; without NVML, from cudaMemGetInfo, saying why.
TEST(EmulatedCuda, DevicesReadsFreeMemoryFromNvmlElseFromCuda) {
  const Result fallback =
      run({"devices", "--json"}, {"BATCHSWEEP_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"});
  ASSERT_EQ(fallback.exit_code, 0) << fallback.err;
  const nlohmann::json cuda_read = nlohmann::json::parse(fallback.out).at("cuda").at("devices").at(0);
  EXPECT_EQ(cuda_read.at("memory_source"), "cudaMemGetInfo");
  EXPECT_EQ(cuda_read.at("memory_free_bytes"), uint64_t{16384} << 20);
  EXPECT_NE(cuda_read.at("nvml_memory_unavailable").get<std::string>().find("/nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << cuda_read.dump();
  const Result fallback_text = run({"devices"}, {"BATCHSWEEP_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1"});
  EXPECT_NE(fallback_text.out.find(
                "  memory: 16.00 GiB free (cudaMemGetInfo: NVML not found (/nonexistent/libnvidia-ml.so.1"),
            std::string::npos)
      << fallback_text.out;
#ifdef BSW_FAKE_NVML
  const std::vector<std::string> env = {std::string("BATCHSWEEP_NVML_LIBRARY=") + BSW_FAKE_NVML,
                                        "FAKE_NVML_SCRIPT=memory_used_bytes=3221225472;process=4242:"
                                        "2147483648;process=77:18446744073709551615"};
  const Result r = run({"devices", "--json"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json d = nlohmann::json::parse(r.out).at("cuda").at("devices").at(0);
  EXPECT_EQ(d.at("memory_source"), "nvml") << d.dump();
  EXPECT_EQ(d.at("memory_free_bytes"), uint64_t{13} << 30);  // the fake's 16 GiB less 3 GiB used
  EXPECT_EQ(d.at("memory_used_bytes"), uint64_t{3} << 30);
  EXPECT_EQ(d.at("other_processes"), nlohmann::json::parse(R"([{"pid": 4242, "used_bytes": 2147483648},
                                                               {"pid": 77, "used_bytes": null}])"));
  const Result text = run({"devices"}, env);
  EXPECT_NE(
      text.out.find("  memory: 13.00 GiB free, 3.00 GiB used (NVML); 2 other processes: pid 4242 2.00 GiB, "
                    "pid 77 (size not reported)\n"),
      std::string::npos)
      << text.out;

  // NVML's device on that bus reports another size than CUDA's (a MIG-like slice, a mismatched library):
  // its free figure is not this device's, so cudaMemGetInfo answers and says why.
  const Result mismatch = run({"devices", "--json"}, {std::string("BATCHSWEEP_NVML_LIBRARY=") + BSW_FAKE_NVML,
                                                      "FAKE_NVML_SCRIPT=memory_total_bytes=8589934592"});
  ASSERT_EQ(mismatch.exit_code, 0) << mismatch.err;
  const nlohmann::json m = nlohmann::json::parse(mismatch.out).at("cuda").at("devices").at(0);
  EXPECT_EQ(m.at("memory_source"), "cudaMemGetInfo") << m.dump();
  EXPECT_EQ(m.at("nvml_memory_unavailable"), "NVML's total (8.00 GiB) is not this device's (16.00 GiB)");
  EXPECT_EQ(m.at("memory_free_bytes"), uint64_t{16384} << 20);
#endif
}

TEST(EmulatedCuda, WithoutADeviceTheCudaBackendSaysWhyAndAutoRunsOnTheCpu) {
  const std::vector<std::string> no_device = {"BSW_EMU_NO_DEVICE=1"};
  const Result devices = run({"devices"}, no_device);
  ASSERT_EQ(devices.exit_code, 0) << devices.err;
  EXPECT_NE(devices.out.find("cuda: no device"), std::string::npos) << devices.out;
  const Result cuda = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--batch", "2"}), no_device);
  EXPECT_EQ(cuda.exit_code, 2) << cuda.err;
  EXPECT_NE(cuda.err.find("--backend cuda: no CUDA device"), std::string::npos) << cuda.err;
  ScratchDir dir;
  const Result automatic = run(quick({"run", "--backend", "auto", "--model", "mlp", "--batch", "2", "--json",
                                      (dir / "r.json").string()}),
                               no_device);
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  EXPECT_EQ(read_json(dir / "r.json")["device"].at("backend"), "cpu");
}

// A GPU older than Ampere (a V100) is refused up front, naming its compute capability, not left to fail at
// its first kernel launch.
TEST(EmulatedCuda, AGpuOlderThanAmpereIsRefusedUpFront) {
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--batch", "2"}),
                       {"BSW_EMU_COMPUTE_CAPABILITY=7.0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("has compute capability 7.0; batchsweep's CUDA backend needs 8.0 or newer"),
            std::string::npos)
      << r.err;
}

TEST(EmulatedCuda, TrainingSweepMeasuresEveryPointAndTheMemoryIsThePlan) {
  ScratchDir dir;
  const Result r =
      run(quick({"run", "--backend", "cuda", "--model", "tiny-lm", "--mode", "train", "--precision", "bf16",
                 "--batch", "1,2,4", "--json", (dir / "r.json").string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  // A cuda report (execution paths, per-point execution) against the published schema.
  if (!testing::python_with_jsonschema().empty()) {
    EXPECT_EQ(testing::validate_report_file(dir / "r.json"), 0);
  }
  EXPECT_EQ(report["device"].at("backend"), "cuda");
  EXPECT_EQ(report["device"].at("name"), "batchsweep CPU emulator");
  ASSERT_EQ(report["points"].size(), 3u);
  for (const nlohmann::json& p : report["points"]) {
    EXPECT_EQ(p.at("status"), "ok") << p.dump();
    EXPECT_TRUE(p.at("loss").is_number()) << p.dump();
    EXPECT_GT(p.at("samples_per_second").get<double>(), 0.0);
    // The emulator counts device bytes exactly: what prepare took is what the plan said.
    EXPECT_EQ(p["memory"].at("device_used_bytes"), p["memory"].at("planned_bytes")) << p.dump();
    // How the step ran, per point: the CUDA graph, the attention path, the fused GELU epilogues of bf16.
    const nlohmann::json& execution = p.at("execution");
    EXPECT_EQ(execution.at("cuda_graphs"), "captured, replayed from step 2") << execution.dump();
    EXPECT_NE(execution.at("attention").get<std::string>().find("non-fused"), std::string::npos);
    EXPECT_TRUE(execution.contains("gelu")) << execution.dump();
  }
  // No cuDNN without a GPU: auto falls back to our own attention and says why.
  const nlohmann::json& paths = report["device"].at("execution_paths");
  EXPECT_EQ(paths.at("attention"), "explicit_softmax") << paths.dump();
  EXPECT_FALSE(paths.at("note").get<std::string>().empty()) << paths.dump();
}

TEST(EmulatedCuda, FusedEpilogueTheGpuLacksRunsUnfusedAndTheReportSaysSo) {
  ScratchDir dir;
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "tiny-lm", "--precision", "bf16",
                              "--batch", "2", "--json", (dir / "r.json").string()}),
                       {"BSW_EMU_CUBLASLT_REFUSE=GELU_AUX_BIAS,DGELU_BGRAD"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  ASSERT_EQ(report["points"].size(), 1u);
  const nlohmann::json& p = report["points"][0];
  EXPECT_EQ(p.at("status"), "ok") << p.dump();
  const nlohmann::json& execution = p.at("execution");
  EXPECT_FALSE(execution.contains("gelu")) << execution.dump();
  const nlohmann::json& gemms = execution.at("epilogues_unavailable").at("gemms");
  ASSERT_FALSE(gemms.empty()) << execution.dump();
  for (const nlohmann::json& g : gemms) {
    const std::string name = g.get<std::string>();
    EXPECT_TRUE(name.starts_with("GELU_AUX_BIAS ") || name.starts_with("DGELU_BGRAD ")) << name;
  }
}

TEST(EmulatedCuda, MfuUsesTheRateDevicesCalibrateCachedForThisGpu) {
  ScratchDir dir;
  const std::vector<std::string> env = {"BATCHSWEEP_CACHE_DIR=" + dir.path().string()};
  const auto sweep = [&] {
    const Result r = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--precision", "bf16",
                                "--batch", "4", "--json", (dir / "r.json").string()}),
                         env);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_json(dir / "r.json");
  };
  // The emulator is on no spec sheet: no peak, no MFU.
  const nlohmann::json before = sweep();
  EXPECT_FALSE(before["device"].contains("peak_flops") && before["device"]["peak_flops"].is_number())
      << before["device"].dump();
  // `devices --calibrate` measures this GPU (on the emulator, small products: device.cpp) and caches the
  // rates.
  const Result calibrated = run({"devices", "--calibrate", "--json"}, env);
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.err;
  const nlohmann::json measured = nlohmann::json::parse(calibrated.out).at("calibration");
  const double bf16_tflops = measured.at("bf16_tflops").get<double>();
  EXPECT_GT(bf16_tflops, 0.0) << measured.dump();
  EXPECT_EQ(measured.at("cache").get<std::string>(), "saved to " + (dir / "calibration.json").string());
  const nlohmann::json after = sweep();
  EXPECT_DOUBLE_EQ(after["device"].at("peak_flops").get<double>(), bf16_tflops * 1e12);
  EXPECT_NE(after["device"]
                .at("peak_flops_source")
                .get<std::string>()
                .find("calibrated by `batchsweep devices --calibrate` at "),
            std::string::npos)
      << after["device"].dump();
  const nlohmann::json& p = after["points"][0];
  EXPECT_NEAR(p.at("mfu").get<double>(), p.at("tflops").get<double>() / bf16_tflops, 1e-9) << p.dump();
  // `devices` shows the cached calibration beside the spec sheet.
  const nlohmann::json listed = nlohmann::json::parse(run({"devices", "--json"}, env).out);
  EXPECT_EQ(listed["cuda"]["devices"][0]["calibrated"].at("bf16_tflops"), bf16_tflops) << listed.dump();
}

TEST(EmulatedCuda, ForcingCudnnWithoutOneIsAUsageError) {
  ScratchDir dir;
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "tiny-lm", "--precision", "bf16",
                              "--batch", "2", "--attention", "cudnn", "--json", (dir / "r.json").string()}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--attention"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "r.json"));
}

TEST(EmulatedCuda, OutOfMemoryIsAPointAndTheSweepGoesOn) {
  ScratchDir dir;
  // A 4 GiB device of which another process holds all but 196 MiB: the mlp's fp32 plans are 35.1 MiB at
  // batch 256 (fits), 361 MiB at 65536 (under the device, over what cudaMemGetInfo says is free: refused at
  // prepare before cudaMalloc) and 5.14 GiB at 1048576 (over the device: refused without preparing).
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--precision", "fp32", "--batch",
                              "256,65536,1048576,512", "--json", (dir / "r.json").string()}),
                       {"BSW_EMU_MEMORY_MIB=4096", "BSW_EMU_RESERVED_MIB=3900"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  std::map<int64_t, std::string> status;
  for (const nlohmann::json& p : report["points"]) status[p.at("batch").get<int64_t>()] = p.at("status");
  EXPECT_EQ(status[256], "ok");
  EXPECT_EQ(status[65536], "oom");
  EXPECT_EQ(status[1048576], "over_limit");
  EXPECT_EQ(status[512], "ok") << "the context stays usable after an out-of-memory point";
  EXPECT_EQ(report["analysis"]["max_fit"].at("batch"), 512) << report["analysis"].dump();
  // Memory another process holds is said, on stderr and in the report: judged against what was in use when
  // the sweep began (3.8 GiB, more than a process's own context and libraries take), not against a fixed
  // amount every point's prepare would exceed on a large GPU with this process's own context in it.
  bool warned = false;
  for (const nlohmann::json& w : report["warnings"])
    warned = warned || w.get<std::string>().find(
                           "3.8 GiB of device memory was in use when the sweep began, "
                           "more than batchsweep's own CUDA context and libraries take "
                           "(under 2 GiB): another process or session holds it") != std::string::npos;
  EXPECT_TRUE(warned) << report["warnings"].dump();
}

// cudaMalloc itself failing while cudaMemGetInfo says there is room (fragmentation, a race with another
// process): cudaErrorMemoryAllocation is an oom point too, and the context stays usable.
TEST(EmulatedCuda, ACudaMallocThatFailsDespiteFreeMemoryIsAnOomPoint) {
  ScratchDir dir;
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--precision", "fp32", "--batch",
                              "256,16384,512", "--json", (dir / "r.json").string()}),
                       {"BSW_EMU_MALLOC_LIMIT_MIB=100"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  std::map<int64_t, nlohmann::json> points;
  for (const nlohmann::json& p : report["points"]) points[p.at("batch").get<int64_t>()] = p;
  EXPECT_EQ(points[256].at("status"), "ok");
  EXPECT_EQ(points[16384].at("status"), "oom") << points[16384].dump();
  EXPECT_NE(points[16384].at("reason").get<std::string>().find("cudaMalloc failed"), std::string::npos)
      << points[16384].dump();
  EXPECT_EQ(points[512].at("status"), "ok") << "the context stays usable after cudaMalloc failed";
}

// A library that fails for want of memory with its own status (cuBLASLt loading a kernel on its first
// launch, EXECUTION_FAILED) after the arena took nearly all that was free: the batch ran out of memory, an
// oom point, not an error. The mlp's fp32 cuda plans are 33.9 MiB at batch 16 and 38.9 MiB at 1024 (32 MiB
// of it cuBLASLt's workspace); the emulated device has 48 MiB free, and cuBLASLt needs 12 MiB beside them.
TEST(EmulatedCuda, ALibraryFailingForWantOfMemoryIsAnOomPoint) {
  ScratchDir dir;
  const Result r =
      run(quick({"run", "--backend", "cuda", "--model", "mlp", "--precision", "fp32", "--batch", "16,1024,32",
                 "--json", (dir / "r.json").string()}),
          {"BSW_EMU_MEMORY_MIB=128", "BSW_EMU_RESERVED_MIB=80", "BSW_EMU_CUBLASLT_NEEDS_FREE_MIB=12"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  std::map<int64_t, nlohmann::json> points;
  for (const nlohmann::json& p : report["points"]) points[p.at("batch").get<int64_t>()] = p;
  EXPECT_EQ(points[16].at("status"), "ok") << points[16].dump();
  EXPECT_EQ(points[1024].at("status"), "oom") << points[1024].dump();
  EXPECT_NE(points[1024].at("reason").get<std::string>().find("CUBLAS_STATUS_EXECUTION_FAILED"),
            std::string::npos)
      << points[1024].dump();
  EXPECT_NE(points[1024].at("reason").get<std::string>().find("taken as out of memory"), std::string::npos)
      << points[1024].dump();
  EXPECT_EQ(points[32].at("status"), "ok") << "the context stays usable";
}

// --warmup 0 with no --warmup-time either: the first timed step holds the one-time work.
TEST(EmulatedCuda, WarmupZeroIsWarnedAbout) {
  std::vector<std::string> args =
      quick({"run", "--backend", "cuda", "--model", "mlp", "--batch", "2", "--json", "-"});
  const auto warmup = std::find(args.begin(), args.end(), "--warmup");
  ASSERT_NE(warmup, args.end());
  *(warmup + 1) = "0";
  const auto warned_in = [](const nlohmann::json& report) {
    bool warned = false;
    for (const nlohmann::json& w : report["warnings"])
      warned = warned || w.get<std::string>().rfind("--warmup 0 on cuda", 0) == 0;
    return warned;
  };
  // The default --warmup-time (0.2 s on cuda) still warms up: no warning.
  Result r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_FALSE(warned_in(report)) << r.out;
  EXPECT_EQ(report["settings"]["stopping"]["warmup_time_s"], 0.2);
  args.insert(args.end(), {"--warmup-time", "0"});
  r = run(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  report = nlohmann::json::parse(r.out);
  EXPECT_TRUE(warned_in(report)) << r.out;
  EXPECT_EQ(report["settings"]["stopping"]["warmup_time_s"], 0.0);
}

TEST(EmulatedCuda, AutoSearchFindsTheFitEdgeOfASmallDevice) {
  ScratchDir dir;
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--precision", "bf16", "--batch",
                              "auto", "--json", (dir / "r.json").string()}),
                       {"BSW_EMU_MEMORY_MIB=40"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  const nlohmann::json& fit = report["analysis"]["max_fit"];
  ASSERT_TRUE(fit.at("batch").is_number()) << report["analysis"].dump();
  bool saw_edge = false;
  for (const nlohmann::json& p : report["points"]) {
    if (p.at("status") == "oom" || p.at("status") == "over_limit") {
      saw_edge = true;
      EXPECT_GT(p.at("batch").get<int64_t>(), fit["batch"].get<int64_t>());
    } else {
      EXPECT_EQ(p.at("status"), "ok") << p.dump();
      EXPECT_EQ(p["memory"].at("device_used_bytes"), p["memory"].at("planned_bytes")) << p.dump();
    }
  }
  EXPECT_TRUE(saw_edge) << "the search reached the device's edge";
}

TEST(EmulatedCuda, MemoryLimitRefusesPlansOverIt) {
  ScratchDir dir;
  // The mlp's plans: 34 MiB at batch 16 (32 MiB of it cuBLASLt's workspace), 74.7 MiB at 8192; the limit
  // allows 95% of 60 MB, 54.3 MiB.
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--batch", "16,8192",
                              "--memory-limit", "60MB", "--json", (dir / "r.json").string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  ASSERT_EQ(report["points"].size(), 2u);
  EXPECT_EQ(report["points"][0].at("status"), "ok") << report["points"][0].dump();
  EXPECT_EQ(report["points"][1].at("status"), "over_limit") << report["points"][1].dump();
  EXPECT_NE(report["points"][1].at("reason").get<std::string>().find("--memory-limit"), std::string::npos);
}

TEST(EmulatedCuda, InferenceInEveryPrecision) {
  for (const char* precision : {"fp32", "tf32", "bf16", "fp16"}) {
    ScratchDir dir;
    const Result r =
        run(quick({"run", "--backend", "cuda", "--model", "tiny-lm", "--mode", "infer", "--precision",
                   precision, "--batch", "1,8", "--json", (dir / "r.json").string()}));
    ASSERT_EQ(r.exit_code, 0) << precision << ": " << r.err;
    const nlohmann::json report = read_json(dir / "r.json");  // kept: the loop must not outlive it
    ASSERT_EQ(report["points"].size(), 2u) << precision;
    for (const nlohmann::json& p : report["points"]) {
      EXPECT_EQ(p.at("status"), "ok") << precision << ": " << p.dump();
      // No loss, so no loss scale and no skipped steps, in fp16 inference either.
      EXPECT_FALSE(p.at("execution").contains("loss_scale")) << precision << ": " << p.dump();
      EXPECT_FALSE(p.contains("skipped_steps")) << precision << ": " << p.dump();
    }
  }
}

TEST(EmulatedCuda, PlainLaunchesFp16LossScalingAndAccumulation) {
  ScratchDir dir;
  const Result r =
      run(quick({"run", "--backend", "cuda", "--model", "tiny-lm", "--precision", "fp16", "--graphs", "off",
                 "--effective-batch", "4", "--json", (dir / "r.json").string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  ASSERT_FALSE(report["points"].empty());
  for (const nlohmann::json& p : report["points"]) {
    EXPECT_EQ(p.at("status"), "ok") << p.dump();
    EXPECT_EQ(p.at("effective_batch"), 4) << p.dump();
    const nlohmann::json& execution = p.at("execution");
    EXPECT_EQ(execution.at("cuda_graphs"), "off (plain launches)") << execution.dump();
    EXPECT_GT(execution.at("loss_scale").get<double>(), 0.0) << execution.dump();
    EXPECT_EQ(execution.at("skipped_steps"), 0) << "tiny-lm's gradients fit fp16 at the initial scale";
    EXPECT_TRUE(p.at("loss").is_number());
  }
  EXPECT_TRUE(report["analysis"]["effective_batch_split"].at("batch").is_number());
}

TEST(EmulatedCuda, ConvolutionsRunOnTheIm2colPathWithoutCudnn) {
  ScratchDir dir;
  const Result r = run(quick({"run", "--backend", "cuda", "--model",
                              std::string(BSW_TEST_DATA) + "/data/models/small-convnet.json", "--precision",
                              "bf16", "--batch", "1,4,16", "--json", (dir / "r.json").string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  EXPECT_EQ(report["device"]["execution_paths"].at("conv"), "im2col_gemm");
  EXPECT_NE(report["device"]["execution_paths"].at("note").get<std::string>().find("cuDNN"),
            std::string::npos);
  for (const nlohmann::json& p : report["points"]) {
    EXPECT_EQ(p.at("status"), "ok") << p.dump();
    EXPECT_EQ(p["memory"].at("device_used_bytes"), p["memory"].at("planned_bytes")) << p.dump();
  }
  // The same sweep asking for cuDNN convolutions: a usage error naming the flag.
  const Result forced = run(quick({"run", "--backend", "cuda", "--model",
                                   std::string(BSW_TEST_DATA) + "/data/models/small-convnet.json", "--conv",
                                   "cudnn", "--batch", "4"}));
  EXPECT_EQ(forced.exit_code, 2) << forced.err;
  EXPECT_NE(forced.err.find("--conv"), std::string::npos) << forced.err;
}

TEST(EmulatedCuda, DeviceChoosesTheGpuAndOneThatIsNotThereIsAUsageError) {
  const std::vector<std::string> two = {"BSW_EMU_DEVICES=2"};
  const Result listed = run({"devices", "--json"}, two);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const nlohmann::json devices = nlohmann::json::parse(listed.out).at("cuda").at("devices");
  ASSERT_EQ(devices.size(), 2u) << listed.out;
  EXPECT_EQ(devices[1].at("pci_bus_id"), "00000000:3B:00.0");

  ScratchDir dir;
  std::vector<std::string> env = two;
#ifdef BSW_FAKE_NVML
  env.push_back(std::string("BATCHSWEEP_NVML_LIBRARY=") + BSW_FAKE_NVML);
#endif
  const Result r = run(quick({"run", "--backend", "cuda", "--device", "1", "--model", "mlp", "--batch", "8",
                              "--telemetry", "on", "--json", (dir / "r.json").string()}),
                       env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  EXPECT_EQ(report["settings"]["device"], 1);
  EXPECT_EQ(report["device"].at("pci_bus_id"), "00000000:3B:00.0") << report["device"].dump();
  EXPECT_EQ(report["points"][0]["status"], "ok");
#ifdef BSW_FAKE_NVML
  // Telemetry follows the chosen GPU: NVML's device on the same bus.
  EXPECT_EQ(report["device"]["telemetry"].at("device"), "Fake GPU 1") << report["device"].dump();
#endif

  // On CUDA, --graphs shapes the timings: a resume with another setting is refused (off the GPU it is not).
  const Result graphs_off =
      run(quick({"run", "--backend", "cuda", "--device", "1", "--model", "mlp", "--batch", "8", "--telemetry",
                 "on", "--graphs", "off", "--resume", (dir / "r.json").string()}),
          env);
  EXPECT_EQ(graphs_off.exit_code, 2) << graphs_off.err;
  EXPECT_NE(graphs_off.err.find("(--graphs)"), std::string::npos) << graphs_off.err;

  // A report made on GPU 1 does not resume on GPU 0, though both are the same model.
  const Result elsewhere =
      run(quick({"run", "--backend", "cuda", "--device", "0", "--model", "mlp", "--batch", "8", "--telemetry",
                 "on", "--resume", (dir / "r.json").string()}),
          env);
  EXPECT_EQ(elsewhere.exit_code, 2) << elsewhere.err;
  EXPECT_NE(elsewhere.err.find("its device.uuid is"), std::string::npos) << elsewhere.err;

  const Result missing = run(quick({"run", "--backend", "cuda", "--device", "2", "--model", "mlp", "--batch",
                                    "8", "--json", (dir / "x.json").string()}),
                             two);
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("--device 2: there are 2 CUDA device(s), numbered from 0"), std::string::npos)
      << missing.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.json"));
  const Result calibrate = run({"devices", "--calibrate", "--device", "3"}, two);
  EXPECT_EQ(calibrate.exit_code, 2) << calibrate.err;
  EXPECT_NE(calibrate.err.find("--device 3: there are 2 CUDA device(s)"), std::string::npos) << calibrate.err;
}

#ifdef BSW_FAKE_NVML
TEST(EmulatedCuda, TelemetryIsMatchedToTheDeviceByBusId) {
  ScratchDir dir;
  const Result r = run(quick({"run", "--backend", "cuda", "--model", "mlp", "--batch", "64,256",
                              "--telemetry", "on", "--json", (dir / "r.json").string()}),
                       {std::string("BATCHSWEEP_NVML_LIBRARY=") + BSW_FAKE_NVML});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = read_json(dir / "r.json");
  EXPECT_FALSE(report["device"]["telemetry"].contains("unavailable")) << report["device"].dump();
  for (const nlohmann::json& p : report["points"]) {
    ASSERT_TRUE(p.contains("telemetry")) << p.dump();
    EXPECT_GT(p["telemetry"].at("joules_per_sample").get<double>(), 0.0) << p.dump();
  }
}
#endif

}  // namespace
}  // namespace bsw::e2e
