# Writes a golden training run for Tessera's integration tests: DIR/hf/ (HF GPT-2 folder of a random
# fp32 model), DIR/train.bin (llm.c shard v2, batches read sequentially), DIR/expected.json (per-step
# fp32 loss and pre-clip grad norm from torch AdamW), and DIR/hf_final/ (the weights after the last step).
# Batch k (0-based) is tokens[k*B*T : k*B*T + B*T + 1]: inputs the first B*T, targets shifted by one.
# Usage: /usr/bin/python3 tests/reference/make_hf_reference.py --out DIR [--layers 2 ... --seed 1]
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2 as tg  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Write a golden GPT-2 training run for Tessera.")
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--vocab", type=int, default=300, help="V; Tessera pads it to a multiple of 128")
    p.add_argument("--context", type=int, default=32, help="maxT (n_positions)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--steps", type=int, default=6)
    tg.add_optimizer_args(p)
    args = p.parse_args(argv)
    if args.seq_len > args.context:
        p.error("--seq-len must not exceed --context")
    if args.channels % args.heads:
        p.error("--heads must divide --channels")
    return args


def global_grad_norm(params):
    return torch.norm(torch.stack([p.grad.norm() for p in params if p.grad is not None]))


def train(model, tokens, args):
    """Runs args.steps AdamW steps; returns per-step losses, pre-clip grad norms and learning rates."""
    B, T = args.batch, args.seq_len
    opt = tg.make_optimizer(model, args.lr, (args.beta1, args.beta2), args.eps, args.weight_decay)
    params = [p for p in model.parameters()]
    losses, grad_norms, lrs = [], [], []
    for step in range(1, args.steps + 1):
        start = (step - 1) * B * T
        chunk = tokens[start:start + B * T + 1]
        x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        lr = tg.lr_at(step, args.lr, args.steps, args.schedule, args.warmup, args.min_lr)
        for group in opt.param_groups:
            group["lr"] = lr
        _, loss = model(x, y)
        loss.backward()
        if args.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip)  # returns the pre-clip norm
        else:
            norm = global_grad_norm(params)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        grad_norms.append(norm.item())
        lrs.append(lr)
        print(f"step {step}/{args.steps}  loss {losses[-1]:.6f}  grad_norm {grad_norms[-1]:.6f}  lr {lr:.3e}")
    return losses, grad_norms, lrs


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    cfg = tg.GPT2Config(num_layers=args.layers, num_heads=args.heads, channels=args.channels,
                        vocab_size=args.vocab, max_seq_len=args.context)
    model = tg.GPT2(cfg)
    tg.init_weights(model, gen, random_affine=True)
    num_tokens = args.steps * args.batch * args.seq_len + 1
    tokens = torch.randint(0, args.vocab, (num_tokens,), generator=gen, dtype=torch.int64)

    os.makedirs(args.out, exist_ok=True)
    tg.save_hf(model, os.path.join(args.out, "hf"))
    tg.write_token_shard(os.path.join(args.out, "train.bin"), tokens.numpy(), version=2)

    losses, grad_norms, lrs = train(model, tokens, args)
    tg.save_hf(model, os.path.join(args.out, "hf_final"))

    config = {k: v for k, v in vars(args).items() if k != "out"}
    config.update({
        "padded_vocab": (args.vocab + 127) // 128 * 128, "num_tokens": num_tokens,
        "tokens_per_step": args.batch * args.seq_len, "dtype": "float32",
        "init": "N(0,0.02) weights, c_proj N(0,0.02/sqrt(2L)), biases N(0,0.02), LN gains 1+N(0,0.1)",
        "data": "batch k = tokens[k*B*T : k*B*T+B*T+1], inputs first B*T, targets shifted by one",
        "clip": "torch clip_grad_norm_: scale = grad_clip/(norm+1e-6) when that is < 1",
        "torch_version": torch.__version__,
    })
    expected = {"losses": losses, "grad_norms": grad_norms, "lrs": lrs, "config": config}
    tg.write_json(os.path.join(args.out, "expected.json"), expected)
    print(f"wrote {args.out}/hf, train.bin, expected.json, hf_final")


if __name__ == "__main__":
    main()
