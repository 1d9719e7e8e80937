# PyTorch side of Tessera's GPU training-step benchmark for Llama. Times Llama training steps in PyTorch on
# CUDA, beside `tessera bench train --model llama...`; the step, precisions, timing and the common JSON fields
# are bench/torch_bench_harness.py's (one step = (forward + cross-entropy (mean over B*T tokens) + backward)
# x --grad-accum, then clip_grad_norm_(1.0), AdamW and zero_grad; medians of CUDA-event step times).
# The model is Tessera's Llama (src/nn/model_presets.cpp, the math of tests/reference/torch_llama.py): RMSNorm
# (eps 1e-5), RoPE (rotate_half, theta per preset, Llama 3.1's frequency scaling on the 3.x presets),
# grouped-query attention, SwiGLU MLP, no biases, tied or untied embeddings per preset. As in Tessera, q/k/v
# are one packed projection [q | k | v] and gate/up one [gate | up]; the embedding (and an untied lm_head)
# hold the vocabulary padded to a multiple of 128 rows, whose padded rows start at 0 and never enter the loss.
# FLOPs per token and the parameter count follow `tessera bench train` exactly (6N + 6LCT, N = every
# parameter, padded rows included, a tied table once), so MFU figures compare.
# Not mirrored: under autocast the residual stream and the norms stay fp32 (Tessera keeps activations in
# the compute dtype), and the logits (B, T, Vp) exist whole (Tessera's classifier runs in row chunks).
# On the GPU machine (from the repository root):
#   python3 bench/torch_llama_cuda.py --preset llama3.2-1b --batch 4 --seq-len 2048 --dtype bf16 --json
# CPU smoke test only: /usr/bin/python3 bench/torch_llama_cuda.py --device cpu --preset llama-tiny \
#   --compile off --dtype fp32 --steps 2 --warmup 1 --json
import argparse
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_bench_harness as harness

RMS_NORM_EPS = 1e-5
# Llama 3.1's rope_scaling (rope_type "llama3") besides its factor, as Tessera's presets set them.
ROPE_LOW_FREQ_FACTOR, ROPE_HIGH_FREQ_FACTOR, ROPE_ORIGINAL_MAX_POSITIONS = 1.0, 4.0, 8192
DEFAULT_SEQ_LEN = 1024  # `tessera bench train`'s; a preset with a shorter context uses its context


@dataclass(frozen=True)
class LlamaShape:
    layers: int        # L
    heads: int         # NH
    kv_heads: int      # NKV, dividing NH
    channels: int      # C = NH * HS
    mlp_hidden: int    # SwiGLU width F
    vocab: int         # V
    context: int       # the longest sequence the preset takes
    rope_theta: float
    tied: bool         # the head reuses the token embedding
    rope_factor: float = 0.0  # Llama 3.1 frequency scaling factor; 0 = none


# Tessera's presets of the same names (src/nn/model_presets.cpp).
PRESETS = {
    "llama-tiny": LlamaShape(2, 4, 2, 32, 64, 256, 64, 10000.0, tied=False),
    "llama-mini": LlamaShape(4, 6, 2, 192, 512, 50257, 256, 10000.0, tied=True),
    "llama3.2-1b": LlamaShape(16, 32, 8, 2048, 8192, 128256, 131072, 5e5, tied=True, rope_factor=32.0),
    "llama3.2-3b": LlamaShape(28, 24, 8, 3072, 8192, 128256, 131072, 5e5, tied=True, rope_factor=32.0),
    "llama3.1-8b": LlamaShape(32, 32, 8, 4096, 14336, 128256, 131072, 5e5, tied=False, rope_factor=8.0),
}


def rope_inv_freq(head_size, theta, factor):
    """inv_freq (HS/2) as Tessera's ops/rope.cpp computes it: theta^(-2i/HS) in float64, then with
    factor > 0 Llama 3.1's scaling (wavelengths above original/low_freq_factor divided by factor, below
    original/high_freq_factor kept, in between, ends included, blended), rounded once to float32."""
    inv_freq = theta ** (-torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)
    if factor > 0:
        low, high, original = ROPE_LOW_FREQ_FACTOR, ROPE_HIGH_FREQ_FACTOR, ROPE_ORIGINAL_MAX_POSITIONS
        wavelen = 2 * math.pi / inv_freq
        smooth = (original / wavelen - low) / (high - low)
        blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        inv_freq = torch.where(wavelen > original / low, inv_freq / factor,
                               torch.where(wavelen < original / high, inv_freq, blended))
    return inv_freq.float()


def rope_cos_sin(inv_freq, T):
    """cos, sin (T, HS) float32 of the angles p * inv_freq[i] (taken in float64, as Tessera's tables are) for
    positions p < T, the HS/2 frequencies repeated for each half of a head."""
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq.double())
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """x (B, H, T, HS) rotated in fp32 (Tessera's kernels rotate 16-bit heads in fp32 too), back in x's dtype:
    for i < HS/2, x'[i] = x[i] cos - x[i+HS/2] sin and x'[i+HS/2] = x[i+HS/2] cos + x[i] sin."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


def grouped_query_attention(q, k, v, native_gqa):
    """q (B, NH, T, HS), k and v (B, NKV, T, HS): causal attention where query head h reads kv head
    h // (NH/NKV). native_gqa: SDPA's enable_gqa; otherwise K/V are repeated to NH heads, which every SDPA
    backend (and the masked-softmax fallback) takes."""
    if native_gqa:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    group = q.size(1) // k.size(1)
    return harness.causal_attention(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))


class RMSNorm(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_NORM_EPS) * self.weight


class Attention(nn.Module):
    def __init__(self, s, native_gqa):
        super().__init__()
        self.heads, self.kv_heads, self.native_gqa = s.heads, s.kv_heads, native_gqa
        HS = s.channels // s.heads
        self.qkv_proj = nn.Linear(s.channels, (s.heads + 2 * s.kv_heads) * HS, bias=False)  # [q | k | v]
        self.o_proj = nn.Linear(s.channels, s.channels, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        NH, NKV, HS = self.heads, self.kv_heads, C // self.heads
        q, k, v = self.qkv_proj(x).split([NH * HS, NKV * HS, NKV * HS], dim=-1)
        q = apply_rope(q.view(B, T, NH, HS).transpose(1, 2), cos, sin)         # (B,NH,T,HS)
        k = apply_rope(k.view(B, T, NKV, HS).transpose(1, 2), cos, sin)        # (B,NKV,T,HS)
        v = v.view(B, T, NKV, HS).transpose(1, 2)
        y = grouped_query_attention(q, k, v, self.native_gqa)                   # (B,NH,T,HS)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, C, hidden):
        super().__init__()
        self.gate_up_proj = nn.Linear(C, 2 * hidden, bias=False)  # [gate | up]
        self.down_proj = nn.Linear(hidden, C, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, s, native_gqa):
        super().__init__()
        self.input_layernorm = RMSNorm(s.channels)
        self.self_attn = Attention(s, native_gqa)
        self.post_attention_layernorm = RMSNorm(s.channels)
        self.mlp = SwiGLU(s.channels, s.mlp_hidden)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, s, Vp, T, native_gqa):
        super().__init__()
        self.vocab = s.vocab
        self.embed_tokens = nn.Embedding(Vp, s.channels)                          # (Vp,C)
        self.layers = nn.ModuleList([DecoderLayer(s, native_gqa) for _ in range(s.layers)])
        self.norm = RMSNorm(s.channels)
        self.lm_head = None if s.tied else nn.Linear(s.channels, Vp, bias=False)  # (Vp,C)
        # Built for this run's T on the CPU in float64 before rounding; buffers, so .to(device) moves them.
        cos, sin = rope_cos_sin(rope_inv_freq(s.channels // s.heads, s.rope_theta, s.rope_factor), T)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx, targets):
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        # Logits over the whole padded table (N = Vp, a multiple of 128), then the cross-entropy over
        # logits[..., :V] (slice, not mask), so the padded columns get neither probability nor gradient, as in
        # Tessera. Under autocast the cross-entropy runs in fp32.
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(self.norm(x), head)                                     # (B,T,Vp)
        V = self.vocab
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def init_weights(model, L, V):
    """Tessera's initial distributions: weights normal(0, 0.02), the residual projections (o_proj,
    down_proj) 0.02/sqrt(2L), RMSNorm gains keep their 1; padded vocabulary rows of the embedding and of an
    untied head 0."""
    std_resid = 0.02 / math.sqrt(2 * L)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std_resid if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02)
        for table in (model.embed_tokens, model.lm_head):
            if table is not None:
                table.weight[V:].zero_()


def parse_args():
    p = argparse.ArgumentParser(description="Time Llama training steps in PyTorch on CUDA.")
    p.add_argument("--preset", choices=sorted(PRESETS), default="llama3.2-1b")
    for flag in ("--layers", "--heads", "--channels", "--vocab"):
        p.add_argument(flag, type=int, default=None, help="overrides the preset (kv heads and MLP width stay)")
    p.add_argument("--seq-len", type=int, default=None,
                   help=f"tokens per sequence (default {DEFAULT_SEQ_LEN}, or the preset's context if shorter)")
    p.add_argument("--gqa", choices=("repeat", "native"), default="repeat",
                   help="repeat: K/V copied to every query head before SDPA (any SDPA backend, any dtype); "
                        "native: SDPA's enable_gqa (torch >= 2.5; fused only by flash attention, 16-bit)")
    harness.add_run_options(p, default_batch=8)
    return p.parse_args()


def shape_of(args):
    """The preset with the command line's overrides, and T; exits on a shape Tessera would refuse."""
    s = PRESETS[args.preset]
    s = LlamaShape(args.layers or s.layers, args.heads or s.heads, s.kv_heads, args.channels or s.channels,
                   s.mlp_hidden, args.vocab or s.vocab, s.context, s.rope_theta, s.tied, s.rope_factor)
    T = args.seq_len or min(DEFAULT_SEQ_LEN, s.context)
    if s.channels % s.heads or (s.channels // s.heads) % 2 or s.heads % s.kv_heads:
        sys.exit(f"torch_llama_cuda.py: heads ({s.heads}) must divide channels ({s.channels}) into an even "
                 f"head size, and kv heads ({s.kv_heads}) must divide heads")
    if T > s.context:
        sys.exit(f"torch_llama_cuda.py: --seq-len {T} exceeds the model's context of {s.context}")
    return s, T


def attention_note(native_gqa):
    if native_gqa:
        return "sdpa(is_causal=True, enable_gqa=True)"
    return harness.ATTENTION + ", K/V repeated to every query head"


def run(args):
    s, T = shape_of(args)
    if args.gqa == "native" and harness.torch_version() < (2, 5):
        sys.exit(f"torch_llama_cuda.py: torch {torch.__version__} has no enable_gqa (2.5+); use --gqa repeat")
    native_gqa = args.gqa == "native"
    L, C, V = s.layers, s.channels, s.vocab
    Vp = (V + 127) // 128 * 128
    dev = harness.setup_device(args, "torch_llama_cuda.py")

    model = Llama(s, Vp, T, native_gqa).to(dev)
    init_weights(model, L, V)
    params = list(model.parameters())  # a tied table once; padded rows included, as Tessera counts
    num_params = sum(p.numel() for p in params)
    opt = harness.make_optimizer(params, dev.type == "cuda")
    model = harness.maybe_compile(model, args, "torch_llama_cuda.py")
    timing = harness.time_training(model, params, opt, args, dev, V, T)

    # Tessera's model_flops_per_token (src/train/train_bench.cpp): 6*N + 6*L*C*T, N = every parameter
    # (dense: all are active), the padded vocabulary rows and an untied head included, an untied input
    # embedding left out (a lookup, not a matmul).
    flops_params = num_params - (0 if s.tied else Vp * C)
    flops_per_token = 6 * flops_params + 6 * L * C * T
    padding = (Vp - V) * C * (1 if s.tied else 2)
    r = harness.result(
        args, timing, args.batch * T * args.grad_accum, flops_per_token,
        shape={"layers": L, "heads": s.heads, "kv_heads": s.kv_heads, "channels": C, "mlp_hidden": s.mlp_hidden,
               "vocab": V, "padded_vocab": Vp, "seq_len": T, "tied_embeddings": s.tied,
               "rope_theta": s.rope_theta, "rope_factor": s.rope_factor or None},
        counts={"num_params": num_params, "num_params_unpadded": num_params - padding},
        notes={"attention": attention_note(native_gqa),
               "logits": "padded table (Vp), cross-entropy over logits[..., :V]"})
    harness.report(r, f"pytorch {torch.__version__} on {r['device_name']}: {args.preset} L={L} NH={s.heads} "
                      f"NKV={s.kv_heads} C={C} F={s.mlp_hidden} V={V}(Vp={Vp}) B={args.batch} T={T} "
                      f"accum={args.grad_accum}, {args.dtype}, compile {args.compile}, {num_params} params "
                      f"({r['num_params_unpadded']} unpadded)", args)


def main():
    harness.run_reporting_oom(run, parse_args())


if __name__ == "__main__":
    main()
