# Self-checks of the reference side (no C++ needed): safetensors write/read round trips (F32 exact,
# F16/BF16 bit patterns against torch's own conversion), HF folder save/load gives identical logits,
# Conv1D tensors are stored transposed, token shards round-trip, the attention matches a plain
# masked_fill formulation, torch AdamW + clipping equals the update Tessera's adamw.h states, and
# make_hf_reference.py is deterministic. Usage: /usr/bin/python3 tests/reference/check_reference.py
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_reference  # noqa: E402
import torch_gpt2 as tg  # noqa: E402


def small_model(seed=0, vocab=300):
    cfg = tg.GPT2Config(num_layers=2, num_heads=2, channels=32, vocab_size=vocab, max_seq_len=32)
    model = tg.GPT2(cfg)
    tg.init_weights(model, torch.Generator().manual_seed(seed), random_affine=True)
    return model


def check_safetensors(tmp):
    g = torch.Generator().manual_seed(3)
    tensors = {"a": torch.randn(3, 5, generator=g), "b.c": torch.randn(7, generator=g),
               "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4)}
    path = os.path.join(tmp, "t.safetensors")
    tg.save_safetensors(path, tensors, metadata={"format": "pt"})
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    assert n % 8 == 0 and list(header)[1:] == list(tensors), "header padding or order"
    back = tg.load_safetensors(path)
    for k, t in tensors.items():
        assert back[k].shape == t.shape and torch.equal(back[k], t), f"F32 round trip of {k}"
    for dt, torch_dt in (("F16", torch.float16), ("BF16", torch.bfloat16)):
        tg.save_safetensors(path, tensors, dtype=dt)
        back, dtypes = tg.load_safetensors(path, with_dtypes=True)
        for k, t in tensors.items():
            assert dtypes[k] == dt and torch.equal(back[k], t.to(torch_dt).float()), f"{dt} {k}"
    print("safetensors: F32 exact, F16/BF16 match torch's rounding, header padded to 8")


def check_hf_round_trip(tmp):
    model = small_model(seed=5)
    folder = os.path.join(tmp, "hf")
    tg.save_hf(model, folder)
    stored = tg.load_safetensors(os.path.join(folder, "model.safetensors"))
    w = model.h[0].attn.c_attn.weight                                        # (3C, C) nn.Linear
    assert stored["h.0.attn.c_attn.weight"].shape == (32, 96)               # (C, 3C) Conv1D
    assert torch.equal(stored["h.0.attn.c_attn.weight"], w.t())
    assert stored["h.1.mlp.c_proj.weight"].shape == (128, 32)
    assert len(stored) == 4 + 12 * 2, "tensor count"
    loaded = tg.load_hf(folder)
    idx = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(model(idx)[0], loaded(idx)[0]), "logits differ after HF round trip"
    print("hf folder: Conv1D stored (in,out); reloaded model gives identical logits")


def check_token_shard(tmp):
    path = os.path.join(tmp, "s.bin")
    for version, hi in ((1, 65535), (2, 100000)):
        tokens = np.array([0, 1, hi, 7, hi - 1])
        tg.write_token_shard(path, tokens, version)
        assert os.path.getsize(path) == 1024 + tokens.size * (2 * version)
        assert np.array_equal(tg.read_token_shard(path), tokens)
    print("token shards: v1/v2 round trip")


def check_attention():
    model = small_model(seed=7)
    attn = model.h[0].attn
    x = torch.randn(2, 11, 32, generator=torch.Generator().manual_seed(2))
    B, T, C, NH, HS = 2, 11, 32, 2, 16
    q, k, v = attn.c_attn(x).split(C, dim=2)
    q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in (q, k, v))
    att = (q @ k.transpose(-2, -1)) / math.sqrt(HS)
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    y = attn.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
    assert torch.allclose(attn(x), y, rtol=1e-5, atol=1e-6), "attention differs from masked_fill form"
    print("attention: baddbmm form equals masked_fill form")


def check_adamw_matches_tessera_formula():
    """One clipped step of torch AdamW vs adamw.h: param -= lr*(mhat/(sqrt(vhat)+eps) + wd*param)."""
    model = small_model(seed=9)
    lr, b1, b2, eps, wd, clip = 1e-2, 0.9, 0.95, 1e-8, 0.1, 0.5
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    idx = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(4))
    _, loss = model(idx[:, :-1], idx[:, 1:])
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    tg.make_optimizer(model, lr, (b1, b2), eps, wd).step()
    scale = min(1.0, clip / (norm.item() + 1e-6))
    for n, p in model.named_parameters():
        g = grads[n] * scale
        mhat, vhat = (1 - b1) * g / (1 - b1), (1 - b2) * g * g / (1 - b2)
        decay = wd if p.dim() >= 2 else 0.0
        want = before[n] - lr * (mhat / (vhat.sqrt() + eps) + decay * before[n])
        assert torch.allclose(p.detach(), want, rtol=1e-5, atol=1e-7), f"AdamW update of {n}"
    print(f"adamw: torch step equals adamw.h formula (decay on >=2-dim tensors), clip norm {norm:.4f}")


def check_reference_deterministic(tmp):
    runs = []
    for name in ("r1", "r2"):
        out = os.path.join(tmp, name)
        make_hf_reference.main(["--out", out, "--steps", "3"])
        with open(os.path.join(out, "expected.json")) as f:
            runs.append(json.load(f))
    assert runs[0]["losses"] == runs[1]["losses"] and runs[0]["grad_norms"] == runs[1]["grad_norms"]
    loss0 = runs[0]["losses"][0]
    assert abs(loss0 - math.log(300)) < 0.2, f"initial loss {loss0} far from ln(V)"
    # The saved initial model reproduces step 1's loss from the shard.
    model = tg.load_hf(os.path.join(tmp, "r1", "hf"))
    tokens = torch.from_numpy(tg.read_token_shard(os.path.join(tmp, "r1", "train.bin")))
    chunk = tokens[:4 * 16 + 1]
    with torch.no_grad():
        _, loss = model(chunk[:-1].view(4, 16), chunk[1:].view(4, 16))
    assert loss.item() == loss0, "reloaded model does not reproduce the step-1 loss"
    print("make_hf_reference: deterministic; hf/ + train.bin reproduce the step-1 loss")


def main():
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        check_safetensors(tmp)
        check_hf_round_trip(tmp)
        check_token_shard(tmp)
        check_attention()
        check_adamw_matches_tessera_formula()
        check_reference_deterministic(tmp)
    print("all reference checks passed")


if __name__ == "__main__":
    main()
