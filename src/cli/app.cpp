// CLI11 definitions of every subcommand, in one place, validated into the Settings structs of settings.hpp.
// No logic beyond turning text into settings; the commands live in commands.cpp.
#include "cli/app.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "batchsweep/analysis.hpp"
#include "batchsweep/backends.hpp"
#include "batchsweep/errors.hpp"
#include "batchsweep/files.hpp"
#include "batchsweep/gpu_specs.hpp"
#include "batchsweep/json_depth.hpp"
#include "batchsweep/model.hpp"
#include "batchsweep/printers.hpp"
#include "cli/commands.hpp"
#include "git_commit.hpp"
#include "model/suggest.hpp"

namespace bsw::cli {
namespace {

// The exit codes a subcommand can return ("" for the top level: all of them), for its --help.
std::string exit_codes_for(std::string_view command) {
  const bool all = command.empty();
  std::string out = "Exit codes: 0 success; 1 runtime failure; 2 usage, config or input error";
  if (all || command == "compare") out += ";\n3 regression found by compare --fail-on-regression";
  if (all || command == "run" || command == "analyze")
    out +=
        ";\n"
        "4 nothing to recommend: no batch ran ok (all oom, over_limit or error), or none meets "
        "--latency-slo\n"
        "  (or, with --request-rate, every batch saturates) (the report is written)";
  if (all || command == "run")
    out +=
        ";\n"
        "130 interrupted by SIGINT (143 SIGTERM) - the report of finished points is still written;\n"
        "129 ended by SIGHUP (the terminal closed) - a --json file already holds every finished point";
  else if (command == "devices")
    out += ";\n130 --calibrate interrupted by SIGINT (143 SIGTERM)";
  return out + ".";
}

// CLI11 says "The following arguments were not expected: 1,2,4 --batches" for a mistyped flag: name the
// first flag the subcommand does not have, and the nearest one it does ("--batch").
std::string unknown_flag_hint(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return {};
  const CLI::App* sub = nullptr;
  for (const CLI::App* candidate : app.get_subcommands({}))
    if (candidate->get_name() == argv[1]) sub = candidate;
  if (!sub) return {};
  std::vector<std::string> flags;
  std::vector<bool> takes_value;
  for (const CLI::Option* opt : sub->get_options()) {
    for (const std::string& name : opt->get_lnames()) {
      flags.push_back("--" + name);
      takes_value.push_back(opt->get_items_expected_min() > 0);
    }
    for (const std::string& name : opt->get_snames()) {
      flags.push_back("-" + name);
      takes_value.push_back(opt->get_items_expected_min() > 0);
    }
  }
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    // A flag: "--name", or "-x" (not a negative number, not "-" for stdout).
    const bool is_flag =
        (arg.starts_with("--") && arg.size() > 2) ||
        (arg.size() == 2 && arg[0] == '-' && std::isalpha(static_cast<unsigned char>(arg[1])) != 0);
    if (!is_flag) continue;
    const size_t eq = arg.find('=');
    const std::string_view name = arg.substr(0, eq);
    const auto known = std::find(flags.begin(), flags.end(), name);
    if (known != flags.end()) {
      // `--json --out.json`: the word after a flag that takes a value is that value, whatever it looks like.
      if (eq == std::string_view::npos && takes_value[known - flags.begin()]) ++i;
      continue;
    }
    const std::vector<std::string_view> names(flags.begin(), flags.end());
    // Other tools' names for a flag this one has (Hugging Face's, Lightning's, DeepSpeed's), where this
    // subcommand has it.
    static constexpr std::pair<std::string_view, std::string_view> kOtherNames[] = {
        {"--gradient-checkpointing", "--checkpointing"},
        {"--activation-checkpointing", "--checkpointing"},
        {"--gradient-accumulation-steps", "--accumulation"},
        {"--accumulate-grad-batches", "--accumulation"},
        {"--grad-accum", "--accumulation"},
        {"--batch-size", "--batch"},
        {"--micro-batch-size", "--batch"},
        {"--per-device-train-batch-size", "--batch"},
        {"--fp16", "--precision fp16"},
        {"--bf16", "--precision bf16"},
        {"--tf32", "--precision tf32"},
        {"--gpu", "--memory NAME (a card of the sheet, \"H100 SXM\")"},
        {"--gpu", "--device N"},
    };
    for (const auto& [other, ours] : kOtherNames) {
      std::string folded(name);
      std::replace(folded.begin(), folded.end(), '_', '-');
      const std::string_view flag = ours.substr(0, ours.find(' '));
      if (folded == other && std::find(flags.begin(), flags.end(), flag) != flags.end())
        return fmt::format("{} has no flag {}: did you mean {}?", sub->get_name(), name, ours);
    }
    // run's --quiet, given to a command that prints no progress to quiet.
    if ((name == "-q" || name == "--quiet") && sub->get_name() != "run")
      return fmt::format("{} has no flag {}: only run prints progress (on stderr) to quiet", sub->get_name(),
                         name);
    // A one-letter flag is near every other one-letter flag (-n to -h): no guess there.
    const bool one_letter = name.size() == 2 && name[0] == '-' && name[1] != '-';
    const auto near = one_letter ? std::nullopt : model_detail::nearest_name(name, names);
    return fmt::format("{} has no flag {}{}", sub->get_name(), name,
                       near ? fmt::format(": did you mean {}?", *near) : std::string(" (see its --help)"));
  }
  return {};
}

// CLI11's own wording where a person reads it better otherwise: a flag given twice ("At Most 1 required but
// received 2"), a missing positional ("report is required"), an extra one ("The following argument was not
// expected: b.json"). `sub` is the subcommand parsed ("" if none).
std::string plain_parse_error(const std::string& what, const std::string& sub) {
  // Plain string matching, not <regex>: GCC 12's regex headers trip -Wmaybe-uninitialized under ASan at -O2.
  const std::string_view text(what);
  const auto is_word = [](std::string_view w, bool dashes) {
    if (w.empty()) return false;
    for (const char c : w)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (dashes && c == '-'))) return false;
    return true;
  };
  constexpr std::string_view kTwice = ": At Most 1 required but received ";
  if (const auto at = text.find(kTwice); at != std::string_view::npos) {
    const auto flag = text.substr(0, at);
    const auto count = text.substr(at + kTwice.size());
    if (flag.size() > 1 && flag[0] == '-' && is_word(flag.substr(1), true) && !count.empty() &&
        std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fmt::format("{}: given {} times; give it once", flag, count);
  }
  constexpr std::string_view kRequired = " is required";
  if (text.size() > kRequired.size() && text.ends_with(kRequired) &&
      is_word(text.substr(0, text.size() - kRequired.size()), false)) {
    if (sub == "analyze") return "analyze: which report? batchsweep analyze REPORT.json [flags]";
    if (sub == "compare")
      return "compare: which reports? batchsweep compare A.json B.json [...] (the baseline first)";
  }
  for (const std::string_view lead :
       {"The following argument was not expected: ", "The following arguments were not expected: "}) {
    if (sub != "analyze" || !text.starts_with(lead)) continue;
    // CLI11 lists the words last first: put them back in the order given.
    std::vector<std::string> words;
    std::istringstream in{std::string(text.substr(lead.size()))};
    for (std::string word; in >> word;) words.insert(words.begin(), word);
    return fmt::format(
        "analyze reads one report; not expected: {} (to set runs side by side: batchsweep compare)",
        fmt::join(words, " "));
  }
  // CLI11's "--batch excludes --effective-batch": which to drop, and why.
  constexpr std::string_view kExcludes = " excludes ";
  if (const auto at = text.find(kExcludes); at != std::string_view::npos) {
    const std::string_view a = text.substr(0, at), b = text.substr(at + kExcludes.size());
    if (a.starts_with("--") && b.starts_with("--") && is_word(a.substr(2), true) &&
        is_word(b.substr(2), true)) {
      const std::string_view other = a == "--effective-batch" ? b : b == "--effective-batch" ? a : "";
      if (!other.empty())
        return fmt::format(
            "--effective-batch N times its own splits of N (micro-batch x accumulation), so it takes no {}: "
            "drop {}, or sweep --batch B --accumulation A without --effective-batch",
            other, other);
      return fmt::format("{} and {} do not go together: give one", a, b);
    }
  }
  // `batchsweep plan help`: the subcommand's help is its --help.
  constexpr std::string_view kOne = "The following argument was not expected: ";
  if (!sub.empty() && text == std::string(kOne) + "help")
    return fmt::format("{}: not expected: help (for {}'s flags: batchsweep {} --help)", sub, sub, sub);
  // `batchsweep plan mlp.json`, `batchsweep run gpt2-small`: a model given without its flag.
  if ((sub == "run" || sub == "plan") && text.starts_with(kOne)) {
    const std::string word(text.substr(kOne.size()));
    const std::vector<std::string> presets = preset_names();
    const bool preset = std::find(presets.begin(), presets.end(), word) != presets.end();
    if (preset || word.ends_with(".json"))
      return fmt::format("{}: not expected: {} (a model is given with --model: batchsweep {} --model {})",
                         sub, word, sub, word);
  }
  return what;
}

constexpr const char* kExamples = R"(Examples:
  batchsweep run                                    # default sweep: preset mlp, best backend, auto batches
  batchsweep run --model gpt2-small --precision bf16 --batch 1:64:*2 --json gpt2.json
  batchsweep run --model my-model.json --mode infer --latency-slo 50 --json sweep.json --svg sweep.svg
  batchsweep run --model bert-base --effective-batch 256 --precision bf16
  batchsweep run --model gpt2-small --set input.sequence_length=512 --precision bf16  # the preset at 512 tokens
  batchsweep plan --model gpt2-small --precision bf16 --memory "H100 SXM"  # a card by name plans for CUDA
  batchsweep plan --model gpt2-small --precision bf16 --backend cuda --memory 80GiB
  batchsweep plan --model gpt2-small --precision bf16 --memory all
  batchsweep analyze sweep.json --latency-slo 20 --saturation 90
  batchsweep compare h100.json h200.json                   # two cards side by side
  batchsweep compare base.json new.json --fail-on-regression 5 --json gate.json
  batchsweep presets
  batchsweep presets gpt2-small                     # its config: the fields --set changes
  batchsweep devices --calibrate)";

// A subcommand's --help: its own examples (all of them for the top level), then the exit codes.
std::string footer_for(std::string_view command) {
  std::istringstream lines(kExamples);
  std::string out, line;
  const std::string prefix = fmt::format("  batchsweep {}", command);
  while (std::getline(lines, line))
    if (command.empty() || line == "Examples:" || line == prefix || line.starts_with(prefix + " "))
      out += line + "\n";
  // The two words that are no subcommand of CLI11's, said where the subcommands are listed.
  if (command.empty())
    out += "\nAlso: batchsweep help [SUBCOMMAND] (this help, or a subcommand's), batchsweep version\n";
  return out + "\n" + exit_codes_for(command);
}

constexpr const char* kVersionHelp =
    "Usage: batchsweep version\nPrints batchsweep's version and git commit, as batchsweep --version does.\n";

// For a value a flag does not take: ": did you mean 'bf16'?" where it is one of `choices` in other case or
// with a '-' or '_' (BF16, bf-16), another name for one (`aliases`: bfloat16, gpu), or one typed a letter
// off; else empty.
std::string did_you_mean(std::string_view text, const std::vector<std::string_view>& choices,
                         std::initializer_list<std::pair<std::string_view, std::string_view>> aliases = {}) {
  std::string folded;
  for (const char c : text)
    if (c != '-' && c != '_' && c != ' ')
      folded += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const std::string_view choice : choices)
    if (folded == choice) return fmt::format(": did you mean '{}'?", choice);
  for (const auto& [alias, choice] : aliases)
    if (folded == alias) return fmt::format(": did you mean '{}'?", choice);
  if (const auto near = model_detail::nearest_name(folded, choices))
    return fmt::format(": did you mean '{}'?", *near);
  return {};
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "tf32") return Precision::tf32;
  if (text == "fp16") return Precision::fp16;
  if (text == "bf16") return Precision::bf16;
  // Lightning's names (bf16-mixed, 16-mixed, bf16-true, 32-true): each is said as the nearest batchsweep
  // precision and how it differs, not taken silently for one.
  std::string lower = text;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  std::replace(lower.begin(), lower.end(), '_', '-');
  const bool mixed = lower == "bf16-mixed" || lower == "16-mixed" || lower == "fp16-mixed" ||
                     lower == "mixed" || lower == "amp" || lower == "autocast";
  if (mixed) {
    const std::string_view near = lower.starts_with("bf16") ? "bf16" : "fp16";
    throw UsageError(fmt::format(
        "--precision: '{}' is autocast over fp32 weights (Lightning's mixed precision); batchsweep's {} is "
        "the "
        "model in {} with fp32 master weights (DeepSpeed's and Megatron's), whose peak is smaller than "
        "autocast's: give --precision {}, and take its largest batch as an upper bound for an autocast job "
        "(the PyTorch peer, bench/peers/torch_sweep.py, measures autocast)",
        text, near, near, near));
  }
  if (lower == "bf16-true" || lower == "16-true" || lower == "fp16-true")
    throw UsageError(fmt::format(
        "--precision: '{}' is Lightning's model in 16 bits without fp32 master weights; batchsweep's {} "
        "keeps "
        "fp32 master weights and gradients beside the 16-bit model (more memory): give --precision {}",
        text, lower.starts_with("bf16") ? "bf16" : "fp16", lower.starts_with("bf16") ? "bf16" : "fp16"));
  if (lower == "32-true" || lower == "32" || lower == "fp32-true")
    throw UsageError(
        fmt::format("--precision: '{}' is Lightning's fp32: give --precision fp32 (or tf32 for "
                    "TF32 tensor-core matmuls)",
                    text));
  throw UsageError(fmt::format("--precision: unknown precision '{}'{} (choose fp32, tf32, fp16 or bf16)",
                               text,
                               did_you_mean(text, {"fp32", "tf32", "fp16", "bf16"},
                                            {{"bfloat16", "bf16"},
                                             {"float16", "fp16"},
                                             {"half", "fp16"},
                                             {"float32", "fp32"},
                                             {"float", "fp32"},
                                             {"single", "fp32"},
                                             {"tensorfloat32", "tf32"}})));
}

Mode parse_mode(const std::string& text) {
  if (text == "train" || text == "training") return Mode::train;
  if (text == "infer" || text == "inference") return Mode::infer;
  throw UsageError(fmt::format("--mode: unknown mode '{}'{} (choose train or infer)", text,
                               did_you_mean(text, {"train", "infer"},
                                            {{"training", "train"},
                                             {"inference", "infer"},
                                             {"eval", "infer"},
                                             {"predict", "infer"},
                                             {"serve", "infer"}})));
}

// `plan` plans for the backends that have memory: it takes no scripted backend.
void check_backend_name(const std::string& name, bool for_plan = false) {
  if (name != "auto" && name != "cpu" && name != "cuda" && (for_plan || name != "scripted"))
    throw UsageError(fmt::format(
        "--backend: unknown backend '{}'{} (choose {})", name,
        for_plan
            ? did_you_mean(name, {"auto", "cpu", "cuda"}, {{"gpu", "cuda"}, {"nvidia", "cuda"}})
            : did_you_mean(name, {"auto", "cpu", "cuda", "scripted"}, {{"gpu", "cuda"}, {"nvidia", "cuda"}}),
        for_plan ? "auto, cpu or cuda" : "auto, cpu, cuda or scripted"));
}

// Number checks whose messages read as the rule ("must be > 0, got 0"); CLI11's own print the bounds as
// floats, DBL_MAX in full for an open end. CLI11 puts the option's name in front.
// Parses a whole, finite number into v; otherwise says what is wrong with the text.
std::string parse_number(const std::string& text, double& v, std::string_view unit = {}) {
  try {
    // std::stod skips leading spaces (' 3' read, '3 ' did not): neither is read.
    if (!text.empty() && (std::isspace(static_cast<unsigned char>(text.front())) != 0 ||
                          std::isspace(static_cast<unsigned char>(text.back())) != 0))
      return fmt::format("'{}' is not a number (it has a space around it)", text);
    // Decimal only: std::stod also reads hexadecimal ("0x10" would be 16).
    if (text.find_first_of("xXpP") != std::string::npos) return fmt::format("'{}' is not a number", text);
    // CLI11 reads a whole number with a leading zero as octal ("010" would be 8).
    const size_t digits = text.find_first_not_of("+-");
    if (digits != std::string::npos && digits + 1 < text.size() && text[digits] == '0' &&
        std::isdigit(static_cast<unsigned char>(text[digits + 1])) != 0)
      return fmt::format("'{}' has a leading zero (write it without)", text);
    // "$2.50": a price written with its currency sign.
    if (!unit.empty() && text.size() > 1 && text.front() == '$')
      return fmt::format("'{}' is not a number: write it without a unit, in {}", text, unit);
    size_t used = 0;
    v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return {};
    // "50ms", "0.05s", "90%": a number and a unit, where the flag takes the number in its own unit.
    // ("1e" is a broken exponent, not a unit.)
    if (used > 0 && used < text.size() && std::isfinite(v) && text[used] != 'e' && text[used] != 'E' &&
        std::isalpha(static_cast<unsigned char>(text[used])) + (text[used] == '%') != 0) {
      if (unit.empty())
        return fmt::format("'{}' is not a number: write it without a unit, in the one --help gives the flag",
                           text);
      // A time in another unit, for a flag in seconds or milliseconds: the user's own value converted
      // ("50ms" for --min-time is 0.05), not an example of another size.
      const std::string_view theirs = std::string_view(text).substr(used);
      const std::pair<std::string_view, double> times[] = {{"us", 1e-6}, {"ms", 1e-3}, {"s", 1},
                                                           {"sec", 1},   {"min", 60},  {"h", 3600}};
      const double flag_unit = unit.starts_with("seconds")        ? 1.0
                               : unit.starts_with("milliseconds") ? 1e-3
                                                                  : 0.0;
      if (theirs == "%" && unit.starts_with("percent"))
        return fmt::format("'{}' is not a number: write it without a unit, in percent: {:g} for {}", text, v,
                           text);
      for (const auto& [name, factor] : times)
        if (flag_unit > 0 && theirs == name)
          return fmt::format("'{}' is not a number: write it without a unit, in {}s: {:g} for {}", text,
                             flag_unit == 1.0 ? "second" : "millisecond", v * factor / flag_unit, text);
      return fmt::format("'{}' is not a number: write it without a unit, in {}", text, unit);
    }
  } catch (const std::out_of_range&) {
    return fmt::format("{} is out of range", text);
  } catch (const std::invalid_argument&) {
  }
  return fmt::format("'{}' is not a number", text);
}

// A validator that parses the number, then applies `rule` (an empty string when the value is allowed).
constexpr const char* kCheckpointingHelp =
    "Training with activation checkpointing: keep each transformer_block's or residual's output only and "
    "recompute its activations in backward (torch.utils.checkpoint per block; Hugging Face's "
    "gradient_checkpointing)";
constexpr const char* kSetHelp =
    "Set a field of the model config before it is read, e.g. input.sequence_length=1024, "
    "'layers[1].repeat=24' "
    "or optimizer.learning_rate=1e-3 (a path as errors name it; the value is JSON, or a bare word as a "
    "string); repeatable";
constexpr const char* kCheckpointingInferError =
    "--checkpointing: activation checkpointing recomputes what backward reads, and --mode infer has no "
    "backward";
constexpr const char* kCheckpointBlocksHelp =
    "Checkpoint only the first N blocks, in forward order (--checkpointing for those; the others keep every "
    "activation): "
    "less recomputation where checkpointing all of them is more than the batch needs to fit";
constexpr const char* kBothCheckpointingFlags =
    "--checkpointing and --checkpoint-blocks: give one (--checkpointing checkpoints every block, "
    "--checkpoint-blocks N the first N)";
constexpr const char* kRequestRateTrainingError =
    "--request-rate: serving is of inference steps; a training sweep (--mode train, the default) serves no "
    "requests: add --mode infer";
// The largest --checkpoint-blocks: a model has at most this many layers after repeats.
constexpr int64_t kMaxLayers = 10'000;
std::string checkpointing_infer_error(bool blocks_given) {
  std::string text = kCheckpointingInferError;
  if (blocks_given) text.replace(0, std::string_view("--checkpointing").size(), "--checkpoint-blocks");
  return text;
}

// The description stays out of --help ("--accumulation INT:INT in [1 - 16777216]" pushed the text off its
// column): the flag's own text says the range, and the error says it when broken.
template <class Rule>
CLI::Validator number_check(std::string /*description*/, Rule rule, std::string unit = {}) {
  return {[rule, unit](std::string& text) -> std::string {
            double v = 0;
            if (std::string why = parse_number(text, v, unit); !why.empty()) return why;
            return rule(v, text);
          },
          std::string()};
}

// `unit`: the flag's unit, named where a number is written with one ("50ms" for a flag in milliseconds).
CLI::Validator positive(std::string unit = {}) {
  return number_check(
      "POSITIVE",
      [](double v, const std::string& text) {
        return v > 0 ? std::string() : fmt::format("must be greater than 0, got {}", text);
      },
      std::move(unit));
}

// --request-rate: requests/s > 0, or max (the most within --latency-slo), read as infinity
// (kRequestRateMax); a literal inf is refused as any other word is.
CLI::Validator request_rate_check() {
  return {[positive_rate = positive("requests per second: 500 for 500 requests/s")](std::string& text) {
            if (text == "max") {
              text = "inf";
              return std::string();
            }
            std::string why = positive_rate(text);
            return why.empty() ? why : why + " (or max: the most within --latency-slo)";
          },
          std::string()};
}

CLI::Validator non_negative(std::string unit = {}) {
  return number_check(
      "NONNEGATIVE",
      [](double v, const std::string& text) {
        return v >= 0 ? std::string() : fmt::format("must be 0 or more, got {}", text);
      },
      std::move(unit));
}

// A count in lo..hi. CLI11 cannot fill an integer from "1e3" ("Could not convert"): a whole number written so
// (as --batch takes it, README) is rewritten in digits first, so give it with ->transform, not ->check.
CLI::Validator whole(int64_t lo, int64_t hi, std::string_view hi_note = {}) {
  return number_check(fmt::format("INT in [{} - {}]", lo, hi),
                      [lo, hi, hi_note](double v, std::string& text) {
                        if (v != std::floor(v)) return fmt::format("must be a whole number, got {}", text);
                        if (v < static_cast<double>(lo) || v > static_cast<double>(hi))
                          return fmt::format("must be in {}..{}{}, got {}", lo, hi, hi_note, text);
                        if (text.find_first_of(".eE") != std::string::npos) text = fmt::format("{:.0f}", v);
                        return std::string();
                      });
}

CLI::Validator between(double lo, double hi, std::string unit = {}) {
  return number_check(
      fmt::format("FLOAT in [{} - {}]", lo, hi),
      [lo, hi](double v, const std::string& text) {
        return v >= lo && v <= hi ? std::string()
                                  : fmt::format("must be between {} and {}, got {}", lo, hi, text);
      },
      std::move(unit));
}

// An output path: an empty one (`--json ''`, an unset shell variable) would write nothing, silently.
// `to_stdout`: the flag also takes - (only the JSON exports do).
// A name that starts with - (other than - itself) is the next flag, taken as this one's value because this
// one was given none (`--json --quiet` wrote a file named --quiet, and the run was not quiet); ./-name writes
// a file so named.
CLI::Validator file_path(bool to_stdout = false) {
  return {[to_stdout](std::string& text) -> std::string {
            if (text.empty())
              return fmt::format("needs a file name{}, got an empty one",
                                 to_stdout ? " (or - for stdout)" : "");
            if (text.size() > 1 && text.front() == '-')
              return fmt::format(
                  "needs a file name{}, got '{}', a flag: was the name left out? (a file whose name starts "
                  "with - is ./{})",
                  to_stdout ? " (or - for stdout)" : "", text, text);
            return std::string();
          },
          ""};
}

// A whole number from 0 to 2^64-1, written in decimal: CLI11 would take "-1" as 2^64-1.
CLI::Validator unsigned_64() {
  return {[](std::string& text) -> std::string {
            const bool digits = !text.empty() && text.size() <= 20 &&
                                text.find_first_not_of("0123456789") == std::string::npos;
            if (digits && (text.size() < 20 || text <= "18446744073709551615")) return std::string();
            return fmt::format("must be a whole number from 0 to 18446744073709551615, got {}", text);
          },
          "UINT64"};
}

// One of `choices` (CLI11's IsMember says "cudn not in {auto,cudnn,explicit}"): says the value, the nearest
// choice and every one, as --precision does. `choices` outlive the validator (string literals).
CLI::Validator one_of(std::initializer_list<std::string_view> choices) {
  std::vector<std::string_view> list(choices);
  std::string shown = "{";
  for (const std::string_view c : list) shown += (shown.size() > 1 ? "," : "") + std::string(c);
  shown += "}";
  return {[list](std::string& text) -> std::string {
            if (std::find(list.begin(), list.end(), text) != list.end()) return {};
            return fmt::format("unknown value '{}'{} (choose {})", text, did_you_mean(text, list),
                               fmt::join(list, ", "));
          },
          shown};
}

void add_exports(CLI::App* cmd, ExportSettings& e) {
  cmd->add_option("--json", e.json_path, "Write the JSON report (schema v1) to FILE, or - for stdout")
      ->type_name("FILE|-")
      ->check(file_path(true));
  cmd->add_option("--csv", e.csv_path, "Write one CSV row per point to FILE")
      ->type_name("FILE")
      ->check(file_path());
  cmd->add_option("--markdown", e.markdown_path, "Write a markdown report to FILE")
      ->type_name("FILE")
      ->check(file_path());
  cmd->add_option(
         "--svg", e.svg_path,
         "Write an SVG plot (throughput, step latency at the budget's percentile or p99, memory) to FILE")
      ->type_name("FILE")
      ->check(file_path());
  CLI::Option* config =
      cmd->add_option("--config-for", e.config_for,
                      "Print the recommended batch as lines for deepspeed | lightning | accelerate | "
                      "transformers | triton (inference), after the table")
          ->type_name("FRAMEWORK")
          ->check(one_of({"deepspeed", "lightning", "accelerate", "transformers", "triton"}));
  cmd->add_option(
         "--world-size", e.world_size,
         "With --config-for: GPUs that each run the micro-batch (DeepSpeed's train_batch_size "
         "counts them); run --effective-batch E then times one GPU's share, E / N; analyze takes the run's "
         "unless given")
      ->type_name("N")
      ->transform(whole(1, kMaxWorldSize))
      ->needs(config);
}

// `of_report`: for analyze, where a flag not given keeps the report's value (the defaults apply only where
// the report has none), so --help must not show the defaults as what an absent flag means.
void add_analysis(CLI::App* cmd, AnalysisFlags& a, bool of_report = false) {
  cmd->add_option(
         "--latency-slo", a.latency_slo_ms,
         of_report ? "Step latency budget in ms (at --latency-percentile): report the best batch within "
                     "it (default: the run's budget, if it had one)"
                   : "Step latency budget in ms (at --latency-percentile): report the best batch within it")
      ->type_name("MS")
      ->check(positive("milliseconds: 50 for 50 ms"));
  CLI::Option* percentile =
      cmd->add_option("--latency-percentile", a.latency_percentile,
                      of_report
                          ? "The step-time percentile --latency-slo holds (and --request-rate answers at): "
                            "50 to 99.99, e.g. 95, 99, 99.9 (default: the run's, else 99)"
                          : "The step-time percentile --latency-slo holds (and --request-rate answers at): "
                            "50 to 99.99, e.g. 95, 99, 99.9 (p95 works too; needs --latency-slo or "
                            "--request-rate)")
          ->type_name("P")
          // "p95" as the answers write it is 95, and "95%" too.
          ->transform([](const std::string& v) {
            std::string out = v;
            if (out.size() > 1 && (out.front() == 'p' || out.front() == 'P')) out.erase(0, 1);
            if (out.size() > 1 && out.back() == '%') out.pop_back();
            return out;
          })
          ->check(number_check("[50 - 99.99]", [](double v, const std::string& text) {
            return is_latency_percentile(v)
                       ? std::string()
                       : fmt::format("must be {} (p95 works too), got {}", kLatencyPercentileRule, text);
          }));
  CLI::Option* saturation =
      cmd->add_option("--saturation", a.saturation_pct,
                      of_report
                          ? "Saturation: smallest batch reaching PCT% (1 to 100) of the best "
                            "throughput (default: the run's value, else 95)"
                          : "Saturation: smallest batch reaching PCT% (1 to 100) of the best throughput")
          ->type_name("PCT")
          ->check(between(1.0, 100.0, "percent: 95 for 95%"));
  CLI::Option* sensitivity =
      cmd->add_option(
             "--knee-sensitivity", a.knee_sensitivity,
             of_report ? "Knee detection's sensitivity (Kneedle's S, > 0): higher needs a sharper bend, so "
                         "the knee comes later or not at all (default: the run's value, else 1)"
                       : "Knee detection's sensitivity (Kneedle's S, > 0): higher needs a sharper bend, so "
                         "the knee comes later or not at all")
          ->type_name("S")
          ->check(positive("a plain number, Kneedle's S: 2 for S = 2"));
  if (!of_report) {
    saturation->capture_default_str();
    sensitivity->capture_default_str();
    percentile->capture_default_str();
  }
  cmd->add_option(
         "--price-per-hour", a.price_per_hour,
         of_report ? "Device price in USD per hour, up to 1e9: cost per million samples (default: the run's "
                     "price, if it had one)"
                   : "Device price in USD per hour, up to 1e9: cost per million samples")
      ->type_name("USD")
      ->check(positive("US dollars an hour: 2.5 for $2.50 an hour"));
  CLI::Option* rate =
      cmd->add_option(
             "--request-rate", a.request_rate,
             std::string("Inference: requests (a sample each) per second arriving at random at a dynamic "
                         "batcher; reports each batch as its max batch, the requests' latency "
                         "(queueing included, simulated from the measured steps) and recommends the "
                         "max batch with the lowest; --latency-slo then holds the request's latency; max: "
                         "the most requests/s "
                         "within --latency-slo, and its max batch") +
                 (of_report ? " (default: the run's rate, if it had one)" : ""))
          ->type_name("PER_S|max")
          ->transform(request_rate_check());
  cmd->add_option("--max-queue-delay", a.max_queue_delay_ms,
                  std::string("With --request-rate: how long the batcher holds a request to fill a batch, in "
                              "ms (Triton's max_queue_delay; TorchServe's max_batch_delay)") +
                      (of_report ? " (default: the run's, else 0)" : " [default: 0]"))
      ->type_name("MS")
      ->check(non_negative("milliseconds: 2 for 2 ms"));
  if (!of_report) cmd->get_option("--max-queue-delay")->needs(rate);
}

// --attention auto|cudnn|explicit and --conv auto|cudnn|im2col (CLI11 has checked the words).
PathChoice parse_paths(const std::string& attention, const std::string& conv) {
  PathChoice c;
  if (attention != "auto")
    c.attention = attention == "cudnn" ? AttentionPath::cudnn_sdpa : AttentionPath::explicit_softmax;
  if (conv != "auto") c.conv = conv == "cudnn" ? ConvPath::cudnn : ConvPath::im2col_gemm;
  return c;
}

void add_path_options(CLI::App* cmd, std::string& attention, std::string& conv) {
  cmd->add_option("--attention", attention,
                  "cuda: auto (cuDNN SDPA in fp16/bf16 where cuDNN takes the shape) | cudnn | explicit")
      ->check(one_of({"auto", "cudnn", "explicit"}))
      ->capture_default_str();
  cmd->add_option("--conv", conv, "cuda: auto (cuDNN where it takes the shape) | cudnn | im2col")
      ->check(one_of({"auto", "cudnn", "im2col"}))
      ->capture_default_str();
}

// The columns help is wrapped to: the terminal's on a terminal, else $COLUMNS, else 100; at least 60.
size_t help_width() {
  winsize size{};
  if (::isatty(STDOUT_FILENO) != 0 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0)
    return std::max<size_t>(60, size.ws_col);
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n < 10000)
      return std::max<size_t>(60, static_cast<size_t>(n));
  }
  return 100;
}

// CLI11's help with the exclusions left out of the option column, where "Excludes: --effective-batch" ran
// into the name and pushed the description under it (the descriptions say what does not go together).
class HelpFormatter : public CLI::Formatter {
 public:
  // Descriptions wrapped to the terminal (CLI11 prints each on one line, up to 400 characters, which a
  // terminal wraps back to column 0); CLI11 indents each continuation line under the description column.
  std::string make_option_desc(const CLI::Option* opt) const override {
    return wrapped(opt->get_description(), description_room());
  }
  // The same for the top level's list of subcommands.
  std::string make_subcommand(const CLI::App* sub) const override {
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_display_name(true),
                             wrapped(sub->get_description(), description_room()), get_column_width());
    return out.str();
  }
  // The subcommand's own description, at the top, to the whole width.
  std::string make_description(const CLI::App* app) const override {
    std::string text = CLI::Formatter::make_description(app);
    const bool newline = !text.empty() && text.back() == '\n';
    return wrapped(text, help_width()) + (newline ? "\n" : "");
  }

 private:
  // The width of the description column.
  [[nodiscard]] size_t description_room() const {
    const size_t width = help_width();
    return std::max<size_t>(30, width > get_column_width() + 1 ? width - get_column_width() - 1 : 0);
  }
  // `text`'s words in lines of at most `room` characters (a longer word alone on its line).
  static std::string wrapped(const std::string& text, size_t room) {
    std::string out, line;
    std::istringstream words(text);
    for (std::string word; words >> word;) {
      if (!line.empty() && line.size() + 1 + word.size() > room) {
        out += line + "\n";
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
    }
    return out + line;
  }

 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    std::string out;
    if (opt->get_type_size() == 0) return out;
    if (!opt->get_type_name().empty()) out += " " + get_label(opt->get_type_name());
    if (!opt->get_default_str().empty()) out += "=" + opt->get_default_str();
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
    if (opt->get_required()) out += " " + get_label("REQUIRED");
    return out;
  }
};

struct Raw {
  std::string attention = "auto", conv = "auto";
  std::string precision = "fp32", mode = "train", batch = "auto", memory_limit, memory, graphs = "on";
  std::optional<int64_t> effective_batch;
  double memory_warn_pct = 90.0;
};

// --memory and --memory-limit: a size (80GiB), or a card of configs/gpus.json by name ("H100 SXM",
// "rtx4090"), which is the total CUDA reports for it (`run` sizes a device by that). A name several cards
// begin with is taken where they share that memory (H200: NVL and SXM), else refused with each card's.
struct MemoryArg {
  uint64_t bytes = 0;
  std::string card;  // the card(s) named; empty for a size
};

MemoryArg parse_memory(const std::string& text, std::string_view flag) {
  const std::vector<GpuCard> cards = gpus_named(text);
  if (!cards.empty()) {
    const bool one_memory = std::all_of(cards.begin(), cards.end(),
                                        [&](const GpuCard& c) { return c.bytes == cards.front().bytes; });
    std::vector<std::string> names;
    for (const GpuCard& c : cards) names.push_back(c.name);
    if (!one_memory) {
      // By memory, each with what names it: the card, or the name and its size where several share it
      // ("H100 80GB": the PCIe and the SXM).
      std::vector<std::string> groups;
      std::set<uint64_t> said;
      for (const GpuCard& c : cards) {
        if (!said.insert(c.bytes).second) continue;
        std::vector<std::string> same;
        for (const GpuCard& d : cards)
          if (d.bytes == c.bytes) same.push_back(d.name);
        std::string spell = fmt::format("\"{}\"", c.name);
        if (same.size() > 1) {
          const std::string sized = fmt::format("{} {}GB", text, c.memory_gb);
          const std::vector<GpuCard> named = gpus_named(sized);
          // Else any of them by its whole name: they share the memory.
          if (named.size() == same.size()) spell = fmt::format("\"{}\"", sized);
        }
        groups.push_back(
            fmt::format("{} MiB: {} ({} {})", c.bytes >> 20, fmt::join(same, ", "), flag, spell));
      }
      throw UsageError(fmt::format("{} {}: names {} cards of {} memory sizes, {}: name one", flag, text,
                                   cards.size(), said.size(), fmt::join(groups, "; ")));
    }
    return {cards.front().bytes, fmt::format("{}", fmt::join(names, " or "))};
  }
  // Not a card: a size, whose error lists the cards where the text was a word.
  try {
    return {parse_size(text, flag), {}};
  } catch (const UsageError&) {
    // Cards are suggested only where their names hold the typed model numbers and sizes (A100, 94GB) as
    // words: "A100 SXM" is not led to the H100 SXM one letter away, nor "H20" to the H200; where several hold
    // them and none is near, they are listed, not guessed between.
    const std::optional<std::vector<std::string>> sharing = gpus_with_numbers_of(text);
    // A bare number that is a word of a card's name (4090, 3090): the card was likely meant.
    if (sharing && !sharing->empty() &&
        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw UsageError(
          fmt::format("{} {}: a number without a unit is bytes; for the {}, write {} \"{}\" "
                      "(or a size with its unit: {}GiB, {}B for bytes)",
                      flag, text, sharing->front(), flag, sharing->front(), text, text));
    if (text.empty() || std::isalpha(static_cast<unsigned char>(text.front())) == 0) throw;
    const std::vector<std::string> known = gpu_names();
    // A slice of a card has a fraction of its memory: what CUDA reports inside the slice is the size.
    if (is_mig_slice(text))
      throw UsageError(fmt::format(
          "{} {}: a MIG slice is no card of configs/gpus.json (it has a fraction of the card's memory): give "
          "the slice's memory as CUDA reports it inside it (`batchsweep devices` there, or nvidia-smi's MIG "
          "listing), e.g. {} 9.75GiB",
          flag, text, flag));
    // Its desktop namesake has other memory: no card to suggest, its size to give.
    if (is_laptop_part(text))
      throw UsageError(fmt::format(
          "{} {}: a laptop GPU is no card of configs/gpus.json (its desktop namesake has other memory): give "
          "its memory as CUDA reports it (`batchsweep devices` on that machine), e.g. {} 16GiB",
          flag, text, flag));
    if (const std::optional<std::string> other = gpu_of_other_size(text))
      throw UsageError(
          fmt::format("{} {}: names the {}, not this size: give the card's memory as CUDA reports it "
                      "(`batchsweep devices` on that machine, or nvidia-smi's memory.total less the driver's "
                      "reserve, about 0.5 GiB on Ampere and newer), as {} <that>MiB",
                      flag, text, *other, flag));
    const std::vector<std::string>& pool = sharing ? *sharing : known;
    const std::vector<std::string_view> views(pool.begin(), pool.end());
    std::string hint;
    if (const auto near = model_detail::nearest_name(text, views))
      hint = fmt::format(": did you mean '{}'?", *near);
    else if (sharing && sharing->size() == 1)
      hint = fmt::format(": did you mean '{}'?", sharing->front());
    else if (sharing && !sharing->empty())
      hint = fmt::format(": the cards it could mean are {}", fmt::join(*sharing, ", "));
    // A model number the sheet lacks (T4, A10G, L40): how to size it anyway.
    std::string other_card;
    if (hint.empty() && std::any_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
      other_card = fmt::format(
          "; for another card give its memory as CUDA reports it (`batchsweep devices` on that machine), as "
          "{} <that>MiB",
          flag);
    throw UsageError(fmt::format("{} {}: neither a size (80GiB) nor a card of configs/gpus.json{} ({}){}",
                                 flag, text, hint, fmt::join(known, ", "), other_card));
  }
}

// --timeout counts from prepare, warm-up included: a --min-time or --warmup-time given at or past it is never
// met, and every point would stop at the timeout with whatever sample fit (a p99 of one step). Said before
// anything runs. Only flags given: the defaults (0.5 s measured, 0.2 s warm-up on cuda) give way to a short
// --timeout, which then cuts points as it says.
void require_time_within_timeout(const StoppingSettings& stopping, bool min_time_given,
                                 bool warmup_time_given) {
  if (!min_time_given && !warmup_time_given) return;
  const double warmup = warmup_time_given ? stopping.warmup_time_s.value_or(0.0) : 0.0;
  const double measured = min_time_given ? stopping.min_time_s : 0.0;
  if (warmup + measured < stopping.timeout_s) return;
  const std::string wanted =
      min_time_given && warmup_time_given
          ? fmt::format("--warmup-time {:g} s and --min-time {:g} s add up to {:g} s, which", warmup,
                        measured, warmup + measured)
      : min_time_given ? fmt::format("--min-time: {:g} s of timed steps", measured)
                       : fmt::format("--warmup-time: {:g} s of warm-up", warmup);
  throw UsageError(
      fmt::format("{} cannot fit in the {:g} s --timeout per point, which counts prepare and warm-up too: "
                  "every point would "
                  "stop at the timeout, short of it; raise --timeout (e.g. --timeout {:g})",
                  wanted, stopping.timeout_s, std::ceil(2 * (warmup + measured) + 1)));
}
}  // namespace

int run_app(int argc, char** argv) {
  CLI::App app{
      "batchsweep: which batch size should this model use on this GPU?\n"
      "Sweeps batch sizes of a configurable model (MLP, conv, transformer, ViT) in training or inference "
      "and\n"
      "reports throughput, latency percentiles, memory, the knee, the largest batch that fits and the best\n"
      "batch under a latency budget.",
      "batchsweep"};
  app.footer(footer_for(""));
  app.set_version_flag("--version", std::string(BSW_VERSION) + " (" + BSW_GIT_COMMIT + ")");
  app.require_subcommand(1);
  app.fallthrough(false);
  app.formatter(std::make_shared<HelpFormatter>());

  // ---- run
  // ------------------------------------------------------------------------------------------------------
  RunSettings run;
  Raw run_raw;
  CLI::App* run_cmd =
      app.add_subcommand("run", "Sweep batch sizes and report the knee, max fit and best batch");
  run_cmd->footer(footer_for("run"));
  run_cmd->add_option("--model,-m", run.model, "Preset name (see `batchsweep presets`) or a model JSON file")
      ->capture_default_str();
  run_cmd->add_option("--set", run.model_sets, kSetHelp)->type_name("PATH=VALUE")->expected(1)->take_all();
  run_cmd->add_option("--backend", run.backend, "auto | cpu | cuda | scripted")->capture_default_str();
  run_cmd
      ->add_option(
          "--device", run.device,
          "cuda: the GPU to sweep (0-based, as CUDA numbers them after CUDA_VISIBLE_DEVICES) [default: 0]")
      ->type_name("N")
      ->transform(whole(0, std::numeric_limits<int>::max()));
  run_cmd->add_option("--script", run.script, "Step-time script for --backend scripted (testing)")
      ->type_name("FILE");
  run_cmd->add_option("--mode", run_raw.mode, "train | infer (also accepted: training, inference)")
      ->capture_default_str();
  CLI::Option* resume_opt =
      run_cmd
          ->add_option(
              "--resume", run.resume_path,
              "Take the ok points of an earlier report of the same model and settings (an interrupted "
              "sweep) instead of measuring them again")
          ->type_name("FILE");
  run_cmd->add_option("--precision,-p", run_raw.precision, "fp32 | tf32 | fp16 | bf16")
      ->capture_default_str();
  CLI::Option* batch_opt =
      run_cmd
          ->add_option("--batch,-b", run_raw.batch,
                       "Batches: auto, a list and ranges: 1,8,64  8:256:+8  1:4096:*2  (16:128 = 16:128:*2)")
          ->type_name("SPEC|auto")
          ->capture_default_str();
  CLI::Option* accum_opt = run_cmd
                               ->add_option("--accumulation", run.sweep.accumulation,
                                            "Micro-batches per optimizer step (gradient accumulation)")
                               ->transform(whole(1, kMaxBatch, " (2^24)"))
                               ->capture_default_str();
  CLI::Option* effective_opt =
      run_cmd
          ->add_option("--effective-batch", run_raw.effective_batch,
                       "Sweep the splits of N samples per step into micro-batch x accumulation (not with "
                       "--batch or --accumulation)")
          ->type_name("N")
          ->transform(whole(1, kMaxBatch, " (2^24)"));
  effective_opt->excludes(accum_opt)->excludes(batch_opt);
  run_cmd->add_flag("--checkpointing", run.sweep.checkpointing, kCheckpointingHelp);
  run_cmd->add_option("--checkpoint-blocks", run.sweep.checkpoint_blocks, kCheckpointBlocksHelp)
      ->type_name("N")
      ->transform(whole(1, kMaxLayers));
  run_cmd
      ->add_option(
          "--memory-limit", run_raw.memory_limit,
          "Refuse plans above 95% of SIZE (e.g. 24GiB, 80GiB; 80GB is 74.5 GiB), or of a card's memory by "
          "name (L4, \"A100 40GB\": configs/gpus.json)")
      ->type_name("SIZE|GPU");
  run_cmd
      ->add_option("--memory-warn", run_raw.memory_warn_pct,
                   "Warn when a point uses more than PCT% (1 to 100) of the memory")
      ->type_name("PCT")
      ->check(between(1.0, 100.0, "percent: 90 for 90%"))
      ->capture_default_str();
  add_analysis(run_cmd, run.analysis);
  StoppingSettings& stop = run.sweep.stopping;
  run_cmd
      ->add_option("--warmup", stop.warmup_steps,
                   "Untimed steps before each point (0 times the cold first step, one-time work included)")
      ->transform(whole(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  run_cmd
      ->add_option("--warmup-time", stop.warmup_time_s,
                   "Untimed seconds per point at least, after --warmup steps, so GPU clocks leave idle "
                   "[default: 0.2 on cuda, 0 elsewhere]")
      ->type_name("S")
      ->check(non_negative("seconds: 0.2 for 0.2 s"));
  run_cmd
      ->add_option(
          "--min-samples", stop.min_samples,
          "Timed steps per point, at least [default: 10; with --latency-slo or --request-rate, enough "
          "for its percentile: 100 at p99, 20 at p95, 10 at p90, 1000 at p99.9]")
      ->transform(whole(1, std::numeric_limits<int>::max()));
  run_cmd->add_option("--min-time", stop.min_time_s, "Measured seconds per point, at least")
      ->type_name("S")
      ->check(non_negative("seconds: 0.5 for 0.5 s"))
      ->capture_default_str();
  run_cmd
      ->add_option(
          "--max-noise", stop.max_noise_pct,
          "Stop a point once its relative noise is at most PCT% (after --min-samples and --min-time)")
      ->type_name("PCT")
      ->check(positive("percent: 5 for 5%"))
      ->capture_default_str();
  static_assert(kMaxSampleCap == 100000 && kMaxRounds == 100, "--max-samples' and --rounds' help name these");
  run_cmd
      ->add_option("--max-samples", stop.max_samples,
                   "Timed steps per point, at most (up to 100000): the sample cap, reached by steps so short "
                   "that --min-time needs more, or by noise that never settles")
      ->transform(whole(1, kMaxSampleCap))
      ->capture_default_str();
  run_cmd
      ->add_option("--timeout", stop.timeout_s,
                   "Wall-clock seconds per point before it stops with a warning (checked between steps: a "
                   "step in progress is never cut)")
      ->type_name("S")
      ->check(positive("seconds: 30 for 30 s"))
      ->capture_default_str();
  run_cmd
      ->add_option("--rounds", run.sweep.rounds,
                   "Measure every batch N times (1 to 100), the order reversed each round, pooling the "
                   "rounds: a drift "
                   "over the sweep (clocks, heat, other load) reaches every batch alike, and rounds that "
                   "disagree are named (time x N; 2 balances a steady drift)")
      ->type_name("N")
      ->transform(whole(1, kMaxRounds))
      ->capture_default_str();
  run_cmd->add_option("--seed", run.sweep.session.seed, "Seed of the synthetic weights and data")
      ->type_name("N")
      ->option_text("N=" + std::to_string(run.sweep.session.seed))
      ->check(unsigned_64())
      ->capture_default_str();
  run_cmd->add_option("--graphs", run_raw.graphs, "cuda: capture each step as a CUDA graph (on|off)")
      ->check(one_of({"on", "off"}))
      ->capture_default_str();
  add_path_options(run_cmd, run_raw.attention, run_raw.conv);
  run_cmd
      ->add_option("--telemetry", run.telemetry,
                   "NVML power/energy/clock sampling per point (auto: on for cuda)")
      ->check(one_of({"auto", "on", "off"}))
      ->capture_default_str();
  add_exports(run_cmd, run.exports);
  run_cmd->add_flag("--quiet,-q", run.quiet, "No progress on stderr");

  // ---- plan
  // -----------------------------------------------------------------------------------------------------
  PlanSettings plan;
  Raw plan_raw;
  CLI::App* plan_cmd =
      app.add_subcommand("plan", "The exact memory plan and FLOPs per batch; with --memory, the max batch");
  plan_cmd->footer(footer_for("plan"));
  plan_cmd->add_option("--model,-m", plan.model, "Preset name or model JSON file")->capture_default_str();
  plan_cmd->add_option("--set", plan.model_sets, kSetHelp)->type_name("PATH=VALUE")->expected(1)->take_all();
  plan_cmd
      ->add_option(
          "--backend", plan.backend,
          "Plan for auto | cpu | cuda: auto is cuda where a GPU is present, else cpu; cuda sizes a GPU "
          "from any machine (the plans differ)")
      ->capture_default_str();
  CLI::Option* plan_batch_opt =
      plan_cmd
          ->add_option("--batch,-b", plan.batch, "Batches: 1,8,64  8:256:+8  1:4096:*2  (16:128 = 16:128:*2)")
          ->type_name("SPEC")
          ->capture_default_str();
  plan_cmd->add_option("--precision,-p", plan_raw.precision, "fp32 | tf32 | fp16 | bf16")
      ->capture_default_str();
  plan_cmd->add_option("--mode", plan_raw.mode, "train | infer (also accepted: training, inference)")
      ->capture_default_str();
  CLI::Option* plan_accum_opt =
      plan_cmd->add_option("--accumulation", plan.accumulation, "Micro-batches per optimizer step")
          ->transform(whole(1, kMaxBatch, " (2^24)"))
          ->capture_default_str();
  plan_cmd
      ->add_option("--effective-batch", plan_raw.effective_batch,
                   "Plan the splits of N samples per step into micro-batch x accumulation (not with --batch "
                   "or --accumulation); with --memory, the largest micro-batch that fits")
      ->type_name("N")
      ->transform(whole(1, kMaxBatch, " (2^24)"))
      ->excludes(plan_accum_opt)
      ->excludes(plan_batch_opt);
  plan_cmd->add_flag("--checkpointing", plan.checkpointing, kCheckpointingHelp);
  plan_cmd->add_option("--checkpoint-blocks", plan.checkpoint_blocks, kCheckpointBlocksHelp)
      ->type_name("N")
      ->transform(whole(1, kMaxLayers));
  plan_cmd
      ->add_option(
          "--memory", plan_raw.memory,
          "Device memory (e.g. 80GiB, 24GiB) or a card by name (\"H100 SXM\", L4: the memory CUDA reports "
          "for it, configs/gpus.json; a card plans for cuda, a size for --backend's choice, the cpu without "
          "a "
          "GPU): report the largest batch whose plan fits in 95% of it; all: that batch on every card of "
          "configs/gpus.json")
      ->type_name("SIZE|GPU");
  add_path_options(plan_cmd, plan_raw.attention, plan_raw.conv);
  plan_cmd->add_option("--json", plan.json_path, "Write the plan JSON to FILE, or - for stdout")
      ->type_name("FILE|-")
      ->check(file_path(true));
  plan_cmd->add_flag("--buffers", plan.buffers, "List every buffer of each plan");

  // ---- analyze
  // --------------------------------------------------------------------------------------------------
  AnalyzeSettings analyze;
  CLI::App* analyze_cmd = app.add_subcommand(
      "analyze",
      "Recompute a report's analysis (another SLO, saturation or sensitivity); a flag not given keeps the "
      "run's value");
  analyze_cmd->footer(footer_for("analyze"));
  analyze_cmd->add_option("report", analyze.report_path, "A batchsweep JSON report")
      ->required()
      ->type_name("REPORT");
  add_analysis(analyze_cmd, analyze.analysis, /*of_report=*/true);
  analyze_cmd
      ->add_flag("--no-latency-slo", analyze.no_latency_slo,
                 "Drop the run's latency budget (not with --latency-slo)")
      ->excludes("--latency-slo");
  analyze_cmd
      ->add_flag("--no-request-rate", analyze.no_request_rate,
                 "Drop the run's --request-rate (and its serving answer; not with --request-rate or "
                 "--max-queue-delay)")
      ->excludes("--request-rate")
      ->excludes("--max-queue-delay");
  analyze_cmd
      ->add_flag("--no-price-per-hour", analyze.no_price_per_hour,
                 "Drop the run's --price-per-hour (and every cost; not with --price-per-hour)")
      ->excludes("--price-per-hour");
  add_exports(analyze_cmd, analyze.exports);

  // ---- compare
  // --------------------------------------------------------------------------------------------------
  CompareSettings compare;
  CLI::App* compare_cmd =
      app.add_subcommand("compare", "Compare runs per batch against the first, with a noise-aware verdict");
  compare_cmd->footer(footer_for("compare"));
  // Counted after parsing: CLI11 prints a bounded count as "reports(2x)", which reads as exactly two; an
  // unbounded one as "reports...".
  compare_cmd->add_option("reports", compare.report_paths, "Two or more JSON reports, the baseline first")
      ->required()
      ->expected(1, CLI::detail::expected_max_vector_size)
      ->type_name("A.json B.json");
  compare_cmd
      ->add_option(
          "--fail-on-regression", compare.fail_on_regression_pct,
          "Exit 3 when a run is slower than the baseline beyond noise and PCT% (at least the 1% compare "
          "calls a change), fails a batch the baseline ran, or breaks the baseline's latency budget by PCT%; "
          "in inference, also when a run's p99 step (the baseline's budget percentile) is longer beyond "
          "noise "
          "and PCT%")
      ->type_name("PCT")
      ->check(between(0.0, 100.0, "percent: 5 for 5%"));
  compare_cmd
      ->add_option(
          "--fail-on-latency-regression", compare.fail_on_latency_regression,
          "The latency findings' own PCT (a tail longer beyond noise and PCT%, the baseline's budget "
          "broken by PCT%) in place of --fail-on-regression's, or off to gate neither; given, the "
          "tail is gated in training too")
      ->type_name("PCT|off")
      ->check(CLI::Validator([pct = between(0.0, 100.0, "percent: 20 for 20%")](
                                 std::string& text) { return text == "off" ? std::string() : pct(text); },
                             ""))
      ->needs("--fail-on-regression");
  compare_cmd->add_flag("--allow-model-mismatch", compare.allow_model_mismatch,
                        "Compare reports of different models");
  compare_cmd->add_flag(
      "--allow-incomplete", compare.allow_incomplete,
      "Let --fail-on-regression judge a run that did not finish (interrupted or killed), or "
      "that did not sweep every batch the baseline ran ok, on the batches it holds");
  CLI::Option* compare_rate =
      compare_cmd
          ->add_option("--request-rate", compare.request_rate,
                       "Inference: simulate every run serving this many requests/s through a dynamic "
                       "batcher (as run --request-rate does) and compare their request latency, each at "
                       "its best max batch; max: the most requests/s each serves within its --latency-slo "
                       "(default: each report's own rate, if it has one)")
          ->type_name("PER_S|max")
          ->transform(request_rate_check());
  compare_cmd
      ->add_option("--max-queue-delay", compare.max_queue_delay_ms,
                   "With --request-rate: how long the batcher holds a request to fill a batch, in ms, "
                   "for every run [default: 0]")
      ->type_name("MS")
      ->check(non_negative("milliseconds: 2 for 2 ms"))
      ->needs(compare_rate);
  compare_cmd->add_option("--json", compare.json_path, "Write the comparison as JSON to FILE, or -")
      ->type_name("FILE|-")
      ->check(file_path(true));
  compare_cmd
      ->add_option("--markdown", compare.markdown_path,
                   "Write the comparison as markdown to FILE (- for stdout)")
      ->type_name("FILE")
      ->check(file_path(true));

  // ---- devices, presets
  // -------------------------------------------------------------------------------------------
  DevicesSettings devices;
  CLI::App* devices_cmd =
      app.add_subcommand("devices", "List backends and devices; --calibrate measures GEMM rates");
  devices_cmd->footer(footer_for("devices"));
  CLI::Option* calibrate_flag = devices_cmd->add_flag("--calibrate", devices.calibrate,
                                                      "Measure this GPU's GEMM rates and copy bandwidth");
  devices_cmd
      ->add_option("--device", devices.device,
                   "With --calibrate: the CUDA device to measure (0-based, as CUDA numbers them)")
      ->type_name("N")
      ->transform(whole(0, std::numeric_limits<int>::max()))
      ->needs(calibrate_flag)
      ->capture_default_str();
  devices_cmd->add_flag("--json", devices.json, "Print JSON");
  CLI::App* presets_cmd =
      app.add_subcommand("presets", "List the model presets; with a name, print that preset's config");
  presets_cmd->footer(footer_for("presets"));
  std::string preset_shown;
  presets_cmd->add_option("name", preset_shown,
                          "A preset whose config to print (the paths --set takes: layers[1].repeat)");

  std::vector<std::string_view> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.emplace_back(sub->get_name());
  const auto is_subcommand = [&](std::string_view word) {
    return std::find(names.begin(), names.end(), word) != names.end();
  };
  // `batchsweep help [SUBCOMMAND]` and `batchsweep version`, as git and go take them: the help or version.
  if (argc >= 2 && (std::string_view(argv[1]) == "help" || std::string_view(argv[1]) == "version")) {
    const auto asks_help = [](std::string_view word) { return word == "--help" || word == "-h"; };
    if (std::string_view(argv[1]) == "version") {
      if (argc == 3 && asks_help(argv[2])) {
        std::fputs(kVersionHelp, stdout);
        return kExitOk;
      }
      if (argc >= 3) throw UsageError(fmt::format("version takes no arguments, got '{}'", argv[2]));
      std::printf("%s\n", app.version().c_str());
      return kExitOk;
    }
    // `help version`; `help --help` and `help help` are this help.
    if (argc == 3 && std::string_view(argv[2]) == "version") {
      std::fputs(kVersionHelp, stdout);
      return kExitOk;
    }
    if (argc == 3 && (asks_help(argv[2]) || std::string_view(argv[2]) == "help")) {
      std::fputs(app.help().c_str(), stdout);
      return kExitOk;
    }
    if (argc >= 3 && !is_subcommand(argv[2]))
      throw UsageError(fmt::format("help: unknown subcommand '{}'{} (one of {})", argv[2],
                                   did_you_mean(argv[2], names), model_detail::join_names(names)));
    if (argc >= 4)
      throw UsageError(fmt::format("help takes one subcommand, got '{}' after '{}'", argv[3], argv[2]));
    CLI::App* about = argc >= 3 ? app.get_subcommand(argv[2]) : &app;
    std::fputs((about == &app ? app.help() : about->help("batchsweep")).c_str(), stdout);
    return kExitOk;
  }
  // A flag before the subcommand (`batchsweep --precision bf16 plan`): CLI11 says "not expected: bf16
  // --precision"; the subcommand's flags go after it. Without a subcommand, the flag is named.
  if (argc >= 2 && argv[1][0] == '-') {
    const std::string_view flag = argv[1];
    const bool own = flag == "-h" || flag == "--help" || flag.starts_with("--help=") || flag == "--version" ||
                     flag == "--";
    // `batchsweep --version extra`: as `batchsweep version --json` is refused, not a version printed over it.
    if (flag == "--version" && argc >= 3 && std::string_view(argv[2]) != "--help" &&
        std::string_view(argv[2]) != "-h")
      throw UsageError(fmt::format("--version takes no arguments, got '{}'", argv[2]));
    if (!own) {
      const char* const* sub =
          std::find_if(argv + 2, argv + argc, [&](const char* a) { return is_subcommand(a); });
      if (sub != argv + argc)
        throw UsageError(
            fmt::format("{} comes before the subcommand: a subcommand's flags go after it "
                        "(batchsweep {} {} ...)",
                        flag, *sub, flag));
      throw UsageError(fmt::format(
          "batchsweep has no flag {} (its own are --help and --version; a subcommand's flags go after it)",
          flag));
    }
  }
  // `-b=1,8`: CLI11 hands a short flag '=1,8' ("batch '=1' is not an integer"); only a long flag takes '='.
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() > 2 && arg[0] == '-' && std::isalpha(static_cast<unsigned char>(arg[1])) != 0 &&
        arg[2] == '=')
      throw UsageError(fmt::format(
          "{}: a short flag takes its value after a space or joined to it ({} {} or {}{}); only a long flag "
          "takes '=' (--flag=value)",
          arg, arg.substr(0, 2), arg.substr(3), arg.substr(0, 2), arg.substr(3)));
  }
  // Nothing at all: CLI11's "A subcommand is required" named none of them.
  if (argc < 2)
    throw UsageError(
        fmt::format("a subcommand is required: one of {} (batchsweep run sweeps the default model; "
                    "--help for usage)",
                    model_detail::join_names(names)));
  // CLI11 says "A subcommand is required" for a mistyped one; name it, and the nearest, instead.
  if (argv[1][0] != '-') {
    const std::string_view word = argv[1];
    if (!is_subcommand(word))
      throw UsageError(fmt::format("unknown subcommand '{}'{} (one of {}; --help for usage)", word,
                                   did_you_mean(word, names), model_detail::join_names(names)));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unknown flag is named with the nearest one the subcommand has, in place of CLI11's list of every
    // word it did not expect ("16 --effective-batch").
    const std::string hint = unknown_flag_hint(app, argc, argv);
    std::string sub;
    for (const CLI::App* candidate : app.get_subcommands())
      if (candidate->parsed()) sub = candidate->get_name();
    if (sub.empty() && argc >= 2) sub = argv[1];
    // A gate whose flags did not parse (--fail-on-regression 5%) compared nothing either: an earlier job's
    // answer at its export paths must not read as this one's. The words are read as given. Said before the
    // error, which ends stderr as on every refused gate.
    if (sub == "compare") {
      bool gate = false;
      std::vector<std::pair<std::string, std::string>> exports;
      for (int i = 2; i < argc; ++i) {
        const std::string_view arg = argv[i];
        // A misspelled gate flag (--fail-on-regresion) was meant as the gate all the same.
        gate |= arg.starts_with("--fail") ||
                (arg.starts_with("--") && arg.find("regres") != std::string_view::npos);
        for (const char* flag : {"--json", "--markdown"}) {
          if (arg == flag && i + 1 < argc) exports.emplace_back(flag, argv[i + 1]);
          if (arg.starts_with(std::string(flag) + "="))
            exports.emplace_back(flag, std::string(arg.substr(std::string_view(flag).size() + 1)));
        }
      }
      if (gate) remove_stale_gate_exports(exports);
    }
    // "Run with --help for usage." unless the message already sends the user to --help.
    const std::string message = printable_text(hint.empty() ? plain_parse_error(e.what(), sub) : hint);
    std::fprintf(stderr, "batchsweep: error: %s\n%s", message.c_str(),
                 message.find("--help") == std::string::npos ? "Run with --help for usage.\n" : "");
    return kExitUsage;
  }

  run.exports.world_size_given = run_cmd->count("--world-size") > 0;
  analyze.exports.world_size_given = analyze_cmd->count("--world-size") > 0;
  if (run_cmd->parsed()) {
    check_backend_name(run.backend);
    run.sweep.precision = parse_precision(run_raw.precision);
    run.sweep.mode = parse_mode(run_raw.mode);
    run.mode_given = run_cmd->count("--mode") > 0;
    run.graphs_given = run_cmd->count("--graphs") > 0;
    if (run_raw.effective_batch) {
      if (run.sweep.mode != Mode::train)
        throw UsageError("--effective-batch: gradient accumulation only applies to --mode train");
      run.sweep.effective_batch = *run_raw.effective_batch;
      // Across --world-size N devices E is the global batch: each device's step is E / N samples, and
      // those splits are what the sweep times (settings.world_size records N).
      if (!run.exports.config_for.empty()) {
        check_effective_batch_world_size(*run_raw.effective_batch, run.exports.world_size);
        run.sweep.effective_batch = *run_raw.effective_batch / run.exports.world_size;
      }
    } else {
      run.sweep.batches = parse_batch_spec(run_raw.batch, "--batch");
    }
    if (run.analysis.request_rate && run.sweep.mode != Mode::infer)
      throw UsageError(kRequestRateTrainingError);
    check_config_target_mode(run.exports.config_for, run.sweep.mode == Mode::infer, false);
    if (is_request_rate_max(run.analysis.request_rate) && !run.analysis.latency_slo_ms)
      throw UsageError(kRequestRateMaxNeedsBudget);
    if (run.sweep.mode == Mode::infer && run.sweep.accumulation != 1)
      throw UsageError("--accumulation: gradient accumulation only applies to --mode train");
    if (run.sweep.checkpoint_blocks > 0 && run.sweep.checkpointing) throw UsageError(kBothCheckpointingFlags);
    if (run.sweep.checkpoint_blocks > 0) run.sweep.checkpointing = true;
    if (run.sweep.mode == Mode::infer && run.sweep.checkpointing)
      throw UsageError(checkpointing_infer_error(run.sweep.checkpoint_blocks > 0));
    // Given but empty (an unset shell variable) is an error, not "no limit".
    if (run_cmd->count("--memory-limit") > 0) {
      const MemoryArg limit = parse_memory(run_raw.memory_limit, "--memory-limit");
      // A card's memory limits a GPU's sweep (an L4 emulated on a larger card); against the CPU backend's
      // buffers it would only look like an answer about that card.
      if (!limit.card.empty() && (run.backend == "cpu" || (run.backend == "auto" && !cuda_device_present())))
        throw UsageError(fmt::format(
            "--memory-limit {} names a GPU, and this run is on the cpu backend, whose buffers differ: give a "
            "size, or size the card with batchsweep plan --memory \"{}\"",
            run_raw.memory_limit, limit.card));
      run.sweep.memory_limit_bytes = limit.bytes;
      run.sweep.memory_limit_card = limit.card;
    }
    run.sweep.memory_warn_fraction = run_raw.memory_warn_pct / 100.0;
    run.sweep.session.cuda_graphs = run_raw.graphs == "on";
    run.sweep.paths = parse_paths(run_raw.attention, run_raw.conv);
    run.sweep.session.memory_limit_bytes = run.sweep.memory_limit_bytes;
    run.sweep.knee_sensitivity = run.analysis.knee_sensitivity;
    run.sweep.latency_slo_ms = run.analysis.latency_slo_ms;
    run.sweep.latency_percentile = run.analysis.latency_percentile;
    require_budget_for_percentile(run_cmd->count("--latency-percentile") > 0,
                                  run.analysis.latency_slo_ms.has_value(),
                                  run.analysis.request_rate.has_value());
    // A budget at p99 judged on 10 steps is judged on the slowest of them: enough steps for the percentile,
    // unless --min-samples says otherwise (settings.stopping.min_samples records which).
    // Serving draws its steps from each batch's measured ones: their tail too.
    if ((run.analysis.latency_slo_ms || run.analysis.request_rate) && run_cmd->count("--min-samples") == 0)
      run.sweep.stopping.min_samples = std::max(run.sweep.stopping.min_samples,
                                                latency_budget_min_samples(run.analysis.latency_percentile));
    if (run.sweep.stopping.min_samples > run.sweep.stopping.max_samples &&
        run_cmd->count("--min-samples") == 0)
      throw UsageError(
          run.analysis.latency_slo_ms || run.analysis.request_rate
              ? fmt::format(
                    "--max-samples {}: a {} budget times {} steps a point by default (enough that one "
                    "lies above its percentile); raise --max-samples, or give --min-samples to time "
                    "fewer",
                    run.sweep.stopping.max_samples, latency_name(run.analysis.latency_percentile),
                    run.sweep.stopping.min_samples)
              : fmt::format("--max-samples {}: below --min-samples, {} by default (each point times at least "
                            "that many steps); raise --max-samples, or give --min-samples {} or fewer",
                            run.sweep.stopping.max_samples, run.sweep.stopping.min_samples,
                            run.sweep.stopping.max_samples));
    validate(run.sweep.stopping);
    // The scripted backend's steps take the formula's time, not the wall clock's that --timeout counts.
    if (run.backend != "scripted")
      require_time_within_timeout(run.sweep.stopping, run_cmd->count("--min-time") > 0,
                                  run_cmd->count("--warmup-time") > 0);
    if (run.backend == "scripted" && run.script.empty())
      throw UsageError("--script: --backend scripted needs a step-time script (see tests/data/scripted)");
    if (run.backend != "scripted" && !run.script.empty())
      throw UsageError(fmt::format(
          "--script: a step-time script is read only by --backend scripted, and this run is --backend {}",
          run.backend));
    if (resume_opt->count() > 0 && run.resume_path.empty())
      throw UsageError("--resume: the file name is empty (an unset shell variable?)");
    std::vector<std::string> args(argv, argv + argc);
    return run_command(run, args);
  }
  if (plan_cmd->parsed()) {
    if (plan.backend == "scripted") throw UsageError("--backend: plans are for cpu or cuda");
    check_backend_name(plan.backend, /*for_plan=*/true);
    plan.precision = parse_precision(plan_raw.precision);
    plan.mode = parse_mode(plan_raw.mode);
    if (plan.mode == Mode::infer && plan.accumulation != 1)
      throw UsageError("--accumulation: gradient accumulation only applies to --mode train");
    if (plan.checkpoint_blocks > 0 && plan.checkpointing) throw UsageError(kBothCheckpointingFlags);
    if (plan.checkpoint_blocks > 0) plan.checkpointing = true;
    if (plan.mode == Mode::infer && plan.checkpointing)
      throw UsageError(checkpointing_infer_error(plan.checkpoint_blocks > 0));
    if (plan_raw.effective_batch) {
      if (plan.mode != Mode::train)
        throw UsageError("--effective-batch: gradient accumulation only applies to --mode train");
      plan.effective_batch = *plan_raw.effective_batch;
    }
    // Any case, as card names: all, ALL, All.
    const auto is_all = [](const std::string& v) {
      return v.size() == 3 && std::tolower(static_cast<unsigned char>(v[0])) == 'a' &&
             std::tolower(static_cast<unsigned char>(v[1])) == 'l' &&
             std::tolower(static_cast<unsigned char>(v[2])) == 'l';
    };
    if (plan_cmd->count("--memory") > 0 && is_all(plan_raw.memory)) {
      plan.memory_all = true;
    } else if (plan_cmd->count("--memory") > 0) {
      const MemoryArg memory = parse_memory(plan_raw.memory, "--memory");
      plan.memory_bytes = memory.bytes;
      plan.memory_card = memory.card;
    }
    plan.paths = parse_paths(plan_raw.attention, plan_raw.conv);
    return plan_command(plan, std::vector<std::string>(argv, argv + argc));
  }
  if (analyze_cmd->parsed()) {
    analyze.saturation_given = analyze_cmd->count("--saturation") > 0;
    analyze.knee_sensitivity_given = analyze_cmd->count("--knee-sensitivity") > 0;
    analyze.latency_percentile_given = analyze_cmd->count("--latency-percentile") > 0;
    return analyze_command(analyze, std::vector<std::string>(argv, argv + argc));
  }
  if (compare_cmd->parsed()) {
    return compare_command(compare, std::vector<std::string>(argv, argv + argc));
  }
  if (devices_cmd->parsed()) return devices_command(devices);
  if (presets_cmd->parsed())
    return presets_command(presets_cmd->count("name") > 0 ? std::optional<std::string>(preset_shown)
                                                          : std::nullopt);
  return kExitUsage;
}

namespace {
int g_stdout_failure = 0;
}  // namespace

int flush_stdout() {
  if (g_stdout_failure != 0) return g_stdout_failure;
  errno = 0;
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) g_stdout_failure = errno != 0 ? errno : -1;
  return g_stdout_failure;
}

bool write_stdout(std::string_view text) {
  if (flush_stdout() != 0) return false;
  if (write_fully(STDOUT_FILENO, text)) return true;
  g_stdout_failure = errno != 0 ? errno : -1;
  return false;
}

}  // namespace bsw::cli
