// Parsing and printing PCI bus ids for matching a CUDA device to its NVML handle.
#include "telemetry/pci_bus_id.hpp"

#include <fmt/format.h>
#include <charconv>
#include <limits>

namespace bsw::telemetry {
namespace {

// A whole field of hex digits no larger than `max`.
std::optional<uint32_t> parse_hex_field(std::string_view text, uint32_t max) {
  if (text.empty() || text.size() > 8) return std::nullopt;
  uint32_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (ec != std::errc() || end != text.data() + text.size() || value > max) return std::nullopt;
  return value;
}

}  // namespace

std::optional<PciAddress> parse_pci_bus_id(std::string_view text) {
  const auto dot = text.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const auto function = parse_hex_field(text.substr(dot + 1), 7);
  const std::string_view head = text.substr(0, dot);  // [domain:]bus:device
  const auto last_colon = head.rfind(':');
  if (!function || last_colon == std::string_view::npos) return std::nullopt;
  const auto device = parse_hex_field(head.substr(last_colon + 1), 0x1f);
  const std::string_view domain_bus = head.substr(0, last_colon);
  const auto bus_colon = domain_bus.rfind(':');
  const auto bus = parse_hex_field(
      bus_colon == std::string_view::npos ? domain_bus : domain_bus.substr(bus_colon + 1), 0xff);
  std::optional<uint32_t> domain = 0;
  if (bus_colon != std::string_view::npos) {
    domain = parse_hex_field(domain_bus.substr(0, bus_colon), std::numeric_limits<uint32_t>::max());
  }
  if (!device || !bus || !domain) return std::nullopt;
  return PciAddress{*domain, *bus, *device, *function};
}

std::string to_nvml_bus_id(const PciAddress& address) {
  return fmt::format("{:08X}:{:02X}:{:02X}.{:X}", address.domain, address.bus, address.device,
                     address.function);
}

std::optional<unsigned> parse_device_index(std::string_view text) {
  if (text.empty() || text.size() > 6) return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 10);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace bsw::telemetry
