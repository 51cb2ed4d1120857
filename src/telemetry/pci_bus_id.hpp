// PCI bus ids as CUDA and NVML write them ("0000:1b:00.0", "00000000:1B:00.0", "1b:00.0"), parsed to numbers
// so that the two spellings of one device compare equal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bsw::telemetry {

struct PciAddress {
  uint32_t domain = 0;
  uint32_t bus = 0;
  uint32_t device = 0;
  uint32_t function = 0;
  friend bool operator==(const PciAddress&, const PciAddress&) = default;
};

// domain:bus:device.function or bus:device.function, hexadecimal, either case; std::nullopt when malformed or
// out of range (bus <= 0xff, device <= 0x1f, function <= 7).
[[nodiscard]] std::optional<PciAddress> parse_pci_bus_id(std::string_view text);

// NVML's spelling: "%08X:%02X:%02X.%X".
[[nodiscard]] std::string to_nvml_bus_id(const PciAddress& address);

// A non-negative decimal device index ("0", "3"); std::nullopt otherwise.
[[nodiscard]] std::optional<unsigned> parse_device_index(std::string_view text);

}  // namespace bsw::telemetry
