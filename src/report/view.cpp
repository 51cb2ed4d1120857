// Columns, marks, title and summary shared by the console and markdown printers; see view.hpp.
#include "report/view.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "batchsweep/analysis.hpp"
#include "batchsweep/json_depth.hpp"

namespace bsw::report_view {

namespace rf = report_format;

namespace {

struct Mark {
  const char* tag;
  std::string meaning;
  std::optional<int64_t> batch;
};

std::vector<Mark> marks_of(const Report& report) {
  const Analysis& a = report.analysis;
  // --saturation's percent, as the run (or analyze) held it: 95 unless it says a valid other.
  double saturation_pct = 95;
  if (report.settings.is_object())
    if (const auto it = report.settings.find("saturation_pct");
        it != report.settings.end() && it->is_number() && it->get<double>() > 0 && it->get<double>() <= 100)
      saturation_pct = it->get<double>();
  std::vector<Mark> marks = {
      {"\u25c0 knee", "the knee of the throughput curve", a.knee.batch},
      {"sat", fmt::format("the smallest batch within {:g}% of the best throughput", saturation_pct),
       a.saturation.batch},
      {"fit", "largest batch that ran (max fit)", a.max_fit.batch},
      {"best", "highest throughput", a.best_throughput.batch},
  };
  if (a.latency_slo) marks.push_back({"slo", "the latency SLO's batch", a.latency_slo->batch});
  if (a.energy_optimal) marks.push_back({"energy", "fewest joules per sample", a.energy_optimal->batch});
  if (a.serving)
    marks.push_back({"serve", "lowest request latency at the request rate", a.serving->best.batch});
  if (a.effective_batch_split) {
    marks.push_back({"split", "micro-batch x accumulation split to use", a.effective_batch_split->batch});
  }
  marks.push_back({"rec", "recommended", a.recommended.batch});
  return marks;
}

bool has_step_stats(const Point& p) {
  return p.status == PointStatus::ok && (p.step_ms.p50 > 0 || p.step_ms.p99 > 0);
}

std::string optional_cell(bool ok, const std::optional<double>& v,
                          const std::function<std::string(double)>& f) {
  return ok && v ? f(*v) : std::string(rf::kAbsent);
}

struct Column {
  std::string header;
  rf::Align align;
  std::function<std::string(const Point&)> cell;
};

template <class Pred>
bool any_point(const Report& r, Pred pred) {
  for (const auto& p : r.points) {
    if (pred(p)) return true;
  }
  return false;
}

// "batch 256", or with the run's accumulation "batch 256x32" (what to set: pasting 256 alone into --batch
// would change the effective batch).
using BatchText = std::function<std::string(int64_t)>;

std::string choice_line(const std::string& label, const BatchChoice& c, const BatchText& batch_text) {
  if (!c.batch && c.reason.empty()) return {};
  std::string line = label + ": " + (c.batch ? batch_text(*c.batch) : std::string("none"));
  if (c.batch && c.samples_per_second) line += ", " + rf::human_rate(*c.samples_per_second) + " samples/s";
  if (!c.reason.empty()) line += " \u2014 " + c.reason;
  return line;
}

std::string json_string(const nlohmann::json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string point_marks(const Report& report, const Point& point) {
  if (point.status != PointStatus::ok) return {};
  std::string out;
  for (const Mark& m : marks_of(report)) {
    if (m.batch && *m.batch == point.batch) {
      if (!out.empty()) out += ' ';
      out += m.tag;
    }
  }
  // Taken from an earlier run by run --resume: its numbers are that run's.
  if (!point.resumed_from.empty()) out += out.empty() ? "resumed" : " resumed";
  return out;
}

std::string marks_legend(const Report& report) {
  std::string out;
  for (const Mark& m : marks_of(report)) {
    const bool used = any_point(report, [&](const Point& p) {
      return m.batch && p.status == PointStatus::ok && p.batch == *m.batch;
    });
    if (!used) continue;
    out += (out.empty() ? "" : "; ") + std::string(m.tag) + " = " + m.meaning;
  }
  if (any_point(report, [](const Point& p) { return p.refinement; })) {
    out += (out.empty() ? "" : "; ") + std::string("* = added by the sweep (a refinement, an edge)");
  }
  if (any_point(report,
                [](const Point& p) { return p.status == PointStatus::ok && !p.resumed_from.empty(); })) {
    out += (out.empty() ? "" : "; ") +
           std::string(
               any_point(report, [](const Point& p) { return !p.resumed_from.empty() && !p.rounds.empty(); })
                   ? "resumed = taken from --resume, measured by an earlier run (with --rounds, its first "
                     "rounds; resumed_from in the JSON)"
                   : "resumed = taken from --resume, measured by an earlier run (resumed_from in the JSON)");
  }
  // What the millisecond columns time: a step, the whole batch, which a serving user would otherwise read as
  // one request's latency.
  if (any_point(report, has_step_stats)) {
    // Where a serving user may read a step as a request's latency (inference), where that is said.
    out += (out.empty() ? "" : "; ") +
           std::string(
               report_view::title(report).mode != "infer" ? "ms = one step, the whole batch"
               : report.analysis.serving
                   ? "ms = one step, the whole batch (a request's latency with queueing: the serving lines)"
                   : "ms = one step, the whole batch, not a request's latency with queueing (--request-rate "
                     "gives that)");
    if (any_point(report, [](const Point& p) { return !p.samples_ms.empty(); }))
      out += ", from the steps timed (steps)";
    if (any_point(report, [](const Point& p) { return p.noise_pct.has_value(); }))
      out += "; noise % = their stddev over their mean";
  }
  // The memory columns: the plan, and what the backend took (on the CPU its arena, which is the plan).
  if (any_point(report, [](const Point& p) { return p.memory.measured_bytes.has_value(); }))
    out += (out.empty() ? "" : "; ") +
           std::string(report.device.backend == "cuda"
                           ? "planned = the memory plan, measured = the device's own reading of the peak"
                           : "planned = the memory plan, measured = what the backend allocated");
  // What MFU is a fraction of: a spec sheet's peak, a calibration, or a script's.
  if (report.device.peak_flops && *report.device.peak_flops > 0 &&
      any_point(report, [](const Point& p) { return p.status == PointStatus::ok && p.mfu.has_value(); })) {
    out += (out.empty() ? "" : "; ") +
           fmt::format("MFU % = of the device peak, {:.4g} TFLOP/s{}", *report.device.peak_flops / 1e12,
                       report.device.peak_flops_source.empty() ? std::string()
                       // A script gives one peak, which its MFU takes whatever the precision.
                       : report.device.peak_flops_source == "script"
                           ? std::string(" (the script's, at every precision)")
                           : fmt::format(" ({})", report.device.peak_flops_source));
  }
  return out;
}

// The percentile a latency budget holds (settings.latency_percentile), where the report has a budget;
// else 99.
namespace {

// A positive, finite number at settings[key].
std::optional<double> positive_setting(const Report& report, const char* key) {
  if (!report.settings.is_object()) return std::nullopt;
  const auto it = report.settings.find(key);
  if (it == report.settings.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return v > 0 && std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

}  // namespace

std::optional<double> latency_budget_ms(const Report& report) {
  return positive_setting(report, "latency_slo_ms");
}

std::optional<double> price_per_hour(const Report& report) {
  return positive_setting(report, "price_per_hour");
}

bool lacks_batches(const Report& report) {
  return (report.state == "interrupted" || report.state == "in_progress") && !later_round_begun(report);
}

bool later_round_begun(const Report& report) {
  // The run's own word where it wrote one: a point --resume took may hold rounds of an earlier run, whose
  // round 1 says nothing of this run's batches.
  if (report.settings.is_object())
    if (const auto it = report.settings.find("rounds_begun");
        it != report.settings.end() && it->is_number_integer())
      return it->get<int64_t>() >= 2;
  return std::any_of(report.points.begin(), report.points.end(),
                     [](const Point& p) { return p.resumed_from.empty() && p.rounds.size() >= 2; });
}

double budget_percentile(const Report& report) {
  const nlohmann::json& s = report.settings;
  if (!latency_budget_ms(report)) return 99;
  if (!s.contains("latency_percentile") || !s["latency_percentile"].is_number()) return 99;
  const double pct = s["latency_percentile"].get<double>();
  return is_latency_percentile(pct) ? pct : 99;
}

// A step time in the budget's percentile column: three significant digits, and more where those would put it
// on the wrong side of the budget (p99 2.0223 ms against 2.022 ms reads "2.02", under it).
std::string budget_side_text(double ms, std::optional<double> budget) {
  std::string text = rf::sig3(ms);
  if (!budget) return text;
  const bool over = ms > *budget;
  // More decimals than sig3's, never fewer digits (0.5904 against 0.5904 reads "0.5904", not "0.6"; no
  // exponent: 12345.4 against 12345.3 reads "12345.4").
  const std::size_t point = text.find('.');
  const int sig3_decimals = point == std::string::npos ? 0 : static_cast<int>(text.size() - point - 1);
  for (int decimals = sig3_decimals + 1;
       decimals <= 9 && (std::strtod(text.c_str(), nullptr) > *budget) != over; ++decimals)
    text = fmt::format("{:.{}f}", ms, decimals);
  // Within a billionth of a millisecond of the budget: rounded toward the true side.
  if ((std::strtod(text.c_str(), nullptr) > *budget) != over)
    text = fmt::format("{:.9f}", over ? std::ceil(ms * 1e9) / 1e9 : std::floor(ms * 1e9) / 1e9);
  return text;
}

rf::TextTable point_table(const Report& report) {
  using rf::Align;
  const auto ok = [](const Point& p) { return p.status == PointStatus::ok; };
  std::vector<Column> columns;
  columns.push_back({"batch", Align::right,
                     [](const Point& p) { return std::to_string(p.batch) + (p.refinement ? "*" : ""); }});
  if (any_point(report, [](const Point& p) { return p.accumulation != 1; })) {
    columns.push_back({"accum", Align::right, [](const Point& p) { return std::to_string(p.accumulation); }});
    columns.push_back(
        {"eff batch", Align::right, [](const Point& p) { return std::to_string(p.effective_batch); }});
  }
  columns.push_back({"samples/s", Align::right, [&](const Point& p) {
                       return ok(p) ? rf::human_rate(p.samples_per_second) : std::string(rf::kAbsent);
                     }});
  if (any_point(report, [](const Point& p) { return p.tokens_per_second.has_value(); })) {
    columns.push_back({"tokens/s", Align::right, [&](const Point& p) {
                         return optional_cell(ok(p), p.tokens_per_second, rf::human_rate);
                       }});
  }
  if (any_point(report, has_step_stats)) {
    // The mean step is what samples/s divides the batch by: beside the percentiles, a rate checks by hand.
    columns.push_back({"mean ms", Align::right, [](const Point& p) {
                         return has_step_stats(p) && p.step_ms.mean > 0 ? rf::sig3(p.step_ms.mean)
                                                                        : std::string(rf::kAbsent);
                       }});
    // The column of the budget's percentile shows the digits that keep it on its side of the budget.
    const double pct = budget_percentile(report);
    const std::optional<double> budget = latency_budget_ms(report);
    const auto budget_of = [budget, pct](double column_pct) {
      return column_pct == pct ? budget : std::nullopt;
    };
    columns.push_back({"p50 ms", Align::right, [b = budget_of(50)](const Point& p) {
                         // A hand-made report may give one percentile and not the other: 0 is "not given".
                         return has_step_stats(p) && p.step_ms.p50 > 0 ? budget_side_text(p.step_ms.p50, b)
                                                                       : std::string(rf::kAbsent);
                       }});
    // The budget's percentile where it is neither p50 nor p99 (shown anyway): before p99 below it (p90, p95,
    // from the summary), after it above (p99.9, from the raw steps).
    const auto budget_column = [&columns, pct, budget] {
      columns.push_back(
          {fmt::format("{} ms", latency_name(pct)), Align::right, [pct, budget](const Point& p) {
             const std::optional<double> v = step_latency_ms(p, pct);
             return p.status == PointStatus::ok && v && *v > 0 ? budget_side_text(*v, budget)
                                                               : std::string(rf::kAbsent);
           }});
    };
    if (pct != 50 && pct < 99) budget_column();
    columns.push_back({"p99 ms", Align::right, [b = budget_of(99)](const Point& p) {
                         return has_step_stats(p) && p.step_ms.p99 > 0 ? budget_side_text(p.step_ms.p99, b)
                                                                       : std::string(rf::kAbsent);
                       }});
    if (pct > 99) budget_column();
    // How many steps the percentiles come from: a p99 of 12 steps is their largest but one, and reads like
    // one of 1000 otherwise (trtexec prints its iterations too).
    if (any_point(report, [](const Point& p) { return !p.samples_ms.empty(); }))
      columns.push_back({"steps", Align::right, [](const Point& p) {
                           return p.status == PointStatus::ok && !p.samples_ms.empty()
                                      ? std::to_string(p.samples_ms.size())
                                      : std::string(rf::kAbsent);
                         }});
  }
  if (any_point(report, [](const Point& p) { return p.noise_pct.has_value(); })) {
    columns.push_back({"noise %", Align::right, [&](const Point& p) {
                         return optional_cell(ok(p), p.noise_pct, [](double v) { return rf::fixed(v, 1); });
                       }});
  }
  if (any_point(report, [](const Point& p) { return p.tflops.has_value(); })) {
    columns.push_back(
        {"TFLOP/s", Align::right, [&](const Point& p) { return optional_cell(ok(p), p.tflops, rf::sig3); }});
  }
  if (any_point(report, [](const Point& p) { return p.mfu.has_value(); })) {
    columns.push_back({"MFU %", Align::right, [&](const Point& p) {
                         // One decimal, as a GPU's MFU reads; below 0.05% (a CPU, the scripted backend, a
                         // tiny model) three significant digits, so a measured MFU never reads 0.0.
                         return optional_cell(ok(p), p.mfu, [](double v) {
                           return v * 100 >= 0.05 || v == 0 ? rf::fixed(v * 100, 1) : rf::sig3(v * 100);
                         });
                       }});
  }
  if (any_point(report, [](const Point& p) { return p.memory.planned_bytes > 0; })) {
    columns.push_back({"planned", Align::right, [](const Point& p) {
                         return p.memory.planned_bytes > 0 ? rf::human_bytes(p.memory.planned_bytes)
                                                           : std::string(rf::kAbsent);
                       }});
  }
  if (any_point(report, [](const Point& p) { return p.memory.measured_bytes.has_value(); })) {
    columns.push_back({"measured", Align::right, [](const Point& p) {
                         return p.memory.measured_bytes ? rf::human_bytes(*p.memory.measured_bytes)
                                                        : std::string(rf::kAbsent);
                       }});
  }
  if (any_point(report, [&](const Point& p) { return !point_marks(report, p).empty(); })) {
    columns.push_back({"marks", Align::left, [&](const Point& p) { return point_marks(report, p); }});
  }
  if (any_point(report, [&](const Point& p) { return !ok(p); })) {
    columns.push_back({"status", Align::left, [](const Point& p) {
                         std::string s(to_string(p.status));
                         if (!p.reason.empty()) s += ": " + p.reason;
                         return s;
                       }});
  }

  rf::TextTable table;
  for (const auto& c : columns) {
    table.headers.push_back(c.header);
    table.align.push_back(c.align);
  }
  for (const auto& p : report.points) {
    std::vector<std::string> row;
    row.reserve(columns.size());
    for (const auto& c : columns) row.push_back(c.cell(p));
    table.rows.push_back(std::move(row));
  }
  return table;
}

int marks_column(const rf::TextTable& table) {
  for (size_t i = 0; i < table.headers.size(); ++i) {
    if (table.headers[i] == "marks") return static_cast<int>(i);
  }
  return -1;
}

std::string unfinished_line(const Report& report) {
  // Stopped in a later --rounds round: every batch is in; some lack their later rounds.
  if ((report.state == "interrupted" || report.state == "in_progress") && later_round_begun(report))
    return fmt::format(
        "{} during a later --rounds round: every batch has its first round, and the rounds line "
        "says which lack the later ones",
        report.state == "interrupted" ? "interrupted (state interrupted)" : "stopped (state in_progress)");
  if (report.state == "interrupted")
    return "interrupted before the sweep finished (state interrupted): the table and the analysis cover only "
           "the batches it measured";
  // A run that stopped on a fatal error keeps state in_progress (so --resume takes its points): not "still
  // running", which the run that just died would say of itself.
  if (report.state == "in_progress" &&
      std::any_of(report.warnings.begin(), report.warnings.end(),
                  [](const std::string& w) { return w.starts_with(kFatalErrorWarning); }))
    return "stopped on a fatal error before the sweep finished (state in_progress; see the warnings): the "
           "table and the analysis cover only the batches it measured";
  if (report.state == "in_progress")
    return "written while the sweep ran (state in_progress): it stopped before it finished, or is still "
           "running, and the table and the analysis cover only the batches measured by then";
  return {};
}

Title title(const Report& report) {
  Title t;
  if (auto it = report.settings.find("model"); it != report.settings.end()) {
    t.model = it->is_string()   ? it->get<std::string>()
              : it->is_object() ? json_string(*it, "name")
                                : std::string();
  }
  t.device = report.device.name;
  if (!report.device.backend.empty()) {
    t.device = t.device.empty() ? fmt::format("({})", report.device.backend)
                                : fmt::format("{} ({})", t.device, report.device.backend);
  }
  // run --memory-limit NAME: the device's speed in that card's memory.
  if (const std::string card = json_string(report.settings, "memory_limit_card"); !card.empty())
    t.device += fmt::format(", in {}'s memory", card);
  t.mode = json_string(report.settings, "mode");
  t.precision = json_string(report.settings, "precision");
  t.precision_shown = t.precision;
  if (const auto it = report.device.details.find("note");
      !t.precision.empty() && it != report.device.details.end() && it->is_string())
    t.precision_shown = fmt::format("{} ({})", t.precision, it->get<std::string>());
  // A report read back may hold anything in these strings (a hand-edited one, another tool's): what a
  // terminal would act on (ESC [ 2J) is shown, not sent.
  for (std::string* text : {&t.model, &t.device, &t.mode, &t.precision, &t.precision_shown})
    *text = printable_text(*text);
  const auto whole = [&](const char* key) -> std::optional<int64_t> {
    const auto it = report.settings.find(key);
    if (it == report.settings.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  if (const auto effective = whole("effective_batch")) {
    t.split_label = "Effective batch";
    t.split_value = std::to_string(*effective);
    // Timed as one device's share of a global batch (run --world-size N).
    if (const auto world = world_size_setting(report); world && *world > 1)
      t.split_value += fmt::format(" per device ({} in all across {})", *effective * *world, *world);
  } else if (const auto accumulation = whole("accumulation"); accumulation && *accumulation > 1) {
    t.split_label = "Accumulation";
    t.split_value = std::to_string(*accumulation);
  }
  if (const auto it = report.settings.find("checkpointing");
      it != report.settings.end() && it->is_boolean() && it->get<bool>())
    t.checkpointing = "activation checkpointing";
  if (const auto it = report.settings.find("checkpoint_blocks");
      !t.checkpointing.empty() && it != report.settings.end() && it->is_number_integer() &&
      it->get<int64_t>() > 0) {
    t.checkpoint_blocks = it->get<int64_t>();
    t.checkpointing +=
        fmt::format(", first {} block{}", t.checkpoint_blocks, t.checkpoint_blocks == 1 ? "" : "s");
  }
  for (const std::string& o : model_overrides(report))
    t.overrides += (t.overrides.empty() ? "" : ", ") + printable_text(o);
  return t;
}

std::optional<int64_t> effective_batch_setting(const Report& report) {
  if (!report.settings.is_object()) return std::nullopt;
  const auto n = report.settings.find("effective_batch");
  if (n == report.settings.end() || !n->is_number_integer() || n->get<int64_t>() < 1) return std::nullopt;
  return n->get<int64_t>();
}

std::optional<int64_t> world_size_setting(const Report& report) {
  if (!report.settings.is_object()) return std::nullopt;
  const auto n = report.settings.find("world_size");
  if (n == report.settings.end() || !n->is_number_integer() || n->get<int64_t>() < 1 ||
      n->get<int64_t>() > kMaxWorldSize)
    return std::nullopt;
  return n->get<int64_t>();
}

std::optional<int64_t> global_effective_batch(const Report& report) {
  const std::optional<int64_t> share = effective_batch_setting(report);
  if (!share) return std::nullopt;
  const int64_t world = world_size_setting(report).value_or(1);
  if (*share > std::numeric_limits<int64_t>::max() / world) return std::nullopt;  // a hand-made report's
  return *share * world;
}

std::vector<std::string> model_overrides(const Report& report) {
  std::vector<std::string> overrides;
  if (const auto it = report.settings.find("model_overrides"); it != report.settings.end() && it->is_array())
    for (const nlohmann::json& o : *it)
      if (o.is_string()) overrides.push_back(o.get<std::string>());
  return overrides;
}

std::string Title::split() const {
  if (split_label.empty()) return {};
  std::string label = split_label;
  label.front() = static_cast<char>(std::tolower(static_cast<unsigned char>(label.front())));
  return label + " " + split_value;
}

std::string rounds_line(const Report& report) {
  // settings.rounds as asked; a resumed report's points may hold more (or, asked 1, still hold rounds).
  const auto it = report.settings.find("rounds");
  int64_t asked = 1;
  if (it != report.settings.end() && it->is_number() && it->get<double>() >= 1 &&
      it->get<double>() == std::floor(it->get<double>()))
    asked = static_cast<int64_t>(it->get<double>());
  std::vector<std::string> apart, untested, short_of;
  std::string widest;
  double widest_pct = -1, apart_pct = -1;
  int64_t most = 0;
  bool all_compared = true;  // every ok point has two rounds or more to compare
  for (const Point& p : report.points) {
    if (p.status != PointStatus::ok) continue;
    const std::string label = batch_label(p.batch, p.accumulation);
    if (p.rounds.empty()) {  // measured once (by a sweep without --rounds, taken by --resume)
      if (asked > 1) short_of.push_back(fmt::format("{} (1 of {})", label, asked));
      all_compared = false;
      continue;
    }
    most = std::max<int64_t>(most, static_cast<int64_t>(p.rounds.size()));
    const auto ran = std::count_if(p.rounds.begin(), p.rounds.end(),
                                   [](const PointRound& r) { return r.status == PointStatus::ok; });
    if (ran < asked) short_of.push_back(fmt::format("{} ({} of {})", label, ran, asked));
    const std::optional<RoundsAgreement> agreement = rounds_agreement(p);
    if (!agreement) {
      all_compared = false;
      continue;
    }
    if (!agreement->p_value) {  // a round of one step: no spread to judge the difference by
      untested.push_back(label);
      continue;
    }
    if (agreement->disagree) {
      apart.push_back(label);
      apart_pct = std::max(apart_pct, agreement->spread_pct);
    }
    if (agreement->spread_pct > widest_pct) {
      widest_pct = agreement->spread_pct;
      widest = label;
    }
  }
  if (most < 2 && asked < 2) return {};
  std::string line = asked >= most || most < 2
                         ? fmt::format("rounds: {} per batch, the order reversed each round", asked)
                         : fmt::format(
                               "rounds: {} per batch asked, up to {} held (from the resumed report), the "
                               "order reversed each round",
                               asked, most);
  const auto batches = [](const std::vector<std::string>& labels) {
    return fmt::format("{} {}", labels.size() == 1 ? "batch" : "batches", fmt::join(labels, ", "));
  };
  if (!apart.empty()) {
    line += fmt::format("; the rounds of {} disagree, up to {:.1f}% apart (see the warnings)", batches(apart),
                        apart_pct);
  } else if (widest_pct >= 0) {
    line += fmt::format("; {} rounds agree within their noise (widest: batch {}, {:.1f}% apart)",
                        untested.empty() && all_compared ? "every batch's" : "the tested batches'", widest,
                        widest_pct);
  }
  if (!untested.empty())
    line += fmt::format("; {} had a round of one step, too few to compare", batches(untested));
  if (!short_of.empty()) line += fmt::format("; fewer rounds ran at {}", batches(short_of));
  return line;
}

std::vector<std::string> summary_lines(const Report& report) {
  const Analysis& a = report.analysis;
  std::vector<std::string> lines;
  // The accumulation a batch ran with: N / batch in an effective-batch sweep, else the run's --accumulation.
  const auto setting = [&](const char* key) -> int64_t {
    const auto it = report.settings.find(key);
    return it != report.settings.end() && it->is_number_integer() ? it->get<int64_t>() : 0;
  };
  const int64_t effective = setting("effective_batch"), accumulation = setting("accumulation");
  // The point's own accumulation where one point has that batch (a settings value could disagree with the
  // points); else N / batch for the splits of N, or the run's --accumulation.
  const BatchText batch_text = [&](int64_t batch) {
    const Point* only = nullptr;
    int found = 0;
    for (const Point& p : report.points)
      if (p.batch == batch && found++ == 0) only = &p;
    int64_t steps = std::max<int64_t>(accumulation, 1);
    if (found == 1)
      steps = only->accumulation;
    else if (effective > 0)
      steps = batch > 0 && effective % batch == 0 ? effective / batch : 1;
    return "batch " + batch_label(batch, steps);
  };
  // How --batch auto or --effective-batch chose what to measure (and what it left out).
  // Re-analyzed, it is what the run measured, under the run's budget: said as such beside the new answer.
  if (const std::string search = json_string(report.settings, "search"); !search.empty())
    lines.push_back((report.settings.is_object() && report.settings.contains("analyzed") ? "search (as run): "
                                                                                         : "search: ") +
                    search);
  if (std::string rounds = rounds_line(report); !rounds.empty()) lines.push_back(std::move(rounds));
  if (a.knee.batch || !a.knee.reason.empty()) {
    std::string line = "knee: " + (a.knee.batch ? batch_text(*a.knee.batch) : std::string("none"));
    if (a.knee.batch && a.knee.range_low && a.knee.range_high && a.knee.confidence == "range") {
      // Equal ends: the knee never moves, only vanishes under noise (the reason says how often).
      line += *a.knee.range_low == *a.knee.range_high
                  ? std::string(" (not stable)")
                  : " (range " + std::to_string(*a.knee.range_low) + "\u2013" +
                        std::to_string(*a.knee.range_high) + ")";
    } else if (a.knee.batch && !a.knee.confidence.empty()) {
      line += " (" + a.knee.confidence + ")";
    }
    if (!a.knee.reason.empty()) line += " \u2014 " + a.knee.reason;
    lines.push_back(std::move(line));
  }
  const std::pair<const char*, const BatchChoice*> choices[] = {
      {"saturation", &a.saturation},
      {"max fit", &a.max_fit},
      {"best throughput", &a.best_throughput},
      // With a rate the budget holds requests too (serving, below): this line is a step's alone.
      {a.serving ? "latency SLO, a step alone (no queue)" : "latency SLO",
       a.latency_slo ? &*a.latency_slo : nullptr},
      {"energy optimal", a.energy_optimal ? &*a.energy_optimal : nullptr},
      {"effective batch split", a.effective_batch_split ? &*a.effective_batch_split : nullptr},
  };
  // Where nothing ran ok every choice is none for one reason: a long one (an over_limit's whole text) is said
  // once, on the first line, and the others point to it. The JSON keeps each reason whole.
  std::string none_reason, none_label;
  const auto none_again = [&](const std::string& label,
                              const std::string& reason) -> std::optional<std::string> {
    if (reason.size() < 80) return std::nullopt;  // a short one reads as well again
    if (none_reason.empty()) {
      none_reason = reason;
      none_label = label;
      return std::nullopt;
    }
    if (reason != none_reason) return std::nullopt;
    return fmt::format("{}: none \u2014 as {}, above", label, none_label);
  };
  for (const auto& [label, choice] : choices) {
    if (!choice) continue;
    if (!choice->batch)
      if (std::optional<std::string> again = none_again(label, choice->reason)) {
        lines.push_back(std::move(*again));
        continue;
      }
    if (std::string line = choice_line(label, *choice, batch_text); !line.empty())
      lines.push_back(std::move(line));
  }
  if (a.serving)
    lines.push_back(
        fmt::format("serving: {} — {}",
                    a.serving->best.batch ? "max batch " + std::to_string(*a.serving->best.batch) : "none",
                    a.serving->best.reason));
  if (!a.recommended.batch && !a.serving)
    if (std::optional<std::string> again = none_again("recommended", a.recommended.why)) {
      lines.push_back(std::move(*again));
      return lines;
    }
  if (a.recommended.batch || !a.recommended.why.empty()) {
    std::string line =
        "recommended: " +
        (a.recommended.batch ? "batch " + std::to_string(*a.recommended.batch) : std::string("none"));
    // With accumulation, what to set: the micro-batch and the accumulation steps.
    if (a.recommended.batch && a.recommended_accumulation && *a.recommended_accumulation > 1)
      line += fmt::format(" \u00d7 accumulation {} (effective batch {})", *a.recommended_accumulation,
                          *a.recommended.batch * *a.recommended_accumulation);
    if (!a.recommended.why.empty()) line += " \u2014 " + a.recommended.why;
    const std::optional<double> price = price_per_hour(report);
    if (a.recommended_cost_per_million_samples)
      line +=
          a.serving && a.serving->best.batch == a.recommended.batch &&
                  rf::is_serving_cost(*a.recommended_cost_per_million_samples, price, a.serving->request_rate)
              ? fmt::format(
                    "; ${:.4g} per million requests served at {} requests/s (the card paid for "
                    "busy or idle)",
                    *a.recommended_cost_per_million_samples, rf::sig3(a.serving->request_rate))
              : fmt::format("; ${:.4g} per million samples", *a.recommended_cost_per_million_samples);
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string serving_heading(const Report& report) {
  if (!report.analysis.serving) return {};
  const Serving& s = *report.analysis.serving;
  // --request-rate max: the rate is a search's, the most found within the budget.
  std::string searched;
  if (s.most_within_budget) {
    const std::optional<double> budget_ms = latency_budget_ms(report);
    const std::string budget = budget_ms
                                   ? fmt::format("{:g} ms {}", *budget_ms, latency_name(s.latency_percentile))
                                   : std::string("latency");
    searched = s.unserved_above && s.best.batch
                   ? fmt::format(
                         ", the most found within the {} budget (to {:g}%; at {} requests/s no max "
                         "batch is known to keep it)",
                         budget, kServingRateTolerance * 100, rf::sig3(*s.unserved_above))
                   : fmt::format(": no rate found within the {} budget; this is the last rate tried", budget);
  }
  // A point that kept no steps serves at its mean step (a hand-made or trimmed report).
  const std::vector<int64_t> mean_only = serving_mean_only_batches(report.points);
  const std::string source =
      mean_only.empty()
          ? std::string("the measured steps")
          : fmt::format("the measured steps and, for batch{} {}, which kept none, the mean step alone",
                        mean_only.size() > 1 ? "es" : "", fmt::join(mean_only, ", "));
  // Batches too large to simulate request by request are not rows.
  const std::vector<int64_t> above = serving_unsimulated_batches(report.points);
  const std::string left_out =
      above.empty() ? std::string()
                    : fmt::format("; max batch{} {} not simulated, past {} requests a step",
                                  above.size() > 1 ? "es" : "", fmt::join(above, ", "), kServingMostMaxBatch);
  // Rows that did not settle at first ran again with more requests.
  int64_t most = s.requests;
  for (const ServingBatch& b : s.batches) most = std::max(most, b.requests);
  const std::string requests =
      most > s.requests ? fmt::format("{} requests ({} where a max batch needed more)", s.requests, most)
                        : fmt::format("{} requests", s.requests);
  return fmt::format(
      "serving {} requests/s{} (simulated from {}: {} arriving at random, one sample each; a dynamic "
      "batcher{}; a step runs as the smallest swept batch that holds it{}):",
      rf::sig3(s.request_rate), searched, source, requests,
      s.max_queue_delay_ms > 0
          ? fmt::format(" that holds a request up to {:g} ms to fill a batch", s.max_queue_delay_ms)
          : std::string(),
      left_out);
}

rf::TextTable serving_table(const Report& report) {
  rf::TextTable t;
  if (!report.analysis.serving) return t;
  const Serving& s = *report.analysis.serving;
  const std::string pct = latency_name(s.latency_percentile);
  // At p50 the percentile's column is the p50's.
  const bool median = s.latency_percentile == 50;
  // "req": a request's latency, queueing included, not the step table's step time.
  t.headers = {"max batch",  "capacity/s",         "busy %",    "per step", "req mean ms",
               "req p50 ms", "req " + pct + " ms", "\u00b1 ms", "marks"};
  t.align = {rf::Align::right, rf::Align::right, rf::Align::right, rf::Align::right, rf::Align::right,
             rf::Align::right, rf::Align::right, rf::Align::right, rf::Align::left};
  if (median) {
    t.headers.erase(t.headers.begin() + 5);
    t.align.erase(t.align.begin() + 5);
  }
  const auto cell = [](const std::optional<double>& v, const std::function<std::string(double)>& f) {
    return v ? f(*v) : std::string(rf::kAbsent);
  };
  const auto sig = [](double v) { return rf::sig3(v); };
  for (const ServingBatch& b : s.batches) {
    std::string mark;
    if (b.saturated) {
      mark = "saturated: the rate is at or above its capacity";
    } else if (!b.settled) {
      const bool near = s.request_rate >= kServingNearCapacity * b.capacity_per_second;
      const double steps_each =
          static_cast<double>(b.timed_steps) / static_cast<double>(std::max<int64_t>(s.replications, 1));
      const bool wanders = steps_each < serving_relaxation_steps(s.request_rate, b.capacity_per_second);
      mark = b.timed_steps < kServingMinSteps
                 ? fmt::format("unsettled: {} steps served the timed requests", b.timed_steps)
             : wanders ? fmt::format(
                             "unsettled: at {}% of its capacity the queue wanders for about {} steps, longer "
                             "than each replication ran ({})",
                             rf::fixed(100.0 * s.request_rate / b.capacity_per_second, 0),
                             rf::sig3(serving_relaxation_steps(s.request_rate, b.capacity_per_second)),
                             rf::sig3(steps_each))
             : near ? fmt::format(
                          "unsettled: its latency is not known to {:g}% in {} requests, and so near "
                          "its capacity the simulation does not run longer",
                          kServingMaxRelativeError * 100, b.requests)
                    : fmt::format("unsettled: its latency is not known to {:g}% in {} requests",
                                  kServingMaxRelativeError * 100, b.requests);
    } else if (s.best.batch && *s.best.batch == b.batch) {
      mark = "serve";
    }
    std::vector<std::string> cells = {std::to_string(b.batch),
                                      rf::human_rate(b.capacity_per_second),
                                      cell(b.utilization, [](double v) { return rf::fixed(v * 100.0, 0); }),
                                      cell(b.mean_batch, sig),
                                      cell(b.latency_mean_ms, sig),
                                      cell(b.latency_p50_ms, sig),
                                      cell(b.latency_ms, sig),
                                      cell(b.latency_se_ms, sig),
                                      mark};
    if (median) cells.erase(cells.begin() + 5);
    t.rows.push_back(std::move(cells));
  }
  return t;
}

}  // namespace bsw::report_view
