// PCI bus id parsing: CUDA's and NVML's spellings of one device compare equal; malformed ids are rejected.
#include <gtest/gtest.h>

#include "telemetry/pci_bus_id.hpp"

namespace bsw::telemetry {
namespace {

TEST(PciBusId, CudaAndNvmlSpellingsAgree) {
  const auto nvml = parse_pci_bus_id("00000000:1B:00.0");
  ASSERT_TRUE(nvml.has_value());
  EXPECT_EQ(*nvml, (PciAddress{0, 0x1B, 0, 0}));
  EXPECT_EQ(parse_pci_bus_id("0000:1b:00.0"), nvml);
  EXPECT_EQ(parse_pci_bus_id("1b:00.0"), nvml);
  EXPECT_EQ(to_nvml_bus_id(*nvml), "00000000:1B:00.0");
  EXPECT_EQ(to_nvml_bus_id(*parse_pci_bus_id("10001:c3:1f.7")), "00010001:C3:1F.7");
}

TEST(PciBusId, RejectsMalformedAndOutOfRange) {
  for (const char* bad : {"", "0", "1b:00", "0000:1b:00:0", "0000:1g:00.0", "0000:100:00.0", "0000:1b:20.0",
                          "0000:1b:00.8", ":1b:00.0", "0000::00.0", "0000:1b:.0", "0000:1b:00.", "GPU-1234",
                          "123456789:1b:00.0", "0000:-1:00.0"}) {
    EXPECT_FALSE(parse_pci_bus_id(bad).has_value()) << bad;
  }
}

TEST(DeviceIndex, DecimalOnly) {
  EXPECT_EQ(parse_device_index("0"), 0u);
  EXPECT_EQ(parse_device_index("12"), 12u);
  EXPECT_FALSE(parse_device_index("").has_value());
  EXPECT_FALSE(parse_device_index("-1").has_value());
  EXPECT_FALSE(parse_device_index("1b").has_value());
  EXPECT_FALSE(parse_device_index("0000:1b:00.0").has_value());
}

}  // namespace
}  // namespace bsw::telemetry
