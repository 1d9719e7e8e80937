# Plain-PyTorch GPT-2 (fp32, nn.Linear layout) that Tessera is checked against, plus the file formats
# the C++ side reads: safetensors (F32/F16/BF16/F8_E4M3 write; also F64/I32/I64 read), float8 e4m3 codes and
# Hugging Face's fine-grained FP8 blocks, the Hugging Face GPT-2 folder (Conv1D weights stored transposed,
# (in, out)), and llm.c token shards (256 int32 header, then tokens).
# Module names mirror the HF tensor names (wte, h.{i}.attn.c_attn, ...), so state_dict() keys are the
# HF keys. Logits use the first V rows of the tied wte only; Tessera's padded rows are never predicted.
import json
import math
import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

LAYER_NORM_EPS = 1e-5


@dataclass
class GPT2Config:
    num_layers: int = 2     # L
    num_heads: int = 2      # NH
    channels: int = 32      # C
    vocab_size: int = 300   # V
    max_seq_len: int = 32   # maxT

    @property
    def head_size(self):    # HS
        return self.channels // self.num_heads


class CausalSelfAttention(nn.Module):
    """qkv = x W_attn^T + b (B,T,3C), split q|k|v, each into NH heads of HS; y = softmax(q k^T / sqrt(HS)
    + causal mask) v, heads concatenated back to (B,T,C), then c_proj."""

    def __init__(self, cfg):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.c_attn = nn.Linear(cfg.channels, 3 * cfg.channels)
        self.c_proj = nn.Linear(cfg.channels, cfg.channels)
        # Additive mask (maxT, maxT): 0 on and below the diagonal, -inf above. Not a parameter.
        mask = torch.full((cfg.max_seq_len, cfg.max_seq_len), float("-inf")).triu(1)
        self.register_buffer("mask_bias", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        NH, HS = self.num_heads, C // self.num_heads
        q, k, v = self.c_attn(x).split(C, dim=2)                              # each (B,T,C)
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2).reshape(B * NH, T, HS) for t in (q, k, v))
        # torch 1.13 has no public F.scaled_dot_product_attention, so this is the standard masked
        # softmax; baddbmm folds the 1/sqrt(HS) scale and the causal mask into the QK^T GEMM.
        att = torch.baddbmm(self.mask_bias[:T, :T], q, k.transpose(1, 2), beta=1.0,
                            alpha=1.0 / math.sqrt(HS))                         # (B*NH,T,T)
        y = torch.bmm(att.softmax(dim=-1), v)                                  # (B*NH,T,HS)
        y = y.view(B, NH, T, HS).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    """c_proj(gelu_tanh(c_fc x)), both with biases; c_fc (F, C), c_proj (C, F), F = hidden (default 4C, GPT-2's).
    Also Starcoder2's MLP (torch_llama, F = intermediate_size; HF's gelu_pytorch_tanh)."""

    def __init__(self, cfg, hidden=None):
        super().__init__()
        hidden = hidden or 4 * cfg.channels
        self.c_fc = nn.Linear(cfg.channels, hidden)
        self.c_proj = nn.Linear(hidden, cfg.channels)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.channels, eps=LAYER_NORM_EPS)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.channels, eps=LAYER_NORM_EPS)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.channels)     # (V,C), tied with the output layer
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.channels)    # (maxT,C)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.num_layers)])
        self.ln_f = nn.LayerNorm(cfg.channels, eps=LAYER_NORM_EPS)

    def forward(self, idx, targets=None):
        """idx, targets: (B,T) int64. Returns logits (B,T,V) and, with targets, the mean token loss."""
        B, T = idx.shape
        assert T <= self.cfg.max_seq_len, f"sequence length {T} exceeds context {self.cfg.max_seq_len}"
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss


def init_weights(model, generator, random_affine=True):
    """GPT-2 init: Linear/embedding weights N(0, 0.02), the residual projections (attn.c_proj,
    mlp.c_proj) N(0, 0.02/sqrt(2L)). With random_affine, biases are N(0, 0.02) and LayerNorm gains
    1 + N(0, 0.1) so that a test exercises them; otherwise biases 0 and gains 1."""
    std_resid = 0.02 / math.sqrt(2 * model.cfg.num_layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_layernorm = name.startswith("ln_") or ".ln_" in name
            if p.dim() >= 2:
                p.normal_(0.0, std_resid if name.endswith("c_proj.weight") else 0.02, generator=generator)
            elif is_layernorm and name.endswith(".weight"):
                p.fill_(1.0)
                if random_affine:
                    p.add_(0.1 * torch.randn(p.shape, generator=generator))
            elif random_affine:
                p.normal_(0.0, 0.02, generator=generator)
            else:
                p.zero_()


def make_optimizer(model, lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, foreach=None):
    """AdamW with decoupled weight decay on tensors of >= 2 dims (wte, wpe, Linear weights) only."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=foreach)


def add_optimizer_args(p):
    """The golden runs' shared flags: AdamW, the lr schedule, clipping and the seed."""
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", choices=("constant", "cosine"), default="constant")
    p.add_argument("--warmup", type=int, default=0, help="warm-up steps (cosine schedule)")
    p.add_argument("--min-lr", type=float, default=0.0, help="final lr (cosine schedule)")
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0, help="global norm clip; <= 0 disables")
    p.add_argument("--seed", type=int, default=1)


def lr_at(step, lr, num_steps, schedule="constant", warmup=0, min_lr=0.0):
    """Learning rate of step (counting from 1). cosine: linear warm-up lr*step/warmup for
    step <= warmup, then lr -> min_lr along a half cosine, reaching min_lr at step num_steps."""
    if schedule == "constant":
        return lr
    if step <= warmup:
        return lr * step / warmup
    progress = (step - warmup) / max(1, num_steps - warmup)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


# ---------------------------------------------------------------- safetensors

_NP_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "F64": np.dtype("<f8"),
              "I32": np.dtype("<i4"), "I64": np.dtype("<i8"), "BF16": np.dtype("<u2"), "F8_E4M3": np.dtype("u1")}


def _float32_to_bf16_bits(a):
    """Round-to-nearest-even of float32 to bfloat16, as uint16 bit patterns (NaN kept NaN)."""
    flat = np.array(a, dtype="<f4").reshape(-1)  # 1-d so that 0-d inputs stay arrays
    u = flat.view("<u4").astype(np.uint64)
    one, sixteen = np.uint64(1), np.uint64(16)
    bits = ((u + np.uint64(0x7FFF) + ((u >> sixteen) & one)) >> sixteen).astype("<u2")
    bits[np.isnan(flat)] = 0x7FC0
    return bits.reshape(np.shape(a))


def _bf16_bits_to_float32(bits):
    flat = bits.reshape(-1).astype("<u4") << np.uint32(16)
    return flat.view("<f4").reshape(bits.shape)


def save_safetensors(path, tensors, dtype="F32", metadata=None, dtypes=None):
    """tensors: name -> tensor/array, written in the given order. Header = 8-byte LE length, then
    JSON {name: {dtype, shape, data_offsets [begin, end) relative to the data}}, space-padded to a
    multiple of 8; then the raw little-endian data. dtype F32 (default), F16 or BF16; dtypes (name ->
    dtype) overrides it per tensor, and F8_E4M3 there takes the raw uint8 codes (e4m3_encode)."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t in tensors.items():
        dt = (dtypes or {}).get(name, dtype)
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        if dt == "F8_E4M3":
            if a.dtype != np.uint8:
                raise ValueError(f"save_safetensors: F8_E4M3 tensor {name} must be uint8 codes, not {a.dtype}")
            a = np.array(a, order="C")
            raw = a.tobytes()
        else:
            a = np.array(a, dtype=np.float32, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
            if dt == "BF16":
                raw = _float32_to_bf16_bits(a).tobytes()
            elif dt in ("F32", "F16"):
                raw = a.astype(_NP_DTYPES[dt]).tobytes()
            else:
                raise ValueError(f"save_safetensors: unsupported dtype {dt}")
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load_safetensors(path, with_dtypes=False):
    """name -> float32 torch tensor (F16, BF16 and F64 converted; I32/I64 kept as integers; F8_E4M3 kept
    as its raw codes, a torch.uint8 tensor: decode with e4m3_decode). Checks every tensor's byte range
    against its shape and the file size."""
    with open(path, "rb") as f:
        buf = f.read()
    n = int.from_bytes(buf[:8], "little")
    if 8 + n > len(buf):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    data = memoryview(buf)[8 + n:]
    out, dtypes = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in _NP_DTYPES:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * _NP_DTYPES[dt].itemsize
        if end - begin != nbytes or end > len(data) or begin < 0:
            raise ValueError(f"{path}: tensor {name} offsets [{begin},{end}) do not fit shape {shape}")
        a = np.frombuffer(data[begin:end], dtype=_NP_DTYPES[dt]).reshape(shape)
        if dt == "BF16":
            a = _bf16_bits_to_float32(a)
        elif dt in ("F16", "F64"):
            a = a.astype(np.float32)
        out[name] = torch.from_numpy(a.copy())
        dtypes[name] = dt
    return (out, dtypes) if with_dtypes else out


def write_json(path, obj):
    """obj as JSON at path, indented by 2, with a final newline: config.json's and expected.json's form."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def save_hf_folder(folder, config, tensors, dtype="F32", dtypes=None):
    """A Hugging Face folder as every save_hf here writes it (created if need be): folder/config.json (config,
    write_json) and folder/model.safetensors (tensors in their order, save_safetensors' dtype and dtypes, metadata
    {"format": "pt"})."""
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, "config.json"), config)
    save_safetensors(os.path.join(folder, "model.safetensors"), tensors, dtype=dtype, metadata={"format": "pt"},
                     dtypes=dtypes)


def load_hf_folder(folder, config_from_hf, build, dtype=torch.float64, edit=None, tied_head="lm_head.weight"):
    """A model from a Hugging Face folder (one model.safetensors) as every load_hf but GPT-2's reads it: cfg =
    config_from_hf(config.json's dict), build(cfg) in dtype, loaded strictly from the file's tensors (each cast to
    dtype), after edit(state, cfg) when given (a family's own renames and skips); when cfg ties the embeddings, the
    head's tensor tied_head is skipped if the file has one."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = config_from_hf(json.load(f))
    model = build(cfg).to(dtype)
    state = load_safetensors(os.path.join(folder, "model.safetensors"))
    if edit is not None:
        state = edit(state, cfg)
    if cfg.tie_word_embeddings:
        state.pop(tied_head, None)
    model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True)
    return model


# ---------------------------------------------------------------- float8 e4m3 and fine-grained FP8

def _e4m3_table():
    """The values of the 256 codes of OCP float8 e4m3fn (torch's float8_e4m3fn), from the format: sign bit, 4
    exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal, m/8 * 2^-6; no infinities; 0x7f and 0xff
    are NaN, so the largest value is 0x7e = 448."""
    codes = np.arange(256)
    e, m = (codes >> 3) & 0xF, codes & 0x7
    mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * 2.0 ** (e - 7.0))
    mag[(e == 15) & (m == 7)] = np.nan
    return (np.where(codes & 0x80, -1.0, 1.0) * mag).astype(np.float32)


E4M3_VALUES = _e4m3_table()         # code -> float32 value
E4M3_MAX = 448.0
# The midpoints between the positive values of codes c and c + 1 (c = 0 .. 0x7d), ascending and exact in float64.
_E4M3_MIDPOINTS = (E4M3_VALUES[:0x7E].astype(np.float64) + E4M3_VALUES[1:0x7F]) / 2


def e4m3_decode(codes):
    """uint8 codes -> their float32 values (a table look-up)."""
    return E4M3_VALUES[np.asarray(codes, dtype=np.uint8)]


def e4m3_encode(x):
    """The e4m3 codes (uint8) nearest to x: ties to the even code, |x| above 448 (infinities too) saturates to
    0x7e / 0xfe, NaN gives 0x7f, and -0.0 keeps its sign (0x80)."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    code = np.searchsorted(_E4M3_MIDPOINTS, a, side="left")     # the count of midpoints below |x|: 0 .. 0x7e
    tie = _E4M3_MIDPOINTS[np.minimum(code, _E4M3_MIDPOINTS.size - 1)] == a
    code = code + (tie & (code % 2 == 1))                        # a tie between codes c and c + 1 takes the even
    code = np.where(np.signbit(x), code | 0x80, code)
    return np.where(np.isnan(x), 0x7F, code).astype(np.uint8)


def fp8_block_quantize(w, block):
    """Hugging Face's fine-grained FP8 (DeepSeek-V3's weight_block_size) of a 2-D array w (out, in), rounded to
    float32 first, in R x C blocks (block = (R, C); the last row and column of blocks may be partial). Per block,
    in float32: scale_inv = amax|w_block| / 448 (1 for an all-zero block) and codes = e4m3_encode(w_block /
    scale_inv), where a quotient just above 448 saturates. Returns codes (uint8, (out, in)) and scale_inv
    (float32, (ceil(out/R), ceil(in/C)))."""
    w = np.asarray(w, dtype=np.float32)
    R, C = block
    scale_inv = np.ones((-(-w.shape[0] // R), -(-w.shape[1] // C)), dtype=np.float32)
    codes = np.empty(w.shape, dtype=np.uint8)
    for i in range(scale_inv.shape[0]):
        for j in range(scale_inv.shape[1]):
            rows, cols = slice(i * R, (i + 1) * R), slice(j * C, (j + 1) * C)
            amax = np.abs(w[rows, cols]).max()
            if amax > 0:
                scale_inv[i, j] = amax / np.float32(E4M3_MAX)
            codes[rows, cols] = e4m3_encode(w[rows, cols] / scale_inv[i, j])
    return codes, scale_inv


def fp8_block_dequantize(codes, scale_inv, block):
    """What a loader reads from fp8_block_quantize's output: float32(e4m3 value) * float32(scale_inv of the
    code's block), one float32 multiplication. Returns float32 (out, in)."""
    R, C = block
    scale = np.repeat(np.repeat(np.asarray(scale_inv, dtype=np.float32), R, axis=0), C, axis=1)
    return e4m3_decode(codes) * scale[:codes.shape[0], :codes.shape[1]]


# ---------------------------------------------------------------- Hugging Face GPT-2 folder

_CONV1D_SUFFIXES = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def _is_conv1d_weight(name):
    return name.endswith(_CONV1D_SUFFIXES)


def save_hf(model, folder, dtype="F32"):
    """folder/config.json + folder/model.safetensors with HF GPT2Model names (no 'transformer.'
    prefix, no lm_head: it is tied). Conv1D weights are written as the transpose (in, out)."""
    cfg = model.cfg
    config = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "n_layer": cfg.num_layers, "n_head": cfg.num_heads, "n_embd": cfg.channels,
        "vocab_size": cfg.vocab_size, "n_positions": cfg.max_seq_len, "n_ctx": cfg.max_seq_len,
        "activation_function": "gelu_new", "layer_norm_epsilon": LAYER_NORM_EPS,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02, "tie_word_embeddings": True,
    }
    tensors = {name: (t.t().contiguous() if _is_conv1d_weight(name) else t)
               for name, t in model.state_dict().items()}
    save_hf_folder(folder, config, tensors, dtype=dtype)


def load_hf(folder):
    """Builds a GPT2 from an HF folder. Accepts the 'transformer.' prefix and ignores lm_head.weight
    (tied) and the attn.bias / attn.masked_bias buffers that older checkpoints carry."""
    with open(os.path.join(folder, "config.json")) as f:
        c = json.load(f)
    if c.get("model_type", "gpt2") != "gpt2" or c.get("activation_function", "gelu_new") != "gelu_new":
        raise ValueError(f"{folder}: not a gelu_new GPT-2 config")
    cfg = GPT2Config(num_layers=c["n_layer"], num_heads=c["n_head"], channels=c["n_embd"],
                     vocab_size=c["vocab_size"], max_seq_len=c["n_positions"])
    model = GPT2(cfg)
    state = {}
    for name, t in load_safetensors(os.path.join(folder, "model.safetensors")).items():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        if name == "lm_head.weight" or name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        state[name] = t.t().contiguous() if _is_conv1d_weight(name) else t
    model.load_state_dict(state, strict=True)
    return model


# ---------------------------------------------------------------- llm.c token shards

SHARD_MAGIC = 20240520


def write_token_shard(path, tokens, version=2):
    """256 int32 LE header (magic, version, token count, zeros), then tokens as uint16 (version 1)
    or uint32 (version 2), little-endian."""
    tokens = np.asarray(tokens, dtype=np.int64)
    limit = 1 << (16 if version == 1 else 32)
    if version not in (1, 2) or tokens.size and (tokens.min() < 0 or tokens.max() >= limit):
        raise ValueError(f"write_token_shard: tokens do not fit version {version}")
    header = np.zeros(256, dtype="<i4")
    header[:3] = (SHARD_MAGIC, version, tokens.size)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2" if version == 1 else "<u4").tobytes())


def read_token_shard(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        if header[0] != SHARD_MAGIC or header[1] not in (1, 2):
            raise ValueError(f"{path}: not an llm.c token shard")
        tokens = np.frombuffer(f.read(), dtype="<u2" if header[1] == 1 else "<u4")
    if tokens.size != header[2]:
        raise ValueError(f"{path}: header says {header[2]} tokens, file holds {tokens.size}")
    return tokens.astype(np.int64)
