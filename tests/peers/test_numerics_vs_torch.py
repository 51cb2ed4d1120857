"""batchsweep's CPU training step against PyTorch's, number for number.

The CPU backend is the reference every GPU op is tested against, so its semantics must be PyTorch's. For each
small model below, tests/peers/step_trace (a test-support executable, $BATCHSWEEP_STEP_TRACE or
build/tests/step_trace) trains a few fp32 steps on the CPU backend as a sweep point does (its plan, seeded
initialisation and synthetic data) and writes the weights before, the inputs and targets, every step's loss,
the first and last step's gradients, the weights after and batchnorm's running statistics. Here the torchpeer
model (bench/peers/torchpeer/torch_model.py) gets the same weights, replays the steps with torch's own
optimizers (torch.optim.AdamW / SGD with the config's hyperparameters, accumulation as loss / A per
micro-batch) and the results must agree within fp32 tolerances.

Run: BATCHSWEEP_STEP_TRACE=build/tests/step_trace python3 -m unittest tests/peers/test_numerics_vs_torch.py -v
(from the repository root; skips without torch or the executable). BATCHSWEEP_NUMERICS_REPORT=1 prints each
case's measured agreement.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "peers"))

from torchpeer.config import resolve_config  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_torch_peer import EVERY_LAYER  # noqa: E402  the peer tests' every-layer stack, SGD, cross entropy

try:
    import torch
except ImportError:
    torch = None
else:
    torch.set_num_threads(1)  # tiny models on a busy two-core machine
    from torch import nn
    from torchpeer import torch_model as tm  # noqa: E402

# Agreement asked of fp32 on both sides (different summation orders, OpenBLAS vs torch's GEMMs): relative
# difference of each step's loss, and of each tensor's values in the 2-norm (‖ours - torch‖ / ‖torch‖) for the
# first step's gradients, the final parameters and batchnorm's running statistics.
LOSS_RTOL = 1e-5
TENSOR_RTOL = 1e-4
# Gradients at most this fraction of the largest gradient on both sides are rounding noise (see noise_mask).
NOISE_FLOOR = 1e-7


def find_batchsweep():
    for path in (os.environ.get("BATCHSWEEP_BIN", ""), os.path.join(ROOT, "build", "batchsweep")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def find_step_trace():
    for path in (os.environ.get("BATCHSWEEP_STEP_TRACE", ""), os.path.join(ROOT, "build", "tests", "step_trace")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


# ---------------------------------------------------------------------------------------------------------------
# The cases: tiny models that together cover every layer type, activation, loss and optimizer form.
# ---------------------------------------------------------------------------------------------------------------

CASES = {
    # linear with each activation; AdamW with non-default betas, eps and a large decoupled weight decay.
    "mlp-adamw-activations": dict(batch=4, accumulation=1, steps=4, seed=11, model={
        "name": "mlp-adamw-activations",
        "input": {"type": "vector", "features": 12},
        "layers": [{"type": "linear", "out_features": 16, "activation": "gelu"},
                   {"type": "linear", "out_features": 16, "activation": "silu"},
                   {"type": "linear", "out_features": 16, "activation": "tanh"},
                   {"type": "linear", "out_features": 16, "activation": "relu", "bias": False},
                   {"type": "linear", "out_features": 5}],
        "loss": "cross_entropy",
        "optimizer": {"type": "adamw", "learning_rate": 0.01, "beta1": 0.8, "beta2": 0.95, "eps": 1e-6,
                      "weight_decay": 0.1}}),
    # MSE; batchnorm of a vector (BatchNorm1d) with an activation; residuals with activations after the add;
    # SGD with nesterov momentum and L2 weight decay; gradient accumulation over 3 micro-batches.
    "vector-bn-residual-sgd-nesterov-mse-accum": dict(batch=4, accumulation=3, steps=3, seed=12, model={
        "name": "vector-bn-residual-sgd-nesterov-mse-accum",
        "input": {"type": "vector", "features": 10},
        "layers": [{"type": "linear", "out_features": 12},
                   {"type": "batchnorm", "activation": "relu"},
                   {"type": "residual", "activation": "tanh",
                    "layers": [{"type": "linear", "out_features": 12, "activation": "silu"},
                               {"type": "linear", "out_features": 12}]},
                   {"type": "residual", "activation": "gelu",
                    "layers": [{"type": "linear", "out_features": 12, "activation": "relu"}]},
                   {"type": "linear", "out_features": 3}],
        "loss": "mse",
        "optimizer": {"type": "sgd", "learning_rate": 0.05, "momentum": 0.9, "nesterov": True,
                      "weight_decay": 0.001}}),
    # SGD without momentum (no momentum buffer), accumulation 2, MSE over a wide output.
    "mlp-sgd-plain-mse-accum": dict(batch=3, accumulation=2, steps=3, seed=13, model={
        "name": "mlp-sgd-plain-mse-accum",
        "input": {"type": "vector", "features": 8},
        "layers": [{"type": "linear", "out_features": 16, "activation": "tanh"},
                   {"type": "linear", "out_features": 6}],
        "loss": "mse",
        "optimizer": {"type": "sgd", "learning_rate": 0.1, "momentum": 0.0}}),
    # A small ResNet: conv with and without bias, stride and padding; BatchNorm2d; max and average pooling with
    # padding (average counts padding, count_include_pad); a residual with a strided 1x1 shortcut + batchnorm
    # and ReLU after the add; global average pooling; SGD momentum with weight decay (resnet's optimizer).
    "resnet-like-sgd-momentum": dict(batch=3, accumulation=1, steps=3, seed=14, model={
        "name": "resnet-like-sgd-momentum",
        "input": {"type": "image", "channels": 3, "height": 10, "width": 10},
        "layers": [{"type": "conv2d", "out_channels": 6, "kernel_size": 3, "padding": 1, "bias": False},
                   {"type": "batchnorm", "activation": "relu"},
                   {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
                   {"type": "residual", "activation": "relu",
                    "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1, "stride": 2,
                                  "bias": False},
                                 {"type": "batchnorm"}],
                    "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2,
                                "padding": 1, "bias": False},
                               {"type": "batchnorm", "activation": "relu"},
                               {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1,
                                "activation": "silu"}]},
                   {"type": "avgpool2d", "kernel_size": 2, "stride": 1, "padding": 1},
                   {"type": "global_avgpool"},
                   {"type": "linear", "out_features": 4}],
        "loss": "cross_entropy",
        "optimizer": {"type": "sgd", "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.0005}}),
    # A language model: token + position embedding, causal pre-LN transformer blocks (repeat makes copies),
    # a non-causal attention layer, layernorm, a per-token cross entropy head; AdamW; accumulation 2.
    "tiny-lm-adamw-accum": dict(batch=2, accumulation=2, steps=3, seed=15, model={
        "name": "tiny-lm-adamw-accum",
        "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 23},
        "layers": [{"type": "embedding", "dim": 16},
                   {"type": "transformer_block", "heads": 2, "mlp_ratio": 2, "causal": True, "repeat": 2},
                   {"type": "attention", "heads": 4},
                   {"type": "layernorm"},
                   {"type": "linear", "out_features": 23}],
        "loss": "cross_entropy",
        "optimizer": {"type": "adamw", "learning_rate": 0.003, "beta1": 0.9, "beta2": 0.95,
                      "weight_decay": 0.1}}),
    # A ViT: patch embedding (conv k=p stride=p + positions), non-causal blocks, layernorm, mean over the tokens
    # (global_avgpool of [T, D]), linear head; AdamW.
    "vit-adamw": dict(batch=3, accumulation=1, steps=3, seed=16, model={
        "name": "vit-adamw",
        "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
        "layers": [{"type": "patch_embedding", "patch_size": 4, "dim": 16},
                   {"type": "transformer_block", "heads": 4, "mlp_ratio": 2},
                   {"type": "layernorm"},
                   {"type": "global_avgpool"},
                   {"type": "linear", "out_features": 5}],
        "loss": "cross_entropy",
        "optimizer": {"type": "adamw", "learning_rate": 0.001, "weight_decay": 0.05}}),
    # Every layer type in one stack (test_torch_peer.py's EVERY_LAYER): conv, residual, both pools, BatchNorm2d
    # and BatchNorm1d, patch embedding, causal attention, transformer blocks, layernorm, flatten; SGD momentum.
    "every-layer-sgd": dict(batch=4, accumulation=1, steps=3, seed=17,
                            model=dict(EVERY_LAYER, name="every-layer-sgd")),
    # Sensitivity: the sweep's initialisation keeps pre-activations near 0, where GELU's tanh and erf forms agree
    # to ~1e-5 and layernorm's eps hardly matters. Weights x4 put GELU's inputs around +-2, where the forms part
    # (erf for tanh: 1.6e-3 in the gradients); a layernorm right after the embedding (std 0.02, variance 4e-4)
    # sees its eps at about 1% of the variance.
    "gelu-scaled-weights": dict(batch=4, accumulation=1, steps=3, seed=18, weight_scale=4.0, model={
        "name": "gelu-scaled-weights",
        "input": {"type": "vector", "features": 12},
        "layers": [{"type": "linear", "out_features": 24, "activation": "gelu", "repeat": 3},
                   {"type": "linear", "out_features": 5}],
        "loss": "cross_entropy",
        "optimizer": {"type": "sgd", "learning_rate": 0.01, "momentum": 0.9}}),
    "layernorm-after-embedding": dict(batch=4, accumulation=1, steps=3, seed=19, model={
        "name": "layernorm-after-embedding",
        "input": {"type": "tokens", "sequence_length": 4, "vocab_size": 9},
        "layers": [{"type": "embedding", "dim": 16},
                   {"type": "layernorm"},
                   {"type": "linear", "out_features": 9}],
        "loss": "cross_entropy",
        "optimizer": {"type": "adamw", "learning_rate": 0.001}}),
    # Presets, unchanged, at a small batch: what a sweep of them trains.
    "preset:mlp": dict(batch=4, accumulation=1, steps=3, seed=1234, model="mlp"),
    "preset:tiny-lm": dict(batch=2, accumulation=1, steps=2, seed=1234, model="tiny-lm"),
    "preset:resnet-small": dict(batch=2, accumulation=1, steps=2, seed=1234, model="resnet-small"),
}

# Cases left out of the assertions, each with the finding that explains it (empty: every case must agree).
KNOWN_DIFFERENCES = {}


# ---------------------------------------------------------------------------------------------------------------
# The trace and the torch replay
# ---------------------------------------------------------------------------------------------------------------

def read_trace(prefix: str):
    with open(prefix + ".json", encoding="utf-8") as f:
        index = json.load(f)
    with open(prefix + ".bin", "rb") as f:
        blob = f.read()
    arrays = {}
    for name, spec in index["arrays"].items():
        arrays[name] = _array(blob, spec)
    for bn in index["batchnorm_running"]:
        arrays[f"running[{bn['op']}]"] = _array(blob, bn["values"])
    return index, arrays


def _array(blob: bytes, spec: dict):
    dtype = {"f32": torch.float32, "i32": torch.int32}[spec["dtype"]]
    start, count = spec["offset"], spec["count"]
    return torch.frombuffer(bytearray(blob[start:start + 4 * count]), dtype=dtype).clone()


def ordered_parameters(module):
    """The module's parameters in batchsweep's flat order (src/plan/lower.cpp): per op, weight then bias (or
    gamma then beta, tokens then positions, conv weight, bias, positions for the patch embedding); attention is
    qkv then out; a transformer block ln1, attention, ln2, fc, proj; a residual's shortcut before its inner
    layers (torch registers inner first: mapped here explicitly)."""
    if isinstance(module, (tm.LinearAct, tm.Conv2dAct)):
        return [module.weight] + ([module.bias] if module.bias is not None else [])
    if isinstance(module, (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d)):
        return [module.weight, module.bias]
    if isinstance(module, tm.TokenEmbedding):
        return [module.tokens.weight, module.positions]
    if isinstance(module, tm.PatchEmbedding):
        return [module.proj.weight, module.proj.bias, module.positions]
    if isinstance(module, tm.SelfAttention):
        return ordered_parameters(module.qkv) + ordered_parameters(module.out)
    if isinstance(module, tm.TransformerBlock):
        return [p for m in (module.ln1, module.attn, module.ln2, module.fc, module.proj) for p in ordered_parameters(m)]
    if isinstance(module, tm.Residual):
        parts = ([module.shortcut] if module.shortcut is not None else []) + [module.inner]
        return [p for m in parts for p in ordered_parameters(m)]
    if isinstance(module, nn.Sequential):
        return [p for m in module for p in ordered_parameters(m)]
    if any(True for _ in module.parameters()):
        raise AssertionError(f"no parameter order for {type(module).__name__}")
    return []


def batchnorms_in_order(module):
    """Batchnorm modules in batchsweep's op order (a residual's shortcut first)."""
    if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
        return [module]
    if isinstance(module, tm.Residual):
        parts = ([module.shortcut] if module.shortcut is not None else []) + [module.inner]
        return [b for m in parts for b in batchnorms_in_order(m)]
    if isinstance(module, nn.Sequential):
        return [b for m in module for b in batchnorms_in_order(m)]
    return []


def load_weights(test, model, index, flat):
    params = ordered_parameters(model)
    test.assertEqual({id(p) for p in params}, {id(p) for p in model.parameters()}, "every parameter mapped once")
    test.assertEqual(len(params), len(index["params"]))
    with torch.no_grad():
        for p, entry in zip(params, index["params"]):
            test.assertEqual(list(p.shape), entry["shape"], f"{entry['path']}.{entry['name']}")
            start = entry["offset"]
            p.copy_(flat[start:start + entry["elements"]].view(entry["shape"]))
    return params


def make_optimizer(params, spec: dict):
    if spec["type"] == "adamw":
        return torch.optim.AdamW(params, lr=spec["learning_rate"], betas=(spec["beta1"], spec["beta2"]),
                                 eps=spec["eps"], weight_decay=spec["weight_decay"])
    return torch.optim.SGD(params, lr=spec["learning_rate"], momentum=spec["momentum"], dampening=0.0,
                           weight_decay=spec.get("weight_decay", 0.0), nesterov=spec.get("nesterov", False))


def batches(index, arrays):
    """Inputs and targets per micro-batch, shaped as the torch model takes them."""
    a, b = index["accumulation"], index["batch"]
    inputs, targets = arrays["inputs"], arrays["targets"]
    inputs = inputs.long() if inputs.dtype == torch.int32 else inputs
    targets = targets.long() if targets.dtype == torch.int32 else targets
    inputs = inputs.view([a, b] + index["input_shape"])
    if index["model"]["loss"] == "cross_entropy":
        targets = targets.view(a, b, index["loss_rows"])
    else:
        targets = targets.view([a, b] + index["output_shape"])
    return list(zip(inputs, targets))


def replay(test, index, arrays):
    """The trace's steps in torch; returns losses, first-step gradients, final parameters and the batchnorms."""
    config = resolve_config(index["model"], index["source"])
    model = tm.build_model(config, index["source"])
    model.train()
    params = load_weights(test, model, index, arrays["params_before"])
    optimizer = make_optimizer(params, config["optimizer"])
    data = batches(index, arrays)
    losses, grads_first = [], None
    for step in range(index["steps"]):
        optimizer.zero_grad(set_to_none=False)
        total = 0.0
        for x, t in data:
            loss = tm.loss_fn(model(x), t, model.graph)
            (loss / len(data)).backward()
            total += loss.item()
        losses.append(total / len(data))
        if step == 0:
            grads_first = [p.grad.detach().clone() for p in params]
        optimizer.step()
    return losses, grads_first, [p.detach().clone() for p in params], batchnorms_in_order(model)


def rel(a, b) -> float:
    """‖a - b‖ / ‖b‖ in float64 (‖a - b‖ alone where b is 0)."""
    a, b = a.double().flatten(), b.double().flatten()
    norm = b.norm().item()
    diff = (a - b).norm().item()
    return diff / norm if norm > 0 else diff


def noise_mask(ours, theirs, floor):
    """Elements whose gradient is rounding noise on both sides (|g| <= floor, not both exactly 0): where the exact
    gradient is 0 but fp32 leaves ~1e-10 to 1e-8, as for the key part of attention's qkv bias (softmax ignores a shift
    of every score in a row) or a bias right before a batchnorm. Their relative difference means nothing, and
    AdamW turns any such noise into a full step of either sign, which moves nothing downstream (the same
    invariance), so they are left out of the comparison (and counted in the report)."""
    return (torch.maximum(ours.abs(), theirs.abs()) <= floor) & ~((ours == 0) & (theirs == 0))


def compare(index, arrays, losses, grads_first, params_after, batchnorms):
    """Per quantity, the worst relative difference and where; "noise" counts the elements left out."""
    out = {}
    out["loss"] = max((abs(x - y) / abs(y), f"step {i}") for i, (x, y) in enumerate(zip(index["losses"], losses)))
    floor = NOISE_FLOOR * max(g.abs().max().item() for g in grads_first)
    adamw = index["model"]["optimizer"]["type"] == "adamw"
    noise = 0
    worst_grad, worst_param = (0.0, ""), (0.0, "")
    for entry, g, p in zip(index["params"], grads_first, params_after):
        where = f"{entry['path']}.{entry['name']}"
        span = slice(entry["offset"], entry["offset"] + entry["elements"])
        ours_g, ours_p = arrays["grads_first"][span], arrays["params_after"][span]
        keep = ~noise_mask(ours_g, g.flatten(), floor)
        noise += int((~keep).sum())
        worst_grad = max(worst_grad, (rel(ours_g[keep], g.flatten()[keep]), where))
        keep_p = keep if adamw else torch.ones_like(keep)
        worst_param = max(worst_param, (rel(ours_p[keep_p], p.flatten()[keep_p]), where))
    out["grads_first"], out["params_after"] = worst_grad, worst_param
    worst = (0.0, "")
    for bn, module in zip(index["batchnorm_running"], batchnorms):
        ours, c = arrays[f"running[{bn['op']}]"], bn["channels"]
        worst = max(worst, (rel(ours[:c], module.running_mean), f"ops[{bn['op']}].running_mean"),
                    (rel(ours[c:], module.running_var), f"ops[{bn['op']}].running_var"))
    if index["batchnorm_running"]:
        out["batchnorm_running"] = worst
    out["noise"] = (noise, "elements")
    return out


def model_argument(folder: str, name: str, case: dict) -> str:
    """A preset's name, or the case's config written to a file."""
    if not isinstance(case["model"], dict):
        return case["model"]
    path = os.path.join(folder, name.replace(":", "_") + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(case["model"], f)
    return path


def trace(tool: str, folder: str, name: str, case: dict):
    model = model_argument(folder, name, case)
    prefix = os.path.join(folder, name.replace(":", "_"))
    cmd = [tool, "--model", model, "--batch", str(case["batch"]), "--accumulation", str(case["accumulation"]),
           "--steps", str(case["steps"]), "--seed", str(case["seed"]), "--weight-scale", str(case.get("weight_scale", 1.0)),
           "--out", prefix]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr}")
    return read_trace(prefix)


@unittest.skipIf(torch is None, "PyTorch is not importable")
@unittest.skipIf(find_step_trace() is None,
                 "no step_trace executable ($BATCHSWEEP_STEP_TRACE or build/tests/step_trace; "
                 "ninja -C build step_trace)")
class NumericsVsTorchTest(unittest.TestCase):
    """One subtest per case: the CPU backend's losses, gradients, updated weights and running statistics
    against torch's for the same weights, data and optimizer."""

    def test_training_steps_match_torch(self):
        tool = find_step_trace()
        report = os.environ.get("BATCHSWEEP_NUMERICS_REPORT") == "1"
        with tempfile.TemporaryDirectory() as folder:
            for name, case in CASES.items():
                with self.subTest(case=name):
                    index, arrays = trace(tool, folder, name, case)
                    result = compare(index, arrays, *replay(self, index, arrays))
                    if report:
                        cells = ", ".join(f"{k} {v[0]:.2e} ({v[1]})" if isinstance(v[0], float) else f"{k} {v[0]} {v[1]}"
                                          for k, v in result.items())
                        print(f"\n{name}: {cells}", file=sys.stderr)
                    if name in KNOWN_DIFFERENCES:
                        continue
                    self.assertLessEqual(result["loss"][0], LOSS_RTOL, f"{name}: loss at {result['loss'][1]}")
                    for key in ("grads_first", "params_after", "batchnorm_running"):
                        if key in result:
                            self.assertLessEqual(result[key][0], TENSOR_RTOL, f"{name}: {key} of {result[key][1]}")

    @unittest.skipIf(find_batchsweep() is None, "no batchsweep binary ($BATCHSWEEP_BIN or build/batchsweep)")
    def test_trace_is_the_sweeps_training(self):
        """step_trace trains what `batchsweep run --backend cpu` trains: the report's loss (the last step's, after
        the warm-up step and the timed samples) is the trace's loss at that step, to the bit."""
        tool, binary = find_step_trace(), find_batchsweep()
        fast = ["--warmup", "1", "--min-samples", "3", "--min-time", "0", "--max-noise", "1000", "--timeout", "5",
                "--quiet"]
        with tempfile.TemporaryDirectory() as folder:
            for name in ("mlp-adamw-activations", "vector-bn-residual-sgd-nesterov-mse-accum", "tiny-lm-adamw-accum"):
                with self.subTest(case=name):
                    case = CASES[name]
                    report = os.path.join(folder, "report.json")
                    cmd = [binary, "run", "--model", model_argument(folder, name, case), "--backend", "cpu",
                           "--batch", str(case["batch"]), "--accumulation", str(case["accumulation"]), "--seed",
                           str(case["seed"]), "--json", report] + fast
                    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                    self.assertEqual(done.returncode, 0, done.stderr)
                    with open(report, encoding="utf-8") as f:
                        point = json.load(f)["points"][0]
                    steps = 1 + len(point["samples_ms"])
                    index, _ = trace(tool, folder, name, dict(case, steps=steps))
                    self.assertEqual(index["losses"][-1], point["loss"])

    def test_parameter_order_covers_the_model(self):
        """The explicit order mapping finds each torch parameter once with batchsweep's shape."""
        tool = find_step_trace()
        with tempfile.TemporaryDirectory() as folder:
            index, arrays = trace(tool, folder, "every-layer-sgd", dict(CASES["every-layer-sgd"], steps=1))
            config = resolve_config(index["model"], index["source"])
            model = tm.build_model(config, index["source"])
            params = load_weights(self, model, index, arrays["params_before"])
            self.assertEqual(sum(p.numel() for p in params), index["parameter_count"])
            self.assertEqual(len(batchnorms_in_order(model)), len(index["batchnorm_running"]))


if __name__ == "__main__":
    unittest.main()
