# Plain-PyTorch DeepSeek-V3 (multi-head latent attention, a sigmoid-routed MoE with shared experts after
# first_k_dense_replace dense layers) and DeepSeek-V2 (the same latent attention with its RoPE tails always
# interleaved, and a softmax-routed MoE without selection bias) in float64: the reference that Tessera's
# latent attention and DeepSeek import are checked against, optionally with YaRN RoPE scaling. Module names
# are Hugging Face's DeepseekV3ForCausalLM / DeepseekV2ForCausalLM tensor names, so state_dict() keys are
# the keys of model.safetensors (V3's router e_score_correction_bias is a buffer: saved and loaded, never
# trained by gradient; no lm_head when the embeddings are tied). Both routers can be group-limited (n_group >
# 1: each token keeps its topk_group best groups of consecutive experts). The RMSNorm, RoPE (and its scaling),
# the top-k rule and the dense SwiGLU come from torch_llama; file formats from torch_gpt2.
import math
import types
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_gpt2 as tg
import torch_llama as tl

# q_a_layernorm and kv_a_layernorm: Hugging Face builds them with DeepseekV3RMSNorm's default eps, not
# rms_norm_eps.
LATENT_NORM_EPS = 1e-6
MODEL_TYPES = ("deepseek_v3", "deepseek_v2")


@dataclass
class DeepseekConfig:
    num_layers: int = 2             # L
    num_heads: int = 4              # NH (num_key_value_heads is the same: MLA has no grouped kv heads)
    channels: int = 32              # C
    intermediate: int = 48          # the dense MLP's width (layers < first_dense)
    moe_intermediate: int = 16      # each routed expert's width; the shared experts' is this * num_shared
    vocab_size: int = 300           # V
    max_seq_len: int = 32           # maxT (max_position_embeddings)
    rms_norm_eps: float = 1e-5      # input/post-attention/final norms (the latent norms: LATENT_NORM_EPS)
    rope_theta: float = 10000.0
    rope_interleave: bool = True    # HF's apply_rotary_pos_emb_interleave on the rot channels (V2: always;
                                    # false only for the layout check, hf_config refuses it)
    rope_scaling: Optional[dict] = None  # None or a tl.yarn_rope_scaling(...) dict (over the qk_rope channels)
    tie_word_embeddings: bool = False
    q_lora_rank: int = 0            # 0: q_proj; > 0: q_a_proj -> q_a_layernorm -> q_b_proj
    kv_lora_rank: int = 16
    qk_nope_dim: int = 8            # q/k channels a head without positions
    qk_rope_dim: int = 4            # q/k channels a head with RoPE (the key's shared by every head)
    v_head_dim: int = 6
    num_experts: int = 4            # E routed experts (n_routed_experts)
    top_k: int = 2                  # num_experts_per_tok
    num_shared_experts: int = 1     # n_shared_experts
    first_dense: int = 1            # first_k_dense_replace
    routed_scale: float = 2.5       # routed_scaling_factor, on the combine weights only
    model_type: str = "deepseek_v3"  # or "deepseek_v2": softmax router, no bias, RoPE tails interleaved
    norm_topk_prob: bool = True     # the chosen weights divided by their sum (V2: and then no routed scale)
    n_group: int = 1                # G groups of E/G consecutive experts (1: no group limit)
    topk_group: int = 1             # the groups each token keeps, in [1, G] (V2 with G > 1: group_limited_greedy)

    def __post_init__(self):
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type {self.model_type!r}: only {MODEL_TYPES}")
        if self.n_group < 1 or self.num_experts % self.n_group or not 1 <= self.topk_group <= self.n_group:
            raise ValueError(f"n_group {self.n_group} must divide n_routed_experts {self.num_experts}, and topk_group "
                             f"{self.topk_group} be in [1, n_group]")
        if self.n_group > 1 and not self.is_v2 and self.num_experts // self.n_group < 2:
            raise ValueError(f"deepseek_v3: groups of {self.num_experts // self.n_group} expert; a group's score is "
                             f"the sum of its 2 best values, so each group needs at least 2 experts")

    @property
    def is_v2(self):                # DeepSeek-V2: softmax scores, no e_score_correction_bias
        return self.model_type == "deepseek_v2"

    @property
    def qk_head_dim(self):          # D = qk_nope + qk_rope
        return self.qk_nope_dim + self.qk_rope_dim

    @property
    def num_moe_layers(self):
        return max(0, self.num_layers - self.first_dense)

    @property
    def is_moe(self):
        return self.num_moe_layers > 0

    def is_moe_layer(self, layer):
        return layer >= self.first_dense


def softmax_scale(cfg):
    """The scale of q.k: D^-0.5, D = qk_nope + qk_rope; with YaRN and mscale_all_dim given and nonzero, times
    get_mscale(factor, mscale_all_dim)^2 (HF's DeepseekV3Attention, from rope_scaling's factor as written)."""
    scale = cfg.qk_head_dim ** -0.5
    scaling = cfg.rope_scaling
    if tl.rope_type(scaling) == "yarn" and scaling.get("mscale_all_dim"):
        mscale = tl.yarn_get_mscale(scaling["factor"], scaling["mscale_all_dim"])
        scale = scale * mscale * mscale
    return scale


# ---------------------------------------------------------------- RoPE layouts

def rope_halves_order(d):
    """[0, 2, 4, ..., 1, 3, 5, ...]: the order in which HF's interleaved RoPE reads d channels (pairs
    (2i, 2i+1) become pairs (i, i + d/2) of the rotate_half convention)."""
    return list(range(0, d, 2)) + list(range(1, d, 2))


def interleaved_to_halves(x):
    """x (..., d) with channels reordered to (x0, x2, ..., x1, x3, ...): the first step of HF's
    apply_rotary_pos_emb_interleave (its view(d/2, 2).transpose)."""
    return x[..., rope_halves_order(x.size(-1))]


def deinterleave_rope_weights(state, cfg):
    """The weight permutation that turns a rope_interleave=1 checkpoint into the rotate_half layout
    (rope_interleave=0) with the same outputs, which is what Tessera's importer applies: in each head's
    rows of q_proj (or q_b_proj) the last qk_rope rows, and the last qk_rope rows of kv_a_proj_with_mqa,
    are reordered to rope_halves_order (even rows first, then odd). Returns a new state dict (HF names);
    every other tensor is shared with `state`."""
    D, nope, rope = cfg.qk_head_dim, cfg.qk_nope_dim, cfg.qk_rope_dim
    halves = torch.tensor(rope_halves_order(rope))
    q_order = torch.cat([h * D + torch.cat((torch.arange(nope), nope + halves)) for h in range(cfg.num_heads)])
    kv_order = torch.cat((torch.arange(cfg.kv_lora_rank), cfg.kv_lora_rank + halves))
    out = dict(state)
    for name, t in state.items():
        if name.endswith(("self_attn.q_proj.weight", "self_attn.q_b_proj.weight")):
            out[name] = t[q_order]
        elif name.endswith("self_attn.kv_a_proj_with_mqa.weight"):
            out[name] = t[kv_order]
    return out


# ---------------------------------------------------------------- blocks

def swiglu(channels, width):
    """HF's DeepseekV3MLP: down(silu(gate x) * up x), gate_proj/up_proj (width, C), down_proj (C, width)."""
    return tl.MLP(types.SimpleNamespace(channels=channels, intermediate=width))


class LatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention, no biases. Per token x (C):
      q = q_proj x, or q_b_proj(RMSNorm_1e-6(q_a_proj x)): NH heads of D = nope + rope, [q_nope | q_rot];
      [c | k_rot] = kv_a_proj_with_mqa x: c (kv_lora_rank), k_rot (rope), ONE key tail for every head;
      [k_nope | v] per head = kv_b_proj(RMSNorm_1e-6(c)): NH heads of nope + v_head_dim;
      RoPE (theta^(-2i/rope), or YaRN's frequencies, cos and sin times its attention factor) on q_rot and
      k_rot only, interleaved layout when rope_interleave;
      causal softmax([q_nope|q_rot] . [k_nope|k_rot] * softmax_scale) v, heads concatenated, o_proj, with
      softmax_scale D^-0.5 (times YaRN's get_mscale(factor, mscale_all_dim)^2 when that is given)."""

    def __init__(self, cfg):
        super().__init__()
        NH, C, D = cfg.num_heads, cfg.channels, cfg.qk_head_dim
        self.num_heads, self.nope, self.rope, self.v_dim = NH, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
        self.kv_lora_rank, self.interleave = cfg.kv_lora_rank, cfg.rope_interleave
        self.scale = softmax_scale(cfg)
        if cfg.q_lora_rank > 0:
            self.q_a_proj = nn.Linear(C, cfg.q_lora_rank, bias=False)                    # (q_rank, C)
            self.q_a_layernorm = tl.RMSNorm(cfg.q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, NH * D, bias=False)               # (NH*D, q_rank)
        else:
            self.q_proj = nn.Linear(C, NH * D, bias=False)                               # (NH*D, C)
        self.kv_a_proj_with_mqa = nn.Linear(C, cfg.kv_lora_rank + cfg.qk_rope_dim, bias=False)
        self.kv_a_layernorm = tl.RMSNorm(cfg.kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = nn.Linear(cfg.kv_lora_rank, NH * (cfg.qk_nope_dim + cfg.v_head_dim), bias=False)
        self.o_proj = nn.Linear(NH * cfg.v_head_dim, C, bias=False)                      # (C, NH*v)
        mask = torch.full((cfg.max_seq_len, cfg.max_seq_len), float("-inf")).triu(1)
        self.register_buffer("mask_bias", mask, persistent=False)

    def queries(self, x):
        """x (B,T,C) -> q_nope (B,NH,T,nope), q_rot (B,NH,T,rope), before RoPE."""
        B, T, _ = x.shape
        q = self.q_proj(x) if hasattr(self, "q_proj") else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        return q.view(B, T, self.num_heads, self.nope + self.rope).transpose(1, 2).split([self.nope, self.rope], -1)

    def keys_values(self, x):
        """x (B,T,C) -> k_nope (B,NH,T,nope), k_rot (B,1,T,rope) before RoPE, v (B,NH,T,v_dim)."""
        B, T, _ = x.shape
        c, k_rot = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(B, T, self.num_heads, self.nope + self.v_dim)
        k_nope, v = kv.transpose(1, 2).split([self.nope, self.v_dim], -1)
        return k_nope, k_rot.view(B, 1, T, self.rope), v

    def rotate(self, x, cos, sin):
        return tl.apply_rope(interleaved_to_halves(x) if self.interleave else x, cos, sin)

    def forward(self, x, cos, sin):
        """x (B,T,C); cos, sin (T, rope) from rope_cos_sin over qk_rope channels."""
        B, T, _ = x.shape
        q_nope, q_rot = self.queries(x)
        k_nope, k_rot, v = self.keys_values(x)
        q_rot, k_rot = self.rotate(q_rot, cos, sin), self.rotate(k_rot, cos, sin)
        query = torch.cat((q_nope, q_rot), dim=-1)                                       # (B,NH,T,D)
        key = torch.cat((k_nope, k_rot.expand(B, self.num_heads, T, self.rope)), dim=-1)
        att = query @ key.transpose(-2, -1) * self.scale + self.mask_bias[:T, :T]
        y = att.softmax(dim=-1) @ v                                                      # (B,NH,T,v)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.num_heads * self.v_dim))


class Router(nn.Module):
    """HF's DeepseekV3TopkRouter (mlp.gate): weight (E, C), no bias in the logits; e_score_correction_bias
    (E) a persistent buffer that only the expert choice reads. DeepSeek-V2's gate: the weight only."""

    def __init__(self, cfg):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(cfg.num_experts, cfg.channels))
        if not cfg.is_v2:
            self.register_buffer("e_score_correction_bias", torch.zeros(cfg.num_experts))

    def forward(self, x):
        return F.linear(x, self.weight)


def group_scores(values, n_group, best):
    """values (N, E) -> (N, G): each group's score, the sum of its `best` largest values (DeepSeek-V3: 2,
    over scores + bias; DeepSeek-V2: 1, the largest probability). Group g holds experts [g*E/G, (g+1)*E/G)."""
    N, E = values.shape
    return values.view(N, n_group, E // n_group).topk(best, dim=-1).values.sum(dim=-1)


def limit_groups(values, n_group, topk_group, best):
    """DeepSeek's group limit on the selection values (N, E): each token keeps the topk_group groups of the
    largest group_scores (ties to the lower group index) and every expert outside them gets the value 0.0
    (HF's masked_fill with 0, not -inf: a kept expert whose value is below 0 loses to a masked one). Returns
    the values unchanged when n_group is 1."""
    if n_group == 1:
        return values
    N, E = values.shape
    kept = tl.top_k_indices(group_scores(values, n_group, best), topk_group)                 # (N, topk_group)
    mask = torch.zeros(N, n_group, dtype=torch.bool).scatter_(1, kept, True)
    return values.masked_fill(~mask.repeat_interleave(E // n_group, dim=1), 0.0)


def route(logits, bias, top_k, routed_scale, normalise=True, n_group=1, topk_group=1):
    """DeepSeek-V3: logits (N, E) -> weights (N, k), chosen (N, k), choice (N, E). scores = sigmoid(logits);
    choice = scores + bias, group-limited when n_group > 1 (limit_groups: group score = the sum of the group's
    2 best, the experts of the other groups 0.0); the top-k experts by choice (ties to the lower index);
    weights = the chosen scores (no bias, not masked: a masked expert chosen keeps its score) over their sum
    (not with normalise false: norm_topk_prob), times routed_scale either way. HF adds 1e-20 to the sum,
    which does not change a float64 sum of sigmoids here."""
    scores = logits.sigmoid()
    choice = limit_groups(scores + bias, n_group, topk_group, 2)
    chosen = tl.top_k_indices(choice, top_k)
    top = scores.gather(1, chosen)
    if not normalise:
        return top * routed_scale, chosen, choice
    return top / top.sum(dim=-1, keepdim=True) * routed_scale, chosen, choice


def route_softmax(logits, top_k, routed_scale, normalise, n_group=1, topk_group=1):
    """DeepSeek-V2 (scoring_func softmax, topk_method greedy, or group_limited_greedy when n_group > 1): logits
    (N, E) -> weights (N, k), chosen (N, k), probs (N, E). probs = softmax(logits), group-limited when n_group > 1
    (limit_groups: group score = the group's largest probability, the experts of the other groups 0.0); the top-k
    experts by those values (ties to the lower index); weights = the chosen values over their sum when normalise
    (norm_topk_prob) and top_k > 1, else the chosen values times routed_scale: V2's rule scales only the
    unnormalised weights. The weights are read from the masked values, as HF's topk of its masked scores: a
    masked expert is chosen only when top_k exceeds the kept groups' experts, and then weighs 0."""
    probs = limit_groups(logits.softmax(dim=-1), n_group, topk_group, 1)
    chosen = tl.top_k_indices(probs, top_k)
    top = probs.gather(1, chosen)
    if normalise and top_k > 1:
        return top / top.sum(dim=-1, keepdim=True), chosen, probs
    return top * routed_scale, chosen, probs


class Moe(nn.Module):
    """HF's DeepseekV3MoE (route) or DeepseekV2MoE (route_softmax), dropless: out[n] = sum over the k chosen
    e of weight[n, e] * experts[e](x[n]) + shared_experts(x[n]). forward also returns the router logits
    (N, E), N = B*T, and the selection values (N, E) whose top-k are the choices: V3's scores + bias, V2's
    softmax probabilities, group-limited (0.0 outside the kept groups) when n_group > 1. With n_group > 1 it
    keeps the last forward's group scores (N, G), unmasked and detached, in `group_scores` (None otherwise):
    only the golden run's group margin reads them."""

    def __init__(self, cfg):
        super().__init__()
        self.top_k, self.routed_scale = cfg.top_k, cfg.routed_scale
        self.softmax, self.normalise = cfg.is_v2, cfg.norm_topk_prob
        self.n_group, self.topk_group = cfg.n_group, cfg.topk_group
        self.group_scores = None
        self.gate = Router(cfg)
        self.experts = nn.ModuleList([swiglu(cfg.channels, cfg.moe_intermediate) for _ in range(cfg.num_experts)])
        if cfg.num_shared_experts > 0:
            self.shared_experts = swiglu(cfg.channels, cfg.moe_intermediate * cfg.num_shared_experts)

    def forward(self, x):
        B, T, C = x.shape
        x = x.reshape(B * T, C)
        logits = self.gate(x)                                                            # (N,E)
        if self.softmax:
            weights, chosen, choice = route_softmax(logits, self.top_k, self.routed_scale, self.normalise,
                                                    self.n_group, self.topk_group)
        else:
            weights, chosen, choice = route(logits, self.gate.e_score_correction_bias, self.top_k,
                                            self.routed_scale, self.normalise, self.n_group, self.topk_group)
        if self.n_group > 1:
            with torch.no_grad():
                values = (logits.softmax(dim=-1) if self.softmax
                          else logits.sigmoid() + self.gate.e_score_correction_bias)
                self.group_scores = group_scores(values, self.n_group, 1 if self.softmax else 2)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            out.index_add_(0, token, weights[token, slot, None] * expert(x[token]))
        if hasattr(self, "shared_experts"):
            out = out + self.shared_experts(x)
        return out.view(B, T, C), logits, choice


class DecoderLayer(nn.Module):
    """x += self_attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x)), mlp the dense SwiGLU
    (layers < first_dense) or the MoE."""

    def __init__(self, cfg, layer):
        super().__init__()
        self.input_layernorm = tl.RMSNorm(cfg.channels, cfg.rms_norm_eps)
        self.self_attn = LatentAttention(cfg)
        self.post_attention_layernorm = tl.RMSNorm(cfg.channels, cfg.rms_norm_eps)
        self.mlp = Moe(cfg) if cfg.is_moe_layer(layer) else swiglu(cfg.channels, cfg.intermediate)

    def forward(self, x, cos, sin):
        """Returns the new x and (router logits, selection values), or None for a dense layer."""
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        h = self.post_attention_layernorm(x)
        if isinstance(self.mlp, Moe):
            out, logits, choice = self.mlp(h)
            return x + out, (logits, choice)
        return x + self.mlp(h), None


class Decoder(nn.Module):
    """HF's DeepseekV3Model: the tensors under the "model." prefix."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.channels)
        self.layers = nn.ModuleList([DecoderLayer(cfg, l) for l in range(cfg.num_layers)])
        self.norm = tl.RMSNorm(cfg.channels, cfg.rms_norm_eps)


class DeepseekV3(nn.Module):
    """DeepseekV3ForCausalLM, or DeepseekV2ForCausalLM when cfg.model_type is deepseek_v2."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Decoder(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.channels, cfg.vocab_size, bias=False)
        # float64 whatever the model's dtype (a plain attribute, not a buffer, so .to() leaves it).
        self.inv_freq = tl.rope_inv_freq(cfg.qk_rope_dim, cfg.rope_theta, cfg.rope_scaling,
                                         cfg.max_seq_len)                                  # (rope/2)
        self.rope_scale = tl.rope_attention_factor(cfg.rope_scaling)    # on cos and sin: 1 but for YaRN

    def moe_layers(self):
        return [layer.mlp for layer in self.model.layers if isinstance(layer.mlp, Moe)]

    def rope(self, T):
        """cos, sin (T, rope) float64 for positions 0..T-1 (times rope_scale), the same in every layer."""
        return tl.rope_cos_sin(self.inv_freq, T, self.rope_scale)

    def forward(self, idx):
        """idx (B,T) int64 -> logits (B,T,V) and, per MoE layer, (router logits (B*T, E), selection values
        scores + bias (B*T, E))."""
        return tl.decoder_forward(self, idx, self.rope)


# ---------------------------------------------------------------- objective and balancing

def router_losses(routings, top_k, softmax=False):
    """Tessera's router losses for sigmoid routers (src/ops/moe_router.h), per MoE layer l over its N
    tokens: aux_l = E * sum_e (count_e / N) * P_e, count_e = number of (token, slot) picks of expert e
    (by scores + bias), P_e = mean_n p[n, e] with p = scores / (row sum of scores), scores =
    sigmoid(logits); z_l = mean_n logsumexp(logits[n])^2 (the raw logits, as for softmax routers).
    With softmax (DeepSeek-V2) p = softmax(logits) and the picks are by p, as for Mixtral.
    Returns (aux, z), each the mean over layers; the counts carry no gradient."""
    if not routings:
        zero = torch.zeros((), dtype=torch.float64)
        return zero, zero
    aux, z = [], []
    for logits, choice in routings:
        N, E = logits.shape
        if softmax:
            p = logits.softmax(dim=-1)
        else:
            scores = logits.sigmoid()
            p = scores / scores.sum(dim=-1, keepdim=True)
        counts = expert_counts(choice, top_k).to(p.dtype)
        aux.append(E * torch.sum(counts / N * p.mean(dim=0)))
        z.append(torch.logsumexp(logits, dim=-1).pow(2).mean())
    return torch.stack(aux).mean(), torch.stack(z).mean()


def expert_counts(choice, top_k):
    """choice (N, E) selection values -> (E) int64: how many of the N tokens picked each expert."""
    return torch.bincount(tl.top_k_indices(choice, top_k).reshape(-1), minlength=choice.size(1))


def objective(model, idx, targets, aux_coef=0.0, z_coef=0.0):
    """One micro-batch: returns (ce + aux_coef*aux + z_coef*z, ce, aux, z, selection values per MoE layer),
    ce the mean token cross-entropy over V."""
    logits, routings = model(idx)
    ce = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    aux, z = router_losses(routings, model.cfg.top_k, softmax=model.cfg.is_v2)
    return ce + aux_coef * aux + z_coef * z, ce, aux, z, [choice for _, choice in routings]


def bias_steps(load, rate):
    """Tessera's Decoder::router_bias_steps for one layer: load (E) token counts of the step -> the step
    of each bias, rate * sign(mean - load_e) (0 where equal), mean summed as the C++ sums it, load_e / E
    added in order in double."""
    mean = 0.0
    for count in load:
        mean += float(count) / len(load)
    return [rate if mean - float(c) > 0 else -rate if mean - float(c) < 0 else 0.0 for c in load]


def balance_router_biases(model, loads, rate):
    """DeepSeek-V3's auxiliary-loss-free balancing as Tessera applies it after each optimizer step: each
    MoE layer's e_score_correction_bias += rate * sign(mean load - load_e), from the step's loads (E
    counts per MoE layer, summed over the micro-batches). The biases live in Tessera's fp32 master
    weights and the step is a float: the sum is rounded to float32 here too, so the bias stays exact
    in F32. DeepSeek-V2 has no bias to balance. model may also be a torch_llama.Glm4Moe (GLM-4.5: this MoE, its cfg a
    LlamaConfig without is_v2)."""
    if getattr(model.cfg, "is_v2", False):
        raise ValueError("deepseek_v2 has no e_score_correction_bias: there is no bias balancing")
    with torch.no_grad():
        for moe, load in zip(model.moe_layers(), loads):
            bias = moe.gate.e_score_correction_bias
            step = torch.tensor(bias_steps(load.tolist(), rate), dtype=torch.float32)
            bias.copy_(bias.float() + step)


def init_weights(model, generator, router_std=1.0):
    """Linear/embedding weights N(0, 0.02); o_proj and every down_proj (dense, experts, shared)
    N(0, 0.02/sqrt(2L)); RMSNorm gains (the latent norms too) 1 + N(0, 0.1); the router gate N(0,
    router_std); then (DeepSeek-V3) e_score_correction_bias N(0, 0.1). Every tensor is rounded to float32
    (kept in the model's dtype)."""
    std_resid = 0.02 / math.sqrt(2 * model.cfg.num_layers)
    tl.init_parameters(model, generator, (("mlp.gate.weight", router_std),
                                          (("o_proj.weight", "down_proj.weight"), std_resid)))
    with torch.no_grad():
        for moe in model.moe_layers():
            if hasattr(moe.gate, "e_score_correction_bias"):     # DeepSeek-V3 only
                bias = moe.gate.e_score_correction_bias
                bias.copy_((0.1 * torch.randn(bias.shape, generator=generator, dtype=torch.float64)).float())


# ---------------------------------------------------------------- Hugging Face folder

def hf_config(cfg):
    """The config.json of HF's DeepseekV3ForCausalLM (model_type deepseek_v3) or DeepseekV2ForCausalLM
    (deepseek_v2: no rope_interleave key, its tails are always interleaved; softmax scoring, greedy top-k, or
    group_limited_greedy when n_group > 1, DeepSeek-V2's aux-loss keys)."""
    c = {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.channels, "intermediate_size": cfg.intermediate,
        "moe_intermediate_size": cfg.moe_intermediate, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_heads,
        "n_shared_experts": cfg.num_shared_experts, "n_routed_experts": cfg.num_experts,
        "routed_scaling_factor": cfg.routed_scale, "kv_lora_rank": cfg.kv_lora_rank,
        "q_lora_rank": cfg.q_lora_rank or None, "qk_rope_head_dim": cfg.qk_rope_dim, "v_head_dim": cfg.v_head_dim,
        "qk_nope_head_dim": cfg.qk_nope_dim, "head_dim": cfg.qk_rope_dim, "n_group": cfg.n_group,
        "topk_group": cfg.topk_group,
        "num_experts_per_tok": cfg.top_k, "first_k_dense_replace": cfg.first_dense,
        "norm_topk_prob": cfg.norm_topk_prob,
        "hidden_act": "silu", "max_position_embeddings": cfg.max_seq_len, "initializer_range": 0.02,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_scaling": cfg.rope_scaling,
        "rope_interleave": cfg.rope_interleave, "attention_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": cfg.tie_word_embeddings, "torch_dtype": "float32",
    }
    if cfg.is_v2:
        if not cfg.rope_interleave:
            raise ValueError("deepseek_v2 has no rope_interleave key: its RoPE tails are always interleaved")
        del c["rope_interleave"]
        c.update({"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                  "scoring_func": "softmax", "topk_method": "group_limited_greedy" if cfg.n_group > 1 else "greedy",
                  "aux_loss_alpha": 0.001, "seq_aux": True, "moe_layer_freq": 1})
    return c


def config_from_hf(c):
    """DeepseekConfig from a deepseek_v3 or deepseek_v2 config.json (HF's defaults for absent keys: V3
    norm_topk_prob true, V2 false and routed_scaling_factor 1; an absent or null n_group / topk_group is 1
    here, although HF's DeepseekV3Config defaults them to 8 / 4); refuses what this reference does not model.
    V3 is group-limited whenever n_group > 1 (HF's noaux_tc; topk_method is not read). V2 reads n_group and
    topk_group only with topk_method group_limited_greedy: greedy ignores them (they are null in V2-Lite)."""
    kind = c.get("model_type")
    if kind not in MODEL_TYPES or c.get("hidden_act", "silu") != "silu":
        raise ValueError(f"not a silu deepseek_v3 or deepseek_v2 config: model_type {kind}")
    v2 = kind == "deepseek_v2"
    unsupported = {"attention_bias": False}
    if v2:
        unsupported.update({"scoring_func": "softmax", "moe_layer_freq": 1})
    for key, want in unsupported.items():
        if c.get(key, want) not in (want, None):
            raise ValueError(f"{kind} config: {key} {c[key]!r} is not modelled (only {want!r})")
    method = c.get("topk_method") or "greedy"
    if v2 and method not in ("greedy", "group_limited_greedy"):
        raise ValueError(f"{kind} config: topk_method {method!r} is not modelled (only greedy, group_limited_greedy)")
    limited = not v2 or method == "group_limited_greedy"
    n_group = (c.get("n_group") or 1) if limited else 1
    topk_group = (c.get("topk_group") or 1) if limited else 1
    if tl.rope_type(c.get("rope_scaling")) not in ("default", "yarn"):
        raise ValueError(f"{kind} config: rope_scaling {c['rope_scaling']!r} is not modelled (only None or yarn)")
    return DeepseekConfig(
        num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"], channels=c["hidden_size"],
        intermediate=c["intermediate_size"], moe_intermediate=c["moe_intermediate_size"],
        vocab_size=c["vocab_size"], max_seq_len=c["max_position_embeddings"], rms_norm_eps=c["rms_norm_eps"],
        rope_theta=c.get("rope_theta", 10000.0), rope_interleave=v2 or bool(c.get("rope_interleave", True)),
        rope_scaling=c.get("rope_scaling"),
        tie_word_embeddings=c.get("tie_word_embeddings", False), q_lora_rank=c.get("q_lora_rank") or 0,
        kv_lora_rank=c["kv_lora_rank"], qk_nope_dim=c["qk_nope_head_dim"], qk_rope_dim=c["qk_rope_head_dim"],
        v_head_dim=c["v_head_dim"], num_experts=c["n_routed_experts"], top_k=c["num_experts_per_tok"],
        num_shared_experts=c.get("n_shared_experts") or 0, first_dense=c.get("first_k_dense_replace", 0),
        routed_scale=c.get("routed_scaling_factor", 1.0), model_type=kind,
        norm_topk_prob=bool(c.get("norm_topk_prob", not v2)), n_group=n_group, topk_group=topk_group)


def save_hf(model, folder):
    """folder/config.json + folder/model.safetensors (F32, HF names, DeepSeek-V3's router biases included,
    no lm_head when tied)."""
    tg.save_hf_folder(folder, hf_config(model.cfg), model.state_dict())


def load_hf(folder, dtype=torch.float64):
    """Builds a DeepseekV3 (either model_type) from an HF folder (one model.safetensors); a tied model's
    lm_head.weight, if the file has one, is ignored."""
    return tg.load_hf_folder(folder, config_from_hf, DeepseekV3, dtype)
