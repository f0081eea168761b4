"""The REIGN encoder in PyTorch (REFERENCE-IMPLEMENTATION.md section 3).

Module names reproduce the reference state-dict keys, so `state_dict()` is the checkpoint as
stages/reign and ops/oracles/reign_reference.py read it: embeddings.LayerNorm.*,
embeddings.gn_projection.*, encoder.layer.N.attention.self.{query,key,value}.*, ...,
pooler.dense.*. Linear weights are [out, in] as torch stores them.

Dropout (p=0.1) sits where Hugging Face's BertLayer has it (attention probabilities and both
residual branches) and on the projected input sequence; it is active only in train() mode, so
eval() gives exactly the maths the Go stage runs.
"""
import json
import math
import os
import shutil
import tempfile

import torch
from torch import nn
from torch.nn import functional as F

SIZES = {  # layers, hidden, heads, ffn, the GN dim the paper's parameter count assumes
    "tiny-l1": (1, 192, 3, 768, 384),
    "small-l2": (2, 384, 6, 1536, 384),
    "base-l3": (3, 768, 12, 3072, 768),
    "large-l4": (4, 1024, 16, 4096, 1024),
}

LAYER_NORM_EPS = 1e-12
DROPOUT = 0.1


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, x, additive_mask):
        b, n, _ = x.shape

        def split(t):
            return t.view(b, n, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim) + additive_mask
        probs = self.dropout(scores.softmax(-1))
        return (probs @ v).transpose(1, 2).reshape(b, n, self.heads * self.head_dim)


class DenseResidualNorm(nn.Module):
    """dense -> dropout -> LayerNorm(residual + .): BertSelfOutput and BertOutput."""

    def __init__(self, inp, hidden):
        super().__init__()
        self.dense = nn.Linear(inp, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=LAYER_NORM_EPS)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, h, residual):
        return self.LayerNorm(residual + self.dropout(self.dense(h)))


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.self = SelfAttention(hidden, heads)
        self.output = DenseResidualNorm(hidden, hidden)

    def forward(self, x, additive_mask):
        return self.output(self.self(x, additive_mask), x)


class Intermediate(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.dense = nn.Linear(hidden, ffn)

    def forward(self, x):
        # Exact erf GELU: the tanh approximation would drift from the Go stage's graph.
        return F.gelu(self.dense(x), approximate="none")


class Layer(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.attention = Attention(hidden, heads)
        self.intermediate = Intermediate(hidden, ffn)
        self.output = DenseResidualNorm(ffn, hidden)

    def forward(self, x, additive_mask):
        x = self.attention(x, additive_mask)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, layers, hidden, heads, ffn):
        super().__init__()
        self.layer = nn.ModuleList(Layer(hidden, heads, ffn) for _ in range(layers))


class Embeddings(nn.Module):
    def __init__(self, gn_dim, hidden):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(gn_dim, eps=LAYER_NORM_EPS)
        # Present even when gn_dim == hidden: the reference always has it.
        self.gn_projection = nn.Linear(gn_dim, hidden)
        self.dropout = nn.Dropout(DROPOUT)

    def forward(self, chunks):
        return self.dropout(self.gn_projection(self.LayerNorm(chunks)))


class Pooler(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)


class REIGN(nn.Module):
    """chunks [B, N, gn_dim] float, mask [B, N] (1 = real chunk, 0 = padding) -> [B, hidden],
    L2-normalised."""

    def __init__(self, size, gn_dim):
        super().__init__()
        if size not in SIZES:
            raise ValueError(f"size {size!r}: want one of {', '.join(SIZES)}")
        if gn_dim <= 0:
            raise ValueError(f"gn_dim {gn_dim}: must be positive")
        layers, hidden, heads, ffn, _ = SIZES[size]
        self.size, self.gn_dim = size, gn_dim
        self.layers, self.hidden, self.heads, self.ffn = layers, hidden, heads, ffn
        self.embeddings = Embeddings(gn_dim, hidden)
        self.encoder = Encoder(layers, hidden, heads, ffn)
        self.pooler = Pooler(hidden)
        self.apply(_init_weights)

    def forward(self, chunks, mask):
        mask = mask.to(chunks.dtype)
        # Hugging Face's extended attention mask: padding keys get the dtype's minimum added
        # to their scores, so softmax gives them exactly zero weight.
        additive = ((1.0 - mask) * torch.finfo(chunks.dtype).min)[:, None, None, :]
        x = self.embeddings(chunks)
        for layer in self.encoder.layer:
            x = layer(x, additive)
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return F.normalize(torch.tanh(self.pooler.dense(pooled)), dim=-1, eps=1e-12)

    def config(self, k, s):
        return {
            "architectures": ["REIGNModel"],
            "model_type": "reign",
            "num_hidden_layers": self.layers,
            "hidden_size": self.hidden,
            "num_attention_heads": self.heads,
            "intermediate_size": self.ffn,
            "hidden_act": "gelu",
            "layer_norm_eps": LAYER_NORM_EPS,
            "hidden_dropout_prob": DROPOUT,
            "attention_probs_dropout_prob": DROPOUT,
            "gn_projection_dim": self.gn_dim,
            "position_embedding_type": "none",
            "max_position_embeddings": 0,
            "gn_chunk_size": k,
            "gn_stride": s,
            "use_special_tokens": False,
            "torch_dtype": "float32",
        }


def _init_weights(m):
    # BERT's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm.
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, mean=0.0, std=0.02)
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())


def save_checkpoint(model, dest, k, s, manifest):
    """Writes dest/{config.json, model.safetensors, reignpipe-manifest.json} through a sibling
    temp directory, so dest is either the previous checkpoint or the new one, never a mix."""
    from safetensors.torch import save_file

    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="." + os.path.basename(dest) + ".tmp-", dir=parent)
    try:
        tensors = {n: t.detach().to("cpu", torch.float32).contiguous() for n, t in model.state_dict().items()}
        save_file(tensors, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        for name, obj in (("config.json", model.config(k, s)), ("reignpipe-manifest.json", manifest)):
            with open(os.path.join(tmp, name), "w") as f:
                json.dump(obj, f, indent=2)
                f.write("\n")
        old = None
        if os.path.exists(dest):
            old = dest + ".old"
            shutil.rmtree(old, ignore_errors=True)
            os.rename(dest, old)
        os.rename(tmp, dest)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
