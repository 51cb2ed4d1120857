// What a device-hour's price makes of a rate: the one formula behind every cost batchsweep reports (a
// point's, the recommendation's, serving's, compare's).
#pragma once

namespace bsw {

// USD a million samples (or requests) cost at `per_second` of them, on a device priced `price_per_hour` USD.
[[nodiscard]] constexpr double cost_per_million(double price_per_hour, double per_second) {
  return price_per_hour / 3600.0 / per_second * 1e6;
}

}  // namespace bsw
