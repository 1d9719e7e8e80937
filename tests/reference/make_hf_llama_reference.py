# Writes a golden Llama, Qwen2, Qwen3, Qwen3-MoE, Mixtral, Phi-3, OLMo 2, OLMoE, SmolLM3, Mistral, Gemma, Gemma 2,
# Gemma 3, Starcoder2, Qwen2-MoE, GLM-4.5, GPT-NeoX, Cohere, Cohere2, Phi, DeepSeek-V3 or DeepSeek-V2 training run for
# Tessera's integration tests, in float64 from float32-rounded initial weights: DIR/hf/ (HF folder, F32), DIR/train.bin
# (llm.c shard v2, batches read sequentially as in make_hf_reference.py), DIR/expected.json (per-step LM loss, pre-clip
# grad norm, lr, MoE aux and z losses; DeepSeek-V3's and GLM-4.5's final router biases) and DIR/hf_final/ (the weights
# after the last step, rounded to F32). Each step accumulates gradients over equal micro-batches (contiguous rows of the
# batch); the MoE aux loss is computed per micro-batch. DeepSeek-V3's (and GLM-4.5's) selection biases move after each
# optimizer step by --bias-rate from the step's expert loads (torch_deepseek.py).
# --rope-scaling llama3 or yarn scales the RoPE frequencies (yarn: DeepSeek too, on its qk_rope channels).
# --norm-topk 0 leaves the chosen experts' weights unnormalised (Qwen3-MoE, DeepSeek-V3; DeepSeek-V2's default).
# --n-group G --topk-group K limits DeepSeek's routing to each token's K best groups of E/G experts.
# --fp8-block R C stores hf/'s attention and MLP projections as Hugging Face's fine-grained FP8 (F8_E4M3 codes with
# an F32 weight_scale_inv per R x C block, as DeepSeek-V3's release) and trains from their dequantized values.
# --model phi3 trains exactly --model llama's run and writes hf/ and hf_final/ in Phi3ForCausalLM's form (fused
# qkv_proj and gate_up_proj, torch_llama.phi3_fuse). phi3 alone takes --partial-rotary-factor F (RoPE on the first
# int(HS * F) channels of each q/k head) and --rope-scaling longrope (--longrope-original-max N at config.json's top
# level, max_position_embeddings --context; factor lists drawn from --seed by a generator of their own).
# --model olmo2 is Olmo2ForCausalLM: q_norm/k_norm over the whole q/k projection, RMSNorms on the attention's and the
# MLP's outputs (post_attention_layernorm, post_feedforward_layernorm), no input_layernorm; no --head-dim or scaling.
# --model olmoe is OlmoeForCausalLM: olmo2's q/k norms in Llama's pre-norm blocks, a softmax top-k MoE (qwen3_moe's) in
# every layer; --norm-topk defaults to 0 (OLMoE's norm_topk_prob false); no --head-dim or scaling.
# --model smollm3 is SmolLM3ForCausalLM: llama's run but layer i takes no RoPE when (i + 1) % --no-rope-interval == 0
# (default 4), or where the --no-rope-layers list (1 RoPE, 0 NoPE, one per layer) holds a 0; no --head-dim.
# --model mistral is MistralForCausalLM: llama's run and tensors, Mistral's config.json ("sliding_window" null unless
# --sliding-window W). --sliding-window W (mistral, phi3) lets query i attend keys i - W < j <= i only, as transformers'
# sliding-window causal mask; with W >= --seq-len that is plain causal attention, llama's run. --model qwen2|qwen3 with
# --sliding-window W writes "use_sliding_window": true, W and "max_window_layers": --max-window-layers M (default 0):
# layers i >= M slide, the first M attend causally (Qwen2Config's and Qwen3Config's layer_types); qwen3_moe slides
# every layer (Qwen3-MoE's attention reads no max_window_layers; config.json says 0) and takes no --max-window-layers.
# --model gemma3 is Gemma3ForCausalLM (model_type gemma3_text, torch_llama.Gemma3): embeddings times f32(sqrt(C)), four
# (1 + w) RMSNorms a block (w stored as N(0, 0.1)), GeGLU (gelu tanh), per-head q/k norms, scores times
# --query-pre-attn-scalar^-0.5 (default head size), tied by default (--tie 0 unties); layer i is global when (i + 1) %
# --sliding-window-pattern == 0 (default 6), else sliding: --sliding-window W (default 4096, Gemma3TextConfig's) and
# RoPE base --rope-local-base-freq (default 1e4); global layers use --rope-theta (default 1e6 for gemma3) scaled by
# --rope-scaling linear --rope-factor F (default 8). Its --rms-eps defaults to 1e-6.
# --model gemma2 is Gemma2ForCausalLM (model_type gemma2, torch_llama.Gemma2): gemma3's blocks, embedding scale, norms,
# GeGLU, --query-pre-attn-scalar, --head-dim, --sliding-window (default 4096), tying and eps, without q/k norms; layer i
# slides when i is even; every layer takes RoPE with --rope-theta (default 1e4; no scaling); the scaled scores are
# soft-capped, c * tanh(s / c) with c = --attn-softcap, before the mask, and the logits with c = --final-softcap before
# the loss (0 writes null, no cap; the defaults 0.05 and 1.0 are small so that the tiny runs notice them).
# --model gemma is GemmaForCausalLM (model_type gemma: Gemma 2B/7B, CodeGemma; torch_llama.Gemma): llama's pre-norm
# block (two norms a block) with Gemma's pieces: embeddings times f32(sqrt(C)), (1 + w) RMSNorms (w stored as N(0,
# 0.1)), GeGLU (gelu tanh), --head-dim decoupled from C / NH (default C / NH), scores times head_dim^-0.5, RoPE with
# --rope-theta (default 1e4) in every layer, causal; tied by default (--tie 0 unties), --rms-eps 1e-6; no window, soft
# caps, query_pre_attn_scalar, rope scaling or fp8 (refused). Its MLP is initialised wider (gate_proj N(0, 0.32),
# up_proj N(0, 0.08), down_proj N(0, 0.08/sqrt(2L))) so that a run with the exact GELU in place of the tanh form moves.
# --model starcoder2 is Starcoder2ForCausalLM (torch_llama.Llama with starcoder2): llama's pre-norm blocks with
# nn.LayerNorms (weight and bias; eps --rms-eps, alias --norm-eps, config.json's norm_epsilon), biases on q/k/v/o_proj,
# the MLP c_proj(gelu_tanh(c_fc x)) (both biased, F --intermediate), scores times HS^-0.5, GQA, RoPE (no scaling, no
# --head-dim), tied by default (--tie 0 unties: Starcoder2Config's default and the 3B/7B releases tie, 15B does not),
# no dropout (config.json writes the three dropouts 0.0); --sliding-window W as mistral's.
# --model qwen2_moe is Qwen2MoeForCausalLM (torch_llama.Llama with qwen2_moe): qwen2's attention (q/k/v biases, HS =
# C / NH, no --head-dim, no window) and in every layer a softmax top-k MoE (qwen3_moe's: router mlp.gate, experts
# --intermediate wide; --norm-topk defaults to 0, Qwen2MoeConfig's norm_topk_prob false) plus one shared SwiGLU expert
# --shared-intermediate wide (default 2 x --intermediate; a positive multiple of it, so that Tessera holds it as that
# many shared experts of the experts' width) whose output is times sigmoid(mlp.shared_expert_gate x), one gate a token.
# --model glm4_moe is Glm4MoeForCausalLM (GLM-4.5, GLM-4.5-Air; torch_llama.Glm4Moe): llama's pre-norm blocks, GQA heads
# --head-dim wide (default 16, not C / NH), q/k/v biases with --attention-bias 1 (the default; o_proj never), per-head
# q/k RMSNorms before RoPE with --qk-norm 1 (GLM-4.5's; default 0, GLM-4.5-Air's), RoPE on the first int(head_dim *
# --partial-rotary-factor) channels of each q/k head (default 0.5), scores times head_dim^-0.5; the first --first-dense
# layers (default 1 of --layers 3) a dense SwiGLU --intermediate wide, the others DeepSeek-V3's MoE (torch_deepseek.Moe:
# sigmoid router, e_score_correction_bias for the choice, --n-group/--topk-group, --routed-scale 2.5, --norm-topk,
# --shared-experts of --moe-intermediate), trained as deepseek_v3 is (its aux and z, --bias-rate balancing).
# config.json writes num_nextn_predict_layers 0: no multi-token-prediction layer.
# --model gpt_neox is GPTNeoXForCausalLM (Pythia, GPT-NeoX-20B; torch_gpt_neox.GPTNeoX): gpt_neox.embed_in, per layer
# nn.LayerNorms (weight and bias, eps --norm-eps, config.json's layer_norm_eps) input_layernorm and
# post_attention_layernorm, attention.query_key_value (3C, C) with bias, its rows interleaved per head (head h's q, k,
# v: rows h*3*HS + [0, HS), [HS, 2HS), [2HS, 3HS)), RoPE on the first int(HS * --partial-rotary-factor) channels of
# each q/k head (rotary_pct, default 0.25; base --rope-theta, written as rotary_emb_base and rope_theta), scores times
# HS^-0.5, causal, no GQA (--kv-heads is --heads), attention.dense with bias; mlp.dense_4h_to_h(gelu(dense_h_to_4h x)),
# the exact erf GELU, both biased, F --intermediate (default 4C); --parallel-residual 1 (default) out = x + attn(ln1 x)
# + mlp(ln2 x), 0 h = x + attn(ln1 x), out = h + mlp(ln2 h); final_layer_norm, then embed_out (untied by default; --tie
# 1 reads embed_in). --heads defaults to 2 (HS 16: 4 rotated channels). Refused: --head-dim, --sliding-window, rope
# scaling, fp8, the MoE and DeepSeek flags. Its init draws query_key_value N(0, 0.1) and the MLP wider (dense_h_to_4h
# N(0, 0.32), dense_4h_to_h N(0, 0.08/sqrt(2L))) so that RoPE's layout and the GELU's form show in the runs.
# --model cohere is CohereForCausalLM (Command-R v01/08-2024, Aya-23, Aya Expanse; torch_cohere.Cohere), no biases: per
# layer ONE LayerNorm without bias (input_layernorm, eps --norm-eps) feeding both sublayers, out = x + attn(h) + mlp(h);
# GQA (--heads 4, --kv-heads 2: HS 8) with RoPE over the whole head in interleaved pairs (2i, 2i+1) (base --rope-theta),
# scores times HS^-0.5; Llama's SwiGLU; a final norm, then logits times --logit-scale (default 0.25; Command-R's 0.0625)
# before the loss; tied by default (--tie 0 writes lm_head). Refused: --head-dim, --sliding-window, rope scaling, fp8,
# the MoE and DeepSeek flags. Its init draws q_proj and k_proj N(0, 0.1) so that RoPE's pair layout shows in the runs.
# --model cohere2 is Cohere2ForCausalLM (Command R7B, Command A): cohere's model, tensors, flags and init, and layer i
# full when (i + 1) % --sliding-window-pattern == 0 (default 2; Cohere2Config's 4), else sliding: sliding layers
# attend keys i - W < j <= i (--sliding-window W, default 5) with RoPE on q and k, full layers causally WITHOUT RoPE.
# config.json adds sliding_window, sliding_window_pattern and layer_types.
# --model phi is PhiForCausalLM (Phi-1, Phi-1.5, Phi-2; torch_phi.Phi), biases on every nn.Linear: per layer ONE
# nn.LayerNorm (input_layernorm, weight and bias, eps --norm-eps) feeding both sublayers, out = attn(h) + mlp(h) + x;
# GQA (--heads 2, --kv-heads --heads: HS 16) with q_proj, k_proj, v_proj and dense, RoPE (rotate_half, base
# --rope-theta) on the first int(HS * --partial-rotary-factor) channels of each q/k head (default 0.5: 8 of 16; Phi-2's
# 0.4), scores times HS^-0.5; mlp.fc2(gelu_new(fc1 x)), GELU's tanh form, F --intermediate (default 4C); then
# final_layernorm and lm_head WITH its bias, never tied (--tie 1 refused). Refused: --head-dim, --sliding-window, rope
# scaling, fp8, the MoE and DeepSeek flags. Its init draws q_proj and k_proj N(0, 0.1) and the MLP wider (fc1 N(0,
# 0.32), fc2 N(0, 0.08/sqrt(2L))), as gpt_neox's, so that RoPE's layout and the GELU's form show in the runs.
# Usage: /usr/bin/python3 tests/reference/make_hf_llama_reference.py
#            --model llama|qwen2|qwen3|qwen3_moe|qwen2_moe|mixtral|phi3|olmo2|olmoe|smollm3|mistral|gemma|gemma2|gemma3|
#                    starcoder2|glm4_moe|gpt_neox|cohere|cohere2|phi|deepseek_v3|deepseek_v2 --out DIR [...]
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_reference  # noqa: E402
import torch_gpt2 as tg  # noqa: E402
import torch_cohere as tc  # noqa: E402
import torch_deepseek as td  # noqa: E402
import torch_gpt_neox as tn  # noqa: E402
import torch_llama as tl  # noqa: E402
import torch_phi as tp  # noqa: E402

MOE_ARGS = ("experts", "top_k", "aux_coef", "z_coef", "router_std", "norm_topk")
# DeepSeek's own flags, and the flags it ignores (MLA has no grouped kv heads and sets its own head size).
DEEPSEEK_ARGS = ("q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim", "rope_interleave",
                 "moe_intermediate", "shared_experts", "first_dense", "routed_scale", "bias_rate", "n_group",
                 "topk_group")
NOT_DEEPSEEK_ARGS = ("kv_heads", "head_dim")
NOT_DEEPSEEK_V2_ARGS = ("rope_interleave", "bias_rate")    # always interleaved; no selection bias
DEEPSEEK_MODELS = ("deepseek_v3", "deepseek_v2")
# GLM-4.5's own flags (glm4_moe only, in expected.json's config only for it); the DeepSeek flags it refuses (latent
# attention's) and leaves out of its config: it takes the MoE ones (--moe-intermediate, --shared-experts, --first-dense,
# --routed-scale, --bias-rate, --n-group, --topk-group).
GLM4_MOE_ARGS = ("attention_bias", "qk_norm")
MLA_ARGS = ("q_lora_rank", "kv_lora_rank", "qk_nope_dim", "qk_rope_dim", "v_head_dim", "rope_interleave")
# GLM-4.5's tiny defaults: head_dim 16 (q_proj (64, 32) over C 32, as the releases' 96 heads of 128 over C 4096/5120),
# partial rotary 0.5 (8 of 16 channels rotated), 3 layers (first_k_dense_replace 1: one dense, two MoE).
GLM4_MOE_HEAD_DIM, GLM4_MOE_PARTIAL_ROTARY, GLM4_MOE_LAYERS = 16, 0.5, 3
# GPT-NeoX's own flag (gpt_neox only, in expected.json's config only for it); its default rotary_pct (Pythia's and
# GPT-NeoX-20B's 0.25: 4 of the tiny runs' 16 channels a head).
GPT_NEOX_ARGS = ("parallel_residual",)
GPT_NEOX_PARTIAL_ROTARY = 0.25
# GPT-NeoX's tiny default heads: 2 over C 32, so HS 16 and R = int(16 * 0.25) = 4 rotated channels, 2 frequencies (1
# and 0.01). With 4 heads (HS 8) R would be 2: one pair, one frequency of 1, where the rotate_half and (2i, 2i+1)
# layouts and inv_freq over R or over HS all agree, so no run could tell them apart.
GPT_NEOX_HEADS = 2
# Cohere's own flag (cohere and cohere2 only, in expected.json's config only for them) and its default, 0.25: a run
# that forgets the scale has 4x the logits (Command-R's and Aya-23's logit_scale is 0.0625, Aya Expanse 8B's 0.125).
COHERE_ARGS = ("logit_scale",)
COHERE_LOGIT_SCALE = 0.25
COHERE_MODELS = ("cohere", "cohere2")   # torch_cohere's
# Cohere2's tiny defaults: a window of 5 bites within --seq-len 16, and pattern 2 makes layer 1 of 2 (or 3) full.
COHERE2_SLIDING_WINDOW, COHERE2_SLIDING_WINDOW_PATTERN = 5, 2
# Phi's tiny defaults: 2 heads over C 32 (HS 16; kv heads = heads, PhiConfig's), so R = int(16 * 0.5) = 8 rotated
# channels, 4 frequencies (1, 0.1, 0.01, 0.001); PhiConfig's partial_rotary_factor 0.5 (Phi-1.5's; Phi-2's 0.4).
PHI_HEADS, PHI_PARTIAL_ROTARY = 2, 0.5
# The models of modules of their own (init_weights, save_hf, load_hf, objective) and their classes.
OWN_MODULES = {"gpt_neox": (tn, tn.GPTNeoX), "cohere": (tc, tc.Cohere), "cohere2": (tc, tc.Cohere),
               "phi": (tp, tp.Phi), "deepseek_v3": (td, td.DeepseekV3), "deepseek_v2": (td, td.DeepseekV3)}
# YaRN's flags, in expected.json's config only with --rope-scaling yarn; longrope's only with longrope.
YARN_ARGS = ("yarn_factor", "yarn_original_max", "yarn_beta_fast", "yarn_beta_slow", "yarn_mscale",
             "yarn_mscale_all_dim", "yarn_attention_factor", "yarn_truncate")
LONGROPE_ARGS = ("longrope_original_max",)
SMOLLM3_ARGS = ("no_rope_interval", "no_rope_layers")
QWEN2_MOE_ARGS = ("shared_intermediate",)
QWEN_MODELS = ("qwen2", "qwen3", "qwen3_moe")    # use_sliding_window's models (qwen2, qwen3: max_window_layers)
# the models --sliding-window applies to
WINDOW_MODELS = ("mistral", "phi3", "gemma2", "gemma3", "starcoder2", "cohere2") + QWEN_MODELS
# Gemma 3's own flags (in expected.json's config only for gemma3, query_pre_attn_scalar for gemma2 too,
# sliding_window_pattern for cohere2 too; rope_factor only with --rope-scaling linear). Gemma 2's (gemma2 only).
GEMMA3_ARGS = ("query_pre_attn_scalar", "sliding_window_pattern", "rope_local_base_freq", "rope_factor")
GEMMA2_ARGS = ("attn_softcap", "final_softcap")
# Gemma 2's default caps: small enough that the tiny runs notice both (the real 50 and 30 change nothing at init
# scale, where the scaled scores are about 0.01, at most 0.05, and the logits 0.1, at most 0.5): see README.md's
# "Gemma 2".
GEMMA2_ATTN_SOFTCAP, GEMMA2_FINAL_SOFTCAP = 0.05, 1.0
# The nn.Linear weights that --fp8-block quantizes, as DeepSeek-V3's release does: the attention projections and
# every MLP's (dense, routed experts, Mixtral's w1/w2/w3, shared experts). Embeddings, lm_head, norms, routers
# (mlp.gate, block_sparse_moe.gate), e_score_correction_bias and biases stay F32.
FP8_LINEARS = ("q_proj", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "k_proj", "v_proj", "o_proj",
               "gate_proj", "up_proj", "down_proj", "w1", "w2", "w3")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Write a golden Llama-family, Mixtral, GLM-4.5, GPT-NeoX, Cohere, "
                                            "Cohere2, Phi, DeepSeek-V3 or DeepSeek-V2 training run for Tessera.")
    p.add_argument("--model", choices=("llama", "qwen2", "qwen3", "qwen3_moe", "qwen2_moe", "mixtral", "phi3", "olmo2",
                                        "olmoe", "smollm3", "mistral", "gemma", "gemma2", "gemma3", "starcoder2",
                                        "glm4_moe", "gpt_neox") + COHERE_MODELS + ("phi",) + DEEPSEEK_MODELS,
                   required=True,
                   help="phi3: llama's run, its files in Phi3ForCausalLM's fused form; olmo2: Olmo2ForCausalLM; "
                        "olmoe: OlmoeForCausalLM; smollm3: SmolLM3ForCausalLM (llama with NoPE layers); mistral: "
                        "MistralForCausalLM (llama, with --sliding-window); gemma: GemmaForCausalLM (Gemma 1, "
                        "CodeGemma); gemma2: Gemma2ForCausalLM (soft-capped "
                        "attention and logits); gemma3: Gemma3ForCausalLM; starcoder2: Starcoder2ForCausalLM "
                        "(LayerNorms, biases, GELU-tanh c_fc/c_proj MLP); qwen2_moe: Qwen2MoeForCausalLM (qwen2's "
                        "attention, a MoE plus a sigmoid-gated shared expert in every layer); glm4_moe: "
                        "Glm4MoeForCausalLM (GLM-4.5: partial rotary, q/k/v biases, optional q/k norms, DeepSeek-V3's "
                        "MoE after --first-dense dense layers); gpt_neox: GPTNeoXForCausalLM (Pythia, GPT-NeoX-20B: "
                        "LayerNorms, fused per-head qkv, partial rotary, exact-GELU MLP, parallel residual); cohere: "
                        "CohereForCausalLM (Command-R, Aya: one bias-free LayerNorm a block, parallel residual, "
                        "interleaved RoPE, scaled logits); cohere2: Cohere2ForCausalLM (Command R7B, Command A: "
                        "cohere's, with sliding RoPE layers and full NoPE layers); phi: PhiForCausalLM (Phi-1.5, "
                        "Phi-2: one LayerNorm a block, parallel residual, biases everywhere, partial rotary, gelu_new "
                        "MLP, a biased lm_head)")
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--layers", type=int, default=None, help=f"L (default 2; glm4_moe {GLM4_MOE_LAYERS})")
    p.add_argument("--heads", type=int, default=None,
                   help=f"NH, default 4 (deepseek_v3/v2: num_key_value_heads is the same; gpt_neox {GPT_NEOX_HEADS}: "
                        f"heads of 16 channels, 4 of them rotated; phi {PHI_HEADS}: 8 of 16 rotated)")
    p.add_argument("--kv-heads", type=int, default=None,
                   help="NKV, default 2 (ignored for deepseek_v3/v2; gpt_neox: --heads, the only value it takes; "
                        "phi: default --heads)")
    p.add_argument("--channels", type=int, default=32)
    p.add_argument("--head-dim", type=int, default=0,
                   help="HS when not channels / heads (qwen3, mistral, gemma, gemma2, gemma3, glm4_moe: default "
                        f"{GLM4_MOE_HEAD_DIM})")
    p.add_argument("--intermediate", type=int, default=None,
                   help="F: the MLP's, or each expert's (deepseek_v3/v2: the first --first-dense layers' dense MLP); "
                        "default 48, gpt_neox and phi 4 x --channels")
    p.add_argument("--vocab", type=int, default=300, help="V; Tessera pads it to a multiple of 128")
    p.add_argument("--context", type=int, default=32, help="maxT (max_position_embeddings)")
    p.add_argument("--rms-eps", "--norm-eps", type=float, default=None,
                   help="RMSNorm eps, default 1e-5 (gemma, gemma2, gemma3 1e-6; starcoder2: the LayerNorms' eps, "
                        "norm_epsilon; gpt_neox, cohere, cohere2, phi: the LayerNorms' eps, layer_norm_eps; "
                        "deepseek_v3/v2: not q_a_layernorm and kv_a_layernorm, whose eps is 1e-6)")
    p.add_argument("--rope-theta", type=float, default=None,
                   help="RoPE base, default 1e4 (gemma3: its global layers', default 1e6)")
    p.add_argument("--rope-scaling", choices=("none", "llama3", "yarn", "longrope", "linear"), default="none",
                   help="llama3: Llama 3.1's factor 8 / 1 / 4 / 8192 (use --rope-theta 500000 to reach all bands); "
                        "yarn: YaRN from the --yarn-* flags (deepseek_v3/v2: none or yarn); longrope: phi3 only, "
                        "Phi-3's short/long factors (drawn from --seed), original max --longrope-original-max; "
                        "linear: gemma3 only, its global layers' inv_freq / --rope-factor")
    p.add_argument("--partial-rotary-factor", type=float, default=None,
                   help="phi3, glm4_moe, gpt_neox and phi only: partial_rotary_factor F (gpt_neox: rotary_pct), "
                        "RoPE on the first int(HS * F) channels of each q/k head (even, > 0); default 1.0, glm4_moe "
                        f"{GLM4_MOE_PARTIAL_ROTARY}, gpt_neox {GPT_NEOX_PARTIAL_ROTARY}, phi {PHI_PARTIAL_ROTARY}")
    p.add_argument("--longrope-original-max", type=int, default=16,
                   help="--rope-scaling longrope: original_max_position_embeddings (>= 2); factor = --context / this, "
                        "long factors when --seq-len exceeds it")
    p.add_argument("--no-rope-interval", type=int, default=None,
                   help="smollm3 only: no_rope_layer_interval N (default 4); layer i takes no RoPE when (i + 1) %% N "
                        "== 0, unless --no-rope-layers is given")
    p.add_argument("--no-rope-layers", default=None,
                   help="smollm3 only: no_rope_layers as comma-separated 1 (RoPE) / 0 (NoPE), one per layer; "
                        "overrides the interval (which config.json still records)")
    p.add_argument("--sliding-window", type=int, default=None,
                   help="mistral, phi3, gemma2, gemma3, qwen2, qwen3, qwen3_moe, starcoder2 and cohere2 only: "
                        "sliding_window W >= 1, query i attends keys i - W < j <= i (the W latest positions, itself "
                        "included; gemma2, gemma3: in their sliding layers, default 4096; cohere2: likewise, default "
                        f"{COHERE2_SLIDING_WINDOW}; qwen2/qwen3: in layers >= --max-window-layers); absent: null "
                        "(qwen: use_sliding_window false), plain causal attention")
    p.add_argument("--max-window-layers", type=int, default=None,
                   help="qwen2 and qwen3 with --sliding-window only: max_window_layers M >= 0 (default 0, every layer "
                        "slides), layers i < M attend causally; qwen3_moe slides every layer")
    p.add_argument("--tie", type=int, choices=(0, 1), default=None,
                   help="1: lm_head tied to embed_tokens (default 0; gemma, gemma2, gemma3, starcoder2, cohere and "
                        "cohere2 1; phi takes 0 only)")
    g = p.add_argument_group("gemma3 (Gemma3ForCausalLM); gemma2 takes --query-pre-attn-scalar too, cohere2 "
                             "--sliding-window-pattern")
    g.add_argument("--query-pre-attn-scalar", type=float, default=None,
                   help="query_pre_attn_scalar S > 0: scores q.k * S^-0.5 (default the head size)")
    g.add_argument("--sliding-window-pattern", type=int, default=None,
                   help="sliding_window_pattern N >= 1 (default 6; cohere2 "
                        f"{COHERE2_SLIDING_WINDOW_PATTERN}): layer i global (cohere2: full, without RoPE) when "
                        "(i + 1) %% N == 0, else sliding")
    g.add_argument("--rope-local-base-freq", type=float, default=None,
                   help="rope_local_base_freq > 0: the sliding layers' RoPE base, never scaled (default 1e4)")
    g.add_argument("--rope-factor", type=float, default=None,
                   help="--rope-scaling linear: factor > 0, the global layers' inv_freq divided by it (default 8, "
                        "Gemma 3 4B-27B's)")
    g = p.add_argument_group("gemma2 (Gemma2ForCausalLM; layer i slides when i is even)")
    g.add_argument("--attn-softcap", type=float, default=None,
                   help=f"attn_logit_softcapping c >= 0: scores s = c * tanh(s / c) before the mask; 0 writes null, no "
                        f"cap (default {GEMMA2_ATTN_SOFTCAP}, small enough for the tiny runs to notice; Gemma 2's is "
                        f"50)")
    g.add_argument("--final-softcap", type=float, default=None,
                   help=f"final_logit_softcapping c >= 0: logits = c * tanh(logits / c) before the loss; 0 writes null "
                        f"(default {GEMMA2_FINAL_SOFTCAP}; Gemma 2's is 30)")
    g = p.add_argument_group("gpt_neox (GPTNeoXForCausalLM)")
    g.add_argument("--parallel-residual", type=int, choices=(0, 1), default=None,
                   help="use_parallel_residual: 1 (default, Pythia's and GPT-NeoX-20B's) x + attn(ln1 x) + mlp(ln2 x); "
                        "0 h = x + attn(ln1 x), h + mlp(ln2 h)")
    g = p.add_argument_group("cohere (CohereForCausalLM) and cohere2 (Cohere2ForCausalLM)")
    g.add_argument("--logit-scale", type=float, default=None,
                   help=f"logit_scale > 0: logits = (norm(x) @ head^T) * this, before the loss (default "
                        f"{COHERE_LOGIT_SCALE}; Command-R's 0.0625)")
    g = p.add_argument_group("qwen2_moe (Qwen2MoeForCausalLM; each expert --intermediate wide)")
    g.add_argument("--shared-intermediate", type=int, default=None,
                   help="shared_expert_intermediate_size S: the shared expert's width, a positive multiple of "
                        "--intermediate (Tessera: S / --intermediate shared experts of the experts' width); default "
                        "2 x --intermediate")
    g = p.add_argument_group("glm4_moe (Glm4MoeForCausalLM; its MoE takes the deepseek_v3 MoE flags below)")
    g.add_argument("--attention-bias", type=int, choices=(0, 1), default=None,
                   help="attention_bias: biases on q_proj, k_proj and v_proj, not o_proj (default 1, as GLM-4.5 and "
                        "GLM-4.5-Air)")
    g.add_argument("--qk-norm", type=int, choices=(0, 1), default=None,
                   help="use_qk_norm: an RMSNorm over each q and k head (head_dim channels, gains shared by the heads) "
                        "before RoPE (default 0, GLM-4.5-Air's; 1 is GLM-4.5's)")
    p.add_argument("--experts", type=int, default=4, help="E routed experts (MoE models)")
    p.add_argument("--top-k", type=int, default=2, help="experts per token (MoE models)")
    p.add_argument("--aux-coef", "--moe-aux-coef", type=float, default=0.02, help="load-balancing loss weight")
    p.add_argument("--z-coef", "--moe-z-coef", type=float, default=0.0, help="router z-loss weight")
    p.add_argument("--router-std", type=float, default=1.0, help="router init std (large: stable top-k)")
    p.add_argument("--norm-topk", type=int, choices=(0, 1), default=None,
                   help="norm_topk_prob: 1 divides the chosen weights by their sum (default; deepseek_v2's and "
                        "olmoe's default is 0); 0 for qwen3_moe, olmoe, deepseek_v3 and deepseek_v2 only (mixtral "
                        "always renormalises)")
    g = p.add_argument_group("deepseek_v3 / deepseek_v2 (multi-head latent attention; V3 sigmoid-routed MoE, V2 "
                             "softmax-routed)")
    g.add_argument("--q-lora-rank", type=int, default=0, help="0: q_proj; > 0: q_a_proj -> q_a_layernorm -> q_b_proj")
    g.add_argument("--kv-lora-rank", type=int, default=16)
    g.add_argument("--qk-nope-dim", type=int, default=8, help="q/k channels a head without RoPE")
    g.add_argument("--qk-rope-dim", type=int, default=4, help="q/k channels a head with RoPE (even)")
    g.add_argument("--v-head-dim", type=int, default=6)
    g.add_argument("--rope-interleave", type=int, choices=(0, 1), default=1,
                   help="1: HF's interleaved RoPE on the rot channels (the importer permutes them); deepseek_v2 "
                        "is always interleaved")
    g.add_argument("--moe-intermediate", type=int, default=16, help="each routed expert's width")
    g.add_argument("--shared-experts", type=int, default=1, help="n_shared_experts (one SwiGLU this many times wider)")
    g.add_argument("--first-dense", type=int, default=1, help="first_k_dense_replace: leading dense layers")
    g.add_argument("--routed-scale", type=float, default=None,
                   help="routed_scaling_factor (default 2.5, deepseek_v2 1.0; V2 scales only unnormalised weights)")
    g.add_argument("--bias-rate", type=float, default=0.0,
                   help="aux-loss-free balancing: each step's bias step (Tessera's --moe-bias-rate; not deepseek_v2)")
    g.add_argument("--n-group", type=int, default=1,
                   help="n_group: groups of --experts/G consecutive experts (1: no group limit; deepseek_v2 > 1 writes "
                        "topk_method group_limited_greedy)")
    g.add_argument("--topk-group", type=int, default=None,
                   help="topk_group: the groups each token keeps, in [1, --n-group] (default --n-group)")
    g = p.add_argument_group("yarn (--rope-scaling yarn; 0 = the key is left out of rope_scaling)")
    g.add_argument("--yarn-factor", type=float, default=4.0, help="factor (>= 1)")
    g.add_argument("--yarn-original-max", type=int, default=4096,
                   help="original_max_position_embeddings; 4096 puts the ramp inside the tiny heads at theta 1e4 "
                        "and betas 32/1: low 1, high 3 of 4 frequencies for 8 rotated channels, 2 and 6 for 16")
    g.add_argument("--yarn-beta-fast", type=float, default=32.0, help="beta_fast")
    g.add_argument("--yarn-beta-slow", type=float, default=1.0, help="beta_slow")
    g.add_argument("--yarn-mscale", type=float, default=0.0, help="mscale (0: absent)")
    g.add_argument("--yarn-mscale-all-dim", type=float, default=0.0,
                   help="mscale_all_dim (0: absent); deepseek_v3/v2 also scale the softmax by mscale(factor, this)^2")
    g.add_argument("--yarn-attention-factor", type=float, default=0.0, help="attention_factor (0: absent)")
    g.add_argument("--yarn-truncate", type=int, choices=(0, 1), default=1,
                   help="0: writes truncate false (the ramp bounds are not rounded to integers)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--micro-batches", type=int, default=2, help="gradient accumulation steps; divides --batch")
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--fp8-block", type=int, nargs=2, metavar=("R", "C"), default=None,
                   help="store the attention and MLP projections in hf/ as fine-grained FP8 (F8_E4M3, one F32 "
                        "weight_scale_inv per R x C block) and train from their dequantized values")
    tg.add_optimizer_args(p)
    args = p.parse_args(argv)
    gemma3, gemma2, gemma1 = args.model == "gemma3", args.model == "gemma2", args.model == "gemma"
    glm, neox, phi = args.model == "glm4_moe", args.model == "gpt_neox", args.model == "phi"
    # Defaults that differ for glm4_moe (3 layers: one dense, two MoE; partial rotary 0.5), gpt_neox (partial rotary
    # 0.25, 2 heads, kv heads = heads, F = 4C) and phi (partial rotary 0.5, 2 heads, kv heads = heads, F = 4C); every
    # other model keeps the values it always had.
    if args.layers is None:
        args.layers = GLM4_MOE_LAYERS if glm else 2
    if args.partial_rotary_factor is None:
        args.partial_rotary_factor = (GLM4_MOE_PARTIAL_ROTARY if glm else GPT_NEOX_PARTIAL_ROTARY if neox
                                      else PHI_PARTIAL_ROTARY if phi else 1.0)
    if args.heads is None:
        args.heads = GPT_NEOX_HEADS if neox else PHI_HEADS if phi else 4
    if neox and args.kv_heads not in (None, args.heads):
        p.error(f"gpt_neox: --kv-heads {args.kv_heads} is not modelled (every head has its own k and v: "
                f"num_key_value_heads is --heads)")
    if args.kv_heads is None:
        args.kv_heads = args.heads if neox or phi else 2
    if args.intermediate is None:
        args.intermediate = 4 * args.channels if neox or phi else 48
    if not glm and (args.attention_bias is not None or args.qk_norm is not None):
        p.error("--attention-bias and --qk-norm apply to glm4_moe only (qwen2: biases, qwen3: q/k norms)")
    # Defaults that differ for gemma3 (Gemma3TextConfig's), gemma2 (Gemma2Config's: eps 1e-6, tied; theta stays 1e4),
    # gemma (GemmaConfig's, as gemma2) and starcoder2 (tied, Starcoder2Config's); every other model keeps the values it
    # always had.
    for name, usual, gemma in (("rms_eps", 1e-5, 1e-6), ("rope_theta", 10000.0, 1000000.0), ("tie", 0, 1)):
        if getattr(args, name) is None:
            setattr(args, name, gemma if gemma3 or ((gemma2 or gemma1) and name != "rope_theta")
                    or (args.model in ("starcoder2",) + COHERE_MODELS and name == "tie") else usual)
    if gemma1:
        check_gemma_args(p, args)
    if gemma2:
        check_gemma2_args(p, args)
    elif any(getattr(args, name) is not None for name in GEMMA2_ARGS):
        p.error("--attn-softcap and --final-softcap apply to gemma2 only")
    if neox:
        check_gpt_neox_args(p, args)
    elif args.parallel_residual is not None:
        p.error("--parallel-residual applies to gpt_neox only")
    if args.model in COHERE_MODELS:
        check_cohere_args(p, args)
    elif args.logit_scale is not None:
        p.error("--logit-scale applies to cohere and cohere2 only")
    if phi:
        check_phi_args(p, args)
    if not (gemma3 or gemma2 or args.model == "cohere2") and any(getattr(args, n) is not None for n in GEMMA3_ARGS):
        p.error("--query-pre-attn-scalar (gemma2, gemma3), --sliding-window-pattern (gemma3, cohere2), "
                "--rope-local-base-freq and --rope-factor (gemma3) apply to Gemma and Cohere2 only")
    if args.rope_scaling == "linear" and not gemma3:
        p.error("--rope-scaling linear is modelled for gemma3 only")
    if gemma3:
        if args.rope_scaling not in ("none", "linear"):
            p.error("gemma3: --rope-scaling is none or linear (Gemma 3's global layers)")
        if args.rope_factor is not None and args.rope_scaling != "linear":
            p.error("--rope-factor needs --rope-scaling linear")
        if args.rope_scaling == "linear" and args.rope_factor is None:
            args.rope_factor = 8.0
        if args.sliding_window is None:
            args.sliding_window = 4096
        if args.sliding_window_pattern is None:
            args.sliding_window_pattern = 6
        if args.rope_local_base_freq is None:
            args.rope_local_base_freq = 10000.0
        if (args.sliding_window_pattern < 1 or args.rope_local_base_freq <= 0 or args.rope_theta <= 0
                or (args.query_pre_attn_scalar is not None and args.query_pre_attn_scalar <= 0)
                or (args.rope_factor is not None and args.rope_factor <= 0)):
            p.error("gemma3: --sliding-window-pattern must be >= 1; --rope-local-base-freq, --rope-theta, "
                    "--query-pre-attn-scalar and --rope-factor positive")
        if args.fp8_block is not None:
            p.error("gemma3: --fp8-block is not modelled")
    if args.seq_len > args.context:
        p.error("--seq-len must not exceed --context")
    if args.batch % args.micro_batches:
        p.error("--micro-batches must divide --batch")
    if args.fp8_block is not None and min(args.fp8_block) < 1:
        p.error("--fp8-block R C must be positive")
    if args.model != "phi3" and (args.rope_scaling == "longrope"
                                 or (args.partial_rotary_factor != 1.0 and not (glm or neox or phi))):
        p.error("--rope-scaling longrope is modelled for phi3 only, --partial-rotary-factor for phi3, glm4_moe, "
                "gpt_neox and phi")
    if args.rope_scaling == "longrope" and args.longrope_original_max < 2:
        p.error("--longrope-original-max must be >= 2 (the attention factor divides by its log)")
    if args.rope_scaling == "yarn":
        if args.yarn_factor < 1 or min(args.yarn_original_max, args.yarn_beta_fast, args.yarn_beta_slow) <= 0:
            p.error("--yarn-factor must be >= 1 (HF and Tessera refuse less), --yarn-original-max, --yarn-beta-fast "
                    "and --yarn-beta-slow positive")
        if min(args.yarn_mscale, args.yarn_mscale_all_dim, args.yarn_attention_factor) < 0:
            p.error("--yarn-mscale, --yarn-mscale-all-dim and --yarn-attention-factor must be >= 0 (0: absent)")
    if args.model != "qwen2_moe" and args.shared_intermediate is not None:
        p.error("--shared-intermediate applies to qwen2_moe only (deepseek_v3/v2: --shared-experts)")
    if args.model != "smollm3" and (args.no_rope_interval is not None or args.no_rope_layers is not None):
        p.error("--no-rope-interval and --no-rope-layers apply to smollm3 only")
    if args.sliding_window is not None and (args.model not in WINDOW_MODELS or args.sliding_window < 1):
        p.error("--sliding-window applies to mistral, phi3, gemma2, gemma3, qwen2, qwen3, qwen3_moe, starcoder2 and "
                "cohere2 only, and must be >= 1")
    if args.max_window_layers is not None and (args.model not in ("qwen2", "qwen3") or args.sliding_window is None
                                               or args.max_window_layers < 0):
        p.error("--max-window-layers applies to qwen2 and qwen3 with --sliding-window only (qwen3_moe slides every "
                "layer), and must be >= 0")
    if args.model in ("qwen2", "qwen3") and args.sliding_window is not None and args.max_window_layers is None:
        args.max_window_layers = 0
    v2 = args.model == "deepseek_v2"
    if args.topk_group is None:
        args.topk_group = args.n_group
    if args.model not in DEEPSEEK_MODELS + ("glm4_moe",) and (args.n_group, args.topk_group) != (1, 1):
        p.error("--n-group and --topk-group apply to deepseek_v3, deepseek_v2 and glm4_moe only")
    if args.norm_topk is None:
        args.norm_topk = 0 if v2 or args.model in ("olmoe", "qwen2_moe") else 1
    if args.routed_scale is None:
        args.routed_scale = 1.0 if v2 else 2.5
    if args.norm_topk == 0 and args.model not in ("qwen3_moe", "olmoe", "qwen2_moe", "glm4_moe") + DEEPSEEK_MODELS:
        p.error("--norm-topk 0 applies to qwen3_moe, qwen2_moe, olmoe, glm4_moe, deepseek_v3 and deepseek_v2 only "
                "(mixtral always renormalises)")
    if v2 and args.bias_rate != 0:
        p.error("deepseek_v2 has no e_score_correction_bias: --bias-rate must be 0")
    if v2 and args.rope_interleave != 1:
        p.error("deepseek_v2's RoPE tails are always interleaved (no rope_interleave key): --rope-interleave must be 1")
    if glm:
        check_glm4_moe_args(p, args)
    if args.model in DEEPSEEK_MODELS:
        if args.qk_rope_dim <= 0 or args.qk_rope_dim % 2:
            p.error("--qk-rope-dim must be even and positive (RoPE rotates channel pairs)")
        if min(args.kv_lora_rank, args.qk_nope_dim, args.v_head_dim) <= 0 or args.q_lora_rank < 0:
            p.error("--kv-lora-rank, --qk-nope-dim and --v-head-dim must be positive, --q-lora-rank >= 0")
        if args.experts < (1 if v2 else 2) or not 1 <= args.top_k <= args.experts:
            p.error("deepseek_v3 needs --experts >= 2 (HF's group scores take each group's top 2), and both --top-k "
                    "in [1, --experts]")
        if args.n_group < 1 or args.experts % args.n_group or not 1 <= args.topk_group <= args.n_group:
            p.error("--n-group must divide --experts, and --topk-group be in [1, --n-group]")
        if not v2 and args.n_group > 1 and args.experts // args.n_group < 2:
            p.error("deepseek_v3 needs groups of at least 2 experts (a group's score is the sum of its 2 best): "
                    "--experts / --n-group >= 2")
        if not 0 <= args.first_dense <= args.layers or args.shared_experts < 0:
            p.error("--first-dense must be in [0, --layers] and --shared-experts >= 0")
        if args.rope_scaling in ("llama3", "longrope"):
            p.error(f"{args.model}: only rope_scaling none and yarn are modelled")
        return args
    if args.head_dim % 2 or (not args.head_dim and (args.channels % args.heads or (args.channels // args.heads) % 2)):
        p.error("--heads must divide --channels into an even head size, or --head-dim be even (RoPE rotates "
                "channel pairs)")
    if args.heads % args.kv_heads:
        p.error("--kv-heads must divide --heads")
    if args.model == "phi3" and (args.head_dim or args.rope_scaling not in ("none", "longrope")
                                 or args.fp8_block is not None):
        p.error("phi3: --head-dim (its heads are --channels / --heads wide), --rope-scaling llama3 and yarn (Phi-3's "
                "rope_scaling is null or longrope) and --fp8-block are not modelled")
    if args.model == "smollm3":
        if args.head_dim:
            p.error("smollm3: --head-dim is not modelled (its heads are --channels / --heads wide)")
        if args.no_rope_interval is None:
            args.no_rope_interval = 4
        if args.no_rope_interval < 1:
            p.error("--no-rope-interval must be >= 1")
        if args.no_rope_layers is None:
            args.no_rope_layers = [int((i + 1) % args.no_rope_interval != 0) for i in range(args.layers)]
        else:
            try:
                args.no_rope_layers = [int(v) for v in args.no_rope_layers.split(",")]
            except ValueError:
                p.error(f"--no-rope-layers {args.no_rope_layers}: comma-separated 0s and 1s")
            if len(args.no_rope_layers) != args.layers or any(v not in (0, 1) for v in args.no_rope_layers):
                p.error(f"--no-rope-layers needs one 0 or 1 per layer ({args.layers})")
    if args.model == "starcoder2" and (args.head_dim or args.rope_scaling != "none" or args.fp8_block is not None):
        p.error("starcoder2: --head-dim (its heads are --channels / --heads wide), --rope-scaling and --fp8-block are "
                "not modelled")
    if args.model in ("olmo2", "olmoe") and (args.head_dim or args.rope_scaling != "none"):
        p.error(f"{args.model}: --head-dim (its heads are --channels / --heads wide) and --rope-scaling are not "
                f"modelled")
    if args.model in ("phi3", "gpt_neox", "phi"):
        rotary = int(args.channels // args.heads * args.partial_rotary_factor)
        if not 0 < args.partial_rotary_factor <= 1 or rotary <= 0 or rotary % 2:
            p.error(f"--partial-rotary-factor must be in (0, 1] and give an even, positive rotary width: "
                    f"int({args.channels // args.heads} * {args.partial_rotary_factor}) = {rotary}")
    if args.model == "qwen2_moe":
        check_qwen2_moe_args(p, args)
    if args.model in ("mixtral", "qwen3_moe", "qwen2_moe", "olmoe") and not 1 <= args.top_k <= args.experts:
        p.error("--top-k must be in [1, --experts]")
    return args


def moved_from_default(p, args, names):
    """Those of names (dests) whose flags args sets away from parser p's defaults."""
    return [name for name in names if getattr(args, name) != p.get_default(name)]


def flag_list(names):
    """names (dests) spelled as flags for an error: ("top_k", "z_coef") -> "--top-k, --z-coef"."""
    return ", ".join("--" + name.replace("_", "-") for name in names)


def check_glm4_moe_args(p, args):
    """--model glm4_moe's flags: refuses what GLM-4.5 does not have here (DeepSeek's latent-attention flags, rope
    scaling, fp8 blocks) and MoE shapes HF's router cannot take (groups of fewer than 2 experts: its group score is the
    sum of each group's 2 best, even with one group), and fills its defaults: --head-dim GLM4_MOE_HEAD_DIM (0 = that),
    --attention-bias 1, --qk-norm 0. The rotary width int(head_dim * --partial-rotary-factor) must be even and
    positive."""
    moved = moved_from_default(p, args, MLA_ARGS)
    if moved:
        p.error(f"glm4_moe: {flag_list(moved)} are DeepSeek's latent attention's (GLM-4.5 has grouped-query "
                f"attention: --heads, --kv-heads, --head-dim)")
    if args.rope_scaling != "none":
        p.error("glm4_moe: --rope-scaling is not modelled (GLM-4.5's rope_scaling is null)")
    if args.fp8_block is not None:
        p.error("glm4_moe: --fp8-block is not modelled")
    if args.head_dim == 0:
        args.head_dim = GLM4_MOE_HEAD_DIM
    rotary = int(args.head_dim * args.partial_rotary_factor)
    if args.head_dim < 0 or not 0 < args.partial_rotary_factor <= 1 or rotary <= 0 or rotary % 2:
        p.error(f"glm4_moe: --partial-rotary-factor must be in (0, 1] and give an even, positive rotary width: "
                f"int({args.head_dim} * {args.partial_rotary_factor}) = {rotary}")
    if args.n_group < 1 or args.experts % args.n_group or args.experts // args.n_group < 2:
        p.error("glm4_moe: --n-group must divide --experts into groups of at least 2 experts (a group's score is the "
                "sum of its 2 best, even with one group)")
    if not 1 <= args.topk_group <= args.n_group or not 1 <= args.top_k <= args.experts:
        p.error("glm4_moe: --topk-group must be in [1, --n-group] and --top-k in [1, --experts]")
    if not 0 <= args.first_dense <= args.layers or args.shared_experts < 0 or args.moe_intermediate < 1:
        p.error("glm4_moe: --first-dense must be in [0, --layers], --shared-experts >= 0, --moe-intermediate >= 1")
    if not args.routed_scale > 0:
        p.error("glm4_moe: --routed-scale must be positive")
    if args.attention_bias is None:
        args.attention_bias = 1
    if args.qk_norm is None:
        args.qk_norm = 0


def check_qwen2_moe_args(p, args):
    """--model qwen2_moe's flags: refuses what Qwen2-MoE does not have here (--head-dim: HS = C / NH; longrope and
    linear scaling; DeepSeek's --moe-intermediate and --shared-experts, which would silently not apply: the experts'
    width is --intermediate, the shared expert's --shared-intermediate) and fills --shared-intermediate (2 x
    --intermediate), which must be a positive multiple of --intermediate: Tessera holds the shared expert as
    S / --intermediate shared experts of the experts' width."""
    if args.head_dim:
        p.error("qwen2_moe: --head-dim is not modelled (its heads are --channels / --heads wide)")
    if args.rope_scaling not in ("none", "llama3", "yarn"):
        p.error("qwen2_moe: --rope-scaling is none, llama3 or yarn")
    moved = moved_from_default(p, args, ("moe_intermediate", "shared_experts"))
    if moved:
        p.error(f"qwen2_moe: {flag_list(moved)} are DeepSeek's; the experts are --intermediate wide and the shared "
                f"expert --shared-intermediate")
    if args.experts < 1 or args.intermediate < 1:
        p.error("qwen2_moe: --experts and --intermediate must be positive")
    if args.shared_intermediate is None:
        args.shared_intermediate = 2 * args.intermediate
    if args.shared_intermediate < 1 or args.shared_intermediate % args.intermediate:
        p.error(f"qwen2_moe: --shared-intermediate {args.shared_intermediate} must be a positive multiple of "
                f"--intermediate {args.intermediate} (Tessera holds the shared expert as that many shared experts "
                f"of the experts' width)")


def check_dense_plain_rope_args(p, args, model):
    """What --model gemma, gemma2, gpt_neox, cohere, cohere2 and phi all refuse: rope scaling (every layer takes plain
    RoPE with --rope-theta), fp8, and the MoE and DeepSeek flags away from their defaults (all are dense)."""
    if args.rope_scaling != "none":
        p.error(f"{model}: --rope-scaling is not modelled (every layer takes plain RoPE with --rope-theta)")
    if args.fp8_block is not None:
        p.error(f"{model}: --fp8-block is not modelled")
    moved = moved_from_default(p, args, MOE_ARGS + DEEPSEEK_ARGS)
    if moved:
        p.error(f"{model} is dense: {flag_list(moved)} do not apply")


def check_own_module_args(p, args, model, window=False):
    """What --model gpt_neox, cohere, cohere2 and phi refuse alike: --head-dim (their heads are --channels / --heads
    wide), --max-window-layers (Qwen's), a sliding window unless window (cohere2's), check_dense_plain_rope_args'
    flags; and --rope-theta and --norm-eps must be positive."""
    if args.head_dim:
        p.error(f"{model}: --head-dim is not modelled (its heads are --channels / --heads wide)")
    if args.sliding_window is not None and not window:
        p.error(f"{model}: --sliding-window does not apply (it attends causally)")
    if args.max_window_layers is not None:
        p.error(f"{model}: --max-window-layers does not apply (Qwen's)")
    check_dense_plain_rope_args(p, args, model)
    if not (args.rope_theta > 0 and args.rms_eps > 0):
        p.error(f"{model}: --rope-theta and --norm-eps must be positive")


def check_gpt_neox_args(p, args):
    """--model gpt_neox's flags: refuses what GPT-NeoX does not have here (check_own_module_args'; --kv-heads other
    than --heads is refused where parse_args fills it) and fills --parallel-residual (1). --partial-rotary-factor
    (rotary_pct, default 0.25) is checked with phi3's: int(HS * F) even and positive."""
    check_own_module_args(p, args, "gpt_neox")
    if args.parallel_residual is None:
        args.parallel_residual = 1


def check_phi_args(p, args):
    """--model phi's flags: refuses what Phi does not have here (check_own_module_args'; --tie 1: PhiForCausalLM's
    lm_head is its own, with a bias). --partial-rotary-factor (default PHI_PARTIAL_ROTARY) is checked with phi3's:
    int(HS * F) even and positive; --kv-heads (default --heads) must divide --heads."""
    check_own_module_args(p, args, "phi")
    if args.tie:
        p.error("phi: --tie 1 is not modelled (PhiForCausalLM's lm_head is its own, with a bias)")


def check_cohere_args(p, args):
    """--model cohere's and cohere2's flags: refuses what Cohere does not have here (--head-dim: HS = C / NH; cohere: a
    sliding window, cohere2: --max-window-layers and Gemma 3's flags other than --sliding-window-pattern; rope
    scaling, fp8, the MoE and DeepSeek flags away from their defaults; --partial-rotary-factor, GLM's --attention-bias
    and --qk-norm are refused with the other models') and fills --logit-scale (COHERE_LOGIT_SCALE); cohere2's
    --sliding-window (COHERE2_SLIDING_WINDOW; >= 1 checked with the other window models') and
    --sliding-window-pattern (COHERE2_SLIDING_WINDOW_PATTERN, >= 1)."""
    model = args.model
    if model == "cohere2":
        given = [name for name in GEMMA3_ARGS if name != "sliding_window_pattern" and getattr(args, name) is not None]
        if given:
            p.error(f"cohere2: {flag_list(given)} are Gemma's (Cohere2 scales scores by HS^-0.5 and takes one RoPE "
                    f"base, --rope-theta)")
        if args.sliding_window is None:
            args.sliding_window = COHERE2_SLIDING_WINDOW
        if args.sliding_window_pattern is None:
            args.sliding_window_pattern = COHERE2_SLIDING_WINDOW_PATTERN
        if args.sliding_window_pattern < 1:
            p.error("cohere2: --sliding-window-pattern must be >= 1")
    check_own_module_args(p, args, model, window=model == "cohere2")
    if args.logit_scale is None:
        args.logit_scale = COHERE_LOGIT_SCALE
    if not 0 < args.logit_scale < float("inf"):
        p.error(f"{model}: --logit-scale must be positive (and finite)")


def check_gemma_args(p, args):
    """--model gemma's flags: refuses what Gemma (1) does not have: a sliding window, Gemma 2's and Gemma 3's flags
    (--query-pre-attn-scalar, --sliding-window-pattern, --rope-local-base-freq, --rope-factor, the soft caps), rope
    scaling, fp8 (as gemma2 and gemma3), and the MoE and DeepSeek flags away from their defaults."""
    if args.sliding_window is not None or args.max_window_layers is not None:
        p.error("gemma: --sliding-window and --max-window-layers do not apply (Gemma 1 attends causally in every "
                "layer)")
    given = [name for name in GEMMA3_ARGS + GEMMA2_ARGS if getattr(args, name) is not None]
    if given:
        p.error(f"gemma: {flag_list(given)} are Gemma 2's or Gemma 3's (Gemma 1 scales its scores by head_dim^-0.5, "
                f"takes --rope-theta in every layer and caps nothing)")
    check_dense_plain_rope_args(p, args, "gemma")
    if not args.rope_theta > 0:
        p.error("gemma: --rope-theta must be positive")


def check_gemma2_args(p, args):
    """--model gemma2's flags: refuses what Gemma 2 does not have (rope scaling, Gemma 3's window pattern, local base
    and factor, fp8, the MoE and DeepSeek flags away from their defaults) and fills its defaults: window 4096
    (Gemma2Config's), caps GEMMA2_ATTN_SOFTCAP and GEMMA2_FINAL_SOFTCAP (0 = null, no cap)."""
    if any(getattr(args, name) is not None for name in GEMMA3_ARGS[1:]):
        p.error("gemma2: --sliding-window-pattern, --rope-local-base-freq and --rope-factor are Gemma 3's (gemma2's "
                "layers alternate, sliding when i is even, all with --rope-theta)")
    check_dense_plain_rope_args(p, args, "gemma2")
    if args.sliding_window is None:
        args.sliding_window = 4096
    for name, default in (("attn_softcap", GEMMA2_ATTN_SOFTCAP), ("final_softcap", GEMMA2_FINAL_SOFTCAP)):
        if getattr(args, name) is None:
            setattr(args, name, default)
        if not 0 <= getattr(args, name) < float("inf"):
            p.error(f"gemma2: --{name.replace('_', '-')} must be >= 0 (0: no cap) and finite")
    if args.rope_theta <= 0 or (args.query_pre_attn_scalar is not None and args.query_pre_attn_scalar <= 0):
        p.error("gemma2: --rope-theta and --query-pre-attn-scalar must be positive")


def longrope_factors(n, seed):
    """Phi-3's longrope short_factor and long_factor, n each, from a generator of their own seeded with seed (the
    init and train.bin draw from another, so they do not change): short in [1, 1.5], long_i in [1 + 7i/n, 1 +
    7(i+1)/n] (in [1, 8], increasing on average, as the releases' grow for the slow frequencies), each a multiple of
    1/64, so exact in float32 (HF reads them as float32 tensors) and short in JSON."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(2, n, generator=g, dtype=torch.float64).tolist()
    short = [round((1 + 0.5 * a) * 64) / 64 for a in u[0]]
    long = [round((1 + 7 * (i + b) / n) * 64) / 64 for i, b in enumerate(u[1])]
    return short, long


def rope_scaling(args):
    """config.json's rope_scaling: None, Llama 3.1's dict, YaRN's from the --yarn-* flags, Phi-3's longrope with
    longrope_factors' R/2 factors each or (gemma3) linear with --rope-factor."""
    if args.rope_scaling == "linear":
        return tl.linear_rope_scaling(args.rope_factor)
    if args.rope_scaling == "longrope":
        rotary = int(args.channels // args.heads * args.partial_rotary_factor)
        return tl.longrope_rope_scaling(*longrope_factors(rotary // 2, args.seed))
    if args.rope_scaling == "llama3":
        return dict(tl.LLAMA3_ROPE_SCALING)
    if args.rope_scaling == "yarn":
        return tl.yarn_rope_scaling(args.yarn_factor, args.yarn_original_max, args.yarn_beta_fast, args.yarn_beta_slow,
                                    args.yarn_mscale, args.yarn_mscale_all_dim, args.yarn_attention_factor,
                                    bool(args.yarn_truncate))
    return None


def model_config(args):
    if args.model in COHERE_MODELS:
        fields = dict(
            num_layers=args.layers, num_heads=args.heads, num_kv_heads=args.kv_heads, channels=args.channels,
            intermediate=args.intermediate, vocab_size=args.vocab, max_seq_len=args.context,
            layer_norm_eps=args.rms_eps, rope_theta=args.rope_theta, logit_scale=args.logit_scale,
            tie_word_embeddings=bool(args.tie))
        if args.model == "cohere":
            return tc.CohereConfig(**fields)
        return tc.Cohere2Config(**fields, sliding_window=args.sliding_window,
                                sliding_window_pattern=args.sliding_window_pattern)
    if args.model == "phi":
        return tp.PhiConfig(
            num_layers=args.layers, num_heads=args.heads, num_kv_heads=args.kv_heads, channels=args.channels,
            intermediate=args.intermediate, vocab_size=args.vocab, max_seq_len=args.context,
            layer_norm_eps=args.rms_eps, rope_theta=args.rope_theta, partial_rotary_factor=args.partial_rotary_factor)
    if args.model == "gpt_neox":
        return tn.GPTNeoXConfig(
            num_layers=args.layers, num_heads=args.heads, channels=args.channels, intermediate=args.intermediate,
            vocab_size=args.vocab, max_seq_len=args.context, layer_norm_eps=args.rms_eps, rope_theta=args.rope_theta,
            rotary_pct=args.partial_rotary_factor, use_parallel_residual=bool(args.parallel_residual),
            tie_word_embeddings=bool(args.tie))
    if args.model in DEEPSEEK_MODELS:
        return td.DeepseekConfig(
            num_layers=args.layers, num_heads=args.heads, channels=args.channels, intermediate=args.intermediate,
            moe_intermediate=args.moe_intermediate, vocab_size=args.vocab, max_seq_len=args.context,
            rms_norm_eps=args.rms_eps, rope_theta=args.rope_theta, rope_interleave=bool(args.rope_interleave),
            rope_scaling=rope_scaling(args),
            tie_word_embeddings=bool(args.tie), q_lora_rank=args.q_lora_rank, kv_lora_rank=args.kv_lora_rank,
            qk_nope_dim=args.qk_nope_dim, qk_rope_dim=args.qk_rope_dim, v_head_dim=args.v_head_dim,
            num_experts=args.experts, top_k=args.top_k, num_shared_experts=args.shared_experts,
            first_dense=args.first_dense, routed_scale=args.routed_scale, model_type=args.model,
            norm_topk_prob=bool(args.norm_topk), n_group=args.n_group, topk_group=args.topk_group)
    return tl.LlamaConfig(
        num_layers=args.layers, num_heads=args.heads, num_kv_heads=args.kv_heads, channels=args.channels,
        intermediate=args.intermediate, vocab_size=args.vocab, max_seq_len=args.context,
        rms_norm_eps=args.rms_eps, rope_theta=args.rope_theta,
        rope_scaling=rope_scaling(args),
        tie_word_embeddings=bool(args.tie),
        num_experts=args.experts if args.model in ("mixtral", "qwen3_moe", "qwen2_moe", "olmoe", "glm4_moe") else 0,
        top_k=args.top_k, qkv_bias=args.model in ("qwen2", "qwen2_moe") or bool(args.attention_bias),
        qk_norm=args.model in ("qwen3", "qwen3_moe") or bool(args.qk_norm),
        qwen2_moe=args.model == "qwen2_moe", shared_intermediate=args.shared_intermediate or 0,
        head_dim=args.head_dim, norm_topk_prob=bool(args.norm_topk), phi3=args.model == "phi3",
        partial_rotary_factor=args.partial_rotary_factor, olmo2=args.model == "olmo2", olmoe=args.model == "olmoe",
        smollm3=args.model == "smollm3", no_rope_layers=tuple(args.no_rope_layers or ()),
        no_rope_layer_interval=args.no_rope_interval or 4, mistral=args.model == "mistral",
        starcoder2=args.model == "starcoder2",
        sliding_window=args.sliding_window, max_window_layers=args.max_window_layers or 0,
        # a longrope run's original_max_position_embeddings; 0 (= --context) otherwise
        original_max_seq_len=args.longrope_original_max if args.rope_scaling == "longrope" else 0,
        gemma1=args.model == "gemma",
        **(gemma3_fields(args) if args.model == "gemma3" else gemma2_fields(args) if args.model == "gemma2"
           else glm4_moe_fields(args) if args.model == "glm4_moe" else {}))


def glm4_moe_fields(args):
    """LlamaConfig's GLM-4.5 fields from the flags: its MoE is DeepSeek-V3's, with DeepSeek's flags."""
    return {"glm4_moe": True, "moe_intermediate": args.moe_intermediate, "num_shared_experts": args.shared_experts,
            "first_dense": args.first_dense, "routed_scale": args.routed_scale, "n_group": args.n_group,
            "topk_group": args.topk_group}


def gemma3_fields(args):
    """LlamaConfig's Gemma 3 fields from the flags (query_pre_attn_scalar 0 = the head size)."""
    return {"gemma3": True, "query_pre_attn_scalar": tl.json_number(args.query_pre_attn_scalar or 0),
            "rope_local_base_freq": args.rope_local_base_freq, "sliding_window_pattern": args.sliding_window_pattern}


def gemma2_fields(args):
    """LlamaConfig's Gemma 2 fields from the flags (query_pre_attn_scalar 0 = the head size; a cap of 0 = None)."""
    return {"gemma2": True, "query_pre_attn_scalar": tl.json_number(args.query_pre_attn_scalar or 0),
            "attn_logit_softcapping": args.attn_softcap or None, "final_logit_softcapping": args.final_softcap or None}


def fp8_quantize(model, block):
    """Block-quantizes the FP8_LINEARS weights (tg.fp8_block_quantize) and sets each to what a loader reads back,
    f32(e4m3 value) * f32(scale_inv). Returns model.safetensors' tensors and their dtypes: state_dict() (F32) with
    each quantized `<name>.weight` as F8_E4M3 codes, followed by `<name>.weight_scale_inv` (F32, one per block)."""
    tensors, dtypes = {}, {}
    with torch.no_grad():
        for name, t in model.state_dict().items():    # t shares the parameter's storage
            if name.endswith(".weight") and name.split(".")[-2] in FP8_LINEARS:
                codes, scale_inv = tg.fp8_block_quantize(t.float().numpy(), block)
                t.copy_(torch.from_numpy(tg.fp8_block_dequantize(codes, scale_inv, block)))
                tensors[name], dtypes[name] = codes, "F8_E4M3"
                tensors[name + "_scale_inv"] = scale_inv
            else:
                tensors[name] = t
    return tensors, dtypes


def save_fp8_hf(folder, tensors, dtypes, block):
    """Turns the F32 folder save_hf wrote into the FP8 one: config.json gains HF's quantization_config and
    model.safetensors is rewritten from fp8_quantize's tensors."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": list(block)}
    tg.save_hf_folder(folder, config, tensors, dtypes=dtypes)


def router_margin(router_values, top_k):
    """Smallest gap between the k-th and (k+1)-th selection value (router logits; DeepSeek-V3: sigmoid
    scores + bias; DeepSeek-V2: log probabilities, i.e. the logits' gap) over tokens and layers (None when
    k = E): how far fp32 rounding is from flipping an expert choice."""
    if not router_values or top_k >= router_values[0].size(1):
        return None
    gaps = []
    for values in router_values:
        top = values.topk(top_k + 1, dim=-1).values                              # (N, k+1), descending
        gap = top[:, -2] - top[:, -1]
        # Group-limited V3: when the k-th and (k+1)-th are both experts masked to 0.0, the tie is exact in fp32
        # too (the lower index wins); the hazard is then the value nearest 0 that could cross it.
        zero_tie = (top[:, -2] == 0) & (top[:, -1] == 0)
        if zero_tie.any():
            nearest = values.abs().masked_fill(values == 0, float("inf")).min(dim=-1).values
            gap = torch.where(zero_tie, nearest, gap)
        gaps.append(gap)
    # Group-limited V2: log 0 = -inf outside the kept groups; a gap from a finite value to -inf (or between
    # two -inf) is no rounding hazard, so only the finite gaps count.
    gaps = torch.cat(gaps)
    gaps = gaps[torch.isfinite(gaps)]
    return gaps.min().item() if gaps.numel() else None


def group_margin(group_scores, topk_group):
    """Smallest gap between the topk_group-th and (topk_group+1)-th group score (DeepSeek-V3: the sum of the 2
    best scores + bias; DeepSeek-V2: pass the log of the largest probability, the logits' gap) over tokens and
    layers (None when every group is kept): how far fp32 is from keeping another group."""
    if not group_scores or topk_group >= group_scores[0].size(1):
        return None
    top = [scores.topk(topk_group + 1, dim=-1).values for scores in group_scores]
    return min((v[:, -2] - v[:, -1]).min().item() for v in top)


def train(model, tokens, args):
    """args.steps AdamW steps, each over args.micro_batches micro-batches whose objective is scaled by
    1/micro_batches. Returns per-step histories (means over the micro-batches). DeepSeek-V3 and GLM-4.5 (its MoE):
    after each optimizer step the router biases move by args.bias_rate from the step's expert loads (V2 has none)."""
    B, T, M = args.batch, args.seq_len, args.micro_batches
    rows = B // M
    deepseek = isinstance(model, td.DeepseekV3)
    # DeepSeek's MoE (V3's or V2's, or GLM-4.5's, which is V3's): selection values, loads, biases, group scores
    deepseek_moe = deepseek or isinstance(model, tl.Glm4Moe)
    v2 = deepseek and model.cfg.is_v2
    lib = td if deepseek else tn if isinstance(model, tn.CausalLM) else tl     # the objective's module
    moe = model.cfg.is_moe
    aux_coef, z_coef = (args.aux_coef, args.z_coef) if moe else (0.0, 0.0)
    opt = tg.make_optimizer(model, args.lr, (args.beta1, args.beta2), args.eps, args.weight_decay)
    params = list(model.parameters())
    hist = {"losses": [], "grad_norms": [], "lrs": [], "aux_losses": [], "z_losses": [], "router_margins": []}
    grouped = deepseek_moe and moe and model.cfg.n_group > 1
    if grouped:
        hist["group_margins"] = []
    for step in range(1, args.steps + 1):
        start = (step - 1) * B * T
        chunk = tokens[start:start + B * T + 1]
        x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        lr = tg.lr_at(step, args.lr, args.steps, args.schedule, args.warmup, args.min_lr)
        for group in opt.param_groups:
            group["lr"] = lr
        ce_sum, aux_sum, z_sum, margins, group_margins, loads = 0.0, 0.0, 0.0, [], [], None
        for m in range(M):
            total, ce, aux, z, router_values = lib.objective(model, x[m * rows:(m + 1) * rows],
                                                             y[m * rows:(m + 1) * rows], aux_coef, z_coef)
            (total / M).backward()
            ce_sum, aux_sum, z_sum = ce_sum + ce.item(), aux_sum + aux.item(), z_sum + z.item()
            # DeepSeek-V2 picks by probability: its margin is taken on log p, the gap of the logits (as for
            # Mixtral), not on probabilities that are tiny past the first choice.
            if moe:
                values = [v.detach().log() for v in router_values] if v2 else router_values
                margins.append(router_margin(values, model.cfg.top_k))
            if grouped:
                scores = [layer.group_scores for layer in model.moe_layers()]
                group_margins.append(group_margin([s.log() for s in scores] if v2 else scores, model.cfg.topk_group))
            if deepseek_moe:    # the step's loads: token counts per expert, summed over the micro-batches
                counts = [td.expert_counts(v, model.cfg.top_k) for v in router_values]
                loads = counts if loads is None else [a + b for a, b in zip(loads, counts)]
        if args.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip)  # returns the pre-clip norm
        else:
            norm = make_hf_reference.global_grad_norm(params)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if deepseek_moe and args.bias_rate > 0 and loads:
            td.balance_router_biases(model, loads, args.bias_rate)
        hist["losses"].append(ce_sum / M)
        hist["grad_norms"].append(norm.item())
        hist["lrs"].append(lr)
        if moe:
            hist["aux_losses"].append(aux_sum / M)
            hist["z_losses"].append(z_sum / M)
            hist["router_margins"].append(None if None in margins else min(margins))
        if grouped:
            hist["group_margins"].append(None if None in group_margins else min(group_margins))
        extra = f"  aux {aux_sum / M:.6f}" if moe else ""
        print(f"step {step}/{args.steps}  loss {ce_sum / M:.6f}{extra}  grad_norm {norm.item():.6f}  lr {lr:.3e}")
    return hist


def run_config(args, cfg, num_tokens):
    deepseek, v2 = args.model in DEEPSEEK_MODELS, args.model == "deepseek_v2"
    glm, neox, cohere = args.model == "glm4_moe", args.model == "gpt_neox", args.model in COHERE_MODELS
    phi = args.model == "phi"
    yarn, longrope = args.rope_scaling == "yarn", args.rope_scaling == "longrope"
    dropped = (("out",) + (NOT_DEEPSEEK_ARGS if deepseek else MLA_ARGS if glm else DEEPSEEK_ARGS)
               # gpt_neox: kv heads = heads, HS = C / NH, no rope scaling; cohere, phi: HS = C / NH, no rope scaling
               + (NOT_DEEPSEEK_ARGS + ("rope_scaling",) if neox else GPT_NEOX_ARGS)
               + (("head_dim", "rope_scaling") if cohere else COHERE_ARGS)
               + (("head_dim", "rope_scaling") if phi else ())
               + (() if cfg.is_moe else MOE_ARGS) + (() if glm else GLM4_MOE_ARGS)
               + (() if yarn else YARN_ARGS) + (("rope_scaling",) if deepseek and not yarn else ())
               + (() if longrope else LONGROPE_ARGS)
               + (() if args.model == "smollm3" else SMOLLM3_ARGS)
               + (() if args.model == "qwen2_moe" else QWEN2_MOE_ARGS)
               + (() if args.model == "gemma3" else GEMMA3_ARGS[1:] if args.model == "gemma2"
                  else tuple(n for n in GEMMA3_ARGS if n != "sliding_window_pattern") if args.model == "cohere2"
                  else GEMMA3_ARGS)
               + (() if args.model == "gemma2" else GEMMA2_ARGS)
               + (("rope_factor",) if args.rope_factor is None else ())
               # sliding_window is recorded only when given, max_window_layers with it (qwen2, qwen3)
               + (("sliding_window",) if args.sliding_window is None else ())
               + (("max_window_layers",) if args.max_window_layers is None else ())
               # partial_rotary_factor is recorded only when it is not 1
               + (("partial_rotary_factor",) if args.partial_rotary_factor == 1.0 else ())
               + (NOT_DEEPSEEK_V2_ARGS if v2 else ())
               # n_group and topk_group are recorded only when there are groups
               + (("n_group", "topk_group") if (deepseek or glm) and cfg.n_group == 1 else ())
               # norm_topk is recorded where it is not 1 or the model's default is not (deepseek_v2, olmoe,
               # qwen2_moe)
               + (("norm_topk",) if args.norm_topk == 1 and not v2 and args.model not in ("olmoe", "qwen2_moe")
                  else ())
               + (("fp8_block",) if args.fp8_block is None else ()))
    config = {k: v for k, v in vars(args).items() if k not in dropped}
    config.update({
        "head_size": cfg.qk_head_dim if deepseek else cfg.head_size,
        "padded_vocab": (args.vocab + 127) // 128 * 128, "num_tokens": num_tokens,
        "tokens_per_step": args.batch * args.seq_len, "micro_batch_size": args.batch // args.micro_batches,
        "dtype": "float64",
        "init": "N(0,0.02) weights, o_proj/down_proj/w2 N(0,0.02/sqrt(2L)), RMSNorm gains 1+N(0,0.1), "
                "router N(0,router_std); all rounded to float32 (hf/ holds them exactly)",
        "data": "batch k = tokens[k*B*T : k*B*T+B*T+1], inputs first B*T, targets shifted by one; "
                "micro-batch m = rows [m*B/M, (m+1)*B/M)",
        "objective": "per micro-batch: CE + aux_coef*aux + z_coef*z, scaled by 1/micro_batches; "
                     "losses = CE only, averaged over micro-batches",
        "clip": "torch clip_grad_norm_: scale = grad_clip/(norm+1e-6) when that is < 1",
        "torch_version": torch.__version__,
    })
    if neox:
        gpt_neox_run_config(config, cfg)
        return config
    if cohere:
        cohere_run_config(config, cfg)
        return config
    if phi:
        phi_run_config(config, cfg)
        return config
    if cfg.is_moe:
        config["aux"] = ("per MoE layer over the micro-batch's N tokens: E * sum_e (count_e/N) * mean_n p[n,e], "
                         "count_e = top-k picks of e (sum N*k); mean over layers")
        config["z"] = "per MoE layer: mean_n logsumexp(router logits[n])^2; mean over layers"
        if not deepseek and not cfg.norm_topk_prob:
            config["routing"] = ("p = softmax(logits); top-k by p (ties to the lower index); weights = the chosen p, "
                                 "not renormalised (norm_topk_prob false)")
    if v2:
        config["init"] = ("N(0,0.02) weights, o_proj/down_proj (dense, experts, shared) N(0,0.02/sqrt(2L)), RMSNorm "
                          "gains (q_a/kv_a_layernorm too) 1+N(0,0.1), router N(0,router_std); all rounded to float32 "
                          "(hf/ holds them exactly)")
        if cfg.is_moe:
            config["aux"] += "; p = softmax(router logits), picks by p"
        config["routing"] = ("p = softmax(logits); top-k by p (ties to the lower index); weights = "
                             + ("the chosen p / their sum (norm_topk_prob, top_k > 1; no routed_scale)"
                                if cfg.norm_topk_prob and cfg.top_k > 1 else
                                "the chosen p * routed_scale, not renormalised")
                             + "; + shared experts (not scaled)")
        config["rope_layout"] = ("interleaved, always (no rope_interleave key): q's and k's rot channels rotate in "
                                 "pairs (2i, 2i+1); the importer reorders those rows to rope_halves_order")
        config["latent_norm_eps"] = td.LATENT_NORM_EPS
    elif deepseek:
        config["init"] = ("N(0,0.02) weights, o_proj/down_proj (dense, experts, shared) N(0,0.02/sqrt(2L)), RMSNorm "
                          "gains (q_a/kv_a_layernorm too) 1+N(0,0.1), router N(0,router_std), "
                          "e_score_correction_bias N(0,0.1); all rounded to float32 (hf/ holds them exactly)")
        if cfg.is_moe:
            config["aux"] += "; p = sigmoid scores / their row sum, picks by scores + e_score_correction_bias"
        config["routing"] = ("scores = sigmoid(logits); top-k by scores + bias; weights = chosen scores / their sum "
                             "* routed_scale; + shared experts" if cfg.norm_topk_prob else
                             "scores = sigmoid(logits); top-k by scores + bias; weights = chosen scores * "
                             "routed_scale, not renormalised (norm_topk_prob false); + shared experts")
        config["latent_norm_eps"] = td.LATENT_NORM_EPS
        config["bias_balance"] = ("after each optimizer step, when bias_rate > 0: bias_e = f32(bias_e + f32(bias_rate "
                                  "* sign(mean_e load - load_e))), load = the step's top-k picks summed over its "
                                  "micro-batches; the bias is no parameter (no AdamW, no decay, not in grad_norm)")
    if args.fp8_block is not None:
        config["init"] += ("; then fp8_block: each q/q_a/q_b/kv_a/kv_b/k/v/o_proj, gate/up/down_proj and w1/w2/w3 "
                           "weight replaced by f32(e4m3 code) * f32(scale_inv), its block's scale_inv = f32(amax/448), "
                           "code = nearest e4m3 (ties to even, saturating) of f32(w/scale_inv); hf/ holds codes and "
                           "scales, hf_final F32")
    if glm:
        glm4_moe_run_config(config, cfg)
    if (deepseek or glm) and cfg.n_group > 1:
        config["routing"] += (
            "; group-limited (n_group, topk_group): group g = experts [g*E/G, (g+1)*E/G), its score the "
            + ("largest p" if v2 else "sum of its 2 largest scores + bias")
            + "; each token keeps the topk_group groups of the largest scores (ties to the lower group), the other "
              "experts' selection values become 0.0 (not -inf), then the top-k over all E"
            + (" (a masked expert so chosen weighs 0: the weights are read from the masked p)" if v2 else
               " (a masked expert so chosen weighs its score)")
            + ("; aux counts these picks" if v2 else "; aux counts and bias loads count these picks"))
    if yarn:
        dim = cfg.qk_rope_dim if deepseek else cfg.head_size
        low, high = tl.yarn_ramp_bounds(dim, cfg.rope_theta, cfg.rope_scaling, cfg.max_seq_len)
        config["rope_dim"] = dim
        config["yarn_ramp"] = [low, high]
        config["rope_inv_freq"] = tl.rope_inv_freq(dim, cfg.rope_theta, cfg.rope_scaling, cfg.max_seq_len).tolist()
        config["rope_attention_factor"] = tl.rope_attention_factor(cfg.rope_scaling)
        config["yarn"] = ("inv_freq[i] = ramp/(factor*theta^(2i/dim)) + (1-ramp)/theta^(2i/dim), ramp = clamp((i-low)/"
                          "(high-low), 0, 1), float64 (not rounded to f32); cos and sin (q's and k's rotated channels) "
                          "times rope_attention_factor")
        if deepseek:
            config["softmax_scale"] = td.softmax_scale(cfg)
            config["yarn"] += "; q.k times softmax_scale = qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2"
    if not deepseek and cfg.olmo2:
        config["block"] = ("h = x + post_attention_layernorm(attn(x)); out = h + post_feedforward_layernorm(mlp(h)); "
                           "no input_layernorm; attn: q = q_norm(q_proj(x)) over all NH*HS channels, k = "
                           "k_norm(k_proj(x)) over all NKV*HS, then the head split and RoPE; all norms rms_norm_eps")
    if not deepseek and cfg.olmoe:
        config["block"] = ("x += attn(input_layernorm(x)); x += moe(post_attention_layernorm(x)); attn: q = "
                           "q_norm(q_proj(x)) over all NH*HS channels, k = k_norm(k_proj(x)) over all NKV*HS, then the "
                           "head split and RoPE; all norms rms_norm_eps; moe = mlp (router mlp.gate, experts "
                           "mlp.experts.e.gate/up/down_proj) in every layer")
    if not deepseek and cfg.smollm3:
        config["block"] = ("llama's (x += attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x))); layer i's "
                           "attention rotates q and k only when no_rope_layers[i] is 1 (NoPE layers: no RoPE, no "
                           "rope scaling factor)")
        config["nope_layers"] = [i for i, r in enumerate(cfg.no_rope_layers) if not r]
    if not deepseek and cfg.qwen2_moe:
        config["shared_experts"] = cfg.shared_intermediate // cfg.intermediate
        config["init"] = ("N(0,0.02) weights, o_proj/down_proj (experts and shared expert) N(0,0.02/sqrt(2L)), RMSNorm "
                          "gains 1+N(0,0.1), q/k/v biases N(0,0.1), router N(0,router_std), shared_expert_gate "
                          f"N(0,{tl.QWEN2_MOE_SHARED_GATE_STD:g}); all rounded to float32 (hf/ holds them exactly)")
        config["block"] = ("x += attn(input_layernorm(x)); x += moe(post_attention_layernorm(x)); attn: q, k, v = x "
                           "W^T + b (o_proj without bias), RoPE on q and k, GQA, scores q.k / sqrt(HS), HS = C / NH; "
                           "moe(h) = sum over the top-k e of w_e * expert_e(h) + sigmoid(h . shared_expert_gate) * "
                           "shared_expert(h), one gate per token; expert_e and shared_expert SwiGLU down(silu(gate h) "
                           "* up h); p = softmax(h router^T), top-k by p (ties to the lower index), w = the chosen p, "
                           "divided by their sum only with norm_topk_prob")
        config["shared_expert"] = ("one SwiGLU shared_intermediate = shared_experts * intermediate wide: Tessera's "
                                   "shared_experts shared experts of the experts' width, expert j holding rows [j*F, "
                                   "(j+1)*F) of shared_expert.gate_proj/up_proj and columns [j*F, (j+1)*F) of "
                                   "down_proj, their outputs summed, then times the one sigmoid gate")
    if not deepseek and cfg.starcoder2:
        config["init"] = ("N(0,0.02) weights, o_proj/c_proj N(0,0.02/sqrt(2L)), LayerNorm weights 1+N(0,0.1), every "
                          "bias (q/k/v/o_proj, c_fc, c_proj, LayerNorms) N(0,0.1); all rounded to float32 (hf/ holds "
                          "them exactly)")
        config["block"] = ("x += attn(ln(x, input_layernorm)); x += mlp(ln(x, post_attention_layernorm)); logits = "
                           "ln(x, norm) @ head^T; ln(v, n) = (v - mean) / sqrt(mean((v - mean)^2) + rms_eps) * "
                           "n.weight + n.bias (nn.LayerNorm, config.json's norm_epsilon); attn: q, k, v = x W^T + b, "
                           "RoPE on q and k, scores q.k * HS^-0.5 (GQA), o_proj(y) with its bias; mlp(x) = "
                           "c_proj(gelu_tanh(c_fc(x))), both Linear with bias, gelu_tanh(u) = u/2 (1 + tanh(sqrt(2/pi) "
                           "(u + 0.044715 u^3))); no dropout")
    if not deepseek and cfg.sliding_window is not None:
        config["attention"] = ("causal with a sliding window: query i attends keys j with i - sliding_window < j <= i "
                               "(the sliding_window latest positions, itself included); softmax over those only")
        # false: plain causal attention at this --seq-len (or no sliding layer)
        config["window_masks"] = args.seq_len > cfg.sliding_window and "sliding_attention" in cfg.attention_types
    if args.model in QWEN_MODELS and cfg.sliding_window is not None:
        config["layer_types"] = list(cfg.attention_types)
        config["attention"] = ("layer_types[i] sliding_attention (i >= max_window_layers; qwen3_moe: every layer, "
                               "max_window_layers 0): query i attends keys j with i - sliding_window < j <= i (the "
                               "sliding_window latest positions, itself included), softmax over those only; "
                               "full_attention: causal; RoPE the same in every layer")
    if not deepseek and cfg.gemma:      # Gemma 3 and Gemma 2: the same blocks, norms, init and embedding scale
        config["query_pre_attn_scalar"] = cfg.query_pre_attn_scalar
        config["layer_types"] = list(cfg.layer_types)
        if cfg.gemma2:
            config["attn_logit_softcapping"] = cfg.attn_logit_softcapping
            config["final_logit_softcapping"] = cfg.final_logit_softcapping
        config["init"] = ("N(0,0.02) weights, o_proj/down_proj N(0,0.02/sqrt(2L)), RMSNorm weights w N(0,0.1) (applied "
                          "as 1 + w); all rounded to float32 (hf/ holds them exactly)")
        config["embed_scale"] = tl.gemma3_embed_scale(cfg.channels)
        # What each computes, spelled out whole for a reader of expected.json: the two differ in the q/k norms, the
        # caps and the RoPE bases.
        if cfg.gemma3:
            config["block"] = ("x = embed_tokens(idx) * embed_scale (f32(sqrt(C))); per layer: h = x + "
                               "post_attention_layernorm(attn(input_layernorm(x))); x = h + "
                               "post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))); logits = norm(x) @ "
                               "head^T; every norm (q_norm, k_norm per head too) x * rsqrt(mean(x^2) + eps) * "
                               "(1 + w); mlp = down(gelu_tanh(gate x) * up x); attn: per-head q_norm/k_norm, then "
                               "RoPE, scores q.k * query_pre_attn_scalar^-0.5; no softcapping")
            config["attention"] = ("layer_types[i] sliding_attention: query i attends keys j with i - sliding_window "
                                   "< j <= i, RoPE base rope_local_base_freq (unscaled); full_attention: causal, RoPE "
                                   "base rope_theta (inv_freq / factor with rope_scaling linear)")
            config["rope_inv_freq_sliding"] = tl.gemma3_inv_freq(cfg, "sliding_attention").tolist()
            config["rope_inv_freq_full"] = tl.gemma3_inv_freq(cfg, "full_attention").tolist()
        else:
            config["block"] = ("x = embed_tokens(idx) * embed_scale (f32(sqrt(C))); per layer: h = x + "
                               "post_attention_layernorm(attn(input_layernorm(x))); x = h + "
                               "post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))); logits = cap(norm(x) @ "
                               "head^T, final_logit_softcapping), CE on the capped logits; every norm x * "
                               "rsqrt(mean(x^2) + eps) * (1 + w); mlp = down(gelu_tanh(gate x) * up x); attn: RoPE on "
                               "q and k (no q/k norms), s = cap(q.k * query_pre_attn_scalar^-0.5, "
                               "attn_logit_softcapping), then the mask, softmax; cap(v, c) = c * tanh(v / c), none "
                               "when c is null")
            config["attention"] = ("layer_types[i] sliding_attention (i even): query i attends keys j with i - "
                                   "sliding_window < j <= i; full_attention (i odd): causal; RoPE base rope_theta in "
                                   "every layer; the cap comes before the mask")
            config["rope_inv_freq"] = tl.rope_inv_freq(cfg.head_size, cfg.rope_theta).tolist()
        config["window_masks"] = args.seq_len > cfg.sliding_window and "sliding_attention" in cfg.layer_types
    if not deepseek and cfg.gemma1:
        config["init"] = (f"N(0,0.02) weights, o_proj N(0,0.02/sqrt(2L)), the MLP wider: gate_proj "
                          f"N(0,{tl.GEMMA_GATE_STD:g}), up_proj N(0,{tl.GEMMA_UP_STD:g}), down_proj "
                          f"N(0,{tl.GEMMA_DOWN_STD:g}/sqrt(2L)); RMSNorm weights w N(0,0.1) (applied as 1 + w); all "
                          f"rounded to float32 (hf/ holds them exactly)")
        config["embed_scale"] = tl.gemma3_embed_scale(cfg.channels)
        config["block"] = ("x = embed_tokens(idx) * embed_scale (f32(sqrt(C))); per layer: h = x + "
                           "attn(input_layernorm(x)); x = h + mlp(post_attention_layernorm(h)); logits = norm(x) @ "
                           "head^T; every norm x * rsqrt(mean(x^2) + eps) * (1 + w); mlp = down(gelu_tanh(gate x) * up "
                           "x), gelu_tanh(u) = u/2 (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3))); attn: q, k, v without "
                           "biases, heads head_size wide (head_dim, not C / NH), RoPE on q and k (no q/k norms), "
                           "scores q.k * head_size^-0.5, causal, GQA; no soft caps, no window")
        config["rope_inv_freq"] = tl.rope_inv_freq(cfg.head_size, cfg.rope_theta).tolist()
    if not deepseek:
        partial_rotary_config(config, cfg)
    if longrope:
        R, orig = cfg.rotary_dim, cfg.original_max
        long = args.seq_len > orig
        config["rope_dim"] = R
        config["longrope_factor"] = cfg.max_seq_len / orig
        config["rope_attention_factor"] = tl.rope_attention_factor(cfg.rope_scaling, cfg.max_seq_len, orig)
        config["rope_inv_freq_short"] = tl.rope_inv_freq(R, cfg.rope_theta, cfg.rope_scaling, cfg.max_seq_len,
                                                         orig, orig).tolist()
        config["rope_inv_freq_long"] = tl.rope_inv_freq(R, cfg.rope_theta, cfg.rope_scaling, cfg.max_seq_len,
                                                        orig + 1, orig).tolist()
        config["longrope_factors_used"] = "long" if long else "short"
        config["rope_inv_freq"] = config["rope_inv_freq_long" if long else "rope_inv_freq_short"]
        config["longrope"] = ("factor = max_position_embeddings / original_max_position_embeddings; attention_factor = "
                              "1 if factor <= 1 else sqrt(1 + ln(factor)/ln(original_max)); inv_freq[i] = 1/(ext[i] * "
                              "theta^(2i/rope_dim)), ext = long_factor when seq_len > original_max, else short_factor; "
                              "float64 (not rounded to f32); cos and sin (q's and k's rotated channels) times "
                              "rope_attention_factor")
    return config


def partial_rotary_config(config, cfg, inv_freq=False):
    """expected.json's rotary_dim and partial_rotary text when RoPE turns only the first rotary_dim channels of each q/k
    head (phi3, glm4_moe, gpt_neox, phi); nothing when it turns them all. inv_freq: then rope_inv_freq too (float64,
    over rotary_dim, unscaled: gpt_neox's and phi's)."""
    if cfg.rotary_dim != cfg.head_size:
        config["rotary_dim"] = cfg.rotary_dim
        config["partial_rotary"] = ("RoPE (rotate_half pairs i, i + rotary_dim/2; inv_freq over rotary_dim, "
                                    "theta^(-2i/rotary_dim) without scaling) on channels [0, rotary_dim) of every q "
                                    "and k head; channels [rotary_dim, HS) pass unrotated (and unscaled)")
    if inv_freq:
        config["rope_inv_freq"] = tl.rope_inv_freq(cfg.rotary_dim, cfg.rope_theta).tolist()


def gpt_neox_run_config(config, cfg):
    """expected.json's config texts and values for --model gpt_neox: init, block, attention, qkv_layout, mlp,
    rotary_dim and partial_rotary, rope_inv_freq (float64, rotary_dim / 2 values)."""
    config["init"] = (f"N(0,0.02) embed_in and embed_out weights; query_key_value N(0,{tn.GPT_NEOX_QKV_STD:g}); "
                      f"attention.dense N(0,0.02/sqrt(2L)); mlp.dense_h_to_4h N(0,{tn.GPT_NEOX_H_TO_4H_STD:g}), "
                      f"mlp.dense_4h_to_h N(0,{tn.GPT_NEOX_4H_TO_H_STD:g}/sqrt(2L)); LayerNorm weights 1+N(0,0.1); "
                      f"every bias (query_key_value, dense, dense_h_to_4h, dense_4h_to_h, the LayerNorms') N(0,0.1); "
                      f"all rounded to float32 (hf/ holds them exactly)")
    config["block"] = (("out = mlp(ln(x, post_attention_layernorm)) + attn(ln(x, input_layernorm)) + x (parallel "
                        "residual: both read the block's input x)") if cfg.use_parallel_residual else
                       ("h = attn(ln(x, input_layernorm)) + x; out = mlp(ln(h, post_attention_layernorm)) + h "
                        "(sequential residual, use_parallel_residual false)"))
    config["block"] += ("; logits = ln(x, final_layer_norm) @ head^T, head = embed_out (embed_in when tied); ln(v, n) "
                        "= (v - mean) / sqrt(mean((v - mean)^2) + rms_eps) * n.weight + n.bias (nn.LayerNorm, "
                        "config.json's layer_norm_eps); no dropout")
    config["attention"] = ("qkv = x W^T + b, W = query_key_value.weight (3C, C), viewed as (B, T, NH, 3*HS): head h's "
                           "q, k, v are its channels [0, HS), [HS, 2HS), [2HS, 3HS); RoPE on channels [0, rotary_dim) "
                           "of each q and k head; scores q.k * HS^-0.5, causal softmax, every head its own k and v; "
                           "heads concatenated, then dense (biased)")
    config["qkv_layout"] = ("query_key_value rows (and bias entries) interleaved per head: row h*3*HS + p*HS + d is "
                            "head h's part p (0 q, 1 k, 2 v), channel d; Tessera's packed [q | k | v] takes, for p = "
                            "0, 1, 2 in turn, rows h*3*HS + p*HS .. + HS of every head h (torch_gpt_neox.qkv_parts)")
    config["mlp"] = ("dense_4h_to_h(gelu(dense_h_to_4h(u))), both biased, gelu(u) = u/2 (1 + erf(u/sqrt(2))), the "
                     "exact form (hidden_act gelu)")
    partial_rotary_config(config, cfg, inv_freq=True)


def cohere_run_config(config, cfg):
    """expected.json's config texts and values for --model cohere and cohere2: init, block, attention, rope_layout,
    rope_inv_freq (float64, HS / 2 values); cohere2's layer_types and window_masks."""
    config["init"] = (f"N(0,0.02) embed_tokens, v_proj, gate_proj, up_proj and lm_head weights; q_proj and k_proj "
                      f"N(0,{tc.COHERE_QK_STD:g}); o_proj and down_proj N(0,0.02/sqrt(2L)); LayerNorm weights "
                      f"1+N(0,0.1); no biases; all rounded to float32 (hf/ holds them exactly)")
    config["block"] = ("h = ln(x, input_layernorm); out = x + attn(h) + mlp(h) (parallel residual, ONE norm a block, "
                       "no post_attention_layernorm); logits = (ln(x, norm) @ head^T) * logit_scale, head = lm_head "
                       "(embed_tokens when tied), CE on the scaled logits; ln(v, n) = (v - mean) * rsqrt(mean((v - "
                       "mean)^2) + rms_eps) * n.weight (CohereLayerNorm: no bias; config.json's layer_norm_eps); mlp = "
                       "down(silu(gate h) * up h); no dropout")
    config["attention"] = ("q, k, v = x W^T (no biases), HS = C / NH, GQA (query head h reads kv head h // (NH/NKV)); "
                           "RoPE on every channel of each q and k head; scores q.k * HS^-0.5, causal softmax; heads "
                           "concatenated, then o_proj")
    config["rope_layout"] = ("interleaved (GPT-J's): pair (2i, 2i+1) of each head turned by angle pos * inv_freq[i], "
                             "x'[2i] = x[2i] cos - x[2i+1] sin, x'[2i+1] = x[2i+1] cos + x[2i] sin (HF Cohere's "
                             "repeat_interleave cos/sin and rotate_half); not Llama's pairs (i, i + HS/2)")
    config["rope_inv_freq"] = tl.rope_inv_freq(cfg.head_size, cfg.rope_theta).tolist()
    if isinstance(cfg, tc.Cohere2Config):
        config["layer_types"] = list(cfg.layer_types)
        config["attention"] = ("q, k, v = x W^T (no biases), HS = C / NH, GQA (query head h reads kv head h // "
                               "(NH/NKV)); layer_types[i] (full_attention when (i + 1) % sliding_window_pattern == 0, "
                               "else sliding_attention): sliding_attention rotates every channel of each q and k head "
                               "and query i attends keys j with i - sliding_window < j <= i; full_attention rotates "
                               "NOTHING (no RoPE: q and k as projected) and attends every j <= i; scores q.k * "
                               "HS^-0.5, softmax over the visible keys; heads concatenated, then o_proj")
        # false: no sliding layer, or W >= --seq-len (the sliding layers then attend causally)
        config["window_masks"] = config["seq_len"] > cfg.sliding_window and "sliding_attention" in cfg.layer_types


def phi_run_config(config, cfg):
    """expected.json's config texts and values for --model phi: init, block, attention, mlp, rotary_dim and
    partial_rotary, rope_inv_freq (float64, rotary_dim / 2 values)."""
    config["init"] = (f"N(0,0.02) embed_tokens, v_proj and lm_head weights; q_proj and k_proj N(0,{tp.PHI_QK_STD:g}); "
                      f"dense N(0,0.02/sqrt(2L)); fc1 N(0,{tp.PHI_FC1_STD:g}), fc2 N(0,{tp.PHI_FC2_STD:g}/sqrt(2L)); "
                      f"LayerNorm weights 1+N(0,0.1); every bias (q/k/v_proj, dense, fc1, fc2, the LayerNorms', "
                      f"lm_head's) N(0,0.1); all rounded to float32 (hf/ holds them exactly)")
    config["block"] = ("h = ln(x, input_layernorm); out = attn(h) + mlp(h) + x (parallel residual, ONE norm a block, "
                       "HF's order of the additions); logits = ln(x, final_layernorm) @ lm_head.weight^T + "
                       "lm_head.bias (never tied), CE on them; ln(v, n) = (v - mean) / sqrt(mean((v - mean)^2) + "
                       "rms_eps) * n.weight + n.bias (nn.LayerNorm, config.json's layer_norm_eps); no dropout")
    config["attention"] = ("q, k, v = x W^T + b (q_proj, k_proj, v_proj), HS = C / NH, GQA (query head h reads kv head "
                           "h // (NH/NKV)); RoPE on channels [0, rotary_dim) of each q and k head; scores q.k * "
                           "HS^-0.5, causal softmax; heads concatenated, then dense (biased)")
    config["mlp"] = ("fc2(gelu_new(fc1(u))), both biased, gelu_new(u) = u/2 (1 + tanh(sqrt(2/pi) (u + 0.044715 "
                     "u^3))), GELU's tanh form (hidden_act gelu_new), not the exact erf one")
    partial_rotary_config(config, cfg, inv_freq=True)


def glm4_moe_run_config(config, cfg):
    """expected.json's config texts and values for --model glm4_moe: init, block, attention, the MoE's routing, aux
    and bias balancing (DeepSeek-V3's), rope_inv_freq (float64, rotary_dim / 2 values) and mtp."""
    config["init"] = ("N(0,0.02) weights, o_proj/down_proj (dense, experts, shared) N(0,0.02/sqrt(2L)), RMSNorm gains "
                      "(q_norm/k_norm too) 1+N(0,0.1), q/k/v biases N(0,0.1), router mlp.gate N(0,router_std), then "
                      "e_score_correction_bias N(0,0.1); all rounded to float32 (hf/ holds them exactly)")
    config["block"] = ("x += attn(input_layernorm(x)); x += mlp(post_attention_layernorm(x)); logits = norm(x) @ "
                       "lm_head^T; mlp = down(silu(gate h) * up h), intermediate wide, in layers < first_dense, else "
                       "the MoE; RMSNorm x * rsqrt(mean(x^2) + rms_eps) * w")
    config["attention"] = ("q, k, v = x W^T (+ b with attention_bias; o_proj never biased), head_size = head_dim "
                           "channels a head (not C / NH), GQA (query head h reads kv head h // (NH/NKV)); with qk_norm "
                           "an RMSNorm over each q and k head (head_dim channels, one gain vector shared by the heads, "
                           "eps rms_eps) before RoPE; RoPE on channels [0, rotary_dim) of each q and k head only, "
                           "rotate_half pairs (i, i + rotary_dim/2), inv_freq theta^(-2i/rotary_dim); channels "
                           "[rotary_dim, head_dim) unrotated; scores q.k * head_dim^-0.5, causal")
    config["rope_inv_freq"] = tl.rope_inv_freq(cfg.rotary_dim, cfg.rope_theta).tolist()
    config["mtp"] = ("num_nextn_predict_layers 0: no multi-token-prediction layer (the releases' 1 is stored as "
                     "model.layers.{num_hidden_layers}.*; load_hf skips such tensors)")
    if cfg.is_moe:
        config["aux"] += "; p = sigmoid scores / their row sum, picks by scores + e_score_correction_bias"
        config["routing"] = ("DeepSeek-V3's: scores = sigmoid(logits); top-k by scores + bias (ties to the lower "
                             "index); weights = chosen scores " + ("/ their sum " if cfg.norm_topk_prob else
                                                                   "(not renormalised: norm_topk_prob false) ")
                             + "* routed_scale; + shared experts (one SwiGLU moe_intermediate * shared_experts wide, "
                               "not scaled)")
        config["bias_balance"] = ("after each optimizer step, when bias_rate > 0: bias_e = f32(bias_e + f32(bias_rate "
                                  "* sign(mean_e load - load_e))), load = the step's top-k picks summed over its "
                                  "micro-batches; the bias is no parameter (no AdamW, no decay, not in grad_norm)")


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)

    cfg = model_config(args)
    deepseek_moe = args.model in DEEPSEEK_MODELS + ("glm4_moe",)    # the models with router biases (V3 and GLM-4.5)
    lib, model_class = OWN_MODULES[args.model] if args.model in OWN_MODULES else (tl, tl.model_class(cfg))
    model = model_class(cfg).double()
    lib.init_weights(model, gen, router_std=args.router_std)
    if args.fp8_block is not None:
        fp8_tensors, fp8_dtypes = fp8_quantize(model, args.fp8_block)
    num_tokens = args.steps * args.batch * args.seq_len + 1
    tokens = torch.randint(0, args.vocab, (num_tokens,), generator=gen, dtype=torch.int64)

    os.makedirs(args.out, exist_ok=True)
    aux_coef = args.aux_coef if cfg.is_moe else None
    save = lib.save_hf if lib is not tl else (lambda net, folder: tl.save_hf(net, folder, aux_coef))
    save(model, os.path.join(args.out, "hf"))
    if args.fp8_block is not None:
        save_fp8_hf(os.path.join(args.out, "hf"), fp8_tensors, fp8_dtypes, args.fp8_block)
    tg.write_token_shard(os.path.join(args.out, "train.bin"), tokens.numpy(), version=2)

    hist = train(model, tokens, args)
    save(model, os.path.join(args.out, "hf_final"))

    expected = dict(hist, config=run_config(args, cfg, num_tokens))
    if not cfg.is_moe:
        del expected["router_margins"]
    if deepseek_moe and args.bias_rate > 0:
        expected["router_biases_final"] = [moe.gate.e_score_correction_bias.tolist() for moe in model.moe_layers()]
    tg.write_json(os.path.join(args.out, "expected.json"), expected)
    # Sigmoid scores + bias lie in (0, 1) + bias, where an fp32 rerun of this script agrees to about 1e-7.
    least = 1e-5 if args.model in ("deepseek_v3", "glm4_moe") else 1e-3
    if cfg.is_moe and any(m is not None and m < least for m in hist["router_margins"]):
        print(f"warning: a router margin is below {least:g}; fp32 may pick other experts (raise --router-std)")
    if any(m is not None and m < least for m in hist.get("group_margins", [])):
        print(f"warning: a group margin is below {least:g}; fp32 may keep other groups (raise --router-std)")
    if args.model == "smollm3" and all(cfg.no_rope_layers):
        print("note: no layer skips RoPE (raise --layers or lower --no-rope-interval): this is llama's run")
    if args.sliding_window is not None and args.sliding_window >= args.seq_len:
        print(f"note: --sliding-window {args.sliding_window} >= --seq-len {args.seq_len} masks nothing: plain causal "
              f"attention")
    if args.model in ("gemma2", "gemma3", "cohere2") and "sliding_attention" not in cfg.layer_types:
        print("note: no layer is sliding (lower --sliding-window-pattern or raise --layers)")
    if args.model == "cohere2" and "full_attention" not in cfg.layer_types:
        print("note: no layer is full, none without RoPE (lower --sliding-window-pattern or raise --layers)")
    if args.model in QWEN_MODELS and cfg.sliding_window is not None and "sliding_attention" not in cfg.attention_types:
        print("note: no layer is sliding (lower --max-window-layers or raise --layers): plain causal attention")
    print(f"wrote {args.out}/hf, train.bin, expected.json, hf_final")


if __name__ == "__main__":
    main()
