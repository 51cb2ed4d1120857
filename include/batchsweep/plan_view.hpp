// Views of plans for `batchsweep plan`: the JSON document (schema in README "plan JSON") and the console
// table.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "batchsweep/plan.hpp"

namespace bsw {

struct PlanSummary {
  const Graph* graph = nullptr;
  // --set PATH=VALUE as given: the model is the config with them (its name stays the config's).
  std::vector<std::string> model_overrides;
  std::vector<Plan> plans;               // one per batch, sorted by batch
  std::optional<uint64_t> memory_bytes;  // --memory
  // --memory NAME: the card(s) of configs/gpus.json it named ("H100 SXM"); else empty.
  std::string memory_card;
  // --memory all: each card of configs/gpus.json with the largest batch (a micro-batch with accumulation or
  // --effective-batch) whose plan fits in 95% of its memory; memory_bytes is then unset.
  struct CardFit {
    std::string name;
    uint64_t memory_bytes = 0;             // cuda_mib: the total CUDA reports
    std::optional<int64_t> max_fit_batch;  // nullopt: not even batch 1
    // With --effective-batch: the largest micro-batch that fits whether or not it divides N.
    std::optional<int64_t> max_fit_any;
    std::optional<double> peak_tflops;  // dense datasheet rate at the plan's precision; nullopt: none
    double memory_bandwidth_gbps = 0;
    double compute_capability = 0;  // below 8.0 batchsweep's CUDA backend does not run: a plan only
  };
  std::vector<CardFit> cards;
  std::optional<int64_t> max_fit_batch;  // with --memory: the largest batch that fits (nullopt: not even 1)
  // With --memory of exabytes: the batch after max_fit_batch is refused as a plan past 2^62 bytes, so that
  // limit, not the memory, stops the batch there.
  bool max_fit_at_plan_limit = false;
  bool with_buffers = false;  // --buffers: list every buffer of each plan
  int64_t accumulation = 1;   // --accumulation: max_fit_batch is a micro-batch of this many
  // --effective-batch N: the plans are splits of N (micro-batch x accumulation, each its own), and
  // max_fit_batch is the micro-batch of the split with the largest one that fits (memory does not depend
  // on the accumulation).
  std::optional<int64_t> effective_batch;
  // With --effective-batch and --memory: the largest micro-batch that fits whether or not it divides N (above
  // max_fit_batch where N has no divisor between them: a prime N splits only 1xN).
  std::optional<int64_t> max_fit_any;
  // Training with --memory and without --checkpointing, for a model whose blocks checkpointing would shrink,
  // where memory limits the batch: the largest batch that fits with --checkpointing (the next question).
  std::optional<int64_t> max_fit_with_checkpointing;
  // The same plans with --memory, where a batch does not fit (the smallest 64 such): the fewest blocks
  // --checkpoint-blocks needs for it to fit. One per plan, or empty where not asked.
  struct BlocksToFit {
    bool asked = false;             // this plan did not fit, and was asked
    std::optional<int64_t> blocks;  // nullopt: not even with every block checkpointed
    double recompute_pct = 0;       // its recomputed FLOPs, % of the training FLOPs
  };
  std::vector<BlocksToFit> blocks_to_fit;
  size_t recomputable_blocks = 0;  // the blocks --checkpoint-blocks counts (Graph's that backward reaches)
};

// {model, parameters, flops_per_sample {forward, train}, precision, mode, accumulation, backend, points:
// [{batch, effective_batch, flops_per_step, memory {total_bytes, parameters, master_weights, gradients,
// optimizer_state, saved_activations, transient, workspace, data}, fits? (with --memory), buffers?}],
// memory_bytes, safety_fraction, max_fit_batch, max_fit_effective_batch (with accumulation)}; paths
// {attention, conv} for cuda, each null where the model has no such layer
[[nodiscard]] nlohmann::json plan_to_json(const PlanSummary& summary);

// Header lines (model, parameters, FLOPs) and a table with one row per batch, itemised memory and the total.
[[nodiscard]] std::string format_plan_table(const PlanSummary& summary);

}  // namespace bsw
