"""Tests of the PyTorch peer (bench/peers/torch_sweep.py).

Run: python3 -m unittest discover -s tests/peers -v   (from the repository root)

The config, grammar, counting, statistics, stopping and report tests need only the standard library (and
jsonschema for schema validation, skipped without it). The PyTorch tests skip cleanly when torch is not
importable. Tests against the batchsweep binary use $BATCHSWEEP_BIN or build/batchsweep, and skip without one.
"""

import contextlib
import io
import json
import math
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "bench", "peers")
sys.path.insert(0, PEERS)

from torchpeer import PEER_NAME  # noqa: E402
from torchpeer.cli import batchsweep_parameters, check_parameters, exit_code, main, parse_settings  # noqa: E402
from torchpeer.config import load_model, lower, resolve_config  # noqa: E402
from torchpeer.errors import ConfigError, InputError, ParameterMismatch, UsageError  # noqa: E402
from torchpeer.grammar import parse_batches  # noqa: E402
from torchpeer.report import Point, Report, write_file_atomic  # noqa: E402
from torchpeer.stats import percentile, relative_noise, summarize  # noqa: E402
from torchpeer.stopping import NoiseCriterion, StoppingSettings  # noqa: E402

try:
    import torch
except ImportError:
    torch = None
else:
    # The models here are tiny: one thread avoids OpenMP spin-waiting on a busy two-core machine.
    torch.set_num_threads(1)

try:
    import jsonschema
except ImportError:
    jsonschema = None

SCHEMA_PATH = os.path.join(ROOT, "configs", "schema", "report-v1.schema.json")

# Parameter counts of the presets by batchsweep's conventions (lower.cpp). gpt2-small: GPT-2's 124439808 plus an
# untied 50257 x 768 head without bias; vit-base: ViT-B/16's 86567656 less the class token (768) and its position
# (768).
PRESET_PARAMETERS = {
    "gpt2-small": 124439808 + 50257 * 768,
    "vit-base": 86567656 - 1536,
    "bert-base": 132363066,
    "mlp": 784 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10,
    "mlp-large": 4096 * 8192 + 8192 + 3 * (8192 * 8192 + 8192) + 8192 * 1000 + 1000,
    "resnet-small": 696618,
    "resnet-50": 25557032,  # torchvision.models.resnet50()
    "tiny-lm": 661992,
}

# A small model with every layer type: image input through conv, pools, residual, patch embedding, attention,
# a transformer block, layernorm, batchnorm (of an image and of a vector), global pool, flatten and a linear head.
EVERY_LAYER = {
    "name": "every-layer",
    "input": {"type": "image", "channels": 3, "height": 16, "width": 16},
    "layers": [
        {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "activation": "silu"},
        {"type": "residual", "activation": "relu", "layers": [
            {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "activation": "tanh"}]},
        {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
        {"type": "avgpool2d", "kernel_size": 2, "stride": 1},
        {"type": "batchnorm", "activation": "relu"},
        {"type": "patch_embedding", "patch_size": 7, "dim": 16},
        {"type": "attention", "heads": 2, "causal": True},
        {"type": "transformer_block", "heads": 4, "mlp_ratio": 2, "repeat": 2},
        {"type": "layernorm"},
        {"type": "linear", "out_features": 12, "activation": "gelu"},
        {"type": "flatten"},
        {"type": "batchnorm"},
        {"type": "linear", "out_features": 5, "bias": False},
    ],
    "loss": "cross_entropy",
    "optimizer": {"type": "sgd", "learning_rate": 0.01},
}

TINY_MLP = {
    "name": "tiny-mlp",
    "input": {"type": "vector", "features": 16},
    "layers": [{"type": "linear", "out_features": 32, "activation": "relu"}, {"type": "linear", "out_features": 4}],
}

TINY_RESIDUAL = {
    "name": "tiny-residual",
    "input": {"type": "vector", "features": 8},
    "layers": [{"type": "residual", "layers": [{"type": "linear", "out_features": 8}]},
               {"type": "linear", "out_features": 4}],
}

TINY_LM = {
    "name": "tiny-tokens",
    "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 50},
    "layers": [{"type": "embedding", "dim": 16}, {"type": "transformer_block", "heads": 2, "causal": True},
               {"type": "layernorm"}, {"type": "linear", "out_features": 50}],
}

# --checkpointing's two kinds of block: transformer blocks (one layer, repeat 2: two blocks between an embedding
# and a head, which are not checkpointed), and residuals whose batchnorms' running statistics a recompute must not
# update again (one with a projection shortcut, as torchvision's downsample, one with the identity).
CHECKPOINTED_LM = {
    "name": "checkpointed-lm",
    "input": {"type": "tokens", "sequence_length": 8, "vocab_size": 50},
    "layers": [{"type": "embedding", "dim": 16},
               {"type": "transformer_block", "heads": 2, "causal": True, "repeat": 2},
               {"type": "layernorm"}, {"type": "linear", "out_features": 50}],
}

CHECKPOINTED_BATCHNORM = {
    "name": "checkpointed-batchnorm",
    "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
    "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
               {"type": "batchnorm", "activation": "relu"},
               {"type": "residual", "activation": "relu",
                "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2, "padding": 1,
                            "bias": False},
                           {"type": "batchnorm", "activation": "relu"},
                           {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1, "bias": False},
                           {"type": "batchnorm"}],
                "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1, "stride": 2, "bias": False},
                             {"type": "batchnorm"}]},
               {"type": "residual", "activation": "relu",
                "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1},
                           {"type": "batchnorm"}]},
               {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}],
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
}

FAST = ["--warmup", "1", "--min-samples", "3", "--min-time", "0", "--max-noise", "1000", "--timeout", "5", "--quiet"]


def find_batchsweep():
    for path in (os.environ.get("BATCHSWEEP_BIN", ""), os.path.join(ROOT, "build", "batchsweep")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def validate(test: unittest.TestCase, doc: dict):
    if jsonschema is None:
        test.skipTest("jsonschema is not installed")
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        schema = json.load(f)
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = ["/".join(map(str, e.absolute_path)) + ": " + e.message for e in validator.iter_errors(doc)]
    test.assertEqual(errors, [])


def write_json(folder: str, name: str, doc) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def run_main(argv: list):
    """(exit code, stdout, stderr) of torch_sweep.py's main."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


class BatchGrammarTest(unittest.TestCase):
    def test_lists_and_ranges(self):
        self.assertEqual(parse_batches("64"), [64])
        self.assertEqual(parse_batches("64, 1,8,8"), [1, 8, 64])
        self.assertEqual(parse_batches("8:32:+8"), [8, 16, 24, 32])
        self.assertEqual(parse_batches("8:30:+8"), [8, 16, 24])
        self.assertEqual(parse_batches("1:4096:*2")[-3:], [1024, 2048, 4096])
        self.assertEqual(len(parse_batches("1:4096:*2")), 13)
        self.assertEqual(parse_batches("16:128"), [16, 32, 64, 128])
        self.assertEqual(parse_batches("3:100:*3"), [3, 9, 27, 81])
        self.assertEqual(parse_batches("1e3"), [1000])
        self.assertEqual(parse_batches("16777216"), [1 << 24])

    def test_errors_name_the_flag_and_item(self):
        cases = {
            "0": "--batch: '0': batch 0 is below the minimum 1",
            "1,8:2": "--batch: '8:2' in '1,8:2': stop 2 is below start 8",
            "16777217": "--batch: '16777217': batch 16777217 is above the maximum batch (2^24)",
            "1:1e9": "--batch: '1:1e9': batch 1e9 is above the maximum batch (2^24)",
            "1.5": "--batch: '1.5': batch '1.5' is not an integer",
            "x": "--batch: 'x': batch 'x' is not an integer",
            "1:8:*1": "--batch: '1:8:*1': factor 1 is below the minimum 2",
            "1:8:+0": "--batch: '1:8:+0': step 0 is below the minimum 1",
            "1:8:/2": "--batch: '1:8:/2': step '/2' must start with + (arithmetic) or * (geometric)",
            "1,,2": "--batch: '' in '1,,2': empty item in the batch list",
            "1:": "--batch: '1:': the range's stop is missing (start:stop)",
            ":8": "--batch: ':8': the range's start is missing (start:stop)",
            "1:2:3:4": "--batch: '1:2:3:4': a range is start:stop, start:stop:+step or start:stop:*factor",
            " ": "--batch: the batch list is empty",
        }
        for text, message in cases.items():
            with self.subTest(text=text):
                with self.assertRaises(UsageError) as caught:
                    parse_batches(text)
                self.assertEqual(str(caught.exception), message)

    def test_auto_and_too_many(self):
        with self.assertRaisesRegex(UsageError, "`auto` is batchsweep's own search"):
            parse_batches("auto")
        with self.assertRaisesRegex(UsageError, "expands to more than 4096 batches"):
            parse_batches("1:10000:+1")


class StatsTest(unittest.TestCase):
    def test_percentiles_match_numpy_linear(self):
        samples = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
        # np.percentile(samples, q) for q = 0, 50, 90, 95, 99, 100 (method "linear").
        expected = {0: 1.0, 50: 3.5, 90: 6.899999999999999, 95: 7.949999999999999, 99: 8.79, 100: 9.0}
        for q, value in expected.items():
            with self.subTest(q=q):
                self.assertAlmostEqual(percentile(samples, q), value, places=12)
        self.assertEqual(percentile([], 50), 0.0)
        with self.assertRaises(ValueError):
            percentile(samples, 101)
        with self.assertRaises(ValueError):
            percentile([1.0, math.nan], 50)

    def test_against_numpy_when_installed(self):
        try:
            import numpy
        except ImportError:
            self.skipTest("numpy is not installed")
        values = [((i * 7919) % 101) / 7.0 + 0.25 for i in range(37)]
        # batchsweep computes the rank as (n - 1) * q / 100, numpy as (n - 1) * (q / 100): equal up to rounding.
        for q in (0, 10, 33.3, 50, 90, 95, 99, 100):
            self.assertAlmostEqual(percentile(values, q), float(numpy.percentile(values, q, method="linear")),
                                   places=12)

    def test_summarize(self):
        s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
        self.assertEqual((s.mean, s.min, s.max, s.median, s.p50), (5.0, 2.0, 9.0, 4.5, 4.5))
        self.assertAlmostEqual(s.stddev, math.sqrt(32.0 / 7.0))
        self.assertAlmostEqual(relative_noise([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]), math.sqrt(32.0 / 7.0) / 5)
        self.assertEqual(summarize([3.0]).stddev, 0.0)
        self.assertEqual(relative_noise([3.0]), 0.0)
        self.assertEqual(summarize([]).to_json()["mean"], 0.0)


class StoppingTest(unittest.TestCase):
    def make(self, **kw):
        now = [0.0]
        criterion = NoiseCriterion(StoppingSettings(**kw), clock=lambda: now[0])
        return criterion, now

    def test_noise_target_needs_samples_and_time(self):
        c, _ = self.make(min_samples=10, min_time_s=0.5)
        for _ in range(9):
            c.add_measurement(100.0)
            self.assertFalse(c.is_finished())
        c.add_measurement(100.0)
        self.assertTrue(c.is_finished())
        self.assertEqual(c.stop_reason(), "noise target")
        self.assertIsNone(c.warning())

    def test_min_time(self):
        c, _ = self.make(min_samples=2, min_time_s=0.5)
        for _ in range(49):
            c.add_measurement(10.0)
            self.assertFalse(c.is_finished())
        c.add_measurement(10.0)
        self.assertTrue(c.is_finished())

    def test_timeout_warning_says_what_was_missed(self):
        c, now = self.make(min_samples=10, timeout_s=2.0)
        for v in (1.0, 3.0, 1.0):
            c.add_measurement(v)
        now[0] = 2.5
        self.assertTrue(c.is_finished())
        self.assertEqual(c.stop_reason(), "timeout")
        self.assertEqual(c.warning(), "timeout 2 s reached after 2.5 s with noise 69.3% > 1% target, 3 samples < 10 "
                                      "minimum, 0.01 s measured < 0.5 s minimum (raise --timeout or relax --max-noise)")

    def test_sample_cap(self):
        c, _ = self.make(min_samples=1, min_time_s=0, max_samples=4)
        for v in (1.0, 2.0, 1.0, 2.0):
            c.add_measurement(v)
        self.assertTrue(c.is_finished())
        self.assertEqual(c.stop_reason(), "sample cap")
        self.assertIn("sample cap 4 reached with noise", c.warning())

    def test_one_sample_never_meets_the_noise_target(self):
        c, _ = self.make(min_samples=1, min_time_s=0)
        c.add_measurement(50.0)
        self.assertFalse(c.is_finished())  # the noise of one step is unknown
        c.add_measurement(50.0)
        self.assertTrue(c.is_finished())
        self.assertEqual(c.stop_reason(), "noise target")
        slow, now = self.make(min_samples=1, min_time_s=0, timeout_s=1.0)
        now[0] = 2.0
        slow.add_measurement(2000.0)
        self.assertTrue(slow.is_finished())
        self.assertIn("noise unknown from one sample", slow.warning())

    def test_a_noise_that_settled_above_the_target_stops(self):
        c, now = self.make()
        added = 0
        while not c.is_finished() and added < 1000:
            c.add_measurement(98.0 if added % 2 else 102.0)
            now[0] += 0.001
            added += 1
        self.assertEqual(added, 112)  # the same rule, and the same step, as batchsweep's criterion
        self.assertEqual(c.stop_reason(), "noise settled")
        self.assertIn("noise settled at 2.0%, above the 1% target, after 112 timed steps", c.warning())
        self.assertIn("the mean step is known to \u00b10.37%", c.warning())

    def test_validate_names_flags(self):
        for kw, flag in (({"warmup_steps": -1}, "--warmup"), ({"min_samples": 0}, "--min-samples"),
                         ({"min_time_s": math.inf}, "--min-time"), ({"max_noise_pct": 0}, "--max-noise"),
                         ({"timeout_s": -1}, "--timeout"), ({"warmup_time_s": -0.5}, "--warmup-time"),
                         ({"max_samples": 0}, "--max-samples"), ({"min_samples": 20, "max_samples": 10},
                                                                  "--min-samples")):
            with self.subTest(flag=flag):
                with self.assertRaisesRegex(UsageError, "^" + flag):
                    StoppingSettings(**kw).validate()

    def test_time_past_the_timeout_is_a_usage_error_as_batchsweep(self):
        from torchpeer.cli import parse_settings
        with self.assertRaisesRegex(UsageError, "^--min-time: 10 s of timed steps cannot fit in the 10 s --timeout"):
            parse_settings(["--min-time", "10"])
        with self.assertRaisesRegex(UsageError, "^--warmup-time 2 s and --min-time 3 s add up to 5 s"):
            parse_settings(["--warmup-time", "2", "--min-time", "3", "--timeout", "4"])
        self.assertEqual(parse_settings(["--min-time", "3", "--max-samples", "20"]).stopping.max_samples, 20)

    def test_warmup_time_defaults_as_batchsweep(self):
        self.assertEqual(StoppingSettings().resolved_warmup_time_s(cuda=True), 0.2)
        self.assertEqual(StoppingSettings().resolved_warmup_time_s(cuda=False), 0.0)
        self.assertEqual(StoppingSettings(warmup_time_s=1.5).resolved_warmup_time_s(cuda=False), 1.5)


class ConfigTest(unittest.TestCase):
    def test_preset_parameter_counts(self):
        for name, expected in PRESET_PARAMETERS.items():
            with self.subTest(preset=name):
                model = load_model(name)
                self.assertEqual(model.source, f"preset:{name}")
                self.assertEqual(lower(model.config, model.source).parameters, expected)

    def test_flops_follow_batchsweep_conventions(self):
        mlp = lower(load_model("mlp").config, "mlp")
        self.assertEqual(mlp.forward_flops_per_sample, 2.0 * (784 * 128 + 128 * 128 + 128 * 10))
        # No input gradient for the first linear, which reads the data.
        self.assertEqual(mlp.flops_per_step("train", 8, 4),
                         8 * 4 * (3 * mlp.forward_flops_per_sample - 2.0 * 784 * 128))
        self.assertEqual(mlp.flops_per_step("infer", 8, 1), 8 * mlp.forward_flops_per_sample)
        lm = lower(load_model("tiny-lm").config, "tiny-lm")
        t, d, v = 64, 128, 1000
        block = 2 * t * d * 3 * d + 4 * t * t * d + 2 * t * d * d + 2 * (2 * t * d * 4 * d)
        self.assertEqual(lm.forward_flops_per_sample, 2 * block + 2 * t * d * v)
        self.assertEqual(lm.train_flops_per_sample, 3 * lm.forward_flops_per_sample)  # the embedding reads the data
        self.assertEqual((lm.tokens_per_sample, lm.loss_rows, lm.loss_classes), (64, 64, 1000))

    def test_defaults_are_written_out(self):
        cfg = resolve_config(EVERY_LAYER, "every.json")
        self.assertEqual(cfg["layers"][0], {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 1,
                                            "padding": 1, "bias": True, "activation": "silu", "repeat": 1})
        self.assertEqual(cfg["layers"][1]["activation"], "relu")
        self.assertNotIn("activation", resolve_config(TINY_RESIDUAL, "r.json")["layers"][0])  # none: left out
        self.assertEqual(cfg["layers"][2], {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1, "repeat": 1})
        self.assertEqual(cfg["layers"][3], {"type": "avgpool2d", "kernel_size": 2, "stride": 1, "repeat": 1})  # padding 0: left out
        self.assertEqual(cfg["layers"][3]["stride"], 1)
        self.assertEqual(cfg["optimizer"], {"type": "sgd", "learning_rate": 0.01, "momentum": 0.9})
        nesterov = dict(EVERY_LAYER, optimizer={"type": "sgd", "nesterov": True, "weight_decay": 1e-4})
        self.assertEqual(resolve_config(nesterov, "n.json")["optimizer"],
                         {"type": "sgd", "learning_rate": 0.01, "momentum": 0.9, "weight_decay": 1e-4,
                          "nesterov": True})
        # weight_decay 0 and nesterov false are left out, as batchsweep leaves them out.
        plain = dict(EVERY_LAYER, optimizer={"type": "sgd", "nesterov": False, "weight_decay": 0})
        self.assertEqual(resolve_config(plain, "p.json")["optimizer"],
                         {"type": "sgd", "learning_rate": 0.01, "momentum": 0.9})
        tiny = resolve_config(TINY_MLP, "tiny.json")
        self.assertEqual(tiny["loss"], "cross_entropy")
        self.assertEqual(tiny["optimizer"], {"type": "adamw", "learning_rate": 3e-4, "beta1": 0.9, "beta2": 0.999,
                                             "eps": 1e-8, "weight_decay": 0.01})

    def test_every_layer_counts(self):
        g = lower(resolve_config(EVERY_LAYER, "every.json"), "every.json")
        conv = 8 * 3 * 9 + 8 + 8 * 8 * 9 + 8
        patch = 16 * 8 * 49 + 16 + 1 * 16  # 16x16 -> pool 8x8 -> pool 7x7 -> one 7x7 patch
        attention = 16 * 48 + 48 + 16 * 16 + 16
        block = 2 * 32 + attention + 16 * 32 + 32 + 32 * 16 + 16  # two layernorms, attention, mlp
        head = 16 * 12 + 12 + 2 * 12 + 12 * 5  # linear, batchnorm of its 12 features, linear
        self.assertEqual(g.parameters, conv + 2 * 8 + patch + attention + 2 * block + 32 + head)
        self.assertEqual(g.output_shape, [5])

    def test_errors_name_file_and_field(self):
        def bad(change, message):
            doc = json.loads(json.dumps(TINY_MLP))
            change(doc)
            with self.assertRaises(ConfigError) as caught:
                resolve_config(doc, "m.json")
            self.assertIn(message, str(caught.exception))
            self.assertTrue(str(caught.exception).startswith("m.json: "))

        bad(lambda d: d["layers"][0].update(out_feature=3), "m.json: layers[0].out_feature: unknown key")
        bad(lambda d: d["layers"][0].pop("out_features"), "layers[0].out_features: layer type `linear` needs")
        bad(lambda d: d["layers"][1].update(out_features=0), "layers[1].out_features: must be a positive integer")
        bad(lambda d: d["layers"][1].update(activation="swish"), "unknown activation 'swish'")
        bad(lambda d: d.update(optimizer={"type": "sgd", "momentum": 0, "nesterov": True}),
            "optimizer.nesterov: Nesterov momentum needs a momentum > 0")
        bad(lambda d: d.update(optimizer={"type": "sgd", "nesterov": "yes"}),
            "optimizer.nesterov: expected true or false")
        bad(lambda d: d["input"].update(type="audio"), "input.type: unknown input type 'audio'")
        bad(lambda d: d.update(loss="hinge"), "loss: unknown loss 'hinge'")
        bad(lambda d: d.update(optimizer={"type": "adamw", "beta1": 1.0}), "optimizer.beta1: must be a number in")
        bad(lambda d: d.update(layers=[{"type": "layernorm"}, {"type": "linear", "out_features": 1}]),
            "loss: cross_entropy needs at least 2 classes")
        bad(lambda d: d.update(layers=[{"type": "conv2d", "out_channels": 2, "kernel_size": 3}]),
            "layers[0]: `conv2d` needs an image-shaped input")
        bad(lambda d: d.update(layers=[{"type": "residual", "layers": [{"type": "linear", "out_features": 3}]}]),
            "layers[0]: residual: inner layers change the shape from [16] to [3]")
        bad(lambda d: d.update(input={"type": "tokens", "sequence_length": 4, "vocab_size": 9}),
            "layers[0]: `linear` cannot take token ids")

    def test_files_and_unknown_presets(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = write_json(tmp, "tiny.json", TINY_MLP)
            model = load_model(path)
            self.assertEqual((model.source, model.config["name"]), (path, "tiny-mlp"))
            broken = os.path.join(tmp, "broken.json")
            with open(broken, "w", encoding="utf-8") as f:
                f.write("{")
            with self.assertRaisesRegex(ConfigError, "broken.json: not valid JSON"):
                load_model(broken)
        with self.assertRaisesRegex(ConfigError, r"no-such: no such preset or file \(presets: bert-base"):
            load_model("no-such")


class ReportTest(unittest.TestCase):
    def sample_report(self) -> Report:
        device = {"backend": "pytorch-eager", "name": "test device", "memory_total_bytes": 1 << 30,
                  "peak_flops": None, "peak_flops_source": "unknown", "torch_version": "x"}
        settings = {"model": resolve_config(TINY_MLP, "tiny.json"), "mode": "train", "precision": "fp32",
                    "accumulation": 1, "nan": math.nan}
        report = Report(command=["torch_sweep.py", "--model", "tiny.json"], device=device, settings=settings)
        ok = Point(batch=8, samples_ms=[2.0, 2.2, 1.8], measured_bytes=12345, device_used_bytes=20000, loss=1.5)
        ok.stop_reason = "noise target"
        ok.finish(flops_per_step=4e9, tokens_per_sample=0, peak_flops=1e12)
        small = Point(batch=1, samples_ms=[1.0, 1.0])
        small.finish(flops_per_step=5e8, tokens_per_sample=64, peak_flops=None)
        oom = Point(batch=64, status="oom", reason="out of memory: CUDA out of memory", stop_reason="oom")
        oom.finish(flops_per_step=3.2e10, tokens_per_sample=0, peak_flops=1e12)
        for p in (oom, ok, small):
            report.add(p)
        return report

    def test_points_follow_batchsweeps_rules(self):
        doc = self.sample_report().to_json()
        self.assertEqual([p["batch"] for p in doc["points"]], [1, 8, 64])
        ok = doc["points"][1]
        self.assertAlmostEqual(ok["samples_per_second"], 8 / 0.002)
        self.assertAlmostEqual(ok["tflops"], 4e9 / 0.002 / 1e12)
        self.assertAlmostEqual(ok["mfu"], 4e9 / 0.002 / 1e12)
        self.assertAlmostEqual(ok["noise_pct"], 10.0)
        self.assertEqual(ok["memory"], {"planned_bytes": None, "measured_bytes": 12345, "device_used_bytes": 20000})
        self.assertEqual(ok["stop_reason"], "noise target")
        self.assertEqual(doc["points"][0]["tokens_per_second"], 64 * 1000.0)
        oom = doc["points"][2]
        # A point that never ran: no throughput and no step statistics (null, as batchsweep writes them).
        self.assertEqual((oom["status"], oom["samples_per_second"], oom["tflops"]), ("oom", None, None))
        self.assertEqual(set(oom["step_ms"].values()), {None})
        self.assertNotIn("noise_pct", oom)
        self.assertIsNone(doc["settings"]["nan"])
        self.assertEqual(doc["tool"]["name"], PEER_NAME)
        self.assertEqual(doc["schema_version"], 1)
        self.assertEqual(doc["state"], "in_progress")  # until the sweep says it finished

    def test_validates_against_schema(self):
        validate(self, self.sample_report().to_json())

    def test_atomic_write(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "r.json")
            write_file_atomic(path, self.sample_report().dumps())
            with open(path, encoding="utf-8") as f:
                self.assertEqual(json.load(f)["points"][0]["batch"], 1)
            self.assertEqual(os.listdir(tmp), ["r.json"])
            with self.assertRaisesRegex(InputError, "--json .*missing"):
                write_file_atomic(os.path.join(tmp, "missing", "r.json"), "{}")

    def test_a_report_is_as_readable_as_any_new_file_and_keeps_a_replaced_ones_mode(self):
        mask = os.umask(0o022)
        try:
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "r.json")
                write_file_atomic(path, "{}")
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)  # not mkstemp's 0600
                os.chmod(path, 0o640)
                write_file_atomic(path, "{}")
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
                # A symlink stays one: its target is the report rewritten.
                link = os.path.join(tmp, "latest.json")
                os.symlink(path, link)
                write_file_atomic(link, "[1]")
                self.assertTrue(os.path.islink(link))
                with open(path, encoding="utf-8") as f:
                    self.assertEqual(f.read(), "[1]")
        finally:
            os.umask(mask)

    def test_a_device_or_fifo_is_written_into_not_replaced(self):
        # As root a rename over /dev/null replaced it with a file: a device is written into. Tried on a null
        # device made here (as root), never on /dev/null itself, which a regression would replace.
        with tempfile.TemporaryDirectory() as tmp:
            null = os.path.join(tmp, "null")
            try:
                os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except OSError:
                null = None  # not root: no device node to try
            if null:
                write_file_atomic(null, "{}")
                self.assertTrue(stat.S_ISCHR(os.stat(null).st_mode))
            fifo = os.path.join(tmp, "pipe")
            os.mkfifo(fifo)
            received = []
            reader = subprocess.Popen(["cat", fifo], stdout=subprocess.PIPE, text=True)
            write_file_atomic(fifo, "{\"a\": 1}")
            received.append(reader.communicate(timeout=30)[0])
            self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))
            self.assertEqual(received, ['{"a": 1}'])


class CliTest(unittest.TestCase):
    def test_usage_errors_exit_2_naming_the_flag(self):
        cases = [
            (["--batch", "0"], "--batch: '0'"),
            (["--mode", "infer", "--accumulation", "2"], "--accumulation: gradient accumulation only applies"),
            (["--accumulation", "0"], "--accumulation: must be in 1..16777216 (2^24), got 0"),
            (["--batch", "8", "--accumulation", "4194304"],
             "--accumulation: batch 8 x accumulation 4194304 is more than 16777216 (2^24) samples per step"),
            (["--min-samples", "0"], "--min-samples: must be at least 1"),
            (["--peak-flops", "-1"], "--peak-flops: must be"),
            (["--device", "tpu"], "--device: 'tpu'"),
            (["--device", "cuda:x"], "--device: 'cuda:x' is not auto, cpu, cuda or cuda:N (N a device index"),
            (["--threads", "0"], "--threads: must be in 1..4096, got 0"),
            (["--compile-mode", "max-autotune"], "--compile-mode: needs --compile"),
            (["--precision", "fp8"], "argument --precision/-p: invalid choice"),
            (["--json", "/no/such/dir/r.json"], "--json /no/such/dir/r.json: the directory"),
            (["--model", "no-such-model"], "no-such-model: no such preset or file"),
        ]
        for argv, message in cases:
            with self.subTest(argv=argv):
                code, _, err = run_main(argv)
                self.assertEqual(code, 2)
                self.assertIn(message, err)

    def test_checkpointing_is_refused_where_it_would_change_nothing(self):
        # batchsweep's words and exit code, for inference and for a model without a top-level block.
        code, _, err = run_main(["--model", "tiny-lm", "--mode", "infer", "--checkpointing"])
        self.assertEqual(code, 2, err)
        self.assertIn(f"{PEER_NAME}: --checkpointing: activation checkpointing recomputes what backward reads, and "
                      "--mode infer has no backward\n", err)
        with tempfile.TemporaryDirectory() as tmp:
            code, _, err = run_main(["--model", write_json(tmp, "tiny.json", TINY_MLP), "--checkpointing",
                                     "--device", "cpu"])
        self.assertEqual(code, 2, err)
        self.assertIn(f"{PEER_NAME}: --checkpointing: model 'tiny-mlp' has no transformer_block or residual layer at "
                      "its top level, the blocks that checkpointing recomputes, so it would change nothing\n", err)
        self.assertFalse(parse_settings([]).checkpointing)
        self.assertTrue(parse_settings(["--checkpointing"]).checkpointing)

    def test_settings(self):
        s = parse_settings(["--model", "tiny-lm", "--batch", "1:8:*2", "--precision", "bf16", "--compile",
                            "--timeout", "3"])
        self.assertEqual((s.batches, s.precision, s.compile, s.stopping.timeout_s), ([1, 2, 4, 8], "bf16", True, 3.0))

    def fake_batchsweep(self, folder: str, parameters: int) -> str:
        path = os.path.join(folder, "batchsweep")
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"#!/bin/sh\necho '{{\"model\": \"m\", \"parameters\": {parameters}}}'\n")
        os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
        return path

    def test_exit_codes_follow_batchsweep(self):
        ok, oom = Point(batch=8), Point(batch=4096, status="oom")
        with contextlib.redirect_stderr(io.StringIO()) as err:
            self.assertEqual(exit_code([oom], ""), 4)  # finished, nothing ran: as batchsweep run
        self.assertIn("no batch ran ok", err.getvalue())
        self.assertEqual(exit_code([ok, oom], ""), 0)
        self.assertEqual(exit_code([oom], "SIGINT"), 130)
        self.assertEqual(exit_code([], "SIGTERM"), 143)

    def test_parameter_check(self):
        model = load_model("mlp")
        n = PRESET_PARAMETERS["mlp"]
        self.assertIn("config count only", check_parameters(n, n, None, model))
        with self.assertRaisesRegex(ParameterMismatch, f"PyTorch module has {n + 1} parameters, the config counts {n}"):
            check_parameters(n + 1, n, None, model)
        with tempfile.TemporaryDirectory() as tmp:
            self.assertEqual(check_parameters(n, n, self.fake_batchsweep(tmp, n), model),
                             f"matches `batchsweep plan` ({n})")
            with self.assertRaises(ParameterMismatch) as caught:
                check_parameters(n, n, self.fake_batchsweep(tmp, n - 10), model)
            self.assertEqual(caught.exception.exit_code, 2)
            self.assertIn(f"has {n} parameters, `batchsweep plan` says {n - 10}", str(caught.exception))


@unittest.skipIf(find_batchsweep() is None, "no batchsweep binary ($BATCHSWEEP_BIN or build/batchsweep)")
class BatchsweepBinaryTest(unittest.TestCase):
    """The peer's counts against `batchsweep plan`, and its reports through `batchsweep analyze` / `compare`."""

    def bsw(self, *args):
        return subprocess.run([find_batchsweep(), *args], capture_output=True, text=True, timeout=120, check=False)

    def test_parameters_match_plan_for_every_preset(self):
        for name in PRESET_PARAMETERS:
            with self.subTest(preset=name):
                done = self.bsw("plan", "--model", name, "--batch", "1", "--backend", "cpu", "--json", "-")
                self.assertEqual(done.returncode, 0, done.stderr)
                plan = json.loads(done.stdout)
                self.assertEqual(plan["parameters"], PRESET_PARAMETERS[name])
                g = lower(load_model(name).config, name)
                self.assertEqual(plan["flops_per_sample"]["forward"], g.forward_flops_per_sample)
                self.assertEqual(plan["flops_per_sample"]["train"], g.train_flops_per_sample)

    def test_a_model_without_parameters_is_counted_and_not_trained(self):
        pools = {"name": "pools", "input": {"type": "image", "channels": 3, "height": 4, "width": 4},
                 "layers": [{"type": "maxpool2d", "kernel_size": 2}, {"type": "global_avgpool"}]}
        with tempfile.TemporaryDirectory() as tmp:
            path = write_json(tmp, "pools.json", pools)
            # The parameter check plans it in infer mode, which batchsweep accepts for any model.
            self.assertEqual(batchsweep_parameters(find_batchsweep(), load_model(path)), 0)
            code, _, err = run_main(["--model", path, "--batch", "2", "--mode", "train", "--device", "cpu"])
            self.assertEqual(code, 2, err)
            self.assertIn("--mode train: model 'pools' has no parameters to train", err)

    def test_every_layer_config_matches_plan(self):
        # A pool before the first layer that learns: that layer's input gradient is left out of both counts.
        pool_first = {"name": "pool-first", "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
                      "layers": [{"type": "maxpool2d", "kernel_size": 2},
                                 {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
                                 {"type": "flatten"}, {"type": "linear", "out_features": 5}]}
        # Projection shortcuts: one on the network input (its conv and the first inner conv compute no input
        # gradient), one without parameters.
        shortcuts = {"name": "shortcuts", "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
                     "layers": [{"type": "residual", "activation": "relu",
                                 "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2,
                                             "padding": 1, "bias": False},
                                            {"type": "batchnorm", "activation": "relu"},
                                            {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1,
                                             "bias": False},
                                            {"type": "batchnorm"}],
                                 "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1, "stride": 2,
                                               "bias": False}, {"type": "batchnorm"}]},
                                {"type": "residual", "layers": [{"type": "conv2d", "out_channels": 8,
                                                                 "kernel_size": 3, "stride": 2, "padding": 1}],
                                 "shortcut": [{"type": "avgpool2d", "kernel_size": 2}]},
                                {"type": "global_avgpool"}, {"type": "linear", "out_features": 4}]}
        # A shortcut that is only a residual (its save and add are ops, so it computes something).
        residual_shortcut = {"name": "residual-shortcut", "input": {"type": "vector", "features": 6},
                             "layers": [{"type": "linear", "out_features": 6},
                                        {"type": "residual", "layers": [{"type": "layernorm"}],
                                         "shortcut": [{"type": "residual", "layers": [{"type": "flatten"}]}]},
                                        {"type": "linear", "out_features": 3}]}
        with tempfile.TemporaryDirectory() as tmp:
            for name, config in (("residual-shortcut.json", residual_shortcut), ("every.json", EVERY_LAYER),
                                 ("pool-first.json", pool_first), ("shortcuts.json", shortcuts)):
                with self.subTest(config=name):
                    path = write_json(tmp, name, config)
                    done = self.bsw("plan", "--model", path, "--batch", "1", "--backend", "cpu", "--json", "-")
                    self.assertEqual(done.returncode, 0, done.stderr)
                    g = lower(load_model(path).config, path)
                    plan = json.loads(done.stdout)
                    self.assertEqual(plan["parameters"], g.parameters)
                    self.assertEqual(plan["flops_per_sample"]["forward"], g.forward_flops_per_sample)
                    self.assertEqual(plan["flops_per_sample"]["train"], g.train_flops_per_sample)
        self.assertEqual(g.train_flops_per_sample, 3 * g.forward_flops_per_sample - 2.0 * 8 * 27 * 16 - 2.0 * 8 * 3 * 16)

    def test_analyze_and_compare_read_peer_reports(self):
        report = ReportTest().sample_report()
        with tempfile.TemporaryDirectory() as tmp:
            a = os.path.join(tmp, "a.json")
            b = os.path.join(tmp, "b.json")
            write_file_atomic(a, report.dumps())
            report.points[1].samples_ms = [1.0, 1.1, 0.9]
            report.points[1].finish(4e9, 0, None)
            write_file_atomic(b, report.dumps())
            done = self.bsw("analyze", a, "--json", "-")
            self.assertEqual(done.returncode, 0, done.stderr)
            analyzed = json.loads(done.stdout)
            self.assertEqual(analyzed["analysis"]["best_throughput"]["batch"], 8)
            self.assertEqual(analyzed["device"]["backend"], "pytorch-eager")
            done = self.bsw("compare", a, b, "--json", "-")
            self.assertEqual(done.returncode, 0, done.stderr)


@unittest.skipIf(torch is None, "PyTorch is not importable")
class TorchModelTest(unittest.TestCase):
    def test_an_unusable_cudnn_is_a_warning_not_a_crash(self):
        # torch raises from cudnn.version() where the cuDNN on the library path is older than its own.
        from types import SimpleNamespace
        from unittest import mock

        from torchpeer.torch_runner import TorchRunner

        # torch 2.15's message, one line (its advice on the library path is worth keeping).
        text = ("cuDNN version incompatibility: PyTorch was compiled  against (9, 26, 0) but found runtime version "
                "(9, 19, 0). PyTorch already comes bundled with cuDNN. One option to resolving this error is to "
                "ensure PyTorch can find the bundled cuDNN. Looks like your LD_LIBRARY_PATH contains incompatible "
                "version of cudnn. Please either remove it from the path or install cudnn (9, 26, 0)")
        mismatch = RuntimeError(text)
        gpu = SimpleNamespace(cuda=True, warnings=[])
        with mock.patch.object(torch.backends.cudnn, "is_available", return_value=True), \
                mock.patch.object(torch.backends.cudnn, "version", side_effect=mismatch):
            self.assertIsNone(TorchRunner._cudnn_version(gpu))
        self.assertEqual(gpu.warnings, ["cuDNN unusable: " + text])
        # A CPU sweep does not ask.
        cpu = SimpleNamespace(cuda=False, warnings=[])
        with mock.patch.object(torch.backends.cudnn, "version", side_effect=AssertionError("asked")):
            self.assertIsNone(TorchRunner._cudnn_version(cpu))
        self.assertEqual(cpu.warnings, [])

    def test_module_parameters_equal_the_count_for_every_preset(self):
        from torchpeer.torch_model import build_model, count_parameters

        for name, expected in PRESET_PARAMETERS.items():
            with self.subTest(preset=name):
                model = load_model(name)
                with torch.device("meta"):
                    self.assertEqual(count_parameters(build_model(model.config, model.source)), expected)

    def test_every_layer_shapes_and_count(self):
        from torchpeer.torch_model import build_model, count_parameters, loss_fn

        cfg = resolve_config(EVERY_LAYER, "every.json")
        torch.manual_seed(0)
        model = build_model(cfg, "every.json")
        self.assertEqual(count_parameters(model), model.graph.parameters)
        out = model(torch.randn(3, 3, 16, 16))
        self.assertEqual(list(out.shape), [3, 5])
        loss = loss_fn(out, torch.randint(0, 5, (3,)), model.graph)
        loss.backward()
        self.assertTrue(math.isfinite(loss.item()))

    def test_transformer_block_is_pre_ln_with_sdpa(self):
        from torchpeer.torch_model import build_model

        cfg = resolve_config({"name": "blk", "input": {"type": "tokens", "sequence_length": 6, "vocab_size": 11},
                              "layers": [{"type": "embedding", "dim": 8},
                                         {"type": "transformer_block", "heads": 2, "causal": True},
                                         {"type": "linear", "out_features": 11}]}, "blk")
        torch.manual_seed(1)
        model = build_model(cfg, "blk").double()
        emb, block, head = model
        x = emb(torch.randint(0, 11, (2, 6)))
        # Reference: explicit causal softmax attention, pre-LN, tanh GELU MLP.
        h = block.ln1(x)
        q, k, v = block.attn.qkv(h).split(8, dim=-1)
        split = lambda t: t.view(2, 6, 2, 4).transpose(1, 2)  # noqa: E731
        scores = split(q) @ split(k).transpose(-1, -2) / 2.0
        scores = scores.masked_fill(torch.triu(torch.ones(6, 6, dtype=torch.bool), 1), float("-inf"))
        attn = (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(2, 6, 8)
        y = x + block.attn.out(attn)
        m = block.fc.weight @ block.ln2(y).unsqueeze(-1)
        fc = torch.nn.functional.gelu(m.squeeze(-1) + block.fc.bias, approximate="tanh")
        expected = y + block.proj(fc)
        self.assertTrue(torch.allclose(block(x), expected, atol=1e-10))
        # Causal: the first position does not see the others.
        x2 = x.clone()
        x2[:, 1:] += 1.0
        self.assertTrue(torch.allclose(block(x)[:, 0], block(x2)[:, 0], atol=1e-10))


@unittest.skipIf(torch is None, "PyTorch is not importable")
class TorchSweepTest(unittest.TestCase):
    def sweep(self, argv: list, expected: int = 0) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "report.json")
            code, _, err = run_main(argv + FAST + ["--json", path, "--device", "cpu"])
            self.assertEqual(code, expected, err)
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        validate(self, doc)
        return doc

    def test_tiny_config_train(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc = self.sweep(["--model", write_json(tmp, "tiny.json", TINY_MLP), "--batch", "1,4"])
        self.assertEqual(doc["device"]["backend"], "pytorch-eager")
        self.assertEqual(doc["settings"]["parameters"], 16 * 32 + 32 + 32 * 4 + 4)
        self.assertEqual(doc["settings"]["model"]["name"], "tiny-mlp")
        points = doc["points"]
        self.assertEqual([p["batch"] for p in points], [1, 4])
        for p in points:
            self.assertEqual(p["status"], "ok")
            self.assertGreaterEqual(len(p["samples_ms"]), 3)
            self.assertGreater(p["samples_per_second"], 0)
            self.assertAlmostEqual(p["samples_per_second"], p["batch"] * 1000.0 / p["step_ms"]["mean"])
            self.assertIsNone(p["memory"]["measured_bytes"])
            self.assertTrue(math.isfinite(p["loss"]))
            # 3x forward, less the first linear's input gradient (it reads the data).
            flops = (3 * 2 * (16 * 32 + 32 * 4) - 2 * 16 * 32) * p["batch"]
            self.assertAlmostEqual(p["tflops"], flops / (p["step_ms"]["mean"] / 1000.0) / 1e12)

    def test_threads_set_the_cpus_compute_threads(self):
        doc = self.sweep(["--model", "mlp", "--batch", "1", "--threads", "1"])
        self.assertEqual(doc["device"]["threads"], 1)

    def test_a_file_named_like_a_preset_is_said_to_be_passed_over(self):
        cwd = os.getcwd()
        with tempfile.TemporaryDirectory() as tmp:
            write_json(tmp, "mlp", TINY_MLP)
            try:
                os.chdir(tmp)
                code, _, err = run_main(["--model", "mlp", "--batch", "1", "--device", "cpu"] + FAST)
            finally:
                os.chdir(cwd)
        self.assertEqual(code, 0, err)
        self.assertIn("--model mlp: the preset mlp, not the file mlp here (give ./mlp to read the file)", err)

    def test_tiny_lm_preset(self):
        doc = self.sweep(["--model", "tiny-lm", "--batch", "1,2", "--peak-flops", "1e12"])
        self.assertEqual(doc["settings"]["parameters"], PRESET_PARAMETERS["tiny-lm"])
        self.assertEqual(doc["settings"]["model_source"], "preset:tiny-lm")
        for p in doc["points"]:
            self.assertEqual(p["status"], "ok")
            self.assertAlmostEqual(p["tokens_per_second"], p["samples_per_second"] * 64)
            self.assertAlmostEqual(p["mfu"], p["tflops"] * 1e12 / 1e12)

    def test_tokens_bf16_with_accumulation(self):
        with tempfile.TemporaryDirectory() as tmp:
            doc = self.sweep(["--model", write_json(tmp, "lm.json", TINY_LM), "--batch", "1,3", "--precision",
                              "bf16", "--accumulation", "2"])
        for p in doc["points"]:
            self.assertEqual((p["status"], p["accumulation"], p["effective_batch"]), ("ok", 2, 2 * p["batch"]))
            self.assertAlmostEqual(p["samples_per_second"], 2 * p["batch"] * 1000.0 / p["step_ms"]["mean"])
        self.assertIn("autocast", doc["settings"]["torch"]["precision"])

    def test_infer_fp16_and_mse(self):
        cfg = dict(TINY_MLP, loss="mse")
        with tempfile.TemporaryDirectory() as tmp:
            doc = self.sweep(["--model", write_json(tmp, "m.json", cfg), "--batch", "2", "--mode", "infer",
                              "--precision", "fp16"])
            train = self.sweep(["--model", write_json(tmp, "m.json", cfg), "--batch", "2", "--precision", "fp16"])
        self.assertEqual(doc["points"][0]["status"], "ok")
        self.assertNotIn("loss", doc["points"][0])
        self.assertIn("cast to torch.float16", doc["settings"]["torch"]["precision"])
        self.assertEqual(train["points"][0]["status"], "ok")
        self.assertIn("skipped_steps", train["points"][0])

    def test_fp16_divergence_is_an_error_point_as_batchsweeps(self):
        # GradScaler halves its scale without end; batchsweep stops at 1 and calls an overflow there an error
        # point (every later step would skip its update). The peer says the same of the same model (batchsweep
        # run --backend cpu on it: step 19, 17 skips, as the peer).
        cfg = {"name": "div", "input": {"type": "vector", "features": 256},
               "layers": [{"type": "linear", "out_features": 256, "activation": "relu"},
                          {"type": "linear", "out_features": 256, "activation": "relu"},
                          {"type": "linear", "out_features": 256}],
               "loss": "mse", "optimizer": {"type": "sgd", "learning_rate": 100.0}}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "report.json")
            code, _, err = run_main(["--model", write_json(tmp, "div.json", cfg), "--batch", "2", "--precision",
                                     "fp16", "--min-samples", "1000", "--min-time", "0", "--warmup", "0",
                                     "--timeout", "120", "--quiet", "--device", "cpu", "--json", path])
            self.assertEqual(code, 4, err)  # no batch ran ok
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        validate(self, doc)
        p = doc["points"][0]
        self.assertEqual(p["status"], "error")
        self.assertTrue(p["reason"].startswith("non-finite gradients (NaN/Inf) at step "), p["reason"])
        self.assertIn("they overflow fp16 at the lowest loss scale (1), so every step would skip its update; "
                      "training diverged on the synthetic data: lower the model's optimizer.learning_rate",
                      p["reason"])
        self.assertGreaterEqual(p["skipped_steps"], 17)  # 16 halvings of 65536 to 1, then the overflow at 1

    def test_a_shape_pytorch_refuses_is_an_error_point_and_the_sweep_goes_on(self):
        # BatchNorm1d in training at batch 1 raises ValueError ("Expected more than 1 value per channel"), not a
        # RuntimeError: an error point, and the larger batches still run.
        cfg = {"name": "bn-mlp", "input": {"type": "vector", "features": 16},
               "layers": [{"type": "linear", "out_features": 32}, {"type": "batchnorm", "activation": "relu"},
                          {"type": "linear", "out_features": 4}]}
        with tempfile.TemporaryDirectory() as tmp:
            doc = self.sweep(["--model", write_json(tmp, "bn.json", cfg), "--batch", "1,4"])
        statuses = {p["batch"]: (p["status"], p["reason"]) for p in doc["points"]}
        self.assertEqual(statuses[1][0], "error")
        self.assertIn("ValueError", statuses[1][1])
        self.assertEqual(statuses[4][0], "ok")

    def test_a_warm_up_longer_than_the_timeout_is_cut_as_batchsweep_cuts_it(self):
        # Steps of 4 s against a 5 s --timeout: batchsweep times one after the second warm-up step (the first holds
        # the one-time work) and says so; the peer ran every --warmup step past the timeout, unsaid.
        import torch
        from torchpeer.config import load_model, lower
        from torchpeer.stopping import StoppingSettings
        from torchpeer.torch_runner import RunOptions, TorchRunner

        now, calls = [0.0], [0]

        class SlowState:
            def __init__(self, *args, **kwargs):
                pass

            def step(self):
                calls[0] += 1
                now[0] += 4.0
                return torch.tensor(1.0)

            def loss_scale(self):
                return None

        loaded = load_model("mlp")
        runner = TorchRunner(loaded, lower(loaded.config, loaded.source),
                             RunOptions(stopping=StoppingSettings(warmup_steps=3, timeout_s=5.0)),
                             torch.device("cpu"), clock=lambda: now[0])
        runner.state_factory = SlowState
        point = runner.measure(8)
        self.assertEqual((calls[0], len(point.samples_ms)), (3, 1))  # two warm-up steps, one timed
        self.assertEqual(point.stop_reason, "timeout")
        self.assertEqual(len(runner.warnings), 1)
        self.assertIn("(warm-up cut to 2 of 3 steps by the 5 s --timeout)", runner.warnings[0])

    def test_out_of_memory_becomes_a_point_and_the_sweep_goes_on(self):
        from torchpeer import torch_runner

        original = torch_runner.PointState.step
        raised = []

        def step(state):
            batch = state.inputs.shape[0]
            if batch == 4:
                raised.append(batch)
                error = (torch.cuda.OutOfMemoryError if len(raised) == 1 else MemoryError)
                raise error("CUDA out of memory. Tried to allocate 2.00 GiB")
            return original(state)

        torch_runner.PointState.step = step
        try:
            with tempfile.TemporaryDirectory() as tmp:
                doc = self.sweep(["--model", write_json(tmp, "tiny.json", TINY_MLP), "--batch", "2,4,8"])
                # Nothing ran ok: exit 4, as batchsweep run.
                again = self.sweep(["--model", write_json(tmp, "tiny.json", TINY_MLP), "--batch", "4"], expected=4)
        finally:
            torch_runner.PointState.step = original
        statuses = {p["batch"]: p["status"] for p in doc["points"]}
        self.assertEqual(statuses, {2: "ok", 4: "oom", 8: "ok"})
        oom = doc["points"][1]
        self.assertEqual(oom["reason"], "out of memory: CUDA out of memory. Tried to allocate 2.00 GiB")
        self.assertEqual((oom["stop_reason"], oom["samples_ms"], oom["tflops"]), ("oom", [], None))
        self.assertEqual(again["points"][0]["status"], "oom")  # MemoryError too

    def test_sigterm_keeps_the_finished_points_and_exits_143(self):
        # Terminated must be a BaseException: torch's own `except Exception` (inductor's build checks under
        # --compile) swallowed it, and the sweep ran on to exit 0 "complete".
        from torchpeer.cli import Terminated
        self.assertFalse(issubclass(Terminated, Exception))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "report.json")
            argv = [sys.executable, os.path.join(PEERS, "torch_sweep.py"), "--model",
                    write_json(tmp, "tiny.json", TINY_MLP), "--batch", "1,2,4,8,16,32,64,128", "--device", "cpu",
                    "--warmup", "1", "--min-samples", "3", "--min-time", "1", "--max-noise", "1000",
                    "--timeout", "5", "--quiet", "--json", path]
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            points = 0
            for _ in range(600):  # until the first point is on disk (60 s at most)
                try:
                    with open(path, encoding="utf-8") as f:
                        points = len(json.load(f)["points"])
                except (OSError, ValueError):
                    points = 0
                if points or proc.poll() is not None:
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 143, err)
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        self.assertEqual(doc["state"], "interrupted")
        self.assertGreaterEqual(len(doc["points"]), 1)
        self.assertLess(len(doc["points"]), 8)
        validate(self, doc)

    def test_checkpointing_is_in_the_settings(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = write_json(tmp, "residual.json", TINY_RESIDUAL)
            on = self.sweep(["--model", path, "--batch", "2", "--checkpointing"])
            off = self.sweep(["--model", path, "--batch", "2"])
        # Always written, as batchsweep writes it.
        self.assertIs(on["settings"]["checkpointing"], True)
        self.assertIs(off["settings"]["checkpointing"], False)
        self.assertIn("torch.utils.checkpoint.checkpoint(use_reentrant=False) around each of the 1 top-level",
                      on["settings"]["torch"]["checkpointing"])
        self.assertEqual(off["settings"]["torch"]["checkpointing"], "off")
        self.assertEqual(on["points"][0]["status"], "ok")

    def test_non_finite_loss_is_an_error_point(self):
        from torchpeer import torch_runner

        original = torch_runner.PointState.step
        torch_runner.PointState.step = lambda state: torch.tensor(float("nan"))
        try:
            with tempfile.TemporaryDirectory() as tmp:
                doc = self.sweep(["--model", write_json(tmp, "tiny.json", TINY_MLP), "--batch", "2"], expected=4)
        finally:
            torch_runner.PointState.step = original
        p = doc["points"][0]
        self.assertEqual((p["status"], p["reason"], p["stop_reason"]),
                         ("error", "non-finite loss (NaN/Inf) at warm-up step 1", "non-finite loss"))


@unittest.skipIf(torch is None, "PyTorch is not importable")
class TorchCheckpointingTest(unittest.TestCase):
    """--checkpointing recomputes each block in backward and changes nothing else: the peer's own training steps
    with and without it give the same losses, weights and batchnorm running statistics, as batchsweep's do."""

    STEPS = 3

    def train(self, config: dict, checkpointing: bool, accumulation: int = 1):
        """(each step's loss, the model's state_dict, forward calls per block) of STEPS steps of a sweep point's
        own state (PointState: seeded model, optimizer and data) on the CPU in fp32."""
        from torchpeer.config import LoadedModel
        from torchpeer.torch_runner import PointState, RunOptions

        cfg = resolve_config(config, "checkpointing.json")
        loaded = LoadedModel(cfg, "checkpointing.json", "checkpointing.json", "checkpointing.json")
        options = RunOptions(accumulation=accumulation, checkpointing=checkpointing)
        state = PointState(loaded, lower(cfg, loaded.source), options, torch.device("cpu"), 4, {})
        model = state.eager_model
        calls = dict.fromkeys(model.graph.blocks, 0)
        for i in calls:  # a pre-hook: the recompute may stop inside the block once it has what backward needs
            model[i].register_forward_pre_hook(lambda module, args, i=i: calls.__setitem__(i, calls[i] + 1))
        losses = [float(state.step()) for _ in range(self.STEPS)]
        return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}, calls

    def assert_same_training(self, config: dict, blocks: list, accumulation: int = 1) -> dict:
        plain_losses, plain, plain_calls = self.train(config, False, accumulation)
        losses, checkpointed, calls = self.train(config, True, accumulation)
        forwards = self.STEPS * accumulation
        self.assertEqual(plain_calls, dict.fromkeys(blocks, forwards))
        self.assertEqual(calls, dict.fromkeys(blocks, 2 * forwards))  # each block's forward again in backward
        self.assertNotEqual(plain_losses[0], plain_losses[-1])  # the steps trained
        for step, (loss, expected) in enumerate(zip(losses, plain_losses), 1):
            self.assertLessEqual(abs(loss - expected), 1e-6 * abs(expected), f"step {step}")
        self.assertEqual(list(checkpointed), list(plain))
        for name, value in checkpointed.items():
            torch.testing.assert_close(value, plain[name], rtol=1e-6, atol=1e-7, msg=name)
        return checkpointed

    def test_transformer_blocks_train_the_same(self):
        # The embedding, final layernorm and head run outside the two blocks.
        self.assert_same_training(CHECKPOINTED_LM, blocks=[1, 2])

    def test_residuals_with_batchnorm_train_the_same_and_update_the_running_statistics_once(self):
        state = self.assert_same_training(CHECKPOINTED_BATCHNORM, blocks=[2, 3], accumulation=2)
        tracked = {k: int(v) for k, v in state.items() if k.endswith("num_batches_tracked")}
        self.assertEqual(len(tracked), 5)  # one outside the blocks, four inside
        self.assertEqual(set(tracked.values()), {self.STEPS * 2})  # once per micro-batch, not again per recompute
        self.assertTrue(all(v.abs().sum() > 0 for k, v in state.items() if k.endswith("running_mean")))


@unittest.skipIf(torch is None or find_batchsweep() is None, "needs PyTorch and the batchsweep binary")
class CompareWithTorchScriptTest(unittest.TestCase):
    """bench/peers/compare_with_torch.sh, the comparison scripts/device-check.sh runs on the GPU, on the CPU."""

    def test_table_ratios_and_reports(self):
        script = os.path.join(PEERS, "compare_with_torch.sh")
        shared = [a for a in FAST if a != "--quiet"]
        with tempfile.TemporaryDirectory() as tmp:
            model = write_json(tmp, "tiny.json", TINY_MLP)
            out = os.path.join(tmp, "out")
            done = subprocess.run(
                [script, find_batchsweep(), "--model", model, "--batch", "1,4", "--backend", "cpu", "--out", out,
                 "--", *shared],
                capture_output=True, text=True, timeout=300, check=False,
                env=dict(os.environ, PYTHON=sys.executable))
            self.assertEqual(done.returncode, 0, done.stderr)
            for name in ("batchsweep", "torch-eager"):
                for suffix in (".json", ".analyzed.json"):
                    self.assertTrue(os.path.exists(os.path.join(out, name + suffix)), name + suffix)
        lines = done.stdout.splitlines()
        header = lines[0].split()
        self.assertEqual(header, ["batch", "batchsweep/s", "torch-eager/s", "bsw/eager", "planned", "MiB", "torch",
                                  "peak", "MiB"])
        rows = {line.split()[0]: line.split() for line in lines[1:3]}
        self.assertEqual(sorted(rows), ["1", "4"])
        for row in rows.values():
            ratio = row[3]
            self.assertTrue(ratio.endswith("x") and float(ratio[:-1]) > 0, row)
        self.assertTrue(any(line.startswith("batchsweep ") and "knee" in line for line in lines), done.stdout)
        self.assertTrue(any(line.startswith("torch-eager ") and "max fit" in line for line in lines), done.stdout)

    def test_compile_reuses_the_eager_comparison(self):
        # As scripts/device-check.sh runs it: eager first, then torch.compile alone on fewer batches, joined into
        # one table; a DIR of another comparison is refused.
        script = os.path.join(PEERS, "compare_with_torch.sh")
        shared = [a for a in FAST if a != "--quiet"]
        env = dict(os.environ, PYTHON=sys.executable)
        with tempfile.TemporaryDirectory() as tmp:
            model = write_json(tmp, "tiny.json", TINY_MLP)
            out = os.path.join(tmp, "out")
            base = [script, find_batchsweep(), "--model", model, "--backend", "cpu", "--out", out]
            first = subprocess.run([*base, "--batch", "1,4", "--", *shared], capture_output=True, text=True,
                                   timeout=300, check=False, env=env)
            self.assertEqual(first.returncode, 0, first.stderr)
            kept = {name: os.stat(os.path.join(out, name + ".json")).st_mtime_ns
                    for name in ("batchsweep", "torch-eager")}
            done = subprocess.run([*base, "--batch", "4", "--compile", "--reuse", "--", *shared],
                                  capture_output=True, text=True, timeout=600, check=False, env=env)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("reusing the reports", done.stderr)
            for name, mtime in kept.items():
                self.assertEqual(os.stat(os.path.join(out, name + ".json")).st_mtime_ns, mtime, name)
            with open(os.path.join(out, "torch-compile.json"), encoding="utf-8") as f:
                compiled = json.load(f)
            self.assertEqual([p["batch"] for p in compiled["points"]], [4])
            self.assertTrue(compiled["settings"]["torch"]["execution"].startswith("torch.compile("), compiled["settings"])
            lines = done.stdout.splitlines()
            self.assertEqual(lines[0].split()[:6],
                             ["batch", "batchsweep/s", "torch-eager/s", "bsw/eager", "torch-compile/s", "bsw/compile"])
            rows = {line.split()[0]: line.split() for line in lines[1:3]}
            self.assertEqual(rows["1"][4:6], ["-", "-"])  # compile ran batch 4 only
            self.assertTrue(rows["4"][5].endswith("x") and float(rows["4"][5][:-1]) > 0, rows["4"])
            other = subprocess.run([*base, "--batch", "4", "--precision", "bf16", "--compile", "--reuse", "--",
                                    *shared], capture_output=True, text=True, timeout=60, check=False, env=env)
            self.assertEqual(other.returncode, 2, other.stderr)
            self.assertIn("holds the reports of another comparison", other.stderr)


if __name__ == "__main__":
    unittest.main()
