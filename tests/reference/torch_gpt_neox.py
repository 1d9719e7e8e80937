# Plain-PyTorch GPT-NeoX (Hugging Face's GPTNeoXForCausalLM, model_type gpt_neox: Pythia, GPT-NeoX-20B) in float64:
# the reference that Tessera's GPT-NeoX import is checked against, as transformers' modeling_gpt_neox.py computes it.
# Module names are HF's tensor names (gpt_neox.embed_in, gpt_neox.layers.{l}.attention.query_key_value, ...,
# gpt_neox.final_layer_norm, embed_out), so state_dict() keys are the keys of model.safetensors (no embed_out when the
# embeddings are tied). Each layer: nn.LayerNorms (weight and bias) before the attention and the MLP, a fused
# query_key_value whose 3C rows are interleaved per head ([q_h | k_h | v_h] for each head h in turn), RoPE (rotate_half)
# on the first int(HS * rotary_pct) channels of each q and k head only, biased attention.dense, an MLP
# dense_4h_to_h(gelu(dense_h_to_4h x)) with the exact (erf) GELU, and a parallel residual (x + attn(ln1 x) + mlp(ln2
# x)) or, with use_parallel_residual false, the sequential one. The RoPE, causal mask and attention come from
# torch_llama, file formats from torch_gpt2. CausalLM (the ForCausalLM head and forward), check_fields, check_rotary
# and objective serve torch_cohere and torch_phi too.
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_gpt2 as tg
import torch_llama as tl

# The buffers that older transformers (Pythia's releases, 4.2x) stored in the checkpoints: the causal mask, its fill
# value and RoPE's inv_freq, per layer. load_hf skips them.
OLD_BUFFERS = (".attention.bias", ".attention.masked_bias", ".attention.rotary_emb.inv_freq")


class DenseConfig:
    """What GPTNeoXConfig and torch_cohere's and torch_phi's configs share: HS = C / NH, R = int(HS * the partial
    rotary share, the field named ROTARY) (HF's int(); every channel without one), dense, and torch_cohere.Attention's
    questions for a layer: causal, with RoPE (Cohere2Config answers otherwise)."""
    ROTARY = None                   # rotary_pct, partial_rotary_factor

    @property
    def head_size(self):            # HS
        return self.channels // self.num_heads

    @property
    def rotary_dim(self):           # R: the leading q/k channels of each head that RoPE rotates
        return int(self.head_size * getattr(self, self.ROTARY)) if self.ROTARY else self.head_size

    @property
    def is_moe(self):               # dense (make_hf_llama_reference asks every model)
        return False

    def layer_window(self, layer):  # layer's window W (query i sees keys i - W < j <= i), or None: causal
        return None

    def uses_rope(self, layer):     # whether layer rotates q and k
        return True


@dataclass
class GPTNeoXConfig(DenseConfig):
    num_layers: int = 2             # L
    num_heads: int = 2              # NH (no grouped kv heads: every head has its own k and v); 2: HS 16, R 4
    channels: int = 32              # C; HS = C / NH
    intermediate: int = 128         # F (GPT-NeoX's is 4C)
    vocab_size: int = 300           # V
    max_seq_len: int = 32           # maxT (max_position_embeddings)
    layer_norm_eps: float = 1e-5
    rope_theta: float = 10000.0     # config.json's rotary_emb_base (and rope_theta)
    rotary_pct: float = 0.25        # RoPE on the first int(HS * this) channels of each q/k head
    use_parallel_residual: bool = True
    tie_word_embeddings: bool = False
    ROTARY = "rotary_pct"

    def __post_init__(self):
        check_fields(self, "gpt_neox", ("num_layers", "num_heads", "channels", "intermediate", "vocab_size",
                                        "max_seq_len"), ("rope_theta", "layer_norm_eps"))
        if self.channels % self.num_heads:
            raise ValueError(f"gpt_neox: num_heads {self.num_heads} must divide hidden_size {self.channels}")
        check_rotary(self, "gpt_neox")


def check_fields(cfg, kind, integers, numbers):
    """What the configs here (GPTNeoXConfig, torch_cohere's, torch_phi's) ask of their sizes and constants: each of
    cfg's fields integers a positive integer (not a bool), each of numbers a positive finite number; ValueError naming
    the model (kind) otherwise."""
    for name in integers:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{kind}: {name} {v!r} must be a positive integer")
    for name in numbers:
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
            raise ValueError(f"{kind}: {name} {v!r} must be a positive number")


def check_rotary(cfg, kind):
    """cfg's partial rotary share (the field cfg.ROTARY: rotary_pct, partial_rotary_factor) in (0, 1] and its rotary
    width cfg.rotary_dim = int(HS * share) even and positive; ValueError naming the model (kind) otherwise."""
    key = cfg.ROTARY
    share, R = getattr(cfg, key), cfg.rotary_dim
    if not 0 < share <= 1 or R <= 0 or R % 2:
        raise ValueError(f"{kind}: {key} {share}: int(HS {cfg.head_size} * {key}) = {R} rotary channels, which must "
                         f"be even and positive ({key} in (0, 1])")


def check_hf_config(c, kinds, act, false_keys=(), true_keys=()):
    """What the config_from_hf here refuse alike in a config.json c: a model_type not in kinds, a hidden_act other
    than act (absent: act), any of false_keys true, any of true_keys false (absent: true), a rope_scaling other than
    null. Returns the model_type."""
    kind = c.get("model_type")
    if kind not in kinds:
        raise ValueError(f"not a {' or '.join(kinds)} config: model_type {kind}")
    if c.get("hidden_act", act) != act:
        raise ValueError(f"{kind}: hidden_act {c['hidden_act']} is not modelled (only {act})")
    for key in false_keys:
        if c.get(key, False):
            raise ValueError(f"{kind}: {key} true is not modelled (only false)")
    for key in true_keys:
        if not c.get(key, True):
            raise ValueError(f"{kind}: {key} false is not modelled (only true)")
    if c.get("rope_scaling") is not None:
        raise ValueError(f"{kind}: rope_scaling {c['rope_scaling']} is not modelled (only null)")
    return kind


def hf_heads(c, channels, heads):
    """A config.json c's hidden_size and num_attention_heads (absent: channels, heads) and num_key_value_heads (absent
    or null: the heads), refusing a head_dim other than hidden_size / heads (HS = C / NH)."""
    C, NH, NKV = c.get("hidden_size", channels), c.get("num_attention_heads", heads), c.get("num_key_value_heads")
    if c.get("head_dim") not in (None, C // NH):
        raise ValueError(f"{c.get('model_type')}: head_dim {c['head_dim']} is not modelled (only hidden_size / heads, "
                         f"{C // NH})")
    return C, NH, NH if NKV is None else NKV


# ---------------------------------------------------------------- the fused qkv's layout

def qkv_parts(t, num_heads):
    """query_key_value's weight (3C, C) or bias (3C) -> (q, k, v), each (C, C) or (C): HF's rows are interleaved per
    head, row h*3*HS + p*HS + d holding head h's part p (0 q, 1 k, 2 v), channel d; part p's head h is rows [h*HS,
    (h+1)*HS) of the result. torch.cat of the three is Tessera's packed [q | k | v]."""
    HS = t.size(0) // (3 * num_heads)
    parts = t.reshape(num_heads, 3, HS, *t.shape[1:])
    return tuple(parts[:, p].reshape(num_heads * HS, *t.shape[1:]) for p in range(3))


def qkv_interleave(q, k, v, num_heads):
    """qkv_parts' inverse: q, k, v (C, C) or (C) -> HF's per-head interleaved query_key_value rows (3C, ...)."""
    HS = q.size(0) // num_heads
    return torch.stack([t.reshape(num_heads, HS, *t.shape[1:]) for t in (q, k, v)], dim=1).reshape(-1, *q.shape[1:])


# ---------------------------------------------------------------- blocks

class Attention(nn.Module):
    """HF's GPTNeoXAttention: qkv = query_key_value(x) (B, T, 3C) viewed as (B, T, NH, 3*HS), q, k, v = its thirds
    per head; RoPE on q's and k's first R channels (cos and sin R wide; tl.apply_rope passes the rest); scores q.k *
    HS^-0.5, causal softmax (tl.attend, every head its own k and v); then dense (biased)."""

    def __init__(self, cfg):
        super().__init__()
        self.num_heads, self.head_size, C = cfg.num_heads, cfg.head_size, cfg.channels
        self.scale = cfg.head_size ** -0.5
        self.query_key_value = nn.Linear(C, 3 * C)     # (3C, C), rows interleaved per head
        self.dense = nn.Linear(C, C)                   # (C, C)
        self.register_buffer("mask_bias", tl.causal_mask_bias(cfg.max_seq_len), persistent=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        NH, HS = self.num_heads, self.head_size
        qkv = self.query_key_value(x).view(B, T, NH, 3 * HS).transpose(1, 2)     # (B,NH,T,3HS)
        q, k, v = qkv.split(HS, dim=-1)                                          # each (B,NH,T,HS)
        q, k = tl.apply_rope(q, cos, sin), tl.apply_rope(k, cos, sin)
        return tl.attend(q, k, v, self.mask_bias, self.dense, self.scale)


class MLP(nn.Module):
    """HF's GPTNeoXMLP: dense_4h_to_h(gelu(dense_h_to_4h x)), both biased, gelu (act) the exact erf form (hidden_act
    "gelu"); dense_h_to_4h (F, C), dense_4h_to_h (C, F). Also torch_phi's PhiMLP: the two named IN and OUT, its act."""
    IN, OUT = "dense_h_to_4h", "dense_4h_to_h"

    def __init__(self, cfg):
        super().__init__()
        self.add_module(self.IN, nn.Linear(cfg.channels, cfg.intermediate))
        self.add_module(self.OUT, nn.Linear(cfg.intermediate, cfg.channels))

    def act(self, u):
        return F.gelu(u)

    def forward(self, x):
        return getattr(self, self.OUT)(self.act(getattr(self, self.IN)(x)))


class Layer(nn.Module):
    """HF's GPTNeoXLayer, modules in its order: parallel (use_parallel_residual) out = mlp(post_attention_layernorm(x))
    + attn(input_layernorm(x)) + x; sequential h = attn(input_layernorm(x)) + x, out = mlp(post_attention_layernorm(h))
    + h (HF's order of the additions). nn.LayerNorms with weight and bias, eps layer_norm_eps; no dropout."""

    def __init__(self, cfg):
        super().__init__()
        self.use_parallel_residual = cfg.use_parallel_residual
        self.input_layernorm = nn.LayerNorm(cfg.channels, eps=cfg.layer_norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.channels, eps=cfg.layer_norm_eps)
        self.attention = Attention(cfg)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin):
        attn = self.attention(self.input_layernorm(x), cos, sin)
        if self.use_parallel_residual:
            return self.mlp(self.post_attention_layernorm(x)) + attn + x
        h = attn + x
        return self.mlp(self.post_attention_layernorm(h)) + h


class Model(nn.Module):
    """HF's GPTNeoXModel: the tensors under the "gpt_neox." prefix (embed_in, layers, final_layer_norm)."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_in = nn.Embedding(cfg.vocab_size, cfg.channels)              # (V,C)
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_layers)])
        self.final_layer_norm = nn.LayerNorm(cfg.channels, eps=cfg.layer_norm_eps)


class CausalLM(nn.Module):
    """What GPTNeoXForCausalLM, CohereForCausalLM (torch_cohere) and PhiForCausalLM (torch_phi) share: the body, an HF
    *Model under the attribute BODY (its embedding EMBED, its layers, each taking (x, cos, sin), its final norm NORM),
    then the head HEAD (V, C), biased with HEAD_BIAS, absent when tied (the head is then the embedding's weight, no
    bias). RoPE: inv_freq[i] = rope_theta^(-2i/R) over R = rotary_dim channels (float64, a plain attribute), the same in
    every layer; rope(T) lays cos and sin out for rotate_half (Cohere overrides it). forward returns (logits(idx), [])
    as torch_llama's dense models do."""
    BODY, EMBED, NORM, HEAD = "model", "embed_tokens", "norm", "lm_head"
    HEAD_BIAS = False

    def __init__(self, cfg, body, rotary_dim):
        super().__init__()
        self.cfg = cfg
        self.add_module(self.BODY, body)
        if not cfg.tie_word_embeddings:
            self.add_module(self.HEAD, nn.Linear(cfg.channels, cfg.vocab_size, bias=self.HEAD_BIAS))    # (V,C)
        self.inv_freq = tl.rope_inv_freq(rotary_dim, cfg.rope_theta)                                 # (R/2)

    def rope(self, T):
        """cos, sin (T, R) float64 for positions 0..T-1."""
        return tl.rope_cos_sin(self.inv_freq, T)

    def hidden(self, idx):
        """The body's output (HF's last_hidden_state) for idx (B, T): the blocks on embed(idx), with cos and sin cast
        to the weights' dtype, then the final norm; (B, T, C)."""
        B, T = idx.shape
        assert T <= self.cfg.max_seq_len, f"sequence length {T} exceeds context {self.cfg.max_seq_len}"
        body = getattr(self, self.BODY)
        norm = getattr(body, self.NORM)
        cos, sin = (t.to(norm.weight.dtype) for t in self.rope(T))
        x = getattr(body, self.EMBED)(idx)
        for layer in body.layers:
            x = layer(x, cos, sin)
        return norm(x)

    def logits(self, idx):
        """head(hidden(idx)), (B, T, V): the head's weight and bias, or the embedding's weight when tied."""
        h = self.hidden(idx)
        if self.cfg.tie_word_embeddings:
            return F.linear(h, getattr(getattr(self, self.BODY), self.EMBED).weight)
        head = getattr(self, self.HEAD)
        return F.linear(h, head.weight, head.bias)

    def forward(self, idx):
        return self.logits(idx), []


class GPTNeoX(CausalLM):
    """GPTNeoXForCausalLM: gpt_neox (Model), then embed_out (V, C, no bias), absent when tied (the head is then
    embed_in's weight); RoPE over the R = rotary_dim rotated channels (CausalLM's)."""
    BODY, EMBED, NORM, HEAD = "gpt_neox", "embed_in", "final_layer_norm", "embed_out"

    def __init__(self, cfg):
        super().__init__(cfg, Model(cfg), cfg.rotary_dim)


def objective(model, idx, targets, aux_coef=0.0, z_coef=0.0):
    """torch_llama.objective's tuple for a dense model: (ce, ce, 0, 0, []), ce the mean token cross-entropy over V (no
    router, so no aux or z loss; the coefficients are ignored)."""
    logits, _ = model(idx)
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    zero = torch.zeros((), dtype=torch.float64)
    return ce, ce, zero, zero, []


# Wider than the usual 0.02 (and 0.02/sqrt(2L)), so that the tiny runs notice what they test (README.md's "GPT-NeoX"):
# query_key_value N(0, 0.1), whose scores (about 0.02 at 0.02: attention nearly uniform, positions barely matter) then
# let RoPE's layout, width and frequencies show; the MLP as Gemma (1)'s gate and down (torch_llama.GEMMA_GATE_STD,
# GEMMA_DOWN_STD): dense_h_to_4h N(0, 0.32), dense_4h_to_h N(0, 0.08/sqrt(2L)), whose pre-activations (std about 1.8 at
# C = 32) sit where the exact GELU and its tanh form differ most (at 0.02 they are about 0.15, and agree to 1e-5).
GPT_NEOX_QKV_STD = 0.1
GPT_NEOX_H_TO_4H_STD, GPT_NEOX_4H_TO_H_STD = tl.GEMMA_GATE_STD, tl.GEMMA_DOWN_STD


def init_weights(model, generator, router_std=None):
    """In named_parameters() order: embed_in and embed_out weights N(0, 0.02); query_key_value N(0, GPT_NEOX_QKV_STD);
    attention.dense N(0, 0.02/sqrt(2L)); dense_h_to_4h N(0, GPT_NEOX_H_TO_4H_STD), dense_4h_to_h N(0,
    GPT_NEOX_4H_TO_H_STD/sqrt(2L));
    LayerNorm weights 1 + N(0, 0.1); every bias (query_key_value, dense, the MLP's, the LayerNorms') N(0, 0.1), so that
    a dropped one shows. Each then rounded to float32 (kept in the model's dtype). router_std: torch_llama's
    signature; there is no router."""
    root = math.sqrt(2 * model.cfg.num_layers)
    tl.init_parameters(model, generator, (("mlp.dense_h_to_4h.weight", GPT_NEOX_H_TO_4H_STD),
                                          ("mlp.dense_4h_to_h.weight", GPT_NEOX_4H_TO_H_STD / root),
                                          ("attention.query_key_value.weight", GPT_NEOX_QKV_STD),
                                          ("attention.dense.weight", 0.02 / root)))


# ---------------------------------------------------------------- Hugging Face folder

def hf_config(cfg):
    """config.json of GPTNeoXForCausalLM as GPTNeoXConfig's keys spell them (model_type gpt_neox): no head_dim (HS =
    hidden_size / num_attention_heads), rotary_pct and rotary_emb_base (Pythia's keys, what transformers 4.x and 5.x
    read) plus rope_theta with the same value (transformers 4.48+ reads it over rotary_emb_base when given),
    layer_norm_eps, use_parallel_residual, hidden_act gelu (exact), attention_bias true, the dropouts 0.0, Pythia's
    token ids (bos 0, eos 0), no rope_scaling."""
    return {"architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
            "hidden_size": cfg.channels, "intermediate_size": cfg.intermediate, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.max_seq_len, "rotary_pct": cfg.rotary_pct,
            "rotary_emb_base": cfg.rope_theta, "rope_theta": cfg.rope_theta, "rope_scaling": None,
            "layer_norm_eps": cfg.layer_norm_eps, "use_parallel_residual": cfg.use_parallel_residual,
            "hidden_act": "gelu", "attention_bias": True, "attention_dropout": 0.0, "hidden_dropout": 0.0,
            "tie_word_embeddings": cfg.tie_word_embeddings, "initializer_range": 0.02, "bos_token_id": 0,
            "eos_token_id": 0, "torch_dtype": "float32"}


def agreed(c, keys, default, model="gpt_neox"):
    """The one value that c gives under any of keys (None counts as absent), or default; ValueError when two
    disagree."""
    given = {key: c[key] for key in keys if c.get(key) is not None}
    if len(set(given.values())) > 1:
        raise ValueError(f"{model}: {given} disagree")
    return next(iter(given.values())) if given else default


def config_from_hf(c):
    """A gpt_neox config.json -> GPTNeoXConfig, with GPTNeoXConfig's defaults (GPT-NeoX-20B's shapes) for absent keys:
    50432 tokens, C 6144, F 24576, 44 layers, 64 heads, 2048 positions, rotary_pct 0.25, base 1e4, layer_norm_eps
    1e-5, parallel residual, untied. The RoPE base is rotary_emb_base, rope_theta or transformers 5's
    rope_parameters' rope_theta, the rotary share rotary_pct, partial_rotary_factor or rope_parameters'
    partial_rotary_factor: those given must agree. The dropouts are read and ignored. Refused: model_type other than
    gpt_neox, hidden_act other than gelu (GPT-NeoX-20B's gelu_fast, the tanh form, included), attention_bias false, a
    rope_scaling or another rope type."""
    check_hf_config(c, ("gpt_neox",), "gelu", true_keys=("attention_bias",))
    params = tl.default_rope_parameters(c, "gpt_neox", ("rope_theta", "partial_rotary_factor"))
    theta = agreed(dict(c, rope_theta=params["rope_theta"]), ("rotary_emb_base", "rope_theta"), 10000.0)
    pct = agreed(dict(c, partial_rotary_factor=params["partial_rotary_factor"]),
                 ("rotary_pct", "partial_rotary_factor"), 0.25)
    return GPTNeoXConfig(
        num_layers=c.get("num_hidden_layers", 44), num_heads=c.get("num_attention_heads", 64),
        channels=c.get("hidden_size", 6144), intermediate=c.get("intermediate_size", 24576),
        vocab_size=c.get("vocab_size", 50432), max_seq_len=c.get("max_position_embeddings", 2048),
        layer_norm_eps=c.get("layer_norm_eps", 1e-5), rope_theta=theta, rotary_pct=pct,
        use_parallel_residual=bool(c.get("use_parallel_residual", True)),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", False)))


def save_hf(model, folder):
    """folder/config.json + folder/model.safetensors (F32, HF names, query_key_value in HF's per-head interleaved
    order, no embed_out when tied)."""
    tg.save_hf_folder(folder, hf_config(model.cfg), model.state_dict())


def load_hf(folder, dtype=torch.float64):
    """Builds a GPTNeoX from an HF folder (one model.safetensors). The old checkpoints' buffers (OLD_BUFFERS) are
    skipped, and a tied model's embed_out.weight, if the file has one."""
    return tg.load_hf_folder(folder, config_from_hf, GPTNeoX, dtype,
                             lambda state, cfg: {k: v for k, v in state.items() if not k.endswith(OLD_BUFFERS)},
                             "embed_out.weight")
