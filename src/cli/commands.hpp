// The subcommands, each taking its validated settings and the argv it was called with; they return exit
// codes.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cli/settings.hpp"

namespace bsw::cli {

[[nodiscard]] int plan_command(const PlanSettings& settings, const std::vector<std::string>& argv);
[[nodiscard]] int run_command(const RunSettings& settings, const std::vector<std::string>& argv);
[[nodiscard]] int analyze_command(const AnalyzeSettings& settings, const std::vector<std::string>& argv);
[[nodiscard]] int compare_command(const CompareSettings& settings, const std::vector<std::string>& argv);
// A gate that cannot compare (a report missing, a bad flag) has no answer to write, and an earlier job's at
// its export paths would read as this one's: each (flag, path) that holds an earlier compare answer — JSON of
// kind "compare", or compare's markdown — is removed, and said on stderr. Anything else there is left alone.
// So is a gate's export that could not be written (`why` says which).
void remove_stale_gate_exports(const std::vector<std::pair<std::string, std::string>>& exports,
                               std::string_view why = "this gate compared nothing");
[[nodiscard]] int devices_command(const DevicesSettings& settings);
// Without a name, the table of presets; with one, that preset's config as embedded (UsageError for a name
// that is no preset).
[[nodiscard]] int presets_command(const std::optional<std::string>& name);

// --latency-percentile chooses what --latency-slo holds and the percentile --request-rate answers at: given
// with neither (run's flags, or analyze's flags and the run's) it is a usage error.
void require_budget_for_percentile(bool percentile_given, bool has_budget, bool has_rate);

}  // namespace bsw::cli
