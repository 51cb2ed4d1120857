"""The command line of torch_sweep.py: flags named as batchsweep's `run` flags, checked into one settings
object before torch is imported (so --help and usage errors work without it), the parameter check against
`batchsweep plan`, then the sweep with the report rewritten after every point."""

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Optional

from . import PEER_NAME
from .config import LoadedModel, load_model, lower, repo_root
from .errors import EXIT_FAILURE, EXIT_NOTHING_RAN, EXIT_OK, InputError, ParameterMismatch, PeerError, UsageError
from .grammar import MAX_BATCH, parse_batches
from .overrides import parse_model_override, printable, texts
from .report import Report, check_writable, write_file_atomic
from .stopping import StoppingSettings

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """SIGTERM, raised where the sweep is, as KeyboardInterrupt is for SIGINT. A BaseException like it: torch's
    own `except Exception` blocks (inductor's build checks during --compile) must not swallow it."""


def _raise_terminated(signum, frame):
    raise Terminated()
PLAN_TIMEOUT_S = 120
# The largest --checkpoint-blocks, batchsweep's (src/cli/app.cpp kMaxLayers): a model has at most this many layers
# after repeats.
MAX_CHECKPOINT_BLOCKS = 10_000
# What std::stod reads of a decimal number (batchsweep's parse_number): "2", "+2", "2.", ".5e1", "1e2".
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")

EXAMPLES = """examples:
  torch_sweep.py --model tiny-lm --batch 1:64:*2 --json tiny-lm-torch.json
  torch_sweep.py --model gpt2-small --precision bf16 --batch 1:32:*2 --compile --json gpt2-compile.json
  torch_sweep.py --model my-model.json --mode infer --precision fp16 --batch 8:256:+8 --peak-flops 989e12
  torch_sweep.py --model tiny-lm --set input.sequence_length=256 --set 'layers[1].repeat=4' --batch 1:16:*2
then: batchsweep analyze tiny-lm-torch.json;  batchsweep compare batchsweep.json tiny-lm-torch.json"""


@dataclass
class Settings:
    model: str = "mlp"
    model_sets: list = field(default_factory=list)  # --set PATH=VALUE, parsed (overrides.ModelOverride), in order
    batch: str = "1,8,64,512"
    batches: list = field(default_factory=list)
    mode: str = "train"
    precision: str = "fp32"
    accumulation: int = 1
    checkpointing: bool = False
    checkpoint_blocks: Optional[int] = None  # --checkpoint-blocks N (implies checkpointing); None: every block
    compile: bool = False
    compile_mode: str = "default"
    device: str = "auto"
    seed: int = 1234
    peak_flops: Optional[float] = None
    json_path: str = ""
    batchsweep: Optional[str] = None  # binary for the parameter check; None: build/batchsweep if present
    threads: Optional[int] = None  # torch.set_num_threads on the CPU; None: torch's default
    quiet: bool = False
    stopping: StoppingSettings = field(default_factory=StoppingSettings)


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2, message naming the flag) instead of exiting itself."""

    def error(self, message):
        raise UsageError(message)


def make_parser() -> argparse.ArgumentParser:
    d, s = Settings(), StoppingSettings()
    p = _Parser(prog="torch_sweep.py", allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Sweep batch sizes of a batchsweep model in PyTorch and write a batchsweep report "
                            "(schema v1) that `batchsweep analyze` and `batchsweep compare` read.",
                epilog=EXAMPLES)
    p.add_argument("--model", "-m", default=d.model, help="preset name (configs/models/NAME.json) or a model "
                   "JSON file (default: %(default)s)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="PATH=VALUE",
                   help="set a field of the model config before it is read, e.g. input.sequence_length=1024, "
                   "'layers[1].repeat=24' or optimizer.learning_rate=1e-3 (a path as errors name it; the value is "
                   "JSON, or a bare word as a string); repeatable, as batchsweep run --set")
    p.add_argument("--batch", "-b", default=d.batch, help="batches: 1,8,64  8:256:+8  1:4096:*2 (default: "
                   "%(default)s)")
    p.add_argument("--mode", choices=["train", "infer"], default=d.mode, help="default: %(default)s")
    p.add_argument("--precision", "-p", choices=["fp32", "tf32", "fp16", "bf16"], default=d.precision,
                   help="default: %(default)s")
    p.add_argument("--accumulation", type=int, default=d.accumulation,
                   help="micro-batches per optimizer step (train only; default: %(default)s)")
    p.add_argument("--checkpointing", action="store_true", help="training with activation checkpointing: keep "
                   "each top-level transformer_block's or residual's output only and recompute its activations in "
                   "backward (torch.utils.checkpoint per block; Hugging Face's gradient_checkpointing)")
    p.add_argument("--checkpoint-blocks", default=None, metavar="N", help="checkpoint only the first N blocks "
                   "that backward reaches, in forward order (--checkpointing for those; the others keep every "
                   "activation; Megatron's --recompute-method block --recompute-num-layers N); implies "
                   "--checkpointing, train only")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    p.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"], default=d.compile_mode,
                   help="torch.compile mode with --compile (default: %(default)s)")
    p.add_argument("--device", default=d.device, help="auto | cpu | cuda | cuda:N (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="CPU compute threads "
                   "(torch.set_num_threads): give batchsweep's device.threads for a like-for-like CPU comparison "
                   "(default: torch's own)")
    p.add_argument("--warmup", type=int, default=s.warmup_steps, help="untimed steps per point (default: "
                   "%(default)s)")
    p.add_argument("--warmup-time", type=float, default=None, metavar="S", help="untimed seconds per point at "
                   "least, after --warmup steps (default: 0.2 on CUDA, 0 on the CPU)")
    p.add_argument("--min-samples", type=int, default=s.min_samples, help="timed steps per point, at least "
                   "(default: %(default)s)")
    p.add_argument("--min-time", type=float, default=s.min_time_s, help="measured seconds per point, at least "
                   "(default: %(default)s)")
    p.add_argument("--max-noise", type=float, default=s.max_noise_pct, help="stop a point once its relative "
                   "noise is below PCT%% (default: %(default)s)")
    p.add_argument("--max-samples", type=int, default=s.max_samples, help="timed steps per point, at most: the "
                   "sample cap (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=s.timeout_s, help="wall-clock seconds per point before it "
                   "stops with a warning (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the weights and data (default: %(default)s)")
    p.add_argument("--peak-flops", type=float, default=None, help="the device's peak FLOP/s at this precision "
                   "(e.g. 989e12): fills mfu")
    p.add_argument("--json", dest="json_path", default="", metavar="FILE", help="write the report to FILE, or - "
                   "for stdout; rewritten after every point")
    p.add_argument("--batchsweep", default=None, metavar="PATH", help="batchsweep binary for the parameter check "
                   "(default: build/batchsweep when it exists)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    return p


def parse_checkpoint_blocks(text: str) -> int:
    """--checkpoint-blocks' value: a whole number in 1..MAX_CHECKPOINT_BLOCKS, read and refused in batchsweep's
    words (src/cli/app.cpp parse_number and whole). Raises UsageError."""
    def fail(why: str):
        raise UsageError(f"--checkpoint-blocks: {why}")

    if text and (text[0].isspace() or text[-1].isspace()):
        fail(f"'{text}' is not a number (it has a space around it)")
    if any(c in text for c in "xXpP"):  # decimal only, as batchsweep's (std::stod reads hexadecimal)
        fail(f"'{text}' is not a number")
    digits = len(text) - len(text.lstrip("+-"))
    if digits + 1 < len(text) and text[digits] == "0" and text[digits + 1] in "0123456789":
        fail(f"'{text}' has a leading zero (write it without)")
    match = _DECIMAL.match(text)
    if match is None:
        fail(f"'{text}' is not a number")
    value = float(match.group())
    if not math.isfinite(value):  # std::stod's out_of_range ("1e999")
        fail(f"{text} is out of range")
    if match.end() < len(text):
        after = text[match.end()]
        if after not in "eE" and (after == "%" or (after.isascii() and after.isalpha())):
            fail(f"'{text}' is not a number: write it without a unit, in the one --help gives the flag")
        fail(f"'{text}' is not a number")
    if value != math.floor(value):
        fail(f"must be a whole number, got {text}")
    if not 1 <= value <= MAX_CHECKPOINT_BLOCKS:
        fail(f"must be in 1..{MAX_CHECKPOINT_BLOCKS}, got {text}")
    return int(value)


def parse_settings(argv: list) -> Settings:
    """The checked settings of a command line. Raises UsageError naming the flag."""
    a = make_parser().parse_args(argv)
    blocks = None if a.checkpoint_blocks is None else parse_checkpoint_blocks(a.checkpoint_blocks)
    # As batchsweep's: --checkpoint-blocks N implies checkpointing, and the two together are refused.
    if blocks is not None and a.checkpointing:
        raise UsageError("--checkpointing and --checkpoint-blocks: give one (--checkpointing checkpoints every "
                         "block, --checkpoint-blocks N the first N)")
    s = Settings(model=a.model, batch=a.batch, mode=a.mode, precision=a.precision, accumulation=a.accumulation,
                 checkpointing=a.checkpointing or blocks is not None, checkpoint_blocks=blocks, compile=a.compile,
                 compile_mode=a.compile_mode, device=a.device, seed=a.seed, peak_flops=a.peak_flops,
                 json_path=a.json_path, batchsweep=a.batchsweep, threads=a.threads, quiet=a.quiet)
    s.stopping = StoppingSettings(warmup_steps=a.warmup, warmup_time_s=a.warmup_time, min_samples=a.min_samples, min_time_s=a.min_time,
                                  max_noise_pct=a.max_noise, timeout_s=a.timeout, max_samples=a.max_samples)
    s.stopping.validate()
    # batchsweep's check: --timeout counts prepare and warm-up, so a --min-time or --warmup-time given at or
    # past it could never be met (the defaults give way to a short --timeout).
    min_time_given, warmup_given = a.min_time != StoppingSettings().min_time_s, a.warmup_time is not None
    wanted = (a.warmup_time if warmup_given else 0.0) + (a.min_time if min_time_given else 0.0)
    if (min_time_given or warmup_given) and wanted >= a.timeout:
        if min_time_given and warmup_given:
            what = (f"--warmup-time {a.warmup_time:g} s and --min-time {a.min_time:g} s add up to {wanted:g} s, "
                    "which")
        elif min_time_given:
            what = f"--min-time: {a.min_time:g} s of timed steps"
        else:
            what = f"--warmup-time: {a.warmup_time:g} s of warm-up"
        raise UsageError(f"{what} cannot fit in the {a.timeout:g} s --timeout per point, which counts prepare and "
                         f"warm-up too: every point would stop at the timeout, short of it; raise --timeout "
                         f"(e.g. --timeout {math.ceil(2 * wanted + 1):g})")
    s.model_sets = [parse_model_override(text) for text in a.sets]
    s.batches = parse_batches(a.batch, "--batch")
    if not 1 <= s.accumulation <= MAX_BATCH:
        raise UsageError(f"--accumulation: must be in 1..{MAX_BATCH} (2^24), got {s.accumulation}")
    # Samples per step, batch x accumulation, at most 2^24, as batchsweep's (whose reader refuses more).
    if max(s.batches) * s.accumulation > MAX_BATCH:
        raise UsageError(f"--accumulation: batch {max(s.batches)} x accumulation {s.accumulation} is more than "
                         f"{MAX_BATCH} (2^24) samples per step; lower the accumulation or the largest batch")
    if s.mode == "infer" and s.accumulation != 1:
        raise UsageError("--accumulation: gradient accumulation only applies to --mode train")
    if s.mode == "infer" and s.checkpointing:  # batchsweep's words
        raise UsageError(f"{_checkpointing_flag(s)}: activation checkpointing recomputes what backward reads, and "
                         "--mode infer has no backward")
    if s.peak_flops is not None and not (math.isfinite(s.peak_flops) and s.peak_flops > 0):
        raise UsageError(f"--peak-flops: must be a number of FLOP/s > 0, got {s.peak_flops}")
    if s.device not in ("auto", "cpu", "cuda") and not (
            s.device.startswith("cuda:") and s.device[5:].isdigit() and s.device[5:].isascii()):
        raise UsageError(f"--device: '{s.device}' is not auto, cpu, cuda or cuda:N (N a device index: cuda:0)")
    if s.threads is not None and not 1 <= s.threads <= 4096:
        raise UsageError(f"--threads: must be in 1..4096, got {s.threads}")
    if s.seed < 0:
        raise UsageError(f"--seed: must be at least 0, got {s.seed}")
    if s.compile_mode != "default" and not s.compile:
        raise UsageError("--compile-mode: needs --compile")
    check_writable(s.json_path, "--json")
    return s


def _checkpointing_flag(s: Settings) -> str:
    """The flag a checkpointing error names, as batchsweep's: --checkpoint-blocks where it was given."""
    return "--checkpoint-blocks" if s.checkpoint_blocks is not None else "--checkpointing"


def check_checkpointing(s: Settings, graph) -> None:
    """batchsweep's check_checkpointing (src/cli/commands.cpp) on the lowered model: refused where checkpointing
    would change nothing (no top-level block), and --checkpoint-blocks N beyond the blocks backward recomputes
    (graph.recomputable_blocks). Raises UsageError."""
    if not s.checkpointing:
        return
    # Without a block to recompute the run would be one without checkpointing.
    if not graph.blocks:
        raise UsageError(f"{_checkpointing_flag(s)}: model '{graph.name}' has no transformer_block or residual "
                         "layer at its top level, the blocks that checkpointing recomputes, so it would change "
                         "nothing")
    reached = len(graph.recomputable_blocks)
    if s.checkpoint_blocks is not None and reached == 0:
        raise UsageError(f"--checkpoint-blocks: backward reaches no block of model '{graph.name}' (each comes "
                         "before every layer that learns), so there are none to count; --checkpointing lays them "
                         "all out in the arena")
    if s.checkpoint_blocks is not None and s.checkpoint_blocks > reached:
        raise UsageError(f"--checkpoint-blocks: {s.checkpoint_blocks} is more than the {reached} "
                         f"block{'' if reached == 1 else 's'} of model '{graph.name}' that backward "
                         f"recomputes (--checkpointing is all {reached})")
    # Every block is --checkpointing, recorded as such (batchsweep's every_block_is_all).
    if s.checkpoint_blocks == reached:
        s.checkpoint_blocks = None


# ---------------------------------------------------------------------------------------------------------------
# The parameter check against batchsweep's plan
# ---------------------------------------------------------------------------------------------------------------

def find_batchsweep(explicit: Optional[str]) -> Optional[str]:
    """The binary named by --batchsweep (which must exist), else build/batchsweep in the checkout, else None."""
    if explicit:
        path = explicit if os.sep in explicit else (shutil.which(explicit) or explicit)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(f"--batchsweep: '{explicit}' is not an executable file")
        return path
    default = os.path.join(repo_root(), "build", "batchsweep")
    return default if os.path.isfile(default) and os.access(default, os.X_OK) else None


def batchsweep_parameters(binary: str, model: LoadedModel) -> int:
    """`batchsweep plan --model M --json -`'s "parameters". Raises InputError when the plan cannot be read."""
    argument = model.argument if model.source.startswith("preset:") else os.path.abspath(model.path)
    # The count does not depend on the mode; infer also plans a model without parameters (train refuses it).
    command = [binary, "plan", "--model", argument, "--batch", "1", "--backend", "cpu", "--mode", "infer",
               "--json", "-"]
    for o in model.overrides:  # the same model: the same --set, as the peer applied them
        command += ["--set", o.text]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PLAN_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise InputError(f"--batchsweep {binary}: cannot run `{' '.join(command)}`: {e}") from None
    if done.returncode != 0:
        raise InputError(f"--batchsweep {binary}: `{' '.join(command)}` failed (exit {done.returncode}): "
                         f"{done.stderr.strip()[:500]}")
    try:
        plan = json.loads(done.stdout)
        parameters = plan["parameters"]
    except (ValueError, KeyError, TypeError):
        raise InputError(f"--batchsweep {binary}: `plan --json -` printed no \"parameters\" field") from None
    if not isinstance(parameters, int):
        raise InputError(f"--batchsweep {binary}: \"parameters\" is not an integer: {parameters!r}")
    return parameters


def check_parameters(module_parameters: int, counted: int, binary: Optional[str], model: LoadedModel) -> str:
    """Compares the PyTorch module with the count from the config and with batchsweep's plan; returns what
    was checked, for the report. Raises ParameterMismatch (exit 2) with both numbers."""
    name = model.config["name"]
    if module_parameters != counted:
        raise ParameterMismatch(f"model {name}: the PyTorch module has {module_parameters} parameters, the config "
                                f"counts {counted} by batchsweep's conventions")
    if binary is None:
        return "config count only (no batchsweep binary: pass --batchsweep PATH or build build/batchsweep)"
    planned = batchsweep_parameters(binary, model)
    if planned != module_parameters:
        raise ParameterMismatch(f"model {name}: the PyTorch module has {module_parameters} parameters, "
                                f"`batchsweep plan` says {planned}")
    return f"matches `batchsweep plan` ({planned})"


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------

def settings_json(s: Settings, model: LoadedModel, backend: str, graph, parameter_check: str, torch_notes: dict):
    """The report's settings: batchsweep's keys (model, mode, precision, accumulation, batch, stopping, ...)
    plus what is particular to the peer under "torch"."""
    settings = {
        "model": model.config,
        "model_source": model.source,
        "backend": backend,
        "mode": s.mode,
        "precision": s.precision,
        "accumulation": s.accumulation,
        "checkpointing": s.checkpointing,
    }
    # --checkpoint-blocks N: the first N blocks only (absent where checkpointing covers them all, or is off), as
    # batchsweep's settings_json.
    if s.checkpointing and s.checkpoint_blocks is not None:
        settings["checkpoint_blocks"] = s.checkpoint_blocks
    settings.update({
        "batch": s.batch,
        "effective_batch": None,
        "memory_limit_bytes": None,
        "stopping": s.stopping.to_json(),
        "seed": s.seed,
        "parameters": graph.parameters,
        "parameter_check": parameter_check,
        "flops_per_sample": {"forward": graph.forward_flops_per_sample,
                             "train": graph.train_flops_per_sample},
        "torch": torch_notes,
    })
    # settings.model holds their values already; this says which fields the config did not give so (absent
    # without --set, as batchsweep's).
    if model.overrides:
        settings["model_overrides"] = texts(model.overrides)
    return settings


def _progress(i: int, total: int, point) -> str:
    label = str(point.batch) if point.accumulation == 1 else f"{point.batch}x{point.accumulation}"
    if point.status != "ok":
        return f"[{i}/{total}] batch {label}: {point.status}: {point.reason}"
    noise = "noise unknown" if point.noise_pct is None else f"\u00b1{point.noise_pct:.1f}%"
    peak = "" if point.measured_bytes is None else f", peak {point.measured_bytes / 2**30:.2f} GiB"
    return (f"[{i}/{total}] batch {label}: {point.samples_per_second:,.1f} samples/s, step "
            f"{point.step_ms.mean:.3f} ms {noise} ({len(point.samples_ms)} samples, "
            f"{point.stop_reason}){peak}")


def run(s: Settings, argv: list) -> int:
    model = load_model(s.model, overrides=s.model_sets)
    # As batchsweep: a preset wins over a file of its name here, which is said.
    if model.source.startswith("preset:") and os.path.isfile(s.model):
        print(f"{PEER_NAME}: warning: --model {s.model}: the preset {s.model}, not the file {s.model} here "
              f"(give ./{s.model} to read the file)", file=sys.stderr)
    graph = lower(model.config, model.source)
    if s.mode == "train" and graph.parameters == 0:  # as batchsweep run and plan
        raise UsageError(f"--mode train: model '{model.config['name']}' has no parameters to train (no linear, "
                         f"conv2d, layernorm, batchnorm or embedding layer); use --mode infer")
    check_checkpointing(s, graph)  # as batchsweep run and plan
    binary = find_batchsweep(s.batchsweep)
    try:
        import torch  # noqa: F401 - only here: everything before works without torch
    except ImportError as e:
        print(f"{PEER_NAME}: PyTorch is not importable ({e}); install torch to run the sweep", file=sys.stderr)
        return EXIT_FAILURE
    from .torch_model import build_model, count_parameters
    from .torch_runner import RunOptions, TorchRunner, pick_device

    with torch.device("meta"):  # counts without allocating, whatever the model's size
        module_parameters = count_parameters(build_model(model.config, model.source))
    parameter_check = check_parameters(module_parameters, graph.parameters, binary, model)

    device = pick_device(s.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device: {s.device} requested but torch.cuda.is_available() is false")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device: {s.device}: there are {torch.cuda.device_count()} CUDA devices "
                         f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    if s.threads is not None:
        if device.type != "cpu":
            raise UsageError("--threads: sets the CPU's compute threads; this run is on " + str(device))
        torch.set_num_threads(s.threads)
    options = RunOptions(mode=s.mode, precision=s.precision, accumulation=s.accumulation,
                         checkpointing=s.checkpointing, checkpoint_blocks=s.checkpoint_blocks, compile=s.compile,
                         compile_mode=s.compile_mode, seed=s.seed, peak_flops=s.peak_flops, stopping=s.stopping)
    runner = TorchRunner(model, graph, options, device)
    info = runner.device_info()
    report = Report(command=["torch_sweep.py"] + list(argv), device=info,
                    settings=settings_json(s, model, info["backend"], graph, parameter_check, runner.describe()))
    own_warnings = []  # the sweep's; the runner keeps the per-point ones
    if device.type == "cpu" and s.precision == "tf32":
        own_warnings.append("--precision tf32 has no effect on the CPU: the steps run in fp32")

    def export():
        report.settings["torch"] = runner.describe()
        report.warnings = own_warnings + runner.warnings
        if s.json_path and s.json_path != "-":
            write_file_atomic(s.json_path, report.dumps())

    if not s.quiet:
        # " with input.sequence_length=1024, layers[1].repeat=24", as batchsweep plan says the --set ones.
        sets = "".join((", " if i else " with ") + printable(t) for i, t in enumerate(texts(model.overrides)))
        print(f"{PEER_NAME}: {model.config['name']}{sets} ({graph.parameters:,} parameters) {s.mode} {s.precision} on "
              f"{info['name']} ({info['backend']}, torch {torch.__version__}); {parameter_check}", file=sys.stderr)
    # As batchsweep: SIGINT (130) or SIGTERM (143) anywhere in the sweep keeps every finished point and
    # marks the report interrupted.
    interrupted_by = None
    previous_term = signal.signal(signal.SIGTERM, _raise_terminated)
    # A SIGINT ignored by the shell that started us in the background is still a request to stop, as for
    # batchsweep run (which installs its own handler).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        for i, batch in enumerate(s.batches, 1):
            point = runner.measure(batch)
            report.add(point)
            export()
            if not s.quiet:
                print(_progress(i, len(s.batches), point), file=sys.stderr)
    except KeyboardInterrupt:
        interrupted_by = "SIGINT"
    except Terminated:
        interrupted_by = "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)
    if interrupted_by:
        own_warnings.append(f"interrupted by {interrupted_by}: the report holds the {len(report.points)} "
                            "finished point(s)")
    report.state = "interrupted" if interrupted_by else "complete"
    export()
    for w in report.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if s.json_path == "-":
        write_file_atomic("-", report.dumps())
    return exit_code(report.points, interrupted_by)


def exit_code(points, interrupted_by: str) -> int:
    """As batchsweep run: 143/130 when a signal stopped the sweep, 4 when it finished with no batch ok (a CI
    job reading only the exit code must not take "nothing fits" for an answer; the report says why), else 0."""
    if interrupted_by == "SIGTERM":
        return EXIT_TERMINATED
    if interrupted_by:
        return EXIT_INTERRUPTED
    if not any(p.status == "ok" for p in points):
        print(f"{PEER_NAME}: no batch ran ok: there is nothing to recommend (exit 4)", file=sys.stderr)
        return EXIT_NOTHING_RAN
    return EXIT_OK


def main(argv: Optional[list] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        settings = parse_settings(argv)
        return run(settings, argv)
    except PeerError as e:
        print(f"{PEER_NAME}: {e}", file=sys.stderr)
        if isinstance(e, UsageError) and "presets" not in str(e):
            print("run torch_sweep.py --help for the flags", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        # Ctrl-C before the sweep's own handler is in place (importing torch, the parameter check): no point
        # had finished, so there is nothing to write; said in a line, not a traceback.
        print(f"{PEER_NAME}: interrupted before the sweep started: no report written", file=sys.stderr)
        return 130
