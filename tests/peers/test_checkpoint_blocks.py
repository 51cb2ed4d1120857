"""Tests of the PyTorch peer's --checkpoint-blocks N (bench/peers/torch_sweep.py): activation checkpointing of only
the first N blocks that backward reaches, in forward order, as `batchsweep run --checkpoint-blocks N` (Megatron's
--recompute-method block --recompute-num-layers N).

Run: python3 -m unittest discover -s tests/peers -v   (from the repository root)

The flag, config and refusal tests need only the standard library; the PyTorch tests skip without torch, and the
tests against the batchsweep binary ($BATCHSWEEP_BIN or build/batchsweep) skip without one.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "bench", "peers")
sys.path.insert(0, PEERS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_torch_peer import (CHECKPOINTED_BATCHNORM, FAST, TINY_MLP, TINY_RESIDUAL, find_batchsweep,  # noqa: E402
                             run_main, torch, validate, write_json)
from torchpeer import PEER_NAME  # noqa: E402
from torchpeer.cli import MAX_CHECKPOINT_BLOCKS, parse_settings  # noqa: E402
from torchpeer.errors import UsageError  # noqa: E402
from torchpeer.config import load_model, lower, resolve_config  # noqa: E402
from torchpeer.errors import UsageError  # noqa: E402
from torchpeer.overrides import parse_model_override  # noqa: E402

# Three top-level blocks of which backward reaches two: a residual of a pool on the data comes before every layer
# that learns (nothing in it has a gradient, so nothing recomputes it), then a conv and two residuals with
# batchnorm (their running statistics must be updated once per forward, recompute or not).
POOL_FIRST = {
    "name": "pool-first",
    "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
    "layers": [{"type": "residual", "layers": [{"type": "maxpool2d", "kernel_size": 3, "stride": 1, "padding": 1}]},
               {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1, "activation": "relu"},
               {"type": "residual", "activation": "relu", "repeat": 2,
                "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": 1},
                           {"type": "batchnorm"}]},
               {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}],
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
}

# A block, but none that backward reaches: --checkpointing runs, --checkpoint-blocks N has nothing to count.
POOL_ONLY = {
    "name": "pool-only",
    "input": {"type": "image", "channels": 3, "height": 8, "width": 8},
    "layers": [{"type": "residual", "layers": [{"type": "maxpool2d", "kernel_size": 3, "stride": 1, "padding": 1}]},
               {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}],
}

# tiny-lm with three transformer blocks (stack indices 1, 2 and 3, between the embedding and the head), on short
# sequences to keep the steps fast.
TINY_LM_3 = ["--model", "tiny-lm", "--set", "layers[1].repeat=3", "--set", "input.sequence_length=8"]


def tiny_lm_3():
    return load_model("tiny-lm", overrides=[parse_model_override("layers[1].repeat=3"),
                                            parse_model_override("input.sequence_length=8")])


def lowered(config: dict):
    return lower(resolve_config(config, "model.json"), "model.json")


class CheckpointBlocksFlagTest(unittest.TestCase):
    def test_settings(self):
        s = parse_settings(["--checkpoint-blocks", "2"])
        self.assertEqual((s.checkpointing, s.checkpoint_blocks), (True, 2))  # it implies --checkpointing
        # Both flags are refused, as batchsweep refuses them.
        with self.assertRaises(UsageError) as caught:
            parse_settings(["--checkpointing", "--checkpoint-blocks", "3"])
        self.assertIn("--checkpointing and --checkpoint-blocks: give one", str(caught.exception))
        self.assertEqual(parse_settings(["--checkpoint-blocks=1e2"]).checkpoint_blocks, 100)  # as batchsweep reads it
        self.assertEqual(parse_settings(["--checkpoint-blocks", "+7"]).checkpoint_blocks, 7)
        self.assertEqual(parse_settings(["--checkpoint-blocks", "10000"]).checkpoint_blocks, MAX_CHECKPOINT_BLOCKS)
        s = parse_settings(["--checkpointing"])
        self.assertEqual((s.checkpointing, s.checkpoint_blocks), (True, None))
        s = parse_settings([])
        self.assertEqual((s.checkpointing, s.checkpoint_blocks), (False, None))

    def test_bad_values_are_refused_in_batchsweeps_words(self):
        cases = {
            "0": "must be in 1..10000, got 0",
            "10001": "must be in 1..10000, got 10001",
            "-1": "must be in 1..10000, got -1",
            "2.5": "must be a whole number, got 2.5",
            "x": "'x' is not a number",
            "": "'' is not a number",
            "0x10": "'0x10' is not a number",
            "1e": "'1e' is not a number",
            "02": "'02' has a leading zero (write it without)",
            " 2": "' 2' is not a number (it has a space around it)",
            "2b": "'2b' is not a number: write it without a unit, in the one --help gives the flag",
        }
        for value, message in cases.items():
            with self.subTest(value=value):
                with self.assertRaises(UsageError) as caught:
                    parse_settings([f"--checkpoint-blocks={value}"])
                self.assertEqual(str(caught.exception), f"--checkpoint-blocks: {message}")

    def assert_refused(self, argv: list, message: str):
        """Exit 2 with `message` as the peer's whole first line, and no report written."""
        with tempfile.TemporaryDirectory() as tmp:
            report = os.path.join(tmp, "report.json")
            code, out, err = run_main(argv + ["--json", report, "--device", "cpu", "--quiet"])
            self.assertEqual(code, 2, err)
            self.assertEqual(err.splitlines()[0], f"{PEER_NAME}: {message}")
            self.assertFalse(os.path.exists(report))
            self.assertEqual(out, "")

    def test_refusals(self):
        self.assert_refused(["--model", "tiny-lm", "--checkpoint-blocks", "0"],
                            "--checkpoint-blocks: must be in 1..10000, got 0")
        self.assert_refused(["--model", "tiny-lm", "--mode", "infer", "--checkpoint-blocks", "2"],
                            "--checkpoint-blocks: activation checkpointing recomputes what backward reads, and "
                            "--mode infer has no backward")
        self.assert_refused(["--model", "mlp", "--checkpoint-blocks", "2"],
                            "--checkpoint-blocks: model 'mlp' has no transformer_block or residual layer at its top "
                            "level, the blocks that checkpointing recomputes, so it would change nothing")
        self.assert_refused(["--model", "tiny-lm", "--checkpoint-blocks", "3"],
                            "--checkpoint-blocks: 3 is more than the 2 blocks of model 'tiny-lm' that backward "
                            "recomputes (--checkpointing is all 2)")
        self.assert_refused(TINY_LM_3 + ["--checkpoint-blocks", "4"],
                            "--checkpoint-blocks: 4 is more than the 3 blocks of model 'tiny-lm' that backward "
                            "recomputes (--checkpointing is all 3)")
        with tempfile.TemporaryDirectory() as tmp:
            self.assert_refused(["--model", write_json(tmp, "mlp.json", TINY_MLP), "--checkpoint-blocks", "1"],
                                "--checkpoint-blocks: model 'tiny-mlp' has no transformer_block or residual layer "
                                "at its top level, the blocks that checkpointing recomputes, so it would change "
                                "nothing")
            self.assert_refused(["--model", write_json(tmp, "res.json", TINY_RESIDUAL), "--checkpoint-blocks", "2"],
                                "--checkpoint-blocks: 2 is more than the 1 block of model 'tiny-residual' that "
                                "backward recomputes (--checkpointing is all 1)")
            # Counted among the blocks backward reaches: pool-first has three blocks, the first before every
            # layer that learns.
            self.assert_refused(["--model", write_json(tmp, "pool.json", POOL_FIRST), "--checkpoint-blocks", "3"],
                                "--checkpoint-blocks: 3 is more than the 2 blocks of model 'pool-first' that "
                                "backward recomputes (--checkpointing is all 2)")
            self.assert_refused(["--model", write_json(tmp, "pools.json", POOL_ONLY), "--checkpoint-blocks", "1"],
                                "--checkpoint-blocks: backward reaches no block of model 'pool-only' (each comes "
                                "before every layer that learns), so there are none to count; --checkpointing lays "
                                "them all out in the arena")

    def test_recomputable_blocks_are_those_backward_reaches(self):
        g = lower(tiny_lm_3().config, "tiny-lm")
        self.assertEqual((g.blocks, g.recomputable_blocks), ([1, 2, 3], [1, 2, 3]))
        g = lowered(POOL_FIRST)
        self.assertEqual((g.blocks, g.recomputable_blocks), ([0, 2, 3], [2, 3]))
        g = lowered(POOL_ONLY)
        self.assertEqual((g.blocks, g.recomputable_blocks), ([0], []))
        g = lowered(CHECKPOINTED_BATCHNORM)  # the first residual's convs read the data: it learns, so it is reached
        self.assertEqual((g.blocks, g.recomputable_blocks), ([2, 3], [2, 3]))
        self.assertEqual(lowered(TINY_MLP).recomputable_blocks, [])


@unittest.skipIf(find_batchsweep() is None, "no batchsweep binary ($BATCHSWEEP_BIN or build/batchsweep)")
class CheckpointBlocksAgainstBatchsweepTest(unittest.TestCase):
    """The peer refuses what `batchsweep plan` refuses, with the same message, and counts the same blocks."""

    def assert_same_refusal(self, argv: list):
        done = subprocess.run([find_batchsweep(), "plan", "--batch", "1", "--backend", "cpu", *argv],
                              capture_output=True, text=True, timeout=120, check=False)
        self.assertEqual(done.returncode, 2, done.stderr)
        expected = done.stderr.splitlines()[0].removeprefix("batchsweep: error: ")
        code, _, err = run_main(argv + ["--device", "cpu", "--quiet"])
        self.assertEqual(code, 2, err)
        self.assertEqual(err.splitlines()[0], f"{PEER_NAME}: {expected}")

    def test_the_same_refusals(self):
        for value in ("0", "10001", "-1", "2.5", "x", "02", " 2", "2b"):
            with self.subTest(value=value):
                self.assert_same_refusal(["--model", "tiny-lm", f"--checkpoint-blocks={value}"])
        self.assert_same_refusal(["--model", "tiny-lm", "--mode", "infer", "--checkpoint-blocks", "1"])
        self.assert_same_refusal(["--model", "mlp", "--checkpoint-blocks", "1"])
        # MAX_CHECKPOINT_BLOCKS is more than any of these has: the message says how many backward recomputes.
        for preset in ("tiny-lm", "gpt2-small", "vit-base", "resnet-small"):
            with self.subTest(preset=preset):
                self.assert_same_refusal(["--model", preset, "--checkpoint-blocks", str(MAX_CHECKPOINT_BLOCKS)])
        self.assert_same_refusal(TINY_LM_3 + ["--checkpoint-blocks", "4"])
        with tempfile.TemporaryDirectory() as tmp:
            for name, config in (("pool-first.json", POOL_FIRST), ("pool-only.json", POOL_ONLY),
                                 ("batchnorm.json", CHECKPOINTED_BATCHNORM), ("residual.json", TINY_RESIDUAL)):
                with self.subTest(config=name):
                    self.assert_same_refusal(["--model", write_json(tmp, name, config), "--checkpoint-blocks",
                                              str(MAX_CHECKPOINT_BLOCKS)])


@unittest.skipIf(torch is None, "PyTorch is not importable")
class CheckpointBlocksTorchTest(unittest.TestCase):
    STEPS = 3

    def wrapped(self, model, batch) -> list:
        """The stack indices that one training forward ran under torch.utils.checkpoint."""
        from torchpeer import torch_model

        real, wrapped = torch_model.checkpoint, []

        def spy(function, *args, **kwargs):
            wrapped.append(function)
            return real(function, *args, **kwargs)

        with mock.patch.object(torch_model, "checkpoint", spy):
            model(batch)
        return [i for i, layer in enumerate(model) if any(layer is f for f in wrapped)]

    def test_only_the_first_n_blocks_backward_reaches_are_wrapped(self):
        from torchpeer.torch_model import build_model, checkpointed_blocks

        lm = tiny_lm_3()
        tokens = torch.randint(0, 1000, (2, 8))
        images = torch.randn(2, 3, 8, 8)
        pool_first = resolve_config(POOL_FIRST, "pool-first.json")
        cases = [
            (lm.config, tokens, 1, [1]), (lm.config, tokens, 2, [1, 2]), (lm.config, tokens, 3, [1, 2, 3]),
            (lm.config, tokens, None, [1, 2, 3]),  # --checkpointing: every block
            # The block before every layer that learns stays wrapped, as with --checkpointing (nothing recomputes
            # it either way), and is not counted: N counts blocks 2 and 3.
            (pool_first, images, 1, [0, 2]), (pool_first, images, 2, [0, 2, 3]), (pool_first, images, None, [0, 2, 3]),
        ]
        for config, batch, n, expected in cases:
            with self.subTest(model=config["name"], checkpoint_blocks=n):
                torch.manual_seed(0)
                model = build_model(config, "model.json", checkpointing=True, checkpoint_blocks=n)
                self.assertEqual(checkpointed_blocks(model.graph, n), expected)
                model.train()
                self.assertEqual(self.wrapped(model, batch), expected)
                model.eval()  # inference keeps nothing to recompute
                self.assertEqual(self.wrapped(model, batch), [])
        # Without checkpointing nothing is wrapped, whatever checkpoint_blocks says.
        model = build_model(lm.config, "model.json", checkpointing=False, checkpoint_blocks=2).train()
        self.assertEqual(self.wrapped(model, tokens), [])

    def train(self, loaded, checkpoint_blocks, accumulation: int = 1):
        """(each step's loss, the state_dict, the last step's gradients, forward calls per block) of STEPS steps of
        a sweep point's own state on the CPU in fp32; checkpoint_blocks False: no checkpointing."""
        from torchpeer.torch_runner import PointState, RunOptions

        on = checkpoint_blocks is not False
        options = RunOptions(accumulation=accumulation, checkpointing=on,
                             checkpoint_blocks=checkpoint_blocks if on else None)
        state = PointState(loaded, lower(loaded.config, loaded.source), options, torch.device("cpu"), 4, {})
        model = state.eager_model
        calls = dict.fromkeys(model.graph.blocks, 0)
        for i in calls:  # a pre-hook: the recompute may stop inside the block once it has what backward needs
            model[i].register_forward_pre_hook(lambda module, args, i=i: calls.__setitem__(i, calls[i] + 1))
        losses = [float(state.step()) for _ in range(self.STEPS)]
        state_dict = {k: v.detach().clone() for k, v in model.state_dict().items()}
        grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
        return losses, state_dict, grads, calls

    def assert_same_training(self, loaded, checkpoint_blocks: int, recomputed: list, accumulation: int = 1) -> dict:
        plain_losses, plain, plain_grads, plain_calls = self.train(loaded, False, accumulation)
        losses, state, grads, calls = self.train(loaded, checkpoint_blocks, accumulation)
        forwards = self.STEPS * accumulation
        self.assertEqual(plain_calls, dict.fromkeys(plain_calls, forwards))
        # The checkpointed blocks backward reaches run their forward again; the others once.
        self.assertEqual(calls, {i: (2 if i in recomputed else 1) * forwards for i in plain_calls})
        self.assertNotEqual(plain_losses[0], plain_losses[-1])  # the steps trained
        for step, (loss, expected) in enumerate(zip(losses, plain_losses), 1):
            self.assertLessEqual(abs(loss - expected), 1e-6 * abs(expected), f"step {step}")
        for got, want in ((state, plain), (grads, plain_grads)):
            self.assertEqual(list(got), list(want))
            for name, value in got.items():
                torch.testing.assert_close(value, want[name], rtol=1e-6, atol=1e-7, msg=name)
        return state

    def test_transformer_blocks_train_as_without_checkpointing(self):
        self.assert_same_training(tiny_lm_3(), 2, recomputed=[1, 2])

    def test_residuals_with_batchnorm_train_as_without_checkpointing(self):
        with tempfile.TemporaryDirectory() as tmp:
            loaded = load_model(write_json(tmp, "pool-first.json", POOL_FIRST))
        state = self.assert_same_training(loaded, 1, recomputed=[2], accumulation=2)
        tracked = {k: int(v) for k, v in state.items() if k.endswith("num_batches_tracked")}
        self.assertEqual(len(tracked), 2)
        self.assertEqual(set(tracked.values()), {self.STEPS * 2})  # once per micro-batch, not again per recompute

    def sweep(self, argv: list) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "report.json")
            code, _, err = run_main(TINY_LM_3 + ["--batch", "2"] + argv + FAST + ["--json", path, "--device", "cpu"])
            self.assertEqual(code, 0, err)
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        validate(self, doc)
        self.assertEqual(doc["points"][0]["status"], "ok")
        return doc

    def test_checkpoint_blocks_is_in_the_settings(self):
        settings = self.sweep(["--checkpoint-blocks", "2"])["settings"]
        self.assertIs(settings["checkpointing"], True)
        self.assertEqual(settings["checkpoint_blocks"], 2)
        keys = list(settings)
        self.assertEqual(keys.index("checkpoint_blocks"), keys.index("checkpointing") + 1)  # beside it (batchsweep sorts its keys: there it comes just before)
        self.assertIn("around the first 2 of the 3 top-level transformer_block / residual copies that backward "
                      "reaches (--checkpoint-blocks 2;", settings["torch"]["checkpointing"])
        # Absent where every block is checkpointed, or none, as batchsweep writes it.
        settings = self.sweep(["--checkpointing"])["settings"]
        self.assertIs(settings["checkpointing"], True)
        self.assertNotIn("checkpoint_blocks", settings)
        self.assertIn("around each of the 3 top-level", settings["torch"]["checkpointing"])
        self.assertNotIn("checkpoint_blocks", self.sweep([])["settings"])


@unittest.skipIf(torch is None or find_batchsweep() is None, "needs PyTorch and the batchsweep binary")
class CheckpointBlocksThroughCompareScriptTest(unittest.TestCase):
    def test_flag_after_the_double_dash_reaches_both_tools(self):
        script = os.path.join(PEERS, "compare_with_torch.sh")
        shared = [a for a in FAST if a != "--quiet"]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            done = subprocess.run(
                [script, find_batchsweep(), "--model", write_json(tmp, "pool-first.json", POOL_FIRST), "--batch", "2",
                 "--backend", "cpu", "--out", out, "--", *shared, "--checkpoint-blocks", "1"],
                capture_output=True, text=True, timeout=300, check=False, env=dict(os.environ, PYTHON=sys.executable))
            self.assertEqual(done.returncode, 0, done.stderr)
            for name in ("batchsweep", "torch-eager"):
                with open(os.path.join(out, name + ".json"), encoding="utf-8") as f:
                    settings = json.load(f)["settings"]
                self.assertEqual((settings["checkpointing"], settings.get("checkpoint_blocks")), (True, 1), name)


if __name__ == "__main__":
    unittest.main()
