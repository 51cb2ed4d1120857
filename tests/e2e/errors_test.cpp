// The bad-input table: what users throw at batchsweep and what they must get — exit code 2 (or the documented
// code), one message naming the flag, field or file, and nothing half-written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "e2e/e2e_support.hpp"

namespace bsw::e2e {
namespace {

// 1,2,...,4097: one batch more than a list may hold.
const std::string kLongList = [] {
  std::string list = "1";
  for (int i = 2; i <= 4097; ++i) {
    list.push_back(',');
    list.append(std::to_string(i));
  }
  return list;
}();

struct Case {
  std::string name;
  std::vector<std::string> args;  // "{dir}" is replaced by the scratch directory
  int exit_code;
  std::vector<std::string> words;  // each must appear in stderr
  std::string file_name = {};      // written into the scratch directory first, with file_text
  std::string file_text = {};
  std::vector<std::string> kept = {};  // other names the case itself makes in the scratch directory
};

// "{dir}" becomes the scratch directory, "{dir_name}" its last component.
std::string expand(const std::string& s, const std::string& dir) {
  std::string out = s;
  for (size_t at = out.find("{dir}"); at != std::string::npos; at = out.find("{dir}"))
    out.replace(at, 5, dir);
  const std::string name = std::filesystem::path(dir).filename().string();
  for (size_t at = out.find("{dir_name}"); at != std::string::npos; at = out.find("{dir_name}"))
    out.replace(at, 10, name);
  return out;
}

class BadInput : public ::testing::TestWithParam<Case> {};

TEST_P(BadInput, ExitsWithAClearMessage) {
  const Case& c = GetParam();
  ScratchDir dir;
  if (!c.file_name.empty()) std::ofstream(dir / c.file_name, std::ios::binary) << c.file_text;
  std::vector<std::string> args;
  for (const std::string& a : c.args) args.push_back(expand(a, dir.path().string()));
  // A run or plan that names no export gets one, to show that bad input leaves no file behind.
  const bool exports = std::any_of(args.begin(), args.end(), [](const std::string& a) {
    for (const char* flag : {"--json", "--csv", "--markdown", "--svg"})
      if (a.rfind(flag, 0) == 0) return true;  // also --svg=FILE
    return false;
  });
  if (!exports && !args.empty() && (args.front() == "run" || args.front() == "plan")) {
    args.push_back("--json");
    args.push_back((dir / "out.json").string());
  }
  const Result r = run(args);
  EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
  for (const std::string& w : c.words)
    EXPECT_NE(r.err.find(expand(w, dir.path().string())), std::string::npos)
        << "missing '" << w << "' in: " << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;
  // Nothing half-written: the directory holds what the case put there, and nothing else.
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name != c.file_name && std::find(c.kept.begin(), c.kept.end(), name) == c.kept.end())
      left.push_back(name);
  }
  EXPECT_TRUE(left.empty()) << "left behind: " << ::testing::PrintToString(left);
  // and the file it read is as it was.
  if (!c.file_name.empty()) {
    EXPECT_EQ(slurp(dir / c.file_name), c.file_text);
  }
}

const std::string kRun = "run";
const std::vector<std::string> kQuick = {"--backend", "cpu", "--min-time", "0.01", "--quiet"};

std::vector<std::string> run_with(std::vector<std::string> extra) {
  std::vector<std::string> args = {kRun};
  args.insert(args.end(), kQuick.begin(), kQuick.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const std::string kTinyModel =
    R"({"name": "tiny", "input": {"type": "vector", "features": 4}, "layers": [{"type": "linear", "out_features": 2}]})";

std::string nested(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

std::string residual_nest(int depth) {
  std::string s = R"({"type": "linear", "out_features": 8})";
  for (int i = 0; i < depth; ++i) s = R"({"type": "residual", "layers": [)" + s + "]}";
  return R"({"name": "deep", "input": {"type": "vector", "features": 8}, "layers": [)" + s + "]}";
}

INSTANTIATE_TEST_SUITE_P(
    Configs, BadInput,
    ::testing::Values(
        Case{"invalid_json",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"{dir}/m.json", "not valid JSON"},
             "m.json",
             "{\"name\": "},
        Case{"empty_file", {"plan", "--model", "{dir}/m.json"}, 2, {"{dir}/m.json"}, "m.json", ""},
        // The extension left off a config beside it: the file named, not a preset guessed.
        Case{"model_without_extension",
             {"plan", "--model", "{dir}/llama-small"},
             2,
             {"--model {dir}/llama-small: no such preset or file; did you mean the file "
              "'{dir}/llama-small.json'?"},
             "llama-small.json",
             kTinyModel},
        Case{"script_key_typo",
             {"run", "--backend", "scripted", "--script", "{dir}/s.json"},
             2,
             {"unknown key 't0'; did you mean 't0_ms'?"},
             "s.json",
             R"({"t0": 2})"},
        Case{"binary_file",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"{dir}/m.json", "binary"},
             "m.json",
             std::string("\x7f"
                         "ELF\0\0\x01",
                         7)},
        Case{"directory", {"plan", "--model", "{dir}"}, 2, {"{dir}"}},
        Case{"export_under_a_file",
             {"plan", "--json", "{dir}/m.json/plan.json"},
             2,
             {"--json {dir}/m.json/plan.json: {dir}/m.json is a file, not a directory"},
             "m.json",
             "{}"},
        // Every buffer of 4096 batches of a 12-layer transformer: 600k rows, which a deeper model would
        // make gigabytes of (and die of), refused up front with a list that fits.
        Case{"buffers_listing_too_long",
             {"plan", "--model", "gpt2-small", "--batch", "1:4096:+1", "--buffers", "--json", "{dir}/p.json"},
             2,
             {"--buffers: 4096 batches of 147 buffers each would list 602112 rows, over the 200000 a listing "
              "holds; give --buffers a few batches (e.g. --batch 1,2049,4096)"}},
        Case{"latency_percentile_not_offered",
             {"run", "--latency-slo", "5", "--latency-percentile", "99.995"},
             2,
             {"--latency-percentile: must be a percentile from 50 to 99.99, at most two decimals (e.g. 95, "
              "99, "
              "99.5, 99.9) (p95 works too), got 99.995"}},
        Case{"model_number_overflow",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"{dir}/m.json: is not valid JSON: line 2, column 11: the number 1e400 is beyond a double's "
              "range"},
             "m.json",
             "{\"name\": \"x\",\n \"input\": 1e400}"},
        Case{"unknown_name", {"plan", "--model", "gpt3-xxl"}, 2, {"gpt3-xxl", "gpt2-small"}},
        Case{"unknown_layer",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"layers[0]", "lstm"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 4}, "layers": [{"type": "lstm"}]})"},
        Case{"nothing_to_train",
             {"run", "--backend", "cpu", "--model", "{dir}/m.json", "--batch", "2"},
             2,
             {"--mode train: model 'pools' has no parameters to train", "--mode infer"},
             "m.json",
             R"({"name": "pools", "input": {"type": "image", "channels": 3, "height": 4, "width": 4},
                 "layers": [{"type": "maxpool2d", "kernel_size": 2}, {"type": "global_avgpool"}]})"},
        Case{"unknown_key",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"layers[0].outfeatures", "out_features"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 4},
                 "layers": [{"type": "linear", "outfeatures": 2}]})"},
        Case{"duplicate_key",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"{dir}/m.json: layers[1].out_features: is given twice"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 4},
                 "layers": [{"type": "linear", "out_features": 2},
                            {"type": "linear", "out_features": 3, "out_features": 30}]})"},
        Case{"wrong_type",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"layers[0].out_features"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 4},
                 "layers": [{"type": "linear", "out_features": "ten"}]})"},
        Case{"zero_size",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"input.features"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 0},
                 "layers": [{"type": "linear", "out_features": 2}]})"},
        Case{"negative_size",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"layers[0].out_features"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 4},
                 "layers": [{"type": "linear", "out_features": -3}]})"},
        Case{"huge_product",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"overflow"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 2000000000},
                 "layers": [{"type": "linear", "out_features": 2000000000}]})"},
        Case{"heads_do_not_divide",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"layers[1].heads: 12 does not divide dim 100"},
             "m.json",
             R"({"name": "x", "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 50},
                 "layers": [{"type": "embedding", "dim": 100}, {"type": "attention", "heads": 12},
                            {"type": "linear", "out_features": 50}]})"},
        Case{"kernel_too_large",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"layers[0].kernel_size", "larger"},
             "m.json",
             R"({"name": "x", "input": {"type": "image", "channels": 3, "height": 4, "width": 4},
                 "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 7}]})"},
        Case{"residual_shape",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"layers[0]", "residual"},
             "m.json",
             R"({"name": "x", "input": {"type": "vector", "features": 8},
                 "layers": [{"type": "residual", "layers": [{"type": "linear", "out_features": 3}]}]})"},
        Case{"deep_json",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"{dir}/m.json", "nest"},
             "m.json",
             nested(100000)},
        Case{"deep_residuals",
             {"plan", "--model", "{dir}/m.json"},
             2,
             {"{dir}/m.json"},
             "m.json",
             residual_nest(40)}),
    [](const auto& test_info) { return test_info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Flags, BadInput,
    ::testing::Values(
        Case{"batch_zero", run_with({"--batch", "0"}), 2, {"--batch", "0"}},
        Case{"batch_dash_range",
             run_with({"--batch", "1-64"}),
             2,
             {"--batch", "batch '1-64' is not an integer: a range is start:stop, e.g. 1:64:*2"}},
        Case{"other_tools_flag",
             run_with({"--gradient-checkpointing"}),
             2,
             {"run has no flag --gradient-checkpointing: did you mean --checkpointing?"}},
        Case{"other_tools_precision_flag",
             run_with({"--bf16"}),
             2,
             {"run has no flag --bf16: did you mean --precision bf16?"}},
        Case{"batch_negative", run_with({"--batch=-4"}), 2, {"--batch"}},
        Case{"batch_range_backwards", run_with({"--batch", "8:2"}), 2, {"--batch", "8:2"}},
        Case{"batch_huge", run_with({"--batch", "1:1e9"}), 2, {"--batch"}},
        // Beyond a double: huge is above the maximum, not "below the minimum" (from_chars leaves it 0).
        Case{"batch_beyond_a_double",
             run_with({"--batch", "1e400"}),
             2,
             {"--batch: '1e400': batch 1e400 is above the maximum 16777216 (2^24)"}},
        Case{"step_beyond_a_double",
             run_with({"--batch", "1:10:+1e400"}),
             2,
             {"--batch: '1:10:+1e400': step 1e400 is above the maximum 16777216"}},
        // A list of 4097 is quoted by its start, not in full, and told to shrink, not to take larger steps.
        Case{"batch_list_too_long",
             run_with({"--batch", kLongList}),
             2,
             {"--batch: '1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,\u2026 (19377 "
              "characters)' "
              "lists more than 4096 batches; give fewer, a range (1:4096:*2) or `auto`"}},
        Case{"batch_word", run_with({"--batch", "abc"}), 2, {"--batch", "abc"}},
        Case{"batch_empty", run_with({"--batch", ","}), 2, {"--batch"}},
        Case{"accumulation_zero",
             run_with({"--accumulation", "0"}),
             2,
             {"--accumulation: must be in 1..16777216 (2^24), got 0"}},
        Case{"accumulation_exponent_too_large",
             run_with({"--accumulation", "1e9"}),
             2,
             {"--accumulation: must be in 1..16777216 (2^24), got 1e9"}},
        Case{"accumulation_fraction",
             run_with({"--accumulation", "2.5"}),
             2,
             {"--accumulation: must be a whole number"}},
        // A step of 4e8 samples would run for hours and could not be interrupted between steps.
        Case{"accumulation_huge",
             run_with({"--accumulation", "100000000"}),
             2,
             {"--accumulation: must be in 1..16777216 (2^24), got 100000000"}},
        Case{"samples_per_step_huge",
             run_with({"--batch", "4", "--accumulation", "16777216"}),
             2,
             {"--accumulation: batch 4 x accumulation 16777216 is more than 16777216 (2^24) samples per "
              "step"}},
        Case{"plan_accumulation_exponent_fraction",
             {"plan", "--accumulation", "2.5e0"},
             2,
             {"--accumulation: must be a whole number, got 2.5e0"}},
        // Out of range first, in the number's own words.
        Case{"warmup_huge_exponent",
             run_with({"--warmup", "1e20"}),
             2,
             {"--warmup: must be in 0..2147483647, got 1e20"}},
        Case{"warmup_fraction",
             run_with({"--warmup", "1.5"}),
             2,
             {"--warmup: must be a whole number, got 1.5"}},
        Case{"negative_time", run_with({"--min-time=-1"}), 2, {"--min-time: must be 0 or more, got -1"}},
        Case{"negative_warmup_time",
             run_with({"--warmup-time=-0.5"}),
             2,
             {"--warmup-time: must be 0 or more, got -0.5"}},
        Case{"zero_samples",
             run_with({"--min-samples", "0"}),
             2,
             {"--min-samples: must be in 1..2147483647, got 0"}},
        Case{"zero_timeout", run_with({"--timeout=0"}), 2, {"--timeout: must be greater than 0, got 0"}},
        Case{"slo_word", run_with({"--latency-slo", "fast"}), 2, {"--latency-slo: 'fast' is not a number"}},
        Case{"slo_unit",
             run_with({"--latency-slo", "50ms"}),
             2,
             {"--latency-slo: '50ms' is not a number: write it without a unit, in milliseconds: 50 for "
              "50ms"}},
        Case{"analyze_quiet",
             {"analyze", "r.json", "-q"},
             2,
             {"analyze has no flag -q: only run prints progress"}},
        Case{"max_samples_zero", run_with({"--max-samples", "0"}), 2, {"--max-samples", "0"}},
        Case{"max_samples_huge", run_with({"--max-samples", "200000"}), 2, {"--max-samples", "200000"}},
        // Without a budget the default --min-samples (10) is what the cap is under.
        Case{"max_samples_under_default_min",
             run_with({"--max-samples", "5"}),
             2,
             {"--max-samples 5: below --min-samples, 10 by default"}},
        Case{"budget_samples_over_max",
             run_with({"--latency-slo", "50", "--latency-percentile", "99.9", "--max-samples", "500"}),
             2,
             {"--max-samples 500: a p99.9 budget times 1000 steps a point by default"}},
        Case{"min_samples_over_max",
             run_with({"--min-samples", "30", "--max-samples", "20"}),
             2,
             {"--min-samples: 30 is above the sample cap 20 (--max-samples)"}},
        // --timeout counts prepare and warm-up: asking for more time than it holds is said before anything
        // runs.
        Case{"min_time_past_timeout",
             {"run", "--backend", "cpu", "--quiet", "--min-time", "10"},
             2,
             {"--min-time: 10 s of timed steps cannot fit in the 5 s --timeout per point", "--timeout 21"}},
        Case{"warmup_time_past_timeout",
             {"run", "--backend", "cpu", "--quiet", "--warmup-time", "6", "--timeout", "6"},
             2,
             {"--warmup-time: 6 s of warm-up cannot fit in the 6 s --timeout"}},
        Case{
            "warmup_and_min_time_past_timeout",
            {"run", "--backend", "cpu", "--quiet", "--warmup-time", "2", "--min-time", "3", "--timeout", "4"},
            2,
            {"--warmup-time 2 s and --min-time 3 s add up to 5 s, which cannot fit in the 4 s --timeout"}},
        Case{"timeout_unit",
             run_with({"--timeout", "30s"}),
             2,
             {"--timeout: '30s' is not a number: write it without a unit, in seconds: 30 for 30s"}},
        Case{"saturation_unit",
             run_with({"--saturation", "90%"}),
             2,
             {"--saturation: '90%' is not a number: write it without a unit, in percent: 90 for 90%"}},
        Case{"effective_batch_and_batch",
             run_with({"--effective-batch", "64", "--batch", "8"}),
             2,
             {"--effective-batch N times its own splits of N (micro-batch x accumulation), so it takes no "
              "--batch: drop --batch, or sweep --batch B --accumulation A without --effective-batch"}},
        Case{"short_flag_equals",
             run_with({"-b=1,8"}),
             2,
             {"-b=1,8: a short flag takes its value after a space or joined to it (-b 1,8 or -b1,8); only a "
              "long flag takes '=' (--flag=value)"}},
        Case{"min_time_unit",
             run_with({"--min-time", "500ms"}),
             2,
             {"--min-time: '500ms' is not a number: write it without a unit, in seconds: 0.5 for 500ms"}},
        // The user's own value converted, not an example of another size (50ms is 0.05, not 0.5).
        Case{"min_time_unit_small",
             run_with({"--min-time", "50ms"}),
             2,
             {"--min-time: '50ms' is not a number: write it without a unit, in seconds: 0.05 for 50ms"}},
        Case{"latency_slo_seconds",
             run_with({"--latency-slo", "0.02s"}),
             2,
             {"--latency-slo: '0.02s' is not a number: write it without a unit, in milliseconds: 20 for "
              "0.02s"}},
        Case{"price_sign",
             run_with({"--price-per-hour", "$2"}),
             2,
             {"--price-per-hour: '$2' is not a number: write it without a unit, in US dollars an hour"}},
        // A count has no unit to name: the general words.
        Case{"rounds_unit",
             run_with({"--rounds", "3r"}),
             2,
             {"--rounds: '3r' is not a number: write it without a unit, in the one --help gives the flag"}},
        Case{"saturation_out_of_range",
             run_with({"--saturation", "0"}),
             2,
             {"--saturation: must be between 1 and 100, got 0"}},
        Case{"bad_size", run_with({"--memory-limit", "12XB"}), 2, {"--memory-limit", "12XB"}},
        // An unset shell variable is an error, not "no limit".
        Case{"empty_memory_limit",
             run_with({"--memory-limit", ""}),
             2,
             {"--memory-limit: invalid size '': empty"}},
        // A model without its flag: named, with the flag.
        Case{"plan_bare_model",
             {"plan", "mlp.json"},
             2,
             {"plan: not expected: mlp.json (a model is given with --model: batchsweep plan --model "
              "mlp.json)"}},
        Case{"run_bare_preset", {"run", "gpt2-small"}, 2, {"batchsweep run --model gpt2-small"}},
        Case{"plan_empty_memory", {"plan", "--memory", ""}, 2, {"--memory: invalid size '': empty"}},
        Case{"fraction_of_a_byte",
             {"plan", "--memory", "0.4B"},
             2,
             {"--memory", "a fraction takes a larger unit"}},
        Case{"yaml_model",
             run_with({"--model", "{dir}/m.yaml"}),
             2,
             {"{dir}/m.yaml: is not valid JSON (YAML is not read: write the model config in JSON)"},
             "m.yaml",
             "name: my-model\ninput:\n  type: vector\n"},
        Case{"card_name_for_memory",
             {"plan", "--memory", "h100"},
             2,
             {"--memory h100: names 3 cards of 2 memory sizes", "name one"}},
        Case{"word_for_memory",
             {"plan", "--memory", "plenty"},
             2,
             {"--memory plenty: neither a size (80GiB) nor a card of configs/gpus.json (H200 NVL, "}},
        // A card's model number is not swapped for a near one: the cards holding it are listed, or none.
        Case{"card_other_model_number",
             {"plan", "--memory", "A100 SXM"},
             2,
             {"--memory A100 SXM: neither a size (80GiB) nor a card of configs/gpus.json: the cards it could "
              "mean are A100 80GB PCIe, A100 80GB SXM, A100 40GB ("}},
        Case{"card_size_no_card_has", {"plan", "--memory", "H100 40GB"}, 2, {"configs/gpus.json (H200 NVL"}},
        // A card the sheet lacks: how to size it anyway (not said where a card was suggested).
        Case{"card_not_on_the_sheet",
             {"plan", "--memory", "Tesla T4"},
             2,
             {"--memory Tesla T4: neither a size (80GiB) nor a card of configs/gpus.json (H200 NVL, ",
              "V100 SXM2); for another card give its memory as CUDA reports it (`batchsweep devices` on that "
              "machine), as --memory <that>MiB"}},
        Case{"card_typo_in_words", {"plan", "--memory", "H100 SMX"}, 2, {"did you mean 'H100 SXM'?"}},
        // A model number is a whole word: H20 is no H200 (another card), V100S no V100 SXM2.
        Case{
            "card_number_not_a_word_of_one", {"plan", "--memory", "H20"}, 2, {"configs/gpus.json (H200 NVL"}},
        Case{"model_is_a_directory",
             {"plan", "--model", "{dir}"},
             2,
             {"--model ", ": is a directory, not a model config file"}},
        // A laptop part is told to give its memory, not led to its desktop namesake's.
        Case{
            "card_laptop",
            {"plan", "--memory", "NVIDIA GeForce RTX 4090 Laptop GPU"},
            2,
            {"a laptop GPU is no card of configs/gpus.json (its desktop namesake has other memory): give its "
             "memory as CUDA reports it (`batchsweep devices` on that machine), e.g. --memory 16GiB"}},
        Case{"card_number_v100s", {"plan", "--memory", "V100S"}, 2, {"configs/gpus.json (H200 NVL"}},
        // A variant the sheet lacks (the 16 GB V100): its card is named, and why it is not taken.
        Case{"card_other_size",
             {"run", "--memory-limit", "Tesla V100-SXM2-16GB"},
             2,
             {"--memory-limit Tesla V100-SXM2-16GB: names the V100 SXM2, which configs/gpus.json knows as 32 "
              "GB (32494 MiB as CUDA reports it), not this size: give the card's memory as CUDA reports it "
              "(`batchsweep devices` on that machine, or nvidia-smi's memory.total less the driver's "
              "reserve"}},
        // A bare number that is in a card's name: the size's error, then the card.
        Case{"card_number_for_memory",
             {"plan", "--memory", "4090"},
             2,
             {"--memory 4090: a number without a unit is bytes; for the GeForce RTX 4090, write --memory "
              "\"GeForce RTX 4090\""}},
        Case{
            "leading_zero_in_model",
            {"plan", "--model", "{dir}/m.json"},
            2,
            {"m.json: is not valid JSON: line 1, column ",
             "(JSON numbers take no leading zero: write 768, not 0768)"},
            "m.json",
            R"({"name": "m", "input": {"type": "vector", "features": 0768}, "layers": [{"type": "linear", "out_features": 2}]})"},
        Case{"precision_upper_case", {"plan", "--precision", "BF16"}, 2, {"'BF16': did you mean 'bf16'?"}},
        Case{"precision_other_name", {"plan", "--precision", "bfloat16"}, 2, {"did you mean 'bf16'?"}},
        // Lightning's names are said as what they differ in, not taken for the nearest precision.
        Case{"precision_lightning_mixed",
             {"plan", "--precision", "bf16-mixed"},
             2,
             {"--precision: 'bf16-mixed' is autocast over fp32 weights (Lightning's mixed precision); "
              "batchsweep's bf16 is the model in bf16 with fp32 master weights"}},
        Case{"precision_lightning_true",
             {"plan", "--precision", "16-true"},
             2,
             {"'16-true' is Lightning's model in 16 bits without fp32 master weights; batchsweep's fp16 "
              "keeps"}},
        Case{"backend_gpu", {"plan", "--backend", "gpu"}, 2, {"'gpu': did you mean 'cuda'?"}},
        Case{"mode_typo", {"plan", "--mode", "infernce"}, 2, {"'infernce': did you mean 'infer'?"}},
        Case{"attention_typo",
             {"plan", "--attention", "cudn"},
             2,
             {"--attention: unknown value 'cudn': did you mean 'cudnn'? (choose auto, cudnn, explicit)"}},
        Case{"accumulation_octal",
             run_with({"--accumulation", "010"}),
             2,
             {"--accumulation: '010' has a leading zero"}},
        Case{"device_hexadecimal", {"devices", "--calibrate", "--device", "0x1"}, 2, {"--device", "0x1"}},
        Case{"slo_leading_space",
             run_with({"--latency-slo", " 3"}),
             2,
             {"--latency-slo: ' 3' is not a number (it has a space around it)"}},
        Case{"slo_hexadecimal",
             run_with({"--latency-slo", "0x10"}),
             2,
             {"--latency-slo: '0x10' is not a number"}},
        Case{"plan_scripted_backend",
             {"plan", "--backend", "scripted"},
             2,
             {"--backend: plans are for cpu or cuda"}},
        Case{"plan_unknown_backend",
             {"plan", "--backend", "gpu"},
             2,
             {"--backend: unknown backend 'gpu': did you mean 'cuda'? (choose auto, cpu or cuda)"}},
        Case{"bad_precision", run_with({"--precision", "fp8"}), 2, {"--precision", "fp8"}},
        Case{"bad_backend", {"run", "--backend", "tpu"}, 2, {"--backend", "tpu"}},
        Case{"script_without_scripted_backend",
             {"run", "--backend", "cpu", "--script", "{dir}/s.json", "--batch", "8"},
             2,
             {"--script: a step-time script is read only by --backend scripted, and this run is --backend "
              "cpu"}},
        Case{"bad_mode", run_with({"--mode", "serve"}), 2, {"--mode", "serve"}},
        Case{"unknown_flag", {"run", "--batchsize", "8"}, 2, {"--batchsize"}},
        Case{"accumulation_and_effective",
             run_with({"--accumulation", "2", "--effective-batch", "64"}),
             2,
             {"--effective-batch"}},
        Case{"plan_auto", {"plan", "--batch", "auto"}, 2, {"--batch"}},
        Case{"attention_word", run_with({"--attention", "flash"}), 2, {"--attention", "flash"}},
        Case{"attention_cudnn_on_cpu", run_with({"--attention", "cudnn"}), 2, {"--attention cudnn", "cuda"}},
        Case{"conv_cudnn_on_cpu", run_with({"--conv", "cudnn"}), 2, {"--conv cudnn", "cuda"}},
        Case{"plan_attention_fp32",
             {"plan", "--backend", "cuda", "--model", "gpt2-small", "--attention", "cudnn"},
             2,
             {"--attention cudnn", "fp32"}},
        Case{"seed_negative",
             run_with({"--seed=-1"}),
             2,
             {"--seed: must be a whole number from 0 to 18446744073709551615, got -1"}},
        Case{"seed_too_large",
             run_with({"--seed", "18446744073709551616"}),
             2,
             {"--seed", "18446744073709551616"}},
        Case{"seed_word", run_with({"--seed", "0x10"}), 2, {"--seed", "0x10"}},
        Case{"empty_json_path", run_with({"--json", ""}), 2, {"--json: needs a file name"}},
        Case{"empty_svg_path", run_with({"--svg="}), 2, {"--svg"}},
        Case{"csv_to_stdout", run_with({"--csv", "-"}), 2, {"--csv -: only --json goes to stdout"}},
        // Empty: a file name is asked for, and stdout is not offered where the flag does not take it.
        Case{"csv_empty", run_with({"--csv", ""}), 2, {"--csv: needs a file name, got an empty one"}},
        // A value-taking flag given no value takes the next flag as its file name: refused, not written.
        Case{"json_swallows_a_flag",
             run_with({"--json", "--quiet"}),
             2,
             {"--json: needs a file name (or - for stdout), got '--quiet', a flag: was the name left out?"}},
        Case{"csv_swallows_a_short_flag",
             run_with({"--csv", "-b", "8"}),
             2,
             {"--csv: needs a file name, got '-b'"}},
        Case{"markdown_to_dev_stdout",
             run_with({"--markdown", "/dev/stdout"}),
             2,
             {"--markdown /dev/stdout: only --json goes to stdout"}},
        Case{"plan_empty_json_path", {"plan", "--json", ""}, 2, {"--json: needs a file name"}},
        Case{"no_subcommand", {}, 2, {"a subcommand is required: one of run, plan, analyze"}}),
    [](const auto& test_info) { return test_info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Files, BadInput,
    ::testing::Values(
        // /proc takes no new files, even from root (CI runs as root, which access() lets write anywhere).
        Case{"unwritable_file_system",
             run_with({"--batch", "1", "--json", "/proc/batchsweep-report.json"}),
             2,
             {"--json /proc/batchsweep-report.json", "cannot create a file in /proc"}},
        // A name past NAME_MAX: the temporary file is named to fit, so only the rename after the sweep
        // failed.
        Case{"output_name_too_long",
             run_with({"--batch", "1", "--json", "{dir}/" + std::string(251, 'b') + ".json"}),
             2,
             {"--json", "the file name is 256 bytes, over the ", " this file system takes"}},
        Case{"missing_output_dir",
             run_with({"--batch", "1", "--json", "{dir}/no/such/dir/r.json"}),
             2,
             {"--json", "does not exist"}},
        Case{"output_is_directory",
             run_with({"--batch", "1", "--csv", "{dir}"}),
             2,
             {"--csv", "is a directory"}},
        Case{"two_exports_one_file",
             run_with({"--batch", "1", "--json", "{dir}/r.json", "--csv", "{dir}/../{dir_name}/r.json"}),
             2,
             {"--json {dir}/r.json and --csv", "both name the same file"}},
        Case{"two_exports_on_stdout",
             run_with({"--batch", "1", "--json", "-", "--markdown", "-"}),
             2,
             {"--markdown -: only --json goes to stdout", "give --markdown a file"}},
        Case{"compare_two_exports_on_stdout",
             {"compare", "{dir}/r.json", "{dir}/r.json", "--json", "-", "--markdown", "-"},
             2,
             {"only one export may go to stdout"},
             "r.json",
             R"({"schema_version": 1, "points": []})"},
        Case{"compare_two_exports_one_file",
             {"compare", "{dir}/r.json", "{dir}/r.json", "--json", "{dir}/c", "--markdown", "{dir}/./c"},
             2,
             {"both name the same file"},
             "r.json",
             R"({"schema_version": 1, "points": []})"},
        // An export onto a file the command reads would destroy it: the model, a report being analysed or
        // compared (analyze's --json may write the report it holds back into it; see run_test.cpp).
        Case{"export_over_the_model",
             run_with({"--model", "{dir}/m.json", "--batch", "1", "--csv", "{dir}/m.json"}),
             2,
             {"--csv {dir}/m.json: that is the --model file ({dir}/m.json)", "give the export its own file"},
             "m.json",
             kTinyModel},
        Case{"plan_json_over_the_model",
             {"plan", "--model", "{dir}/m.json", "--json", "{dir}/./m.json"},
             2,
             {"--json {dir}/./m.json: that is the --model file"},
             "m.json",
             kTinyModel},
        Case{"analyze_svg_over_the_report",
             {"analyze", "{dir}/r.json", "--svg", "{dir}/r.json"},
             2,
             {"--svg {dir}/r.json: that is the report analyze reads"},
             "r.json",
             R"({"schema_version": 1, "points": []})"},
        Case{"compare_markdown_over_a_report",
             {"compare", "{dir}/r.json", "{dir}/r.json", "--markdown", "{dir}/r.json"},
             2,
             {"--markdown {dir}/r.json: that is a report compare reads"},
             "r.json",
             R"({"schema_version": 1, "points": []})"},
        Case{"latency_percentile_without_a_budget",
             run_with({"--batch", "1", "--latency-percentile", "95"}),
             2,
             {"--latency-percentile: it chooses what --latency-slo holds, or the request latency "
              "--request-rate answers at, and there is neither"}},
        Case{"latency_percentile_below_50",
             run_with({"--batch", "1", "--latency-slo", "5", "--latency-percentile", "40"}),
             2,
             {"--latency-percentile: must be a percentile from 50 to 99.99"}},
        Case{"triton_config_for_a_training_sweep",
             run_with({"--batch", "1", "--config-for", "triton"}),
             2,
             {"--config-for triton: Triton serves inference, and this sweep is of training (--mode infer"}},
        Case{"mistyped_flag",
             run_with({"--batches", "1,2"}),
             2,
             {"run has no flag --batches: did you mean --batch?"}},
        Case{"mistyped_flag_after_a_value_like_a_flag",
             run_with({"--json", "--out.json", "--bacth", "2"}),
             2,
             {"run has no flag --bacth: did you mean --batch?"}},
        Case{"unknown_flag_with_value",
             {"plan", "--frobnicate=3"},
             2,
             {"plan has no flag --frobnicate (see its --help)"}},
        // CLI11's list of every word it did not expect ("5 --latency-slo") gives way to the flag's name.
        Case{"flag_another_subcommand_has",
             {"plan", "--latency-slo", "5"},
             2,
             {"batchsweep: error: plan has no flag --latency-slo (see its --help)\n"}},
        Case{"short_flag_a_subcommand_lacks",
             {"analyze", "{dir}/r.json", "-q"},
             2,
             {"analyze has no flag -q"}},
        Case{"flag_twice",
             run_with({"--seed", "1", "--seed", "2"}),
             2,
             {"--seed: given 2 times; give it once"}},
        Case{"analyze_without_a_report",
             {"analyze"},
             2,
             {"analyze: which report? batchsweep analyze REPORT.json"}},
        Case{"compare_without_reports",
             {"compare"},
             2,
             {"compare: which reports? batchsweep compare A.json B.json"}},
        Case{"analyze_two_reports",
             {"analyze", "{dir}/r.json", "b.json", "c.json"},
             2,
             {"analyze reads one report; not expected: b.json c.json (to set runs side by side: batchsweep "
              "compare)"}},
        Case{"repeat_copy_that_fails",
             run_with({"--model", "{dir}/m.json", "--batch", "1"}),
             2,
             {"layers[0].kernel_size: kernel 3 is larger than the 1x1 input (in copy #2 of the 3 that "
              "layers[0]'s `repeat` makes, counting from #0)"},
             "m.json",
             R"({"name": "c", "input": {"type": "image", "channels": 1, "height": 5, "width": 5},
                 "layers": [{"type": "conv2d", "out_channels": 2, "kernel_size": 3, "repeat": 3},
                            {"type": "flatten"}, {"type": "linear", "out_features": 2}]})"},
        Case{"analyze_garbage", {"analyze", "{dir}/r.json"}, 2, {"{dir}/r.json"}, "r.json", "garbage{"},
        Case{"analyze_missing", {"analyze", "{dir}/none.json"}, 2, {"{dir}/none.json"}},
        Case{"analyze_empty_path", {"analyze", ""}, 2, {"a report path is empty", "unset shell variable"}},
        Case{"compare_empty_path",
             {"compare", "{dir}/r.json", ""},
             2,
             {"a report path is empty"},
             "r.json",
             R"({"schema_version": 1, "points": []})"},
        Case{"unknown_subcommand",
             {"analyse", "r.json"},
             2,
             {"unknown subcommand 'analyse': did you mean 'analyze'?"}},
        Case{"analyze_other_schema",
             {"analyze", "{dir}/r.json"},
             2,
             {"schema_version"},
             "r.json",
             R"({"schema_version": 2, "points": []})"},
        Case{"analyze_missing_fields",
             {"analyze", "{dir}/r.json"},
             2,
             {"points[0]"},
             "r.json",
             R"({"schema_version": 1, "points": [{"batch": 8}]})"},
        Case{"compare_garbage",
             {"compare", "{dir}/r.json", "{dir}/r.json"},
             2,
             {"{dir}/r.json"},
             "r.json",
             "[1,"},
        // batchsweep's own other outputs, handed to a reader of reports: say which export it is.
        Case{"analyze_a_markdown_export",
             {"analyze", "{dir}/r.md"},
             2,
             {"{dir}/r.md: is batchsweep's markdown export, not a report", "the file --json writes"},
             "r.md",
             "## batchsweep report\n\n**Model** mlp\n"},
        Case{"compare_a_csv_export",
             {"compare", "{dir}/r.csv", "{dir}/r.csv"},
             2,
             {"{dir}/r.csv: is batchsweep's CSV export, not a report"},
             "r.csv",
             "batch,accumulation,effective_batch,status\n1,1,1,ok\n"},
        Case{"resume_from_an_svg_export",
             run_with({"--batch", "1", "--resume", "{dir}/r.svg"}),
             2,
             {"{dir}/r.svg: is batchsweep's SVG export, not a report"},
             "r.svg",
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"880.0\">\n</svg>\n"},
        Case{"script_number_overflow",
             {"run", "--backend", "scripted", "--script", "{dir}/s.json", "--quiet"},
             2,
             {"{dir}/s.json",
              "not valid JSON: line 1, column 24: the number 1e400 is beyond a double's range"},
             "s.json",
             R"({"name": "x", "t0_ms": 1e400})"}),
    [](const auto& test_info) { return test_info.param.name; });

TEST(BadInput, CudaWithoutADeviceSaysSoPlainly) {
  const Result r = run({"run", "--backend", "cuda", "--quiet"});
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--backend cuda"), std::string::npos) << r.err;
}

// A model file in a directory the user may not enter is "cannot be opened: Permission denied", not "no such
// preset or file". Root enters every directory: run as nobody where setpriv can (as CI's root can).
TEST(BadInput, AModelFileBehindAClosedDirectoryIsAPermissionError) {
  if (geteuid() != 0 || !std::filesystem::exists("/usr/bin/setpriv"))
    GTEST_SKIP() << "needs root and setpriv to run the binary as another user";
  ScratchDir dir;  // mode 0700, root's: nobody cannot enter it
  const std::string model = (dir / "m.json").string();
  std::ofstream(model) << R"({"name": "m", "input": {"type": "vector", "features": 4},
    "layers": [{"type": "linear", "out_features": 2}]})";
  const std::string err = "/tmp/bsw-eacces-" + std::to_string(getpid());
  const std::string command = "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups '" +
                              std::string(BSW_BINARY) + "' plan --model '" + model +
                              "' --batch 1 > /dev/null 2> '" + err + "' < /dev/null";
  const int status = std::system(command.c_str());
  const std::string text = slurp(err);
  std::filesystem::remove(err);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << text;
  EXPECT_NE(text.find(model + ": cannot be opened: Permission denied"), std::string::npos) << text;
  EXPECT_EQ(text.find("no such preset"), std::string::npos) << text;
}

// A named pipe as --model or --script: read as a file once something writes to it (within 10 s), and an
// error naming it, not a process blocked forever, where nothing does.
TEST(BadInput, ANamedPipeNothingWritesToIsAnErrorNotAHang) {
  ScratchDir dir;
  const std::string fifo = (dir / "m.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const Result idle = run({"plan", "--model", fifo, "--batch", "1"});
  EXPECT_EQ(idle.exit_code, 2) << idle.err;
  EXPECT_NE(idle.err.find(fifo + ": is a named pipe (FIFO) that nothing wrote to in 10 s"), std::string::npos)
      << idle.err;
  // A writer a moment later: the script is read whole and the run goes on.
  const std::string command =
      "(sleep 1; cat '" + scripted("roofline.json") + "' > '" + fifo + "') & '" + std::string(BSW_BINARY) +
      "' run --backend scripted --script '" + fifo +
      "' --batch 8 --quiet --min-time 0.01 > /dev/null 2>&1 < /dev/null; echo $? > '" +
      (dir / "rc").string() + "'; wait";
  ASSERT_EQ(std::system(command.c_str()), 0);
  EXPECT_EQ(slurp(dir / "rc"), "0\n");
}

// One stream named by two inputs (`--model /dev/stdin --script /dev/stdin`): the model took all of it, and
// the script's keys were then reported as the model's ("unknown key 'curve' in a model config"). Refused up
// front, naming both flags; one regular file named twice is read twice, as before.
TEST(BadInput, OneStreamGivenAsTwoInputsIsRefusedNamingBoth) {
  ScratchDir dir;
  const std::string err = (dir / "err").string(), rc = (dir / "rc").string();
  const std::string command =
      "cat '" + scripted("roofline.json") + "' | '" + std::string(BSW_BINARY) +
      "' run --backend scripted --model /dev/stdin --script /dev/stdin > /dev/null 2> '" + err +
      "'; echo $? > '" + rc + "'";
  ASSERT_EQ(std::system(command.c_str()), 0);
  EXPECT_EQ(slurp(rc), "2\n") << slurp(err);
  EXPECT_NE(slurp(err).find("--model /dev/stdin and --script /dev/stdin: both read one stream (a pipe or "
                            "device), and it can be read only once; give one of them a file"),
            std::string::npos)
      << slurp(err);
}

// A file name holding a terminal escape (or a newline) is quoted with them shown, not acted on: the error
// must not color the rest of the terminal or split the log line.
TEST(BadInput, AnErrorShowsControlCharactersInAPathRatherThanSendingThem) {
  ScratchDir dir;
  const std::string model = (dir / "a\nb\x1b[31m.json").string();
  std::ofstream(model) << "{";
  const Result r = run({"plan", "--model", model});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("a\\x0Ab\\x1B[31m.json: is not valid JSON"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
}

TEST(BadInput, AFailedRunLeavesAnExistingReportUntouched) {
  ScratchDir dir;
  const auto path = dir / "keep.json";
  std::ofstream(path) << "{\"precious\": true}";
  const Result r = run(run_with({"--batch", "abc", "--json", path.string()}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(slurp(path), "{\"precious\": true}");
}

// A model whose plan passes 2^62 bytes at batch 1 (attention scores over 2^31 - 1 tokens) has no batch that
// plans: plan and run refuse it alike (exit 2), naming the model and the buffer, not --batch, and write
// nothing; with --checkpointing too (its note's probe plans the model). A batch past it in a model that plans
// at batch 1 is plan's --batch error.
TEST(BadInput, AModelWithNoBatchThatPlansIsRefusedByPlanAndRunAlike) {
  ScratchDir dir;
  const std::string model = (dir / "huge.json").string(), json = (dir / "r.json").string();
  std::ofstream(model) << R"({"name": "huge", "input": {"type": "tokens", "sequence_length": 2147483647,
    "vocab_size": 2}, "layers": [{"type": "embedding", "dim": 8}, {"type": "transformer_block", "heads": 1},
    {"type": "linear", "out_features": 2}]})";
  const std::string said =
      "model 'huge': no batch of it can be planned: the plan at batch 1 is larger than 2^62 bytes";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"plan", "--model", model, "--batch", "1"},
        {"plan", "--model", model, "--batch", "1", "--checkpointing"},
        run_with({"--model", model, "--batch", "1", "--json", json}),
        run_with({"--model", model, "--batch", "1", "--checkpointing", "--json", json})}) {
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(said), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(json));
  }
  const std::string wide = (dir / "wide.json").string();
  std::ofstream(wide) << R"({"name": "wide", "input": {"type": "image", "channels": 4096, "height": 4096,
    "width": 4096}, "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1}, {"type": "global_avgpool"},
    {"type": "linear", "out_features": 2}]})";
  const Result plan = run({"plan", "--model", wide, "--batch", "1,16777216"});
  EXPECT_EQ(plan.exit_code, 2) << plan.err;
  EXPECT_NE(
      plan.err.find("--batch: the plan at batch 16777216 is larger than 2^62 bytes (passed at data.input); "
                    "a smaller batch plans"),
      std::string::npos)
      << plan.err;
  // With memory of exabytes the plan's 2^62-byte limit, not the memory, stops the largest batch that fits:
  // said so (it read "fits in 16.0 EiB ... (plans may use 95% of it)" at a plan of a quarter of it).
  const Result vast = run({"plan", "--model", wide, "--batch", "1", "--memory", "18446744073709551615"});
  EXPECT_EQ(vast.exit_code, 0) << vast.err;
  EXPECT_NE(
      vast.out.find("largest batch that fits in 16.0 EiB on the CPU backend: 16711934, the largest batch "
                    "batchsweep can plan: at batch 16711935 the plan passes 2^62 bytes, the most it holds "
                    "(memory does not limit the batch there)"),
      std::string::npos)
      << vast.out;
  const Result vast_json =
      run({"plan", "--model", wide, "--batch", "1", "--memory", "18446744073709551615", "--json", "-"});
  ASSERT_EQ(vast_json.exit_code, 0) << vast_json.err;
  const nlohmann::json doc = nlohmann::json::parse(vast_json.out);
  EXPECT_EQ(doc["max_fit_batch"], 16711934);
  EXPECT_EQ(doc["memory_limits_batch"], false);
}

// Descriptions are wrapped to the terminal ($COLUMNS off one), each continuation under its column: a line of
// `run --help` ran to 371 characters, which a terminal wrapped back to column 0.
TEST(Help, DescriptionsWrapToTheTerminal) {
  for (const char* command : {"", "run", "plan", "analyze", "compare"}) {
    const Result r = *command ? run({command, "--help"}, {"COLUMNS=80"}) : run({"--help"}, {"COLUMNS=80"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string options = r.out.substr(0, r.out.find("Examples:"));
    std::istringstream lines(options);
    for (std::string line; std::getline(lines, line);) {
      if (line.find(' ', line.find_first_not_of(' ')) != std::string::npos) {  // one that could break
        EXPECT_LE(line.size(), 80u) << command << ": " << line;
      }
    }
  }
  // Off a terminal without $COLUMNS: 100.
  const Result plain = run({"run", "--help"}, {"COLUMNS="});
  std::istringstream lines(plain.out.substr(0, plain.out.find("Examples:")));
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
}

TEST(Help, ListsExamplesAndExitCodes) {
  const Result r = run({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Exit codes"), std::string::npos);
  for (const char* code : {"\n3 regression", "4 nothing to recommend", "130 interrupted", "129 ended"})
    EXPECT_NE(r.out.find(code), std::string::npos) << code;
  EXPECT_NE(r.out.find("Examples"), std::string::npos);
  const Result h = run({"-h"});
  EXPECT_EQ(h.exit_code, 0);
  // Every example at the top; a subcommand's help gives its own (a walk found `presets --help` listing
  // compare's), and every one the exit codes.
  for (const char* command : {"run", "plan", "analyze", "compare", "devices", "presets"}) {
    EXPECT_NE(r.out.find(std::string("  batchsweep ") + command), std::string::npos) << command;
    const Result sub = run({command, "--help"});
    EXPECT_EQ(sub.exit_code, 0) << command;
    EXPECT_NE(sub.out.find(std::string("Examples:\n  batchsweep ") + command), std::string::npos) << sub.out;
    EXPECT_NE(sub.out.find("Exit codes"), std::string::npos) << command;
    // Only the codes the subcommand can return: 3 is compare's gate, 4 run's and analyze's empty answer,
    // 129 a run's --json kept through SIGHUP.
    const std::string_view name = command;
    EXPECT_EQ(sub.out.find("\n3 regression") != std::string::npos, name == "compare") << command;
    EXPECT_EQ(sub.out.find("4 nothing to recommend") != std::string::npos, name == "run" || name == "analyze")
        << command;
    EXPECT_EQ(sub.out.find("129 ended by SIGHUP") != std::string::npos, name == "run") << command;
    for (const char* other : {"run", "plan", "analyze", "compare", "devices", "presets"})
      if (std::string_view(other) != command) {
        EXPECT_EQ(sub.out.find(std::string("  batchsweep ") + other + " "), std::string::npos)
            << command << other;
      }
  }
}

// --graphs off the cuda backend changes nothing, and says so (not an error: a job may pass it everywhere).
TEST(Run, GraphsOffTheCudaBackendChangesNothingAndSaysSo) {
  const Result graphs =
      run({"run", "--backend", "scripted", "--script",
           std::string(BSW_TEST_DATA) + "/data/scripted/roofline.json", "--batch", "64", "--graphs", "off"});
  EXPECT_EQ(graphs.exit_code, 0) << graphs.err;
  EXPECT_NE(graphs.err.find("note: --graphs: only the cuda backend captures CUDA graphs (this sweep runs on "
                            "scripted), so it changes nothing"),
            std::string::npos)
      << graphs.err;
}

// `batchsweep help [SUBCOMMAND]` and `batchsweep version`, as git and go take them; a flag before the
// subcommand is said to go after it, and an unknown flag without one is named.
TEST(Help, HelpAndVersionAsWordsAndFlagsInTheWrongPlace) {
  const Result help = run({"help"});
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_EQ(help.out, run({"--help"}).out);
  const Result plan_help = run({"help", "plan"});
  EXPECT_EQ(plan_help.exit_code, 0) << plan_help.err;
  EXPECT_EQ(plan_help.out, run({"plan", "--help"}).out);
  const Result version = run({"version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(version.out, run({"--version"}).out);
  const Result version_extra = run({"version", "extra"});
  EXPECT_EQ(version_extra.exit_code, 2);
  EXPECT_NE(version_extra.err.find("version takes no arguments, got 'extra'"), std::string::npos)
      << version_extra.err;
  const Result flag_extra = run({"--version", "extra"});
  EXPECT_EQ(flag_extra.exit_code, 2);
  EXPECT_NE(flag_extra.err.find("--version takes no arguments, got 'extra'"), std::string::npos)
      << flag_extra.err;
  EXPECT_EQ(flag_extra.out, "");
  // The two words' own help, and help's.
  for (const std::vector<std::string>& asks :
       {std::vector<std::string>{"version", "--help"}, {"version", "-h"}, {"help", "version"}}) {
    const Result about = run(asks);
    EXPECT_EQ(about.exit_code, 0) << about.err;
    EXPECT_NE(about.out.find("Usage: batchsweep version"), std::string::npos) << about.out;
  }
  for (const std::vector<std::string>& asks :
       {std::vector<std::string>{"help", "--help"}, {"help", "-h"}, {"help", "help"}}) {
    const Result about = run(asks);
    EXPECT_EQ(about.exit_code, 0) << about.err;
    EXPECT_EQ(about.out, help.out);
  }
  EXPECT_NE(help.out.find("Also: batchsweep help [SUBCOMMAND]"), std::string::npos) << help.out;
  const Result help_extra = run({"help", "plan", "run"});
  EXPECT_EQ(help_extra.exit_code, 2);
  EXPECT_NE(help_extra.err.find("help takes one subcommand, got 'run' after 'plan'"), std::string::npos)
      << help_extra.err;
  const Result before = run({"--precision", "bf16", "plan"});
  EXPECT_EQ(before.exit_code, 2);
  EXPECT_NE(before.err.find("--precision comes before the subcommand: a subcommand's flags go after it "
                            "(batchsweep plan --precision ...)"),
            std::string::npos)
      << before.err;
  // A one-letter flag gets no guess (-n is as near -h as any), and a message that already points to --help
  // is not followed by "Run with --help for usage." too.
  const Result letter = run({"run", "-n", "8"});
  EXPECT_EQ(letter.exit_code, 2);
  EXPECT_EQ(letter.err, "batchsweep: error: run has no flag -n (see its --help)\n");
  const Result other = run({"presets", "--json"});
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_EQ(other.err, "batchsweep: error: presets has no flag --json (see its --help)\n");
  const Result unknown = run({"-v"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("batchsweep has no flag -v (its own are --help and --version"),
            std::string::npos)
      << unknown.err;
  const Result typo = run({"help", "plna"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_NE(typo.err.find("help: unknown subcommand 'plna': did you mean 'plan'?"), std::string::npos)
      << typo.err;
  const Result word = run({"plan", "help"});
  EXPECT_EQ(word.exit_code, 2);
  EXPECT_NE(word.err.find("plan: not expected: help (for plan's flags: batchsweep plan --help)"),
            std::string::npos)
      << word.err;
}

}  // namespace
}  // namespace bsw::e2e
