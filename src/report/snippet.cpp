// --config-for: the recommended batch as the lines to paste into a training or inference setup (DeepSpeed's
// config, Lightning's Trainer, accelerate's Accelerator, transformers' TrainingArguments, Triton's model
// config), with the precision the sweep measured in.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "batchsweep/errors.hpp"
#include "batchsweep/printers.hpp"
#include "report/format.hpp"
#include "report/view.hpp"

namespace bsw {
namespace {

// Each framework: the --config-for name, and the name its lines are headed with.
struct Framework {
  ConfigTarget target;
  std::string_view flag;
  const char* name;
};
constexpr Framework kFrameworks[] = {{ConfigTarget::deepspeed, "deepspeed", "DeepSpeed"},
                                     {ConfigTarget::lightning, "lightning", "Lightning"},
                                     {ConfigTarget::accelerate, "accelerate", "accelerate"},
                                     {ConfigTarget::transformers, "transformers", "transformers"},
                                     {ConfigTarget::triton, "triton", "Triton"}};

const Framework& framework(ConfigTarget target) {
  for (const Framework& f : kFrameworks)
    if (f.target == target) return f;
  return kFrameworks[0];
}

}  // namespace

std::string_view to_string(ConfigTarget target) {
  return framework(target).flag;
}

std::optional<ConfigTarget> parse_config_target(std::string_view name) {
  for (const Framework& f : kFrameworks)
    if (name == f.flag) return f.target;
  return std::nullopt;
}

void check_config_target_mode(std::string_view config_for, bool infer, bool of_report) {
  if (config_for == "triton" && !infer)
    throw UsageError(of_report
                         ? "--config-for triton: Triton serves inference, and the report is of a "
                           "training sweep (settings.mode is not infer)"
                         : "--config-for triton: Triton serves inference, and this sweep is of training "
                           "(--mode infer sweeps what a server runs)");
}

void check_effective_batch_world_size(int64_t effective_batch, int64_t world_size) {
  if (world_size > 1 && effective_batch % world_size != 0)
    throw UsageError(fmt::format(
        "--world-size {0}: --effective-batch {1} is kept as the global batch across the {0} devices, so it "
        "must be a multiple of {0} (each device's share of an optimizer step); give a world size that "
        "divides {1}, or sweep an --effective-batch that {0} divides",
        world_size, effective_batch));
}

std::string format_config_snippet(const Report& report, ConfigTarget target, int64_t world_size) {
  if (world_size < 1) throw UsageError(fmt::format("--world-size: must be at least 1, got {}", world_size));
  const char* name = framework(target).name;
  const Analysis& a = report.analysis;
  check_config_target_mode(to_string(target), report_view::title(report).mode == "infer", true);
  if (!a.recommended.batch)
    return fmt::format(
        "config for {}: none — there is no recommended batch to set (see recommended: above)\n", name);
  int64_t batch = *a.recommended.batch;
  int64_t accumulation = a.recommended_accumulation.value_or(1);
  // The run's settings as the table's title reads them; a report that names none ran fp32 training.
  const report_view::Title title = report_view::title(report);
  const bool train = title.mode != "infer";
  const std::string precision = title.precision.empty() ? "fp32" : title.precision;
  // What each of the world runs on: a CPU sweep's answer is a CPU process's, said as such.
  const bool cpu = report.device.backend == "cpu";
  // run --effective-batch E timed one device's step of E samples; with --world-size W, of E / W (E the global
  // batch: settings.effective_batch is that share, settings.world_size W). Across --world-size devices the
  // global batch is kept (what Lightning, accelerate and DeepSpeed users mean by it, and what the learning
  // rate was set for): each device's share is global / world size. Where that is the share the sweep timed,
  // its recommended split is each device's. Else each device's accumulation is share / micro-batch; where the
  // recommended micro-batch does not divide the share, the fastest measured split whose does is taken
  // instead; where none does, the largest micro-batch up to the recommended one that divides the share (it
  // fits: the recommended one ran), which the sweep did not time, and a comment says so. A world size that
  // does not divide the global batch is refused (check_effective_batch_world_size).
  const std::string gpus =
      fmt::format("{} {}{}", world_size, cpu ? "process" : "GPU", world_size == 1 ? "" : (cpu ? "es" : "s"));
  std::string effective_note;
  const std::optional<int64_t> timed_share = report_view::effective_batch_setting(report);
  const std::optional<int64_t> global_batch = report_view::global_effective_batch(report);
  if (train && timed_share && global_batch && (world_size > 1 || *global_batch != *timed_share)) {
    const int64_t e = *global_batch, timed = *timed_share;
    check_effective_batch_world_size(e, world_size);
    const int64_t share = e / world_size;  // one device's samples per optimizer step
    const char* one = cpu ? "process" : "GPU";
    if (share == timed) {
      effective_note = fmt::format(
          "  # --effective-batch {} kept in all across {}: {} each per optimizer step, whose splits the "
          "sweep "
          "timed\n",
          e, gpus, share);
    } else if (share % batch == 0) {
      effective_note = fmt::format(
          "  # --effective-batch {} kept in all across {}: accumulation {} each (the sweep timed one {}'s "
          "share of {}, accumulation {})\n",
          e, gpus, share / batch, one, timed, accumulation);
      accumulation = share / batch;
    } else {
      const Point* best = nullptr;
      for (const Point& p : report.points)
        if (p.status == PointStatus::ok && p.batch * p.accumulation == timed && share % p.batch == 0 &&
            (!best || p.samples_per_second > best->samples_per_second))
          best = &p;
      double recommended_rate = 0;
      for (const Point& p : report.points)
        if (p.status == PointStatus::ok && p.batch == batch && p.accumulation == accumulation)
          recommended_rate = std::max(recommended_rate, p.samples_per_second);
      if (best) {
        effective_note = fmt::format(
            "  # --effective-batch {} kept in all across {}: the recommended batch {} does not divide one "
            "{}'s share of {}, so batch {} (measured at {} samples/s, {:.0f}% of batch {}'s), accumulation "
            "{} each\n",
            e, gpus, batch, one, share, best->batch, report_format::human_rate(best->samples_per_second),
            100.0 * best->samples_per_second /
                (recommended_rate > 0 ? recommended_rate : best->samples_per_second),
            batch, share / best->batch);
        batch = best->batch;
        accumulation = share / best->batch;
      } else {
        int64_t micro = std::min(batch, share);
        while (share % micro != 0) --micro;
        effective_note = fmt::format(
            "  # --effective-batch {} kept in all across {}: no measured micro-batch divides one {}'s share "
            "of "
            "{}, so batch {}, accumulation {} each; batch {} fits (batch {} ran) but was not timed: the "
            "sweep "
            "timed one {}'s splits of {}, and `run --effective-batch {} --world-size {}` times the splits of "
            "{} each\n",
            e, gpus, one, share, micro, share / micro, micro, batch, one, timed, e, world_size, share);
        batch = micro;
        accumulation = share / micro;
      }
    }
  }
  const int64_t global = batch * accumulation * world_size;
  // A batch measured with checkpointing fits only with it: the lines turn it on.
  const bool checkpointing = train && !title.checkpointing.empty();
  std::string out =
      fmt::format("config for {} ({}batch {}{}, {}{}, {}{}):\n", name, train ? "" : "inference, ", batch,
                  accumulation > 1 ? fmt::format(" x accumulation {}", accumulation) : std::string(),
                  precision, checkpointing ? ", " + title.checkpointing : std::string(), gpus,
                  train ? fmt::format("; {} samples per optimizer step", global) : std::string());
  // Hugging Face models checkpoint each decoder layer, as the sweep recomputed each block. With
  // --checkpoint-blocks only the first N were: no framework switch does that, so the line says how.
  const std::string checkpoint_line =
      title.checkpoint_blocks > 0
          ? fmt::format(
                "# checkpoint only the first {0} blocks in forward order: wrap each one's forward in "
                "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) (Megatron: "
                "--recompute-granularity full --recompute-method block --recompute-num-layers {0}); "
                "gradient_checkpointing_enable() would recompute every block",
                title.checkpoint_blocks)
          : std::string(
                "model.gradient_checkpointing_enable()  # Hugging Face models; else "
                "torch.utils.checkpoint per block");
  if (cpu) out += "  # measured on the CPU backend: a GPU's best batch differs, so sweep on the GPU itself\n";
  // A step-time script's device is a formula, and its memory plan no real backend's.
  if (report.device.backend == "scripted")
    out +=
        "  # measured on the scripted backend (a step-time formula, not a device): sweep on the GPU itself\n";
  out += effective_note;
  const bool tf32 = precision == "tf32";
  // The CPU backend runs tf32 as fp32: the line still turns on what the sweep asked for, said as such.
  const std::string tf32_comment =
      cpu ? "# the sweep asked for tf32 (the CPU ran fp32)" : "# the sweep ran tf32 matmuls";
  const std::string tf32_line = fmt::format("torch.backends.cuda.matmul.allow_tf32 = True  {}", tf32_comment);
  // Lightning's, accelerate's and transformers' 16-bit training settings are autocast: fp32 weights (a 16-bit
  // copy of each while a step runs) and fp32 softmax, layernorm and loss outputs, so a larger peak than the
  // sweep's 16-bit model (README, Storage). In inference Lightning's "16-true" / "bf16-true" and
  // transformers' fp16_full_eval / bf16_full_eval cast the model itself, as the sweep's; accelerate has no
  // such setting. Said, and loudest where the batch is the largest that fit.
  const bool sixteen_bit = precision == "fp16" || precision == "bf16";
  const bool autocast =
      sixteen_bit && target != ConfigTarget::deepspeed && (train || target == ConfigTarget::accelerate);
  // At the memory edge: a larger batch failed to fit (not merely the largest swept).
  const bool at_edge = a.max_fit.batch && *a.max_fit.batch == batch &&
                       std::any_of(report.points.begin(), report.points.end(),
                                   [&](const Point& p) { return p.batch > batch && did_not_fit(p.status); });
  if (autocast) {
    const std::string setting =
        target == ConfigTarget::lightning
            ? fmt::format("precision=\"{}\"", precision == "fp16" ? "16-mixed" : "bf16-mixed")
        : target == ConfigTarget::accelerate ? fmt::format("mixed_precision=\"{}\"", precision)
                                             : fmt::format("{}=True", precision);
    out += fmt::format(
        "  # {} is autocast: fp32 weights and an fp32 residual stream, layernorm, softmax and loss outputs, "
        "a "
        "larger peak than the sweep's {} model{}{}\n",
        setting, precision, train ? " with fp32 master weights" : "",
        at_edge ? fmt::format("; batch {} is the largest that fit, so check it under autocast (the PyTorch "
                              "peer, bench/peers/torch_sweep.py) or take a smaller one",
                              batch)
                : std::string());
  } else if (at_edge) {
    // The framework's own memory is not the sweep's: at the edge, that is the difference that matters.
    out += fmt::format(
        "  # batch {} is the largest that fit: the framework's own memory ({}the caching allocator's slack) "
        "is "
        "not in the sweep, so check it there or take a smaller one\n",
        batch, train && world_size > 1 ? "DDP's gradient buckets, NCCL's buffers, " : "");
  }
  switch (target) {
    case ConfigTarget::deepspeed: {
      if (!train) {
        out += fmt::format(
            "  # DeepSpeed's config holds no inference batch: the data loader gives it\n"
            "  loader = DataLoader(dataset, batch_size={})\n",
            batch);
        if (precision == "fp16" || precision == "bf16")
          out += fmt::format("  engine = deepspeed.init_inference(model, dtype=torch.{})\n",
                             precision == "fp16" ? "float16" : "bfloat16");
        if (tf32) out += fmt::format("  {}\n", tf32_line);
        break;
      }
      // DeepSpeed checks train_batch_size = micro x accumulation x world size.
      out += "  {\n";
      out += fmt::format("    \"train_micro_batch_size_per_gpu\": {},\n", batch);
      out += fmt::format("    \"gradient_accumulation_steps\": {},\n", accumulation);
      out += fmt::format("    \"train_batch_size\": {}{}\n", global,
                         precision == "fp16" || precision == "bf16" ? "," : "");
      if (precision == "fp16") out += "    \"fp16\": {\"enabled\": true, \"loss_scale\": 0}\n";
      if (precision == "bf16") out += "    \"bf16\": {\"enabled\": true}\n";
      out += "  }\n";
      if (tf32) out += fmt::format("  # and in the script: {}\n", tf32_line);
      if (checkpointing)
        out += fmt::format("  # and in the script: {}\n",
                           title.checkpoint_blocks > 0 ? checkpoint_line.substr(2) : checkpoint_line);
      break;
    }
    case ConfigTarget::lightning: {
      // Inference: "16-true" casts the model to 16 bits, as the sweep's; training's "-mixed" is autocast.
      const char* lightning_precision = precision == "fp16"   ? (train ? "16-mixed" : "16-true")
                                        : precision == "bf16" ? (train ? "bf16-mixed" : "bf16-true")
                                                              : "32-true";
      if (tf32) out += fmt::format("  torch.set_float32_matmul_precision(\"high\")  {}\n", tf32_comment);
      if (checkpointing) out += fmt::format("  {}\n", checkpoint_line);
      // devices is set even for one: Lightning's default, "auto", takes every GPU there is, multiplying
      // the step. It counts one node's devices.
      if (world_size > 1)
        out += fmt::format(
            "  # devices counts one node's {0}: over several nodes, devices=<{0} per node>, "
            "num_nodes=<nodes>, their product {1}\n",
            cpu ? "processes" : "GPUs", world_size);
      out += fmt::format("  loader = DataLoader(dataset, batch_size={})\n", batch);
      out += fmt::format("  trainer = L.Trainer({}precision=\"{}\", {}devices={})\n",
                         train && accumulation > 1 ? fmt::format("accumulate_grad_batches={}, ", accumulation)
                                                   : std::string(),
                         lightning_precision, cpu ? "accelerator=\"cpu\", " : "", world_size);
      break;
    }
    case ConfigTarget::accelerate: {
      const char* mixed = precision == "fp16" ? "fp16" : precision == "bf16" ? "bf16" : "no";
      if (tf32) out += fmt::format("  {}\n", tf32_line);
      if (checkpointing) out += fmt::format("  {}\n", checkpoint_line);
      out += fmt::format("  accelerator = Accelerator({}mixed_precision=\"{}\")\n",
                         train && accumulation > 1
                             ? fmt::format("gradient_accumulation_steps={}, ", accumulation)
                             : std::string(),
                         mixed);
      // The process count is said even for one: `accelerate launch` otherwise takes the saved config's.
      // accelerate counts the processes of every machine together.
      out += fmt::format(
          "  loader = DataLoader(dataset, batch_size={})  # per process; accelerate launch "
          "--num_processes {}\n",
          batch, world_size);
      if (train && accumulation > 1)
        out +=
            "  # the accumulation takes effect only for steps inside `with accelerator.accumulate(model):`, "
            "after accelerator.prepare(model, optimizer, loader)\n";
      break;
    }
    case ConfigTarget::transformers: {
      std::string args = train ? fmt::format("per_device_train_batch_size={}", batch)
                               : fmt::format("per_device_eval_batch_size={}", batch);
      if (train && accumulation > 1) args += fmt::format(", gradient_accumulation_steps={}", accumulation);
      // Inference: *_full_eval casts the model to 16 bits, as the sweep's; fp16=True is training's autocast.
      if (sixteen_bit) args += fmt::format(", {}{}=True", precision, train ? "" : "_full_eval");
      if (tf32) args += ", tf32=True";
      if (checkpointing && title.checkpoint_blocks == 0) args += ", gradient_checkpointing=True";
      out += fmt::format("  args = TrainingArguments(output_dir=\"out\", {}){}\n", args,
                         tf32 && cpu ? "  # the sweep asked for tf32 (the CPU ran fp32); tf32=True needs an "
                                       "Ampere or newer GPU"
                                     : "");
      if (checkpointing && title.checkpoint_blocks > 0) out += fmt::format("  {}\n", checkpoint_line);
      // Trainer started plainly on a machine of several GPUs runs DataParallel over them all, multiplying
      // the batch: the launch line pins the count.
      if (world_size > 1)
        out += fmt::format(
            "  # torchrun --nproc_per_node {0}: each process runs the batch above (over several nodes, "
            "--nproc_per_node <GPUs per node> --nnodes <nodes>, their product {0})\n",
            world_size);
      else if (!cpu)
        out +=
            "  # launch on one GPU: CUDA_VISIBLE_DEVICES=0 python your_script.py (started plainly where "
            "there "
            "are several, Trainer runs on them all and multiplies the batch)\n";
      break;
    }
    case ConfigTarget::triton: {
      // config.pbtxt: the dynamic batcher forms batches of up to max_batch_size from the requests queued.
      // Triton's config holds no precision: the model served must run in the sweep's.
      if (sixteen_bit)
        out += fmt::format(
            "  # the sweep ran the model in {0}: serve it in {0}, as the batch was sized for\n", precision);
      if (tf32) out += "  # the sweep ran tf32 matmuls: serve with TF32 on\n";
      out += fmt::format("  max_batch_size: {}\n", batch);
      const auto delay = report.settings.find("max_queue_delay_ms");
      if (report.settings.contains("request_rate") && delay != report.settings.end() && delay->is_number()) {
        out += fmt::format(
            "  dynamic_batching {{\n    max_queue_delay_microseconds: {}  # as --request-rate simulated "
            "it\n  }}\n",
            std::llround(delay->get<double>() * 1000));
      } else {
        out +=
            "  dynamic_batching { }  # the queue delay is not sized here: run --request-rate R "
            "[--max-queue-delay MS] simulates your traffic\n";
      }
      // One instance per device, as measured: a second on the same GPU shares its time and memory.
      // A KIND_GPU instance group places its count on every GPU; a KIND_CPU count is the total.
      out += fmt::format("  instance_group [ {{ count: 1, kind: {} }} ]{}\n", cpu ? "KIND_CPU" : "KIND_GPU",
                         world_size > 1 && !cpu
                             ? fmt::format("  # one on each of the {}, each batching on its own", gpus)
                             : std::string());
      break;
    }
  }
  return out;
}

}  // namespace bsw
