#!/usr/bin/env python3
"""Checks configs/schema/model-v1.schema.json (draft 2020-12) against the model config format.

  check_model_schema.py [--batchsweep BINARY]

1. Every preset, configs/models/*.json, must be valid.
2. GOOD configs below (every layer type, both optimizers, edge values) must be valid.
3. BAD configs below must be invalid, with an error at the JSON path given (so that an editor points at the
   right place).
4. BEYOND configs below are refused by batchsweep for rules a JSON Schema cannot express (shapes, limits after
   `repeat`, nesting depth, the name's length in bytes); the schema must accept them. One that starts failing
   means the schema learnt a rule: move it to BAD.

With --batchsweep, each GOOD, BAD and BEYOND config is also written to a temporary file and given to
`BINARY plan --model FILE`, which must exit 0 for GOOD and 2 for BAD and BEYOND: the schema and the parser
must agree.

Exit 0 when all is as expected, 1 (printing what went wrong) when not, 2 for usage errors or unreadable files,
77 when the jsonschema module is missing (the caller skips the test), as validate_schema.py does.
"""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "configs" / "schema" / "model-v1.schema.json"
PRESETS = ROOT / "configs" / "models"


def model(layers, input=None, **top):
    """A config with the given layers (a vector input of 16 features unless `input` is given)."""
    doc = {"name": "t", "input": input or {"type": "vector", "features": 16}, "layers": layers}
    doc.update(top)
    return doc


TOKENS = {"type": "tokens", "sequence_length": 8, "vocab_size": 50}
IMAGE = {"type": "image", "channels": 3, "height": 16, "width": 16}
HEAD = [{"type": "linear", "out_features": 4}]

def nested_residuals(depth):
    layer = {"type": "layernorm"}
    for _ in range(depth):
        layer = {"type": "residual", "layers": [layer]}
    return layer


# (label, config): a dict, or JSON text where the spelling matters (8.0, 4e0). batchsweep accepts each.
GOOD = [
    ("every vector-side key; sgd", model(
        [{"type": "linear", "out_features": 32, "bias": False, "activation": "relu", "repeat": 2},
         {"type": "layernorm", "repeat": 1},
         {"type": "residual", "repeat": 3, "activation": "tanh", "layers": [
             {"type": "linear", "out_features": 32, "activation": "gelu"},
             {"type": "residual", "layers": [{"type": "linear", "out_features": 32, "activation": "silu"}]},
             {"type": "linear", "out_features": 32, "activation": "tanh"}]},
         {"type": "linear", "out_features": 10, "activation": "none"}],
        loss="cross_entropy", optimizer={"type": "sgd", "learning_rate": 0.1, "momentum": 0})),
    ("a downsampling residual with a projection shortcut", model(
        [{"type": "residual", "activation": "relu",
          "layers": [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2, "padding": 1},
                     {"type": "batchnorm"}],
          "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel_size": 1, "stride": 2, "bias": False},
                       {"type": "batchnorm"}]},
         {"type": "global_avgpool"}, *HEAD], input=IMAGE)),
    ("sgd with Nesterov momentum and L2 weight decay", model(
        HEAD, optimizer={"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "nesterov": True,
                         "weight_decay": 1e-4})),
    ("image layers; mse; adamw with every key", model(
        [{"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 1, "padding": 0, "bias": True,
          "activation": "relu"},
         {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1},
         {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": 1},
         {"type": "avgpool2d", "kernel_size": 3, "stride": 1, "padding": 0},
         {"type": "global_avgpool"},
         {"type": "linear", "out_features": 2}],
        input=IMAGE, loss="mse",
        optimizer={"type": "adamw", "learning_rate": 1e-3, "beta1": 0, "beta2": 0.5, "eps": 1e-6,
                   "weight_decay": 0})),
    ("tokens: embedding, attention, transformer_block; optimizer type left out", model(
        [{"type": "embedding", "dim": 16},
         {"type": "attention", "heads": 2, "causal": True},
         {"type": "transformer_block", "heads": 4, "mlp_ratio": 2, "causal": False, "repeat": 2},
         {"type": "layernorm"},
         {"type": "linear", "out_features": 50}],
        input=TOKENS, optimizer={"beta2": 0.95})),
    ("patch_embedding and flatten of [T, D]; empty optimizer", model(
        [{"type": "patch_embedding", "patch_size": 4, "dim": 8},
         {"type": "attention", "heads": 1},
         {"type": "flatten"},
         {"type": "linear", "out_features": 3}],
        input=IMAGE, optimizer={})),
    ("batchnorm on an image and on a vector, with and without activation", model(
        [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "bias": False},
         {"type": "batchnorm", "activation": "relu"},
         {"type": "global_avgpool"},
         {"type": "batchnorm", "repeat": 2},
         {"type": "linear", "out_features": 2}],
        input=IMAGE)),
    ("global_avgpool over tokens; no loss or optimizer", model(
        [{"type": "embedding", "dim": 8}, {"type": "global_avgpool"}, {"type": "linear", "out_features": 5}],
        input=TOKENS)),
    ("flatten of an image", model([{"type": "flatten"}, {"type": "linear", "out_features": 4}],
                                  input={"type": "image", "channels": 1, "height": 2, "width": 2})),
    ("integers written 8.0 and 4e0", """{"name": "floats", "input": {"type": "vector", "features": 8.0},
        "layers": [{"type": "linear", "out_features": 4e0, "repeat": 2.0}]}"""),
    ("largest integer field", model([{"type": "linear", "out_features": 2}],
                                    input={"type": "vector", "features": 2147483647})),
    ("repeat 10000", model([{"type": "layernorm", "repeat": 10000}], loss="mse")),
    ("name of 200 bytes, non-ASCII allowed", model(HEAD, name="é" * 100)),
    ("residuals nested 30 levels", model([nested_residuals(30), *HEAD])),
    ("$schema for an editor", model(HEAD, **{"$schema": "../configs/schema/model-v1.schema.json"})),
]

# (label, config, JSON path of an expected error as a list of keys and indices). batchsweep exits 2 on each.
BAD = [
    ("unknown top-level key", model(HEAD, batch=32), []),
    ("$schema that is not a string", model(HEAD, **{"$schema": 1}), ["$schema"]),
    ("typo'd layer key out_featurs", model([{"type": "linear", "out_featurs": 4}]), ["layers", 0]),
    ("unknown layer type", model([{"type": "dense", "out_features": 4}]), ["layers", 0, "type"]),
    ("negative kernel_size", model([{"type": "conv2d", "out_channels": 4, "kernel_size": -3}], input=IMAGE),
     ["layers", 0, "kernel_size"]),
    ("zero heads", model([{"type": "embedding", "dim": 8}, {"type": "attention", "heads": 0}], input=TOKENS),
     ["layers", 1, "heads"]),
    ("sgd with beta1", model(HEAD, optimizer={"type": "sgd", "beta1": 0.9}), ["optimizer"]),
    ("adamw (by default) with momentum", model(HEAD, optimizer={"momentum": 0.9}), ["optimizer"]),
    ("missing input", {"name": "t", "layers": HEAD}, []),
    ("empty layers", model([]), ["layers"]),
    ("string where an integer is expected", model([{"type": "linear", "out_features": "4"}]),
     ["layers", 0, "out_features"]),
    ("activation swish", model([{"type": "linear", "out_features": 4, "activation": "swish"}]),
     ["layers", 0, "activation"]),
    ("not an object", [HEAD], []),
    ("name missing", {"input": {"type": "vector", "features": 4}, "layers": HEAD}, []),
    ("name empty", model(HEAD, name=""), ["name"]),
    ("name not a string", model(HEAD, name=7), ["name"]),
    ("name with a newline at the end", model(HEAD, name="mlp\n"), ["name"]),
    ("name with DEL", model(HEAD, name="a\u007fb"), ["name"]),
    ("name of 201 characters", model(HEAD, name="n" * 201), ["name"]),
    ("input not an object", model(HEAD, input="vector"), ["input"]),
    ("input without type", model(HEAD, input={"features": 4}), ["input"]),
    ("unknown input type", model(HEAD, input={"type": "audio", "features": 4}), ["input", "type"]),
    ("image input without width", model(HEAD, input={"type": "image", "channels": 3, "height": 8}), ["input"]),
    ("vector input with height", model(HEAD, input={"type": "vector", "features": 4, "height": 2}), ["input"]),
    ("zero features", model(HEAD, input={"type": "vector", "features": 0}), ["input", "features"]),
    ("layers not a list", model({"type": "linear", "out_features": 4}), ["layers"]),
    ("layer not an object", model(["linear"]), ["layers", 0]),
    ("layer without type", model([{"out_features": 4}]), ["layers", 0]),
    ("linear without out_features", model([{"type": "linear"}]), ["layers", 0]),
    ("fractional integer 8.5", model([{"type": "linear", "out_features": 8.5}]), ["layers", 0, "out_features"]),
    ("integer above 2^31-1", model([{"type": "linear", "out_features": 2147483648}]),
     ["layers", 0, "out_features"]),
    ("integer above 2^31-1 written as a float", model([{"type": "linear", "out_features": 1e10}]),
     ["layers", 0, "out_features"]),
    ("integer field true", model([{"type": "linear", "out_features": True}]), ["layers", 0, "out_features"]),
    ("bias as a string", model([{"type": "linear", "out_features": 4, "bias": "true"}]), ["layers", 0, "bias"]),
    ("causal as 1", model([{"type": "embedding", "dim": 8}, {"type": "attention", "heads": 2, "causal": 1}],
                          input=TOKENS), ["layers", 1, "causal"]),
    ("negative padding", model([{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": -1}],
                               input=IMAGE), ["layers", 0, "padding"]),
    ("zero stride", model([{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "stride": 0}], input=IMAGE),
     ["layers", 0, "stride"]),
    ("pool with negative padding", model([{"type": "maxpool2d", "kernel_size": 2, "padding": -1}], input=IMAGE),
     ["layers", 0, "padding"]),
    ("pool without kernel_size", model([{"type": "avgpool2d", "stride": 2}], input=IMAGE), ["layers", 0]),
    ("conv2d key on linear", model([{"type": "linear", "out_features": 4, "kernel_size": 3}]), ["layers", 0]),
    ("flatten with a key", model([{"type": "flatten", "dim": 4}, *HEAD]), ["layers", 0]),
    ("patch_embedding without dim", model([{"type": "patch_embedding", "patch_size": 4}], input=IMAGE),
     ["layers", 0]),
    ("zero mlp_ratio", model([{"type": "embedding", "dim": 8},
                              {"type": "transformer_block", "heads": 2, "mlp_ratio": 0}], input=TOKENS),
     ["layers", 1, "mlp_ratio"]),
    ("batchnorm with an unknown activation", model([{"type": "batchnorm", "activation": "elu"}, *HEAD]),
     ["layers", 0, "activation"]),
    ("residual with an unknown activation", model([{"type": "residual", "activation": "prelu",
                                                   "layers": [{"type": "layernorm"}]}, *HEAD]),
     ["layers", 0, "activation"]),
    ("batchnorm with a momentum key", model([{"type": "batchnorm", "momentum": 0.01}, *HEAD]), ["layers", 0]),
    ("repeat 0", model([{"type": "linear", "out_features": 4, "repeat": 0}]), ["layers", 0, "repeat"]),
    ("repeat 10001", model([{"type": "layernorm", "repeat": 10001}, *HEAD]), ["layers", 0, "repeat"]),
    ("residual without layers", model([{"type": "residual"}, *HEAD]), ["layers", 0]),
    ("residual with empty layers", model([{"type": "residual", "layers": []}, *HEAD]), ["layers", 0, "layers"]),
    ("typo inside a residual", model([{"type": "residual", "layers": [{"type": "layernorm", "eps": 1e-5}]}, *HEAD]),
     ["layers", 0, "layers", 0]),
    ("10001 layers", model([{"type": "layernorm"}] * 10000 + HEAD), ["layers"]),
    ("unknown loss", model(HEAD, loss="l1"), ["loss"]),
    ("loss null", model(HEAD, loss=None), ["loss"]),
    ("optimizer not an object", model(HEAD, optimizer="sgd"), ["optimizer"]),
    ("unknown optimizer type", model(HEAD, optimizer={"type": "adam"}), ["optimizer", "type"]),
    ("zero learning_rate", model(HEAD, optimizer={"learning_rate": 0}), ["optimizer", "learning_rate"]),
    ("eps under fp32's smallest normal (flushed to zero)", model(HEAD, optimizer={"eps": 1e-39}),
     ["optimizer", "eps"]),
    ("learning_rate as a string", model(HEAD, optimizer={"type": "sgd", "learning_rate": "0.1"}),
     ["optimizer", "learning_rate"]),
    ("learning_rate 1e400 (infinity to Python; batchsweep refuses the number)", """{"name": "t", "input": {"type": "vector", "features": 4},
        "layers": [{"type": "linear", "out_features": 2}], "optimizer": {"learning_rate": 1e400}}""",
     ["optimizer", "learning_rate"]),
    ("beta1 of 1", model(HEAD, optimizer={"beta1": 1}), ["optimizer", "beta1"]),
    ("negative beta2", model(HEAD, optimizer={"beta2": -0.1}), ["optimizer", "beta2"]),
    ("zero eps", model(HEAD, optimizer={"eps": 0}), ["optimizer", "eps"]),
    ("negative weight_decay", model(HEAD, optimizer={"weight_decay": -0.01}), ["optimizer", "weight_decay"]),
    ("momentum of 1", model(HEAD, optimizer={"type": "sgd", "momentum": 1}), ["optimizer", "momentum"]),
    ("empty shortcut", model([{"type": "residual", "layers": [{"type": "layernorm"}], "shortcut": []}, *HEAD]),
     ["layers", 0, "shortcut"]),
    ("shortcut not a list", model([{"type": "residual", "layers": [{"type": "layernorm"}],
                                    "shortcut": {"type": "layernorm"}}, *HEAD]), ["layers", 0, "shortcut"]),
    ("shortcut on a linear", model([{"type": "linear", "out_features": 4, "shortcut": HEAD}]), ["layers", 0]),
    ("nesterov as 1", model(HEAD, optimizer={"type": "sgd", "nesterov": 1}), ["optimizer", "nesterov"]),
    ("negative sgd weight_decay", model(HEAD, optimizer={"type": "sgd", "weight_decay": -1}),
     ["optimizer", "weight_decay"]),
    ("adamw (by default) with nesterov", model(HEAD, optimizer={"nesterov": True}), ["optimizer"]),
]


# (label, config): valid under the schema, refused by batchsweep for a rule the schema cannot express.
BEYOND = [
    ("embedding after a vector input", model([{"type": "embedding", "dim": 8}])),
    ("heads that do not divide the width", model([{"type": "embedding", "dim": 8}, {"type": "attention", "heads": 3}],
                                                 input=TOKENS)),
    ("patch_size that does not divide H", model([{"type": "patch_embedding", "patch_size": 5, "dim": 8}],
                                                input=IMAGE)),
    ("kernel larger than the input", model([{"type": "conv2d", "out_channels": 4, "kernel_size": 17}],
                                           input=IMAGE)),
    ("cross_entropy on an image-shaped output", model([{"type": "conv2d", "out_channels": 4, "kernel_size": 3}],
                                                      input=IMAGE)),
    ("batchnorm over tokens", model([{"type": "embedding", "dim": 8}, {"type": "batchnorm"},
                                     {"type": "linear", "out_features": 50}], input=TOKENS)),
    ("a shortcut that does not make the inner layers' shape", model(
        [{"type": "residual", "layers": [{"type": "conv2d", "out_channels": 4, "kernel_size": 3, "stride": 2,
                                         "padding": 1}],
          "shortcut": [{"type": "conv2d", "out_channels": 4, "kernel_size": 1}]}, {"type": "flatten"}, *HEAD],
        input=IMAGE)),
    ("a shortcut that computes nothing", model(
        [{"type": "flatten"}, {"type": "residual", "layers": [{"type": "layernorm"}],
                               "shortcut": [{"type": "flatten"}]}, *HEAD], input=IMAGE)),
    ("Nesterov momentum without momentum", model(HEAD, optimizer={"type": "sgd", "momentum": 0, "nesterov": True})),
    ("a residual that changes the shape", model([{"type": "residual", "layers": [HEAD[0]]}, *HEAD])),
    ("10,001 layers after repeat", model([{"type": "residual", "repeat": 2,
                                           "layers": [{"type": "layernorm", "repeat": 5001}]}, *HEAD])),
    ("residuals nested 31 levels: JSON nested deeper than 64", model([nested_residuals(31), *HEAD])),
    ("name of 101 characters, 202 bytes", model(HEAD, name="é" * 101)),
    # The optimizer's steps run in fp32: a value that is 1, 0 or infinite there.
    ("beta1 that is 1 in fp32", model(HEAD, optimizer={"beta1": 0.99999999})),
    ("momentum that is 1 in fp32", model(HEAD, optimizer={"type": "sgd", "momentum": 0.99999999})),
    ("learning_rate that underflows fp32", model(HEAD, optimizer={"learning_rate": 1e-39})),
    ("weight_decay that overflows fp32", model(HEAD, optimizer={"weight_decay": 1e39})),
]


def load(doc):
    return json.loads(doc) if isinstance(doc, str) else doc


def text(doc):
    return doc if isinstance(doc, str) else json.dumps(doc)


def describe(error):
    path = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"{path}: {error.message}"


def run_binary(binary, label, doc, workdir, index):
    path = os.path.join(workdir, f"case{index}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text(doc))
    try:
        result = subprocess.run([binary, "plan", "--model", path], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{e}"
    last = (result.stderr.strip().splitlines() or [""])[-1]
    return result.returncode, last


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batchsweep", metavar="BINARY", help="also check each case with BINARY plan --model")
    args = parser.parse_args(argv[1:])
    try:
        import jsonschema
    except ImportError:
        print("python3 module jsonschema is not installed (pip install jsonschema)", file=sys.stderr)
        return 77
    try:
        with open(SCHEMA, encoding="utf-8") as f:
            schema = json.load(f)
        presets = {}
        for path in sorted(PRESETS.glob("*.json")):
            with open(path, encoding="utf-8") as f:
                presets[path.name] = json.load(f)
    except (OSError, ValueError) as e:
        print(f"cannot read input: {e}", file=sys.stderr)
        return 2
    if not presets:
        print(f"no presets found in {PRESETS}", file=sys.stderr)
        return 2

    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    problems = []

    for name, doc in presets.items():
        for error in validator.iter_errors(doc):
            problems.append(f"preset {name}: rejected: {describe(error)}")
    for label, doc in GOOD + BEYOND:
        for error in validator.iter_errors(load(doc)):
            problems.append(f"{label}: rejected: {describe(error)}")
    for label, doc, where in BAD:
        errors = list(validator.iter_errors(load(copy.deepcopy(doc))))
        if not errors:
            problems.append(f"{label}: accepted, but batchsweep refuses it")
        elif not any(list(e.absolute_path) == where for e in errors):
            wanted = "/".join(str(p) for p in where) or "(root)"
            problems.append(f"{label}: no error at {wanted}; got " + "; ".join(describe(e) for e in errors))

    checked_with_binary = 0
    if args.batchsweep:
        with tempfile.TemporaryDirectory(prefix="model-schema-") as workdir:
            cases = [(label, doc, 0) for label, doc in GOOD]
            cases += [(label, doc, 2) for label, doc, _ in BAD] + [(label, doc, 2) for label, doc in BEYOND]
            for index, (label, doc, expected) in enumerate(cases):
                rc, last = run_binary(args.batchsweep, label, doc, workdir, index)
                checked_with_binary += 1
                if rc != expected:
                    problems.append(f"{label}: batchsweep plan exited {rc}, expected {expected}: {last}")

    for problem in problems:
        print(problem, file=sys.stderr)
    total = len(presets) + len(GOOD) + len(BAD) + len(BEYOND)
    if problems:
        print(f"{len(problems)} problem(s) in {total} cases", file=sys.stderr)
        return 1
    extra = f", and {checked_with_binary} with {args.batchsweep}" if args.batchsweep else ""
    print(f"model-v1.schema.json: {len(presets)} presets and {len(GOOD)} good configs valid, {len(BAD)} bad "
          f"configs invalid, {len(BEYOND)} beyond the schema valid{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
