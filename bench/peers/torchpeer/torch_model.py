"""The batchsweep model as a torch.nn.Module: the layers, shapes and parameters that src/plan/lower.cpp counts,
built by the same walk (config.lower with a builder), so the module and the counts cannot disagree.

Conventions (README "Conventions", lower.cpp): linear acts on the last dim; GELU is the tanh approximation;
layernorm has eps 1e-5 over the last dim; batchnorm is BatchNorm2d (image) or BatchNorm1d (vector), eps 1e-5,
momentum 0.1, then its activation; embedding = token table + learned positions; patch_embedding = conv
k=p stride=p with bias + learned positions, no class token; attention = one qkv Linear(dim, 3 dim) with bias,
scaled_dot_product_attention, an out Linear, no residual; transformer_block is pre-LN with residual adds;
repeat makes independent copies. With checkpointing (training), each top-level transformer_block or residual
copy runs under torch.utils.checkpoint, as batchsweep run --checkpointing recomputes it; with checkpoint_blocks N
only the first N that backward reaches do (batchsweep run --checkpoint-blocks N)."""

import contextlib
import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .config import Graph, lower


def _activation(name: str):
    if name == "none":
        return None
    if name == "relu":
        return F.relu
    if name == "gelu":
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "silu":
        return F.silu
    if name == "tanh":
        return torch.tanh
    raise ValueError(f"unknown activation {name!r}")


def _init_normal(*tensors):
    """N(0, 0.02) as GPT-2 and ViT initialise embeddings; nothing to do on the meta device."""
    for t in tensors:
        if t.device.type != "meta":
            nn.init.normal_(t, std=0.02)


class _ActivationAfter:
    """Mixed in ahead of a torch layer class: the layer's forward, then the config's activation."""

    def _set_activation(self, activation: str):
        self.activation_name = activation
        self._act = _activation(activation)

    def forward(self, x):
        y = super().forward(x)
        return self._act(y) if self._act else y


class LinearAct(_ActivationAfter, nn.Linear):
    def __init__(self, in_features: int, out_features: int, bias: bool, activation: str):
        super().__init__(in_features, out_features, bias=bias)
        self._set_activation(activation)


class Conv2dAct(_ActivationAfter, nn.Conv2d):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, bias, activation):
        super().__init__(in_channels, out_channels, kernel_size, stride=stride, padding=padding, bias=bias)
        self._set_activation(activation)


class BatchNorm2dAct(_ActivationAfter, nn.BatchNorm2d):
    def __init__(self, channels: int, activation: str):
        super().__init__(channels, eps=1e-5, momentum=0.1)
        self._set_activation(activation)


class BatchNorm1dAct(_ActivationAfter, nn.BatchNorm1d):
    def __init__(self, features: int, activation: str):
        super().__init__(features, eps=1e-5, momentum=0.1)
        self._set_activation(activation)


class GlobalAvgPool(nn.Module):
    """Mean over H x W of an image [B, C, H, W], or over the tokens of [B, T, D]."""

    def __init__(self, tokens_layout: bool):
        super().__init__()
        self.tokens_layout = tokens_layout

    def forward(self, x):
        return x.mean(dim=1) if self.tokens_layout else x.mean(dim=(2, 3))


class Flatten(nn.Module):
    def forward(self, x):
        return x.flatten(1)


class TokenEmbedding(nn.Module):
    """Token table [vocab, dim] plus learned positions [sequence_length, dim]."""

    def __init__(self, vocab_size: int, sequence_length: int, dim: int):
        super().__init__()
        # _weight skips nn.Embedding's own initialisation, which on the meta device (parameter counting) would
        # load torch's reference kernels and take seconds.
        self.tokens = nn.Embedding(vocab_size, dim, _weight=torch.empty(vocab_size, dim))
        self.positions = nn.Parameter(torch.empty(sequence_length, dim))
        _init_normal(self.tokens.weight, self.positions)

    def forward(self, ids):
        return self.tokens(ids) + self.positions


class PatchEmbedding(nn.Module):
    """Conv k=p stride=p with bias, flattened to [B, patches, dim], plus learned positions; no class token."""

    def __init__(self, in_channels: int, dim: int, patch_size: int, patches: int):
        super().__init__()
        self.proj = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size, bias=True)
        self.positions = nn.Parameter(torch.empty(patches, dim))
        _init_normal(self.positions)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2) + self.positions


class SelfAttention(nn.Module):
    """qkv projection, multi-head scaled_dot_product_attention (is_causal), out projection; no residual."""

    def __init__(self, dim: int, heads: int, causal: bool, qkv: nn.Module, out: nn.Module):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv, self.out = qkv, out

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class TransformerBlock(nn.Module):
    """Pre-LN: x + attn(ln1(x)), then x + proj(gelu_tanh(fc(ln2(x))))."""

    def __init__(self, ln1, attn, ln2, fc, proj):
        super().__init__()
        self.ln1, self.attn, self.ln2, self.fc, self.proj = ln1, attn, ln2, fc, proj

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(self.fc(self.ln2(x)))


class Residual(nn.Module):
    """inner(x) + identity, then the activation, where identity is x or shortcut(x) (torchvision's BasicBlock:
    identity = downsample(x); out += identity; out = relu(out))."""

    def __init__(self, inner: list, activation: str = "none", shortcut: list = None):
        super().__init__()
        self.inner = nn.Sequential(*inner)
        self.shortcut = nn.Sequential(*shortcut) if shortcut else None
        self.activation_name = activation
        self._act = _activation(activation)

    def forward(self, x):
        identity = self.shortcut(x) if self.shortcut is not None else x  # first, as batchsweep runs it
        y = self.inner(x) + identity
        return self._act(y) if self._act else y


def _build(kind: str, **d) -> nn.Module:
    if kind == "linear":
        return LinearAct(d["in_features"], d["out_features"], d["bias"], d["activation"])
    if kind == "conv2d":
        return Conv2dAct(d["in_channels"], d["out_channels"], d["kernel_size"], d["stride"], d["padding"],
                         d["bias"], d["activation"])
    if kind == "maxpool2d":
        return nn.MaxPool2d(d["kernel_size"], stride=d["stride"], padding=d["padding"])
    if kind == "avgpool2d":
        return nn.AvgPool2d(d["kernel_size"], stride=d["stride"], padding=d["padding"])  # count_include_pad
    if kind == "global_avgpool":
        return GlobalAvgPool(d["tokens_layout"])
    if kind == "flatten":
        return Flatten()
    if kind == "layernorm":
        return nn.LayerNorm(d["dim"], eps=1e-5)
    if kind == "batchnorm":
        cls = BatchNorm2dAct if d["image"] else BatchNorm1dAct
        return cls(d["channels"], d["activation"])
    if kind == "embedding":
        return TokenEmbedding(d["vocab_size"], d["sequence_length"], d["dim"])
    if kind == "patch_embedding":
        return PatchEmbedding(d["in_channels"], d["dim"], d["patch_size"], d["patches"])
    if kind == "attention":
        return SelfAttention(d["dim"], d["heads"], d["causal"], d["qkv"], d["out"])
    if kind == "transformer_block":
        return TransformerBlock(d["ln1"], d["attn"], d["ln2"], d["fc"], d["proj"])
    if kind == "residual":
        return Residual(d["inner"], d["activation"], d.get("shortcut"))
    raise ValueError(f"unknown layer kind {kind!r}")


@contextlib.contextmanager
def _running_stats_kept(norms: list):
    """Puts the batchnorm buffers (running mean and variance, num_batches_tracked) back as they were when the
    recomputation began. batchsweep updates the running statistics once per forward; torch.utils.checkpoint
    re-runs the block's forward in train mode, which would apply the momentum a second time and count the batch
    twice. The recomputation must run the same ops as the forward, so the update is undone rather than
    avoided: with track_running_stats off BatchNorm calls the no-stats kernel, which saves fewer tensors, and
    checkpoint refuses that ("A different number of tensors was saved"); momentum 0 would still count
    num_batches_tracked."""
    saved = [(buffer, buffer.clone()) for m in norms for buffer in m.buffers()]
    try:
        yield
    finally:  # also when checkpoint stops the recomputation early, once it has what backward needs
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)


def _recompute_contexts(norms: list):
    """checkpoint's context_fn: nothing around the forward, the batchnorm buffers kept around the recompute."""
    return contextlib.nullcontext(), _running_stats_kept(norms)


def checkpointed_blocks(graph: Graph, checkpoint_blocks=None) -> list:
    """The blocks (indices into the stack) that run under torch.utils.checkpoint with checkpointing on, as
    batchsweep's checkpointed_blocks (plan.cpp): every one of graph.blocks, or with `checkpoint_blocks` N all but
    the recomputable ones past the first N (Megatron's --recompute-method block --recompute-num-layers N). A block
    backward does not reach stays wrapped, as with plain checkpointing: nothing recomputes it either way."""
    if checkpoint_blocks is None:
        return list(graph.blocks)
    kept = set(graph.recomputable_blocks[checkpoint_blocks:])  # these keep every activation
    return [i for i in graph.blocks if i not in kept]


class PeerModel(nn.Sequential):
    """The whole stack; `graph` holds the counts of the walk that built it. With `checkpointing`, each of
    graph.blocks runs in training under torch.utils.checkpoint(use_reentrant=False): it keeps only its input (the
    output before it) and backward runs its forward again (Hugging Face's gradient_checkpointing per decoder layer).
    `checkpoint_blocks` N (with checkpointing) limits that to the first N blocks backward reaches
    (checkpointed_blocks); the later ones run as without checkpointing."""

    def __init__(self, graph: Graph, checkpointing: bool = False, checkpoint_blocks=None):
        super().__init__(*graph.modules)
        self.graph = graph
        self.checkpointing = checkpointing
        self.checkpoint_blocks = checkpoint_blocks
        # Per checkpointed block (index into the stack), its batchnorm layers: their buffers are kept across the
        # recompute.
        self._block_norms = {i: [m for m in self[i].modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
                             for i in checkpointed_blocks(graph, checkpoint_blocks)}

    def forward(self, x):
        if not (self.checkpointing and self.training):  # as Hugging Face's: inference keeps nothing to recompute
            return super().forward(x)
        for i, layer in enumerate(self):
            if i not in self._block_norms:
                x = layer(x)
            elif self._block_norms[i] and not torch.compiler.is_compiling():
                x = checkpoint(layer, x, use_reentrant=False,
                               context_fn=functools.partial(_recompute_contexts, self._block_norms[i]))
            else:
                # Under torch.compile, AOT autograd makes the buffer update an output of the forward graph, so a
                # recompute in backward never writes the buffers: nothing to put back. And dynamo refuses this
                # context_fn (torch 2.15: "checkpoint not implemented for ... context_fn").
                x = checkpoint(layer, x, use_reentrant=False)
        return x


def build_model(config: dict, source: str, checkpointing: bool = False, checkpoint_blocks=None) -> PeerModel:
    """The module for a resolved config, parameters in fp32 on the CPU (the caller moves it); `checkpointing`
    recomputes its blocks in training, `checkpoint_blocks` N only the first N backward reaches (PeerModel)."""
    graph = lower(config, source, builder=_build)
    return PeerModel(graph, checkpointing, checkpoint_blocks)


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def loss_fn(output, target, graph: Graph):
    """Mean cross entropy per sample ([B, C]) or per token ([B, T, C]), or mean squared error."""
    if graph.loss == "cross_entropy":
        return F.cross_entropy(output.reshape(-1, graph.loss_classes).float(), target.reshape(-1))
    return F.mse_loss(output.float(), target)
