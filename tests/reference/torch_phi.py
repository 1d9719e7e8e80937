# Plain-PyTorch Phi (Hugging Face's PhiForCausalLM, model_type phi: Phi-1, Phi-1.5, Phi-2) in float64: the reference
# that Tessera's Phi import is checked against, as transformers' modeling_phi.py computes it. Module names are HF's
# tensor names (model.embed_tokens, model.layers.{l}.self_attn.{q,k,v}_proj and .dense, .mlp.fc1 and .fc2,
# .input_layernorm, model.final_layernorm, lm_head), so state_dict() keys are the keys of model.safetensors. Every
# nn.Linear has a bias, lm_head's included, and the head is never tied. Each layer has ONE norm, an nn.LayerNorm
# (weight and bias), whose output feeds both sublayers: out = attn(h) + mlp(h) + x, h = input_layernorm(x) (Cohere's
# block). The attention is grouped-query (scores times HS^-0.5, HS = C / NH) with RoPE (rotate_half, pairs i and i +
# R/2, inv_freq over R) on the first R = int(HS * partial_rotary_factor) channels of each q and k head only, GPT-NeoX's
# partial rotary; the MLP is fc2(gelu_new(fc1 x)), GELU's tanh form. Cohere's attention and block (torch_cohere),
# GPT-NeoX's MLP, the ForCausalLM head, the config checks and the dense objective (torch_gpt_neox), RoPE, the causal
# mask, the attention, gelu_new and the init's draws (torch_llama) are reused; file formats come from torch_gpt2.
import math
from dataclasses import dataclass

import torch
import torch.nn as nn

import torch_cohere as tc
import torch_gpt2 as tg
import torch_gpt_neox as tn
import torch_llama as tl


@dataclass
class PhiConfig(tn.DenseConfig):
    num_layers: int = 2             # L
    num_heads: int = 2              # NH; 2: HS 16, R 8 at the default factor (four frequencies)
    num_kv_heads: int = 2           # NKV, divides NH (query head h reads kv head h // (NH/NKV)); PhiConfig's: NH
    channels: int = 32              # C; HS = C / NH
    intermediate: int = 128         # F (Phi-1.5's and Phi-2's are 4C)
    vocab_size: int = 300           # V
    max_seq_len: int = 32           # maxT (max_position_embeddings)
    layer_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.5      # RoPE on the first int(HS * this) channels of each q/k head (Phi-2's 0.4)
    tie_word_embeddings: bool = False       # PhiForCausalLM's head is its own (with a bias): True is refused
    ROTARY = "partial_rotary_factor"

    def __post_init__(self):
        tn.check_fields(self, "phi", ("num_layers", "num_heads", "num_kv_heads", "channels", "intermediate",
                                      "vocab_size", "max_seq_len"), ("rope_theta", "layer_norm_eps"))
        if self.channels % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(f"phi: num_heads {self.num_heads} must divide hidden_size {self.channels}, "
                             f"num_key_value_heads {self.num_kv_heads} divide num_heads")
        tn.check_rotary(self, "phi")
        if self.tie_word_embeddings:
            raise ValueError("phi: tie_word_embeddings true is not modelled (PhiForCausalLM's lm_head is its own, with "
                             "a bias)")


# ---------------------------------------------------------------- blocks

class Attention(tc.Attention):
    """HF's PhiAttention (qk_layernorm false): Cohere's grouped-query attention with biases on q_proj, k_proj, v_proj
    and the output projection, dense; RoPE by torch_llama.apply_rope, on the first R channels of each q and k head
    (cos and sin R wide), the rest passed."""
    OUT, BIAS = "dense", True

    def rotate(self, x, cos, sin):
        return tl.apply_rope(x, cos, sin)


class MLP(tn.MLP):
    """HF's PhiMLP: GPT-NeoX's, named fc2(gelu_new(fc1 x)), both biased; fc1 (F, C), fc2 (C, F); gelu_new, GELU's
    tanh form."""
    IN, OUT = "fc1", "fc2"

    def act(self, u):
        return tl.gelu_new(u)


class DecoderLayer(tc.DecoderLayer):
    """HF's PhiDecoderLayer, modules in its order (self_attn, mlp, input_layernorm): Cohere's block with Phi's
    attention and MLP and an nn.LayerNorm (weight and bias, eps layer_norm_eps): h = input_layernorm(x), out = attn(h)
    + mlp(h) + x (HF's order of the additions). No dropout (resid_pdrop is ignored)."""

    def __init__(self, cfg, layer=0):
        super().__init__(cfg, layer, Attention, MLP, nn.LayerNorm)

    def forward(self, x, cos, sin):
        h = self.input_layernorm(x)
        return self.self_attn(h, cos, sin) + self.mlp(h) + x


class Model(nn.Module):
    """HF's PhiModel: the tensors under the "model." prefix (embed_tokens, layers, final_layernorm)."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.channels)          # (V,C)
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg.num_layers)])
        self.final_layernorm = nn.LayerNorm(cfg.channels, eps=cfg.layer_norm_eps)


class Phi(tn.CausalLM):
    """PhiForCausalLM (torch_gpt_neox.CausalLM): model (Model), then lm_head (V, C) WITH a bias (V), never tied; logits
    = final_layernorm(x) @ lm_head.weight^T + lm_head.bias, the loss's input. RoPE: inv_freq[i] = rope_theta^(-2i/R)
    over the R = rotary_dim rotated channels (float64, a plain attribute), the same in every layer. forward returns
    (logits, []) as torch_llama's dense models do."""
    NORM, HEAD_BIAS = "final_layernorm", True

    def __init__(self, cfg):
        super().__init__(cfg, Model(cfg), cfg.rotary_dim)


objective = tn.objective    # the dense objective: (ce, ce, 0, 0, []), ce on the biased logits


# q_proj's and k_proj's init std and the MLP's, wider than the usual 0.02 (and 0.02/sqrt(2L)) as GPT-NeoX's, so that the
# tiny runs notice what they test (README.md's "Phi"): RoPE's layout, width and frequencies (at 0.02 the scores are
# about 0.01 and attention is nearly uniform), and gelu_new against the exact GELU (fc1's pre-activations spread to
# about 1.8, where the two differ most).
PHI_QK_STD = tn.GPT_NEOX_QKV_STD
PHI_FC1_STD, PHI_FC2_STD = tn.GPT_NEOX_H_TO_4H_STD, tn.GPT_NEOX_4H_TO_H_STD


def init_weights(model, generator, router_std=None):
    """In named_parameters() order: q_proj and k_proj N(0, PHI_QK_STD); dense N(0, 0.02/sqrt(2L)); fc1 N(0,
    PHI_FC1_STD), fc2 N(0, PHI_FC2_STD/sqrt(2L)); embed_tokens, v_proj and lm_head weights N(0, 0.02); LayerNorm weights
    1 + N(0, 0.1); every bias (q/k/v, dense, fc1, fc2, the LayerNorms', lm_head's) N(0, 0.1), so that a dropped one
    shows. Each then rounded to float32 (kept in the model's dtype). router_std: torch_llama's signature; there is no
    router."""
    root = math.sqrt(2 * model.cfg.num_layers)
    tl.init_parameters(model, generator, ((("self_attn.q_proj.weight", "self_attn.k_proj.weight"), PHI_QK_STD),
                                          ("self_attn.dense.weight", 0.02 / root), ("mlp.fc1.weight", PHI_FC1_STD),
                                          ("mlp.fc2.weight", PHI_FC2_STD / root)))


# ---------------------------------------------------------------- Hugging Face folder

def hf_config(cfg):
    """config.json of PhiForCausalLM as PhiConfig's keys spell them (model_type phi): no head_dim (HS = hidden_size /
    num_attention_heads), num_key_value_heads, layer_norm_eps, partial_rotary_factor, rope_theta, rope_scaling null,
    qk_layernorm false, hidden_act gelu_new, the dropouts 0.0, untied, PhiConfig's token ids (bos 1, eos 2)."""
    return {"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_size": cfg.channels,
            "intermediate_size": cfg.intermediate, "num_attention_heads": cfg.num_heads,
            "num_key_value_heads": cfg.num_kv_heads, "num_hidden_layers": cfg.num_layers,
            "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_seq_len,
            "layer_norm_eps": cfg.layer_norm_eps, "partial_rotary_factor": cfg.partial_rotary_factor,
            "rope_theta": cfg.rope_theta, "rope_scaling": None, "qk_layernorm": False, "hidden_act": "gelu_new",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0, "tie_word_embeddings": False,
            "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}


def config_from_hf(c):
    """A phi config.json -> PhiConfig, with transformers' PhiConfig defaults (Phi-1.5's shapes) for absent keys: 51200
    tokens, C 2048, F 8192, 24 layers, 32 heads, kv heads = heads (also for null), 2048 positions, layer_norm_eps 1e-5,
    rope_theta 1e4, partial_rotary_factor 0.5. rope_theta and partial_rotary_factor may come from transformers 5's
    rope_parameters (default type), agreeing with the top-level keys. The dropouts (Phi-2's resid_pdrop 0.1) are read
    and ignored. Refused: another model_type, hidden_act other than gelu_new, qk_layernorm true, tie_word_embeddings
    true, a rope_scaling or another rope type, a head_dim other than C / NH."""
    tn.check_hf_config(c, ("phi",), "gelu_new", ("qk_layernorm", "tie_word_embeddings"))
    params = tl.default_rope_parameters(c, "phi", ("rope_theta", "partial_rotary_factor"))
    C, NH, NKV = tn.hf_heads(c, 2048, 32)
    return PhiConfig(
        num_layers=c.get("num_hidden_layers", 24), num_heads=NH, num_kv_heads=NKV, channels=C,
        intermediate=c.get("intermediate_size", 8192), vocab_size=c.get("vocab_size", 51200),
        max_seq_len=c.get("max_position_embeddings", 2048), layer_norm_eps=c.get("layer_norm_eps", 1e-5),
        rope_theta=10000.0 if params["rope_theta"] is None else params["rope_theta"],
        partial_rotary_factor=0.5 if params["partial_rotary_factor"] is None else params["partial_rotary_factor"])


def save_hf(model, folder):
    """folder/config.json + folder/model.safetensors (F32, HF names, lm_head's weight and bias last)."""
    tg.save_hf_folder(folder, hf_config(model.cfg), model.state_dict())


def load_hf(folder, dtype=torch.float64):
    """Builds a Phi from an HF folder (one model.safetensors); the rotary buffers older checkpoints store
    (.rotary_emb.inv_freq) are skipped. Any other tensor (q/k layernorms) is refused by the strict load."""
    def edit(state, cfg):
        return {k: v for k, v in state.items() if not k.endswith(".rotary_emb.inv_freq")}
    return tg.load_hf_folder(folder, config_from_hf, Phi, dtype, edit)
