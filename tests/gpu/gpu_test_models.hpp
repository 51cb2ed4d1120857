// Models shared by the GPU test files: the same small networks run through the CPU reference and the CUDA
// backend (conv, pooling and residuals in kImage).
#pragma once

#include <nlohmann/json.hpp>

#include "batchsweep/model.hpp"
#include "batchsweep/plan.hpp"

namespace bsw::gputest {

[[nodiscard]] inline Graph graph_of(const char* text) {
  return lower(parse_model(nlohmann::json::parse(text), "gpu-test.json"));
}

inline constexpr const char* kImage = R"({"name": "image",
  "input": {"type": "image", "channels": 3, "height": 12, "width": 12},
  "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "activation": "relu"},
             {"type": "residual", "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1,
                                              "activation": "silu"}]},
             {"type": "maxpool2d", "kernel_size": 2},
             {"type": "conv2d", "out_channels": 16, "kernel_size": 3, "stride": 2, "activation": "gelu"},
             {"type": "avgpool2d", "kernel_size": 2},
             {"type": "global_avgpool"},
             {"type": "linear", "out_features": 7}],
  "loss": "cross_entropy",
  "optimizer": {"type": "sgd", "learning_rate": 0.05, "momentum": 0.9}})";

}  // namespace bsw::gputest
