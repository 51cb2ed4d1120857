// Planner tests: parameter and FLOP counts by the model format's conventions on hand-computed models, shape
// errors with JSON paths, and the buffer accounting (categories, precisions, modes, backends, max-fit
// search).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "batchsweep/errors.hpp"
#include "batchsweep/gpu_specs.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"

namespace bsw {
namespace {

Graph graph_of(const std::string& text) {
  return lower(parse_model(nlohmann::json::parse(text), "test.json"));
}

uint64_t rounded(uint64_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

TEST(Lower, LinearParametersAndFlops) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 10},
    "layers": [{"type": "linear", "out_features": 20, "activation": "relu"},
               {"type": "linear", "out_features": 5, "bias": false}]})");
  EXPECT_EQ(g.parameters, 10 * 20 + 20 + 20 * 5);
  EXPECT_DOUBLE_EQ(g.forward_flops_per_sample, 2.0 * 10 * 20 + 2.0 * 20 * 5);
  // Training: forward, dW and dX of each linear, but no dX for the first, which reads the data.
  EXPECT_DOUBLE_EQ(g.train_flops_per_sample, 2 * (2.0 * 10 * 20) + 3 * (2.0 * 20 * 5));
  ASSERT_EQ(g.ops.size(), 2u);
  EXPECT_EQ(g.loss_classes, 5);
  EXPECT_EQ(g.loss_rows, 1);
}

TEST(Lower, ConvPoolShapesAndCounts) {
  const Graph g =
      graph_of(R"({"name": "c", "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
    "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
               {"type": "maxpool2d", "kernel_size": 2},
               {"type": "conv2d", "out_channels": 6, "kernel_size": 3, "stride": 2, "bias": false},
               {"type": "flatten"}, {"type": "linear", "out_features": 2}]})");
  // conv1: 4*3*3*3 + 4; conv2: 6*4*3*3; 8x8 -> pool 4x4 -> conv k3 s2 -> 1x1; linear 6 -> 2.
  EXPECT_EQ(g.parameters, 4 * 3 * 9 + 4 + 6 * 4 * 9 + 6 * 2 + 2);
  EXPECT_EQ(g.ops[1].out_shape, (std::vector<int64_t>{4, 4, 4}));
  EXPECT_EQ(g.ops[2].out_shape, (std::vector<int64_t>{6, 1, 1}));
  const double conv1 = 2.0 * 4 * 3 * 9 * 64, conv2 = 2.0 * 6 * 4 * 9 * 1, fc = 2.0 * 6 * 2;
  EXPECT_DOUBLE_EQ(g.forward_flops_per_sample, conv1 + conv2 + fc);
  EXPECT_DOUBLE_EQ(g.train_flops_per_sample, 2 * conv1 + 3 * (conv2 + fc));  // conv1 reads the data
}

TEST(Lower, TransformerConventions) {
  const Graph g =
      graph_of(R"({"name": "t", "input": {"type": "tokens", "sequence_length": 16, "vocab_size": 100},
    "layers": [{"type": "embedding", "dim": 32},
               {"type": "transformer_block", "heads": 4, "mlp_ratio": 4, "causal": true, "repeat": 2},
               {"type": "layernorm"}, {"type": "linear", "out_features": 100}]})");
  const int64_t d = 32, t = 16, v = 100;
  const int64_t block = 2 * (2 * d) + 4 * (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d);
  EXPECT_EQ(g.parameters, v * d + t * d + 2 * block + 2 * d + d * v + v);
  const double attn = 2.0 * t * d * 3 * d + 4.0 * t * t * d + 2.0 * t * d * d;
  const double mlp = 2.0 * t * d * 4 * d * 2;
  EXPECT_DOUBLE_EQ(g.forward_flops_per_sample, 2 * (attn + mlp) + 2.0 * t * d * v);
  // The embedding reads the data and has no FLOPs: every matmul pays its input gradient.
  EXPECT_DOUBLE_EQ(g.train_flops_per_sample, 3 * g.forward_flops_per_sample);
  EXPECT_EQ(g.loss_rows, 16);
  EXPECT_EQ(g.tokens_per_sample, 16);
  EXPECT_EQ(g.max_residual_depth, 1);
}

TEST(Lower, PatchEmbeddingAndGlobalPoolOverTokens) {
  const Graph g =
      graph_of(R"({"name": "v", "input": {"type": "image", "channels": 3, "height": 32, "width": 32},
    "layers": [{"type": "patch_embedding", "patch_size": 8, "dim": 16}, {"type": "attention", "heads": 2},
               {"type": "global_avgpool"}, {"type": "linear", "out_features": 10}]})");
  EXPECT_EQ(g.parameters, (16 * 3 * 64 + 16 + 16 * 16) + 4 * (16 * 16 + 16) + 16 * 10 + 10);
  EXPECT_EQ(g.output_shape, (std::vector<int64_t>{10}));
}

void expect_config_error(const std::string& text, const std::string& words) {
  try {
    (void)graph_of(text);
    FAIL() << "expected a ConfigError containing: " << words;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
  }
}

TEST(Lower, ShapeErrorsNameThePath) {
  expect_config_error(R"({"name": "x", "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 10},
    "layers": [{"type": "embedding", "dim": 768}, {"type": "attention", "heads": 12},
               {"type": "transformer_block", "heads": 7}]})",
                      "layers[2].heads: 7 does not divide dim 768");
  expect_config_error(R"({"name": "x", "input": {"type": "image", "channels": 1, "height": 4, "width": 4},
    "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 5}]})",
                      "layers[0].kernel_size: kernel 5 is larger than the 4x4 input");
  expect_config_error(R"({"name": "x", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "residual", "layers": [{"type": "linear", "out_features": 4}]}]})",
                      "residual: inner layers change the shape from [8] to [4]");
  expect_config_error(R"({"name": "x", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 1}]})",
                      "needs an image-shaped input");
  expect_config_error(R"({"name": "x", "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 10},
    "layers": [{"type": "linear", "out_features": 2}]})",
                      "put an `embedding` layer first");
  expect_config_error(R"({"name": "x", "input": {"type": "vector", "features": 2000000},
    "layers": [{"type": "linear", "out_features": 2000000}, {"type": "linear", "out_features": 2}]})",
                      "parameters: sizes would overflow");
  expect_config_error(R"({"name": "x", "input": {"type": "image", "channels": 3, "height": 30, "width": 30},
    "layers": [{"type": "patch_embedding", "patch_size": 16, "dim": 8}]})",
                      "16 does not divide the 30x30 image");
  expect_config_error(R"({"name": "x", "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 10},
    "layers": [{"type": "embedding", "dim": 16}, {"type": "batchnorm"}]})",
                      "layers[1]: `batchnorm` needs an image [C, H, W] or a vector [F], got [8, 16] (a token "
                      "sequence normalizes with `layernorm`)");
}

// Dimensions up to 2^31 each: a weight's product past 2^63 must be refused at its layer, not wrap into a
// small or vanished tensor.
TEST(Lower, WeightSizesBeyond64BitsAreRefusedAtTheirLayer) {
  // 2^36 inputs x (2^28 + 1) outputs wraps to 2^36 + ... in 64 bits.
  expect_config_error(
      R"({"name": "x", "input": {"type": "image", "channels": 1, "height": 262144, "width": 262144},
    "layers": [{"type": "flatten"}, {"type": "linear", "out_features": 268435457}], "loss": "mse"})",
      "layers[1]: more than 2^40 parameters: sizes would overflow");
  // 2^24 x 1 x 2^20 x 2^20 is 2^64: 0 in 64 bits, a weight that vanished.
  expect_config_error(R"({"name": "x", "input": {"type": "image", "channels": 1, "height": 1, "width": 1},
    "layers": [{"type": "conv2d", "out_channels": 16777216, "kernel_size": 1048576, "padding": 524288,
                "bias": false}, {"type": "global_avgpool"}, {"type": "linear", "out_features": 10}]})",
                      "layers[0]: more than 2^40 parameters: sizes would overflow");
  expect_config_error(
      R"({"name": "x", "input": {"type": "image", "channels": 1, "height": 262144, "width": 262144},
    "layers": [{"type": "patch_embedding", "patch_size": 262144, "dim": 268435456}]})",
      "layers[0]: more than 2^40 parameters: sizes would overflow");
  // The parts one layer lowers to are said in words at the layer's JSON path (the file has no `qkv`), also in
  // a repeated layer's later copy.
  expect_config_error(R"({"name": "x", "input": {"type": "tokens", "sequence_length": 1, "vocab_size": 2},
    "layers": [{"type": "embedding", "dim": 1048576}, {"type": "transformer_block", "heads": 1}]})",
                      "layers[1]: in its attention's q/k/v projection, more than 2^40 parameters");
  expect_config_error(
      R"({"name": "x", "input": {"type": "vector", "features": 4},
    "layers": [{"type": "linear", "out_features": 2097152, "repeat": 2}], "loss": "mse"})",
      "test.json: layers[0]: more than 2^40 parameters: sizes would overflow (in copy #1 of the 2");
  // The MLP's hidden width is named by the field that sizes it.
  expect_config_error(R"({"name": "x", "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 10},
    "layers": [{"type": "embedding", "dim": 64}, {"type": "transformer_block", "heads": 2,
                "mlp_ratio": 2147483647}]})",
                      "layers[1].mlp_ratio: 2147483647 x the width 64 over 8 tokens");
}

// Attention scores [heads, T, T] past 64 bits: the plan is refused as too large, naming the layer, instead of
// wrapping into a small one.
TEST(Plan, AttentionScoresBeyond64BitsAreTooLargeNotWrapped) {
  const Graph g = graph_of(R"({"name": "x", "input": {"type": "tokens", "sequence_length": 2147483647,
    "vocab_size": 2}, "layers": [{"type": "embedding", "dim": 8}, {"type": "attention", "heads": 8},
    {"type": "linear", "out_features": 2}]})");
  for (const Mode mode : {Mode::train, Mode::infer})
    for (const BackendKind backend : {BackendKind::cpu, BackendKind::cuda}) {
      try {
        (void)make_plan(g, {1, Precision::bf16, mode, 1, backend});
        ADD_FAILURE() << "expected a plan larger than 2^62 bytes";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("larger than 2^62 bytes"), std::string::npos) << e.what();
        // Training's saved probabilities belong to an op: they name its layer.
        if (mode == Mode::train && backend == BackendKind::cpu) {
          EXPECT_NE(std::string(e.what()).find("layers[1]'s attention scores"), std::string::npos)
              << e.what();
        }
      }
    }
}

// A model past 2^62 bytes at batch 1 has no batch that plans: check_plannable (plan and run call it first)
// refuses it naming the model and where, not --batch (a model audit: plan blamed the batch, run made every
// batch an over_limit point).
TEST(Plan, AModelWithNoBatchThatPlansIsRefusedNamingTheModel) {
  const Graph big = graph_of(R"({"name": "big", "input": {"type": "tokens", "sequence_length": 2147483647,
    "vocab_size": 2}, "layers": [{"type": "embedding", "dim": 1}, {"type": "attention", "heads": 1},
    {"type": "linear", "out_features": 2}]})");
  try {
    check_plannable(big, {64, Precision::fp32, Mode::train, 4, BackendKind::cpu});
    FAIL() << "expected no batch to plan";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(
        what.starts_with("model 'big': no batch of it can be planned: the plan at batch 1 is larger "
                         "than 2^62 bytes (passed at "))
        << what;
    EXPECT_EQ(what.find("--batch"), std::string::npos) << what;
  }
  const Graph small = graph_of(R"({"name": "small", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "linear", "out_features": 2}]})");
  EXPECT_NO_THROW(check_plannable(small, {1, Precision::fp32, Mode::train, 1, BackendKind::cpu}));
}

// A plan past 2^62 bytes in a repeated layer's later copy: the layer by its JSON path, the copy in words.
TEST(Plan, TooLargeInARepeatedCopySaysTheCopyInWords) {
  const Graph g = graph_of(R"({"name": "x", "input": {"type": "tokens", "sequence_length": 1048576,
    "vocab_size": 2}, "layers": [{"type": "embedding", "dim": 8}, {"type": "attention", "heads": 8, "repeat": 3},
    {"type": "linear", "out_features": 2}]})");
  try {
    (void)make_plan(g, {65536, Precision::fp32, Mode::train, 1, BackendKind::cpu});
    FAIL() << "expected a plan larger than 2^62 bytes";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layers[1]'s attention scores (copy #"), std::string::npos) << what;
    EXPECT_NE(what.find(" of layers[1]'s `repeat`)"), std::string::npos) << what;
    EXPECT_EQ(what.find("]#"), std::string::npos) << what;
  }
}

// --memory NAME: a card of configs/gpus.json by the name a user types; a whole name wins over the names it
// begins (A10 is not A100, L4 not L40S), and a prefix names every card it begins.
// The cards an error may suggest hold the typed model numbers as words, never a near spelling's.
TEST(GpuSpecs, SuggestionsHoldTheTypedModelNumbers) {
  EXPECT_EQ(gpus_with_numbers_of("A100 SXM"),
            (std::vector<std::string>{"A100 80GB PCIe", "A100 80GB SXM", "A100 40GB"}));
  EXPECT_EQ(gpus_with_numbers_of("4090"), std::vector<std::string>{"GeForce RTX 4090"});
  EXPECT_EQ(gpus_with_numbers_of("H20"), std::vector<std::string>{});
  EXPECT_EQ(gpus_with_numbers_of("V100S"), std::vector<std::string>{});
  EXPECT_EQ(gpus_with_numbers_of("sxm"), std::nullopt);  // no model number: any card may be near
}

TEST(GpuSpecs, CardsAreFoundByTheNamesUsersType) {
  const auto names = [](std::string_view text) {
    std::vector<std::string> out;
    for (const GpuCard& c : gpus_named(text)) out.push_back(c.name);
    return out;
  };
  EXPECT_EQ(names("H100 SXM"), std::vector<std::string>{"H100 SXM"});
  EXPECT_EQ(names("h100-sxm"), std::vector<std::string>{"H100 SXM"});
  EXPECT_EQ(names("H100"), (std::vector<std::string>{"H100 PCIe", "H100 NVL", "H100 SXM"}));
  EXPECT_EQ(names("A10"), std::vector<std::string>{"A10"});
  EXPECT_EQ(names("L4"), std::vector<std::string>{"L4"});
  EXPECT_EQ(names("rtx4090"), std::vector<std::string>{"GeForce RTX 4090"});
  EXPECT_EQ(names("NVIDIA GeForce RTX 4090"), std::vector<std::string>{"GeForce RTX 4090"});
  EXPECT_TRUE(names("80GiB").empty());
  EXPECT_TRUE(names("").empty());
  EXPECT_TRUE(names("GH200").empty());
  // A prefix is whole words of the name, never part of one: L40 is another card than the L40S.
  EXPECT_TRUE(names("L40").empty());
  EXPECT_TRUE(names("v").empty());
  EXPECT_TRUE(names("rtx 40").empty());
  EXPECT_EQ(names("A100 80GB"), (std::vector<std::string>{"A100 80GB PCIe", "A100 80GB SXM"}));
  // A device name as nvidia-smi prints it, by the sheet's match tokens.
  EXPECT_EQ(names("NVIDIA A100-SXM4-80GB"), std::vector<std::string>{"A100 80GB SXM"});
  EXPECT_EQ(names("NVIDIA H100 80GB HBM3"), std::vector<std::string>{"H100 SXM"});
  EXPECT_EQ(names("Tesla V100-SXM2-32GB"), std::vector<std::string>{"V100 SXM2"});
  // Without its vendor, its size says it is a device name: as nvidia-smi's, where the size agrees.
  EXPECT_EQ(names("A100-SXM4-80GB"), std::vector<std::string>{"A100 80GB SXM"});
  EXPECT_EQ(names("A100-SXM4-40GB"), std::vector<std::string>{"A100 40GB"});
  // Spaces for nvidia-smi's dashes, nvidia-smi's H100 name without its vendor, and SXM5 (the H100's form).
  EXPECT_EQ(names("A100 SXM4 80GB"), std::vector<std::string>{"A100 80GB SXM"});
  EXPECT_EQ(names("a100 pcie 40gb"), std::vector<std::string>{"A100 40GB"});
  EXPECT_EQ(names("H100 80GB HBM3"), std::vector<std::string>{"H100 SXM"});
  EXPECT_EQ(names("H100 SXM5"), std::vector<std::string>{"H100 SXM"});
  EXPECT_EQ(names("H100-SXM5-80GB"), std::vector<std::string>{"H100 SXM"});
  // A device name spelt with spaces finds the same entry as with dashes (its MFU rate too).
  ASSERT_NE(gpu_spec_for_device("A100 SXM4 80GB"), nullptr);
  EXPECT_EQ(gpu_spec_for_device("A100 SXM4 80GB")->at("name"), "A100 80GB SXM");
  EXPECT_EQ(names("V100-PCIE-32GB"), std::vector<std::string>{"V100 PCIe"});
  EXPECT_TRUE(names("V100-SXM2-16GB").empty());
  // Loose words with a size: the cards the words name, of that size ("H100 80GB": the PCIe and the SXM, one
  // memory, as "H200" is the NVL and the SXM).
  EXPECT_EQ(names("H100 80GB"), (std::vector<std::string>{"H100 PCIe", "H100 SXM"}));
  EXPECT_EQ(names("H100 94gb"), std::vector<std::string>{"H100 NVL"});
  EXPECT_EQ(names("H200 141GB"), (std::vector<std::string>{"H200 NVL", "H200 SXM"}));
  // A vendor does not make a catch-all match string name a card: "NVIDIA A100 PCIe" is no more the 40 GB A100
  // than "A100 PCIe" is, nor "NVIDIA H100 x" the SXM (a walk found both taken); CUDA's names still are.
  EXPECT_TRUE(names("NVIDIA A100 PCIe").empty());
  EXPECT_TRUE(names("NVIDIA H100 x").empty());
  EXPECT_EQ(names("NVIDIA A100-PCIE-40GB"), std::vector<std::string>{"A100 40GB"});
  EXPECT_EQ(names("NVIDIA L4"), std::vector<std::string>{"L4"});
  // A MIG slice is a fraction of its card: no card of the sheet, nor the card's peak rates.
  for (const char* slice : {"NVIDIA H100 80GB HBM3 MIG 1g.10gb", "A100-SXM4-80GB MIG 3g.40gb", "H100 MIG"}) {
    EXPECT_TRUE(is_mig_slice(slice)) << slice;
    EXPECT_TRUE(names(slice).empty()) << slice;
    EXPECT_EQ(gpu_spec_for_device(slice), nullptr) << slice;
  }
  for (const char* card : {"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "A10G", "1.10gb"})
    EXPECT_FALSE(is_mig_slice(card)) << card;
  // A laptop part is not the desktop card its name holds: no peak from it (MFU would read ~2.5x too low).
  for (const char* laptop : {"NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA RTX A5000 Laptop GPU"})
    EXPECT_EQ(gpu_spec_for_device(laptop), nullptr) << laptop;
  EXPECT_NE(gpu_spec_for_device("NVIDIA GeForce RTX 4090"), nullptr);
  // "40G" as people shorten a card's size (a walk typed "A100 40G"), never part of a model number (A10G).
  EXPECT_EQ(names("A100 40G"), std::vector<std::string>{"A100 40GB"});
  EXPECT_EQ(names("h100 80g"), (std::vector<std::string>{"H100 PCIe", "H100 SXM"}));
  EXPECT_TRUE(names("A10G").empty());
  EXPECT_TRUE(names("H100 40GB").empty());       // no H100 has 40 GB
  EXPECT_TRUE(names("H100 80GB 80GB").empty());  // two sizes
  EXPECT_EQ(gpu_of_other_size("V100 16GB"),
            "V100 PCIe or V100 SXM2, which configs/gpus.json knows as 32 GB (32494 MiB as CUDA reports it)");
  EXPECT_EQ(gpu_of_other_size("H100 40GB"), std::nullopt);  // H100s of two memories: listed by the caller
  // "Tesla" says whose, as "NVIDIA": Tesla V100 is V100, the PCIe and the SXM2 (one memory), not one of them.
  EXPECT_EQ(names("Tesla V100"), names("V100"));
  EXPECT_EQ(names("Tesla V100"), (std::vector<std::string>{"V100 PCIe", "V100 SXM2"}));
  // But never the wrong memory: the 16 GB V100 is not the sheet's 32 GB one, a laptop 4090 is not the desktop
  // card, and loose words (no brand: "A100 80", "A100 SXM", "H100 foo") name nothing rather than a guess.
  EXPECT_TRUE(names("Tesla V100-SXM2-16GB").empty());
  // ... and says which card it would have been, for the error.
  EXPECT_EQ(gpu_of_other_size("Tesla V100-SXM2-16GB"),
            "V100 SXM2, which configs/gpus.json knows as 32 GB (32494 MiB as CUDA reports it)");
  EXPECT_EQ(gpu_of_other_size("V100-SXM2-32GB"), std::nullopt);  // it is the card
  EXPECT_EQ(gpu_of_other_size("H100 94GB"), std::nullopt);       // the H100 NVL
  EXPECT_EQ(gpu_of_other_size("RTX 4090 Laptop GPU 16GB"), std::nullopt);
  EXPECT_TRUE(names("NVIDIA GeForce RTX 4090 Laptop GPU").empty());
  EXPECT_TRUE(is_laptop_part("NVIDIA GeForce RTX 4090 Laptop GPU"));
  EXPECT_TRUE(is_laptop_part("RTX 3080 Max-Q"));
  EXPECT_FALSE(is_laptop_part("NVIDIA GeForce RTX 4090"));
  for (const char* loose : {"A100 80", "A100 SXM", "A100 PCIe", "H100 foo"})
    EXPECT_TRUE(names(loose).empty()) << loose;
  // The memory is the total CUDA reports, what `run` sizes a device by: 81008 MiB for an H100, not its
  // marketed 80 GB nor the 81559 MiB nvidia-smi reports (the driver keeps the rest).
  EXPECT_EQ(gpus_named("H100 SXM").front().bytes, uint64_t{81008} << 20);
  // Every card's CUDA total is under nvidia-smi's, by less than 1 GiB (what the driver reserves).
  for (const nlohmann::json& gpu : gpu_spec_sheet().at("gpus")) {
    const auto cuda = gpu.at("cuda_mib").get<uint64_t>(), smi = gpu.at("memory_mib").get<uint64_t>();
    EXPECT_LE(cuda, smi) << gpu.at("name");
    EXPECT_LT(smi - cuda, uint64_t{1024}) << gpu.at("name");
  }
  // Every card of the sheet has a name that finds it, and a memory.
  for (const std::string& name : gpu_names()) {
    const std::vector<GpuCard> found = gpus_named(name);
    ASSERT_EQ(found.size(), 1u) << name;
    EXPECT_EQ(found.front().name, name);
    EXPECT_GT(found.front().bytes, uint64_t{1} << 33) << name;  // every card here has more than 8 GiB
  }
}

TEST(Plan, TrainingBuffersByCategory) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 10},
    "layers": [{"type": "linear", "out_features": 20, "activation": "relu"},
               {"type": "linear", "out_features": 5}]})");
  const int64_t p = g.parameters;
  const Plan plan = make_plan(g, {4, Precision::fp32, Mode::train, 1, BackendKind::cpu});
  EXPECT_EQ(plan.memory.parameters, rounded(p * 4));
  EXPECT_EQ(plan.memory.master_weights, 0u);
  EXPECT_EQ(plan.memory.gradients, rounded(p * 4));
  EXPECT_EQ(plan.memory.optimizer_state, 2 * rounded(p * 4));
  // ops[0].out (4 x 20; a ReLU needs no ops[0].pre: its backward reads the output), ops[1].out (4 x 5)
  EXPECT_EQ(plan.memory.saved_activations, rounded(4 * 20 * 4) + rounded(4 * 5 * 4));
  EXPECT_EQ(plan.find("ops[0].pre"), nullptr);
  // GELU and SiLU differentiate from their input, which training keeps.
  for (const char* activation : {"gelu", "silu"}) {
    const Graph smooth = graph_of(std::string(R"({"name": "m", "input": {"type": "vector", "features": 10},
      "layers": [{"type": "linear", "out_features": 20, "activation": ")") +
                                  activation + R"("}, {"type": "linear", "out_features": 5}]})");
    const Plan kept = make_plan(smooth, {4, Precision::fp32, Mode::train, 1, BackendKind::cpu});
    EXPECT_EQ(kept.buffer("ops[0].pre").elements, 4u * 20u) << activation;
  }
  EXPECT_EQ(plan.memory.data, rounded(4 * 10 * 4) + rounded(4 * 4));
  // The loss gradient (4 x 5) in grad.a; the second linear's input gradient (4 x 20) in grad.b; the first
  // linear computes none.
  EXPECT_EQ(plan.buffer("grad.a").elements, 4u * 5u);
  EXPECT_EQ(plan.buffer("grad.b").elements, 4u * 20u);
  EXPECT_DOUBLE_EQ(plan.flops_per_step, g.train_flops_per_sample * 4);
  uint64_t sum = 0;
  for (const BufferSpec& b : plan.buffers) {
    sum += b.bytes;
    EXPECT_EQ(b.bytes % kBufferAlignment, 0u) << b.name;
    EXPECT_GE(b.bytes, b.elements * dtype_bytes(b.dtype)) << b.name;
  }
  EXPECT_EQ(sum, plan.memory.total_bytes());
}

// The network input lives in data.input and has no gradient (nothing upstream of it learns, as in PyTorch
// where the data does not require grad): a wide input sizes neither the ping-pong buffers nor, on the CPU,
// the fp32 input-gradient workspace. A residual around the first layer does not change that: its skip's
// gradient would flow into the data, so no grad.residual stash is planned for it.
TEST(Plan, AWideInputSizesOnlyTheDataBuffer) {
  for (const char* layers :
       {R"([{"type": "linear", "out_features": 10}, {"type": "linear", "out_features": 6}])",
        R"([{"type": "residual", "layers": [{"type": "linear", "out_features": 1000}]},
                                 {"type": "linear", "out_features": 10}, {"type": "linear", "out_features": 6}])"}) {
    const Graph g = graph_of(std::string(R"({"name": "m", "input": {"type": "vector", "features": 1000},
      "layers": )") + layers +
                             "}");
    const bool residual = std::string(layers).find("residual") != std::string::npos;
    // Largest output: 10 per sample, or the residual block's 1000 (its output is the next layer's input).
    const uint64_t widest = residual ? 1000u : 10u;
    const Plan train = make_plan(g, {64, Precision::bf16, Mode::train, 1, BackendKind::cpu});
    // grad.a: the loss gradient (6), then the residual's output gradient (1000); grad.b: the head's input
    // gradient (10). The first linear computes no input gradient.
    EXPECT_EQ(train.buffer("grad.a").elements, 64u * (residual ? 1000u : 6u)) << layers;
    EXPECT_EQ(train.buffer("grad.b").elements, 64u * 10u) << layers;
    EXPECT_EQ(train.buffer("data.input").elements, 64u * 1000u);
    // The fp32 input gradient: the second linear's input (10) or the loss's logits (6).
    EXPECT_EQ(train.buffer("workspace.dx").elements, 64u * widest) << layers;
    EXPECT_EQ(train.find("grad.residual[0]"), nullptr) << layers;
    const Plan infer = make_plan(g, {64, Precision::fp32, Mode::infer, 1, BackendKind::cuda});
    EXPECT_EQ(infer.buffer("act.a").elements, 64u * widest) << layers;
    // Inference still adds the input back, so it keeps the input's copy.
    if (residual) {
      EXPECT_EQ(infer.buffer("act.residual[0]").elements, 64u * 1000u);
    }
  }
}

// Pools take PyTorch's padding: floor((H + 2p - k) / s) + 1 (the ResNet stem's 3x3/2 pool with padding 1
// turns 112 into 56), at most half the kernel.
TEST(Plan, PoolsArePaddedAsInPyTorch) {
  const Graph g =
      graph_of(R"({"name": "m", "input": {"type": "image", "channels": 64, "height": 112, "width": 112},
    "layers": [{"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
               {"type": "avgpool2d", "kernel_size": 2, "padding": 1},
               {"type": "flatten"}, {"type": "linear", "out_features": 5}]})");
  EXPECT_EQ(g.ops[0].out_shape, (std::vector<int64_t>{64, 56, 56}));
  EXPECT_EQ(g.ops[0].padding, 1);
  EXPECT_EQ(g.ops[1].out_shape, (std::vector<int64_t>{64, 29, 29}));
  try {
    (void)graph_of(R"({"name": "m", "input": {"type": "image", "channels": 1, "height": 8, "width": 8},
      "layers": [{"type": "maxpool2d", "kernel_size": 3, "padding": 2}, {"type": "flatten"},
                 {"type": "linear", "out_features": 2}]})");
    ADD_FAILURE() << "padding over half the kernel was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(std::string(e.what()),
                ::testing::HasSubstr("layers[0].padding: 2 is more than half the kernel size 3"));
  }
}

// Nothing before the first op with parameters has a gradient (PyTorch: the pool's output does not require
// grad), so the conv after a leading pool computes no input gradient: not in the FLOPs, not in grad.a/b.
TEST(Plan, NoGradientBeforeTheFirstLayerThatLearns) {
  const Graph g =
      graph_of(R"({"name": "m", "input": {"type": "image", "channels": 4, "height": 16, "width": 16},
    "layers": [{"type": "avgpool2d", "kernel_size": 2},
               {"type": "conv2d", "out_channels": 2, "kernel_size": 3, "padding": 1},
               {"type": "flatten"}, {"type": "linear", "out_features": 5}]})");
  ASSERT_EQ(g.ops.size(), 3u);
  EXPECT_FALSE(g.ops[0].input_gradient);
  EXPECT_FALSE(g.ops[1].input_gradient);
  EXPECT_TRUE(g.ops[2].input_gradient);
  const double conv = 2.0 * 2 * (4 * 9) * 64, head = 2.0 * 128 * 5;
  EXPECT_DOUBLE_EQ(g.forward_flops_per_sample, conv + head);
  EXPECT_DOUBLE_EQ(g.train_flops_per_sample, 3 * conv + 3 * head - conv);
  const Plan train = make_plan(g, {8, Precision::bf16, Mode::train, 1, BackendKind::cpu});
  EXPECT_EQ(train.buffer("grad.a").elements, 8u * 5u);    // the loss gradient
  EXPECT_EQ(train.buffer("grad.b").elements, 8u * 128u);  // the conv's output, not the pool's 256
  EXPECT_EQ(train.buffer("workspace.dx").elements, 8u * 128u);
  const Plan infer = make_plan(g, {8, Precision::bf16, Mode::infer, 1, BackendKind::cpu});
  EXPECT_EQ(infer.buffer("act.a").elements, 8u * 256u);
}

// Inference's ping-pong: a residual's first op reads the copy of its input in act.residual, so every
// transformer block starts over at act.a and its 4·T·D MLP hidden layer lands in act.b each time, whatever
// the number of blocks (by turns, both buffers held it: 4+4+1 T·D live where PyTorch's no_grad holds at most
// the hidden layer, its input and the residual). No pre-activation is kept: the GELU runs in place.
TEST(Plan, EveryTransformerBlockPutsItsHiddenLayerInTheSameBuffer) {
  for (const int blocks : {1, 2, 3}) {
    const Graph g = graph_of(fmt::format(
        R"({{"name": "t", "input": {{"type": "tokens", "sequence_length": 16, "vocab_size": 10}},
      "layers": [{{"type": "embedding", "dim": 32}},
                 {{"type": "transformer_block", "heads": 4, "mlp_ratio": 4, "repeat": {}}},
                 {{"type": "layernorm"}}, {{"type": "linear", "out_features": 10}}]}})",
        blocks));
    for (const BackendKind backend : {BackendKind::cpu, BackendKind::cuda}) {
      const Plan infer = make_plan(g, {8, Precision::bf16, Mode::infer, 1, backend});
      const uint64_t btd = 8u * 16u * 32u;
      EXPECT_EQ(infer.buffer("act.a").elements, btd) << blocks;  // layernorms, attention, projections, adds
      EXPECT_EQ(infer.buffer("act.b").elements, 4 * btd) << blocks;  // qkv (3·T·D), the MLP's hidden layer
      EXPECT_EQ(infer.buffer("act.residual[0]").elements, btd) << blocks;
      EXPECT_EQ(infer.find("workspace.z"), nullptr) << blocks;
    }
  }
}

// Inference never copies a block's input where the op before can write it where the block keeps it: every
// preset's residual stream stays in act.residual[0] (a transformer's adds write there, a ResNet's stem and
// each block's add too), as PyTorch's `x = x + f(x)` copies nothing. Only a residual of the network input, or
// of an outer residual's input, or after an op that reads act.residual itself, copies.
TEST(Plan, InferenceCopiesNoBlocksInputThatAnOpCanWriteInPlace) {
  for (const char* name : {"tiny-lm", "gpt2-small", "resnet-small", "resnet-50", "vit-base"}) {
    const Graph g = lower(load_model(name));
    size_t saves = 0;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const Op& op = g.ops[i];
      if (op.kind == OpKind::residual_add) {
        EXPECT_EQ(op.writes_residual, op.residual_depth) << name << " " << op.path;
      }
      if (op.kind != OpKind::residual_save) continue;
      ++saves;
      EXPECT_FALSE(op.save_copies) << name << " " << op.path;
      ASSERT_GT(i, 0u);
      const Op& before = g.ops[i - 1];
      EXPECT_EQ(before.writes_residual, op.residual_depth) << name << " " << before.path;
    }
    EXPECT_GT(saves, 0u) << name;
  }
  // A residual of the network input copies it (data.input stays the data's); the nested one copies its
  // outer residual's input, which that one still adds; after the add, a layernorm reading act.residual[0]
  // cannot write over it, so the residual after it copies too.
  const Graph g = graph_of(R"({"name": "r", "input": {"type": "vector", "features": 16},
      "layers": [{"type": "residual", "layers": [{"type": "residual", "layers": [{"type": "linear", "out_features": 16}]}]},
                 {"type": "layernorm"},
                 {"type": "residual", "layers": [{"type": "linear", "out_features": 16}]},
                 {"type": "linear", "out_features": 4}]})");
  std::vector<bool> copies;
  for (const Op& op : g.ops)
    if (op.kind == OpKind::residual_save) copies.push_back(op.save_copies);
  EXPECT_EQ(copies, (std::vector<bool>{true, true, true}));
  // The buffers follow: both depths hold 16 per sample; act.a holds what the layernorm and the linears write.
  const Plan infer = make_plan(g, {8, Precision::fp32, Mode::infer, 1, BackendKind::cpu});
  EXPECT_EQ(infer.buffer("act.residual[0]").elements, 8u * 16u);
  EXPECT_EQ(infer.buffer("act.residual[1]").elements, 8u * 16u);
}

// Training's residual add writes its sum over the addend (the last inner op's output) where that op's
// backward does not read it, as PyTorch frees the addend after the add: no ops[i].out of its own. After a
// ReLU or tanh (whose backward reads the output) it keeps one.
TEST(Plan, ResidualAddsInPlaceWhereBackwardDoesNotReadTheAddend) {
  const Graph g =
      graph_of(R"({"name": "m", "input": {"type": "image", "channels": 4, "height": 8, "width": 8},
    "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
               {"type": "residual", "layers": [
                 {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
                 {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1}]},
               {"type": "residual", "layers": [
                 {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "activation": "relu"}]},
               {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}]})");
  // conv, save, conv, conv, add, save, conv, add, pool, linear
  ASSERT_EQ(g.ops.size(), 10u);
  EXPECT_TRUE(g.ops[4].adds_in_place);
  EXPECT_FALSE(g.ops[7].adds_in_place);
  const Plan train = make_plan(g, {2, Precision::fp32, Mode::train, 1, BackendKind::cuda});
  EXPECT_EQ(train.find("ops[4].out"), nullptr);
  EXPECT_NE(train.find("ops[3].out"), nullptr);  // holds the sum
  EXPECT_NE(train.find("ops[7].out"), nullptr);
  // Saved: four conv outputs (ops[3] holding the in-place sum) and the second add's, each [8, 8, 8] (2 KiB
  // per sample in fp32), then the pool's 8 and the 5 logits.
  uint64_t saved = 0;
  for (const char* name : {"ops[0].out", "ops[2].out", "ops[3].out", "ops[6].out", "ops[7].out"})
    saved += train.buffer(name).bytes;
  saved += train.buffer("ops[8].out").bytes + train.buffer("ops[9].out").bytes;
  EXPECT_EQ(train.memory.saved_activations, saved);
  EXPECT_EQ(train.buffer("ops[3].out").elements, 2u * 512u);
}

// The torchvision ResNet block: conv without bias, batchnorm and ReLU, conv, batchnorm, add. Saved per conv:
// its output (batchnorm's input) and batchnorm's output; the block's last batchnorm output holds the in-place
// sum; per batchnorm the batch's mean and 1/std (fp32, [C]); running statistics are model state.
TEST(Plan, BatchnormKeepsItsInputAndPerChannelStatistics) {
  const Graph g =
      graph_of(R"({"name": "m", "input": {"type": "image", "channels": 8, "height": 8, "width": 8},
    "layers": [{"type": "residual", "layers": [
                 {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
                 {"type": "batchnorm", "activation": "relu"},
                 {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
                 {"type": "batchnorm"}]},
               {"type": "flatten"}, {"type": "batchnorm", "activation": "gelu"},
               {"type": "linear", "out_features": 5}]})");
  // save, conv, bn, conv, bn, add, bn (vector), linear
  ASSERT_EQ(g.ops.size(), 8u);
  EXPECT_EQ(g.ops[2].kind, OpKind::batchnorm);
  EXPECT_EQ(g.ops[2].channels, 8);
  EXPECT_EQ(g.ops[2].spatial, 64);
  EXPECT_EQ(g.ops[6].channels, 512);  // BatchNorm1d over the flattened features
  EXPECT_EQ(g.ops[6].spatial, 1);
  EXPECT_EQ(g.ops[2].param_elements, 16);
  EXPECT_EQ(g.parameters, 2 * 8 * 8 * 9 + 2 * 16 + 2 * 512 + 512 * 5 + 5);
  EXPECT_EQ(g.forward_flops_per_sample, 2.0 * 2 * 8 * 72 * 64 + 2.0 * 512 * 5);  // normalization counts none
  EXPECT_TRUE(g.ops[5].adds_in_place);    // the last batchnorm's backward reads its input, not its output
  EXPECT_FALSE(g.ops[1].input_gradient);  // the first conv: backward stops there
  EXPECT_TRUE(g.ops[2].input_gradient);
  const Plan train = make_plan(g, {4, Precision::bf16, Mode::train, 1, BackendKind::cuda});
  for (int i : {1, 2, 3, 4, 6, 7}) EXPECT_NE(train.find(fmt::format("ops[{}].out", i)), nullptr) << i;
  EXPECT_EQ(train.find("ops[5].out"), nullptr);
  EXPECT_EQ(train.find("ops[6].pre")->elements, 4u * 512u);  // GELU keeps its input
  EXPECT_EQ(train.buffer("ops[2].stats").elements, 16u);     // batch-independent
  EXPECT_EQ(train.buffer("ops[2].stats").category, MemoryCategory::saved_activations);
  EXPECT_EQ(train.buffer("ops[6].stats").elements, 1024u);
  EXPECT_EQ(train.buffer("ops[4].running").elements, 16u);
  EXPECT_EQ(train.buffer("ops[4].running").category, MemoryCategory::parameters);
  EXPECT_EQ(train.buffer("ops[4].running").dtype, DType::f32);
  EXPECT_EQ(train.memory.parameters, rounded(g.parameters * 2) + 2 * rounded(16 * 4) + rounded(1024 * 4));
  EXPECT_EQ(train.buffer("workspace.batchnorm").elements,
            std::max(cuda_batchnorm_workspace_floats(4, 512, 1), cuda_batchnorm_workspace_floats(4, 8, 64)));
  EXPECT_EQ(cuda_batchnorm_slabs(4, 512, 1), 4);      // at most one slice per sample
  EXPECT_EQ(cuda_batchnorm_slabs(4096, 512, 1), 64);  // 16 blocks of 32 features, 64 slices each
  EXPECT_EQ(cuda_batchnorm_slabs(4, 8, 64), 4);
  EXPECT_EQ(cuda_batchnorm_slabs(4096, 64, 49), 16);
  const Plan infer = make_plan(g, {4, Precision::bf16, Mode::infer, 1, BackendKind::cuda});
  EXPECT_EQ(infer.find("ops[2].stats"), nullptr);
  EXPECT_NE(infer.find("ops[2].running"), nullptr);
  EXPECT_EQ(infer.find("workspace.batchnorm"), nullptr);
  EXPECT_EQ(make_plan(g, {4, Precision::fp32, Mode::train, 1, BackendKind::cpu}).find("workspace.batchnorm"),
            nullptr);
}

// An activation after the add: the sum goes over the inner layer's output, where ReLU or tanh run in place
// (torchvision's BasicBlock) and GELU or SiLU keep it as their pre-activation, writing their own output (as
// autograd keeps the sum for GELU and frees the inner output nobody reads).
// The resolved model writes a residual's activation only where it is not none (reports made before it came
// resolve as they did).
TEST(Plan, ActivationsAfterResidualAdds) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "linear", "out_features": 8},
               {"type": "residual", "activation": "relu", "layers": [{"type": "linear", "out_features": 8}]},
               {"type": "residual", "activation": "gelu", "layers": [{"type": "linear", "out_features": 8}]},
               {"type": "residual", "layers": [{"type": "linear", "out_features": 8}]},
               {"type": "linear", "out_features": 4}]})");
  // linear, save, linear, add, save, linear, add, save, linear, add, linear
  ASSERT_EQ(g.ops.size(), 11u);
  EXPECT_EQ(g.ops[3].activation, Activation::relu);
  EXPECT_TRUE(g.ops[3].adds_in_place);
  EXPECT_TRUE(g.ops[3].backward_reads_output());
  EXPECT_TRUE(g.ops[6].adds_in_place);
  EXPECT_TRUE(g.ops[6].preactivation_is_input());
  EXPECT_FALSE(g.ops[6].output_is_input());
  EXPECT_TRUE(g.ops[9].adds_in_place);
  const Plan train = make_plan(g, {2, Precision::fp32, Mode::train, 1, BackendKind::cuda});
  EXPECT_EQ(train.find("ops[3].out"), nullptr);
  EXPECT_EQ(train.find("ops[3].pre"), nullptr);
  EXPECT_EQ(train.buffer("ops[6].out").elements, 16u);  // GELU's output; the sum is in ops[5].out
  EXPECT_EQ(train.find("ops[6].pre"), nullptr);
  // Saved: the five linears' outputs (ops[2] and ops[5] holding sums) and GELU's; the last add's sum is in
  // ops[8].out.
  uint64_t saved = 0;
  for (int i : {0, 2, 5, 6, 8, 10}) saved += train.buffer(fmt::format("ops[{}].out", i)).bytes;
  EXPECT_EQ(train.memory.saved_activations, saved);
  const Plan infer = make_plan(g, {2, Precision::fp32, Mode::infer, 1, BackendKind::cuda});
  // Inference keeps no pre-activation: the sum goes into the output and the activation runs in place there,
  // on either backend.
  EXPECT_EQ(infer.find("workspace.z"), nullptr);
  EXPECT_EQ(make_plan(g, {2, Precision::fp32, Mode::infer, 1, BackendKind::cpu}).find("workspace.z"),
            nullptr);
  // Nested: an outer add goes over an inner add's SiLU output (SiLU's backward reads its pre-activation), not
  // over an inner ReLU's (its backward reads its output).
  const Graph nested = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "linear", "out_features": 8},
               {"type": "residual", "layers": [{"type": "residual", "activation": "silu",
                                                "layers": [{"type": "linear", "out_features": 8}]}]},
               {"type": "residual", "layers": [{"type": "residual", "activation": "relu",
                                                "layers": [{"type": "linear", "out_features": 8}]}]}]})");
  // linear, save, save, linear, add, add, save, save, linear, add, add
  ASSERT_EQ(nested.ops.size(), 11u);
  EXPECT_TRUE(nested.ops[4].adds_in_place);
  EXPECT_TRUE(nested.ops[5].adds_in_place);
  EXPECT_TRUE(nested.ops[9].adds_in_place);
  EXPECT_FALSE(nested.ops[10].adds_in_place);
  const nlohmann::json resolved =
      to_json(parse_model(nlohmann::json::parse(R"({"name": "m", "input": {"type": "vector", "features": 8},
    "layers": [{"type": "residual", "activation": "tanh", "layers": [{"type": "linear", "out_features": 8}]},
               {"type": "residual", "layers": [{"type": "linear", "out_features": 8}]}]})"),
                          "m.json"));
  EXPECT_EQ(resolved["layers"][0]["activation"], "tanh");
  EXPECT_FALSE(resolved["layers"][1].contains("activation"));
}

// A residual of the network input (nested or not) gets no gradient stash; a later one of the same depth,
// whose input is a layer's output, sizes it alone.
TEST(Plan, OnlyResidualsWithAnInputGradientGetAStash) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 100},
    "layers": [{"type": "residual", "layers": [{"type": "residual", "layers": [{"type": "linear", "out_features": 100}]}]},
               {"type": "linear", "out_features": 20},
               {"type": "residual", "layers": [{"type": "linear", "out_features": 20}]},
               {"type": "linear", "out_features": 6}]})");
  std::vector<bool> of_input;
  for (const Op& op : g.ops)
    if (op.kind == OpKind::residual_save || op.kind == OpKind::residual_add)
      of_input.push_back(op.residual_without_gradient);
  // save0, save1, add1, add0 around the input; then the later residual's save and add.
  EXPECT_EQ(of_input, (std::vector<bool>{true, true, true, true, false, false}));
  for (BackendKind backend : {BackendKind::cpu, BackendKind::cuda}) {
    const Plan train = make_plan(g, {8, Precision::fp32, Mode::train, 1, backend});
    EXPECT_EQ(train.buffer("grad.residual[0]").elements, 8u * 20u);
    EXPECT_EQ(train.find("grad.residual[1]"), nullptr);
    const Plan infer = make_plan(g, {8, Precision::fp32, Mode::infer, 1, backend});
    EXPECT_EQ(infer.buffer("act.residual[0]").elements, 8u * 100u);
    EXPECT_EQ(infer.buffer("act.residual[1]").elements, 8u * 100u);
  }
}

// torchvision's downsampling BasicBlock: the shortcut (1x1 conv stride 2, batchnorm) runs first from the
// block's input, then the inner layers from it again; the add goes over the inner batchnorm's output and the
// projected identity waits in act.shortcut[0], not among the saved activations (PyTorch frees it after the
// add).
constexpr const char* kDownsample = R"({"name": "m",
  "input": {"type": "image", "channels": 4, "height": 8, "width": 8},
  "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "bias": false},
             {"type": "residual", "activation": "relu", "layers": [
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2, "padding": 1, "bias": false},
                {"type": "batchnorm", "activation": "relu"},
                {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": false},
                {"type": "batchnorm"}],
              "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1, "stride": 2, "bias": false},
                           {"type": "batchnorm"}]},
             {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}]})";

TEST(Lower, AResidualWithAShortcutRunsItFirstThenTheInnerLayers) {
  const Graph g = graph_of(kDownsample);
  std::vector<OpKind> kinds;
  for (const Op& op : g.ops) kinds.push_back(op.kind);
  // conv, save, [conv, bn], branch, [conv, bn, conv, bn], add, pool, linear
  EXPECT_EQ(kinds, (std::vector<OpKind>{OpKind::conv2d, OpKind::residual_save, OpKind::conv2d,
                                        OpKind::batchnorm, OpKind::residual_branch, OpKind::conv2d,
                                        OpKind::batchnorm, OpKind::conv2d, OpKind::batchnorm,
                                        OpKind::residual_add, OpKind::global_avgpool, OpKind::linear}));
  EXPECT_EQ(g.ops[2].in_shape, (std::vector<int64_t>{4, 8, 8}));
  EXPECT_EQ(g.ops[5].in_shape, (std::vector<int64_t>{4, 8, 8}));  // the inner layers read the input again
  EXPECT_EQ(g.ops[4].in_shape, (std::vector<int64_t>{8, 4, 4}));  // the branch takes the shortcut's result
  EXPECT_EQ(g.ops[4].out_shape, (std::vector<int64_t>{4, 8, 8}));
  EXPECT_EQ(g.ops[3].ends_shortcut, 0);
  EXPECT_TRUE(g.ops[3].shortcut_result_transient());
  EXPECT_TRUE(g.ops[9].has_shortcut);
  EXPECT_EQ(g.ops[9].residual_branch_index, 4u);
  EXPECT_EQ(g.ops[1].residual_branch_index, 4u);
  EXPECT_TRUE(g.ops[9].adds_in_place);  // over the inner batchnorm's output
  for (size_t i : {2u, 3u, 4u, 5u, 6u, 7u, 8u}) EXPECT_EQ(g.ops[i].enclosing_save, 1) << i;
  for (size_t i : {0u, 1u, 9u, 10u}) EXPECT_EQ(g.ops[i].enclosing_save, -1) << i;
  const int64_t params = 4 * 4 * 9 + (8 * 4 * 9 + 2 * 8 + 8 * 8 * 9 + 2 * 8) + (8 * 4 + 2 * 8) + 8 * 5 + 5;
  EXPECT_EQ(g.parameters, params);
  const double stem = 2.0 * 4 * 36 * 64, c1 = 2.0 * 8 * 36 * 16, c2 = 2.0 * 8 * 72 * 16,
               sc = 2.0 * 8 * 4 * 16, head = 2.0 * 8 * 5;
  EXPECT_DOUBLE_EQ(g.forward_flops_per_sample, stem + c1 + c2 + sc + head);
  EXPECT_DOUBLE_EQ(g.train_flops_per_sample, 3 * (stem + c1 + c2 + sc + head) - stem);
}

// Training's ping-pong buffers hold what backward writes into each (as both backends' backward() does): the
// loss gradient in grad.a, each input gradient in the other buffer, a residual's branch and save in the
// current one.
TEST(Plan, TrainingPingPongBuffersHoldWhatBackwardWritesIntoEach) {
  // Backward: linear 8->5 (loss 5 in a, dx 8 -> b), pool (128 -> a), add (a), bn, conv, bn (128: b, a, b),
  // inner conv (its input 256 -> a), branch (a), shortcut bn (128 -> b), shortcut conv (256 -> a), save (a);
  // the stem conv computes no input gradient.
  const Plan block = make_plan(graph_of(kDownsample), {8, Precision::fp32, Mode::train, 1, BackendKind::cpu});
  EXPECT_EQ(block.buffer("grad.a").elements, 8u * 256u);
  EXPECT_EQ(block.buffer("grad.b").elements, 8u * 128u);
  // An LM's logits gradient (64 x 1000 per sample) sizes grad.a alone; grad.b holds the hidden states'
  // gradients, the widest the MLP's 64 x 512.
  const Plan lm = make_plan(graph_of(R"({"name": "lm",
    "input": {"type": "tokens", "sequence_length": 64, "vocab_size": 1000},
    "layers": [{"type": "embedding", "dim": 128}, {"type": "transformer_block", "heads": 4, "mlp_ratio": 4},
               {"type": "layernorm"}, {"type": "linear", "out_features": 1000}],
    "loss": "cross_entropy"})"),
                            {2, Precision::bf16, Mode::train, 1, BackendKind::cuda});
  EXPECT_EQ(lm.buffer("grad.a").elements, 2u * 64u * 1000u);
  EXPECT_EQ(lm.buffer("grad.b").elements, 2u * 64u * 512u);
  // One layer: no input gradient, so no grad.b.
  const Plan one = make_plan(graph_of(R"({"name": "m", "input": {"type": "vector", "features": 10},
    "layers": [{"type": "linear", "out_features": 3}]})"),
                             {4, Precision::fp32, Mode::train, 1, BackendKind::cpu});
  EXPECT_EQ(one.buffer("grad.a").elements, 4u * 3u);
  EXPECT_EQ(one.find("grad.b"), nullptr);
}

TEST(Lower, OpPathsTellTheCopiesOfARepeatApart) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 4},
    "layers": [{"type": "residual", "repeat": 2, "layers": [{"type": "linear", "out_features": 4, "repeat": 2}]},
               {"type": "linear", "out_features": 3}]})");
  std::vector<std::string> paths;
  for (const Op& op : g.ops) paths.push_back(op.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"layers[0]#0.save", "layers[0]#0.layers[0]#0",
                                             "layers[0]#0.layers[0]#1", "layers[0]#0.add", "layers[0]#1.save",
                                             "layers[0]#1.layers[0]#0", "layers[0]#1.layers[0]#1",
                                             "layers[0]#1.add", "layers[1]"}));
}

TEST(Lower, EachPathFromTheDataSkipsItsFirstInputGradient) {
  // A projection block on the network input: neither its shortcut conv nor its first inner conv computes an
  // input gradient, and the add's output has one from both.
  const Graph g =
      graph_of(R"({"name": "m", "input": {"type": "image", "channels": 2, "height": 4, "width": 4},
    "layers": [{"type": "residual", "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
                                              {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1}],
                "shortcut": [{"type": "conv2d", "out_channels": 4, "kernel_size": 1}]},
               {"type": "flatten"}, {"type": "linear", "out_features": 3}]})");
  // save, sc conv, branch, conv, conv, add, linear
  ASSERT_EQ(g.ops.size(), 7u);
  EXPECT_FALSE(g.ops[1].input_gradient);
  EXPECT_TRUE(g.ops[2].input_gradient);  // the shortcut's result has one
  EXPECT_FALSE(g.ops[3].input_gradient);
  EXPECT_TRUE(g.ops[4].input_gradient);
  EXPECT_TRUE(g.ops[5].input_gradient);
  EXPECT_TRUE(g.ops[0].residual_without_gradient);
  EXPECT_FALSE(g.ops[5].residual_without_gradient);  // the shortcut's result needs the add's gradient
  const double sc = 2.0 * 4 * 2 * 16, c1 = 2.0 * 4 * 18 * 16, c2 = 2.0 * 4 * 36 * 16, head = 2.0 * 64 * 3;
  EXPECT_DOUBLE_EQ(g.train_flops_per_sample, 3 * (sc + c1 + c2 + head) - sc - c1);
  // Backward: stopped at the first inner conv (3) it goes on at the branch (2); stopped at the shortcut's
  // conv (1) it is done.
  EXPECT_EQ(backward_resume(g, 3), std::optional<size_t>{2});
  EXPECT_EQ(backward_resume(g, 1), std::nullopt);
  // Nested: a projection block at the start of another's inner path, both on the network input.
  const Graph nested = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 4},
    "layers": [{"type": "residual", "shortcut": [{"type": "linear", "out_features": 3}],
                "layers": [{"type": "residual", "shortcut": [{"type": "linear", "out_features": 3}],
                            "layers": [{"type": "linear", "out_features": 3}]}]},
               {"type": "linear", "out_features": 2}]})");
  // 0 save, 1 sc linear, 2 branch, 3 save, 4 sc linear, 5 branch, 6 linear, 7 add, 8 add, 9 linear
  ASSERT_EQ(nested.ops.size(), 10u);
  EXPECT_EQ(backward_resume(nested, 6), std::optional<size_t>{5});  // on with the nested shortcut
  EXPECT_EQ(backward_resume(nested, 4), std::optional<size_t>{2});  // then with the outer one
  EXPECT_EQ(backward_resume(nested, 1), std::nullopt);
  const Plan train = make_plan(g, {2, Precision::fp32, Mode::train, 1, BackendKind::cpu});
  EXPECT_NE(train.find("grad.residual[0]"), nullptr);  // the add's gradient, for the shortcut
  EXPECT_EQ(train.find("grad.branch[0]"), nullptr);    // the input has no gradient to keep
}

TEST(Plan, AShortcutsResultWaitsInATransientBuffer) {
  const Graph g = graph_of(kDownsample);
  for (BackendKind backend : {BackendKind::cpu, BackendKind::cuda}) {
    const Plan train = make_plan(g, {2, Precision::fp32, Mode::train, 1, backend});
    EXPECT_EQ(train.find("ops[3].out"), nullptr);  // the shortcut's batchnorm output
    EXPECT_NE(train.find("ops[2].out"), nullptr);  // its conv's output, which that batchnorm reads
    EXPECT_EQ(train.find("ops[4].out"), nullptr);  // the branch has no output
    EXPECT_EQ(train.find("ops[9].out"), nullptr);  // the add writes over ops[8].out
    EXPECT_EQ(train.buffer("act.shortcut[0]").elements, 2u * 8u * 16u);
    EXPECT_EQ(train.buffer("act.shortcut[0]").category, MemoryCategory::transient);
    EXPECT_EQ(train.buffer("grad.residual[0]").elements, 2u * 8u * 16u);  // the add's output gradient
    EXPECT_EQ(train.buffer("grad.branch[0]").elements, 2u * 4u * 64u);    // the block input's gradient
    const Plan infer = make_plan(g, {2, Precision::fp32, Mode::infer, 1, backend});
    EXPECT_EQ(infer.buffer("act.residual[0]").elements, 2u * 4u * 64u);
    EXPECT_EQ(infer.buffer("act.shortcut[0]").elements, 2u * 8u * 16u);
  }
  // A shortcut ending in a ReLU keeps its output: backward reads it.
  std::string text(kDownsample);
  const std::string plain_end = R"({"type": "batchnorm"}]})";
  text.replace(text.find(plain_end), plain_end.size(), R"({"type": "batchnorm", "activation": "relu"}]})");
  const Plan relu = make_plan(graph_of(text), {2, Precision::fp32, Mode::train, 1, BackendKind::cpu});
  EXPECT_NE(relu.find("ops[3].out"), nullptr);
  EXPECT_EQ(relu.find("act.shortcut[0]"), nullptr);
}

TEST(Lower, ShortcutErrorsNameTheResidual) {
  const auto error_of = [](const std::string& text) {
    try {
      static_cast<void>(graph_of(text));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head =
      R"({"name": "m", "input": {"type": "image", "channels": 2, "height": 4, "width": 4},
    "layers": [{"type": "residual", "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "stride": 2,
                                               "padding": 1}], "shortcut": )";
  const std::string tail = R"(}, {"type": "flatten"}, {"type": "linear", "out_features": 3}]})";
  EXPECT_THAT(
      error_of(head + R"([{"type": "conv2d", "out_channels": 4, "kernel_size": 1}])" + tail),
      testing::HasSubstr("layers[0]: residual: the shortcut makes [4, 4, 4] and the inner layers [4, 2, 2]"));
  EXPECT_THAT(error_of(head + R"([{"type": "flatten"}])" + tail),
              testing::HasSubstr("layers[0].shortcut: the shortcut computes nothing"));
  EXPECT_THAT(error_of(head + "[]" + tail), testing::HasSubstr("layers[0].shortcut: empty"));
  EXPECT_THAT(error_of(R"({"name": "m", "input": {"type": "image", "channels": 2, "height": 4, "width": 4},
    "layers": [{"type": "residual", "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3,
                "stride": 2, "padding": 1}]}, {"type": "flatten"}, {"type": "linear", "out_features": 3}]})"),
              testing::HasSubstr("or the residual needs a `shortcut` that projects its input to [4, 2, 2]"));
}

TEST(Plan, PrecisionsModesAndOptimizers) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 64},
    "layers": [{"type": "linear", "out_features": 64}], "optimizer": {"type": "sgd"}})");
  const Plan bf16 = make_plan(g, {8, Precision::bf16, Mode::train, 1, BackendKind::cpu});
  EXPECT_EQ(bf16.memory.parameters, rounded(g.parameters * 2));
  EXPECT_EQ(bf16.memory.master_weights, rounded(g.parameters * 4));
  EXPECT_EQ(bf16.memory.optimizer_state, rounded(g.parameters * 4));  // one momentum buffer
  EXPECT_NE(bf16.find("workspace.x"), nullptr);
  // Plain SGD keeps no state (torch.optim.SGD with momentum 0 has no momentum buffer either).
  const Graph plain = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 64},
    "layers": [{"type": "linear", "out_features": 64}], "optimizer": {"type": "sgd", "momentum": 0}})");
  const Plan no_state = make_plan(plain, {8, Precision::bf16, Mode::train, 1, BackendKind::cpu});
  EXPECT_EQ(no_state.memory.optimizer_state, 0u);
  EXPECT_EQ(no_state.find("optimizer.momentum"), nullptr);
  const Plan infer = make_plan(g, {8, Precision::fp32, Mode::infer, 1, BackendKind::cpu});
  EXPECT_EQ(infer.memory.gradients, 0u);
  EXPECT_EQ(infer.memory.optimizer_state, 0u);
  EXPECT_EQ(infer.memory.saved_activations, 0u);
  EXPECT_EQ(infer.find("data.targets"), nullptr);
  EXPECT_DOUBLE_EQ(infer.flops_per_step, g.forward_flops_per_sample * 8);
  const Plan cuda = make_plan(g, {8, Precision::bf16, Mode::train, 1, BackendKind::cuda});
  EXPECT_EQ(cuda.buffer("workspace.cublaslt").bytes, uint64_t{32} << 20);
  const Plan accum = make_plan(g, {8, Precision::fp32, Mode::train, 4, BackendKind::cpu});
  EXPECT_EQ(accum.memory.total_bytes(),
            make_plan(g, {8, Precision::fp32, Mode::train, 1, BackendKind::cpu}).memory.total_bytes());
  EXPECT_DOUBLE_EQ(accum.flops_per_step, 2.0 * g.forward_flops_per_sample * 32);  // one linear, on the data
}

TEST(Plan, MaxFitBatchIsTheEdge) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 256},
    "layers": [{"type": "linear", "out_features": 256, "activation": "gelu"}, {"type": "linear", "out_features": 8}]})");
  PlanRequest r{1, Precision::bf16, Mode::train, 1, BackendKind::cpu};
  const uint64_t memory = uint64_t{64} << 20;
  const auto fit = max_fit_batch(g, r, memory);
  ASSERT_TRUE(fit.has_value());
  r.batch = *fit;
  EXPECT_LE(static_cast<double>(make_plan(g, r).memory.total_bytes()), memory * kMemorySafetyFraction);
  r.batch = *fit + 1;
  EXPECT_GT(static_cast<double>(make_plan(g, r).memory.total_bytes()), memory * kMemorySafetyFraction);
  EXPECT_FALSE(max_fit_batch(g, r, 1024).has_value());
}

// Exabytes of memory let the doubling reach plans past 2^62 bytes, which no memory holds: the edge is below
// them, not an error about a batch nobody asked for.
TEST(Plan, MaxFitBatchUnderAHugeMemoryStopsAtPlansTooLargeToSize) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "image", "channels": 64, "height": 32768,
    "width": 32768}, "layers": [{"type": "conv2d", "out_channels": 64, "kernel_size": 3, "padding": 1},
    {"type": "conv2d", "out_channels": 64, "kernel_size": 3, "padding": 1}, {"type": "global_avgpool"},
    {"type": "linear", "out_features": 10}]})");
  const PlanRequest r{1, Precision::fp32, Mode::train, 1, BackendKind::cpu};
  const std::optional<int64_t> fit = max_fit_batch(g, r, std::numeric_limits<uint64_t>::max());
  ASSERT_TRUE(fit.has_value());
  EXPECT_GE(*fit, 1);
  EXPECT_LT(*fit, kMaxBatch);
  PlanRequest above = r;
  above.batch = *fit + 1;
  try {  // the next batch is past what can be sized, or over the memory
    EXPECT_GT(static_cast<double>(make_plan(g, above).memory.total_bytes()),
              static_cast<double>(std::numeric_limits<uint64_t>::max()) * kMemorySafetyFraction);
  } catch (const UsageError&) {
  }
}

// A plan of exactly 95% of the budget fits (0.95 as a double, 0.94999..., refused it by a byte), and one byte
// over does not: plan --memory and run's over_limit share usable_bytes.
TEST(Plan, APlanOfExactlyTheSafetyFractionFits) {
  EXPECT_EQ(usable_bytes(2048000), 1945600u);
  EXPECT_EQ(usable_bytes(100), 95u);
  EXPECT_EQ(usable_bytes(uint64_t{1} << 63),
            (uint64_t{1} << 63) / 100 * 95 + ((uint64_t{1} << 63) % 100) * 95 / 100);
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 256},
    "layers": [{"type": "linear", "out_features": 256}, {"type": "linear", "out_features": 8}]})");
  // A batch whose total is a multiple of 19: 95% of total / 19 * 20 is that total exactly.
  PlanRequest r{1, Precision::fp32, Mode::train, 1, BackendKind::cpu};
  for (; r.batch < 4096 && make_plan(g, r).memory.total_bytes() % 19 != 0; ++r.batch) {
  }
  const uint64_t total = make_plan(g, r).memory.total_bytes();
  ASSERT_EQ(total % 19, 0u);
  const uint64_t memory = total / 19 * 20;
  ASSERT_EQ(usable_bytes(memory), total);
  EXPECT_EQ(max_fit_batch(g, r, memory), r.batch);
  EXPECT_LT(max_fit_batch(g, r, memory - 1).value_or(0), r.batch);
}

TEST(Plan, RejectsBadRequests) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 4},
    "layers": [{"type": "linear", "out_features": 2}]})");
  EXPECT_THROW((void)make_plan(g, {0, Precision::fp32, Mode::train, 1, BackendKind::cpu}), UsageError);
  EXPECT_THROW((void)make_plan(g, {1, Precision::fp32, Mode::train, 0, BackendKind::cpu}), UsageError);
}

TEST(Plan, EveryPresetPlansQuickly) {
  for (const std::string& name : preset_names()) {
    const Graph g = lower(load_model(name));
    for (Precision p : {Precision::fp32, Precision::bf16})
      for (Mode m : {Mode::train, Mode::infer}) {
        const Plan plan = make_plan(g, {64, p, m, 1, BackendKind::cuda});
        EXPECT_GT(plan.memory.total_bytes(), 0u) << name;
      }
  }
}

constexpr const char* kTokens =
    R"({"name": "t", "input": {"type": "tokens", "sequence_length": 64, "vocab_size": 100},
  "layers": [{"type": "embedding", "dim": 256}, {"type": "transformer_block", "heads": 4, "causal": true},
             {"type": "linear", "out_features": 100}]})";
constexpr const char* kImage =
    R"({"name": "i", "input": {"type": "image", "channels": 3, "height": 16, "width": 16},
  "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
             {"type": "conv2d", "out_channels": 16, "kernel_size": 5, "stride": 2},
             {"type": "global_avgpool"}, {"type": "linear", "out_features": 4}]})";

TEST(ExecutionPaths, PreferredCudaPathsFollowTheRule) {
  const Graph tokens = graph_of(kTokens);  // head dim 64
  EXPECT_EQ(preferred_cuda_paths(tokens, Precision::bf16).attention, AttentionPath::cudnn_sdpa);
  EXPECT_EQ(preferred_cuda_paths(tokens, Precision::fp16).attention, AttentionPath::cudnn_sdpa);
  EXPECT_EQ(preferred_cuda_paths(tokens, Precision::fp32).attention, AttentionPath::explicit_softmax);
  EXPECT_EQ(preferred_cuda_paths(tokens, Precision::tf32).attention, AttentionPath::explicit_softmax);
  EXPECT_EQ(preferred_cuda_paths(tokens, Precision::bf16).conv, ConvPath::im2col_gemm);
  // Head dims that are not a multiple of 8, or above 128, stay on the explicit path.
  const Graph odd =
      graph_of(R"({"name": "t", "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 10},
    "layers": [{"type": "embedding", "dim": 36}, {"type": "attention", "heads": 3}]})");
  EXPECT_EQ(preferred_cuda_paths(odd, Precision::bf16).attention, AttentionPath::explicit_softmax);
  const Graph wide =
      graph_of(R"({"name": "t", "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 10},
    "layers": [{"type": "embedding", "dim": 512}, {"type": "attention", "heads": 2}]})");
  EXPECT_EQ(preferred_cuda_paths(wide, Precision::bf16).attention, AttentionPath::explicit_softmax);
  const Graph image = graph_of(kImage);
  EXPECT_EQ(preferred_cuda_paths(image, Precision::fp32).conv, ConvPath::cudnn);
  EXPECT_EQ(preferred_cuda_paths(image, Precision::fp32).attention, AttentionPath::explicit_softmax);
  // Every preset: the transformers' head dim is 64, so 16-bit attention is fused; resnet's convs use cuDNN.
  for (const char* name : {"gpt2-small", "bert-base", "vit-base", "tiny-lm"})
    EXPECT_EQ(preferred_cuda_paths(lower(load_model(name)), Precision::bf16).attention,
              AttentionPath::cudnn_sdpa)
        << name;
  EXPECT_EQ(preferred_cuda_paths(lower(load_model("resnet-small")), Precision::bf16).conv, ConvPath::cudnn);
}

TEST(ExecutionPaths, FusedAttentionSavesStatisticsNotProbabilities) {
  const Graph g = graph_of(kTokens);
  const int64_t b = 8, heads = 4, seq = 64, dim = 256;
  PlanRequest r{b, Precision::bf16, Mode::train, 1, BackendKind::cuda};
  const Plan explicit_plan = make_plan(g, r);
  r.paths.attention = AttentionPath::cudnn_sdpa;
  const Plan fused = make_plan(g, r);
  int attention = -1;
  for (size_t i = 0; i < g.ops.size(); ++i)
    if (g.ops[i].kind == OpKind::attention_core) attention = static_cast<int>(i);
  ASSERT_GE(attention, 0);
  const std::string probs = "ops[" + std::to_string(attention) + "].probs";
  const std::string stats = "ops[" + std::to_string(attention) + "].stats";
  EXPECT_EQ(explicit_plan.buffer(probs).bytes, rounded(b * heads * seq * seq * 2));
  EXPECT_EQ(explicit_plan.find(stats), nullptr);
  EXPECT_EQ(fused.find(probs), nullptr);
  EXPECT_EQ(fused.buffer(stats).dtype, DType::f32);
  EXPECT_EQ(fused.buffer(stats).bytes, rounded(b * heads * seq * 4));
  for (const char* name : {"workspace.attention", "workspace.qkv", "workspace.attn_o", "workspace.dqkv"}) {
    EXPECT_GT(explicit_plan.buffer(name).elements, 0u) << name;
    EXPECT_EQ(fused.find(name), nullptr) << name;  // empty buffers are left out
  }
  EXPECT_EQ(explicit_plan.find("workspace.cudnn"), nullptr);
  // 16 MiB plus the backward pass's fp32 dQ accumulator and softmax sums.
  const uint64_t cudnn = (uint64_t{16} << 20) + b * heads * seq * (dim / heads + 2) * 4;
  EXPECT_EQ(fused.buffer("workspace.cudnn").bytes, rounded(cudnn));
  EXPECT_EQ(cudnn_workspace_bytes(g, fused.request), rounded(cudnn));
  // Inference keeps neither probabilities nor statistics, and reserves the base workspace only.
  r.mode = Mode::infer;
  const Plan infer = make_plan(g, r);
  EXPECT_EQ(infer.find("act.probs"), nullptr);
  EXPECT_EQ(infer.buffer("workspace.cudnn").bytes, uint64_t{16} << 20);
  // The CPU backend has one path: the request's paths do not change its plan.
  PlanRequest on_cpu{b, Precision::bf16, Mode::train, 1, BackendKind::cpu};
  const uint64_t cpu_bytes = make_plan(g, on_cpu).memory.total_bytes();
  on_cpu.paths.attention = AttentionPath::cudnn_sdpa;
  EXPECT_EQ(make_plan(g, on_cpu).memory.total_bytes(), cpu_bytes);
  EXPECT_EQ(make_plan(g, on_cpu).request.paths.attention, AttentionPath::explicit_softmax);
  // Fused attention is 16-bit only.
  r.precision = Precision::fp32;
  EXPECT_THROW((void)make_plan(g, r), UsageError);
}

TEST(ExecutionPaths, CudnnConvReplacesIm2colWithItsWorkspace) {
  const Graph g = graph_of(kImage);
  PlanRequest r{16, Precision::fp32, Mode::train, 1, BackendKind::cuda};
  const Plan im2col = make_plan(g, r);
  r.paths.conv = ConvPath::cudnn;
  const Plan cudnn = make_plan(g, r);
  EXPECT_GT(im2col.buffer("workspace.im2col").elements, 0u);
  EXPECT_EQ(cudnn.find("workspace.im2col"), nullptr);
  EXPECT_EQ(cudnn.find("workspace.conv_out"), nullptr);
  EXPECT_EQ(cudnn.buffer("workspace.cudnn").bytes, uint64_t{64} << 20);
  // The weight gradient of the largest conv, in the storage dtype (training only).
  EXPECT_EQ(cudnn.buffer("workspace.conv_dw").elements, 16u * 8 * 5 * 5);
  EXPECT_EQ(im2col.find("workspace.conv_dw"), nullptr);
  // At a large batch the budget grows to hold the largest conv's input, output and weights.
  PlanRequest big = r;
  big.batch = 8192;
  EXPECT_EQ(make_plan(g, big).buffer("workspace.cudnn").bytes,
            rounded((8192ull * (3 * 16 * 16 + 8 * 16 * 16) + 8 * 3 * 9 + 8) * 4));
  // fp16 keeps cuDNN's weight gradient in fp32 (the loss scale would overflow fp16); bf16 in bf16.
  PlanRequest half = r;
  half.precision = Precision::fp16;
  EXPECT_EQ(make_plan(g, half).buffer("workspace.conv_dw").dtype, DType::f32);
  half.precision = Precision::bf16;
  EXPECT_EQ(make_plan(g, half).buffer("workspace.conv_dw").dtype, DType::bf16);
  r.mode = Mode::infer;
  EXPECT_EQ(make_plan(g, r).find("workspace.conv_dw"), nullptr);
  // A patch embedding stays an im2col GEMM on either path.
  const Graph vit = lower(load_model("vit-base"));
  PlanRequest v{2, Precision::bf16,   Mode::train,
                1, BackendKind::cuda, preferred_cuda_paths(vit, Precision::bf16)};
  EXPECT_GT(make_plan(vit, v).buffer("workspace.im2col").elements, 0u);
}

TEST(Plan, DgeluBgradScratchOnlyWhereTheSessionFuses) {
  const Graph g = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 64},
    "layers": [{"type": "linear", "out_features": 96, "activation": "gelu"},
               {"type": "linear", "out_features": 48, "activation": "gelu"},
               {"type": "linear", "out_features": 8}]})");
  const Plan bf16 = make_plan(g, {4, Precision::bf16, Mode::train, 1, BackendKind::cuda});
  EXPECT_EQ(bf16.buffer("workspace.bgrad").elements, 96u);  // the widest GELU linear followed by a linear
  EXPECT_EQ(bf16.buffer("workspace.bgrad").dtype, DType::bf16);
  EXPECT_EQ(make_plan(g, {4, Precision::fp32, Mode::train, 1, BackendKind::cuda}).find("workspace.bgrad"),
            nullptr);
  EXPECT_EQ(make_plan(g, {4, Precision::bf16, Mode::infer, 1, BackendKind::cuda}).find("workspace.bgrad"),
            nullptr);
  EXPECT_EQ(make_plan(g, {4, Precision::bf16, Mode::train, 1, BackendKind::cpu}).find("workspace.bgrad"),
            nullptr);
  // A GELU linear whose output feeds a residual or a non-linear op is not fused.
  const Graph res = graph_of(R"({"name": "m", "input": {"type": "vector", "features": 64},
    "layers": [{"type": "linear", "out_features": 64, "activation": "gelu"},
               {"type": "residual", "layers": [{"type": "linear", "out_features": 64}]},
               {"type": "layernorm"}]})");
  EXPECT_EQ(make_plan(res, {4, Precision::bf16, Mode::train, 1, BackendKind::cuda}).find("workspace.bgrad"),
            nullptr);
}

TEST(ExecutionPaths, FusedAttentionLetsGpt2FitLargerBatches) {
  const Graph g = lower(load_model("gpt2-small"));
  PlanRequest r{1, Precision::bf16, Mode::train, 1, BackendKind::cuda};
  const uint64_t memory = uint64_t{80} << 30;
  const auto explicit_fit = max_fit_batch(g, r, memory);
  r.paths = preferred_cuda_paths(g, Precision::bf16);
  const auto fused_fit = max_fit_batch(g, r, memory);
  ASSERT_TRUE(explicit_fit && fused_fit);
  EXPECT_GT(*fused_fit, *explicit_fit);
}

TEST(Plan, PublishedParameterCounts) {
  // GPT-2 small without weight tying (its own lm head, no bias): 124.4M + 38.6M.
  const Graph gpt2 = lower(load_model("gpt2-small"));
  EXPECT_EQ(gpt2.parameters, 124439808 + 50257 * 768);
  // BERT-base: 12 x 7,087,872 per block, embeddings 30522x768 + 512x768, two layernorms, and an untied MLM
  // head 768x30522 + bias (no token-type embeddings, no pooler).
  const Graph bert = lower(load_model("bert-base"));
  EXPECT_EQ(bert.parameters, 12 * 7087872 + 30522 * 768 + 512 * 768 + 2 * 1536 + 768 * 30522 + 30522);
  // ViT-B/16 without the class token (mean-pooled): 86,567,656 - 768 (cls) - 768 (its position).
  const Graph vit = lower(load_model("vit-base"));
  EXPECT_EQ(vit.parameters, 86567656 - 768 - 768);
}

// --checkpointing: Graph::blocks are the top-level transformer_block and residual copies (not the residuals
// inside them); each keeps its output's buffer, and every other activation of a block is a view into the
// recompute arena, laid from its start per block, so the arena is the largest block's sum and views of one
// block never overlap. Layers between blocks keep theirs; inference and the FLOPs a step counts are as
// without it; backward knows which op ends which block.
TEST(Plan, CheckpointingViewsOneBlockAtATimeInTheArena) {
  const Graph lm = lower(load_model("tiny-lm"));
  ASSERT_EQ(lm.blocks.size(), 2u);  // transformer_block with repeat 2: two copies, each two residuals
  EXPECT_EQ(lm.ops[lm.blocks[0].first].kind, OpKind::residual_save);
  EXPECT_EQ(lm.ops[lm.blocks[0].last].kind, OpKind::residual_add);
  EXPECT_EQ(lm.blocks[1].first, lm.blocks[0].last + 1);
  EXPECT_EQ(lower(load_model("resnet-50")).blocks.size(), 16u);  // 3 + 4 + 6 + 3 bottlenecks
  EXPECT_TRUE(lower(load_model("mlp")).blocks.empty());
  for (const char* name : {"tiny-lm", "gpt2-small", "resnet-small", "resnet-50", "vit-base"}) {
    const Graph g = lower(load_model(name));
    for (const BackendKind backend : {BackendKind::cpu, BackendKind::cuda}) {
      PlanRequest request{3, Precision::bf16, Mode::train, 1, backend};
      if (backend == BackendKind::cuda) request.paths = preferred_cuda_paths(g, Precision::bf16);
      const Plan plain = make_plan(g, request);
      request.checkpointing = true;
      const Plan ckpt = make_plan(g, request);
      EXPECT_LT(ckpt.memory.saved_activations, plain.memory.saved_activations) << name;
      EXPECT_EQ(ckpt.memory.total_bytes() - ckpt.memory.saved_activations,
                plain.memory.total_bytes() - plain.memory.saved_activations)
          << name;
      EXPECT_EQ(ckpt.flops_per_step, plain.flops_per_step) << name;
      double recomputed = 0;
      for (const Graph::Block& b : g.blocks)
        for (size_t i = b.first; i <= b.last; ++i) recomputed += g.ops[i].forward_flops;
      EXPECT_DOUBLE_EQ(ckpt.recompute_flops_per_sample, recomputed) << name;
      EXPECT_EQ(plain.recompute_flops_per_sample, 0.0);
      const BufferSpec& arena = ckpt.buffer("recompute");
      uint64_t own = 0;
      std::vector<uint64_t> block_bytes(g.blocks.size(), 0);
      std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(g.blocks.size());
      for (const BufferSpec& b : ckpt.buffers) {
        if (!b.is_view()) {
          own += b.bytes;
          continue;
        }
        EXPECT_EQ(b.within, "recompute");
        EXPECT_EQ(b.category, MemoryCategory::saved_activations);
        EXPECT_LE(b.offset + b.bytes, arena.bytes) << name << " " << b.name;
        EXPECT_EQ(b.offset % kBufferAlignment, 0u);
        ASSERT_GE(b.op, 0);
        size_t k = 0;
        while (k < g.blocks.size() && !(g.blocks[k].first <= static_cast<size_t>(b.op) &&
                                        static_cast<size_t>(b.op) <= g.blocks[k].last))
          ++k;
        ASSERT_LT(k, g.blocks.size()) << name << " " << b.name << ": a view outside every block";
        block_bytes[k] += b.bytes;
        for (const auto& [offset, bytes] : ranges[k])
          EXPECT_TRUE(b.offset + b.bytes <= offset || offset + bytes <= b.offset) << name << " " << b.name;
        ranges[k].emplace_back(b.offset, b.bytes);
        // Its plain plan has the same buffer, of the same size, in memory of its own.
        const BufferSpec& same = plain.buffer(b.name);
        EXPECT_EQ(same.bytes, b.bytes);
        EXPECT_FALSE(same.is_view());
      }
      EXPECT_EQ(own, ckpt.memory.total_bytes()) << name;
      EXPECT_EQ(arena.bytes, *std::max_element(block_bytes.begin(), block_bytes.end())) << name;
      // Each block's output stays in memory of its own.
      for (const Graph::Block& b : g.blocks) {
        size_t j = b.last;
        while (j > b.first && g.ops[j].output_is_input()) --j;
        const BufferSpec* out = ckpt.find(fmt::format("ops[{}].out", j));
        ASSERT_NE(out, nullptr) << name << " block ending at " << b.last;
        EXPECT_FALSE(out->is_view()) << name;
      }
      const std::vector<int> ends = blocks_ending(g, request);
      for (size_t k = 0; k < g.blocks.size(); ++k) EXPECT_EQ(ends[g.blocks[k].last], static_cast<int>(k));
      EXPECT_EQ(std::count_if(ends.begin(), ends.end(), [](int e) { return e >= 0; }),
                static_cast<std::ptrdiff_t>(g.blocks.size()));
      // Inference has no backward: the same plan either way, and no block to recompute.
      request.mode = Mode::infer;
      const Plan infer = make_plan(g, request);
      request.checkpointing = false;
      EXPECT_EQ(infer.memory.total_bytes(), make_plan(g, request).memory.total_bytes()) << name;
      request.checkpointing = true;
      const std::vector<int> none = blocks_ending(g, request);
      EXPECT_TRUE(std::all_of(none.begin(), none.end(), [](int e) { return e < 0; }));
    }
  }
  // A block before every layer that learns (a pool of the data) is never reached by backward: nothing
  // recomputes it.
  const Graph pools = graph_of(R"({"name": "pools", "input": {"type": "vector", "features": 6},
    "layers": [{"type": "residual", "layers": [{"type": "linear", "out_features": 6, "activation": "gelu"}]},
               {"type": "residual", "layers": [{"type": "batchnorm"}]}]})");
  ASSERT_EQ(pools.blocks.size(), 2u);
  const Graph unlearned = graph_of(R"({"name": "late", "input": {"type": "image", "channels": 2, "height": 4,
    "width": 4}, "layers": [{"type": "residual", "layers": [{"type": "avgpool2d", "kernel_size": 3, "stride": 1,
    "padding": 1}]}, {"type": "flatten"}, {"type": "linear", "out_features": 3}]})");
  ASSERT_EQ(unlearned.blocks.size(), 1u);
  PlanRequest late{2, Precision::fp32, Mode::train, 1, BackendKind::cpu};
  late.checkpointing = true;
  const std::vector<int> late_ends = blocks_ending(unlearned, late);
  EXPECT_TRUE(std::all_of(late_ends.begin(), late_ends.end(), [](int e) { return e < 0; }));
  const std::vector<int> both = blocks_ending(pools, late);
  EXPECT_EQ(std::count_if(both.begin(), both.end(), [](int e) { return e >= 0; }), 2);

  // The largest batch that fits grows (gpt2-small bf16 on an 80 GiB card: about twice).
  const Graph gpt2 = lower(load_model("gpt2-small"));
  PlanRequest request{1, Precision::bf16,   Mode::train,
                      1, BackendKind::cuda, preferred_cuda_paths(gpt2, Precision::bf16)};
  const std::optional<int64_t> without = max_fit_batch(gpt2, request, uint64_t{80} << 30);
  request.checkpointing = true;
  const std::optional<int64_t> with = max_fit_batch(gpt2, request, uint64_t{80} << 30);
  ASSERT_TRUE(without && with);
  EXPECT_GT(*with, *without * 3 / 2);
}

// --checkpoint-blocks N: the first N blocks in forward order (of those backward reaches) keep only their
// outputs; the others keep every activation, overlaid on the recompute arena (backward is done with them
// before it recomputes a checkpointed block). Memory falls with N while the blocks kept whole outweigh the
// largest checkpointed one, and the fewest that fit a budget is found by trying each count.
// torch.utils.checkpoint's and Megatron's peak with the first N of L equal blocks checkpointed: the kept
// outputs and max(L - N, 1) blocks. So each block checkpointed saves the same, the first one included (a
// separate arena beside the L - N blocks saved nothing there: a walk saw --checkpoint-blocks 1 plan what no
// checkpointing did).
TEST(Plan, CheckpointingSomeBlocksSavesABlockEachAsPyTorchDoes) {
  const Graph g = lower(load_model("gpt2-small"));
  const size_t blocks = recomputable_blocks(g).size();
  ASSERT_EQ(blocks, 12u);
  PlanRequest request{4, Precision::bf16, Mode::train, 1, BackendKind::cuda};
  request.paths = preferred_cuda_paths(g, Precision::bf16);
  std::vector<uint64_t> saved{make_plan(g, request).memory.saved_activations};
  request.checkpointing = true;
  for (size_t n = 1; n <= blocks; ++n) {
    request.checkpoint_blocks = static_cast<int64_t>(n);
    saved.push_back(make_plan(g, request).memory.saved_activations);
  }
  const uint64_t step = saved[0] - saved[1];
  EXPECT_GT(step, 0u);
  for (size_t n = 1; n + 1 < blocks; ++n) EXPECT_EQ(saved[n] - saved[n + 1], step) << n;
  // All 12: the arena holds the one block recomputed, as with 11 it holds the one block kept.
  EXPECT_EQ(saved[blocks], saved[blocks - 1]);
}

TEST(Plan, CheckpointingTheFirstBlocksOnly) {
  for (const char* name : {"gpt2-small", "resnet-small"}) {
    const Graph g = lower(load_model(name));
    const std::vector<size_t> reached = recomputable_blocks(g);
    ASSERT_GE(reached.size(), 3u) << name;
    PlanRequest request{4, Precision::bf16, Mode::train, 1, BackendKind::cpu};
    const Plan plain = make_plan(g, request);
    request.checkpointing = true;
    const Plan all = make_plan(g, request);
    uint64_t previous = plain.memory.total_bytes();
    for (size_t n = 1; n <= reached.size(); ++n) {
      request.checkpoint_blocks = static_cast<int64_t>(n);
      const Plan some = make_plan(g, request);
      const std::vector<bool> checkpointed = checkpointed_blocks(g, request);
      // The first n recomputable blocks, in forward order, and none after them.
      for (size_t k = 0; k < reached.size(); ++k)
        EXPECT_EQ(checkpointed[reached[k]], k < n) << name << " " << n;
      const std::vector<int> ends = blocks_ending(g, request);
      EXPECT_EQ(std::count_if(ends.begin(), ends.end(), [](int e) { return e >= 0; }),
                static_cast<std::ptrdiff_t>(n));
      double recomputed = 0;
      for (size_t k = 0; k < n; ++k)
        for (size_t i = g.blocks[reached[k]].first; i <= g.blocks[reached[k]].last; ++i)
          recomputed += g.ops[i].forward_flops;
      EXPECT_DOUBLE_EQ(some.recompute_flops_per_sample, recomputed) << name << " " << n;
      // Every view is in a block: a checkpointed one, or one after them (all of them where n is short of
      // the blocks backward reaches), overlaid on the arena.
      for (const BufferSpec& b : some.buffers) {
        if (!b.is_view()) continue;
        EXPECT_EQ(b.within, "recompute") << name << " " << b.name;
        size_t k = 0;
        while (!(g.blocks[k].first <= static_cast<size_t>(b.op) &&
                 static_cast<size_t>(b.op) <= g.blocks[k].last))
          ++k;
        EXPECT_TRUE(checkpointed[k] || k > reached[n - 1]) << name << " " << b.name;
      }
      // Less memory with each block while the blocks kept whole outweigh the largest checkpointed one;
      // past that (n of all of gpt2-small's equal blocks, ResNet's large first blocks) each one more can
      // cost its output, kept, as PyTorch's peak does.
      if (n <= 2) {
        EXPECT_LT(some.memory.total_bytes(), previous) << name << " " << n;
      }
      previous = some.memory.total_bytes();
      if (n == reached.size()) {
        EXPECT_EQ(some.memory.total_bytes(), all.memory.total_bytes()) << name;
        EXPECT_DOUBLE_EQ(some.recompute_flops_per_sample, all.recompute_flops_per_sample) << name;
      }
    }
    // More blocks than backward reaches, and a count below zero, are refused naming the flag.
    request.checkpoint_blocks = static_cast<int64_t>(reached.size()) + 1;
    EXPECT_THROW(static_cast<void>(make_plan(g, request)), UsageError);
    request.checkpoint_blocks = -1;
    EXPECT_THROW(static_cast<void>(make_plan(g, request)), UsageError);
    // Inference and plain training ignore it.
    request.checkpoint_blocks = 2;
    request.checkpointing = false;
    EXPECT_EQ(make_plan(g, request).memory.total_bytes(), plain.memory.total_bytes());

    // The fewest blocks that fit: 0 where the plain plan fits, none where even all do not, and in between
    // the smallest n whose plan fits (n - 1 does not).
    request = PlanRequest{4, Precision::bf16, Mode::train, 1, BackendKind::cpu};
    const auto budget_for = [](uint64_t bytes) { return bytes * 100 / 95 + 100; };  // usable_bytes >= bytes
    EXPECT_EQ(fewest_checkpoint_blocks(g, request, budget_for(plain.memory.total_bytes())), 0);
    EXPECT_EQ(fewest_checkpoint_blocks(g, request, all.memory.total_bytes()), std::nullopt);
    PlanRequest three = request;
    three.checkpointing = true;
    three.checkpoint_blocks = 3;
    const uint64_t needs = make_plan(g, three).memory.total_bytes();
    const std::optional<int64_t> fewest = fewest_checkpoint_blocks(g, request, budget_for(needs));
    ASSERT_TRUE(fewest.has_value()) << name;
    EXPECT_LE(*fewest, 3) << name;
    three.checkpoint_blocks = *fewest;
    EXPECT_LE(make_plan(g, three).memory.total_bytes(), usable_bytes(budget_for(needs))) << name;
    three.checkpoint_blocks = *fewest - 1;
    three.checkpointing = *fewest > 1;
    EXPECT_GT(make_plan(g, three).memory.total_bytes(), usable_bytes(budget_for(needs))) << name;
  }
}

}  // namespace
}  // namespace bsw
