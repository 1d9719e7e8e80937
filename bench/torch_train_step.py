# PyTorch side of Tessera's CPU training-step benchmark, fp32. By default the GPT-2 of
# tests/reference/torch_gpt2.py built from the shape flags; with --model-config-json, the model of a
# Tessera config (bench_train_step --json's "model_config"): GPT-2, or Llama / Mixtral from
# tests/reference/torch_llama.py. One step = forward + cross-entropy (+ aux_coef * the MoE router's aux
# loss) + backward + clip_grad_norm_(1.0) + AdamW + zero_grad(set_to_none). Random tokens; --warmup
# steps untimed, then --steps steps timed with time.perf_counter.
# Usage: /usr/bin/python3 bench/torch_train_step.py [--layers 4 --channels 256 ... --threads 2 --json]
#        /usr/bin/python3 bench/torch_train_step.py --model-config-json '{"num_layers": 4, ...}'|FILE [...]
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torch_gpt2 as tg  # noqa: E402
import torch_llama as tl  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description="Time fp32 training steps of GPT-2, Llama or Mixtral in PyTorch on CPU.")
    p.add_argument("--model", default="", help="a label for the record (the model comes from the config JSON)")
    p.add_argument("--model-config-json", default="",
                   help="Tessera's model config as JSON text, or a file holding it; replaces the shape flags")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--channels", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--moe-aux-coef", type=float, default=0.01, help="weight of the router's aux loss (MoE)")
    p.add_argument("--foreach", choices=("on", "off"), default="on",
                   help="AdamW multi-tensor (foreach) path; 'off' is the per-tensor loop")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    return p.parse_args()


def read_config(text):
    """Tessera's model_config_to_json object, from JSON text or a file name."""
    if not text.lstrip().startswith("{"):
        with open(text) as f:
            text = f.read()
    return json.loads(text)


def require(cfg, want):
    """Exits naming the first key of `want` whose value the reference models cannot build."""
    for key, value in want.items():
        got = cfg
        for part in key.split("."):
            got = got.get(part) if isinstance(got, dict) else None
        if got != value:
            sys.exit(f"torch_train_step.py: model config '{key}' is {got!r}; the PyTorch reference needs {value!r}")


def gpt2_from_config(cfg):
    require(cfg, {"norm": "layernorm", "positions": "learned", "mlp": "gelu", "bias": True,
                  "tied_embeddings": True, "num_kv_heads": cfg["num_heads"], "mlp_hidden": 4 * cfg["channels"]})
    return tg.GPT2Config(num_layers=cfg["num_layers"], num_heads=cfg["num_heads"], channels=cfg["channels"],
                         vocab_size=cfg["vocab_size"], max_seq_len=cfg["max_seq_len"])


def llama_from_config(cfg):
    """Llama (dense SwiGLU) or Mixtral (softmax top-k MoE in every block, no shared experts)."""
    require(cfg, {"norm": "rmsnorm", "positions": "rope", "mlp": "swiglu", "bias": False})
    moe = cfg.get("moe")
    if moe:
        require(cfg, {"moe.router": "softmax_topk", "moe.num_shared_experts": 0, "moe.first_dense_layers": 0})
    rope = cfg["rope"]
    scaling = None
    if rope["factor"] > 0:
        scaling = {"rope_type": "llama3", "factor": rope["factor"], "low_freq_factor": rope["low_freq_factor"],
                   "high_freq_factor": rope["high_freq_factor"],
                   "original_max_position_embeddings": rope["original_max_positions"]}
    return tl.LlamaConfig(
        num_layers=cfg["num_layers"], num_heads=cfg["num_heads"], num_kv_heads=cfg["num_kv_heads"],
        channels=cfg["channels"], intermediate=moe["expert_hidden"] if moe else cfg["mlp_hidden"],
        vocab_size=cfg["vocab_size"], max_seq_len=cfg["max_seq_len"], rms_norm_eps=cfg["norm_eps"],
        rope_theta=rope["theta"], rope_scaling=scaling, tie_word_embeddings=cfg["tied_embeddings"],
        num_experts=moe["num_experts"] if moe else 0, top_k=moe["top_k"] if moe else 2)


def build_model(args):
    """(model, loss_fn(x, y), description): fp32, initialised from args.seed."""
    generator = torch.Generator().manual_seed(args.seed)
    if not args.model_config_json:  # today's GPT-2 of the shape flags
        cfg = tg.GPT2Config(num_layers=args.layers, num_heads=args.heads, channels=args.channels,
                            vocab_size=args.vocab, max_seq_len=args.seq_len)
        config = None
    else:
        config = read_config(args.model_config_json)
        cfg = gpt2_from_config(config) if config["naming"] == "gpt2" else llama_from_config(config)
    if isinstance(cfg, tg.GPT2Config):
        model = tg.GPT2(cfg)
        tg.init_weights(model, generator, random_affine=False)
        return model, lambda x, y: model(x, y)[1], {"family": "gpt2", "attention": "baddbmm masked softmax"}

    model = tl.Llama(cfg)
    tl.init_weights(model, generator, router_std=0.02)  # Tessera's router init: N(0, 0.02)

    def loss_fn(x, y):
        logits, router_logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        if router_logits:  # Tessera's objective: ce + aux_coef * (aux averaged over the MoE layers)
            loss = loss + args.moe_aux_coef * tl.router_losses(router_logits, cfg.top_k)[0]
        return loss

    info = {"family": "mixtral" if cfg.is_moe else "llama",
            "attention": "matmul masked softmax, GQA by repeat_interleave"}
    if cfg.is_moe:
        info["moe"] = f"dropless per-expert loop (nonzero + index_add_), aux coef {args.moe_aux_coef}"
    return model, loss_fn, info


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    B, T = args.batch, args.seq_len
    model, loss_fn, info = build_model(args)
    cfg = model.cfg
    # torch 1.13 AdamW(foreach=True) runs the torch._foreach_* multi-tensor ops on CPU as well.
    opt = tg.make_optimizer(model, 3e-4, (0.9, 0.95), 1e-8, 0.1, foreach=(args.foreach == "on"))
    params = list(model.parameters())
    tokens = torch.randint(0, cfg.vocab_size, (args.warmup + args.steps, B, T + 1))

    def step(i):
        x, y = tokens[i, :, :-1], tokens[i, :, 1:]
        loss = loss_fn(x, y)
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
        "layers": cfg.num_layers, "channels": cfg.channels, "heads": cfg.num_heads, "seq_len": T,
        "batch": B, "vocab": cfg.vocab_size, "steps": args.steps, "warmup": args.warmup,
        "num_params": sum(p.numel() for p in params), "dtype": "float32",
        "optimizer": f"AdamW(foreach={args.foreach == 'on'})", **info,
    }
    if args.model:
        result["model"] = args.model
    if args.json:
        print(json.dumps(result))
    else:
        print(f"pytorch {torch.__version__}, {args.threads} threads, {info['family']} L={cfg.num_layers} "
              f"C={cfg.channels} NH={cfg.num_heads} B={B} T={T} V={cfg.vocab_size}, {result['num_params']} params, "
              f"{result['optimizer']}")
        print(f"{tokens_per_s:.1f} tokens/s, {ms_per_step:.2f} ms/step over {args.steps} steps")


if __name__ == "__main__":
    main()
