// libFuzzer target: arbitrary bytes as a model config file through bsw::load_model (see fuzz_entry.hpp).
// A finding is printed and turned into an abort, so libFuzzer saves the input as crash-<sha1>.
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const bsw::fuzz::Verdict verdict = bsw::fuzz::fuzz_model_config({data, size});
  if (verdict.outcome == bsw::fuzz::Outcome::finding) {
    std::fprintf(stderr, "fuzz_model_config finding: %s\n", verdict.detail.c_str());
    std::abort();
  }
  return 0;
}
