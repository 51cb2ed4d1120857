// The cuDNN limits its own support check misses (cudnn_limit): pure functions of the shape, so they are
// checked here without a device or cuDNN.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/cuda/cudnn_graphs.hpp"

namespace bsw {
namespace {

// resnet-50's first convolution: 3x224x224 in, 64x112x112 out (802,816 elements a sample).
cuda::ConvShape resnet_stem(int64_t batch) {
  cuda::ConvShape s;
  s.batch = batch;
  s.channels = 3;
  s.height = s.width = 224;
  s.out_channels = 64;
  s.kernel = 7;
  s.stride = 2;
  s.padding = 3;
  s.out_height = s.out_width = 112;
  return s;
}

TEST(CudnnLimits, ConvolutionsPast32BitIndexingNeedCudnn93) {
  // 2674 samples hold 2,146,729,984 output elements; 2675 hold 2,147,532,800, past 2^31 - 1.
  EXPECT_EQ(cuda::cudnn_limit(resnet_stem(2674), 90200), "");
  EXPECT_EQ(cuda::cudnn_limit(resnet_stem(2675), 90200),
            "its output holds 2147532800 elements, past the 2^31 - 1 that cuDNN 9.2 indexes (64-bit indexing "
            "came in 9.3)");
  // 9.3 and later index in 64 bits: cuDNN's own check decides.
  EXPECT_EQ(cuda::cudnn_limit(resnet_stem(2675), 90300), "");
  EXPECT_EQ(cuda::cudnn_limit(resnet_stem(1 << 20), 91900), "");
  // The input counts too: a 1x1 convolution down to one channel has the larger input.
  cuda::ConvShape narrow = resnet_stem(1);
  narrow.channels = 64;
  narrow.height = narrow.width = 112;
  narrow.out_channels = 1;
  narrow.kernel = narrow.stride = 1;
  narrow.padding = 0;
  narrow.batch = 2675;
  EXPECT_THAT(cuda::cudnn_limit(narrow, 90000), testing::StartsWith("its input holds 2147532800 elements"));
}

TEST(CudnnLimits, FusedAttentionTakesAtMost65535Sequences) {
  cuda::SdpaShape s{65535, 12, 128, 64, true, DType::bf16, true};
  EXPECT_EQ(cuda::cudnn_limit(s), "");
  s.batch = 65536;
  EXPECT_THAT(cuda::cudnn_limit(s),
              testing::HasSubstr("at most 65535 sequences at once, and this batch has 65536"));
}

}  // namespace
}  // namespace bsw
