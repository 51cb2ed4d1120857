"""Measuring one batch with PyTorch the way a careful user would: a fresh model per point (seeded, built on the
device), synthetic seeded data created on the device once, autocast bf16/fp16 in training (GradScaler for
fp16), 16-bit weights in inference, TF32 only for --precision tf32, fused optimizers where available, SDPA for
attention, torch.utils.checkpoint per block with --checkpointing (the first N with --checkpoint-blocks N), eager
or torch.compile. Steps are timed with CUDA events on the GPU (perf_counter on the CPU) under batchsweep's stopping
rule; out-of-memory becomes an `oom` point and the sweep goes on."""

import contextlib
import gc
import math
import os
import platform
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .config import Graph, LoadedModel
from .report import Point
from .stopping import NoiseCriterion, StoppingSettings
from .torch_model import build_model, loss_fn

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
REASON_CHARS = 400


@dataclass
class RunOptions:
    mode: str = "train"  # train | infer
    precision: str = "fp32"  # fp32 | tf32 | fp16 | bf16
    accumulation: int = 1
    checkpointing: bool = False  # torch.utils.checkpoint per block (train only)
    checkpoint_blocks: Optional[int] = None  # with checkpointing: only the first N blocks backward reaches
    compile: bool = False
    compile_mode: str = "default"
    seed: int = 1234
    peak_flops: Optional[float] = None  # FLOP/s at this precision, for MFU
    stopping: StoppingSettings = None

    def __post_init__(self):
        if self.stopping is None:
            self.stopping = StoppingSettings()


def pick_device(name: str) -> torch.device:
    """`auto`: the first CUDA device when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def is_out_of_memory(error: BaseException) -> bool:
    """torch.OutOfMemoryError (CUDA or other accelerators), MemoryError, and the allocator failures that
    surface as plain RuntimeErrors (the CPU allocator, cuBLAS, or torch.compile wrapping one)."""
    if isinstance(error, MemoryError):
        return True
    types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None))
                  if isinstance(t, type))
    if types and isinstance(error, types):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(
        s in text for s in ("out of memory", "can't allocate memory", "cublas_status_alloc_failed"))


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    return line if len(line) <= REASON_CHARS else line[:REASON_CHARS - 3] + "..."


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _cpu_memory_bytes():
    """The machine's memory, or None where it cannot be read (unknown is null in a report, never 0)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _below_lowest_scale(scale: Optional[float]) -> bool:
    """GradScaler halves its scale on every overflow, without end; batchsweep stops at 1: an overflow at
    scale 1 (GradScaler's scale now below it) means the gradients overflow fp16 unscaled, so every later step
    would skip its update. The point is then an error, as batchsweep's, not an ok point timed on steps that
    train nothing."""
    return scale is not None and scale < 1.0


def _overflow_reason(where: str, updated: bool, last: Optional[float]) -> str:
    """batchsweep's reason for the same point (src/sweep/runner.cpp)."""
    if not updated:
        return (f"non-finite gradients (NaN/Inf) at {where}: they overflow fp16 at the lowest loss scale (1) and "
                "no step updated the weights, so the model overflows fp16 as initialised: use bf16 or fp32")
    after = f" after a loss of {last:.3g}" if last is not None else ""
    return (f"non-finite gradients (NaN/Inf) at {where}{after}: they overflow fp16 at the lowest loss scale (1), "
            "so every step would skip its update; training diverged on the synthetic data: lower the model's "
            "optimizer.learning_rate (it does not change the step time), or use bf16")


class PointState:
    """Everything one point owns: model, optimizer, scaler and data. Dropped as a whole after the point."""

    def __init__(self, loaded: LoadedModel, graph: Graph, options: RunOptions, device: torch.device,
                 batch: int, notes: dict):
        self.graph, self.options, self.device = graph, options, device
        self.train = options.mode == "train"
        self.accumulation = options.accumulation if self.train else 1
        self.autocast_dtype = DTYPES.get(options.precision) if self.train else None
        self.weight_dtype = DTYPES.get(options.precision) if not self.train else None
        self.vocab_size = loaded.config["input"].get("vocab_size", 0)

        torch.manual_seed(options.seed)
        with torch.device(device):
            model = build_model(loaded.config, loaded.source, checkpointing=options.checkpointing and self.train,
                                checkpoint_blocks=options.checkpoint_blocks)
        if self.weight_dtype is not None:
            model = model.to(self.weight_dtype)
        model.train(self.train)
        self.eager_model = model
        self.model = torch.compile(model, mode=options.compile_mode, dynamic=False) if options.compile else model

        self.optimizer, self.scaler = None, None
        if self.train:
            self.optimizer = self._make_optimizer(loaded.config["optimizer"], notes)
            if options.precision == "fp16":
                self.scaler = torch.amp.GradScaler(device.type)
        self.inputs, self.targets = self._make_data(batch)

    def _make_optimizer(self, spec: dict, notes: dict):
        params = list(self.eager_model.parameters())
        if spec["type"] == "adamw":
            make, name = torch.optim.AdamW, "AdamW"
            kwargs = {"lr": spec["learning_rate"], "betas": (spec["beta1"], spec["beta2"]), "eps": spec["eps"],
                      "weight_decay": spec["weight_decay"]}
        else:
            make, name = torch.optim.SGD, "SGD"
            # dampening 0 (PyTorch's default), as batchsweep's SGD; weight decay is L2 on every parameter.
            kwargs = {"lr": spec["learning_rate"], "momentum": spec["momentum"],
                      "weight_decay": spec.get("weight_decay", 0.0), "nesterov": spec.get("nesterov", False)}
        # fused=True: one kernel over all parameters where PyTorch has it (CUDA; recent CPU builds too).
        try:
            optimizer = make(params, fused=True, **kwargs)
            notes["optimizer"] = f"torch.optim.{name}(fused=True)"
        except (RuntimeError, TypeError, ValueError) as e:
            optimizer = make(params, **kwargs)
            notes["optimizer"] = f"torch.optim.{name}, default implementation (fused=True: {_first_line(e)})"
        return optimizer

    def _make_data(self, batch: int):
        """Seeded synthetic inputs and targets for one micro-batch, created on the device once. Every
        micro-batch of a step reads them, as a training loop holds one micro-batch at a time (batchsweep's plan
        holds one data.input): holding all `accumulation` of them would put A - 1 more in the peak."""
        g, cfg = self.graph, self.options
        gen = torch.Generator(device=self.device)
        gen.manual_seed(cfg.seed)
        shape = (batch, *g.input_shape)
        if g.input_type == "tokens":
            inputs = torch.randint(0, self.vocab_size, shape, generator=gen, device=self.device)
        else:
            inputs = torch.randn(shape, generator=gen, device=self.device, dtype=self.weight_dtype or torch.float32)
        targets = None
        if self.train:
            if g.loss == "cross_entropy":
                rows = () if len(g.output_shape) == 1 else (g.output_shape[0],)
                targets = torch.randint(0, g.loss_classes, (batch, *rows), generator=gen,
                                        device=self.device)
            else:
                targets = torch.randn((batch, *g.output_shape), generator=gen, device=self.device)
        return inputs, targets

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)

    def step(self):
        """One optimizer step over `accumulation` micro-batches (train) or one forward batch (infer). Returns
        the mean loss as a 0-d tensor (train) or None; does not synchronize."""
        if not self.train:
            with torch.inference_mode():
                self.model(self.inputs)
            return None
        self.optimizer.zero_grad(set_to_none=True)
        total = None
        for _ in range(self.accumulation):
            with self._autocast():
                loss = loss_fn(self.model(self.inputs), self.targets, self.graph)
            scaled = loss / self.accumulation
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            total = loss.detach() if total is None else total + loss.detach()
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return total / self.accumulation

    def loss_scale(self) -> Optional[float]:
        return float(self.scaler.get_scale()) if self.scaler else None


class TorchRunner:
    """Runs points one at a time on one device; `measure(batch)` returns a finished Point."""

    def __init__(self, loaded: LoadedModel, graph: Graph, options: RunOptions, device: torch.device,
                 clock: Optional[Callable[[], float]] = None):
        self.loaded, self.graph, self.options, self.device = loaded, graph, options, device
        self.clock = clock or time.monotonic
        self.cuda = device.type == "cuda"
        # The report's settings say the warm-up time this device got (0.2 s on CUDA unless --warmup-time).
        options.stopping.warmup_time_s = options.stopping.resolved_warmup_time_s(self.cuda)
        self.notes: dict = {}  # how the steps run, for settings.torch
        self.warnings: list = []
        self.state_factory = PointState
        tf32 = options.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        if self.cuda:
            torch.cuda.set_device(device)
        # The first optimizer a process builds imports torch._dynamo (seconds): do it now, not inside the first
        # point's --timeout.
        if options.mode == "train":
            torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], fused=False)

    # ---- the device
    def device_info(self) -> dict:
        info = {
            "backend": "pytorch-compile" if self.options.compile else "pytorch-eager",
            "peak_flops": self.options.peak_flops,
            "peak_flops_source": "--peak-flops" if self.options.peak_flops else "unknown (pass --peak-flops)",
            "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda,
            "cudnn_version": self._cudnn_version(),
            "python_version": platform.python_version(),
            "device": str(self.device),
        }
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            info.update(name=props.name, memory_total_bytes=int(props.total_memory),
                        compute_capability=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count)
        else:
            info.update(name=_cpu_name(), memory_total_bytes=_cpu_memory_bytes(), threads=torch.get_num_threads())
        return info

    def _cudnn_version(self):
        """cuDNN's version on a CUDA device, else None. torch raises where the cuDNN it finds is not the one it
        was built against (an older system cuDNN on the library path): that is said as a warning, not a crash,
        since a model without convolutions may never call cuDNN."""
        if not self.cuda or not torch.backends.cudnn.is_available():
            return None
        try:
            return torch.backends.cudnn.version()
        except RuntimeError as e:
            self.warnings.append(f"cuDNN unusable: {_first_line(e)}")
            return None

    def describe(self) -> dict:
        """How the peer runs the steps, for the report's settings.torch."""
        train, p = self.options.mode == "train", self.options.precision
        if p in DTYPES:
            amp = (f"torch.autocast({DTYPES[p]}) with fp32 weights" + (" and GradScaler" if p == "fp16" else "")
                   if train else f"weights and inputs cast to {DTYPES[p]}")
        else:
            tf32 = self.cuda and p == "tf32"  # no TF32 on the CPU: the steps run in fp32 (the report warns)
            amp = "none (fp32 weights and math" + (", TF32 matmuls and convolutions)" if tf32 else ")")
        return {
            "execution": f"torch.compile(mode={self.options.compile_mode!r}, dynamic=False), compiled per point"
            if self.options.compile else "eager",
            "precision": amp,
            "attention": "torch.nn.functional.scaled_dot_product_attention",
            "checkpointing": self._describe_checkpointing() if train and self.options.checkpointing else "off",
            "timing": "CUDA events around each step" if self.cuda else "time.perf_counter around each step",
            "memory": "torch.cuda.max_memory_allocated over the timed steps (peak reset after warm-up)" if self.cuda
            else "not measured on the CPU",
            "data": "synthetic, seeded, one micro-batch created on the device once per point "
            "(every micro-batch reads it)",
            "timeout_clock": "starts after the first (compiling) warm-up step" if self.options.compile
            else "starts before the model is built, as batchsweep's",
            **self.notes,
        }

    def _describe_checkpointing(self) -> str:
        n = self.options.checkpoint_blocks
        reached = len(self.graph.recomputable_blocks)
        where = (f"around each of the {len(self.graph.blocks)} top-level transformer_block / residual copies"
                 if n is None else
                 f"around the first {n} of the {reached} top-level transformer_block / residual copies that "
                 f"backward reaches (--checkpoint-blocks {n}; the blocks after them keep every activation)")
        return (f"torch.utils.checkpoint.checkpoint(use_reentrant=False) {where}; a recompute leaves batchnorm's "
                "running statistics as the forward left them, as batchsweep's")

    # ---- memory
    def _release(self):
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
        if self.options.compile:
            torch._dynamo.reset()

    def _free_bytes(self) -> Optional[int]:
        return int(torch.cuda.mem_get_info(self.device)[0]) if self.cuda else None

    # ---- timing
    def _timed(self, state: PointState):
        """(step_ms, loss tensor or None) of one step."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = state.step()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)), loss
        begin = time.perf_counter()
        loss = state.step()
        return (time.perf_counter() - begin) * 1000.0, loss

    def _step(self, state: PointState, scale: Optional[float]):
        """(step_ms, loss or None, skipped, loss scale after the step) of one step. An fp16 step is skipped
        when GradScaler lowered the scale: the gradients overflowed and the optimizer did not update."""
        ms, loss = self._timed(state)
        value = float(loss) if loss is not None else None
        new_scale = state.loss_scale()
        skipped = new_scale is not None and scale is not None and new_scale < scale
        return ms, value, skipped, new_scale

    def measure(self, batch: int) -> Point:
        """One point: build, warm up, time steps until the stopping rule holds. Out-of-memory anywhere gives
        an `oom` point, another RuntimeError an `error` point; the device is released before returning."""
        opts = self.options
        train = opts.mode == "train"
        point = Point(batch=batch, accumulation=opts.accumulation if train else 1)
        self._release()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        free_before = self._free_bytes()
        # The per-point wall clock starts before the model is built, as batchsweep's; with --compile it starts
        # after the first warm-up step, which compiles.
        criterion = None if opts.compile else NoiseCriterion(opts.stopping, self.clock)
        warmup = max(opts.stopping.warmup_steps, 1) if opts.compile else opts.stopping.warmup_steps
        state = None
        warmup_cut = ""
        skipped_steps = 0
        updated = False  # a step of this point updated the weights (not skipped by GradScaler)
        last = None  # the last finite loss

        def judge(where: str, loss: Optional[float], skipped: bool, scale: Optional[float]) -> Optional[str]:
            """The error reason of a step that ends the point (an fp16 overflow at scale 1, a non-finite
            loss), else None."""
            nonlocal updated, last
            updated = updated or not skipped
            if skipped and _below_lowest_scale(scale):
                return _overflow_reason(where, updated, last)
            if loss is not None and math.isfinite(loss):
                last = loss
            if loss is not None and not math.isfinite(loss) and not skipped:
                return f"non-finite loss (NaN/Inf) at {where}"
            return None
        try:
            state = self.state_factory(self.loaded, self.graph, opts, self.device, batch, self.notes)
            scale = state.loss_scale()
            # --warmup steps, then more until --warmup-time has passed since the first ended (it holds the
            # one-time work, or the compile), not past --timeout: as batchsweep.
            warm_start, warm = self.clock(), 0
            clock_start = warm_start
            warmup_time = opts.stopping.resolved_warmup_time_s(self.cuda)
            warmup_cut = ""
            while True:
                now = self.clock()
                time_done = warmup_time == 0 or (warm >= 1 and now - clock_start >= warmup_time)
                # The timeout clock starts after the compile with --compile (as the point's), else before.
                spent = now - (clock_start if opts.compile else warm_start)
                if warm >= warmup and time_done:
                    break
                # Steps so slow that warming up alone has spent the --timeout: time one now, as batchsweep does
                # (after one warm-up step at least: it holds the one-time work), and say so.
                if warm >= 1 and spent >= opts.stopping.timeout_s:
                    warmup_cut = (f"warm-up cut to {warm} of {warmup} steps by the {opts.stopping.timeout_s:g} s "
                                  "--timeout" if warm < warmup else
                                  f"warm-up cut to {warm} steps, short of the {warmup_time:g} s --warmup-time, "
                                  f"by the {opts.stopping.timeout_s:g} s --timeout")
                    break
                warm += 1
                _, loss, skipped, scale = self._step(state, scale)
                if warm == 1:
                    clock_start = self.clock()
                criterion = criterion or NoiseCriterion(opts.stopping, self.clock)
                failure = judge(f"warm-up step {warm}", loss, skipped, scale)
                if failure:
                    point.status, point.reason = "error", failure
                    break
            criterion = criterion or NoiseCriterion(opts.stopping, self.clock)
            # The peak of the timed steps, as batchsweep's plan is one step's: not torch.compile's autotuning
            # or graph recording in the first warm-up steps, which the allocator frees again.
            if self.cuda:
                torch.cuda.synchronize(self.device)
                torch.cuda.reset_peak_memory_stats(self.device)
            step = 0
            while point.status == "ok":
                step += 1
                ms, loss, skipped, scale = self._step(state, scale)
                if not (math.isfinite(ms) and ms >= 0):
                    raise RuntimeError(f"the timer reported a step time of {ms} ms at step {step}")
                point.samples_ms.append(ms)
                criterion.add_measurement(ms)
                skipped_steps += skipped
                failure = judge(f"step {step}", loss, skipped, scale)
                if failure:
                    point.status, point.reason = "error", failure
                    break
                if loss is not None and math.isfinite(loss):
                    point.loss = loss
                if criterion.is_finished():
                    break
        except Exception as e:  # noqa: BLE001 - out-of-memory and runtime errors become points; others propagate
            if is_out_of_memory(e):
                point.status, point.reason = "oom", f"out of memory: {_first_line(e)}"
            elif isinstance(e, (RuntimeError, ValueError)):
                # ValueError too: PyTorch raises it for a shape its layers refuse (BatchNorm in training at
                # batch 1: "Expected more than 1 value per channel"), which is a point that did not run.
                point.status, point.reason = "error", f"{type(e).__name__}: {_first_line(e)}"
            else:
                raise
        finally:
            if self.cuda:
                with contextlib.suppress(RuntimeError):
                    torch.cuda.synchronize(self.device)
                point.measured_bytes = int(torch.cuda.max_memory_allocated(self.device))
                point.device_used_bytes = max(0, free_before - self._free_bytes())
            del state
            self._release()

        if train and opts.precision == "fp16":
            point.skipped_steps = skipped_steps
        flops = self.graph.flops_per_step(opts.mode, batch, point.accumulation)
        point.finish(flops, self.graph.tokens_per_sample, opts.peak_flops)
        if point.status == "ok":
            point.stop_reason = criterion.stop_reason()
            warning = criterion.warning()
            if warmup_cut:
                warning = f"{warning} ({warmup_cut})" if warning else warmup_cut
            if warning:
                label = str(batch) if point.accumulation == 1 else f"{batch}x{point.accumulation}"
                self.warnings.append(f"batch {label}: {warning}")
        else:
            point.stop_reason = "non-finite loss" if point.reason.startswith("non-finite") else point.status
        return point
