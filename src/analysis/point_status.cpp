// The names of point statuses, as the report schema spells them, and the label of a point's batch (declared
// in include/batchsweep/report.hpp).
#include <fmt/format.h>

#include "batchsweep/report.hpp"

namespace bsw {

std::string_view to_string(PointStatus v) {
  switch (v) {
    case PointStatus::ok:
      return "ok";
    case PointStatus::oom:
      return "oom";
    case PointStatus::over_limit:
      return "over_limit";
    case PointStatus::error:
      return "error";
  }
  return "error";
}

std::string batch_label(int64_t batch, int64_t accumulation) {
  return accumulation == 1 ? fmt::format("{}", batch) : fmt::format("{}x{}", batch, accumulation);
}

bool did_not_fit(PointStatus status) {
  return status == PointStatus::oom || status == PointStatus::over_limit;
}

bool stopped_short(std::string_view stop_reason) {
  return stop_reason == "timeout" || stop_reason == "sample cap" || stop_reason == "noise settled";
}

}  // namespace bsw
