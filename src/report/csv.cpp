// The CSV printer: one row per point. Columns are the point's JSON fields in the writer's order, flattened
// with dots (`step_ms.p99`), taken from the same code that writes the JSON, so the two cannot drift apart;
// except that fields added after the first release (kAddedColumns) come last, in the order listed there, so
// that readers by position keep working. After them, the run's context on every row (run.model, run.device,
// run.backend, run.mode, run.precision, run.created_at, run.state, then run.checkpointing,
// run.model_overrides and run.checkpoint_blocks), so rows of several runs concatenated
// still say which run they are (two runs of one model on one device type by when they started). Last, the
// serving columns (serving.*, filled where the run serves at a request rate: the rate, hold and percentile on
// every row, the rest on each max batch's row, as analysis.serving.batches holds them); then the latency
// budget's columns (budget.*: the budget and percentile on every row, each ok point's step time at it).
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "batchsweep/analysis.hpp"
#include "batchsweep/json_keys.hpp"
#include "batchsweep/printers.hpp"
#include "report/json_pieces.hpp"
#include "report/view.hpp"

namespace bsw {

namespace {

using ordered = nlohmann::ordered_json;

// Point fields added after the first release, in the order they were added: their columns come last.
constexpr std::string_view kAddedColumns[] = {"resumed_from",
                                              "telemetry.mem_clock_mhz.min",
                                              "telemetry.mem_clock_mhz.median",
                                              "host.wall_s",
                                              "host.cpu_s",
                                              "host.cpus",
                                              "host.others_cores",
                                              "host.steal_pct",
                                              "host.waited_s",
                                              "rounds.mean_ms",
                                              "round_spread_pct",
                                              "rounds_disagree",
                                              "samples_per_second_ci95_pct"};

// Leaves of a point's JSON, in order; arrays other than the raw samples are leaves too.
void flatten(const ordered& doc, const std::string& prefix,
             std::vector<std::pair<std::string, ordered>>& out) {
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (key == "samples_ms") continue;
    if (key == "rounds" && it->is_array()) {  // --rounds: the rounds' mean steps, in order
      ordered means = ordered::array();
      for (const auto& round : *it) means.push_back(round.value("mean_ms", ordered()));
      out.emplace_back("rounds.mean_ms", std::move(means));
      continue;
    }
    if (it->is_object()) {
      flatten(*it, key, out);
    } else {
      out.emplace_back(key, *it);
    }
  }
}

// A point with every optional field set, so that its flattened JSON names every column a report can have.
Point point_with_every_field() {
  Point p;
  p.tokens_per_second = 0;
  p.tflops = 0;
  p.mfu = 0;
  p.memory.measured_bytes = 0;
  p.memory.device_used_bytes = 0;
  p.resumed_from.push_back('-');
  p.noise_pct = 0;
  p.stop_reason.push_back('-');
  p.skipped_steps = 0;
  p.loss = 0;
  p.telemetry = PointTelemetry{};
  p.telemetry->mem_clock_mhz_min = 0;  // written only where NVML reads it
  p.host = PointHost{};
  p.samples_ms = {1, 2};  // two steps of spread: a confidence interval
  p.rounds = {PointRound{1, "-", PointStatus::ok, {}}, PointRound{1, "-", PointStatus::ok, {}}};
  return p;
}

std::string quote(const std::string& field) {
  if (field.find_first_of(",\"\r\n") == std::string::npos) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string cell(const ordered& v) {
  if (v.is_null()) return {};
  if (v.is_string()) return quote(v.get<std::string>());
  if (v.is_array()) {
    std::string joined;
    for (const auto& item : v) {
      if (!joined.empty()) joined += ';';
      joined += item.is_string() ? item.get<std::string>() : item.is_null() ? std::string() : json_text(item);
    }
    return quote(joined);
  }
  return json_text(v);
}

// settings.model_overrides (run --set) joined by "; ", or empty.
std::string overrides_cell(const Report& report) {
  std::string joined;
  for (const std::string& o : report_view::model_overrides(report))
    joined += (joined.empty() ? "" : "; ") + o;
  return joined;
}

// analysis.serving on the CSV's rows: the run's rate, hold and percentile, then each max batch's figures.
constexpr std::string_view kServingColumns[] = {"serving.request_rate",
                                                "serving.max_queue_delay_ms",
                                                "serving.latency_percentile",
                                                "serving.capacity_per_second",
                                                "serving.saturated",
                                                "serving.utilization",
                                                "serving.mean_batch",
                                                "serving.latency_mean_ms",
                                                "serving.latency_p50_ms",
                                                "serving.latency_ms",
                                                "serving.latency_se_ms",
                                                "serving.settled",
                                                "serving.best"};

std::vector<std::string> serving_cells(const Report& report, const Point& p) {
  std::vector<std::string> out(std::size(kServingColumns));
  if (!report.analysis.serving) return out;
  const Serving& s = *report.analysis.serving;
  const auto number = [](const std::optional<double>& v) { return v ? cell(ordered(*v)) : std::string(); };
  out[0] = cell(ordered(s.request_rate));
  out[1] = cell(ordered(s.max_queue_delay_ms));
  out[2] = cell(ordered(s.latency_percentile));
  if (p.accumulation != 1 || p.status != PointStatus::ok) return out;
  for (const ServingBatch& b : s.batches) {
    if (b.batch != p.batch) continue;
    out[3] = cell(ordered(b.capacity_per_second));
    out[4] = b.saturated ? "true" : "false";
    out[5] = number(b.utilization);
    out[6] = number(b.mean_batch);
    out[7] = number(b.latency_mean_ms);
    out[8] = number(b.latency_p50_ms);
    out[9] = number(b.latency_ms);
    out[10] = number(b.latency_se_ms);
    out[11] = b.settled ? "true" : "false";
    out[12] = s.best.batch && *s.best.batch == b.batch ? "true" : "false";
  }
  return out;
}

// A latency budget (--latency-slo) on the CSV's rows: the budget and its percentile on every row, then each
// point's step time at that percentile (whatever it is: p99.5 comes from the raw steps) and whether it keeps
// the budget, as the analysis reads them.
constexpr std::string_view kBudgetColumns[] = {"budget.latency_slo_ms", "budget.latency_percentile",
                                               "budget.latency_ms", "budget.within"};

std::vector<std::string> budget_cells(const Report& report, const Point& p) {
  std::vector<std::string> out(std::size(kBudgetColumns));
  const std::optional<double> budget = report_view::latency_budget_ms(report);
  if (!budget) return out;
  const double pct = report_view::budget_percentile(report);
  out[0] = cell(ordered(*budget));
  out[1] = cell(ordered(pct));
  if (p.status != PointStatus::ok) return out;
  const std::optional<double> ms = step_latency_ms(p, pct);
  if (!ms || *ms <= 0) return out;
  out[2] = cell(ordered(*ms));
  // Beside a request rate the budget holds the requests' latency (serving.*), not the step's: not judged
  // here.
  if (!report.analysis.serving) out[3] = *ms <= *budget ? "true" : "false";
  return out;
}

}  // namespace

std::string format_csv(const Report& report) {
  std::vector<std::pair<std::string, ordered>> columns;
  flatten(report_json::point_json<ordered>(point_with_every_field()), "", columns);
  for (const std::string_view added : kAddedColumns) {
    const auto at =
        std::find_if(columns.begin(), columns.end(), [&](const auto& c) { return c.first == added; });
    if (at != columns.end()) std::rotate(at, at + 1, columns.end());
  }
  const report_view::Title t = report_view::title(report);
  const std::pair<std::string_view, std::string> context[] = {
      {"run.model", t.model},
      {"run.device", report.device.name},
      {"run.backend", report.device.backend},
      {"run.mode", t.mode},
      {"run.precision", t.precision},
      {"run.created_at", report.created_at},
      {"run.state", report.state},
      // Appended after the others, which keep their places for scripts that read columns by position.
      {"run.checkpointing", t.checkpointing.empty() ? "false" : "true"},
      {"run.model_overrides", overrides_cell(report)},
      {"run.checkpoint_blocks",
       t.checkpoint_blocks > 0 ? std::to_string(t.checkpoint_blocks) : std::string()}};
  std::string out;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i) out += ',';
    out += quote(columns[i].first);
  }
  for (const auto& [name, value] : context) {
    out += ',';
    out += name;
  }
  for (const std::string_view name : kServingColumns) {
    out += ',';
    out += name;
  }
  for (const std::string_view name : kBudgetColumns) {
    out += ',';
    out += name;
  }
  out += "\n";
  const std::optional<RoundNoise> rounds = round_noise(report.points);
  for (const auto& p : report.points) {
    std::vector<std::pair<std::string, ordered>> leaves;
    flatten(report_json::point_json<ordered>(p, rounds), "", leaves);
    const std::map<std::string, ordered> by_name(leaves.begin(), leaves.end());
    for (size_t i = 0; i < columns.size(); ++i) {
      if (i) out += ",";
      if (auto it = by_name.find(columns[i].first); it != by_name.end()) out += cell(it->second);
    }
    for (const auto& [name, value] : context) {
      out += ',';
      out += quote(value);
    }
    for (const std::string& serving : serving_cells(report, p)) {
      out += ',';
      out += serving;
    }
    for (const std::string& budget : budget_cells(report, p)) {
      out += ',';
      out += budget;
    }
    out += "\n";
  }
  return out;
}

}  // namespace bsw
