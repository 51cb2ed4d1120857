// The names of point statuses, as the report schema spells them (declared in include/batchsweep/report.hpp).
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

}  // namespace bsw
