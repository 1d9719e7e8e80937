# PyTorch side of Tessera's CPU training-step benchmark: the fp32 GPT-2 of tests/reference/torch_gpt2.py,
# one step = forward + cross-entropy + backward + clip_grad_norm_(1.0) + AdamW + zero_grad(set_to_none).
# Random tokens; --warmup steps untimed, then --steps steps timed with time.perf_counter.
# Usage: /usr/bin/python3 bench/torch_train_step.py [--layers 4 --channels 256 ... --threads 2 --json]
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch_gpt2 as tg  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description="Time fp32 GPT-2 training steps in PyTorch on CPU.")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--foreach", choices=("on", "off"), default="on",
                   help="AdamW multi-tensor (foreach) path; 'off' is the per-tensor loop")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    B, T = args.batch, args.seq_len
    cfg = tg.GPT2Config(num_layers=args.layers, num_heads=args.heads, channels=args.channels,
                        vocab_size=args.vocab, max_seq_len=T)
    model = tg.GPT2(cfg)
    tg.init_weights(model, torch.Generator().manual_seed(args.seed), random_affine=False)
    # torch 1.13 AdamW(foreach=True) runs the torch._foreach_* multi-tensor ops on CPU as well.
    opt = tg.make_optimizer(model, 3e-4, (0.9, 0.95), 1e-8, 0.1, foreach=(args.foreach == "on"))
    params = list(model.parameters())
    tokens = torch.randint(0, args.vocab, (args.warmup + args.steps, B, T + 1))

    def step(i):
        x, y = tokens[i, :, :-1], tokens[i, :, 1:]
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for i in range(args.warmup):
        step(i)
    start = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        loss = step(i)
    loss.item()  # CPU ops are synchronous; this only makes the dependency explicit
    seconds = time.perf_counter() - start

    ms_per_step = 1e3 * seconds / args.steps
    tokens_per_s = B * T * args.steps / seconds
    result = {
        "impl": "pytorch", "torch_version": torch.__version__, "threads": args.threads,
        "tokens_per_s": round(tokens_per_s, 1), "ms_per_step": round(ms_per_step, 2),
        "layers": args.layers, "channels": args.channels, "heads": args.heads, "seq_len": T,
        "batch": B, "vocab": args.vocab, "steps": args.steps, "warmup": args.warmup,
        "num_params": sum(p.numel() for p in params), "dtype": "float32",
        "optimizer": f"AdamW(foreach={args.foreach == 'on'})", "attention": "baddbmm masked softmax",
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"pytorch {torch.__version__}, {args.threads} threads, L={args.layers} C={args.channels} "
              f"NH={args.heads} B={B} T={T} V={args.vocab}, {result['num_params']} params, "
              f"{result['optimizer']}")
        print(f"{tokens_per_s:.1f} tokens/s, {ms_per_step:.2f} ms/step over {args.steps} steps")


if __name__ == "__main__":
    main()
