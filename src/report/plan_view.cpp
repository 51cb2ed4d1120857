// `batchsweep plan` output: the plan JSON document and its console table.
#include "batchsweep/plan_view.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "batchsweep/json_depth.hpp"
#include "report/format.hpp"

namespace bsw {
namespace {

nlohmann::json memory_json(const MemoryBreakdown& m) {
  return {{"total_bytes", m.total_bytes()},
          {"parameters", m.parameters},
          {"master_weights", m.master_weights},
          {"gradients", m.gradients},
          {"optimizer_state", m.optimizer_state},
          {"saved_activations", m.saved_activations},
          {"transient", m.transient},
          {"workspace", m.workspace},
          {"data", m.data}};
}

std::string flops_text(double flops) {
  // "236 kFLOP", "20.0 GFLOP", "507 FLOP": the SI prefix joins the unit, a space before both.
  std::string number = report_format::human_rate(flops);
  std::string prefix;
  if (!number.empty() && std::isalpha(static_cast<unsigned char>(number.back())) != 0) {
    prefix = number.substr(number.size() - 1);
    number.pop_back();
  }
  return number + " " + prefix + "FLOP";
}

// The kinds of layer whose CUDA path can be chosen that the model has.
struct ModelPaths {
  bool attention = false, conv = false;
};
ModelPaths layer_kinds(const Graph& g) {
  return {g.has(OpKind::attention_core), g.has(OpKind::conv2d)};
}

// With --memory: whether the plan fits the budget (its total within the safety fraction of it). Memory
// grows with the batch, so that is every batch up to max_fit_batch.
bool fits_budget(const PlanSummary& s, const Plan& p) {
  return s.max_fit_batch && p.request.batch <= *s.max_fit_batch;
}

// "64x4": a split of an effective batch, "256x1" too (a row of --effective-batch shows how it makes N).
std::string split_text(int64_t micro_batch, int64_t accumulation) {
  return fmt::format("{}x{}", micro_batch, accumulation);
}

// A row's batch: "64", or with --effective-batch its split.
std::string batch_text(const PlanSummary& s, const Plan& p) {
  return s.effective_batch ? split_text(p.request.batch, p.request.accumulation)
                           : std::to_string(p.request.batch);
}

// Whether a card's largest fit is batchsweep's cap (2^24 samples a step; with --effective-batch, the whole N
// as the micro-batch), not an edge its memory sets.
bool card_at_cap(const PlanSummary& s, const PlanSummary::CardFit& c) {
  if (!c.max_fit_batch) return false;
  if (s.effective_batch) return *c.max_fit_batch == *s.effective_batch;
  return *c.max_fit_batch >= max_micro_batch(s.accumulation);
}

// Whether a fit of `fit` sequences stops at cuDNN's fused attention's limit (kCudnnSdpaMostSequences) rather
// than where memory alone sets it: the next batch is planned on our explicit attention, which keeps its
// probabilities, and fits no more (vit-base inference in an H200's memory fits 65535 and so would a 200 GiB
// card).
// Whether the plans are the CUDA backend's on cuDNN's fused attention, for a model with attention: up to
// kCudnnSdpaMostSequences sequences; past it, our explicit attention's.
bool plans_fused_attention(const PlanSummary& s) {
  return !s.plans.empty() && s.plans.front().request.backend == BackendKind::cuda &&
         s.plans.front().request.paths.attention == AttentionPath::cudnn_sdpa &&
         layer_kinds(*s.graph).attention;
}

bool attention_limits(const PlanSummary& s, int64_t fit) {
  return fit == kCudnnSdpaMostSequences && plans_fused_attention(s);
}

// " with input.sequence_length=1024, layers[1].repeat=24", or empty without --set.
std::string overrides_clause(const std::vector<std::string>& overrides) {
  std::string out;
  for (const std::string& o : overrides)
    out += fmt::format("{}{}", out.empty() ? " with " : ", ", printable_text(o));
  return out;
}

}  // namespace

nlohmann::json plan_to_json(const PlanSummary& s) {
  const Graph& g = *s.graph;
  nlohmann::json doc = {
      {"model", g.model_name},
      {"parameters", g.parameters},
      {"flops_per_sample", {{"forward", g.forward_flops_per_sample}, {"train", g.train_flops_per_sample}}}};
  if (!s.model_overrides.empty()) doc["model_overrides"] = s.model_overrides;
  if (!s.plans.empty()) {
    const PlanRequest& r = s.plans.front().request;
    doc["precision"] = to_string(r.precision);
    doc["mode"] = to_string(r.mode);
    // --effective-batch: each split has its own accumulation (in its point), and the step's N is here.
    if (s.effective_batch) {
      doc["accumulation"] = nullptr;
      doc["effective_batch"] = *s.effective_batch;
    } else {
      doc["accumulation"] = r.accumulation;
    }
    doc["backend"] = to_string(r.backend);
    // The optimizer whose state the plan holds (the model config's; a preset's may be SGD).
    if (r.mode == Mode::train) doc["optimizer"] = to_string(g.optimizer.type);
    doc["checkpointing"] = r.checkpointing;
    if (r.checkpointing && r.checkpoint_blocks > 0) doc["checkpoint_blocks"] = r.checkpoint_blocks;
    // A path for a kind of layer the model does not have is null: nothing runs on it.
    const ModelPaths has = layer_kinds(g);
    if (r.backend == BackendKind::cuda)
      doc["paths"] = {
          {"attention", has.attention ? nlohmann::json(to_string(r.paths.attention)) : nlohmann::json()},
          {"conv", has.conv ? nlohmann::json(to_string(r.paths.conv)) : nlohmann::json()}};
  }
  nlohmann::json points = nlohmann::json::array();
  for (size_t i = 0; i < s.plans.size(); ++i) {
    const Plan& p = s.plans[i];
    nlohmann::json point = {{"batch", p.request.batch},
                            {"accumulation", p.request.accumulation},
                            {"effective_batch", p.request.batch * p.request.accumulation},
                            {"flops_per_step", p.flops_per_step},
                            {"memory", memory_json(p.memory)}};
    // Checkpointing's extra work, not in flops_per_step (model FLOPs): the blocks' forward again.
    if (p.request.checkpointing)
      point["recompute_flops_per_step"] = p.recompute_flops_per_sample *
                                          static_cast<double>(p.request.batch) *
                                          static_cast<double>(p.request.accumulation);
    if (s.memory_bytes) point["fits"] = fits_budget(s, p);
    if (i < s.blocks_to_fit.size() && s.blocks_to_fit[i].asked)
      point["checkpoint_blocks_to_fit"] =
          s.blocks_to_fit[i].blocks ? nlohmann::json(*s.blocks_to_fit[i].blocks) : nlohmann::json(nullptr);
    if (s.with_buffers) {
      nlohmann::json buffers = nlohmann::json::array();
      for (const BufferSpec& b : p.buffers) {
        nlohmann::json buffer = {{"name", b.name},
                                 {"category", to_string(b.category)},
                                 {"dtype", to_string(b.dtype)},
                                 {"elements", b.elements},
                                 {"bytes", b.bytes}};
        // A view into the recompute arena: its bytes are the arena's, counted there.
        if (b.is_view()) {
          buffer["within"] = b.within;
          buffer["offset"] = b.offset;
        }
        // An op's buffer: the config layer it came from (ops[i] numbers the lowered ops, not the layers).
        if (b.op >= 0 && static_cast<size_t>(b.op) < g.ops.size()) {
          buffer["layer"] = g.ops[static_cast<size_t>(b.op)].path;
          buffer["op"] = to_string(g.ops[static_cast<size_t>(b.op)].kind);
        }
        buffers.push_back(std::move(buffer));
      }
      point["buffers"] = std::move(buffers);
    }
    points.push_back(std::move(point));
  }
  doc["points"] = std::move(points);
  if (!s.cards.empty()) {
    nlohmann::json cards = nlohmann::json::array();
    for (const PlanSummary::CardFit& c : s.cards) {
      nlohmann::json card = {
          {"name", c.name},
          {"memory_bytes", c.memory_bytes},
          {"max_fit_batch", c.max_fit_batch ? nlohmann::json(*c.max_fit_batch) : nlohmann::json(nullptr)},
          {"peak_tflops", c.peak_tflops ? nlohmann::json(*c.peak_tflops) : nlohmann::json(nullptr)},
          {"memory_bandwidth_gbps", c.memory_bandwidth_gbps},
          {"compute_capability", c.compute_capability}};
      if (s.effective_batch)
        card["max_fit_accumulation"] =
            c.max_fit_batch ? nlohmann::json(*s.effective_batch / *c.max_fit_batch) : nlohmann::json(nullptr);
      // As the one card's: a fit at the cap is every batch batchsweep plans, not an edge memory sets.
      card["memory_limits_batch"] = !card_at_cap(s, c);
      if (c.max_fit_batch && !s.effective_batch && attention_limits(s, *c.max_fit_batch))
        card["attention_limits_batch"] = true;
      cards.push_back(std::move(card));
    }
    doc["safety_fraction"] = kMemorySafetyFraction;
    doc["cards"] = std::move(cards);
  }
  if (s.memory_bytes) {
    doc["memory_bytes"] = *s.memory_bytes;
    doc["memory_card"] = s.memory_card.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.memory_card);
    doc["safety_fraction"] = kMemorySafetyFraction;
    doc["max_fit_batch"] = s.max_fit_batch ? nlohmann::json(*s.max_fit_batch) : nlohmann::json(nullptr);
    if (s.max_fit_with_checkpointing) doc["max_fit_batch_with_checkpointing"] = *s.max_fit_with_checkpointing;
    if (s.effective_batch) {
      // The split with the largest micro-batch that fits: its accumulation, and the N it makes.
      const int64_t n = *s.effective_batch;
      doc["max_fit_accumulation"] =
          s.max_fit_batch ? nlohmann::json(n / *s.max_fit_batch) : nlohmann::json(nullptr);
      doc["max_fit_effective_batch"] = s.max_fit_batch ? nlohmann::json(n) : nlohmann::json(nullptr);
      doc["memory_limits_batch"] = !(s.max_fit_batch && *s.max_fit_batch == n);
      return doc;
    }
    // With accumulation the fit is of a micro-batch: the step it makes, for a script that wants it.
    if (s.accumulation > 1)
      doc["max_fit_effective_batch"] =
          s.max_fit_batch ? nlohmann::json(*s.max_fit_batch * s.accumulation) : nlohmann::json(nullptr);
    // max_fit_batch 16777216 is "every batch batchsweep plans fits", not a fit edge at 2^24: said apart.
    // With accumulation the cap is 2^24 samples per step: max_micro_batch micro-batches.
    // And where the plan's 2^62-byte limit, not the memory, stops the batch (--memory of exabytes).
    doc["memory_limits_batch"] =
        !(s.max_fit_batch && *s.max_fit_batch >= max_micro_batch(s.accumulation)) && !s.max_fit_at_plan_limit;
    if (s.max_fit_batch && attention_limits(s, *s.max_fit_batch)) doc["attention_limits_batch"] = true;
  }
  return doc;
}

// The --memory budget as said: "79.6 GiB", and for a card named "79.1 GiB (H100 SXM: 81008 MiB, as CUDA
// reports it)".
// A memory budget to a tenth of a GiB, rounded down: the three digits of human_bytes would round 139.8 GiB
// to "140 GiB", which given as --memory plans for 0.2 GiB the card does not have (and 22518 MiB, an L4, is
// 21.99 GiB). Under a GiB, human_bytes.
static std::string budget_text(uint64_t bytes) {
  if (bytes < (uint64_t{1} << 30)) return report_format::human_bytes(bytes);
  const uint64_t tenths = static_cast<uint64_t>((static_cast<unsigned __int128>(bytes) * 10) >> 30);
  return fmt::format("{}.{} GiB", tenths / 10, tenths % 10);
}

// What the 5% the plans leave is for: on a GPU, what no plan holds; on the CPU, the process and its
// allocator.
static std::string headroom_text(const PlanSummary& s) {
  return !s.plans.empty() && s.plans.front().request.backend == BackendKind::cpu
             ? "the process itself, allocator fragmentation"
             : "the CUDA context, library modules, allocator fragmentation";
}

static std::string memory_text(const PlanSummary& s) {
  // A size plans the backend asked for, the CPU's without --backend cuda: said beside the answer, which a
  // GPU's buyer reads (the CPU's 16-bit plans hold fp32 copies of every operand, several times a GPU's).
  if (s.memory_card.empty())
    return !s.plans.empty() && s.plans.front().request.backend == BackendKind::cpu
               ? report_format::human_bytes(*s.memory_bytes) + " on the CPU backend"
               : report_format::human_bytes(*s.memory_bytes);  // the size as given
  return fmt::format("{} ({}: {} MiB, as CUDA reports it)", budget_text(*s.memory_bytes), s.memory_card,
                     *s.memory_bytes >> 20);
}

// Why not even batch 1 fits: what batch 1 needs, and how much of it the model's state takes (parameters,
// master weights, gradients, optimizer state: the same at every batch). Where the state alone is over the
// budget, no batch or accumulation can help. Empty where batch 1 was not planned.
static const Plan* batch_one_plan(const PlanSummary& s) {
  const auto one =
      std::find_if(s.plans.begin(), s.plans.end(), [](const Plan& p) { return p.request.batch == 1; });
  return one == s.plans.end() || !s.memory_bytes ? nullptr : &*one;
}
static uint64_t state_bytes(const MemoryBreakdown& m) {
  return m.parameters + m.master_weights + m.gradients + m.optimizer_state;
}
// Where the model's state alone is over the budget: no checkpointing helps either.
static bool state_over_budget(const PlanSummary& s) {
  const Plan* one = batch_one_plan(s);
  return one != nullptr && static_cast<double>(state_bytes(one->memory)) >
                               static_cast<double>(*s.memory_bytes) * kMemorySafetyFraction;
}
static std::string batch_one_needs(const PlanSummary& s) {
  const Plan* one = batch_one_plan(s);
  if (one == nullptr) return {};
  const MemoryBreakdown& m = one->memory;
  const uint64_t state = state_bytes(m);
  return fmt::format(
      ": batch 1 needs {}, of which {} is the model's state (parameters{}{}{}), the same at every batch{}",
      report_format::human_bytes(m.total_bytes()), report_format::human_bytes(state),
      m.master_weights > 0 ? ", master weights" : "", m.gradients > 0 ? ", gradients" : "",
      m.optimizer_state > 0 ? ", optimizer state" : "",
      state_over_budget(s)
          ? ", and alone over the budget: no batch or accumulation fits (a card with more memory, or a "
            "smaller model, does; in training a 16-bit precision holds more state, its fp32 master weights "
            "beside the 16-bit ones)"
          : "");
}

// The title's clause for --checkpointing: what is recomputed and what it costs.
std::string checkpointing_text(const Graph& g, const Plan& plan) {
  const std::vector<int> ends = blocks_ending(g, plan.request);
  const auto recomputed = std::count_if(ends.begin(), ends.end(), [](int k) { return k >= 0; });
  const std::vector<bool> checkpointed = checkpointed_blocks(g, plan.request);
  const auto kept = static_cast<size_t>(std::count(checkpointed.begin(), checkpointed.end(), true));
  const size_t n = g.blocks.size();
  const double flops = plan.recompute_flops_per_sample;
  const std::string cost =
      fmt::format("+{} per sample, {:.0f}% more than the training FLOPs", flops_text(flops),
                  g.train_flops_per_sample > 0 ? 100.0 * flops / g.train_flops_per_sample : 0.0);
  // --checkpoint-blocks N: the first N, in forward order, of the blocks that backward reaches recompute;
  // blocks before every layer that learns, which it never reaches, keep only their outputs too (nothing reads
  // the rest); the others keep all.
  if (kept < n) {
    const auto chosen = static_cast<size_t>(recomputed);
    const size_t unreached = kept - chosen, rest = n - kept;
    return fmt::format(
        "\nactivation checkpointing (--checkpoint-blocks {}): {} keep{} only {} output{} and run{} forward "
        "again in backward ({}){}; the other {} keep{} every activation",
        plan.request.checkpoint_blocks,
        chosen == 1 ? std::string("the first block in forward order")
                    : fmt::format("the first {} blocks in forward order", chosen),
        chosen == 1 ? "s" : "", chosen == 1 ? "its" : "their", chosen == 1 ? "" : "s", chosen == 1 ? "s" : "",
        cost,
        unreached == 0 ? std::string()
                       : fmt::format("; {} before every layer that learns keep{} only {} output{} too",
                                     unreached, unreached == 1 ? "s" : "", unreached == 1 ? "its" : "their",
                                     unreached == 1 ? "" : "s"),
        rest, rest == 1 ? "s" : "");
  }
  std::string text =
      fmt::format("\nactivation checkpointing: {} block{} keep{} only {} output{}", n, n == 1 ? "" : "s",
                  n == 1 ? "s" : "", n == 1 ? "its" : "their", n == 1 ? "" : "s");
  if (recomputed == static_cast<std::ptrdiff_t>(n))
    return text + fmt::format(" and run{} forward again in backward ({})", n == 1 ? "s" : "", cost);
  return text + fmt::format(
                    "; {} of them run{} forward again in backward ({}), the rest come before every "
                    "layer that learns",
                    recomputed, recomputed == 1 ? "s" : "", cost);
}

// "checkpointing the fewest blocks: batch 256 fits with --checkpoint-blocks 7 of 12 (+14% FLOPs), 512 with 12
// (+24%), 1024 not with any of 1 to 12": the fewest blocks for each batch that does not fit; empty where none
// was asked.
std::string blocks_to_fit_line(const PlanSummary& s) {
  std::vector<std::string> pieces;
  for (size_t i = 0; i < s.blocks_to_fit.size() && i < s.plans.size(); ++i) {
    const PlanSummary::BlocksToFit& fit = s.blocks_to_fit[i];
    if (!fit.asked) continue;
    const std::string batch = batch_text(s, s.plans[i]);
    if (!fit.blocks) {
      pieces.push_back(fmt::format("{} not with any of 1 to {}", pieces.empty() ? "batch " + batch : batch,
                                   s.recomputable_blocks));
      break;  // larger batches need more still
    }
    pieces.push_back(pieces.empty()
                         ? fmt::format("batch {} fits with --checkpoint-blocks {} of {} (+{:.0f}% FLOPs)",
                                       batch, *fit.blocks, s.recomputable_blocks, fit.recompute_pct)
                         : fmt::format("{} with {} (+{:.0f}%)", batch, *fit.blocks, fit.recompute_pct));
  }
  if (pieces.empty()) return {};
  return fmt::format("checkpointing the fewest blocks: {}\n", fmt::join(pieces, ", "));
}

std::string format_plan_table(const PlanSummary& s) {
  using report_format::Align;
  using report_format::human_bytes;
  const Graph& g = *s.graph;
  std::string out = fmt::format("model {}{}: {} parameters, {} per sample forward, {} per sample training\n",
                                g.model_name, overrides_clause(s.model_overrides), g.parameters,
                                flops_text(g.forward_flops_per_sample), flops_text(g.train_flops_per_sample));
  if (!s.plans.empty()) {
    const PlanRequest& r = s.plans.front().request;
    out += fmt::format("{} {} on {}, ", to_string(r.precision), to_string(r.mode), to_string(r.backend));
    out += s.effective_batch
               ? fmt::format("effective batch {} (micro-batch x accumulation)", *s.effective_batch)
               : fmt::format("accumulation {}", r.accumulation);
    // The paths of the layers the model has.
    const ModelPaths has = layer_kinds(g);
    if (r.backend == BackendKind::cuda && has.attention)
      out += fmt::format("; attention {}", to_string(r.paths.attention));
    if (r.backend == BackendKind::cuda && has.conv) out += fmt::format("; conv {}", to_string(r.paths.conv));
    // As the run's title says it: 16 bits on the CPU are storage only, and the math's fp32 copies are planned
    // (so such a plan may be larger than fp32's).
    if (r.backend == BackendKind::cpu && (r.precision == Precision::bf16 || r.precision == Precision::fp16))
      out += " (16-bit storage, fp32 math on the CPU: its fp32 operands are in the workspace)";
    if (r.backend == BackendKind::cpu && r.precision == Precision::tf32)
      out += " (tf32 runs as fp32 on the CPU)";
    // The optimizer whose state is planned: a preset's may be SGD where a reader assumed AdamW.
    if (r.mode == Mode::train)
      out += g.optimizer.type == OptimizerType::sgd
                 ? fmt::format("; optimizer sgd{}", g.optimizer.momentum > 0 ? " with momentum" : "")
                 : fmt::format("; optimizer {}", to_string(g.optimizer.type));
    if (r.checkpointing) out += checkpointing_text(g, s.plans.front());
    out += "\n\n";
  }
  report_format::TextTable t;
  t.headers = {"batch",     "params",    "master", "grads", "optimizer", "activations",
               "transient", "workspace", "data",   "total", "FLOP/step"};
  // With accumulation, the effective batch each micro-batch makes (what the optimizer step sees).
  // (With --effective-batch every split makes N, and its label says how: "64x4".)
  const bool accumulates = !s.effective_batch && !s.plans.empty() && s.plans.front().request.accumulation > 1;
  if (accumulates) t.headers.insert(t.headers.begin() + 1, "effective");
  // With --memory, whether each batch fits it (memory grows with the batch: up to max_fit_batch).
  const bool budget = s.memory_bytes.has_value();
  if (budget) t.headers.push_back("fits");
  t.align.assign(t.headers.size(), Align::right);
  for (const Plan& p : s.plans) {
    const MemoryBreakdown& m = p.memory;
    t.rows.push_back({batch_text(s, p), human_bytes(m.parameters), human_bytes(m.master_weights),
                      human_bytes(m.gradients), human_bytes(m.optimizer_state),
                      human_bytes(m.saved_activations), human_bytes(m.transient), human_bytes(m.workspace),
                      human_bytes(m.data), human_bytes(m.total_bytes()),
                      report_format::human_rate(p.flops_per_step)});
    if (accumulates)
      t.rows.back().insert(t.rows.back().begin() + 1,
                           std::to_string(p.request.batch * p.request.accumulation));
    if (budget) t.rows.back().push_back(fits_budget(s, p) ? "yes" : "no");
  }
  for (const std::string& line : report_format::render_lines(t)) out += line + "\n";
  if (s.with_buffers) {
    for (const Plan& p : s.plans) {
      out += fmt::format("\nbuffers at batch {}:\n", batch_text(s, p));
      report_format::TextTable b;
      b.headers = {"buffer", "category", "dtype", "elements", "bytes", "layer"};
      b.align = {Align::left, Align::left, Align::left, Align::right, Align::right, Align::left};
      for (const BufferSpec& buf : p.buffers) {
        const bool of_op = buf.op >= 0 && static_cast<size_t>(buf.op) < g.ops.size();
        const std::string layer = of_op ? fmt::format("{} ({})", g.ops[static_cast<size_t>(buf.op)].path,
                                                      to_string(g.ops[static_cast<size_t>(buf.op)].kind))
                                        : std::string();
        // A view shares its arena's bytes: "in recompute" says where, and the table's totals count it once.
        b.rows.push_back(
            {buf.name, std::string(to_string(buf.category)), std::string(to_string(buf.dtype)),
             std::to_string(buf.elements),
             buf.is_view() ? fmt::format("({} in {})", buf.bytes, buf.within) : std::to_string(buf.bytes),
             layer});
      }
      for (const std::string& line : report_format::render_lines(b)) out += line + "\n";
    }
  }
  if (s.memory_bytes && s.effective_batch) {
    const int64_t n = *s.effective_batch;
    out += "\n";
    if (s.max_fit_batch && *s.max_fit_batch == n)
      out += fmt::format(
          "effective batch {} fits in {} as one batch ({}): no accumulation needed (plans may use {:.0f}% "
          "of it; the rest is headroom for what no plan holds: {})\n",
          n, memory_text(s), split_text(n, 1), kMemorySafetyFraction * 100, headroom_text(s));
    else if (s.max_fit_batch)
      out += fmt::format(
          "largest micro-batch that fits in {} for effective batch {}: {}{} (plans may use {:.0f}% of it; "
          "the rest is headroom for what no plan holds: {})\n",
          memory_text(s), n, split_text(*s.max_fit_batch, n / *s.max_fit_batch),
          s.max_fit_any && *s.max_fit_any > *s.max_fit_batch
              ? fmt::format("; micro-batches up to {} fit, but {} has no divisor from {} to {}",
                            *s.max_fit_any, n, *s.max_fit_batch + 1, *s.max_fit_any)
              : std::string(),
          kMemorySafetyFraction * 100, headroom_text(s));
    else
      out += fmt::format("not even micro-batch 1 ({}) fits in {} (plans may use {:.0f}% of it){}\n",
                         split_text(1, n), memory_text(s), kMemorySafetyFraction * 100, batch_one_needs(s));
  } else if (!s.cards.empty()) {
    // Each card's largest batch: the table a GPU shopper reads.
    const std::string precision =
        s.plans.empty() ? "" : std::string(to_string(s.plans.front().request.precision));
    const char* what = s.effective_batch    ? "largest micro-batch (split)"
                       : s.accumulation > 1 ? "largest micro-batch"
                                            : "largest batch";
    report_format::TextTable cards;
    cards.headers = {"card", "memory", what, precision + " TFLOP/s", "GB/s"};
    cards.align = {Align::left, Align::right, Align::right, Align::right, Align::right};
    bool capped = false, sdpa = false;
    for (const PlanSummary::CardFit& c : s.cards) {
      std::string fit = "none";
      if (c.max_fit_batch)
        fit = s.effective_batch ? split_text(*c.max_fit_batch, *s.effective_batch / *c.max_fit_batch)
                                : std::to_string(*c.max_fit_batch);
      // N has no divisor up to what fits: said, or a prime N reads as if only batch 1 fit.
      if (c.max_fit_batch && c.max_fit_any && *c.max_fit_any > *c.max_fit_batch &&
          *c.max_fit_any < *s.effective_batch)
        fit += fmt::format(" (up to {} fit)", *c.max_fit_any);
      if (card_at_cap(s, c)) {
        fit += " (cap)";
        capped = true;
      } else if (c.max_fit_batch && !s.effective_batch && attention_limits(s, *c.max_fit_batch)) {
        fit += " (sdpa)";
        sdpa = true;
      }
      cards.rows.push_back({c.name, budget_text(c.memory_bytes), fit,
                            c.peak_tflops ? fmt::format("{:g}", *c.peak_tflops) : std::string("—"),
                            fmt::format("{:g}", c.memory_bandwidth_gbps)});
    }
    out += fmt::format(
        "\n{} per card of configs/gpus.json (plans may use {:.0f}% of the memory CUDA reports; "
        "TFLOP/s dense, from the datasheet):\n",
        what, kMemorySafetyFraction * 100);
    for (const std::string& line : report_format::render_lines(cards)) out += line + "\n";
    // What the table cannot say in a cell: a dash is a mode the card lacks, and a card before Ampere is
    // one batchsweep can plan for but not run on.
    std::vector<std::string> lacking, older;
    for (const PlanSummary::CardFit& c : s.cards) {
      if (!c.peak_tflops) lacking.push_back(c.name);
      if (c.compute_capability > 0 && c.compute_capability < 8.0)
        older.push_back(fmt::format("{} ({:.1f})", c.name, c.compute_capability));
    }
    if (capped)
      out +=
          s.effective_batch
              ? fmt::format(
                    "(cap): the whole effective batch {} fits as one micro-batch: memory does not "
                    "limit it\n",
                    *s.effective_batch)
              : fmt::format("(cap): every batch batchsweep plans (up to {}) fits: memory does not limit it\n",
                            max_micro_batch(s.accumulation));
    if (sdpa)
      out += fmt::format(
          "(sdpa): cuDNN's fused attention runs at most {} sequences at once; a larger batch is planned on "
          "our "
          "explicit attention, which keeps its probabilities and does not fit: attention, not memory, stops "
          "it there\n",
          kCudnnSdpaMostSequences);
    if (!lacking.empty())
      out += fmt::format("— : {} {} no {} tensor-core mode\n", fmt::join(lacking, ", "),
                         lacking.size() == 1 ? "has" : "have", precision);
    if (!older.empty())
      out += fmt::format(
          "{}: compute capability below 8.0; batchsweep's CUDA backend runs on Ampere and newer, so {} a "
          "plan `run` cannot measure\n",
          fmt::join(older, ", "), older.size() == 1 ? "its row is" : "their rows are");
  } else if (s.memory_bytes) {
    out += "\n";
    const int64_t cap = max_micro_batch(s.accumulation);
    if (s.max_fit_batch && *s.max_fit_batch >= cap) {
      const std::string upto = s.accumulation > 1
                                   ? fmt::format("{} x accumulation {} = {} samples a step, within 2^24", cap,
                                                 s.accumulation, cap * s.accumulation)
                                   : std::to_string(kMaxBatch);
      out +=
          fmt::format("every batch batchsweep plans (up to {}) fits in {}: memory does not limit the batch\n",
                      upto, memory_text(s));
    } else if (s.max_fit_batch) {
      const std::string accumulated =
          s.accumulation > 1 ? fmt::format(" (a micro-batch: effective batch {} with accumulation {})",
                                           *s.max_fit_batch * s.accumulation, s.accumulation)
                             : std::string();
      if (s.max_fit_at_plan_limit)
        out += fmt::format(
            "largest batch that fits in {}: {}{}, the largest batch batchsweep can plan: at batch {} the "
            "plan "
            "passes 2^62 bytes, the most it holds (memory does not limit the batch there)\n",
            memory_text(s), *s.max_fit_batch, accumulated, *s.max_fit_batch + 1);
      else
        out += fmt::format(
            "largest batch that fits in {}: {}{} (plans may use {:.0f}% of it; the rest is headroom for "
            "what no plan holds: {})\n",
            memory_text(s), *s.max_fit_batch, accumulated, kMemorySafetyFraction * 100, headroom_text(s));
      // The fused attention stops at kCudnnSdpaMostSequences: past it the plan is our explicit attention's.
      if (attention_limits(s, *s.max_fit_batch))
        out += fmt::format(
            "({} is the most sequences cuDNN's fused attention runs at once: a larger batch is planned on "
            "our "
            "explicit attention, which keeps its probabilities and does not fit, so attention, not memory, "
            "stops the batch there)\n",
            kCudnnSdpaMostSequences);
      if (*s.max_fit_batch > kCudnnSdpaMostSequences && plans_fused_attention(s))
        out += fmt::format(
            "(batches past {} are planned on our explicit attention, which keeps its probabilities: cuDNN's "
            "fused attention runs at most {} sequences at once)\n",
            kCudnnSdpaMostSequences, kCudnnSdpaMostSequences);
      if (s.max_fit_with_checkpointing)
        out += fmt::format(
            "with --checkpointing: {} (each block keeps only its output and runs its forward again in "
            "backward)\n",
            *s.max_fit_with_checkpointing);
    } else {
      out += fmt::format("not even batch 1 fits in {} (plans may use {:.0f}% of it){}\n", memory_text(s),
                         kMemorySafetyFraction * 100, batch_one_needs(s));
    }
    // (Checkpointing keeps the state: where that alone is over, "not with any of 1 to 12" adds nothing.)
    if (s.max_fit_batch || !state_over_budget(s)) out += blocks_to_fit_line(s);
  }
  // 16-bit training is planned as the model in 16 bits with fp32 master weights and a fused loss, which is
  // not what most PyTorch jobs run: said where the answer is a batch to take.
  if (!s.plans.empty() && s.memory_bytes) {
    const PlanRequest& r = s.plans.front().request;
    if (r.mode == Mode::train && (r.precision == Precision::bf16 || r.precision == Precision::fp16))
      out += fmt::format(
          "this is {0} as DeepSpeed and Megatron train: the model in {0}, fp32 master weights, a fused loss; "
          "under autocast (Lightning's {1}-mixed, accelerate's mixed_precision=\"{0}\", transformers' "
          "{0}=True) the logits, loss and layernorms are fp32 and the peak larger than this plan's: measure "
          "it with the PyTorch peer (bench/peers/torch_sweep.py in the source tree) before taking the "
          "largest "
          "batch\n",
          to_string(r.precision), r.precision == Precision::bf16 ? "bf16" : "16");
  }
  return out;
}

}  // namespace bsw
