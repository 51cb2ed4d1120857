"""Model configs for the peer: a preset (configs/models/<name>.json) or a file, checked and resolved with
batchsweep's defaults (src/model/schema.cpp), then walked layer by layer with the shape rules, parameter counts
and forward-FLOP conventions of src/plan/lower.cpp. The same walk drives the PyTorch builder, so the module and
the counts cannot drift apart. Standard library only."""

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from .errors import ConfigError
from .overrides import annotate, apply_model_overrides

MAX_INT_FIELD = 2147483647
MAX_RESIDUAL_DEPTH = 32
MAX_EXPANDED_LAYERS = 10000
MAX_SAMPLE_ELEMENTS = 1 << 36
MAX_PARAMETERS = 1 << 40
MAX_CONFIG_BYTES = 16 << 20
# The layer types whose top-level copies --checkpointing recomputes (Graph.blocks).
CHECKPOINTED_LAYERS = ("transformer_block", "residual")

REQUIRED = object()  # marks a field without a default

# Per layer type: (key, kind, default) in batchsweep's emit order. kind: "int+" (positive), "int0"
# (non-negative), "bool", "activation". Pools' stride defaults to their kernel size (None here). A pool's
# padding and a residual's activation are written out only where they are not 0 or "none" (batchsweep's
# emit_only_nonzero: they came later).
EMIT_ONLY_NONZERO = {("maxpool2d", "padding"), ("avgpool2d", "padding"), ("residual", "activation")}
LAYER_FIELDS = {
    "linear": [("out_features", "int+", REQUIRED), ("bias", "bool", True), ("activation", "activation", "none")],
    "conv2d": [("out_channels", "int+", REQUIRED), ("kernel_size", "int+", REQUIRED), ("stride", "int+", 1),
               ("padding", "int0", 0), ("bias", "bool", True), ("activation", "activation", "none")],
    "maxpool2d": [("kernel_size", "int+", REQUIRED), ("stride", "int+", None), ("padding", "int0", 0)],
    "avgpool2d": [("kernel_size", "int+", REQUIRED), ("stride", "int+", None), ("padding", "int0", 0)],
    "global_avgpool": [],
    "flatten": [],
    "layernorm": [],
    "batchnorm": [("activation", "activation", "none")],
    "embedding": [("dim", "int+", REQUIRED)],
    "patch_embedding": [("patch_size", "int+", REQUIRED), ("dim", "int+", REQUIRED)],
    "attention": [("heads", "int+", REQUIRED), ("causal", "bool", False)],
    "transformer_block": [("heads", "int+", REQUIRED), ("mlp_ratio", "int+", 4), ("causal", "bool", False)],
    "residual": [("activation", "activation", "none")],
}
INPUT_FIELDS = {
    "vector": ["features"],
    "image": ["channels", "height", "width"],
    "tokens": ["sequence_length", "vocab_size"],
}
# (key, default, lowest, lowest_inclusive, highest_exclusive, description)
OPTIMIZER_FIELDS = {
    "adamw": [("learning_rate", 3e-4, 0.0, False, None, "a number > 0"),
              ("beta1", 0.9, 0.0, True, 1.0, "a number in [0, 1)"),
              ("beta2", 0.999, 0.0, True, 1.0, "a number in [0, 1)"),
              ("eps", 1e-8, 0.0, False, None, "a number > 0"),
              ("weight_decay", 0.01, 0.0, True, None, "a number >= 0")],
    "sgd": [("learning_rate", 0.01, 0.0, False, None, "a number > 0"),
            ("momentum", 0.9, 0.0, True, 1.0, "a number in [0, 1)"),
            ("weight_decay", 0.0, 0.0, True, None, "a number >= 0")],
}
# Flags (true or false, default false), per optimizer type.
OPTIMIZER_FLAGS = {"adamw": [], "sgd": ["nesterov"]}
# Keys batchsweep writes into the resolved config only where they are not 0 (false): added after reports were
# written, so older configs resolve as they did.
OPTIMIZER_EMIT_ONLY_NONZERO = {("sgd", "weight_decay"), ("sgd", "nesterov")}
ACTIVATIONS = ["none", "relu", "gelu", "silu", "tanh"]
LOSSES = ["cross_entropy", "mse"]


def repo_root() -> str:
    """The batchsweep checkout this file lives in (bench/peers/torchpeer/ is three levels down)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def preset_dir(root: Optional[str] = None) -> str:
    return os.path.join(root or repo_root(), "configs", "models")


def preset_names(root: Optional[str] = None) -> list:
    folder = preset_dir(root)
    if not os.path.isdir(folder):
        return []
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".json"))


# ---------------------------------------------------------------------------------------------------------------
# Parsing and defaults
# ---------------------------------------------------------------------------------------------------------------

def _describe(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    return "an object"


class _Parser:
    def __init__(self, source: str):
        self.source = source
        self.expanded = 0

    def fail(self, path: str, message: str):
        raise ConfigError(self.source, path, message)

    def check_keys(self, obj: dict, path: str, allowed: list, what: str):
        for key in obj:
            if key not in allowed:
                self.fail(f"{path}.{key}" if path else key,
                          f"unknown key '{key}' {what} (allowed here: {', '.join(allowed)})")

    def read_int(self, v: Any, path: str, kind: str) -> int:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(path, f"expected an integer, got {_describe(v)}")
        if isinstance(v, float):
            if not (math.isfinite(v) and v == math.floor(v)):
                self.fail(path, f"expected an integer, got {v}")
            v = int(v)
        if kind == "int+" and v <= 0:
            self.fail(path, f"must be a positive integer, got {v}")
        if kind == "int0" and v < 0:
            self.fail(path, f"must not be negative, got {v}")
        if v > MAX_INT_FIELD:
            self.fail(path, f"{v} is above the maximum {MAX_INT_FIELD}")
        return v

    def read_choice(self, v: Any, path: str, allowed: list, what: str) -> str:
        if not isinstance(v, str):
            self.fail(path, f"expected a string naming the {what}, got {_describe(v)}")
        if v not in allowed:
            self.fail(path, f"unknown {what} '{v}' (allowed: {', '.join(allowed)})")
        return v

    def model(self, doc: Any) -> dict:
        if not isinstance(doc, dict):
            self.fail("", f"a model config is a JSON object, got {_describe(doc)}")
        # "$schema" lets an editor find configs/schema/model-v1.schema.json, as batchsweep allows.
        self.check_keys(doc, "", ["$schema", "name", "input", "layers", "loss", "optimizer"], "at the top level")
        if "$schema" in doc and not isinstance(doc["$schema"], str):
            self.fail("$schema", f"must be a string (the schema's URI or path), got {_describe(doc['$schema'])}")
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            self.fail("name", "a model config needs a \"name\" (a non-empty string)")
        if "input" not in doc:
            self.fail("input", "a model config needs an \"input\"")
        if "layers" not in doc:
            self.fail("layers", "a model config needs a non-empty \"layers\" list")
        layers = doc["layers"]
        if not isinstance(layers, list):
            self.fail("layers", f"expected a list of layers, got {_describe(layers)}")
        if not layers:
            self.fail("layers", "empty: a model needs at least one layer")
        return {
            "name": name,
            "input": self.input(doc["input"]),
            "layers": self.layers(layers, "layers", 0),
            "loss": self.read_choice(doc.get("loss", "cross_entropy"), "loss", LOSSES, "loss"),
            "optimizer": self.optimizer(doc.get("optimizer", {})),
        }

    def input(self, v: Any) -> dict:
        if not isinstance(v, dict):
            self.fail("input", f"expected an object, got {_describe(v)}")
        if "type" not in v:
            self.fail("input.type", f"the input needs a type ({', '.join(INPUT_FIELDS)})")
        kind = self.read_choice(v["type"], "input.type", list(INPUT_FIELDS), "input type")
        self.check_keys(v, "input", ["type"] + INPUT_FIELDS[kind], f"for input type `{kind}`")
        out = {"type": kind}
        for key in INPUT_FIELDS[kind]:
            if key not in v:
                self.fail(f"input.{key}", f"input type `{kind}` needs '{key}'")
            out[key] = self.read_int(v[key], f"input.{key}", "int+")
        return out

    def layers(self, items: list, path: str, depth: int) -> list:
        out = []
        for i, item in enumerate(items):
            out.append(self.layer(item, f"{path}[{i}]", depth))
        return out

    def layer(self, v: Any, path: str, depth: int) -> dict:
        if not isinstance(v, dict):
            self.fail(path, f"expected a layer (an object), got {_describe(v)}")
        if "type" not in v:
            self.fail(f"{path}.type", f"every layer needs a type ({', '.join(LAYER_FIELDS)})")
        kind = self.read_choice(v["type"], f"{path}.type", list(LAYER_FIELDS), "layer type")
        fields = LAYER_FIELDS[kind]
        allowed = ["type", "repeat"] + [f[0] for f in fields] + (["layers", "shortcut"] if kind == "residual" else [])
        self.check_keys(v, path, allowed, f"for layer type `{kind}`")
        out = {"type": kind}
        for key, rule, default in fields:
            here = f"{path}.{key}"
            if key not in v:
                if default is REQUIRED:
                    self.fail(here, f"layer type `{kind}` needs '{key}'")
                out[key] = out["kernel_size"] if default is None else default
            elif rule == "bool":
                if not isinstance(v[key], bool):
                    self.fail(here, f"expected true or false, got {_describe(v[key])}")
                out[key] = v[key]
            elif rule == "activation":
                out[key] = self.read_choice(v[key], here, ACTIVATIONS, "activation")
            else:
                out[key] = self.read_int(v[key], here, rule)
            if (kind, key) in EMIT_ONLY_NONZERO and out[key] in (0, "none"):
                del out[key]
        inner_expanded = 1
        if kind == "residual":
            if depth >= MAX_RESIDUAL_DEPTH:
                self.fail(path, f"nesting too deep: residual layers may nest at most {MAX_RESIDUAL_DEPTH} levels")
            inner = v.get("layers")
            if not isinstance(inner, list) or not inner:
                self.fail(f"{path}.layers", "layer type `residual` needs a non-empty list of inner layers")
            before = self.expanded
            out["layers"] = self.layers(inner, f"{path}.layers", depth + 1)
            if "shortcut" in v:  # the projection on the shortcut; written out only where there is one
                shortcut = v["shortcut"]
                if not isinstance(shortcut, list):
                    self.fail(f"{path}.shortcut", f"expected a list of layers, got {_describe(shortcut)}")
                if not shortcut:
                    self.fail(f"{path}.shortcut", "empty: leave `shortcut` out for the identity, or give the "
                                                  "layers that project the input to the inner layers' output shape")
                out["shortcut"] = self.layers(shortcut, f"{path}.shortcut", depth + 1)
            inner_expanded = self.expanded - before
            self.expanded = before
        out["repeat"] = self.read_int(v["repeat"], f"{path}.repeat", "int+") if "repeat" in v else 1
        self.expanded += out["repeat"] * inner_expanded
        if self.expanded > MAX_EXPANDED_LAYERS:
            self.fail(path, f"the model expands to more than {MAX_EXPANDED_LAYERS} layers (counting repeats)")
        return out

    def optimizer(self, v: Any) -> dict:
        if not isinstance(v, dict):
            self.fail("optimizer", f"expected an object, got {_describe(v)}")
        kind = self.read_choice(v.get("type", "adamw"), "optimizer.type", list(OPTIMIZER_FIELDS),
                                "optimizer type")
        fields, flags = OPTIMIZER_FIELDS[kind], OPTIMIZER_FLAGS[kind]
        self.check_keys(v, "optimizer", ["type"] + [f[0] for f in fields] + flags, f"for optimizer `{kind}`")
        out = {"type": kind}
        for key, default, lowest, inclusive, highest, description in fields:
            x = v.get(key, default)
            if key in v:
                ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                ok = ok and (x >= lowest if inclusive else x > lowest) and (highest is None or x < highest)
                if not ok:
                    self.fail(f"optimizer.{key}", f"must be {description}, got {json.dumps(x)}")
            if x != 0 or (kind, key) not in OPTIMIZER_EMIT_ONLY_NONZERO:
                out[key] = float(x)
        for key in flags:
            x = v.get(key, False)
            if not isinstance(x, bool):
                self.fail(f"optimizer.{key}", f"expected true or false, got {json.dumps(x)}")
            if x or (kind, key) not in OPTIMIZER_EMIT_ONLY_NONZERO:
                out[key] = x
        if out.get("nesterov") and out["momentum"] == 0:
            self.fail("optimizer.nesterov", "Nesterov momentum needs a momentum > 0 (optimizer.momentum is 0)")
        return out


def resolve_config(doc: Any, source: str) -> dict:
    """A config document checked and with every default written out (the form of batchsweep's to_json),
    shapes checked through the whole stack. Raises ConfigError naming `source` and the field."""
    config = _Parser(source).model(doc)
    lower(config, source)
    return config


def resolve_overridden(doc: Any, source: str, overrides: Optional[list] = None) -> dict:
    """resolve_config on the document with the --set overrides applied (batchsweep's parse_overridden). An error
    of the parser names the --set on its path, or, where none is, every --set. Raises UsageError for a --set
    that cannot be applied, ConfigError for what the parser refuses."""
    if not overrides:
        return resolve_config(doc, source)
    apply_model_overrides(doc, overrides, source)
    try:
        return resolve_config(doc, source)
    except ConfigError as e:
        raise annotate(e, overrides) from None


@dataclass
class LoadedModel:
    config: dict  # resolved, every default written out (with the --set values)
    source: str  # "preset:<name>" or the file path
    argument: str  # what the user passed to --model (for `batchsweep plan --model`)
    path: str  # the file read
    overrides: list = field(default_factory=list)  # the --set overrides applied (overrides.ModelOverride)


def load_model(name_or_path: str, root: Optional[str] = None, overrides: Optional[list] = None) -> LoadedModel:
    """A preset name (configs/models/<name>.json; presets win, as in batchsweep) or a JSON file path, with the
    --set overrides (overrides.parse_model_override) applied to its document before it is parsed."""
    names = preset_names(root)
    if not name_or_path:
        raise ConfigError("(model)", "", f"an empty name is neither a preset nor a file (presets: {', '.join(names)})")
    if name_or_path in names:
        path, source = os.path.join(preset_dir(root), name_or_path + ".json"), f"preset:{name_or_path}"
    else:
        path = source = name_or_path
        if not os.path.exists(path):
            raise ConfigError(path, "", f"no such preset or file (presets: {', '.join(names)})")
        if os.path.isdir(path):
            raise ConfigError(path, "", "is a directory, expected a model config (JSON)")
    try:
        if os.path.getsize(path) > MAX_CONFIG_BYTES:
            raise ConfigError(source, "", f"larger than {MAX_CONFIG_BYTES >> 20} MiB: not a model config")
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise ConfigError(source, "", f"cannot read: {e.strerror or e}") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ConfigError(source, "", f"not valid JSON: {e}") from None
    return LoadedModel(resolve_overridden(doc, source, overrides), source, name_or_path, path,
                       list(overrides or []))


# ---------------------------------------------------------------------------------------------------------------
# The walk: shapes, parameters, FLOPs (src/plan/lower.cpp)
# ---------------------------------------------------------------------------------------------------------------

@dataclass
class Graph:
    name: str
    input_type: str
    input_shape: list  # per sample
    output_shape: list  # per sample
    parameters: int = 0
    forward_flops_per_sample: float = 0.0  # matmul/conv work only, multiply-add = 2
    # The input gradients no backend computes: of each op with parameters whose input has no gradient (the
    # first on each path from the data).
    skipped_input_grad_flops: float = 0.0
    tokens_per_sample: int = 0  # token inputs: sequence_length
    loss: str = "cross_entropy"
    loss_rows: int = 0  # cross_entropy: positions per sample; mse: output elements per sample
    loss_classes: int = 0  # cross_entropy only
    modules: list = field(default_factory=list)  # what the builder made, in order
    # The blocks --checkpointing recomputes, as indices into `modules`: each copy of a top-level
    # transformer_block or residual (batchsweep's Graph::blocks; Hugging Face checkpoints each decoder layer
    # the same way). The layers between them (embeddings, heads) keep their activations.
    blocks: list = field(default_factory=list)
    # Those of `blocks` that backward reaches, in forward order (batchsweep's recomputable_blocks, plan.cpp): a
    # block with an op that has parameters or an input gradient. One before every layer that learns (pools on
    # the data) has no gradient to compute: nothing recomputes it. --checkpoint-blocks N counts among these.
    recomputable_blocks: list = field(default_factory=list)

    @property
    def train_flops_per_sample(self) -> float:
        """batchsweep's Graph::train_flops_per_sample: 3x forward less the input gradients not computed."""
        return 3.0 * self.forward_flops_per_sample - self.skipped_input_grad_flops

    def flops_per_step(self, mode: str, batch: int, accumulation: int) -> float:
        """batchsweep's Plan::flops_per_step: training counts train_flops_per_sample and every micro-batch."""
        if mode == "train":
            return self.train_flops_per_sample * batch * accumulation
        return self.forward_flops_per_sample * batch


# A builder is called as builder(kind, **details) and returns what it made (e.g. a torch module); kinds and
# details are listed in Lowerer below. None means count only.
Builder = Optional[Callable[..., Any]]


def _shape_text(shape: list) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _numel(shape: list) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class _Lowerer:
    def __init__(self, config: dict, source: str, builder: Builder):
        self.config, self.source, self.builder = config, source, builder
        self.shape: list = []
        self.token_ids = False
        self.requires_grad = False  # whether the current value has a gradient (an op with parameters feeds it)
        self.ops = 0  # ops made so far

    def fail(self, path: str, message: str):
        raise ConfigError(self.source, path, message)

    def op(self, input_grad_flops: float = 0.0, learns: bool = False):
        """Called for each op batchsweep's lowering makes. Nothing before the first op with parameters on a path
        from the data requires grad, so that op's input gradient (for linear, conv2d and patch_embedding as many
        FLOPs as its forward) is never computed."""
        self.ops += 1
        if learns and not self.requires_grad:
            self.graph.skipped_input_grad_flops += input_grad_flops
        self.requires_grad = self.requires_grad or learns

    def make(self, kind: str, **details):
        return self.builder(kind, **details) if self.builder else None

    def run(self) -> Graph:
        cfg = self.config
        inp = cfg["input"]
        if inp["type"] == "vector":
            self.shape = [inp["features"]]
        elif inp["type"] == "image":
            self.shape = [inp["channels"], inp["height"], inp["width"]]
        else:
            self.shape = [inp["sequence_length"]]
            self.token_ids = True
        self.graph = Graph(cfg["name"], inp["type"], list(self.shape), [], loss=cfg["loss"])
        if inp["type"] == "tokens":
            self.graph.tokens_per_sample = inp["sequence_length"]
        self.check_elements(self.shape, "input")
        self.computes = False
        self.graph.modules = self.layers(cfg["layers"], "layers", 0)
        if self.token_ids:
            self.fail("layers", "token inputs need an `embedding` layer first")
        if not self.computes:
            self.fail("layers", "no layer computes anything (a model of only `flatten` has nothing to run)")
        self.graph.output_shape = list(self.shape)
        self.finish_loss()
        return self.graph

    def check_elements(self, shape: list, path: str):
        n = 1
        for d in shape:
            if d <= 0:
                self.fail(path, f"shape {_shape_text(shape)} has a non-positive dimension")
            n *= d
            if n > MAX_SAMPLE_ELEMENTS:
                self.fail(path, f"shape {_shape_text(shape)} has more than 2^36 elements per sample: sizes would "
                                "overflow")

    def set_shape(self, shape: list, path: str):
        self.check_elements(shape, path)
        self.shape = shape
        self.computes = True

    def add_params(self, count: int, path: str):
        self.graph.parameters += count
        if self.graph.parameters > MAX_PARAMETERS:
            self.fail(path, "more than 2^40 parameters: sizes would overflow")

    def require_not_ids(self, layer: dict, path: str):
        if self.token_ids:
            self.fail(path, f"`{layer['type']}` cannot take token ids: put an `embedding` layer first")

    def require_image(self, layer: dict, path: str):
        self.require_not_ids(layer, path)
        if len(self.shape) != 3:
            self.fail(path, f"`{layer['type']}` needs an image-shaped input [channels, height, width], got "
                            f"{_shape_text(self.shape)}")

    def require_tokens(self, layer: dict, path: str):
        self.require_not_ids(layer, path)
        if len(self.shape) != 2:
            self.fail(path, f"`{layer['type']}` needs a token sequence [tokens, dim], got {_shape_text(self.shape)}")

    def layers(self, layers: list, path: str, depth: int) -> list:
        made = []
        for i, layer in enumerate(layers):
            for _ in range(layer["repeat"]):  # independent copies
                block = depth == 0 and layer["type"] in CHECKPOINTED_LAYERS
                if block:
                    self.graph.blocks.append(len(made))
                made.append(self.layer(layer, f"{path}[{i}]", depth))
                # Backward reaches the block where its output has a gradient: an op in it has parameters, or its
                # input had a gradient already (batchsweep: some op in it has an input gradient or parameters).
                if block and self.requires_grad:
                    self.graph.recomputable_blocks.append(len(made) - 1)
        return made

    def linear(self, layer: dict, path: str, out_features: int, bias: bool, activation: str):
        self.require_not_ids(layer, path)
        in_features = self.shape[-1]
        rows = _numel(self.shape) // in_features
        self.set_shape(self.shape[:-1] + [out_features], path)
        self.add_params(in_features * out_features + (out_features if bias else 0), path)
        self.graph.forward_flops_per_sample += 2.0 * rows * in_features * out_features
        self.op(2.0 * rows * in_features * out_features, learns=True)
        return self.make("linear", in_features=in_features, out_features=out_features, bias=bias,
                         activation=activation)

    def layernorm(self, layer: dict, path: str):
        self.require_not_ids(layer, path)
        dim = self.shape[-1]
        self.set_shape(list(self.shape), path)
        self.add_params(2 * dim, path)
        self.op(learns=True)
        return self.make("layernorm", dim=dim)

    def batchnorm(self, layer: dict, path: str):
        """Per channel of an image [C, H, W] (BatchNorm2d) or per feature of a vector [F] (BatchNorm1d)."""
        if self.token_ids:
            self.fail(path, "`batchnorm` normalizes an image or a vector, not token ids (a token sequence "
                            "normalizes with `layernorm`)")
        if len(self.shape) not in (1, 3):
            self.fail(path, f"`batchnorm` needs an image [C, H, W] or a vector [F], got {_shape_text(self.shape)} "
                            "(a token sequence normalizes with `layernorm`)")
        channels = self.shape[0]
        if channels > 2**31 - 1:
            self.fail(path, f"`batchnorm` over {channels} channels: at most 2^31 - 1")
        self.set_shape(list(self.shape), path)
        self.add_params(2 * channels, path)
        self.op(learns=True)
        return self.make("batchnorm", channels=channels, image=len(self.shape) == 3, activation=layer["activation"])

    def attention(self, layer: dict, path: str, layer_path: Optional[str] = None):
        """layer_path: the config path of the layer whose heads these are (a transformer_block's, for errors
        named as batchsweep names them: `layers[1].heads`); `path` by default."""
        self.require_tokens(layer, path)
        seq, dim = self.shape
        if dim % layer["heads"] != 0:
            self.fail(f"{layer_path or path}.heads", f"{layer['heads']} does not divide dim {dim}")
        qkv = self.linear(layer, path, 3 * dim, True, "none")
        self.set_shape([seq, dim], path)
        # q k^T and p v: 2 * T * T * D each, counted in full also when causal.
        self.graph.forward_flops_per_sample += 4.0 * seq * seq * dim
        out = self.linear(layer, path, dim, True, "none")
        return self.make("attention", dim=dim, heads=layer["heads"], causal=layer["causal"], qkv=qkv, out=out)

    def conv_like(self, layer: dict, path: str, kind: str, k: int, stride: int, pad: int):
        self.require_image(layer, path)
        c, h, w = self.shape
        if kind != "conv2d" and 2 * pad > k:
            self.fail(f"{path}.padding", f"{pad} is more than half the kernel size {k} (PyTorch's limit for pooling)")
        if h + 2 * pad < k or w + 2 * pad < k:
            padded = f" padded by {pad}" if pad else ""
            self.fail(f"{path}.kernel_size", f"kernel {k} is larger than the {h}x{w} input{padded}")
        hout, wout = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        cout = layer["out_channels"] if kind == "conv2d" else c
        self.set_shape([cout, hout, wout], path)
        if kind != "conv2d":
            self.op()
            return self.make(kind, kernel_size=k, stride=stride, padding=pad)
        self.add_params(cout * c * k * k + (cout if layer["bias"] else 0), path)
        self.graph.forward_flops_per_sample += 2.0 * cout * (c * k * k) * (hout * wout)
        self.op(2.0 * cout * (c * k * k) * (hout * wout), learns=True)
        return self.make("conv2d", in_channels=c, out_channels=cout, kernel_size=k, stride=stride, padding=pad,
                         bias=layer["bias"], activation=layer["activation"])

    def layer(self, layer: dict, path: str, depth: int):
        kind = layer["type"]
        if kind == "linear":
            return self.linear(layer, path, layer["out_features"], layer["bias"], layer["activation"])
        if kind == "conv2d":
            return self.conv_like(layer, path, kind, layer["kernel_size"], layer["stride"], layer["padding"])
        if kind in ("maxpool2d", "avgpool2d"):
            return self.conv_like(layer, path, kind, layer["kernel_size"], layer["stride"], layer.get("padding", 0))
        if kind == "global_avgpool":
            self.require_not_ids(layer, path)
            self.op()
            if len(self.shape) == 3:
                self.set_shape([self.shape[0]], path)
                return self.make("global_avgpool", tokens_layout=False)
            if len(self.shape) == 2:
                self.set_shape([self.shape[1]], path)
                return self.make("global_avgpool", tokens_layout=True)
            self.fail(path, f"`global_avgpool` needs an image [C, H, W] or tokens [T, D], got "
                            f"{_shape_text(self.shape)}")
        if kind == "flatten":
            self.require_not_ids(layer, path)
            self.shape = [_numel(self.shape)]  # a view: computes nothing
            return self.make("flatten")
        if kind == "layernorm":
            return self.layernorm(layer, path)
        if kind == "batchnorm":
            return self.batchnorm(layer, path)
        if kind == "embedding":
            if not self.token_ids:
                self.fail(path, f"`embedding` needs token ids (input type \"tokens\"), got {_shape_text(self.shape)}")
            self.token_ids = False
            seq, vocab, dim = self.shape[0], self.config["input"]["vocab_size"], layer["dim"]
            self.set_shape([seq, dim], path)
            self.add_params(vocab * dim + seq * dim, path)  # token table + learned positions
            self.op(learns=True)
            return self.make("embedding", vocab_size=vocab, sequence_length=seq, dim=dim)
        if kind == "patch_embedding":
            self.require_image(layer, path)
            p, dim = layer["patch_size"], layer["dim"]
            c, h, w = self.shape
            if h % p != 0 or w % p != 0:
                self.fail(f"{path}.patch_size", f"{p} does not divide the {h}x{w} image")
            n = (h // p) * (w // p)
            self.set_shape([n, dim], path)
            self.add_params(dim * c * p * p + dim + n * dim, path)  # conv k=p stride=p, bias, positions
            self.graph.forward_flops_per_sample += 2.0 * dim * (c * p * p) * n
            self.op(2.0 * dim * (c * p * p) * n, learns=True)
            return self.make("patch_embedding", in_channels=c, dim=dim, patch_size=p, patches=n)
        if kind == "attention":
            return self.attention(layer, path)
        if kind == "transformer_block":
            self.require_tokens(layer, path)
            dim = self.shape[1]
            ln1 = self.layernorm(layer, f"{path}.ln1")
            attn = self.attention(layer, f"{path}.attn", path)
            ln2 = self.layernorm(layer, f"{path}.ln2")
            fc = self.linear(layer, f"{path}.mlp.fc", layer["mlp_ratio"] * dim, True, "gelu")
            proj = self.linear(layer, f"{path}.mlp.proj", dim, True, "none")
            return self.make("transformer_block", ln1=ln1, attn=attn, ln2=ln2, fc=fc, proj=proj)
        if kind == "residual":
            self.require_not_ids(layer, path)
            if depth >= MAX_RESIDUAL_DEPTH:
                self.fail(path, "residual nesting too deep (more than 32 levels)")
            before, input_grad = list(self.shape), self.requires_grad
            self.ops += 1  # batchsweep's save and add are ops: a residual in a shortcut computes something
            shortcut, other, other_grad = None, before, input_grad
            if layer.get("shortcut"):  # lowered first, from the input, as batchsweep does
                ops = self.ops
                shortcut = self.layers(layer["shortcut"], f"{path}.shortcut", depth + 1)
                if self.ops == ops:
                    self.fail(f"{path}.shortcut", "the shortcut computes nothing (a `flatten` alone is no "
                                                  "projection): leave `shortcut` out for the identity")
                other, other_grad = list(self.shape), self.requires_grad
                self.shape, self.requires_grad = list(before), input_grad
            inner = self.layers(layer["layers"], f"{path}.layers", depth + 1)
            if shortcut is not None and self.shape != other:
                self.fail(path, f"residual: the shortcut makes {_shape_text(other)} and the inner layers "
                                f"{_shape_text(self.shape)}; they must match to be added (in torchvision's blocks the "
                                "shortcut's 1x1 conv has the block's stride and out_channels, and the inner 3x3 "
                                "conv padding 1)")
            if shortcut is None and self.shape != before:
                self.fail(path, f"residual: inner layers change the shape from {_shape_text(before)} to "
                                f"{_shape_text(self.shape)}; they must keep it so the input can be added, or the "
                                f"residual needs a `shortcut` that projects its input to {_shape_text(self.shape)} "
                                "(a 1x1 conv with the inner layers' stride, then a batchnorm, as torchvision's "
                                "downsample)")
            self.requires_grad = self.requires_grad or other_grad
            self.computes = True
            return self.make("residual", inner=inner, activation=layer.get("activation", "none"), shortcut=shortcut)
        raise AssertionError(f"unhandled layer type {kind}")

    def finish_loss(self):
        out, g = self.shape, self.graph
        if g.loss == "cross_entropy":
            if len(out) == 1:
                g.loss_rows, g.loss_classes = 1, out[0]
            elif len(out) == 2:
                g.loss_rows, g.loss_classes = out[0], out[1]
            else:
                self.fail("loss", f"cross_entropy needs a [classes] or [tokens, classes] output, got "
                                  f"{_shape_text(out)} (add `global_avgpool` or `flatten` and a `linear`)")
            if g.loss_classes < 2:
                self.fail("loss", f"cross_entropy needs at least 2 classes, the output has {g.loss_classes}")
            if g.loss_classes > 2147483647:
                self.fail("loss", "cross_entropy: too many classes for 32-bit labels")
        else:
            g.loss_rows, g.loss_classes = _numel(out), 0


def lower(config: dict, source: str, builder: Builder = None) -> Graph:
    """Walks a resolved config: per-sample shapes, parameter count and forward FLOPs by batchsweep's
    conventions; with a builder, also what it makes for every layer (repeats expanded, in order)."""
    return _Lowerer(config, source, builder).run()
