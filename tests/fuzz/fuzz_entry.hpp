// The fuzz entry points, shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp) and the regression test that
// replays the committed corpora and minimised findings in every normal build
// (tests/fuzz/regressions_test.cpp). Each takes untrusted bytes, feeds them through the real reading path,
// and sorts what happens into an expected outcome (accepted, or rejected with one of batchsweep's typed
// errors) or a finding (any other exception, or a round trip that does not reproduce itself). Crashes and
// sanitizer reports end the process before returning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace bsw::fuzz {

enum class Outcome {
  accepted,  // the input was read; its round trip reproduced it
  rejected,  // the input was refused with the typed error the reader documents
  finding,   // anything else: a bug
};

struct Verdict {
  Outcome outcome = Outcome::finding;
  std::string detail;  // the error message (rejected) or what went wrong (finding); empty when accepted
};

// Writes `bytes` to one scratch file per process (see scratch_path) and calls bsw::load_model on
// it, so the size, binary and nesting guards of the real loader run. Rejected: any bsw::Error. Accepted only
// if the resolved model's JSON (bsw::to_json) parses back through parse_model to the same JSON.
[[nodiscard]] Verdict fuzz_model_config(std::span<const uint8_t> bytes);

// Writes `bytes` to one scratch file per process and calls bsw::read_report on it. Rejected: bsw::InputError.
// Accepted only if to_json(report) serialises, parses back to equal JSON, reads back through
// report_from_json without error, and writes the same JSON again.
[[nodiscard]] Verdict fuzz_report_reader(std::span<const uint8_t> bytes);

// The scratch file the entry points write, for this process and `target` ("model" or "report"): in
// $BSW_FUZZ_SCRATCH_DIR when that names a folder (scripts/fuzz.sh points it at a temporary one, so inputs
// that crash leave nothing behind), else /dev/shm, else the system's temporary folder.
[[nodiscard]] std::string scratch_path(const std::string& target);

}  // namespace bsw::fuzz
