# Plain-PyTorch Llama (dense SwiGLU MLP), Qwen2 (Llama with q/k/v biases), Qwen3 (Llama with an RMSNorm
# over each query and key head, heads head_dim wide), Mixtral (dropless top-k MoE, weights renormalised) and
# Qwen3-MoE (Qwen3 with that MoE, renormalised or not: norm_topk_prob) in float64: the reference that
# Tessera's Llama-family models are checked against. Module names are Hugging Face's LlamaForCausalLM /
# Qwen2ForCausalLM / Qwen3ForCausalLM / Qwen3MoeForCausalLM / MixtralForCausalLM tensor names, so
# state_dict() keys are the keys of model.safetensors (no lm_head when the embeddings are tied). Phi-3
# (Phi3ForCausalLM, also Phi-4) is Llama itself; only its files differ: save_hf fuses q/k/v into qkv_proj and
# gate/up into gate_up_proj (phi3_fuse) and load_hf splits them back (phi3_split); Phi-3 alone may rotate only
# the first int(HS * partial_rotary_factor) channels of each q/k head and scale them by longrope. OLMo 2
# (Olmo2ForCausalLM) is Llama with its norms moved: q_norm and k_norm are each one RMSNorm over the whole q or k
# projection (all heads) before RoPE, and each block norms its sublayers' outputs, not their inputs. OLMoE
# (OlmoeForCausalLM) keeps Llama's pre-norm blocks with OLMo 2's whole-projection q/k norms and Qwen3-MoE's MoE in
# every layer (router mlp.gate, experts named as Llama's MLP, norm_topk_prob false by default). SmolLM3
# (SmolLM3ForCausalLM) is Llama but for its NoPE layers: no_rope_layers[i] 0 leaves layer i's q and k unrotated
# (1 rotates them), by default every no_rope_layer_interval-th layer (i + 1 a multiple of it). Mistral
# (MistralForCausalLM) is Llama with Llama's files; with a sliding_window W (Mistral's, or Phi-3's) query i attends only
# keys j with i - W < j <= i, the W latest positions including itself (HF's sliding-window causal mask). Qwen2 and Qwen3
# with use_sliding_window apply that window in layers i >= max_window_layers only, the first ones attending causally
# (their configs' layer_types); Qwen3-MoE's attention reads no max_window_layers and slides in every layer. RoPE uses
# HF's non-interleaved rotate_half convention, optionally with llama3 or YaRN frequency scaling; query head
# h reads kv head h // (NH/NKV). Gemma 3 (Gemma3ForCausalLM, model_type gemma3_text; class Gemma3) has its own
# blocks: embeddings times f32(sqrt(C)); RMSNorms with gain 1 + w (w stored around 0) before and after both the
# attention and the GeGLU MLP (gelu tanh); per-head q/k norms before RoPE; scores times query_pre_attn_scalar^-0.5;
# head_dim decoupled from C / NH; layer_types (default: every sliding_window_pattern-th layer global) picks per
# layer a sliding window (Mistral's rule) and RoPE base rope_local_base_freq, or full causal attention and
# rope_theta (linearly scaled when rope_scaling is linear); tied embeddings by default, no softcapping. Gemma 2
# (Gemma2ForCausalLM, model_type gemma2; class Gemma2) is Gemma 3's blocks without the q/k norms, one RoPE (rope_theta)
# in every layer, layer i sliding when i is even (layer_types), the scaled scores soft-capped (attn_logit_softcapping c:
# c * tanh(s / c), before the mask) and the logits too (final_logit_softcapping, before the loss). Gemma (1)
# (GemmaForCausalLM, model_type gemma: Gemma 2B/7B, CodeGemma; class Gemma) is Llama's pre-norm block, two norms a
# block, with Gemma's pieces: embeddings times f32(sqrt(C)), (1 + w) RMSNorms, GeGLU (gelu tanh), head_dim decoupled
# from C / NH, scores times head_dim^-0.5, RoPE in every layer, causal, tied by default; no caps, windows or q/k norms.
# Starcoder2 (Starcoder2ForCausalLM) is Llama's pre-norm decoder with nn.LayerNorms (weight and bias, eps norm_epsilon)
# in place of the RMSNorms, biases on q/k/v/o_proj, GPT-2's MLP (torch_gpt2.MLP: c_proj(gelu_tanh(c_fc x)), both
# biased, F = intermediate_size) in place of SwiGLU, scores times HS^-0.5, and Mistral's sliding window when
# sliding_window is set; no dropout (its config.json's dropouts are read and ignored, written 0.0). Qwen2-MoE
# (Qwen2MoeForCausalLM, model_type qwen2_moe: Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B) is Qwen2's attention (q/k/v biases,
# HS = C / NH) with a MoE in every layer: Qwen3-MoE's softmax top-k router and experts (norm_topk_prob false by
# default) plus one shared SwiGLU expert (mlp.shared_expert, shared_intermediate wide) whose output is multiplied per
# token by sigmoid(mlp.shared_expert_gate x), a (1, C) gate; the block adds the routed and the gated shared outputs
# (SharedExpertMoe). GLM-4.5 and GLM-4.5-Air (Glm4MoeForCausalLM, model_type glm4_moe; class Glm4Moe) are Llama's
# pre-norm blocks with grouped-query attention whose heads are head_dim wide (decoupled from C / NH), q/k/v biases with
# attention_bias (o_proj never biased), per-head q/k RMSNorms before RoPE with use_qk_norm (Qwen3's), RoPE on the first
# int(head_dim * partial_rotary_factor) channels of each q/k head only (Phi-3's partial rotary), scores times
# head_dim^-0.5; the first first_k_dense_replace layers take a dense SwiGLU, the others DeepSeek-V3's MoE
# (torch_deepseek.Moe: sigmoid router, e_score_correction_bias for the choice only, group limit, routed scale, shared
# experts).
# Logits cover the real vocabulary V only. File formats come from torch_gpt2.
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_gpt2 as tg

# Llama 3.1's rope_scaling, as its HF config.json spells it.
LLAMA3_ROPE_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192}


@dataclass
class LlamaConfig:
    num_layers: int = 2             # L
    num_heads: int = 4              # NH
    num_kv_heads: int = 2           # NKV, divides NH
    channels: int = 32              # C
    intermediate: int = 48          # F (the dense MLP's, or each expert's)
    vocab_size: int = 300           # V
    max_seq_len: int = 32           # maxT (max_position_embeddings)
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None  # None, LLAMA3_ROPE_SCALING, a yarn_rope_scaling(...) or (phi3) a
    #                                      longrope_rope_scaling(...) dict
    tie_word_embeddings: bool = False
    num_experts: int = 0            # E; 0 = dense Llama, > 0 = Mixtral
    top_k: int = 2                  # experts per token (Mixtral)
    qkv_bias: bool = False          # biases on q_proj, k_proj and v_proj (Qwen2)
    qk_norm: bool = False           # RMSNorm over each query and key head before RoPE (Qwen3)
    head_dim: int = 0               # HS when it is not C / NH (Qwen3); 0 = C / NH
    norm_topk_prob: bool = True     # the chosen probabilities renormalised (Mixtral always; Qwen3-MoE's flag)
    phi3: bool = False              # Phi3ForCausalLM's files (fused qkv_proj, gate_up_proj); computes as Llama
    partial_rotary_factor: float = 1.0   # phi3: RoPE on the first int(HS * this) channels of each q/k head
    original_max_seq_len: int = 0   # phi3: original_max_position_embeddings (longrope); 0 = max_seq_len
    olmo2: bool = False             # Olmo2ForCausalLM: whole-projection q/k norms, norms after the sublayers
    olmoe: bool = False             # OlmoeForCausalLM: whole-projection q/k norms, pre-norm, MoE under "mlp"
    smollm3: bool = False           # SmolLM3ForCausalLM: Llama whose layers with no_rope_layers[i] 0 skip RoPE
    no_rope_layers: tuple = ()      # smollm3: one 1 (RoPE) or 0 (NoPE) per layer; () = from the interval
    no_rope_layer_interval: int = 4  # smollm3: () above gives layer i NoPE when (i + 1) % this == 0
    mistral: bool = False           # MistralForCausalLM: Llama's computation and names, its own config.json
    sliding_window: Optional[int] = None  # mistral, phi3, qwen2/3, qwen3_moe: query i attends keys i - W < j <= i;
    #                                       None = causal only (gemma3: its sliding layers only, and required;
    #                                       qwen2, qwen3: layers >= max_window_layers only)
    max_window_layers: int = 0      # qwen2, qwen3 with a sliding_window: layers i < this attend causally
    gemma3: bool = False            # Gemma3ForCausalLM (gemma3_text): the Gemma3 class below, not Llama
    gemma2: bool = False            # Gemma2ForCausalLM (gemma2): the Gemma2 class below, not Llama
    gemma1: bool = False            # GemmaForCausalLM (gemma; Gemma 1, CodeGemma): the Gemma class below
    query_pre_attn_scalar: float = 0  # gemma2, gemma3: scores times this ** -0.5; 0 = head_size
    rope_local_base_freq: float = 10000.0  # gemma3: the sliding layers' RoPE base (never scaled)
    sliding_window_pattern: int = 6  # gemma3: layer i is global when (i + 1) % this == 0 (unless layer_types)
    layer_types: tuple = ()         # gemma2, gemma3: "sliding_attention" / "full_attention" per layer; () = gemma3 from
    #                                 the pattern, gemma2 sliding when i is even
    attn_logit_softcapping: Optional[float] = None   # gemma2: scores = cap * tanh(scores / cap) before the mask
    final_logit_softcapping: Optional[float] = None  # gemma2: logits = cap * tanh(logits / cap); None = no cap
    starcoder2: bool = False        # Starcoder2ForCausalLM: LayerNorms, biased q/k/v/o, GELU-tanh MLP (c_fc, c_proj);
    #                                 rms_norm_eps is then the LayerNorms' eps (config.json's norm_epsilon)
    qwen2_moe: bool = False         # Qwen2MoeForCausalLM: Qwen2's attention (qkv_bias), the MoE (intermediate = each
    #                                 expert's width) plus a sigmoid-gated shared expert in every layer
    shared_intermediate: int = 0    # qwen2_moe: the shared expert's width (shared_expert_intermediate_size), > 0
    glm4_moe: bool = False          # Glm4MoeForCausalLM (GLM-4.5, GLM-4.5-Air): the Glm4Moe class below. qkv_bias is
    #                                 its attention_bias, qk_norm its use_qk_norm, head_dim its head_dim (0: C / NH),
    #                                 partial_rotary_factor its own, intermediate the dense layers' width, num_experts
    #                                 n_routed_experts; the fields below are DeepSeek-V3's MoE (glm4_moe only)
    moe_intermediate: int = 0       # glm4_moe: each routed expert's width (moe_intermediate_size)
    num_shared_experts: int = 0     # glm4_moe: n_shared_experts, one SwiGLU moe_intermediate * this wide (0: none)
    first_dense: int = 0            # glm4_moe: first_k_dense_replace, the leading dense layers
    routed_scale: float = 1.0       # glm4_moe: routed_scaling_factor, on the routed experts' combine weights only
    n_group: int = 1                # glm4_moe: n_group, groups of num_experts / n_group consecutive experts
    topk_group: int = 1             # glm4_moe: topk_group, the groups each token keeps

    def __post_init__(self):
        if not self.norm_topk_prob and not (self.glm4_moe or self.is_moe and (self.qk_norm or self.olmoe
                                                                               or self.qwen2_moe)):
            raise ValueError("norm_topk_prob false is modelled for Qwen3-MoE, OLMoE, Qwen2-MoE and GLM-4.5 only "
                             "(Mixtral always renormalises)")
        kind = rope_type(self.rope_scaling)
        if self.glm4_moe:
            self._check_glm4_moe(kind)
        elif (self.moe_intermediate, self.num_shared_experts, self.first_dense, self.routed_scale, self.n_group,
              self.topk_group) != (0, 0, 0, 1.0, 1, 1):
            raise ValueError("moe_intermediate, num_shared_experts, first_dense, routed_scale, n_group and topk_group "
                             "are modelled for glm4_moe only (DeepSeek: torch_deepseek.DeepseekConfig)")
        if self.qwen2_moe:
            self._check_qwen2_moe(kind)
        elif self.shared_intermediate:
            raise ValueError("shared_intermediate (a gated shared expert) is modelled for qwen2_moe only")
        elif self.is_moe and self.qkv_bias and not self.glm4_moe:
            raise ValueError("q/k/v biases with experts are Qwen2-MoE's: set qwen2_moe (and shared_intermediate)")
        if self.phi3 and (self.is_moe or self.qkv_bias or self.qk_norm or self.head_dim
                          or kind not in ("default", "longrope")):
            raise ValueError("phi3 is a dense Llama without biases, q/k norms or head_dim, and its rope_scaling is "
                             "null or longrope")
        if self.olmo2 and (self.is_moe or self.qkv_bias or self.qk_norm or self.head_dim or self.phi3
                           or kind != "default"):
            raise ValueError("olmo2 is a dense Llama without biases, per-head q/k norms, head_dim or rope_scaling")
        if self.olmoe and (not self.is_moe or self.qkv_bias or self.qk_norm or self.head_dim or self.phi3
                           or self.olmo2 or kind != "default"):
            raise ValueError("olmoe is a MoE Llama (num_experts > 0) without biases, per-head q/k norms, head_dim "
                             "or rope_scaling")
        if self.smollm3:
            if (self.is_moe or self.qkv_bias or self.qk_norm or self.head_dim or self.phi3 or self.olmo2 or self.olmoe
                    or kind not in ("default", "llama3", "yarn")):
                raise ValueError("smollm3 is a dense Llama without biases, q/k norms or head_dim, its rope_scaling "
                                 "null, llama3 or yarn")
            if not isinstance(self.no_rope_layer_interval, int) or self.no_rope_layer_interval < 1:
                raise ValueError(f"no_rope_layer_interval {self.no_rope_layer_interval} must be a positive integer")
            if not self.no_rope_layers:
                self.no_rope_layers = tuple(int((i + 1) % self.no_rope_layer_interval != 0)
                                            for i in range(self.num_layers))
            if len(self.no_rope_layers) != self.num_layers or any(v not in (0, 1) for v in self.no_rope_layers):
                raise ValueError(f"no_rope_layers {list(self.no_rope_layers)}: one 0 or 1 per layer "
                                 f"({self.num_layers})")
            self.no_rope_layers = tuple(int(v) for v in self.no_rope_layers)
        elif self.no_rope_layers:
            raise ValueError("no_rope_layers is modelled for smollm3 only")
        if self.mistral and (self.is_moe or self.qkv_bias or self.qk_norm or self.phi3 or self.olmo2 or self.olmoe
                             or self.smollm3 or kind not in ("default", "llama3", "yarn")):
            raise ValueError("mistral is a dense Llama without biases or q/k norms, its rope_scaling null, llama3 or "
                             "yarn")
        if self.starcoder2 and (self.is_moe or self.qkv_bias or self.qk_norm or self.head_dim or self.phi3 or self.olmo2
                                or self.olmoe or self.smollm3 or self.mistral or self.gemma or self.gemma1
                                or kind != "default"):
            raise ValueError("starcoder2 is dense, with its own biases and norms (not qkv_bias or q/k norms), no "
                             "head_dim (HS = C / NH), no other family's flags and no rope_scaling")
        if self.gemma1:
            self._check_gemma1(kind)
        if self.gemma3:
            self._check_gemma3(kind)
        elif self.gemma2:
            self._check_gemma2(kind)
        elif (self.query_pre_attn_scalar or self.layer_types or self.rope_local_base_freq != 10000.0
              or self.sliding_window_pattern != 6):
            raise ValueError("query_pre_attn_scalar and layer_types are modelled for gemma2 and gemma3 only, "
                             "rope_local_base_freq and sliding_window_pattern for gemma3 only")
        if not self.gemma2 and (self.attn_logit_softcapping is not None or self.final_logit_softcapping is not None):
            raise ValueError("attn_logit_softcapping and final_logit_softcapping are modelled for gemma2 only")
        if self.sliding_window is not None:
            if not (self.mistral or self.phi3 or self.gemma or self.qwen or self.starcoder2):
                raise ValueError("sliding_window is modelled for mistral, phi3, gemma2, gemma3, qwen2, qwen3, "
                                 "qwen3_moe and starcoder2 only")
            if isinstance(self.sliding_window, bool) or not isinstance(self.sliding_window, int) \
                    or self.sliding_window < 1:
                raise ValueError(f"sliding_window {self.sliding_window} must be a positive integer (or None)")
        M = self.max_window_layers
        if isinstance(M, bool) or not isinstance(M, int) or M < 0:
            raise ValueError(f"max_window_layers {M} must be a non-negative integer")
        if M and (self.sliding_window is None or not self.qwen or self.is_moe):
            raise ValueError("max_window_layers is modelled for qwen2 and qwen3 with a sliding_window only (Qwen3-MoE "
                             "slides every layer)")
        if not self.phi3 and (kind == "longrope" or self.original_max_seq_len
                              or (self.partial_rotary_factor != 1.0 and not self.glm4_moe)):
            raise ValueError("longrope and original_max_position_embeddings are modelled for phi3 only, "
                             "partial_rotary_factor for phi3 and glm4_moe")
        R = self.rotary_dim
        if (self.phi3 or self.glm4_moe) and (not 0 < self.partial_rotary_factor <= 1 or R <= 0 or R % 2):
            raise ValueError(f"partial_rotary_factor {self.partial_rotary_factor}: int(HS {self.head_size} * factor) "
                             f"= {R} rotary channels, which must be even and positive (factor in (0, 1])")
        if kind == "longrope":
            check_longrope(self.rope_scaling, R)

    def _check_glm4_moe(self, kind):
        """GLM-4.5's rules (__post_init__): none of the other families' flags, no rope_scaling and no sliding window;
        first_dense in [0, num_layers]; num_experts experts in n_group groups of at least 2 (HF's group score is the sum
        of each group's 2 best, computed even for one group), top_k in [1, num_experts], topk_group in [1, n_group]
        (torch_deepseek.DeepseekConfig's checks, through deepseek_moe_config); moe_intermediate > 0, num_shared_experts
        >= 0, routed_scale > 0. A head_dim equal to C / NH is kept as 0, as config_from_hf reads it."""
        if (self.phi3 or self.olmo2 or self.olmoe or self.smollm3 or self.mistral or self.gemma or self.gemma1
                or self.starcoder2 or self.qwen2_moe or self.shared_intermediate or kind != "default"):
            raise ValueError("glm4_moe takes none of the other families' flags, and its rope_scaling is null")
        if self.sliding_window is not None or self.max_window_layers:
            raise ValueError("glm4_moe: a sliding window is not modelled")
        for name in ("num_experts", "top_k", "moe_intermediate", "num_shared_experts", "first_dense", "n_group",
                     "topk_group"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"glm4_moe: {name} {v!r} must be an integer")
        if not 0 <= self.first_dense <= self.num_layers:
            raise ValueError(f"glm4_moe: first_dense {self.first_dense} must be in [0, num_layers {self.num_layers}]")
        if self.n_group < 1 or self.num_experts < 2 * self.n_group or not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"glm4_moe: {self.num_experts} experts in {self.n_group} groups: each group needs at "
                             f"least 2 (its score is the sum of its 2 best), and top_k {self.top_k} must be in [1, "
                             f"num_experts]")
        if self.moe_intermediate < 1 or self.num_shared_experts < 0 or not self.routed_scale > 0:
            raise ValueError("glm4_moe: moe_intermediate must be positive, num_shared_experts >= 0 and routed_scale "
                             "> 0")
        deepseek_moe_config(self)       # n_group divides num_experts, topk_group in [1, n_group]
        if self.head_dim == self.channels // self.num_heads:
            self.head_dim = 0

    def _check_qwen2_moe(self, kind):
        """Qwen2-MoE's rules (__post_init__): experts (num_experts >= 1, top_k in [1, num_experts]), q/k/v biases, a
        positive integer shared_intermediate, HS = C / NH (no head_dim: Qwen2MoeConfig has none), rope_scaling null,
        llama3 or yarn, no sliding window and none of the other families' flags."""
        if (not self.is_moe or not self.qkv_bias or self.qk_norm or self.head_dim or self.phi3 or self.olmo2
                or self.olmoe or self.smollm3 or self.mistral or self.gemma or self.gemma1 or self.starcoder2
                or kind not in ("default", "llama3", "yarn")):
            raise ValueError("qwen2_moe has experts and q/k/v biases, no q/k norms, no head_dim (HS = C / NH), none of "
                             "the other families' flags, and its rope_scaling null, llama3 or yarn")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError(f"qwen2_moe: top_k {self.top_k} must be in [1, num_experts {self.num_experts}]")
        S = self.shared_intermediate
        if isinstance(S, bool) or not isinstance(S, int) or S < 1:
            raise ValueError(f"qwen2_moe: shared_intermediate {S} must be a positive integer")
        if self.sliding_window is not None:
            raise ValueError("qwen2_moe: a sliding window is not modelled (use_sliding_window false)")

    def _check_gemma1(self, kind):
        """Gemma (1)'s rules (__post_init__): dense, without biases, q/k norms or any other family's flags (Gemma 2's
        and Gemma 3's included), no rope_scaling, a positive rope_theta. No sliding window, query_pre_attn_scalar,
        layer_types or soft caps: __post_init__ refuses those outside gemma2/gemma3 already."""
        if (self.is_moe or self.qkv_bias or self.qk_norm or self.phi3 or self.olmo2 or self.olmoe or self.smollm3
                or self.mistral or self.gemma2 or self.gemma3 or self.starcoder2 or self.qwen2_moe
                or kind != "default"):
            raise ValueError("gemma (1) is dense, without biases, q/k norms, the other families' flags (Gemma 2's and "
                             "3's too) or rope_scaling")
        if not self.rope_theta > 0:
            raise ValueError(f"gemma: rope_theta {self.rope_theta} must be positive")

    def _check_gemma3(self, kind):
        """Gemma 3's own rules (__post_init__): a dense model without biases or the Llama-family flags (its per-head
        q/k norms are built in), rope_scaling null or linear (the global layers'), a positive integer window, a
        positive query_pre_attn_scalar (0 becomes head_size), layer_types from sliding_window_pattern when empty."""
        if (self.is_moe or self.qkv_bias or self.qk_norm or self.phi3 or self.olmo2 or self.olmoe or self.smollm3
                or self.mistral or self.gemma2 or kind not in ("default", "linear")):
            raise ValueError("gemma3 is dense, without biases or the other families' flags, its rope_scaling null or "
                             "linear")
        if kind == "linear":
            check_linear(self.rope_scaling)
        W = self.sliding_window
        if isinstance(W, bool) or not isinstance(W, int) or W < 1:
            raise ValueError(f"gemma3: sliding_window {W} must be a positive integer")
        if self.rope_local_base_freq <= 0 or self.rope_theta <= 0:
            raise ValueError("gemma3: rope_theta and rope_local_base_freq must be positive")
        if not self.query_pre_attn_scalar:
            self.query_pre_attn_scalar = self.head_size
        if self.query_pre_attn_scalar <= 0:
            raise ValueError(f"gemma3: query_pre_attn_scalar {self.query_pre_attn_scalar} must be positive")
        P = self.sliding_window_pattern
        if isinstance(P, bool) or not isinstance(P, int) or P < 1:
            raise ValueError(f"gemma3: sliding_window_pattern {P} must be a positive integer")
        if not self.layer_types:
            self.layer_types = gemma3_layer_types(self.num_layers, P)
        self.layer_types = tuple(self.layer_types)
        if len(self.layer_types) != self.num_layers or any(t not in GEMMA3_LAYER_TYPES for t in self.layer_types):
            raise ValueError(f"gemma3: layer_types {list(self.layer_types)}: one of {GEMMA3_LAYER_TYPES} per layer "
                             f"({self.num_layers})")

    def _check_gemma2(self, kind):
        """Gemma 2's rules (__post_init__): dense, without biases, q/k norms or the other families' flags, no
        rope_scaling (one RoPE, rope_theta, in every layer), no rope_local_base_freq or sliding_window_pattern (Gemma
        3's), a positive integer window, a positive query_pre_attn_scalar (0 becomes head_size), layer_types sliding
        when i is even when empty, each softcapping None or a positive number."""
        if (self.is_moe or self.qkv_bias or self.qk_norm or self.phi3 or self.olmo2 or self.olmoe or self.smollm3
                or self.mistral or kind != "default"):
            raise ValueError("gemma2 is dense, without biases, q/k norms or the other families' flags, and without "
                             "rope_scaling")
        if self.rope_local_base_freq != 10000.0 or self.sliding_window_pattern != 6:
            raise ValueError("gemma2: rope_local_base_freq and sliding_window_pattern are Gemma 3's (every gemma2 "
                             "layer takes rope_theta; layer_types alternate)")
        W = self.sliding_window
        if isinstance(W, bool) or not isinstance(W, int) or W < 1:
            raise ValueError(f"gemma2: sliding_window {W} must be a positive integer")
        if self.rope_theta <= 0:
            raise ValueError("gemma2: rope_theta must be positive")
        if not self.query_pre_attn_scalar:
            self.query_pre_attn_scalar = self.head_size
        if self.query_pre_attn_scalar <= 0:
            raise ValueError(f"gemma2: query_pre_attn_scalar {self.query_pre_attn_scalar} must be positive")
        for name in ("attn_logit_softcapping", "final_logit_softcapping"):
            cap = getattr(self, name)
            if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float)) or not cap > 0
                                    or math.isinf(cap)):
                raise ValueError(f"gemma2: {name} {cap} must be a positive number or None (no cap)")
        if not self.layer_types:
            self.layer_types = gemma2_layer_types(self.num_layers)
        self.layer_types = tuple(self.layer_types)
        if len(self.layer_types) != self.num_layers or any(t not in GEMMA3_LAYER_TYPES for t in self.layer_types):
            raise ValueError(f"gemma2: layer_types {list(self.layer_types)}: one of {GEMMA3_LAYER_TYPES} per layer "
                             f"({self.num_layers})")

    def is_sliding(self, layer):
        """Whether layer's attention slides (query i sees keys i - W < j <= i): gemma2's and gemma3's sliding_attention
        layers (gemma3: local RoPE base too); else, with a sliding_window, the layers from max_window_layers on (Qwen2's
        and Qwen3's first max_window_layers attend causally; it is 0 for Mistral, Phi-3, Qwen3-MoE and Starcoder2, which
        slide in every layer)."""
        if self.gemma:
            return self.layer_types[layer] == "sliding_attention"
        return self.sliding_window is not None and layer >= self.max_window_layers

    def layer_window(self, layer):  # layer's window W, or None: causal attention
        return self.sliding_window if self.is_sliding(layer) else None

    @property
    def attention_types(self):      # "sliding_attention" / "full_attention" per layer, as HF's layer_types
        return tuple("sliding_attention" if self.is_sliding(i) else "full_attention" for i in range(self.num_layers))

    @property
    def attn_scale(self):           # the factor on q.k: query_pre_attn_scalar^-0.5 (gemma2, gemma3), else HS^-0.5
        return (self.query_pre_attn_scalar if self.gemma else self.head_size) ** -0.5

    @property
    def gemma(self):                # Gemma 2 or Gemma 3: (1 + w) norms around both sublayers, GeGLU, scaled embeddings
        return self.gemma2 or self.gemma3

    @property
    def gemma_norms(self):          # Gemma 1, 2 or 3: GemmaRMSNorms (1 + w, w stored around 0), embed scale, GeGLU
        return self.gemma1 or self.gemma2 or self.gemma3

    @property
    def head_size(self):            # HS
        return self.head_dim or self.channels // self.num_heads

    @property
    def rotary_dim(self):           # R: the leading q/k channels of each head that RoPE rotates (HF's int())
        return int(self.head_size * self.partial_rotary_factor)

    @property
    def original_max(self):         # original_max_position_embeddings
        return self.original_max_seq_len or self.max_seq_len

    @property
    def is_moe(self):               # any MoE layer (glm4_moe: the layers from first_dense on)
        if self.glm4_moe:
            return self.num_experts > 0 and self.first_dense < self.num_layers
        return self.num_experts > 0

    def is_moe_layer(self, layer):  # glm4_moe: layer's mlp is DeepSeek-V3's MoE (else the dense SwiGLU)
        return self.glm4_moe and layer >= self.first_dense

    def uses_rope(self, layer):     # False for SmolLM3's NoPE layers
        return not self.smollm3 or bool(self.no_rope_layers[layer])

    @property
    def qwen(self):                 # Qwen2 (dense, q/k/v biases), Qwen3 or Qwen3-MoE (per-head q/k norms)
        return self.qk_norm or (self.qkv_bias and not self.is_moe)

    @property
    def whole_qk_norm(self):        # one q_norm over all NH*HS channels, one k_norm over NKV*HS (OLMo 2, OLMoE)
        return self.olmo2 or self.olmoe


# ---------------------------------------------------------------- ops

class RMSNorm(nn.Module):
    """out = x * rsqrt(mean(x^2 over C) + eps) * weight."""

    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def norm_class(cfg):
    """The decoder's norm, built as norm(C, eps): nn.LayerNorm ((x - mean) / sqrt(biased var + eps) * weight + bias)
    for Starcoder2, else RMSNorm."""
    return nn.LayerNorm if cfg.starcoder2 else RMSNorm


def yarn_rope_scaling(factor, original_max, beta_fast=32.0, beta_slow=1.0, mscale=0.0, mscale_all_dim=0.0,
                      attention_factor=0.0, truncate=True):
    """A YaRN rope_scaling dict as an HF config.json spells it: type and rope_type "yarn", factor,
    original_max_position_embeddings, beta_fast, beta_slow, then mscale, mscale_all_dim and
    attention_factor only when nonzero (0 = absent) and truncate only when false."""
    scaling = {"type": "yarn", "rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original_max,
               "beta_fast": beta_fast, "beta_slow": beta_slow}
    for key, value in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim), ("attention_factor", attention_factor)):
        if value:
            scaling[key] = value
    if not truncate:
        scaling["truncate"] = False
    return scaling


def longrope_rope_scaling(short_factor, long_factor):
    """Phi-3's longrope rope_scaling as its config.json spells it: type "longrope", short_factor and long_factor
    (R/2 positive numbers each, R the rotary width). original_max_position_embeddings is config.json's top-level
    key (LlamaConfig.original_max_seq_len), not part of the dict."""
    return {"type": "longrope", "short_factor": [float(v) for v in short_factor],
            "long_factor": [float(v) for v in long_factor]}


def check_longrope(scaling, rotary_dim):
    """Refuses a longrope dict Phi3Config would refuse (factor lists not R/2 long) or whose extra keys are not
    modelled ("factor": transformers 4.x ignores it beside original_max_position_embeddings, 5.x uses it)."""
    extra = set(scaling) - {"type", "rope_type", "short_factor", "long_factor", "attention_factor"}
    if extra:
        raise ValueError(f"longrope rope_scaling: keys {sorted(extra)} are not modelled")
    for key in ("short_factor", "long_factor"):
        values = scaling.get(key)
        if not isinstance(values, list) or len(values) != rotary_dim // 2 or not all(v > 0 for v in values):
            raise ValueError(f"longrope {key} must be {rotary_dim // 2} positive numbers (rotary dim {rotary_dim} / 2)")


GEMMA3_LAYER_TYPES = ("sliding_attention", "full_attention")


def gemma3_layer_types(num_layers, pattern):
    """Gemma3TextConfig's layer_types from sliding_window_pattern P: layer i is full_attention when (i + 1) % P == 0,
    else sliding_attention (P 6: layers 5, 11, 17, 23 global of 26)."""
    return tuple("sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(num_layers))


def gemma2_layer_types(num_layers):
    """Gemma2Config's default layer_types: layer i is sliding_attention when i is even ((i + 1) % 2), else
    full_attention (gemma-2-2b: 13 of each, layer 0 sliding). Gemma 3's rule with sliding_window_pattern 2."""
    return gemma3_layer_types(num_layers, 2)


def linear_rope_scaling(factor):
    """rope_scaling of rope_type linear as Gemma 3's 4B, 12B and 27B config.json spell it (factor 8 there): HF's
    _compute_linear_scaling_rope_parameters divides every inv_freq by factor."""
    return {"rope_type": "linear", "factor": factor}


def check_linear(scaling):
    """Refuses a linear dict without a positive factor or with keys that are not modelled."""
    extra = set(scaling) - {"type", "rope_type", "factor"}
    factor = scaling.get("factor")
    if extra or isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise ValueError(f"linear rope_scaling {scaling}: a positive factor only is modelled")


def rope_type(scaling):
    """"default" for no scaling, else the dict's rope_type (or its older spelling, type)."""
    return "default" if scaling is None else scaling.get("rope_type", scaling.get("type"))


def yarn_get_mscale(scale, m=1.0):
    """YaRN's magnitude correction: 1 for scale <= 1, else 0.1 * m * ln(scale) + 1."""
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rope_attention_factor(scaling, max_position=None, original_max=None):
    """The factor HF multiplies cos and sin by, i.e. the rotated channels of q and k (so a score's rotated
    part by its square): 1 without YaRN or longrope; with YaRN the given attention_factor, else get_mscale(factor,
    mscale) / get_mscale(factor, mscale_all_dim) when both are given and nonzero, else get_mscale(factor)
    (an mscale without mscale_all_dim is ignored). With longrope (HF's _compute_longrope_parameters) the given
    attention_factor, else 1 for factor = max_position / original_max <= 1, else sqrt(1 + ln(factor) /
    ln(original_max)); original_max defaults to max_position. The same factor for short and long frequencies."""
    kind = rope_type(scaling)
    if kind == "longrope":
        if scaling.get("attention_factor") is not None:
            return float(scaling["attention_factor"])
        original_max = original_max or max_position
        factor = max_position / original_max
        return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original_max))
    if kind != "yarn":
        return 1.0
    if scaling.get("attention_factor"):
        return float(scaling["attention_factor"])
    factor, mscale, mscale_all_dim = scaling["factor"], scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    return yarn_get_mscale(factor)


def yarn_original_max(scaling, max_position=None):
    """original_max_position_embeddings, falling back to max_position_embeddings when absent."""
    orig = scaling.get("original_max_position_embeddings") or max_position
    if not orig:
        raise ValueError(f"rope_scaling {scaling}: yarn needs original_max_position_embeddings or max_position")
    return orig


def yarn_ramp_bounds(dim, theta, scaling, max_position=None):
    """(low, high) of YaRN's ramp over the dim/2 frequencies of dim rotated channels: correction_dim(rot) =
    dim * ln(orig / (rot * 2 pi)) / (2 ln theta), the index whose wavelength fits rot times into orig
    positions; low = correction_dim(beta_fast), high = correction_dim(beta_slow), floored and ceiled when
    truncate (the default), then low = max(low, 0), high = min(high, dim - 1)."""
    orig = yarn_original_max(scaling, max_position)

    def correction_dim(rotations):
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))
    low, high = correction_dim(scaling.get("beta_fast") or 32), correction_dim(scaling.get("beta_slow") or 1)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def rope_inv_freq(head_size, theta, scaling=None, max_position=None, seq_len=None, original_max=None):
    """inv_freq (HS/2) float64, inv_freq[i] = theta^(-2i/HS); HS is the rotated width (DeepSeek-V3: qk_rope;
    Phi-3: int(head size * partial_rotary_factor)).
    With rope_type llama3, HF's _compute_llama3_parameters: wavelen = 2*pi/inv_freq; wavelen >
    orig/low_freq_factor: inv_freq/factor; wavelen < orig/high_freq_factor: unchanged; in between (both ends
    included) (1-s)*inv_freq/factor + s*inv_freq with s = (orig/wavelen - low_freq_factor) / (high_freq_factor
    - low_freq_factor). With rope_type yarn, HF's _compute_yarn_parameters: pos_freq = theta^(2i/HS),
    ramp(i) = clamp((i - low) / (high - low), 0, 1) (high + 0.001 when low == high) with (low, high) from
    yarn_ramp_bounds, inv_freq = ramp / (factor * pos_freq) + (1 - ramp) / pos_freq: below low unchanged,
    above high divided by factor, blended in between. max_position is max_position_embeddings, yarn's
    fallback for original_max_position_embeddings. With rope_type longrope, HF's _compute_longrope_parameters:
    inv_freq[i] = 1 / (ext[i] * theta^(2i/HS)), ext = long_factor when seq_len (the largest position id + 1) >
    original_max (default max_position), else short_factor (also for seq_len None, as HF's initial buffer). Not
    rounded to float32 (Tessera rounds once), nor are the factors (HF reads them as float32)."""
    kind = rope_type(scaling)
    if kind == "longrope":
        original_max = original_max or max_position
        long = seq_len is not None and seq_len > original_max
        ext = torch.tensor(scaling["long_factor" if long else "short_factor"], dtype=torch.float64)
        if ext.numel() != head_size // 2:
            raise ValueError(f"longrope: {ext.numel()} factors for {head_size} rotated channels")
        return 1.0 / (ext * theta ** (torch.arange(0, head_size, 2, dtype=torch.float64) / head_size))
    if kind == "yarn":
        pos_freq = theta ** (torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)
        low, high = yarn_ramp_bounds(head_size, theta, scaling, max_position)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(head_size // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        keep = 1 - ramp
        return 1.0 / (scaling["factor"] * pos_freq) * (1 - keep) + 1.0 / pos_freq * keep
    inv_freq = theta ** (-torch.arange(0, head_size, 2, dtype=torch.float64) / head_size)
    if scaling is None:
        return inv_freq
    if kind != "llama3":
        raise ValueError(f"rope_scaling {scaling}: only rope_type 'llama3', 'yarn' and 'longrope' are supported")
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    orig = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    smooth = (orig / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    return torch.where(wavelen > orig / low, inv_freq / factor,
                       torch.where(wavelen < orig / high, inv_freq, blended))


def rope_cos_sin(inv_freq, T, scale=1.0, interleave=False):
    """cos, sin (T, HS) of angles p * inv_freq[i] for positions p = 0..T-1, each half repeated twice (interleave: each
    angle twice in a row, channels 2i and 2i+1 at frequency i, Cohere's layout), both times scale (YaRN's attention
    factor, rope_attention_factor)."""
    angles = torch.outer(torch.arange(T, dtype=inv_freq.dtype), inv_freq)   # (T, HS/2)
    angles = angles.repeat_interleave(2, dim=-1) if interleave else torch.cat((angles, angles), dim=-1)
    if scale != 1.0:
        return angles.cos() * scale, angles.sin() * scale
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """x (B, H, T, HS), cos and sin (T, R), R <= HS. For i < R/2: x'[i] = x[i] cos - x[i+R/2] sin, x'[i+R/2] =
    x[i+R/2] cos + x[i] sin; channels R.. pass unchanged (HF Phi3's q_rot, q_pass = q[..., :R], q[..., R:])."""
    R = cos.size(-1)
    if R < x.size(-1):
        return torch.cat((apply_rope(x[..., :R], cos, sin), x[..., R:]), dim=-1)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def causal_mask_bias(n, window=None):
    """(n, n) additive mask: 0 where query i sees key j, -inf elsewhere: j > i, and with a window W j <= i - W too
    (query i sees keys i - W < j <= i; nothing more hidden when W >= n)."""
    mask = torch.full((n, n), float("-inf")).triu(1)
    if window is not None:
        mask += torch.full_like(mask, float("-inf")).tril(-window)
    return mask


def gelu_tanh(x):
    """GELU's tanh form (HF's gelu_pytorch_tanh), Gemma's gate activation."""
    return F.gelu(x, approximate="tanh")


def gelu_new(x):
    """HF's gelu_new (NewGELUActivation; Phi-1.5's and Phi-2's hidden_act), GELU's tanh form as HF writes it out:
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def logit_softcap(x, cap):
    """Gemma 2's tanh soft-capping: cap * tanh(x / cap), in HF's order (divide, tanh, multiply); x itself when cap is
    None."""
    return x if cap is None else torch.tanh(x / cap) * cap


def attend(q, k, v, mask_bias, o_proj, scale=None, softcap=None):
    """Grouped-query attention after the projections: q (B,NH,T,HS), k and v (B,NKV,T,HS), query head h reading kv
    head h // (NH/NKV); softmax(q.k * scale + mask_bias[:T, :T]) v, heads concatenated, through o_proj. scale None
    divides by sqrt(HS) instead (Llama's form; it rounds otherwise than * HS^-0.5). softcap c (Gemma 2's
    attn_logit_softcapping) turns the scaled scores s into c * tanh(s / c) before the mask is added (capping after it
    would turn -inf into -c, a visible key)."""
    B, NH, T, HS = q.shape
    # repeat_interleave puts kv head j at query heads j*group .. j*group+group-1: h // group.
    group = NH // k.size(1)
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    att = q @ k.transpose(-2, -1)                                       # (B,NH,T,T)
    att = logit_softcap(att / math.sqrt(HS) if scale is None else att * scale, softcap) + mask_bias[:T, :T]
    y = att.softmax(dim=-1) @ v                                         # (B,NH,T,HS)
    return o_proj(y.transpose(1, 2).reshape(B, T, NH * HS))


# ---------------------------------------------------------------- blocks

class Attention(nn.Module):
    """Causal grouped-query attention: q (NH heads), k and v (NKV heads) of HS channels, RoPE on q and k (on
    their first R channels when cos and sin are R < HS wide: Phi-3's partial_rotary_factor),
    query head h attends with kv head h // (NH/NKV), scale 1/sqrt(HS), then o_proj. Biases on q, k and v
    with cfg.qkv_bias (Qwen2), none elsewhere; with cfg.qk_norm (Qwen3) q_norm and k_norm, RMSNorms of HS
    channels shared by the heads, normalise each query and key head before RoPE; with cfg.olmo2 or cfg.olmoe they
    are one RMSNorm over all NH*HS query (NKV*HS key) channels of a token, before the split into heads. A SmolLM3
    NoPE layer (cfg.uses_rope(layer) false) leaves q and k unrotated. In a sliding layer (cfg.layer_window(layer) W:
    Mistral's, Phi-3's and Starcoder2's every layer, Qwen2's and Qwen3's from max_window_layers on, Qwen3-MoE's every
    layer) the mask also hides every key W or more positions back: query i sees keys i - W < j <= i. Starcoder2
    (cfg.starcoder2): biases on q, k, v and o_proj, scores times HS^-0.5 (HF's scaling). GLM-4.5 (cfg.glm4_moe): q/k/v
    biases with qkv_bias (o_proj never), per-head q/k norms with qk_norm, RoPE on the first rotary_dim channels (cos
    and sin that wide), scores times HS^-0.5."""

    def __init__(self, cfg, layer=0):
        super().__init__()
        self.use_rope = cfg.uses_rope(layer)
        self.num_heads, self.num_kv_heads, HS, C = cfg.num_heads, cfg.num_kv_heads, cfg.head_size, cfg.channels
        bias = cfg.qkv_bias or cfg.starcoder2
        self.q_proj = nn.Linear(C, cfg.num_heads * HS, bias=bias)       # (NH*HS, C)
        self.k_proj = nn.Linear(C, cfg.num_kv_heads * HS, bias=bias)    # (NKV*HS, C)
        self.v_proj = nn.Linear(C, cfg.num_kv_heads * HS, bias=bias)    # (NKV*HS, C)
        self.o_proj = nn.Linear(cfg.num_heads * HS, C, bias=cfg.starcoder2)      # (C, NH*HS)
        # None: q.k / sqrt(HS), Llama's form; Starcoder2 and GLM-4.5: times HS^-0.5, as HF's code
        self.scale = cfg.attn_scale if cfg.starcoder2 or cfg.glm4_moe else None
        if cfg.qk_norm:
            self.q_norm = RMSNorm(HS, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(HS, cfg.rms_norm_eps)
        elif cfg.whole_qk_norm:
            self.q_norm = RMSNorm(cfg.num_heads * HS, cfg.rms_norm_eps)       # (NH*HS)
            self.k_norm = RMSNorm(cfg.num_kv_heads * HS, cfg.rms_norm_eps)    # (NKV*HS)
        self.whole_qk_norm = cfg.whole_qk_norm
        self.register_buffer("mask_bias", causal_mask_bias(cfg.max_seq_len, cfg.layer_window(layer)), persistent=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        NH, NKV = self.num_heads, self.num_kv_heads
        HS = self.q_proj.out_features // NH
        q, k = self.q_proj(x), self.k_proj(x)                              # (B,T,NH*HS), (B,T,NKV*HS)
        if self.whole_qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, NH, HS).transpose(1, 2)                           # (B,NH,T,HS)
        k = k.view(B, T, NKV, HS).transpose(1, 2)                          # (B,NKV,T,HS)
        v = self.v_proj(x).view(B, T, NKV, HS).transpose(1, 2)
        if hasattr(self, "q_norm") and not self.whole_qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.use_rope:
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return attend(q, k, v, self.mask_bias, self.o_proj, self.scale)


class MLP(nn.Module):
    """Llama's SwiGLU: down(act(gate x) * up x), act silu; gate, up (F, C), down (C, F), F = width or
    cfg.intermediate. act gelu_tanh: Gemma's GeGLU (hidden_activation gelu_pytorch_tanh)."""

    def __init__(self, cfg, act=F.silu, width=None):
        super().__init__()
        self.act = act
        width = width or cfg.intermediate
        self.gate_proj = nn.Linear(cfg.channels, width, bias=False)
        self.up_proj = nn.Linear(cfg.channels, width, bias=False)
        self.down_proj = nn.Linear(width, cfg.channels, bias=False)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class Expert(nn.Module):
    """Mixtral's expert, the same SwiGLU: w2(silu(w1 x) * w3 x); w1 gate (F, C), w3 up (F, C), w2 down (C, F)."""

    def __init__(self, cfg):
        super().__init__()
        self.w1 = nn.Linear(cfg.channels, cfg.intermediate, bias=False)
        self.w2 = nn.Linear(cfg.intermediate, cfg.channels, bias=False)
        self.w3 = nn.Linear(cfg.channels, cfg.intermediate, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def top_k_indices(values, top_k):
    """values (N, E) -> (N, k) int64: the k largest per row in descending order, ties to the lower index
    (Tessera's rule; torch.topk does not promise one)."""
    return values.sort(dim=-1, descending=True, stable=True).indices[:, :top_k]


def route(logits, top_k, normalise=True):
    """logits (N, E) -> weights (N, k), chosen (N, k): the top-k experts by softmax probability (ties to the
    lower index), their probabilities renormalised to sum to 1 per token, or with normalise false (Qwen3-MoE's
    norm_topk_prob false) the probabilities themselves."""
    probs = logits.softmax(dim=-1)
    chosen = top_k_indices(probs, top_k)
    top = probs.gather(1, chosen)
    return (top / top.sum(dim=-1, keepdim=True) if normalise else top), chosen


class SparseMoe(nn.Module):
    """Mixtral's block_sparse_moe (or, with Qwen3-MoE's and OLMoE's expert class MLP, their mlp), dropless:
    out[n] = sum over the k chosen e of weight[n, e] * expert_e(x[n]), the weights renormalised unless
    cfg.norm_topk_prob is false. gate is the router (E, C). forward also returns the router logits (N, E),
    N = B*T, for the losses."""

    def __init__(self, cfg, expert=None):
        super().__init__()
        self.top_k, self.normalise = cfg.top_k, cfg.norm_topk_prob
        self.gate = nn.Linear(cfg.channels, cfg.num_experts, bias=False)
        self.experts = nn.ModuleList([(expert or Expert)(cfg) for _ in range(cfg.num_experts)])

    def forward(self, x):
        B, T, C = x.shape
        x = x.reshape(B * T, C)
        logits = self.gate(x)                                                     # (N,E)
        weights, chosen = route(logits, self.top_k, self.normalise)               # (N,k)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            out.index_add_(0, token, weights[token, slot, None] * expert(x[token]))
        return out.view(B, T, C), logits


class SharedExpertMoe(SparseMoe):
    """Qwen2-MoE's mlp (HF's Qwen2MoeSparseMoeBlock), in HF's module order: gate (the router, (E, C)), experts
    (Llama's MLP, cfg.intermediate wide), shared_expert (one SwiGLU, cfg.shared_intermediate wide) and
    shared_expert_gate ((1, C), no bias). out[n] = sum over the k chosen e of weight[n, e] * expert_e(x[n])
    (SparseMoe's routing, renormalised only with norm_topk_prob) + sigmoid(shared_expert_gate . x[n]) *
    shared_expert(x[n]): one scalar gate per token."""

    def __init__(self, cfg):
        super().__init__(cfg, MLP)
        self.shared_expert = MLP(cfg, width=cfg.shared_intermediate)
        self.shared_expert_gate = nn.Linear(cfg.channels, 1, bias=False)

    def forward(self, x):
        out, logits = super().forward(x)
        return out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x), logits


class DecoderLayer(nn.Module):
    """x += attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x)) (or the MoE; Qwen2-MoE's with its gated
    shared expert). OLMo 2 has no
    input_layernorm: x += post_attention_layernorm(attn(x)); x += post_feedforward_layernorm(mlp(x)). OLMoE is
    pre-norm, its mlp the MoE. Starcoder2 is pre-norm with nn.LayerNorms and GPT-2's MLP (c_fc, c_proj, gelu tanh,
    biased). layer is the block's index (SmolLM3's NoPE layers)."""

    def __init__(self, cfg, layer=0):
        super().__init__()
        self.olmo2 = cfg.olmo2
        norm = norm_class(cfg)
        if not cfg.olmo2:
            self.input_layernorm = norm(cfg.channels, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = norm(cfg.channels, cfg.rms_norm_eps)
        if cfg.qwen2_moe:                                # Qwen2-MoE: the MoE plus the gated shared expert
            self.mlp = SharedExpertMoe(cfg)
        elif cfg.is_moe and (cfg.qk_norm or cfg.olmoe):  # Qwen3-MoE, OLMoE: the MoE under "mlp", Llama's MLPs
            self.mlp = SparseMoe(cfg, MLP)
        elif cfg.is_moe:
            self.block_sparse_moe = SparseMoe(cfg)
        elif cfg.starcoder2:                             # Starcoder2MLP: c_proj(gelu_tanh(c_fc x)), both biased
            self.mlp = tg.MLP(cfg, cfg.intermediate)
        else:
            self.mlp = MLP(cfg)
        if cfg.olmo2:
            self.post_feedforward_layernorm = RMSNorm(cfg.channels, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        """Returns the new x and the router logits (N, E), or None for a dense layer."""
        if self.olmo2:
            x = x + self.post_attention_layernorm(self.self_attn(x, cos, sin))
            return x + self.post_feedforward_layernorm(self.mlp(x)), None
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        moe = getattr(self, "block_sparse_moe", None) or (self.mlp if isinstance(self.mlp, SparseMoe) else None)
        if moe is not None:
            out, logits = moe(h)
            return x + out, logits
        return x + self.mlp(h), None


class Decoder(nn.Module):
    """HF's LlamaModel / MixtralModel (Gemma3TextModel and Gemma2Model with layer Gemma3DecoderLayer, GemmaModel with
    GemmaDecoderLayer, norm GemmaRMSNorm; Starcoder2Model with norm nn.LayerNorm): the tensors under the "model." prefix
    (embed_tokens, layers, norm)."""

    def __init__(self, cfg, layer=DecoderLayer, norm=RMSNorm):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.channels)         # (V,C)
        self.layers = nn.ModuleList([layer(cfg, i) for i in range(cfg.num_layers)])
        self.norm = norm(cfg.channels, cfg.rms_norm_eps)


def decoder_forward(model, idx, rope):
    """The forward Llama, Glm4Moe and torch_deepseek.DeepseekV3 share (they differ in their blocks and RoPE only):
    idx (B,T) int64 -> logits (B,T,V) and, per MoE layer, what its block returns beside x (Llama's router logits
    (B*T, E); GLM-4.5's and DeepSeek's (router logits, selection values)). model.model is a Decoder whose blocks take
    (x, cos, sin) and return (x, that or None for a dense layer); rope(T) gives cos, sin float64 for positions
    0..T-1, cast here to the weights' dtype; the head is embed_tokens' weight when tied, else model.lm_head."""
    B, T = idx.shape
    assert T <= model.cfg.max_seq_len, f"sequence length {T} exceeds context {model.cfg.max_seq_len}"
    dtype = model.model.norm.weight.dtype
    cos, sin = (t.to(dtype) for t in rope(T))
    x = model.model.embed_tokens(idx)
    routings = []
    for layer in model.model.layers:
        x, routing = layer(x, cos, sin)
        if routing is not None:
            routings.append(routing)
    head = model.model.embed_tokens.weight if model.cfg.tie_word_embeddings else model.lm_head.weight
    return F.linear(model.model.norm(x), head), routings


class Llama(nn.Module):
    """LlamaForCausalLM, or MixtralForCausalLM when cfg.num_experts > 0 (Qwen2/3, Qwen3-MoE, Qwen2-MoE, Phi-3, OLMo 2,
    OLMoE, SmolLM3, Mistral, Starcoder2 by cfg's flags)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg, norm=norm_class(cfg))
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.channels, cfg.vocab_size, bias=False)   # (V,C)
        # float64 whatever the model's dtype (plain attributes, not buffers, so .to() leaves them). R = HS but
        # for Phi-3's partial_rotary_factor; longrope's inv_freq is short_factor's, inv_freq_long long_factor's.
        R, orig = cfg.rotary_dim, cfg.original_max
        self.inv_freq = rope_inv_freq(R, cfg.rope_theta, cfg.rope_scaling, cfg.max_seq_len,
                                      original_max=orig)   # (R/2)
        self.longrope = rope_type(cfg.rope_scaling) == "longrope"
        if self.longrope:
            self.inv_freq_long = rope_inv_freq(R, cfg.rope_theta, cfg.rope_scaling, cfg.max_seq_len, orig + 1, orig)
        # on cos and sin: 1 but for YaRN and longrope
        self.rope_scale = rope_attention_factor(cfg.rope_scaling, cfg.max_seq_len, orig)

    def rope(self, T):
        """cos, sin (T, R) float64 for positions 0..T-1. longrope (HF's dynamic update, seq_len = the largest
        position id + 1 = T): long_factor's frequencies when T > original_max_position_embeddings, else
        short_factor's; both times rope_scale."""
        long = self.longrope and T > self.cfg.original_max
        return rope_cos_sin(self.inv_freq_long if long else self.inv_freq, T, self.rope_scale)

    def forward(self, idx):
        """idx (B,T) int64 -> logits (B,T,V) and a list of router logits (B*T, E), one per MoE layer."""
        return decoder_forward(self, idx, self.rope)


# ---------------------------------------------------------------- Gemma 3 (Gemma3ForCausalLM, gemma3_text)

class GemmaRMSNorm(nn.Module):
    """HF's GemmaRMSNorm (Gemma2RMSNorm, Gemma3RMSNorm alike): out = x * rsqrt(mean(x^2 over C) + eps) * (1 + weight);
    the stored weight is centred on 0 (HF initialises it to zeros)."""

    def __init__(self, channels, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(channels))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


class Gemma3Attention(nn.Module):
    """Gemma 3's attention: q (NH heads), k and v (NKV heads) of HS = head_dim channels (decoupled from C / NH);
    q_norm and k_norm, GemmaRMSNorms of HS channels shared by the heads, normalise each query and key head before
    RoPE; query head h reads kv head h // (NH/NKV); scores q.k * query_pre_attn_scalar^-0.5 (no softcapping); a
    sliding layer's query i sees keys i - W < j <= i only (W = sliding_window), a global layer's every j <= i."""

    def __init__(self, cfg, layer):
        super().__init__()
        self.num_heads, self.num_kv_heads, HS, C = cfg.num_heads, cfg.num_kv_heads, cfg.head_size, cfg.channels
        self.head_size, self.scale = HS, cfg.attn_scale
        self.q_proj = nn.Linear(C, cfg.num_heads * HS, bias=False)       # (NH*HS, C)
        self.k_proj = nn.Linear(C, cfg.num_kv_heads * HS, bias=False)    # (NKV*HS, C)
        self.v_proj = nn.Linear(C, cfg.num_kv_heads * HS, bias=False)    # (NKV*HS, C)
        self.o_proj = nn.Linear(cfg.num_heads * HS, C, bias=False)       # (C, NH*HS)
        self.q_norm = GemmaRMSNorm(HS, cfg.rms_norm_eps)
        self.k_norm = GemmaRMSNorm(HS, cfg.rms_norm_eps)
        self.register_buffer("mask_bias", causal_mask_bias(cfg.max_seq_len, cfg.layer_window(layer)), persistent=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        NH, NKV, HS = self.num_heads, self.num_kv_heads, self.head_size
        q = self.q_norm(self.q_proj(x).view(B, T, NH, HS)).transpose(1, 2)      # (B,NH,T,HS)
        k = self.k_norm(self.k_proj(x).view(B, T, NKV, HS)).transpose(1, 2)    # (B,NKV,T,HS)
        v = self.v_proj(x).view(B, T, NKV, HS).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return attend(q, k, v, self.mask_bias, self.o_proj, self.scale)


class Gemma2Attention(nn.Module):
    """Gemma 2's attention: q (NH heads), k and v (NKV heads) of HS = head_dim channels (decoupled from C / NH), no
    q/k norms, RoPE on q and k; query head h reads kv head h // (NH/NKV); scores s = q.k * query_pre_attn_scalar^-0.5,
    then s = cap * tanh(s / cap) with cap = attn_logit_softcapping (none when None), then the mask: a sliding layer's
    query i sees keys i - W < j <= i only (W = sliding_window), a global layer's every j <= i. Also Gemma (1)'s
    attention (GemmaDecoderLayer): no cap, no window, attn_scale = HS^-0.5 (no query_pre_attn_scalar)."""

    def __init__(self, cfg, layer):
        super().__init__()
        self.num_heads, self.num_kv_heads, HS, C = cfg.num_heads, cfg.num_kv_heads, cfg.head_size, cfg.channels
        self.head_size, self.scale, self.softcap = HS, cfg.attn_scale, cfg.attn_logit_softcapping
        self.q_proj = nn.Linear(C, cfg.num_heads * HS, bias=False)       # (NH*HS, C)
        self.k_proj = nn.Linear(C, cfg.num_kv_heads * HS, bias=False)    # (NKV*HS, C)
        self.v_proj = nn.Linear(C, cfg.num_kv_heads * HS, bias=False)    # (NKV*HS, C)
        self.o_proj = nn.Linear(cfg.num_heads * HS, C, bias=False)       # (C, NH*HS)
        self.register_buffer("mask_bias", causal_mask_bias(cfg.max_seq_len, cfg.layer_window(layer)), persistent=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        NH, NKV, HS = self.num_heads, self.num_kv_heads, self.head_size
        q = self.q_proj(x).view(B, T, NH, HS).transpose(1, 2)      # (B,NH,T,HS)
        k = self.k_proj(x).view(B, T, NKV, HS).transpose(1, 2)     # (B,NKV,T,HS)
        v = self.v_proj(x).view(B, T, NKV, HS).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return attend(q, k, v, self.mask_bias, self.o_proj, self.scale, self.softcap)


class Gemma3DecoderLayer(nn.Module):
    """h = x + post_attention_layernorm(attn(input_layernorm(x))); out = h + post_feedforward_layernorm(
    mlp(pre_feedforward_layernorm(h))), every norm a GemmaRMSNorm (1 + w). Modules in HF's order. Also Gemma 2's
    block (Gemma2DecoderLayer), with Gemma2Attention when cfg.gemma2."""

    def __init__(self, cfg, layer):
        super().__init__()
        self.self_attn = (Gemma2Attention if cfg.gemma2 else Gemma3Attention)(cfg, layer)
        self.mlp = MLP(cfg, gelu_tanh)       # GeGLU
        C, eps = cfg.channels, cfg.rms_norm_eps
        self.input_layernorm = GemmaRMSNorm(C, eps)
        self.post_attention_layernorm = GemmaRMSNorm(C, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(C, eps)
        self.post_feedforward_layernorm = GemmaRMSNorm(C, eps)

    def forward(self, x, cos, sin):
        x = x + self.post_attention_layernorm(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))


def gemma3_embed_scale(channels):
    """sqrt(C) as HF's Gemma3TextScaledWordEmbedding holds it: a float32 buffer (torch.tensor(C**0.5)), cast to the
    weights' dtype when used, so float32-rounded in float32 and float64 alike (bfloat16 rounds it further)."""
    return float(torch.tensor(channels ** 0.5, dtype=torch.float32))


def gemma3_inv_freq(cfg, layer_type):
    """inv_freq (HS/2) float64 of a layer type: full_attention theta = rope_theta, divided by the linear factor
    when rope_scaling is linear; sliding_attention theta = rope_local_base_freq, never scaled (transformers 4.5x:
    rotary_emb_local with rope_scaling {"rope_type": "default"}; 5.x: rope_parameters["sliding_attention"])."""
    if layer_type == "sliding_attention":
        return rope_inv_freq(cfg.head_size, cfg.rope_local_base_freq)
    inv_freq = rope_inv_freq(cfg.head_size, cfg.rope_theta)
    return inv_freq / cfg.rope_scaling["factor"] if rope_type(cfg.rope_scaling) == "linear" else inv_freq


class Gemma3(nn.Module):
    """Gemma3ForCausalLM (model_type gemma3_text), text only: x = embed_tokens(idx) * f32(sqrt(C)); the blocks,
    each sliding or global by cfg.layer_types (RoPE base and window by type); logits = norm(x) @ E^T when tied
    (the default), else lm_head. No logit softcapping (Gemma 3's final_logit_softcapping and
    attn_logit_softcapping are null). forward returns (logits, []) as Llama's does for a dense model."""

    def __init__(self, cfg):
        super().__init__()
        assert cfg.gemma3, "Gemma3 needs LlamaConfig(gemma3=True)"
        self.cfg = cfg
        self.model = Decoder(cfg, Gemma3DecoderLayer, GemmaRMSNorm)     # HF's Gemma3TextModel
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.channels, cfg.vocab_size, bias=False)   # (V,C)
        self.embed_scale = gemma3_embed_scale(cfg.channels)
        # float64 whatever the model's dtype (plain attributes, not buffers)
        self.inv_freq = {t: gemma3_inv_freq(cfg, t) for t in GEMMA3_LAYER_TYPES}

    def rope(self, T, layer_type):
        """cos, sin (T, HS) float64 of a layer type for positions 0..T-1."""
        return rope_cos_sin(self.inv_freq[layer_type], T)

    def forward(self, idx):
        B, T = idx.shape
        assert T <= self.cfg.max_seq_len, f"sequence length {T} exceeds context {self.cfg.max_seq_len}"
        dtype = self.model.norm.weight.dtype
        rope = {t: tuple(u.to(dtype) for u in self.rope(T, t)) for t in GEMMA3_LAYER_TYPES}
        x = self.model.embed_tokens(idx) * self.embed_scale
        for layer, kind in zip(self.model.layers, self.cfg.layer_types):
            x = layer(x, *rope[kind])
        head = self.model.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight
        return F.linear(self.model.norm(x), head), []


# ---------------------------------------------------------------- Gemma 2 (Gemma2ForCausalLM, gemma2)

class GemmaCausalLM(nn.Module):
    """What Gemma (1) and Gemma 2 share (Gemma and Gemma2 below differ only in their blocks): x = embed_tokens(idx) *
    f32(sqrt(C)) (HF casts sqrt(C) to the hidden states' dtype, so float32 models take f32(sqrt(C)); this takes it in
    float64 runs too); the blocks (layer, HF's GemmaDecoderLayer or Gemma2DecoderLayer), RoPE with rope_theta in every
    layer; logits = norm(x) @ E^T when tied (the default), else lm_head, then soft-capped by final_logit_softcapping
    (Gemma 2's; None, Gemma (1)'s always, leaves them as they are); the cross-entropy is taken on the capped logits.
    forward returns (logits, []) as Llama's does for a dense model."""

    def __init__(self, cfg, layer):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg, layer, GemmaRMSNorm)     # HF's GemmaModel, Gemma2Model
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.channels, cfg.vocab_size, bias=False)   # (V,C)
        self.embed_scale = gemma3_embed_scale(cfg.channels)
        self.inv_freq = rope_inv_freq(cfg.head_size, cfg.rope_theta)   # float64, a plain attribute

    def rope(self, T):
        """cos, sin (T, HS) float64 for positions 0..T-1, the same in every layer."""
        return rope_cos_sin(self.inv_freq, T)

    def forward(self, idx):
        B, T = idx.shape
        assert T <= self.cfg.max_seq_len, f"sequence length {T} exceeds context {self.cfg.max_seq_len}"
        dtype = self.model.norm.weight.dtype
        cos, sin = (u.to(dtype) for u in self.rope(T))
        x = self.model.embed_tokens(idx) * self.embed_scale
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        head = self.model.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight
        # Read from cfg at each call (not kept at __init__), so that a changed cfg (the checks' "no final cap") applies.
        return logit_softcap(F.linear(self.model.norm(x), head), self.cfg.final_logit_softcapping), []


class Gemma2(GemmaCausalLM):
    """Gemma2ForCausalLM (model_type gemma2): GemmaCausalLM with Gemma 3's blocks with Gemma2Attention (no q/k norms,
    attention logits soft-capped), sliding or global by cfg.layer_types (the window only; RoPE with rope_theta in every
    layer); the logits soft-capped by final_logit_softcapping."""

    def __init__(self, cfg):
        assert cfg.gemma2, "Gemma2 needs LlamaConfig(gemma2=True)"
        super().__init__(cfg, Gemma3DecoderLayer)     # HF's Gemma2Model


# ---------------------------------------------------------------- Gemma (1) (GemmaForCausalLM, gemma)

class GemmaDecoderLayer(nn.Module):
    """Gemma (1)'s block, Llama's pre-norm one: h = x + attn(input_layernorm(x)); out = h + mlp(
    post_attention_layernorm(h)), both norms GemmaRMSNorms (1 + w); mlp the GeGLU down(gelu_tanh(gate x) * up x);
    attn Gemma2Attention without a cap or window (HS = head_dim, scores q.k * HS^-0.5, RoPE, causal). Modules in HF's
    order (self_attn, mlp, input_layernorm, post_attention_layernorm)."""

    def __init__(self, cfg, layer):
        super().__init__()
        self.self_attn = Gemma2Attention(cfg, layer)
        self.mlp = MLP(cfg, gelu_tanh)       # GeGLU
        self.input_layernorm = GemmaRMSNorm(cfg.channels, cfg.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(cfg.channels, cfg.rms_norm_eps)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Gemma(GemmaCausalLM):
    """GemmaForCausalLM (model_type gemma: Gemma 2B and 7B, CodeGemma): GemmaCausalLM with GemmaDecoderLayer blocks,
    causal attention. No soft caps (LlamaConfig refuses final_logit_softcapping outside gemma2), no window, no q/k
    norms."""

    def __init__(self, cfg):
        assert cfg.gemma1, "Gemma needs LlamaConfig(gemma1=True)"
        super().__init__(cfg, GemmaDecoderLayer)     # HF's GemmaModel


# ---------------------------------------------------------------- GLM-4.5 (Glm4MoeForCausalLM, glm4_moe)

def _deepseek():
    """torch_deepseek, imported when first needed (it imports this module)."""
    import torch_deepseek
    return torch_deepseek


def deepseek_moe_config(cfg):
    """The torch_deepseek.DeepseekConfig (deepseek_v3) of a glm4_moe cfg's MoE: the fields torch_deepseek.Moe reads
    (experts, top-k, widths, shared experts, routed scale, norm_topk_prob, groups), GLM-4.5's router being DeepSeek-V3's
    line for line. Raises DeepseekConfig's errors (n_group must divide num_experts, topk_group be in [1, n_group])."""
    return _deepseek().DeepseekConfig(
        num_layers=cfg.num_layers, channels=cfg.channels, num_experts=cfg.num_experts, top_k=cfg.top_k,
        moe_intermediate=cfg.moe_intermediate, num_shared_experts=cfg.num_shared_experts, first_dense=cfg.first_dense,
        routed_scale=cfg.routed_scale, norm_topk_prob=cfg.norm_topk_prob, n_group=cfg.n_group,
        topk_group=cfg.topk_group, model_type="deepseek_v3")


class Glm4MoeDecoderLayer(nn.Module):
    """HF's Glm4MoeDecoderLayer: x += self_attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x)). self_attn is
    Attention with cfg.glm4_moe (q/k/v biases with qkv_bias, o_proj unbiased, per-head q/k norms before RoPE with
    qk_norm, RoPE on the first rotary_dim channels of each head, scores times HS^-0.5); mlp is a SwiGLU intermediate
    wide in the layers < first_dense, else torch_deepseek.Moe (DeepSeek-V3's: router mlp.gate with
    e_score_correction_bias, experts moe_intermediate wide, shared_experts)."""

    def __init__(self, cfg, layer=0):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.channels, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.channels, cfg.rms_norm_eps)
        self.mlp = _deepseek().Moe(deepseek_moe_config(cfg)) if cfg.is_moe_layer(layer) else MLP(cfg)

    def forward(self, x, cos, sin):
        """Returns the new x and (router logits, selection values) for a MoE layer, or None for a dense one."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        if isinstance(self.mlp, MLP):
            return x + self.mlp(h), None
        out, logits, choice = self.mlp(h)
        return x + out, (logits, choice)


class Glm4Moe(nn.Module):
    """Glm4MoeForCausalLM (GLM-4.5, GLM-4.5-Air; HF's modeling_glm4_moe.py): embed_tokens, Glm4MoeDecoderLayers, norm,
    lm_head (absent when tied). RoPE: inv_freq[i] = theta^(-2i/R) over R = int(HS * partial_rotary_factor) channels,
    rotate_half pairs (i, i + R/2) on channels [0, R) of each q and k head, channels [R, HS) unrotated. forward returns
    the logits and, per MoE layer, (router logits (B*T, E), selection values sigmoid + bias (B*T, E)), as
    torch_deepseek.DeepseekV3 does, so that its losses, loads and bias balancing apply. No multi-token-prediction layers
    (num_nextn_predict_layers 0)."""

    def __init__(self, cfg):
        super().__init__()
        if not cfg.glm4_moe:
            raise ValueError("Glm4Moe needs a glm4_moe config")
        self.cfg = cfg
        self.model = Decoder(cfg, layer=Glm4MoeDecoderLayer)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.channels, cfg.vocab_size, bias=False)   # (V,C)
        # float64 whatever the model's dtype (a plain attribute, not a buffer, so .to() leaves it)
        self.inv_freq = rope_inv_freq(cfg.rotary_dim, cfg.rope_theta)          # (R/2)

    def moe_layers(self):
        return [layer.mlp for layer in self.model.layers if not isinstance(layer.mlp, MLP)]

    def rope(self, T):
        """cos, sin (T, R) float64 for positions 0..T-1, the same in every layer."""
        return rope_cos_sin(self.inv_freq, T)

    def forward(self, idx):
        return decoder_forward(self, idx, self.rope)


def model_class(cfg):
    """Gemma3 for cfg.gemma3, Gemma2 for cfg.gemma2, Gemma for cfg.gemma1, Glm4Moe for cfg.glm4_moe, else Llama (every
    other family here)."""
    return (Gemma3 if cfg.gemma3 else Gemma2 if cfg.gemma2 else Gemma if cfg.gemma1 else Glm4Moe if cfg.glm4_moe
            else Llama)


def router_losses(router_logits, top_k):
    """Per MoE layer l over its N tokens: aux_l = E * sum_e (count_e / N) * P_e, count_e = number of
    (token, slot) picks of expert e among the top-k (sum_e count_e = N*k, so a balanced router gives k),
    P_e = mean_n softmax(logits)[n, e]; z_l = mean_n logsumexp(logits[n])^2. Returns (aux, z), each
    the mean over layers; counts carry no gradient. Zeros when there is no MoE layer."""
    if not router_logits:
        zero = torch.zeros((), dtype=torch.float64)
        return zero, zero
    aux, z = [], []
    for logits in router_logits:
        N, E = logits.shape
        probs = logits.softmax(dim=-1)
        counts = torch.bincount(route(logits, top_k)[1].reshape(-1), minlength=E).to(probs.dtype)
        aux.append(E * torch.sum(counts / N * probs.mean(dim=0)))
        z.append(torch.logsumexp(logits, dim=-1).pow(2).mean())
    return torch.stack(aux).mean(), torch.stack(z).mean()


def objective(model, idx, targets, aux_coef=0.0, z_coef=0.0):
    """One micro-batch: returns (ce + aux_coef*aux + z_coef*z, ce, aux, z, router logits), ce the mean
    token cross-entropy over V. GLM-4.5 (cfg.glm4_moe): DeepSeek-V3's sigmoid-router losses
    (torch_deepseek.router_losses: p = scores / their row sum, picks by scores + bias), and the selection values
    (scores + bias) per MoE layer in place of the router logits, as torch_deepseek.objective returns them."""
    logits, router_logits = model(idx)
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    if model.cfg.glm4_moe:
        aux, z = _deepseek().router_losses(router_logits, model.cfg.top_k)
        return ce + aux_coef * aux + z_coef * z, ce, aux, z, [choice for _, choice in router_logits]
    aux, z = router_losses(router_logits, model.cfg.top_k)
    return ce + aux_coef * aux + z_coef * z, ce, aux, z, router_logits


# Qwen2-MoE's shared_expert_gate init std: at the tiny runs' C = 32 and unit-RMS inputs its logit has a std of about
# 0.5 * sqrt(32) = 2.8, so sigmoid(logit) spreads over most of (0, 1) and a run that forgets the gate, or the sigmoid,
# moves visibly (README.md's "Qwen2-MoE"). HF's own init (N(0, 0.02)) would leave every gate near 0.5.
QWEN2_MOE_SHARED_GATE_STD = 0.5

# Gemma (1)'s MLP init: gate_proj N(0, 0.32), up_proj N(0, 0.08), down_proj N(0, 0.08/sqrt(2L)), in place of 0.02,
# 0.02 and 0.02/sqrt(2L). At C = 32 and unit-RMS inputs the gate's pre-activations then have a std of about 0.32 *
# sqrt(32) = 1.8, where gelu's tanh form and the exact erf one differ most (2e-4 of the value, 5e-4 of the slope; at
# most 4.7e-4 absolute, at -2.7), and the MLP carries a visible share of the grad norm, so a run with the exact GELU
# moves by 3e-4 or more within 10 steps (README.md's "Gemma (1)"). With the usual init the pre-activations are about
# 0.11, where the two agree to 1e-5, the embeddings hold 96% of the squared grad norm, and the exact GELU moved the
# grad norms by only 3e-8, below fp32's drift.
GEMMA_GATE_STD, GEMMA_UP_STD, GEMMA_DOWN_STD = 0.32, 0.08, 0.08


def init_parameters(model, generator, stds=(), gain_offset=1.0):
    """The draws every family's init_weights makes, in named_parameters() order: each bias N(0, 0.1), each other 1-D
    parameter (a norm's gain) gain_offset + N(0, 0.1), each matrix N(0, std) with the std of the first (suffixes, std)
    of stds whose suffixes (a str or a tuple of them) end its name, else N(0, 0.02); every one then rounded to float32
    (kept in the model's dtype)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
            elif p.dim() == 1:
                p.copy_(gain_offset + 0.1 * torch.randn(p.shape, generator=generator, dtype=torch.float64))
            else:
                p.normal_(0.0, next((std for ends, std in stds if name.endswith(ends)), 0.02), generator=generator)
            p.copy_(p.float())


def init_weights(model, generator, router_std=1.0):
    """Linear/embedding weights N(0, 0.02); the residual projections (o_proj, down_proj, w2, Starcoder2's c_proj)
    N(0, 0.02/sqrt(2L)); RMSNorm (LayerNorm) gains 1 + N(0, 0.1); every bias (q/k/v, Starcoder2's o_proj, c_fc, c_proj
    and LayerNorm biases) N(0, 0.1); the router N(0, router_std), large so that fp32
    and fp64 pick the same experts; Qwen2-MoE's shared_expert_gate N(0, QWEN2_MOE_SHARED_GATE_STD), large so that
    its sigmoid varies from token to token. Gemma's, Gemma 2's and Gemma 3's norms store w = N(0, 0.1) and apply 1 + w
    (so a loader that forgets the offset is caught). Gemma (1)'s MLP is drawn wider (GEMMA_GATE_STD, GEMMA_UP_STD,
    GEMMA_DOWN_STD), so that its GELU's form shows. Then rounds every parameter to float32 (kept in the model's
    dtype). GLM-4.5 (glm4_moe): the same rules (routed and shared experts' down_proj residual, router mlp.gate
    N(0, router_std)), then each MoE layer's e_score_correction_bias (a buffer) N(0, 0.1) rounded to float32, drawn
    after every parameter as torch_deepseek.init_weights does."""
    std_resid = 0.02 / math.sqrt(2 * model.cfg.num_layers)
    stds = [(("block_sparse_moe.gate.weight", "mlp.gate.weight"), router_std),
            ("mlp.shared_expert_gate.weight", QWEN2_MOE_SHARED_GATE_STD)]
    if model.cfg.gemma1:
        stds += [("mlp.gate_proj.weight", GEMMA_GATE_STD), ("mlp.up_proj.weight", GEMMA_UP_STD),
                 ("mlp.down_proj.weight", GEMMA_DOWN_STD / math.sqrt(2 * model.cfg.num_layers))]
    stds.append((("o_proj.weight", "down_proj.weight", "w2.weight", "c_proj.weight"), std_resid))
    init_parameters(model, generator, stds, 0.0 if model.cfg.gemma_norms else 1.0)
    if model.cfg.glm4_moe:      # then DeepSeek-V3's selection biases, as torch_deepseek.init_weights draws them
        with torch.no_grad():
            for moe in model.moe_layers():
                bias = moe.gate.e_score_correction_bias
                bias.copy_((0.1 * torch.randn(bias.shape, generator=generator, dtype=torch.float64)).float())


# ---------------------------------------------------------------- Hugging Face folder

def hf_config(cfg):
    """The config.json of HF's LlamaForCausalLM (model_type llama), Qwen2ForCausalLM (qwen2),
    Qwen3ForCausalLM (qwen3), Qwen3MoeForCausalLM (qwen3_moe), MixtralForCausalLM (mixtral) or
    Phi3ForCausalLM (phi3: no head_dim, the heads are hidden_size / num_attention_heads wide;
    original_max_position_embeddings and partial_rotary_factor at the top level, rope_scaling null or longrope's,
    sliding_window W or null) or Olmo2ForCausalLM (olmo2: no head_dim either, rope_scaling null) or MistralForCausalLM
    (mistral: Llama's keys but the bias ones, with head_dim and sliding_window W or null) or OlmoeForCausalLM (olmoe:
    no head_dim, rope_scaling and clip_qkv null, intermediate_size each expert's width, output_router_logits false) or
    SmolLM3ForCausalLM (smollm3: no head_dim; no_rope_layers, no_rope_layer_interval, no sliding window and
    layer_types all full_attention, as SmolLM3Config writes them) or Gemma3ForCausalLM (gemma3: gemma3_hf_config) or
    Gemma2ForCausalLM (gemma2: gemma2_hf_config) or GemmaForCausalLM (gemma: gemma_hf_config) or Starcoder2ForCausalLM
    (starcoder2: starcoder2_hf_config) or Qwen2MoeForCausalLM (qwen2_moe: qwen2_moe_hf_config). Qwen's three write
    qwen_window_config's keys. Glm4MoeForCausalLM (glm4_moe: glm4_moe_hf_config)."""
    if cfg.glm4_moe:
        return glm4_moe_hf_config(cfg)
    if cfg.gemma3:
        return gemma3_hf_config(cfg)
    if cfg.gemma2:
        return gemma2_hf_config(cfg)
    if cfg.gemma1:
        return gemma_hf_config(cfg)
    if cfg.starcoder2:
        return starcoder2_hf_config(cfg)
    common = {
        "hidden_size": cfg.channels, "intermediate_size": cfg.intermediate,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads, "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling, "tie_word_embeddings": cfg.tie_word_embeddings, "hidden_act": "silu",
        "attention_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "float32",
    }
    if cfg.qwen2_moe:
        return qwen2_moe_hf_config(cfg, common)
    if cfg.phi3:
        return {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", **common,
                "original_max_position_embeddings": cfg.original_max,
                "partial_rotary_factor": cfg.partial_rotary_factor, "sliding_window": cfg.sliding_window,
                "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_bias": False}
    if cfg.olmo2:
        return {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", **common, "attention_bias": False}
    if cfg.mistral:
        return {"architectures": ["MistralForCausalLM"], "model_type": "mistral", **common, "head_dim": cfg.head_size,
                "sliding_window": cfg.sliding_window}
    if cfg.smollm3:
        return {"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", **common, "attention_bias": False,
                "mlp_bias": False, "no_rope_layers": list(cfg.no_rope_layers),
                "no_rope_layer_interval": cfg.no_rope_layer_interval, "use_sliding_window": False,
                "sliding_window": None, "layer_types": ["full_attention"] * cfg.num_layers}
    if cfg.olmoe:
        return {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", **common, "attention_bias": False,
                "clip_qkv": None, "num_experts": cfg.num_experts, "num_experts_per_tok": cfg.top_k,
                "norm_topk_prob": cfg.norm_topk_prob, "output_router_logits": False, "router_aux_loss_coef": 0.0}
    kind = ("qwen3_moe" if cfg.is_moe and cfg.qk_norm else "mixtral" if cfg.is_moe else "qwen2" if cfg.qkv_bias
            else "qwen3" if cfg.qk_norm else "llama")
    c = {"architectures": [{"mixtral": "MixtralForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                            "qwen3_moe": "Qwen3MoeForCausalLM", "llama": "LlamaForCausalLM"}[kind]],
         "model_type": kind, **common, "head_dim": cfg.head_size}
    if kind == "qwen3_moe":
        c.update({"num_experts": cfg.num_experts, "num_experts_per_tok": cfg.top_k,
                  "moe_intermediate_size": cfg.intermediate, "norm_topk_prob": cfg.norm_topk_prob,
                  "decoder_sparse_step": 1,
                  "mlp_only_layers": [], "router_aux_loss_coef": 0.0, "output_router_logits": True,
                  **qwen_window_config(cfg), "attention_bias": False})
    elif cfg.is_moe:
        c.update({"num_local_experts": cfg.num_experts, "num_experts_per_tok": cfg.top_k,
                  "router_aux_loss_coef": 0.0, "output_router_logits": True, "router_jitter_noise": 0.0,
                  "sliding_window": None})
    elif kind == "qwen2":
        c.update(qwen_window_config(cfg))
    elif kind == "qwen3":
        c.update({**qwen_window_config(cfg), "attention_bias": False})
    else:
        c.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1})
    return c


def qwen2_moe_hf_config(cfg, common):
    """config.json of Qwen2MoeForCausalLM as Qwen2MoeConfig's keys spell it (model_type qwen2_moe), after hf_config's
    common keys: no head_dim (HS = hidden_size / num_attention_heads) and no qkv_bias key (Qwen2-MoE always has the
    biases); intermediate_size, the width of dense layers this model does not have (decoder_sparse_step 1,
    mlp_only_layers []), is written as the shared expert's width, as Qwen1.5-MoE-A2.7B's config.json has it;
    moe_intermediate_size each expert's width, shared_expert_intermediate_size the shared expert's; router_aux_loss_coef
    0.0 (save_hf writes the run's), output_router_logits false (as the releases ship it); use_sliding_window false,
    sliding_window null and max_window_layers num_hidden_layers: no layer slides under any reading."""
    return {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe",
            **dict(common, intermediate_size=cfg.shared_intermediate),
            "moe_intermediate_size": cfg.intermediate, "shared_expert_intermediate_size": cfg.shared_intermediate,
            "num_experts": cfg.num_experts, "num_experts_per_tok": cfg.top_k, "norm_topk_prob": cfg.norm_topk_prob,
            "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.0,
            "output_router_logits": False, "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": cfg.num_layers}


def default_rope_parameters(c, model, keys=("rope_theta",)):
    """keys (rope_theta; GLM-4.5's partial_rotary_factor too) of a config.json c whose RoPE is the default type, as
    {key: value}: each the top-level key, or transformers 5's rope_parameters' (rope_type default, no other keys),
    which wins; None where neither gives it. Raises ValueError, naming model, for another rope type or key in
    rope_parameters, or a value given both ways that disagrees."""
    top, params = {key: c.get(key) for key in keys}, c.get("rope_parameters")
    if params is None:
        return top
    if (not isinstance(params, dict) or rope_type(params) not in ("default", None)
            or set(params) - {"rope_type", "type", *keys}):
        raise ValueError(f"{model}: rope_parameters {params}: only the default type is modelled")
    for key, value in top.items():
        if value is not None and params.get(key) is not None and value != params[key]:
            raise ValueError(f"{model}: {key} {value} disagrees with rope_parameters ({params[key]})")
    return {key: params.get(key, value) for key, value in top.items()}


def qwen2_moe_config_from_hf(c):
    """A qwen2_moe config.json -> LlamaConfig(qwen2_moe=True), with Qwen2MoeConfig's defaults for absent keys (151936
    tokens, C 2048, 24 layers, 16 heads, 16 kv heads, 32768 positions, rms_norm_eps 1e-6, rope_theta 1e4, untied, 60
    experts, 4 per token, moe_intermediate_size 1408, shared_expert_intermediate_size 5632, norm_topk_prob false).
    intermediate_size (the dense layers' width) and router_aux_loss_coef are not read; sliding_window and
    max_window_layers are ignored when use_sliding_window is false. transformers 5's rope_parameters (rope_type default)
    is read too, its rope_theta agreeing with a top-level one. Refused: a dense layer (decoder_sparse_step other than
    1, a non-empty mlp_only_layers, num_experts 0), qkv_bias false, use_sliding_window true or a sliding layer_types
    entry, another hidden_act, a head_dim other than C / NH, a rope_scaling other than null, llama3 or yarn."""
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"qwen2_moe: hidden_act {act} is not modelled (only silu)")
    if c.get("qkv_bias", True) is not True:
        raise ValueError("qwen2_moe: qkv_bias false is not modelled (Qwen2-MoE's q/k/v projections have biases)")
    step, only = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers") or []
    if step != 1 or only:
        raise ValueError(f"qwen2_moe: decoder_sparse_step {step} and mlp_only_layers {only}: dense layers are not "
                         f"modelled (only step 1 and [])")
    if c.get("use_sliding_window"):
        raise ValueError("qwen2_moe: use_sliding_window true is not modelled")
    types = c.get("layer_types") or []
    if any(t != "full_attention" for t in types):
        raise ValueError(f"qwen2_moe: layer_types {types}: only full_attention is modelled")
    theta, scaling = default_rope_parameters(c, "qwen2_moe")["rope_theta"], c.get("rope_scaling")
    if rope_type(scaling) not in ("default", "llama3", "yarn"):
        raise ValueError(f"qwen2_moe: rope_scaling {scaling} is not modelled (only null, llama3 and yarn)")
    C, NH = c.get("hidden_size", 2048), c.get("num_attention_heads", 16)
    if c.get("head_dim") not in (None, C // NH):
        raise ValueError(f"qwen2_moe: head_dim {c['head_dim']} is not modelled (only hidden_size / heads, {C // NH})")
    experts = c.get("num_experts", 60)
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
        raise ValueError(f"qwen2_moe: num_experts {experts}: dense layers are not modelled (at least 1 expert)")
    return LlamaConfig(
        qwen2_moe=True, qkv_bias=True, num_layers=c.get("num_hidden_layers", 24), num_heads=NH,
        num_kv_heads=c.get("num_key_value_heads", 16) or NH, channels=C,
        intermediate=c.get("moe_intermediate_size", 1408),
        shared_intermediate=c.get("shared_expert_intermediate_size", 5632), vocab_size=c.get("vocab_size", 151936),
        max_seq_len=c.get("max_position_embeddings", 32768), rms_norm_eps=c.get("rms_norm_eps", 1e-6),
        rope_theta=10000.0 if theta is None else theta, rope_scaling=scaling,
        tie_word_embeddings=c.get("tie_word_embeddings", False), num_experts=experts,
        top_k=c.get("num_experts_per_tok", 4), norm_topk_prob=bool(c.get("norm_topk_prob", False)))


def glm4_moe_hf_config(cfg):
    """config.json of Glm4MoeForCausalLM (model_type glm4_moe) as Glm4MoeConfig's keys spell it: head_dim always
    written (the heads are decoupled from hidden_size / num_attention_heads), partial_rotary_factor, attention_bias
    (q/k/v biases; o_proj has none whatever it says), use_qk_norm, DeepSeek-V3's MoE keys (n_routed_experts,
    n_shared_experts, moe_intermediate_size, first_k_dense_replace, routed_scaling_factor, n_group, topk_group,
    norm_topk_prob), rope_scaling null, and num_nextn_predict_layers 0: no multi-token-prediction layer is stored
    (the releases have 1, as model.layers.{num_hidden_layers}.*). No router_aux_loss_coef (HF's GLM has no aux loss)."""
    return {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.channels, "intermediate_size": cfg.intermediate,
            "moe_intermediate_size": cfg.moe_intermediate, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_size,
            "partial_rotary_factor": cfg.partial_rotary_factor, "n_routed_experts": cfg.num_experts,
            "num_experts_per_tok": cfg.top_k, "n_shared_experts": cfg.num_shared_experts, "n_group": cfg.n_group,
            "topk_group": cfg.topk_group, "first_k_dense_replace": cfg.first_dense,
            "routed_scaling_factor": cfg.routed_scale, "norm_topk_prob": cfg.norm_topk_prob,
            "num_nextn_predict_layers": 0, "max_position_embeddings": cfg.max_seq_len,
            "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": None,
            "attention_bias": cfg.qkv_bias, "use_qk_norm": cfg.qk_norm, "attention_dropout": 0.0,
            "hidden_act": "silu", "tie_word_embeddings": cfg.tie_word_embeddings, "initializer_range": 0.02,
            "torch_dtype": "float32"}


def glm4_moe_config_from_hf(c):
    """A glm4_moe config.json -> LlamaConfig(glm4_moe=True), with Glm4MoeConfig's defaults (transformers 4.55-4.57; its
    defaults are GLM-4.5-Air's shapes) for absent keys: 151552 tokens, C 4096, dense width 10944, 46 layers, 96 heads, 8
    kv heads (null: the heads), head_dim C / NH (HF's getattr fallback, as Glm4MoeConfig has no head_dim; the releases
    write 128; with the default shapes that is 42, whose rotary width 21 is odd and refused), partial_rotary_factor
    0.5, 131072 positions, rms_norm_eps 1e-5, rope_theta 1e4, untied, attention_bias false, use_qk_norm false, 128
    experts, 8 per token, moe_intermediate_size 1408, 1 shared expert, routed_scaling_factor 1.0, n_group and topk_group
    1 (null: 1), first_k_dense_replace 1, norm_topk_prob true. num_nextn_predict_layers (the releases' 1) is read and
    not modelled: load_hf skips those layers' tensors. transformers 5's rope_parameters of type default (rope_theta,
    partial_rotary_factor) is read too, agreeing with top-level keys. Refused: another hidden_act, a rope_scaling, a
    negative or non-integer num_nextn_predict_layers, and what LlamaConfig refuses (an odd rotary width, groups of one
    expert, ...)."""
    act = c.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"glm4_moe: hidden_act {act} is not modelled (only silu)")
    if c.get("rope_scaling") is not None:
        raise ValueError(f"glm4_moe: rope_scaling {c['rope_scaling']} is not modelled (only null)")
    rope = default_rope_parameters(c, "glm4_moe", ("rope_theta", "partial_rotary_factor"))
    theta, factor = rope["rope_theta"], rope["partial_rotary_factor"]
    mtp = c.get("num_nextn_predict_layers", 1)
    if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
        raise ValueError(f"glm4_moe: num_nextn_predict_layers {mtp} must be a non-negative integer")
    C, NH = c.get("hidden_size", 4096), c.get("num_attention_heads", 96)
    return LlamaConfig(
        glm4_moe=True, num_layers=c.get("num_hidden_layers", 46), num_heads=NH,
        num_kv_heads=c.get("num_key_value_heads", 8) or NH, channels=C, intermediate=c.get("intermediate_size", 10944),
        vocab_size=c.get("vocab_size", 151552), max_seq_len=c.get("max_position_embeddings", 131072),
        rms_norm_eps=c.get("rms_norm_eps", 1e-5), rope_theta=10000.0 if theta is None else theta,
        tie_word_embeddings=c.get("tie_word_embeddings", False), num_experts=c.get("n_routed_experts", 128),
        top_k=c.get("num_experts_per_tok", 8), qkv_bias=bool(c.get("attention_bias", False)),
        qk_norm=bool(c.get("use_qk_norm", False)), head_dim=c.get("head_dim") or C // NH,
        norm_topk_prob=bool(c.get("norm_topk_prob", True)),
        partial_rotary_factor=0.5 if factor is None else float(factor),
        moe_intermediate=c.get("moe_intermediate_size", 1408), num_shared_experts=c.get("n_shared_experts", 1) or 0,
        first_dense=c.get("first_k_dense_replace", 1), routed_scale=c.get("routed_scaling_factor", 1.0),
        n_group=c.get("n_group") or 1, topk_group=c.get("topk_group") or 1)


def qwen_window_config(cfg):
    """Qwen2's, Qwen3's and Qwen3-MoE's window keys: use_sliding_window false and sliding_window null without a
    window, else use_sliding_window true, sliding_window W and max_window_layers (layer i slides iff i >= it; 0 for
    qwen3_moe, whose attention reads none and slides in every layer, so that both readings agree)."""
    if cfg.sliding_window is None:
        return {"use_sliding_window": False, "sliding_window": None}
    return {"use_sliding_window": True, "sliding_window": cfg.sliding_window,
            "max_window_layers": cfg.max_window_layers}


def json_number(v):
    """An integral float as an int (256.0 -> 256, as Gemma's config.json spells query_pre_attn_scalar), else v."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def gemma_shape_config(cfg):
    """The leading config.json keys Gemma 1, 2 and 3 write alike, in their order: the shapes (head_dim always),
    positions, rms_norm_eps and rope_theta; each *_hf_config goes on with its own."""
    return {"hidden_size": cfg.channels, "intermediate_size": cfg.intermediate, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_size,
            "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_seq_len, "rms_norm_eps": cfg.rms_norm_eps,
            "rope_theta": cfg.rope_theta}


def query_pre_attn_scalar_from_hf(c, model):
    """Gemma 2's and 3's query_pre_attn_scalar from config.json c (256, both configs' default, when absent); ValueError,
    naming model, unless it is a positive number."""
    qpas = c.get("query_pre_attn_scalar", 256)
    if isinstance(qpas, bool) or not isinstance(qpas, (int, float)) or qpas <= 0:
        raise ValueError(f"{model}: query_pre_attn_scalar {qpas} must be a positive number")
    return qpas


def gemma3_hf_config(cfg):
    """config.json of Gemma3ForCausalLM as transformers 4.5x writes Gemma3TextConfig (model_type gemma3_text):
    head_dim, query_pre_attn_scalar, sliding_window, layer_types, sliding_window_pattern (the key the Hub's configs
    carry and 4.5x/5.x read), rope_theta with rope_scaling (null or linear: the global layers'),
    rope_local_base_freq (the sliding layers'), both softcappings null, hidden_activation gelu_pytorch_tanh, no
    bias, use_bidirectional_attention false (EmbeddingGemma's true is not modelled)."""
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            **gemma_shape_config(cfg), "rope_scaling": cfg.rope_scaling,
            "rope_local_base_freq": cfg.rope_local_base_freq,
            "query_pre_attn_scalar": json_number(cfg.query_pre_attn_scalar),
            "sliding_window": cfg.sliding_window, "sliding_window_pattern": cfg.sliding_window_pattern,
            "layer_types": list(cfg.layer_types), "final_logit_softcapping": None, "attn_logit_softcapping": None,
            "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False, "attention_dropout": 0.0,
            "use_bidirectional_attention": False, "tie_word_embeddings": cfg.tie_word_embeddings,
            "initializer_range": 0.02, "torch_dtype": "float32"}


def gemma3_config_from_hf(c):
    """A gemma3_text config.json -> LlamaConfig(gemma3=True), with Gemma3TextConfig's defaults for absent keys
    (head_dim 256, 8 heads, 4 kv heads, query_pre_attn_scalar 256, sliding_window 4096, sliding_window_pattern 6,
    rope_theta 1e6, rope_local_base_freq 1e4, rms_norm_eps 1e-6, tied). layer_types wins over the pattern, as in
    transformers. transformers 5's rope_parameters ({"full_attention": {...}, "sliding_attention": {...}}) is read
    too; a value given both ways must agree. Refused: softcapping, bidirectional attention, biases, an activation
    other than gelu_pytorch_tanh, rope types other than default/linear (or any scaling on the sliding layers)."""
    act = c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"gemma3: hidden_activation {act} is not modelled (only gelu_pytorch_tanh)")
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if c.get(key) is not None:
            raise ValueError(f"gemma3: {key} {c[key]} is not modelled (only null)")
    if c.get("use_bidirectional_attention") or c.get("attention_bias"):
        raise ValueError("gemma3: use_bidirectional_attention and attention_bias are not modelled")
    theta, scaling, local = c.get("rope_theta"), c.get("rope_scaling"), c.get("rope_local_base_freq")
    params = c.get("rope_parameters")
    if params is not None:
        if not isinstance(params, dict) or set(params) - set(GEMMA3_LAYER_TYPES):
            raise ValueError(f"gemma3: rope_parameters {params} must be a dict per layer type")
        full, slide = params.get("full_attention") or {}, params.get("sliding_attention") or {}
        if rope_type(slide) not in ("default", None) or set(slide) - {"rope_type", "type", "rope_theta"}:
            raise ValueError(f"gemma3: sliding_attention rope_parameters {slide}: only the default type is modelled")
        kind = rope_type(full) or "default"
        from_params = {"rope_theta": full.get("rope_theta"), "rope_local_base_freq": slide.get("rope_theta"),
                       "rope_scaling": None if kind == "default" else
                       {k: v for k, v in full.items() if k != "rope_theta"}}
        for key, value in from_params.items():
            given = c.get(key)
            if value is not None and given is not None and given != value:
                raise ValueError(f"gemma3: {key} {given} disagrees with rope_parameters ({value})")
        theta = from_params["rope_theta"] if from_params["rope_theta"] is not None else theta
        local = from_params["rope_local_base_freq"] if from_params["rope_local_base_freq"] is not None else local
        scaling = from_params["rope_scaling"] if from_params["rope_scaling"] is not None else scaling
    if rope_type(scaling) not in ("default", "linear"):
        raise ValueError(f"gemma3: rope_scaling {scaling} is not modelled (only null and linear)")
    qpas = query_pre_attn_scalar_from_hf(c, "gemma3")
    L, NH = c.get("num_hidden_layers", 26), c.get("num_attention_heads", 8)
    head_dim = c.get("head_dim", 256)
    return LlamaConfig(
        gemma3=True, num_layers=L, num_heads=NH, num_kv_heads=c.get("num_key_value_heads", 4) or NH,
        channels=c.get("hidden_size", 2304), intermediate=c.get("intermediate_size", 9216),
        vocab_size=c.get("vocab_size", 262208), max_seq_len=c.get("max_position_embeddings", 131072),
        rms_norm_eps=c.get("rms_norm_eps", 1e-6), rope_theta=1000000.0 if theta is None else theta,
        rope_scaling=scaling, tie_word_embeddings=c.get("tie_word_embeddings", True),
        head_dim=head_dim if head_dim != c.get("hidden_size", 2304) // NH else 0,
        query_pre_attn_scalar=qpas,
        rope_local_base_freq=10000.0 if local is None else local,
        sliding_window=c.get("sliding_window", 4096), sliding_window_pattern=c.get("sliding_window_pattern", 6),
        layer_types=tuple(c.get("layer_types") or ()))


def gemma2_hf_config(cfg):
    """config.json of Gemma2ForCausalLM as Gemma2Config's keys spell it (model_type gemma2): head_dim,
    query_pre_attn_scalar, sliding_window, layer_types (written, though Gemma2Config derives the same list when it is
    absent), both softcappings (null = no cap), rope_theta (no rope_scaling key: Gemma2Config has none),
    hidden_activation gelu_pytorch_tanh, no bias. The keys Gemma 3 shares keep gemma3_hf_config's spelling and order."""
    return {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
            **gemma_shape_config(cfg), "query_pre_attn_scalar": json_number(cfg.query_pre_attn_scalar),
            "sliding_window": cfg.sliding_window, "layer_types": list(cfg.layer_types),
            "final_logit_softcapping": cfg.final_logit_softcapping,
            "attn_logit_softcapping": cfg.attn_logit_softcapping,
            "hidden_activation": "gelu_pytorch_tanh", "attention_bias": False, "attention_dropout": 0.0,
            "tie_word_embeddings": cfg.tie_word_embeddings, "initializer_range": 0.02, "torch_dtype": "float32"}


def gemma2_config_from_hf(c):
    """A gemma2 config.json -> LlamaConfig(gemma2=True), with Gemma2Config's defaults for absent keys (256000 tokens,
    C 2304, F 9216, 26 layers, 8 heads, 4 kv heads, head_dim 256, 8192 positions, rms_norm_eps 1e-6, rope_theta 1e4,
    query_pre_attn_scalar 256, sliding_window 4096, attn_logit_softcapping 50, final_logit_softcapping 30, tied).
    An absent layer_types alternates (layer i sliding when i is even); a given one wins. A softcapping key present as
    null means no cap (only an absent key takes the default). transformers 5's rope_parameters (rope_type default) is
    read too, its rope_theta agreeing with a top-level one. Refused: an activation other than gelu_pytorch_tanh,
    biases, bidirectional attention, a rope_scaling or another rope type, Gemma 3's rope_local_base_freq and
    sliding_window_pattern, a window that is not a positive integer, a scalar or a cap that is not positive."""
    act = c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"gemma2: hidden_activation {act} is not modelled (only gelu_pytorch_tanh)")
    if c.get("use_bidirectional_attention") or c.get("attention_bias"):
        raise ValueError("gemma2: use_bidirectional_attention and attention_bias are not modelled")
    theta = default_rope_parameters(c, "gemma2")["rope_theta"]
    if c.get("rope_scaling") is not None:
        raise ValueError(f"gemma2: rope_scaling {c['rope_scaling']} is not modelled (only null)")
    for key in ("rope_local_base_freq", "sliding_window_pattern"):
        if c.get(key) is not None:
            raise ValueError(f"gemma2: {key} is Gemma 3's, not modelled for gemma2")
    qpas = query_pre_attn_scalar_from_hf(c, "gemma2")
    NH, C = c.get("num_attention_heads", 8), c.get("hidden_size", 2304)
    head_dim = c.get("head_dim", 256)
    return LlamaConfig(
        gemma2=True, num_layers=c.get("num_hidden_layers", 26), num_heads=NH,
        num_kv_heads=c.get("num_key_value_heads", 4) or NH, channels=C, intermediate=c.get("intermediate_size", 9216),
        vocab_size=c.get("vocab_size", 256000), max_seq_len=c.get("max_position_embeddings", 8192),
        rms_norm_eps=c.get("rms_norm_eps", 1e-6), rope_theta=10000.0 if theta is None else theta,
        tie_word_embeddings=c.get("tie_word_embeddings", True), head_dim=head_dim if head_dim != C // NH else 0,
        query_pre_attn_scalar=qpas, sliding_window=c.get("sliding_window", 4096),
        layer_types=tuple(c.get("layer_types") or ()),
        attn_logit_softcapping=c.get("attn_logit_softcapping", 50.0),
        final_logit_softcapping=c.get("final_logit_softcapping", 30.0))


# The activation GemmaForCausalLM's MLP is written with; gemma_config_from_hf reads the old configs' hidden_act "gelu"
# as this too (see gemma_activation).
GEMMA_ACTIVATION = "gelu_pytorch_tanh"


def gemma_hf_config(cfg):
    """config.json of GemmaForCausalLM as GemmaConfig's keys spell it (model_type gemma): head_dim (written always;
    absent it would mean 256, not C / NH), rope_theta with rope_scaling null, hidden_act and hidden_activation both
    gelu_pytorch_tanh (so that every transformers reads the tanh GELU: 4.38.2 to 4.5x take hidden_activation, 5.x
    hidden_act), no bias. The keys Gemma 2 shares keep gemma2_hf_config's spelling and order."""
    return {"architectures": ["GemmaForCausalLM"], "model_type": "gemma",
            **gemma_shape_config(cfg), "rope_scaling": None, "hidden_act": GEMMA_ACTIVATION,
            "hidden_activation": GEMMA_ACTIVATION, "attention_bias": False, "attention_dropout": 0.0,
            "tie_word_embeddings": cfg.tie_word_embeddings, "initializer_range": 0.02, "torch_dtype": "float32"}


def gemma_activation(c):
    """The MLP activation of a gemma config.json, which must come out as gelu_pytorch_tanh (the only one modelled).
    transformers 4.38.2 to 4.5x run hidden_activation when it is given and not null, else gelu_pytorch_tanh whatever
    hidden_act says (with a warning: Google's original releases say "gelu", but the checkpoints were trained with the
    tanh form; PR 29402). transformers 5.x has no hidden_activation: its GemmaMLP (LlamaMLP) runs ACT2FN[hidden_act], so
    it would run the exact erf GELU for "gelu". This follows 4.x and the checkpoints: hidden_activation absent, null or
    gelu_pytorch_tanh, and hidden_act absent, null, "gelu" or gelu_pytorch_tanh, all read as gelu_pytorch_tanh; any
    other value of either key (say hidden_activation "gelu", or hidden_act silu) is refused."""
    given, act = c.get("hidden_activation"), c.get("hidden_act")
    if given not in (None, GEMMA_ACTIVATION):
        raise ValueError(f"gemma: hidden_activation {given} is not modelled (only {GEMMA_ACTIVATION})")
    if act not in (None, "gelu", GEMMA_ACTIVATION):
        raise ValueError(f"gemma: hidden_act {act} is not modelled (only {GEMMA_ACTIVATION}, or gelu, which "
                         f"transformers 4.x runs as {GEMMA_ACTIVATION})")
    return GEMMA_ACTIVATION


def gemma_config_from_hf(c):
    """A gemma config.json -> LlamaConfig(gemma1=True), with GemmaConfig's defaults (gemma-7b's) for absent keys (256000
    tokens, C 3072, F 24576, 28 layers, 16 heads, 16 kv heads (null: the heads), head_dim 256, 8192 positions,
    rms_norm_eps 1e-6, rope_theta 1e4, tied). The activation as gemma_activation reads it. transformers 5's
    rope_parameters (rope_type default) is read too, its rope_theta agreeing with a top-level one. Refused:
    attention_bias, use_bidirectional_attention, a rope_scaling or another rope type, a head_dim that is not a positive
    integer, and the Gemma 2/3 keys GemmaForCausalLM does not read (query_pre_attn_scalar, soft caps, sliding_window,
    sliding_window_pattern, rope_local_base_freq, a sliding layer_types entry) when not null: a file that carries them
    is a Gemma 2 or 3 under the wrong model_type, which transformers would silently run as Gemma 1."""
    gemma_activation(c)
    if c.get("attention_bias") or c.get("use_bidirectional_attention"):
        raise ValueError("gemma: attention_bias and use_bidirectional_attention are not modelled")
    for key in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "sliding_window",
                "sliding_window_pattern", "rope_local_base_freq"):
        if c.get(key) is not None:
            raise ValueError(f"gemma: {key} {c[key]} is Gemma 2's or 3's, not read by GemmaForCausalLM (refused)")
    types = c.get("layer_types") or []
    if any(t != "full_attention" for t in types):
        raise ValueError(f"gemma: layer_types {types}: only full_attention is modelled")
    theta = default_rope_parameters(c, "gemma")["rope_theta"]
    if c.get("rope_scaling") is not None:
        raise ValueError(f"gemma: rope_scaling {c['rope_scaling']} is not modelled (only null)")
    NH, C = c.get("num_attention_heads", 16), c.get("hidden_size", 3072)
    head_dim = c.get("head_dim", 256)
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"gemma: head_dim {head_dim} must be a positive integer")
    return LlamaConfig(
        gemma1=True, num_layers=c.get("num_hidden_layers", 28), num_heads=NH,
        num_kv_heads=c.get("num_key_value_heads", 16) or NH, channels=C, intermediate=c.get("intermediate_size", 24576),
        vocab_size=c.get("vocab_size", 256000), max_seq_len=c.get("max_position_embeddings", 8192),
        rms_norm_eps=c.get("rms_norm_eps", 1e-6), rope_theta=10000.0 if theta is None else theta,
        tie_word_embeddings=c.get("tie_word_embeddings", True), head_dim=head_dim if head_dim != C // NH else 0)


def starcoder2_hf_config(cfg):
    """config.json of Starcoder2ForCausalLM as Starcoder2Config's keys spell it (model_type starcoder2): no head_dim
    (HS = hidden_size / num_attention_heads), norm_epsilon (the LayerNorms' eps), use_bias true, hidden_act
    gelu_pytorch_tanh, sliding_window W or null, tie_word_embeddings, the three dropouts 0.0 (the releases say 0.1; the
    reference computes without dropout), no rope_scaling."""
    return {"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2",
            "hidden_size": cfg.channels, "intermediate_size": cfg.intermediate,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
            "num_key_value_heads": cfg.num_kv_heads, "vocab_size": cfg.vocab_size,
            "max_position_embeddings": cfg.max_seq_len, "norm_epsilon": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
            "sliding_window": cfg.sliding_window, "use_bias": True, "hidden_act": "gelu_pytorch_tanh",
            "tie_word_embeddings": cfg.tie_word_embeddings, "attention_dropout": 0.0, "residual_dropout": 0.0,
            "embedding_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "float32"}


def starcoder2_config_from_hf(c):
    """A starcoder2 config.json -> LlamaConfig(starcoder2=True), with Starcoder2Config's defaults for absent keys (49152
    tokens, C 3072, F 12288, 30 layers, 24 heads, 2 kv heads, 4096 positions, norm_epsilon 1e-5, rope_theta 1e4, no
    sliding window, use_bias true, tied embeddings). The dropouts are read and ignored (bigcode's releases say 0.1; the
    reference, like HF in eval mode, computes without dropout). transformers 5's rope_parameters (rope_type default)
    is read too, its rope_theta agreeing with a top-level one. Refused: use_bias false, another hidden_act, a
    rope_scaling or another rope type, a head_dim other than C / NH, a partial_rotary_factor other than 1, a
    sliding_window that is not a positive integer or null."""
    act = c.get("hidden_act", "gelu_pytorch_tanh")
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"starcoder2: hidden_act {act} is not modelled (only gelu_pytorch_tanh)")
    if not c.get("use_bias", True):
        raise ValueError("starcoder2: use_bias false is not modelled (only biased q/k/v/o_proj, c_fc and c_proj)")
    theta = default_rope_parameters(c, "starcoder2")["rope_theta"]
    if c.get("rope_scaling") is not None:
        raise ValueError(f"starcoder2: rope_scaling {c['rope_scaling']} is not modelled (only null)")
    if c.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"starcoder2: partial_rotary_factor {c['partial_rotary_factor']} is not modelled (only 1)")
    C, NH = c.get("hidden_size", 3072), c.get("num_attention_heads", 24)
    if c.get("head_dim") not in (None, C // NH):
        raise ValueError(f"starcoder2: head_dim {c['head_dim']} is not modelled (only hidden_size / heads, {C // NH})")
    window = c.get("sliding_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"starcoder2: sliding_window {window} must be a positive integer or null")
    return LlamaConfig(
        starcoder2=True, num_layers=c.get("num_hidden_layers", 30), num_heads=NH,
        num_kv_heads=c.get("num_key_value_heads", 2), channels=C, intermediate=c.get("intermediate_size", 12288),
        vocab_size=c.get("vocab_size", 49152), max_seq_len=c.get("max_position_embeddings", 4096),
        rms_norm_eps=c.get("norm_epsilon", 1e-5), rope_theta=10000.0 if theta is None else theta,
        tie_word_embeddings=c.get("tie_word_embeddings", True), sliding_window=window)


def phi3_fuse(state):
    """Llama's state dict -> Phi3ForCausalLM's, in the same order: each layer's self_attn.qkv_proj.weight
    ((NH + 2 NKV) HS, C) = the rows of q_proj, k_proj, v_proj, and mlp.gate_up_proj.weight (2F, C) = the rows
    of gate_proj, up_proj (HF: gate, up = gate_up_proj(x).chunk(2, dim=-1)); every other name unchanged."""
    out = {}
    for name, t in state.items():
        if name.endswith("self_attn.q_proj.weight"):
            p = name[:-len("q_proj.weight")]
            out[p + "qkv_proj.weight"] = torch.cat([state[p + n + ".weight"] for n in ("q_proj", "k_proj", "v_proj")])
        elif name.endswith("mlp.gate_proj.weight"):
            p = name[:-len("gate_proj.weight")]
            out[p + "gate_up_proj.weight"] = torch.cat([state[p + "gate_proj.weight"], state[p + "up_proj.weight"]])
        elif not name.endswith(("self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.up_proj.weight")):
            out[name] = t
    return out


def phi3_split(state, cfg):
    """phi3_fuse's inverse: Phi3ForCausalLM's tensors -> Llama's names."""
    q, kv, F = cfg.num_heads * cfg.head_size, cfg.num_kv_heads * cfg.head_size, cfg.intermediate
    out = {}
    for name, t in state.items():
        if name.endswith(("self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight")):
            qkv = name.endswith("qkv_proj.weight")
            rows, parts = ((q + 2 * kv, (("q_proj", q), ("k_proj", kv), ("v_proj", kv))) if qkv
                           else (2 * F, (("gate_proj", F), ("up_proj", F))))
            if t.dim() != 2 or t.size(0) != rows:
                raise ValueError(f"{name}: shape {list(t.shape)}, expected {rows} rows")
            p = name[:-len("qkv_proj.weight" if qkv else "gate_up_proj.weight")]
            for (n, _), piece in zip(parts, t.split([r for _, r in parts])):
                out[p + n + ".weight"] = piece
        else:
            out[name] = t
    return out


def save_hf(model, folder, router_aux_loss_coef=None):
    """folder/config.json + folder/model.safetensors (F32, HF names, no lm_head when tied; Phi-3's fused
    tensors when cfg.phi3)."""
    config = hf_config(model.cfg)
    if model.cfg.is_moe and router_aux_loss_coef is not None and not model.cfg.glm4_moe:
        config["router_aux_loss_coef"] = router_aux_loss_coef
    tg.save_hf_folder(folder, config, phi3_fuse(model.state_dict()) if model.cfg.phi3 else model.state_dict())


def config_from_hf(c):
    kind = c.get("model_type")
    if kind == "gemma3_text":
        return gemma3_config_from_hf(c)
    if kind == "gemma2":
        return gemma2_config_from_hf(c)
    if kind == "gemma":
        return gemma_config_from_hf(c)
    if kind == "starcoder2":
        return starcoder2_config_from_hf(c)
    if kind == "qwen2_moe":
        return qwen2_moe_config_from_hf(c)
    if kind == "glm4_moe":
        return glm4_moe_config_from_hf(c)
    if (kind not in ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "phi3", "olmo2", "olmoe", "smollm3",
                     "mistral") or c.get("hidden_act", "silu") != "silu"):
        raise ValueError(f"not a silu Llama/Qwen2/Qwen3/Qwen3-MoE/Mixtral/Phi-3/OLMo 2/OLMoE/SmolLM3/Mistral config: "
                         f"model_type {kind}")
    smollm3 = kind == "smollm3"
    no_rope, interval = (), 4
    if smollm3:
        if c.get("attention_bias") or c.get("mlp_bias"):
            raise ValueError("smollm3: only no attention_bias and no mlp_bias are modelled")
        interval = c.get("no_rope_layer_interval", 4)
        no_rope = c.get("no_rope_layers")
        L = c["num_hidden_layers"]
        if no_rope is None:     # SmolLM3Config's rule: NoPE where (i + 1) is a multiple of the interval
            if not isinstance(interval, int) or interval < 1:
                raise ValueError(f"smollm3: no_rope_layer_interval {interval} must be a positive integer")
            no_rope = [int((i + 1) % interval != 0) for i in range(L)]
        if not isinstance(no_rope, list) or len(no_rope) < L:
            raise ValueError(f"smollm3: no_rope_layers {no_rope} must list at least num_hidden_layers ({L}) entries")
        no_rope = tuple(no_rope[:L])    # HF reads the first L entries
        # HF makes a layer sliding when layer_types says so, or (layer_types absent) a NoPE layer under
        # use_sliding_window with a sliding_window; neither is modelled.
        types = c.get("layer_types") or ["sliding_attention" if c.get("use_sliding_window") and
                                         c.get("sliding_window") is not None and not r else "full_attention"
                                         for r in no_rope]
        if any(t != "full_attention" for t in types):
            raise ValueError(f"smollm3: layer_types {types}: only full_attention is modelled (no sliding window)")
    if kind in ("olmo2", "olmoe") and (c.get("attention_bias") or c.get("rope_scaling") is not None):
        raise ValueError(f"{kind}: only no attention_bias and rope_scaling null are modelled")
    if kind == "olmoe" and c.get("clip_qkv") is not None:
        raise ValueError(f"olmoe: clip_qkv {c['clip_qkv']} is not modelled (only null)")
    if rope_type(c.get("rope_scaling")) not in (("default", "longrope") if kind == "phi3"
                                                else ("default", "llama3", "yarn")):
        raise ValueError(f"rope_scaling {c['rope_scaling']} is not modelled (only none, llama3 and yarn; phi3: "
                         f"none and longrope)")
    if kind == "phi3" and c.get("attention_bias"):
        raise ValueError("phi3: only no attention_bias is modelled")
    # MistralConfig's default window is 4096, Phi3Config's none; null = plain causal attention. Qwen2Config,
    # Qwen3Config and Qwen3MoeConfig keep theirs (default 4096) only under use_sliding_window; Qwen2's and Qwen3's
    # layers i < max_window_layers (default 28) attend causally, Qwen3-MoE's attention reads no max_window_layers.
    qwen_window = kind in ("qwen2", "qwen3", "qwen3_moe") and c.get("use_sliding_window")
    window = (c.get("sliding_window", 4096 if kind == "mistral" else None) if kind in ("mistral", "phi3")
              else c.get("sliding_window", 4096) if qwen_window else None)
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"{kind}: sliding_window {window} must be a positive integer or null")
    max_window = c.get("max_window_layers", 28) if kind in ("qwen2", "qwen3") and window is not None else 0
    # Phi3Config's default original_max_position_embeddings is 4096; kept only where it differs from
    # max_position_embeddings (LlamaConfig's 0), so that a config round-trips.
    orig = (c.get("original_max_position_embeddings") or 4096) if kind == "phi3" else 0
    moe, qwen3 = kind in ("mixtral", "qwen3_moe", "olmoe"), kind in ("qwen3", "qwen3_moe")
    # OlmoeConfig's defaults: 64 experts, 8 per token, norm_topk_prob false
    experts = (c.get("num_experts", 64) if kind == "olmoe" else c["num_experts"] if kind == "qwen3_moe"
               else c["num_local_experts"]) if moe else 0
    head_dim = c.get("head_dim") or 0
    # SmolLM3Config's defaults differ from Llama's: 4 kv heads, theta 2e6, tied embeddings; MistralConfig's: 8 kv heads.
    kv_heads = c.get("num_key_value_heads", 4 if smollm3 else 8 if kind == "mistral" else c["num_attention_heads"])
    if (smollm3 or kind == "mistral") and kv_heads is None:
        kv_heads = c["num_attention_heads"]
    cfg = LlamaConfig(
        num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"],
        num_kv_heads=kv_heads, channels=c["hidden_size"],
        intermediate=c["moe_intermediate_size"] if kind == "qwen3_moe" else c["intermediate_size"],
        vocab_size=c["vocab_size"], max_seq_len=c["max_position_embeddings"], rms_norm_eps=c["rms_norm_eps"],
        rope_theta=c.get("rope_theta", 2000000.0 if smollm3 else 10000.0), rope_scaling=c.get("rope_scaling"),
        tie_word_embeddings=c.get("tie_word_embeddings", smollm3),
        num_experts=experts,
        top_k=c.get("num_experts_per_tok", 8 if kind == "olmoe" else 2), qkv_bias=kind == "qwen2", qk_norm=qwen3,
        head_dim=head_dim if head_dim != c["hidden_size"] // c["num_attention_heads"] else 0,
        # Qwen3MoeConfig's and OlmoeConfig's default is false; Mixtral has no such key and always renormalises.
        norm_topk_prob=bool(c.get("norm_topk_prob", False)) if kind in ("qwen3_moe", "olmoe") else True,
        phi3=kind == "phi3",
        partial_rotary_factor=float(c.get("partial_rotary_factor", 1.0)) if kind == "phi3" else 1.0,
        original_max_seq_len=orig if orig != c["max_position_embeddings"] else 0, olmo2=kind == "olmo2",
        olmoe=kind == "olmoe", smollm3=smollm3, no_rope_layers=no_rope, no_rope_layer_interval=interval,
        mistral=kind == "mistral", sliding_window=window, max_window_layers=max_window)
    # transformers reads Qwen2's and Qwen3's layer_types before max_window_layers; other layer kinds are not modelled.
    types = c.get("layer_types") if kind in ("qwen2", "qwen3") else None
    if types is not None and list(types) != list(cfg.attention_types):
        raise ValueError(f"{kind}: layer_types {types} are not modelled (only {list(cfg.attention_types)}, from "
                         f"use_sliding_window, sliding_window and max_window_layers)")
    return cfg


def mtp_layer_tensor(name, num_layers):
    """Whether name is a tensor of a layer past the decoder's num_layers (model.layers.{i}.*, i >= num_layers):
    GLM-4.5's (and DeepSeek-V3's) multi-token-prediction layers, stored after the decoder's."""
    parts = name.split(".")
    return len(parts) > 3 and parts[:2] == ["model", "layers"] and parts[2].isdigit() and int(parts[2]) >= num_layers


def load_hf(folder, dtype=torch.float64):
    """Builds a Llama/Qwen2/Qwen3/Qwen3-MoE/Qwen2-MoE/Mixtral/Phi-3/OLMo 2/OLMoE/SmolLM3/Mistral/Starcoder2, a Gemma3
    (gemma3_text), a Gemma2 (gemma2), a Gemma (gemma) or a Glm4Moe (glm4_moe), from an HF folder (one
    model.safetensors; Phi-3's fused tensors split back; GLM-4.5's multi-token-prediction layers, model.layers.{i >=
    num_hidden_layers}.*, skipped); a tied model's lm_head.weight, if the file has one, is ignored."""
    def edit(state, cfg):
        if cfg.phi3:
            state = phi3_split(state, cfg)
        if cfg.glm4_moe:    # GLM-4.5's multi-token-prediction layers, model.layers.{i >= num_hidden_layers}.*
            state = {k: v for k, v in state.items() if not mtp_layer_tensor(k, cfg.num_layers)}
        return state
    return tg.load_hf_folder(folder, config_from_hf, lambda cfg: model_class(cfg)(cfg), dtype, edit)
