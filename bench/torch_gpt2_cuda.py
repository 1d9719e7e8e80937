# PyTorch side of Tessera's GPU training-step benchmark. Times GPT-2 training steps in PyTorch on CUDA:
# one step = (forward + cross-entropy (mean over B*T tokens) + backward) x --grad-accum, then
# clip_grad_norm_(1.0), AdamW (fused on CUDA) and zero_grad(set_to_none=True).
# The model is the GPT-2 of tests/reference/torch_gpt2.py (tied wte, learned wpe, pre-LN blocks, tanh GELU,
# LayerNorm eps 1e-5) written for torch >= 2: F.scaled_dot_product_attention(is_causal=True), and wte padded
# to a multiple of 128 rows (as llm.c and Tessera do). It is self-contained: that reference targets torch 1.13.
# --dtype bf16 = torch.autocast(bfloat16) over fp32 master weights; --dtype fp16 = autocast(float16)
# with torch.amp.GradScaler; --dtype fp32 = true fp32 (TF32 off).
# Random tokens are drawn on the device before timing; --warmup steps (torch.compile happens there) are
# untimed, then --steps steps are timed: wall clock (time.perf_counter between synchronizes) and per-step
# CUDA events; the median per-step time gives ms/step, tokens/s and MFU.
# On the GPU machine (from the repository root):
#   python3 bench/torch_gpt2_cuda.py --preset gpt2-124m --batch 16 --dtype bf16 --compile on --json
#   python3 bench/torch_gpt2_cuda.py --preset gpt2-124m --batch 32 --dtype bf16 --compile on --json
#   python3 bench/torch_gpt2_cuda.py --preset gpt2-124m --batch 16 --dtype fp32 --compile on --json
# CPU smoke test only: python3 bench/torch_gpt2_cuda.py --device cpu --preset gpt2-tiny --compile off \
#   --dtype fp32 --steps 2 --warmup 1 --json
import argparse
import contextlib
import json
import math
import statistics
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

LAYER_NORM_EPS = 1e-5
# preset: (layers, heads, channels, vocab, seq_len); seq_len is also the wpe size (context) of the preset.
PRESETS = {
    "gpt2-tiny": (2, 2, 32, 256, 64),
    "gpt2-124m": (12, 12, 768, 50257, 1024),
    "gpt2-350m": (24, 16, 1024, 50257, 1024),
    "gpt2-774m": (36, 20, 1280, 50257, 1024),
    "gpt2-1558m": (48, 25, 1600, 50257, 1024),
}

if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0: flash / memory-efficient kernels
    ATTENTION = "sdpa(is_causal=True)"

    def causal_attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
else:  # fallback ONLY for torch < 2.0 (the CPU smoke test with Debian's torch 1.13): masked softmax
    ATTENTION = "masked softmax (no SDPA in this torch)"

    def causal_attention(q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        return att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v


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
        y = causal_attention(q, k, v)                                      # (B,NH,T,HS)
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


def default_peak_flops(name):
    """bf16 dense tensor-core peak (FLOP/s) from the device name, or None if unknown."""
    if "H100" in name:
        if "SXM" in name or "HBM3" in name:
            return 989e12
        return 756e12 if "PCIE" in name.upper() else None
    if "H200" in name:
        return 989e12
    if "A100" in name:
        return 312e12
    return None


def parse_args():
    p = argparse.ArgumentParser(description="Time GPT-2 training steps in PyTorch on CUDA.")
    p.add_argument("--preset", choices=sorted(PRESETS), default="gpt2-124m")
    for flag in ("--layers", "--heads", "--channels", "--vocab", "--seq-len"):
        p.add_argument(flag, type=int, default=None, help="overrides the preset")
    p.add_argument("--batch", type=int, default=16, help="micro-batch B")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--compile", choices=("on", "off"), default="on")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: smoke test only")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compile happens here)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="peak TFLOP/s for MFU (default: bf16 dense peak looked up from the device name)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    return p.parse_args()


def is_oom(e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


def run(args):
    L, NH, C, V, T = PRESETS[args.preset]
    L, NH, C = args.layers or L, args.heads or NH, args.channels or C
    V, max_T = args.vocab or V, max(T, args.seq_len or T)  # wpe keeps the preset context, like llm.c
    T = args.seq_len or T
    B, accum = args.batch, args.grad_accum
    assert C % NH == 0, "channels must be a multiple of heads"
    Vp = (V + 127) // 128 * 128
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_gpt2_cuda.py: CUDA is not available (use --device cpu for a smoke test)")
    dev = torch.device(args.device)
    if args.dtype == "fp32":  # true fp32: no TF32 in cuBLAS or cuDNN. Legacy flags only: torch >= 2.9
        with warnings.catch_warnings():  # warns they are deprecated, and mixing in the new
            warnings.simplefilter("ignore")  # fp32_precision API makes inductor raise.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)

    model = GPT2(L, NH, C, V, Vp, max_T).to(dev)
    init_weights(model, L)
    params = list(model.parameters())  # wte once (tied); includes its padded rows, as llm.c counts
    num_params = sum(p.numel() for p in params)
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt_kw = {"fused": True} if cuda else {"foreach": True}  # fused AdamW is the CUDA path
    opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **opt_kw)
    if args.compile == "on":
        if not hasattr(torch, "compile"):
            sys.exit(f"torch_gpt2_cuda.py: torch {torch.__version__} has no torch.compile; use --compile off")
        if args.warmup == 0:
            print("warning: --compile on with --warmup 0 times the compilation", file=sys.stderr)
        model = torch.compile(model)

    def autocast():
        if args.dtype in ("bf16", "fp16"):
            half = torch.bfloat16 if args.dtype == "bf16" else torch.float16
            return torch.autocast(device_type=dev.type, dtype=half)
        return contextlib.nullcontext()

    # fp16 trains with dynamic loss scaling, as Tessera does (initial scale 2^16); otherwise a no-op.
    scaler = torch.amp.GradScaler(dev.type, enabled=args.dtype == "fp16")

    # Tokens for every (step, micro-step), drawn once on the device before any timing.
    n = args.warmup + args.steps
    tokens = torch.randint(0, V, (n, accum, B, T + 1), device=dev)
    xs = [[tokens[i, k, :, :-1].contiguous() for k in range(accum)] for i in range(n)]
    ys = [[tokens[i, k, :, 1:].contiguous() for k in range(accum)] for i in range(n)]
    del tokens

    def step(i):
        total = 0.0
        for k in range(accum):
            with autocast():
                loss = model(xs[i][k], ys[i][k])
            scaler.scale(loss / accum).backward()
            total = total + loss.detach()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return total / accum

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for i in range(args.warmup):
        step(i)
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()  # peak memory of the timed (steady-state) steps
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.steps)]
    step_ms = []
    start = time.perf_counter()
    for j in range(args.steps):
        if cuda:
            events[j][0].record()
        else:
            t0 = time.perf_counter()  # CPU ops are synchronous
        loss = step(args.warmup + j)
        if cuda:
            events[j][1].record()
        else:
            step_ms.append(1e3 * (time.perf_counter() - t0))
    sync()
    seconds = time.perf_counter() - start
    if cuda:
        step_ms = [a.elapsed_time(b) for a, b in events]

    tokens_per_step = B * T * accum
    median_ms = statistics.median(step_ms)
    tps = tokens_per_step / (median_ms / 1e3)
    tps_mean = tokens_per_step * args.steps / seconds
    # MFU, llm.c's convention: flops/token = 6*N + 6*L*C*T with N = all parameters (wte once, with its
    # padded rows, and wpe); 6*N = the weight matmuls fwd+bwd (wte is the classifier), 6*L*C*T = attention.
    flops_per_token = 6 * num_params + 6 * L * C * T
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else (default_peak_flops(name) if cuda else None)
    result = {
        "impl": "pytorch", "torch_version": torch.__version__, "device": args.device, "device_name": name,
        "dtype": args.dtype, "compile": args.compile == "on", "preset": args.preset,
        "layers": L, "heads": NH, "channels": C, "vocab": V, "padded_vocab": Vp, "seq_len": T,
        "batch": B, "grad_accum": accum, "tokens_per_step": tokens_per_step,
        "steps": args.steps, "warmup": args.warmup,
        "num_params": num_params, "num_params_unpadded": num_params - (Vp - V) * C,
        "tokens_per_s": round(tps, 1), "tokens_per_s_mean": round(tps_mean, 1),
        "ms_per_step": round(median_ms, 3), "ms_per_step_min": round(min(step_ms), 3),
        "ms_per_step_max": round(max(step_ms), 3), "ms_per_step_mean": round(1e3 * seconds / args.steps, 3),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated(dev) / 2**30, 3) if cuda else None,
        "flops_per_token": flops_per_token, "peak_tflops": peak / 1e12 if peak else None,
        "mfu": round(tps * flops_per_token / peak, 4) if peak else None,
        "mfu_mean": round(tps_mean * flops_per_token / peak, 4) if peak else None,
        "mfu_note": "vs bf16 dense peak (also for fp32); flops/token = 6N + 6LCT, llm.c convention",
        "final_loss": round(float(loss), 6),
        "attention": ATTENTION, "logits": "padded table (Vp), cross-entropy over logits[..., :V]",
        "optimizer": "AdamW(" + ("fused" if cuda else "foreach") + ", wd 0.1 on >=2-D)",
        "tf32": False if args.dtype == "fp32" else None,
    }
    if args.json:
        print(json.dumps(result))
        return
    mfu = f", MFU {100 * result['mfu']:.1f}% (vs bf16 peak {peak / 1e12:.0f} TFLOP/s)" if peak else ""
    mem = f", peak mem {result['peak_mem_gib']:.2f} GiB" if cuda else ""
    print(f"pytorch {torch.__version__} on {name}: {args.preset} L={L} NH={NH} C={C} V={V}(Vp={Vp}) "
          f"B={B} T={T} accum={accum}, {args.dtype}, compile {args.compile}, "
          f"{num_params} params ({result['num_params_unpadded']} unpadded)")
    print(f"{tps:.0f} tokens/s (median; mean {tps_mean:.0f}), {median_ms:.2f} ms/step "
          f"[min {min(step_ms):.2f}, max {max(step_ms):.2f}] over {args.steps} steps{mfu}{mem}, "
          f"final loss {result['final_loss']:.4f}")


def main():
    args = parse_args()
    try:
        run(args)
    except Exception as e:  # noqa: BLE001 -- out-of-memory is reported plainly, anything else re-raised
        if not is_oom(e):
            raise
        msg = (f"out of memory: batch too large (B={args.batch}, grad_accum={args.grad_accum}, "
               f"preset {args.preset}, {args.dtype}); try a smaller --batch with more --grad-accum")
        print(json.dumps({"impl": "pytorch", "error": msg}) if args.json else msg)
        sys.exit(1)


if __name__ == "__main__":
    main()
