// libFuzzer target: arbitrary bytes as a report file through bsw::read_report, then the JSON round trip
// (see fuzz_entry.hpp). A finding is printed and turned into an abort, so libFuzzer saves the input.
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bsw::fuzz::Verdict verdict = bsw::fuzz::fuzz_report_reader({data, size});
  if (verdict.outcome == bsw::fuzz::Outcome::finding) {
    std::fprintf(stderr, "fuzz_report_reader finding: %s\n", verdict.detail.c_str());
    std::abort();
  }
  return 0;
}
