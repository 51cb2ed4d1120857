// Helpers shared by the model tests: field-by-field ModelSpec comparison and a fresh temporary directory.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "batchsweep/model.hpp"

namespace bsw::test {

inline void expect_same_layers(const std::vector<LayerSpec>& a, const std::vector<LayerSpec>& b);

inline void expect_same_layer(const LayerSpec& a, const LayerSpec& b) {
  SCOPED_TRACE(a.json_path);
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.json_path, b.json_path);
  EXPECT_EQ(a.repeat, b.repeat);
  EXPECT_EQ(a.out_features, b.out_features);
  EXPECT_EQ(a.bias, b.bias);
  EXPECT_EQ(a.activation, b.activation);
  EXPECT_EQ(a.out_channels, b.out_channels);
  EXPECT_EQ(a.kernel_size, b.kernel_size);
  EXPECT_EQ(a.stride, b.stride);
  EXPECT_EQ(a.padding, b.padding);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.patch_size, b.patch_size);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.mlp_ratio, b.mlp_ratio);
  EXPECT_EQ(a.causal, b.causal);
  expect_same_layers(a.layers, b.layers);
}

inline void expect_same_layers(const std::vector<LayerSpec>& a, const std::vector<LayerSpec>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) expect_same_layer(a[i], b[i]);
}

inline void expect_same_model(const ModelSpec& a, const ModelSpec& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.input.type, b.input.type);
  EXPECT_EQ(a.input.features, b.input.features);
  EXPECT_EQ(a.input.channels, b.input.channels);
  EXPECT_EQ(a.input.height, b.input.height);
  EXPECT_EQ(a.input.width, b.input.width);
  EXPECT_EQ(a.input.sequence_length, b.input.sequence_length);
  EXPECT_EQ(a.input.vocab_size, b.input.vocab_size);
  expect_same_layers(a.layers, b.layers);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.optimizer.type, b.optimizer.type);
  EXPECT_EQ(a.optimizer.learning_rate, b.optimizer.learning_rate);
  EXPECT_EQ(a.optimizer.momentum, b.optimizer.momentum);
  EXPECT_EQ(a.optimizer.beta1, b.optimizer.beta1);
  EXPECT_EQ(a.optimizer.beta2, b.optimizer.beta2);
  EXPECT_EQ(a.optimizer.eps, b.optimizer.eps);
  EXPECT_EQ(a.optimizer.weight_decay, b.optimizer.weight_decay);
}

// A directory made fresh for one test and removed with everything in it afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "bsw_model_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

  // Writes `content` (bytes as given) to a file in this directory and returns its path.
  [[nodiscard]] std::string write(const std::string& name, const std::string& content) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream out(file, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) throw std::runtime_error("cannot write " + file.string());
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace bsw::test
