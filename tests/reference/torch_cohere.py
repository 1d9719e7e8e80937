# Plain-PyTorch Cohere (Hugging Face's CohereForCausalLM, model_type cohere: Command-R v01 and 08-2024, Aya-23, Aya
# Expanse) in float64: the reference that Tessera's Cohere import is checked against, as transformers'
# modeling_cohere.py computes it. Module names are HF's tensor names (model.embed_tokens, model.layers.{l}.self_attn.
# {q,k,v,o}_proj, .mlp.{gate,up,down}_proj, .input_layernorm, model.norm, lm_head), so state_dict() keys are the keys of
# model.safetensors (no lm_head when tied, Cohere's default). No biases anywhere. Each layer has ONE norm, a LayerNorm
# without bias (CohereLayerNorm), whose output feeds both sublayers: out = x + attn(h) + mlp(h), h = norm(x). The
# attention is Llama's grouped-query attention (scores times HS^-0.5, HS = C / NH) with RoPE over the whole head in
# INTERLEAVED pairs (2i, 2i+1) at frequency i (GPT-J's layout, not Llama's rotate_half); the MLP is Llama's SwiGLU; the
# logits are times logit_scale. inv_freq, cos and sin, the causal mask, the attention and the MLP come from
# torch_llama, the ForCausalLM head (CausalLM) and the dense objective from torch_gpt_neox, file formats from
# torch_gpt2.
# Cohere2 (Cohere2ForCausalLM, model_type cohere2: Command R7B, Command A; Cohere2Config below) is the same model, same
# tensors, with per-layer attention kinds (layer_types, by default torch_llama.gemma3_layer_types' rule from
# sliding_window_pattern P: layer i full when (i + 1) % P == 0): a sliding layer attends keys i - W < j <= i
# (W = sliding_window, torch_llama.causal_mask_bias's window) and rotates q and k; a full layer attends causally over
# everything and takes NO RoPE (q and k unrotated), as modeling_cohere2.py's "if self.sliding_window is not None".
import math
from dataclasses import dataclass

import torch
import torch.nn as nn

import torch_gpt2 as tg
import torch_gpt_neox as tn
import torch_llama as tl


@dataclass
class CohereConfig(tn.DenseConfig):
    num_layers: int = 2             # L
    num_heads: int = 4              # NH
    num_kv_heads: int = 2           # NKV, divides NH (query head h reads kv head h // (NH/NKV))
    channels: int = 32              # C; HS = C / NH (8: four RoPE pairs)
    intermediate: int = 48          # F
    vocab_size: int = 300           # V
    max_seq_len: int = 32           # maxT (max_position_embeddings)
    layer_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    logit_scale: float = 0.25       # logits = (norm(x) @ head^T) * this (Command-R's 0.0625; the tiny runs' 0.25)
    tie_word_embeddings: bool = True
    model_type = "cohere"           # config.json's (a class attribute, not a field)

    def __post_init__(self):
        kind = self.model_type
        tn.check_fields(self, kind, ("num_layers", "num_heads", "num_kv_heads", "channels", "intermediate",
                                     "vocab_size", "max_seq_len"), ("rope_theta", "layer_norm_eps", "logit_scale"))
        if self.channels % self.num_heads or self.head_size % 2 or self.num_heads % self.num_kv_heads:
            raise ValueError(f"{kind}: num_heads {self.num_heads} must divide hidden_size {self.channels} into an "
                             f"even head size, num_key_value_heads {self.num_kv_heads} divide num_heads")

    def is_sliding(self, layer):    # Cohere: no layer slides (Cohere2Config: by layer_types)
        return False


@dataclass
class Cohere2Config(CohereConfig):
    """Cohere2ForCausalLM's (model_type cohere2): CohereConfig's fields, then the window W, sliding_window_pattern P
    and layer_types ("sliding_attention" / "full_attention" per layer; () = torch_llama.gemma3_layer_types(L, P), layer
    i full when (i + 1) % P == 0, Cohere2Config's rule; given, they win over P, as in transformers). A sliding layer
    attends keys i - W < j <= i and takes RoPE; a full layer attends causally and takes none. The defaults are
    Cohere2Config's (W 4096, P 4: layers 3, 7, 11, ... full)."""
    sliding_window: int = 4096
    sliding_window_pattern: int = 4
    layer_types: tuple = ()
    model_type = "cohere2"

    def __post_init__(self):
        super().__post_init__()
        W, P = self.sliding_window, self.sliding_window_pattern
        if isinstance(W, bool) or not isinstance(W, int) or W < 1:
            raise ValueError(f"cohere2: sliding_window {W!r} must be a positive integer (null would leave the "
                             f"sliding layers without RoPE in transformers: not modelled)")
        if isinstance(P, bool) or not isinstance(P, int) or P < 1:
            raise ValueError(f"cohere2: sliding_window_pattern {P!r} must be a positive integer")
        self.layer_types = tuple(self.layer_types or tl.gemma3_layer_types(self.num_layers, P))
        if len(self.layer_types) != self.num_layers or any(t not in tl.GEMMA3_LAYER_TYPES for t in self.layer_types):
            raise ValueError(f"cohere2: layer_types {list(self.layer_types)}: one of {tl.GEMMA3_LAYER_TYPES} per "
                             f"layer ({self.num_layers})")

    def is_sliding(self, layer):    # layer_types[layer] is sliding_attention
        return self.layer_types[layer] == "sliding_attention"

    def layer_window(self, layer):  # sliding layers: W; full layers: None (causal over everything)
        return self.sliding_window if self.is_sliding(layer) else None

    def uses_rope(self, layer):     # RoPE in the sliding layers only (modeling_cohere2: "if self.sliding_window")
        return self.is_sliding(layer)


# ---------------------------------------------------------------- ops

class LayerNorm(nn.Module):
    """HF's CohereLayerNorm: a LayerNorm without bias, (x - mean) * rsqrt(mean((x - mean)^2) + eps) * weight (biased
    variance), in HF's order of operations."""

    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        variance = (x - mean).pow(2).mean(-1, keepdim=True)
        return self.weight * ((x - mean) * torch.rsqrt(variance + self.eps))


def rotate_pairs(x):
    """HF Cohere's rotate_half: each pair (x[2i], x[2i+1]) -> (-x[2i+1], x[2i])."""
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


def apply_rope(x, cos, sin):
    """x (B, H, T, HS), cos and sin (T, HS) in the interleaved layout (tl.rope_cos_sin(..., interleave=True)): pair
    (2i, 2i+1) turned by angle p * inv_freq[i], x' = x cos + rotate_pairs(x) sin."""
    return x * cos + rotate_pairs(x) * sin


# ---------------------------------------------------------------- blocks

class Attention(nn.Module):
    """HF's CohereAttention (attention_bias false, use_qk_norm false): q (NH heads), k and v (NKV heads) of HS channels,
    RoPE (rotate: apply_rope) on q and k, scores q.k * HS^-0.5, causal softmax, query head h reading kv head h //
    (NH/NKV) (tl.attend), heads concatenated, o_proj. Cohere2Attention: layer's kind by cfg.layer_window(layer) (the
    mask's window, tl.causal_mask_bias) and cfg.uses_rope(layer) (a full layer leaves q and k unrotated). Also
    torch_phi's PhiAttention: the output projection named OUT, all four projections biased with BIAS, its own
    rotate."""
    OUT, BIAS = "o_proj", False

    def __init__(self, cfg, layer=0):
        super().__init__()
        self.use_rope = cfg.uses_rope(layer)
        self.num_heads, self.num_kv_heads, self.head_size = cfg.num_heads, cfg.num_kv_heads, cfg.head_size
        C = cfg.channels
        self.scale = cfg.head_size ** -0.5
        self.q_proj = nn.Linear(C, cfg.num_heads * cfg.head_size, bias=self.BIAS)       # (NH*HS, C)
        self.k_proj = nn.Linear(C, cfg.num_kv_heads * cfg.head_size, bias=self.BIAS)    # (NKV*HS, C)
        self.v_proj = nn.Linear(C, cfg.num_kv_heads * cfg.head_size, bias=self.BIAS)    # (NKV*HS, C)
        self.add_module(self.OUT, nn.Linear(cfg.num_heads * cfg.head_size, C, bias=self.BIAS))    # (C, NH*HS)
        self.register_buffer("mask_bias", tl.causal_mask_bias(cfg.max_seq_len, cfg.layer_window(layer)),
                             persistent=False)

    def rotate(self, x, cos, sin):
        """RoPE on the heads x (B, H, T, HS): Cohere's interleaved pairs."""
        return apply_rope(x, cos, sin)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        HS = self.head_size
        q = self.q_proj(x).view(B, T, self.num_heads, HS).transpose(1, 2)          # (B,NH,T,HS)
        k = self.k_proj(x).view(B, T, self.num_kv_heads, HS).transpose(1, 2)       # (B,NKV,T,HS)
        v = self.v_proj(x).view(B, T, self.num_kv_heads, HS).transpose(1, 2)
        if self.use_rope:
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        return tl.attend(q, k, v, self.mask_bias, getattr(self, self.OUT), self.scale)


class DecoderLayer(nn.Module):
    """HF's CohereDecoderLayer, modules in its order (self_attn, mlp, input_layernorm): h = input_layernorm(x), out = x
    + attn(h) + mlp(h) (HF's order of the additions); mlp = Llama's SwiGLU down(silu(gate h) * up h). No dropout. Also
    Cohere2DecoderLayer (its attention by layer), and with other attention, mlp and norm classes torch_phi's."""

    def __init__(self, cfg, layer=0, attention=Attention, mlp=tl.MLP, norm=LayerNorm):
        super().__init__()
        self.self_attn = attention(cfg, layer)
        self.mlp = mlp(cfg)
        self.input_layernorm = norm(cfg.channels, cfg.layer_norm_eps)

    def forward(self, x, cos, sin):
        h = self.input_layernorm(x)
        return x + self.self_attn(h, cos, sin) + self.mlp(h)


class Model(nn.Module):
    """HF's CohereModel: the tensors under the "model." prefix (embed_tokens, layers, norm)."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.channels)          # (V,C)
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg.num_layers)])
        self.norm = LayerNorm(cfg.channels, cfg.layer_norm_eps)


class Cohere(tn.CausalLM):
    """CohereForCausalLM (torch_gpt_neox.CausalLM): model (Model), then lm_head (V, C, no bias), absent when tied (the
    head is then embed_tokens' weight); logits = (norm(x) @ head^T) * logit_scale, the loss's input. RoPE:
    inv_freq[i] = rope_theta^(-2i/HS) (float64, a plain attribute), cos and sin interleaved, the same in every layer
    (Cohere2: the layers that take RoPE). Also Cohere2ForCausalLM, given a Cohere2Config. forward returns (logits, [])
    as torch_llama's dense models do."""

    def __init__(self, cfg):
        super().__init__(cfg, Model(cfg), cfg.head_size)

    def rope(self, T):
        """cos, sin (T, HS) float64 for positions 0..T-1, channels 2i and 2i+1 at frequency i."""
        return tl.rope_cos_sin(self.inv_freq, T, interleave=True)

    def forward(self, idx):
        return self.logits(idx) * self.cfg.logit_scale, []


objective = tn.objective    # the dense objective: (ce, ce, 0, 0, []), ce on the scaled logits


# q_proj's and k_proj's init std, wider than the usual 0.02 so that the tiny runs notice RoPE's layout (README.md's
# "Cohere"): at 0.02 the scores are about 0.01 and attention is nearly uniform, so positions barely matter.
COHERE_QK_STD = 0.1


def init_weights(model, generator, router_std=None):
    """In named_parameters() order: q_proj and k_proj N(0, COHERE_QK_STD); o_proj and down_proj N(0, 0.02/sqrt(2L));
    every other matrix (embed_tokens, v_proj, gate_proj, up_proj, lm_head) N(0, 0.02); LayerNorm weights 1 + N(0,
    0.1). Each then rounded to float32 (kept in the model's dtype). router_std: torch_llama's signature; there is no
    router."""
    std_resid = 0.02 / math.sqrt(2 * model.cfg.num_layers)
    tl.init_parameters(model, generator, ((("self_attn.q_proj.weight", "self_attn.k_proj.weight"), COHERE_QK_STD),
                                          (("o_proj.weight", "down_proj.weight"), std_resid)))


# ---------------------------------------------------------------- Hugging Face folder

def hf_config(cfg):
    """config.json of CohereForCausalLM as CohereConfig's keys spell them (model_type cohere): no head_dim (HS =
    hidden_size / num_attention_heads), layer_norm_eps, logit_scale, rope_theta, rope_scaling null, use_qk_norm and
    attention_bias false, hidden_act silu, CohereConfig's token ids (bos 5, eos 255001: Command-R's, beyond a tiny
    vocabulary; nothing reads them here). A Cohere2Config's: Cohere2ForCausalLM, model_type cohere2, the same keys,
    then sliding_window, sliding_window_pattern (the key the Hub's configs carry, transformers 4.4x reads) and
    layer_types (what 4.5x and 5.x read first)."""
    cohere2 = isinstance(cfg, Cohere2Config)
    config = {"architectures": ["Cohere2ForCausalLM" if cohere2 else "CohereForCausalLM"],
              "model_type": cfg.model_type, "hidden_size": cfg.channels,
              "intermediate_size": cfg.intermediate, "num_attention_heads": cfg.num_heads,
              "num_key_value_heads": cfg.num_kv_heads, "num_hidden_layers": cfg.num_layers,
              "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_seq_len,
              "layer_norm_eps": cfg.layer_norm_eps, "logit_scale": cfg.logit_scale, "rope_theta": cfg.rope_theta,
              "rope_scaling": None, "use_qk_norm": False, "hidden_act": "silu", "attention_bias": False,
              "attention_dropout": 0.0, "tie_word_embeddings": cfg.tie_word_embeddings, "initializer_range": 0.02,
              "bos_token_id": 5, "eos_token_id": 255001, "torch_dtype": "float32"}
    if cohere2:
        config.update(sliding_window=cfg.sliding_window, sliding_window_pattern=cfg.sliding_window_pattern,
                      layer_types=list(cfg.layer_types))
    return config


def config_from_hf(c):
    """A cohere or cohere2 config.json -> CohereConfig or Cohere2Config, with transformers 4.x CohereConfig's defaults
    (Command-R v01's shapes; Cohere2Config's are the same) for absent keys: 256000 tokens, C 8192, F 22528, 40 layers,
    64 heads, kv heads = heads (also for null), 8192 positions, layer_norm_eps 1e-5, logit_scale 0.0625, rope_theta 1e4
    (transformers 5 would fill an absent base with 5e5), tied. The RoPE base is rope_theta or transformers 5's
    rope_parameters' (default type), which must agree. attention_dropout is read and ignored. cohere2: sliding_window
    (default 4096), sliding_window_pattern (default 4) and layer_types (absent or null: from the pattern; given, they
    win, as in transformers) as Cohere2Config takes them.
    Refused: another model_type, hidden_act other than silu, attention_bias or use_qk_norm true (Command R+'s q/k
    norms), a rope_scaling or another rope type, a head_dim other than C / NH; cohere2: a sliding_window that is not a
    positive integer (null included), layer_types not one sliding_attention / full_attention per layer."""
    kind = tn.check_hf_config(c, ("cohere", "cohere2"), "silu", ("attention_bias", "use_qk_norm"))
    theta = tl.default_rope_parameters(c, kind)["rope_theta"]
    C, NH, NKV = tn.hf_heads(c, 8192, 64)
    fields = dict(
        num_layers=c.get("num_hidden_layers", 40), num_heads=NH, num_kv_heads=NKV,
        channels=C, intermediate=c.get("intermediate_size", 22528), vocab_size=c.get("vocab_size", 256000),
        max_seq_len=c.get("max_position_embeddings", 8192), layer_norm_eps=c.get("layer_norm_eps", 1e-5),
        rope_theta=10000.0 if theta is None else theta, logit_scale=c.get("logit_scale", 0.0625),
        tie_word_embeddings=bool(c.get("tie_word_embeddings", True)))
    if kind == "cohere":
        return CohereConfig(**fields)
    return Cohere2Config(**fields, sliding_window=c.get("sliding_window", 4096),
                         sliding_window_pattern=c.get("sliding_window_pattern", 4),
                         layer_types=tuple(c.get("layer_types") or ()))


def save_hf(model, folder):
    """folder/config.json + folder/model.safetensors (F32, HF names, no lm_head when tied)."""
    tg.save_hf_folder(folder, hf_config(model.cfg), model.state_dict())


def load_hf(folder, dtype=torch.float64):
    """Builds a Cohere (cohere or cohere2) from an HF folder (one model.safetensors); a tied model's lm_head.weight, if
    the file has one, is skipped. Any other tensor (a norm bias, q/k norms) is refused by the strict load."""
    return tg.load_hf_folder(folder, config_from_hf, Cohere, dtype)
