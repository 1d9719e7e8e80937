# PyTorch side of Tessera's GPU training-step benchmark. Times GPT-2 training steps in PyTorch on CUDA,
# beside `tessera bench train --model gpt2-...`; the step, precisions, timing and the common JSON fields are
# bench/torch_bench_harness.py's (one step = (forward + cross-entropy (mean over B*T tokens) + backward)
# x --grad-accum, then clip_grad_norm_(1.0), AdamW and zero_grad; medians of CUDA-event step times).
# The model is the GPT-2 of tests/reference/torch_gpt2.py (tied wte, learned wpe, pre-LN blocks, tanh GELU,
# LayerNorm eps 1e-5) written for torch >= 2: F.scaled_dot_product_attention(is_causal=True), and wte padded
# to a multiple of 128 rows (as llm.c and Tessera do). It is self-contained: that reference targets torch 1.13.
# On the GPU machine (from the repository root):
#   python3 bench/torch_gpt2_cuda.py --preset gpt2-124m --batch 16 --dtype bf16 --compile on --json
#   python3 bench/torch_gpt2_cuda.py --preset gpt2-124m --batch 32 --dtype bf16 --compile on --json
#   python3 bench/torch_gpt2_cuda.py --preset gpt2-124m --batch 16 --dtype fp32 --compile on --json
# CPU smoke test only: python3 bench/torch_gpt2_cuda.py --device cpu --preset gpt2-tiny --compile off \
#   --dtype fp32 --steps 2 --warmup 1 --json
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_bench_harness as harness

LAYER_NORM_EPS = 1e-5
# preset: (layers, heads, channels, vocab, seq_len); seq_len is also the wpe size (context) of the preset.
PRESETS = {
    "gpt2-tiny": (2, 2, 32, 256, 64),
    "gpt2-124m": (12, 12, 768, 50257, 1024),
    "gpt2-350m": (24, 16, 1024, 50257, 1024),
    "gpt2-774m": (36, 20, 1280, 50257, 1024),
    "gpt2-1558m": (48, 25, 1600, 50257, 1024),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.num_heads = NH
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        NH = self.num_heads
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        y = harness.causal_attention(q, k, v)                              # (B,NH,T,HS)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=LAYER_NORM_EPS)
        self.attn = CausalSelfAttention(C, NH)
        self.ln_2 = nn.LayerNorm(C, eps=LAYER_NORM_EPS)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(C, 4 * C), c_proj=nn.Linear(4 * C, C)))
        self.gelu = nn.GELU(approximate="tanh")

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(self.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self, L, NH, C, V, Vp, max_T):
        super().__init__()
        self.vocab = V
        self.wte = nn.Embedding(Vp, C)      # (Vp,C), padded rows never looked up; tied with the output layer
        self.wpe = nn.Embedding(max_T, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C, eps=LAYER_NORM_EPS)

    def forward(self, idx, targets):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        # Logits over the whole padded table (a GEMM with N = Vp, a multiple of 128, as llm.c does), then
        # the cross-entropy over logits[..., :V] (slice, not mask): the padded columns get neither
        # probability mass nor gradient. Under autocast the cross-entropy runs in fp32.
        logits = F.linear(self.ln_f(x), self.wte.weight)                    # (B,T,Vp)
        V = self.vocab
        return F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))


def init_weights(model, L):
    """normal(0, 0.02); residual projections (attn.c_proj, mlp.c_proj weights) 0.02/sqrt(2L); biases 0;
    LayerNorm gains keep their 1. Padded wte rows are drawn too (never read by the loss)."""
    std_resid = 0.02 / math.sqrt(2 * L)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std_resid if name.endswith("c_proj.weight") else 0.02)
            elif name.endswith("bias"):
                p.zero_()


def parse_args():
    p = argparse.ArgumentParser(description="Time GPT-2 training steps in PyTorch on CUDA.")
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpt2-124m")
    for flag in ("--layers", "--heads", "--channels", "--vocab", "--seq-len"):
        p.add_argument(flag, type=int, default=None, help="overrides the preset")
    harness.add_run_options(p, default_batch=16)
    return p.parse_args()


def run(args):
    L, NH, C, V, T = PRESETS[args.preset]
    L, NH, C = args.layers or L, args.heads or NH, args.channels or C
    V, max_T = args.vocab or V, max(T, args.seq_len or T)  # wpe keeps the preset context, like llm.c
    T = args.seq_len or T
    assert C % NH == 0, "channels must be a multiple of heads"
    Vp = (V + 127) // 128 * 128
    dev = harness.setup_device(args, "torch_gpt2_cuda.py")
    cuda = dev.type == "cuda"

    model = GPT2(L, NH, C, V, Vp, max_T).to(dev)
    init_weights(model, L)
    params = list(model.parameters())  # wte once (tied); includes its padded rows, as llm.c counts
    num_params = sum(p.numel() for p in params)
    opt = harness.make_optimizer(params, cuda)
    model = harness.maybe_compile(model, args, "torch_gpt2_cuda.py")
    timing = harness.time_training(model, params, opt, args, dev, V, T)

    # MFU, llm.c's convention: flops/token = 6*N + 6*L*C*T with N = all parameters (wte once, with its
    # padded rows, and wpe); 6*N = the weight matmuls fwd+bwd (wte is the classifier), 6*L*C*T = attention.
    flops_per_token = 6 * num_params + 6 * L * C * T
    r = harness.result(
        args, timing, args.batch * T * args.grad_accum, flops_per_token,
        shape={"layers": L, "heads": NH, "channels": C, "vocab": V, "padded_vocab": Vp, "seq_len": T},
        counts={"num_params": num_params, "num_params_unpadded": num_params - (Vp - V) * C},
        notes={"attention": harness.ATTENTION,
               "logits": "padded table (Vp), cross-entropy over logits[..., :V]"})
    harness.report(r, f"pytorch {torch.__version__} on {r['device_name']}: {args.preset} L={L} NH={NH} C={C} "
                      f"V={V}(Vp={Vp}) B={args.batch} T={T} accum={args.grad_accum}, {args.dtype}, "
                      f"compile {args.compile}, {num_params} params ({r['num_params_unpadded']} unpadded)", args)


def main():
    harness.run_reporting_oom(run, parse_args())


if __name__ == "__main__":
    main()
