# The timing harness that PyTorch's side of Tessera's GPU training-step benchmark shares
# (bench/torch_gpt2_cuda.py, bench/torch_llama_cuda.py): the common command line, the precision set-up,
# AdamW, causal attention, the timed loop, the common fields of the result JSON and out-of-memory reports.
# A model script builds a model whose forward(idx, targets) returns the mean cross-entropy over B*T tokens,
# and hands it to time_training; it adds its own fields (shape, parameter counts, notes) to the result.
# One step = (forward + loss + backward) x --grad-accum, then clip_grad_norm_(1.0), AdamW (fused on CUDA)
# and zero_grad(set_to_none=True). --dtype bf16 = torch.autocast(bfloat16) over fp32 master weights;
# --dtype fp16 = autocast(float16) with a GradScaler; --dtype fp32 = true fp32 (TF32 off).
# Random tokens are drawn on the device before timing; --warmup steps (torch.compile happens there) are
# untimed, then --steps steps are timed: wall clock (time.perf_counter between synchronizes) and per-step
# CUDA events; the median per-step time gives ms/step, tokens/s and MFU.
import contextlib
import json
import math
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

MFU_NOTE = ("vs bf16 dense peak (also for fp32); flops/token = 6N + 6LCT, llm.c convention "
            "(N without an untied input embedding)")


def torch_version():
    """(major, minor) of the running torch, e.g. (1, 13) for '1.13.0a0'."""
    major, minor = re.match(r"(\d+)\.(\d+)", torch.__version__).groups()
    return int(major), int(minor)


if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0: flash / memory-efficient kernels
    ATTENTION = "sdpa(is_causal=True)"

    def causal_attention(q, k, v):
        """q, k, v (B, H, T, HS) with as many heads each -> (B, H, T, HS)."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
else:  # fallback ONLY for torch < 2.0 (the CPU smoke test with Debian's torch 1.13): masked softmax
    ATTENTION = "masked softmax (no SDPA in this torch)"

    def causal_attention(q, k, v):
        """q, k, v (B, H, T, HS) with as many heads each -> (B, H, T, HS)."""
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        return att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v


def add_run_options(p, default_batch):
    """The options every model script takes after its --preset and shape overrides."""
    p.add_argument("--batch", type=int, default=default_batch, help="micro-batch B")
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


def setup_device(args, script):
    """The torch.device of --device, with fp32 kept true fp32 and the seed set; exits without CUDA."""
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{script}: CUDA is not available (use --device cpu for a smoke test)")
    if args.dtype == "fp32":  # true fp32: no TF32 in cuBLAS or cuDNN. Legacy flags only: torch >= 2.9
        with warnings.catch_warnings():  # warns they are deprecated, and mixing in the new
            warnings.simplefilter("ignore")  # fp32_precision API makes inductor raise.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(args.seed)
    return torch.device(args.device)


def make_optimizer(params, cuda):
    """AdamW as Tessera's (lr 6e-4, betas 0.9/0.95, eps 1e-8), weight decay 0.1 on >=2-D parameters only."""
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt_kw = {"fused": True} if cuda else {"foreach": True}  # fused AdamW is the CUDA path
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **opt_kw)


def optimizer_note(cuda):
    return "AdamW(" + ("fused" if cuda else "foreach") + ", wd 0.1 on >=2-D)"


def maybe_compile(model, args, script):
    """torch.compile(model) with --compile on; exits when this torch has no compiler."""
    if args.compile == "off":
        return model
    if not hasattr(torch, "compile"):
        sys.exit(f"{script}: torch {torch.__version__} has no torch.compile; use --compile off")
    if args.warmup == 0:
        print("warning: --compile on with --warmup 0 times the compilation", file=sys.stderr)
    return torch.compile(model)


def autocast(args, dev):
    """A fresh autocast context for --dtype bf16/fp16, a no-op one for fp32."""
    if args.dtype in ("bf16", "fp16"):
        half = torch.bfloat16 if args.dtype == "bf16" else torch.float16
        return torch.autocast(device_type=dev.type, dtype=half)
    return contextlib.nullcontext()


def grad_scaler(args, dev):
    """fp16 trains with dynamic loss scaling, as Tessera does (initial scale 2^16); otherwise a no-op.
    torch.amp.GradScaler appeared in torch 2.3; older ones (the CPU smoke test's 1.13) have only the CUDA one,
    which is all an fp16 run needs there."""
    enabled = args.dtype == "fp16"
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(dev.type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def draw_batches(n, accum, B, T, vocab, dev):
    """Inputs and targets [step][micro-step] of (B, T) tokens in [0, vocab), drawn at once on the device."""
    tokens = torch.randint(0, vocab, (n, accum, B, T + 1), device=dev)
    xs = [[tokens[i, k, :, :-1].contiguous() for k in range(accum)] for i in range(n)]
    ys = [[tokens[i, k, :, 1:].contiguous() for k in range(accum)] for i in range(n)]
    return xs, ys


@dataclass
class Timing:
    step_ms: list        # per timed step
    seconds: float       # wall clock over the timed steps
    final_loss: float    # mean loss of the last step's micro-batches
    peak_mem_gib: float  # CUDA: peak allocated over the timed steps; None on the CPU

    @property
    def median_ms(self):
        return statistics.median(self.step_ms)


def time_training(model, params, opt, args, dev, vocab, T):
    """Runs --warmup untimed then --steps timed training steps of model on random tokens of length T."""
    cuda = dev.type == "cuda"
    B, accum = args.batch, args.grad_accum
    scaler = grad_scaler(args, dev)
    xs, ys = draw_batches(args.warmup + args.steps, accum, B, T, vocab, dev)

    def step(i):
        total = 0.0
        for k in range(accum):
            with autocast(args, dev):
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
    peak = round(torch.cuda.max_memory_allocated(dev) / 2**30, 3) if cuda else None
    return Timing(step_ms, seconds, float(loss), peak)


def result(args, timing, tokens_per_step, flops_per_token, shape, counts, notes):
    """The result JSON's fields in their order: the common ones around the model script's shape (after
    preset), parameter counts (after warmup) and notes (after final_loss)."""
    cuda = args.device == "cuda"
    name = torch.cuda.get_device_name(torch.device(args.device)) if cuda else "cpu"
    peak = args.peak_tflops * 1e12 if args.peak_tflops else (default_peak_flops(name) if cuda else None)
    tps = tokens_per_step / (timing.median_ms / 1e3)
    tps_mean = tokens_per_step * args.steps / timing.seconds
    r = {"impl": "pytorch", "torch_version": torch.__version__, "device": args.device, "device_name": name,
         "dtype": args.dtype, "compile": args.compile == "on", "preset": args.preset}
    r.update(shape)
    r.update({"batch": args.batch, "grad_accum": args.grad_accum, "tokens_per_step": tokens_per_step,
              "steps": args.steps, "warmup": args.warmup})
    r.update(counts)
    r.update({
        "tokens_per_s": round(tps, 1), "tokens_per_s_mean": round(tps_mean, 1),
        "ms_per_step": round(timing.median_ms, 3), "ms_per_step_min": round(min(timing.step_ms), 3),
        "ms_per_step_max": round(max(timing.step_ms), 3),
        "ms_per_step_mean": round(1e3 * timing.seconds / args.steps, 3),
        "peak_mem_gib": timing.peak_mem_gib,
        "flops_per_token": flops_per_token, "peak_tflops": peak / 1e12 if peak else None,
        "mfu": round(tps * flops_per_token / peak, 4) if peak else None,
        "mfu_mean": round(tps_mean * flops_per_token / peak, 4) if peak else None,
        "mfu_note": MFU_NOTE,
        "final_loss": round(timing.final_loss, 6),
    })
    r.update(notes)
    r.update({"optimizer": optimizer_note(cuda), "tf32": False if args.dtype == "fp32" else None})
    return r


def report(r, header, args):
    """One JSON line with --json; otherwise the model script's header line and the common timing line."""
    if args.json:
        print(json.dumps(r))
        return
    peak = r["peak_tflops"]
    mfu = f", MFU {100 * r['mfu']:.1f}% (vs bf16 peak {peak:.0f} TFLOP/s)" if peak else ""
    mem = f", peak mem {r['peak_mem_gib']:.2f} GiB" if r["peak_mem_gib"] is not None else ""
    print(header)
    print(f"{r['tokens_per_s']:.0f} tokens/s (median; mean {r['tokens_per_s_mean']:.0f}), "
          f"{r['ms_per_step']:.2f} ms/step [min {r['ms_per_step_min']:.2f}, max {r['ms_per_step_max']:.2f}] "
          f"over {args.steps} steps{mfu}{mem}, final loss {r['final_loss']:.4f}")


def is_oom(e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(e, oom)) or "out of memory" in str(e).lower()


def run_reporting_oom(run, args):
    """run(args); out-of-memory is reported plainly (one JSON line with --json) and exits 1, anything else
    is re-raised."""
    try:
        run(args)
    except Exception as e:  # noqa: BLE001 -- see the docstring
        if not is_oom(e):
            raise
        msg = (f"out of memory: batch too large (B={args.batch}, grad_accum={args.grad_accum}, "
               f"preset {args.preset}, {args.dtype}); try a smaller --batch with more --grad-accum")
        print(json.dumps({"impl": "pytorch", "error": msg}) if args.json else msg)
        sys.exit(1)
