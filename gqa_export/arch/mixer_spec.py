"""The token-mixer half of an architecture spec: which recurrent-state mixer each layer type gets
(short convolution, gated DeltaNet, Mamba2, Mamba, RG-LRU, lightning attention), the mixers'
tensor names as data, how a layer holds its blocks, and the config multipliers around Linear layers
(docs/hybrid-state.md). An `ArchSpec` (arch/spec.py) carries these as its `mixers`, `layer_blocks`
and `multipliers`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ShortConvNames:
    """A gated short-convolution mixer's modules (LFM2), relative to the layer: in_proj [3H, H]
    giving B, C, x; a depthwise causal Conv1d [H, 1, K]; out_proj [H, H]."""

    in_proj: str = "conv.in_proj"
    conv: str = "conv.conv"
    out_proj: str = "conv.out_proj"


@dataclass(frozen=True)
class GatedDeltaNetNames:
    """A gated-DeltaNet mixer's tensors (Qwen3.5's linear_attn), relative to the layer: in_proj_qkv
    [2 Hk dk + Hv dv, H] (q | k | v channels), in_proj_z [Hv dv, H] (the output gate), in_proj_b and
    in_proj_a [Hv, H] (beta and decay inputs), the depthwise conv1d [conv_dim, 1, K], A_log and
    dt_bias [Hv], the gated per-head RMSNorm [dv] and out_proj [H, Hv dv] (docs/hybrid-state.md §5).

    qkvz / ba name projections fused per key head instead (Qwen3-Next, docs/hybrid-state.md §8.5):
    qkvz [Hk (2 dk + 2 r dv), H] holds, for each key head in turn, its q (dk) | k (dk) | v (r dv) |
    z (r dv) rows, and ba [2 Hv, H] its b (r) | a (r) rows, with r = Hv / Hk value heads per key
    head. The graph then takes the q | k | v, z, b and a rows out of them (a row selection of each
    weight, read as it is written) and names the results after qkv, z, b and a.

    qkv_parts names separate q, k and v projections that stand for in_proj_qkv, concatenated on the
    output (OLMo-Hybrid's q_proj | k_proj | v_proj), conv_parts their separate depthwise kernels that
    stand for conv1d, concatenated on the channels (its q/k/v_conv1d on the hub). norm_eps: the
    gated norm's own epsilon where it is not the model's (OLMo-Hybrid's o_norm: 1e-5, FLA's
    default); None: the model's.

    Kimi-Linear's KDA (docs/hybrid-state.md §8.17) departs in three named ways: a_parts / z_parts name
    low-rank pairs of Linears (f_a then f_b, g_a then g_b) that stand for in_proj_a / in_proj_z;
    decay (DELTANET_DECAYS) "per_channel" gives each key channel its own decay, a and dt_bias
    [Hv dk] wide and A_log [Hv] shared by a head's dk channels, where "per_head" (Qwen3.5) gives
    one per value head; gate (DELTANET_GATES) the gated norm's gate activation, sigmoid for KDA, "config"
    where the config picks silu or sigmoid (Qwen4-Exp's output_gate_type, else hidden_act)."""

    qkv: str = "linear_attn.in_proj_qkv"
    z: str = "linear_attn.in_proj_z"
    b: str = "linear_attn.in_proj_b"
    a: str = "linear_attn.in_proj_a"
    conv: str = "linear_attn.conv1d"
    a_log: str = "linear_attn.A_log"
    dt_bias: str = "linear_attn.dt_bias"
    norm: str = "linear_attn.norm"
    out_proj: str = "linear_attn.out_proj"
    qkvz: str | None = None
    ba: str | None = None
    qkv_parts: tuple[str, ...] | None = None
    conv_parts: tuple[str, ...] | None = None
    norm_eps: float | None = None
    a_parts: tuple[str, str] | None = None
    z_parts: tuple[str, str] | None = None
    decay: str = "per_head"
    gate: str = "silu"
    # one in_proj whose rows stack q | k | v | z | b | a (Lara's hub files; transformers splits it at load
    # into the four above), read where the checkpoint holds it
    stacked: str | None = None


DELTANET_DECAYS = ("per_head", "per_channel")
DELTANET_GATES = ("silu", "sigmoid", "config")


@dataclass(frozen=True)
class Mamba2Names:
    """A Mamba2 mixer's tensors (Granite-4.0-H's mamba), relative to the layer: in_proj
    [I + conv_dim + Hm, H] giving z | x B C | dt, the depthwise conv1d [conv_dim, 1, K] (+ bias),
    A_log, D and dt_bias [Hm], the gated group-wise RMSNorm [I] and out_proj [H, I]
    (docs/hybrid-state.md §8.2)."""

    in_proj: str = "mamba.in_proj"
    conv: str = "mamba.conv1d"
    a_log: str = "mamba.A_log"
    d: str = "mamba.D"
    dt_bias: str = "mamba.dt_bias"
    norm: str = "mamba.norm"
    out_proj: str = "mamba.out_proj"


@dataclass(frozen=True)
class MambaNames:
    """A Mamba (v1) mixer's tensors (Jamba's mamba), relative to the layer: in_proj [2 I, H] giving
    x | z, the depthwise conv1d [I, 1, K] (+ bias), x_proj [R + 2 N, I] giving dt | B | C, the RMSNorms
    over each of those three (dt_layernorm [R], b_layernorm and c_layernorm [N]), dt_proj [I, R]
    (+ bias), A_log [I, N] (a decay per channel and state), D [I] and out_proj [H, I]
    (docs/hybrid-state.md §8.3)."""

    in_proj: str = "mamba.in_proj"
    conv: str = "mamba.conv1d"
    x_proj: str = "mamba.x_proj"
    dt_norm: str = "mamba.dt_layernorm"
    b_norm: str = "mamba.b_layernorm"
    c_norm: str = "mamba.c_layernorm"
    dt_proj: str = "mamba.dt_proj"
    a_log: str = "mamba.A_log"
    d: str = "mamba.D"
    out_proj: str = "mamba.out_proj"
    # Zamba: h heads, each with its own stacked x_proj [h, R + 2N, P] and dt_proj [h, P, R] parameters
    # (x_proj / dt_proj then name parameters, dt_bias the [h, P] bias), A_log [h, P, N], D [h, P], and
    # in_proj's rows interleaved x_c, z_c per channel (docs/hybrid-state.md §8.13)
    per_head: bool = False
    dt_bias: str | None = None


@dataclass(frozen=True)
class RgLruNames:
    """A RecurrentGemma recurrent block's tensors, relative to the layer: linear_x and linear_y
    [W, H] (+ biases; the recurrence's input and its gelu gate), the depthwise conv_1d [W, 1, K]
    (+ bias), the RG-LRU's recurrent_param [W] and its input and recurrent gates, each block-diagonal
    over the attention heads as `<gate>_weight` [h, W / h, W / h] and `<gate>_bias` [h, W / h]
    (stored without a .weight suffix), and linear_out [H, W] (+ bias) (docs/hybrid-state.md §8.15)."""

    linear_x: str = "temporal_block.linear_x"
    linear_y: str = "temporal_block.linear_y"
    conv: str = "temporal_block.conv_1d"
    recurrent_param: str = "temporal_block.rg_lru.recurrent_param"
    input_gate: str = "temporal_block.rg_lru.input_gate"
    recurrent_gate: str = "temporal_block.rg_lru.recurrent_gate"
    out_proj: str = "temporal_block.linear_out"


@dataclass(frozen=True)
class LightningNames:
    """A lightning-attention mixer's tensors (MiniMax's linear_attention layers), relative to the
    layer: qkv_proj [3 H d, H] (q | k | v of each head in turn), output_gate and out_proj [H d, H]
    / [H, H d], the RMSNorm over all heads' channels [H d] at its own eps (the module's default,
    not rms_norm_eps), and the per-head decay rate slope_rate [H, 1, 1], a buffer the checkpoint may
    hold (docs/hybrid-state.md §8.16)."""

    qkv: str = "self_attn.qkv_proj"
    output_gate: str = "self_attn.output_gate"
    norm: str = "self_attn.norm"
    out_proj: str = "self_attn.out_proj"
    slope: str = "self_attn.slope_rate"
    norm_eps: float = 1e-6


@dataclass(frozen=True)
class RwkvNames:
    """An RWKV-4 block's modules (RwkvBlock), relative to the layer: the time mix (`attention.*`:
    time_decay and time_first [C], the token-shift mixes time_mix_key/value/receptance [1, 1, H],
    key/value/receptance [C, H], output [H, C]) and the channel mix (`feed_forward.*`: time_mix_key
    and time_mix_receptance, key [F, H], receptance [H, H], value [H, F]); the layer norms are the
    spec's input_norm (ln1) and post_attention_norm (ln2) (docs/hybrid-state.md §8.18)."""

    time_decay: str = "attention.time_decay"
    time_first: str = "attention.time_first"
    att_mix_key: str = "attention.time_mix_key"
    att_mix_value: str = "attention.time_mix_value"
    att_mix_receptance: str = "attention.time_mix_receptance"
    att_key: str = "attention.key"
    att_value: str = "attention.value"
    att_receptance: str = "attention.receptance"
    att_output: str = "attention.output"
    ffn_mix_key: str = "feed_forward.time_mix_key"
    ffn_mix_receptance: str = "feed_forward.time_mix_receptance"
    ffn_key: str = "feed_forward.key"
    ffn_receptance: str = "feed_forward.receptance"
    ffn_value: str = "feed_forward.value"


@dataclass(frozen=True)
class MlstmNames:
    """An xLSTM block's mLSTM layer (`mlstm_layer.*`, weight_mode "single"), relative to the layer:
    q and k [NH dqk, H], v and ogate_preact [NH dv, H], igate_preact and fgate_preact [NH, H] with
    biases, the multi-head LayerNorm's weight [NH dv] and out_proj [H, NH dv] (docs/hybrid-state.md §8.19)."""

    q: str = "mlstm_layer.q"
    k: str = "mlstm_layer.k"
    v: str = "mlstm_layer.v"
    o: str = "mlstm_layer.ogate_preact"
    i: str = "mlstm_layer.igate_preact"
    f: str = "mlstm_layer.fgate_preact"
    norm: str = "mlstm_layer.multihead_norm"
    out_proj: str = "mlstm_layer.out_proj"


MAMBA_DT_BC_NORMS = ("weighted", "unit", "none")
# "none": the layer has no token mixer, only its feed-forward block (LAYER_BLOCKS "mlp")
# "rwkv": the whole RWKV-4 block (time mix and channel mix, each with its token shift) is the layer
# "mlstm": xLSTM's matrix-memory LSTM with exponential gating (a state mixer beside a SwiGLU MLP)
MIXER_KINDS = (
    "attention", "short_conv", "gated_deltanet", "mamba2", "mamba", "rglru", "lightning", "rwkv", "mlstm", "cca",
    "residual_convs", "none",
)  # fmt: skip
# how a layer's recurrent-state mixer relates to attention: "replace" (the layer has the mixer
# instead of attention: LFM2, Qwen3.5, Granite-4.0-H) or "parallel" (the layer runs both on the same
# normed input and adds their outputs: Falcon-H1), so the layer carries a KV cache and the state
MIXINGS = ("replace", "parallel")


@dataclass(frozen=True)
class CcaNames:
    """Compressed convolutional attention's modules (ZAYA1, graph/cca.py): q and k projections mixed by
    a depthwise then a grouped Conv1d (each with a bias), the value's current and delayed halves, and
    the keys' per-kv-head temperature (a parameter, stored without a .weight suffix)."""

    q: str = "self_attn.qkv_proj.q_proj"
    k: str = "self_attn.qkv_proj.k_proj"
    value_current: str = "self_attn.qkv_proj.v_proj_current"
    value_delayed: str = "self_attn.qkv_proj.v_proj_delayed"
    depthwise: str = "self_attn.qkv_proj.conv_qk_depthwise"
    grouped: str = "self_attn.qkv_proj.conv_qk_grouped"
    temperature: str = "self_attn.qk_norm.temp"


# What one decoder layer holds (ArchSpec.layer_blocks): "mixer_and_mlp", a token mixer then a
# feed-forward block, each behind its own norm and residual (every family but Nemotron-H); "mixer",
# the token mixer alone behind one norm and residual; "mlp", the feed-forward block alone.
LAYER_BLOCKS = ("mixer_and_mlp", "mixer", "mlp")


@dataclass(frozen=True)
class MixerSpec:
    """Layers whose token mixer is not attention (hybrid decoders with recurrent state).

    kinds maps a value of the config's `layer_types` to a mixer kind (MIXER_KINDS); values not
    listed are attention. A short-conv layer carries a fixed-size state (the last K-1 inputs of
    its convolution) instead of a KV cache; a gated-DeltaNet layer (Qwen3.5) carries a conv state
    and a [Hv, dk, dv] recurrent state (docs/hybrid-state.md §1, §5); a Mamba2 layer (Granite-4.0-H)
    a conv state and a [Hm, N, P] SSM state (§8.2); a Mamba (v1) layer (Jamba) a conv state and an
    [I, N, 1] SSM state (§8.3); an RG-LRU layer (RecurrentGemma) a conv state and a [W, 1, 1]
    state, one LinearAttention head per channel (§8.15); a lightning-attention layer (MiniMax) a
    [H, d, d] state decayed by a fixed rate per head (§8.16). mixing (MIXINGS): whether such a
    layer has the mixer instead of
    attention or beside it (§8.4).

    prompt_dt_floor names a config key whose value clamps Mamba2's dt from below in HF's chunked
    (prompt) form only, never in its single-token step (Nemotron-H: time_step_min, §8.6); None: no
    such clamp. prompt_dt_limit names a config key holding a (min, max) pair that clamps dt the same
    way, prompts only (Granite-4.0-H, Falcon-H1: time_step_limit, §8.2); None: a limit other than (0, inf) is
    refused. prompt_dt_floor_until: the transformers (major, minor) whose mixer stops applying the
    floor and clamps with prompt_dt_limit instead (Nemotron-H: 5.25); before it the limit is not
    read. The export follows the installed transformers (§8.6)."""

    kinds: Mapping[str, str]
    mixing: str = "replace"
    every_layer: str | None = None  # a kind every layer has, whatever layer_types says
    short_conv: ShortConvNames = field(default_factory=ShortConvNames)
    gated_deltanet: GatedDeltaNetNames = field(default_factory=GatedDeltaNetNames)
    mamba2: Mamba2Names = field(default_factory=Mamba2Names)
    mamba: MambaNames = field(default_factory=MambaNames)
    rglru: RgLruNames = field(default_factory=RgLruNames)
    lightning: LightningNames = field(default_factory=LightningNames)
    rwkv: RwkvNames = field(default_factory=RwkvNames)
    mlstm: MlstmNames = field(default_factory=MlstmNames)
    cca: CcaNames = field(default_factory=CcaNames)
    prompt_dt_floor: str | None = None
    prompt_dt_limit: str | None = None
    prompt_dt_floor_until: tuple[int, int] | None = None
    # False: the family has no attention layer at all (Mamba, Mamba2): its config has no attention
    # keys, and each layer is one block, the `every_layer` mixer behind its norm (docs/hybrid-state.md §8.10)
    attention: bool = True
    # what each layer of a stack without attention holds (LAYER_BLOCKS): the mixer alone (Mamba, Mamba2)
    # or the mixer and then an MLP, each behind its norm (xLSTM's mLSTM and SwiGLU)
    state_only_blocks: str = "mixer"
    # the Mamba (v1) mixer's RMSNorms on dt, B and C (MAMBA_DT_BC_NORMS): "weighted" (Jamba: stored
    # weights, the model's eps), "unit" (Falcon-Mamba: no weight, eps from config key mixer_rms_eps),
    # "none" (Mamba) (docs/hybrid-state.md §8.3, §8.11)
    mamba_dt_bc_norm: str = "weighted"
    # the Mamba2 gated norm's eps where the modeling code hard-codes it (Zamba2: 1e-5); None: the model's
    mamba2_norm_eps: float | None = None
    # OLMo-Hybrid: beta = 2 sigmoid(b) where the config's linear_allow_neg_eigval says so
    neg_eigval: bool = False
    # Ling 3's KDA forget gate: g = kda_lower_bound * sigmoid(exp(A_log) (a + dt_bias)), bounded in
    # (lower_bound, 0), where the config's kda_safe_gate says so; else Kimi's -exp(A_log) softplus(a + dt_bias)
    bounded_decay: bool = False
    # a recurrent-state layer's own input norm, making it a pre-norm layer (norm -> mixer -> add,
    # post_attention_norm -> MLP -> add) in a post-norm family (OLMo-Hybrid: Llama layers around its
    # gated DeltaNets, OLMo-3 attention layers); None: the family's layout everywhere
    state_input_norm: str | None = None


MULTIPLIED_SIDES = ("input", "output")
SEGMENTED_OUTPUTS = ("mamba2",)


@dataclass(frozen=True)
class Multiplier:
    """A constant from the config that one Linear's input or output is multiplied by (µP
    multipliers: Falcon-H1). The graph applies it as a Mul beside the MatMul, in the order HF
    computes it, rather than folding it into the weight: µP multipliers are in general not powers
    of two, so a folded weight would round differently (docs/hybrid-state.md §8.4).

    module: the Linear, relative to the layer; key: the config key; side: "input" (the Linear
    sees x * m, so a bias is not scaled) or "output" (after its bias). index: one entry of a list
    value (mlp_multipliers' gate and down). segments: a list value applied per segment of the
    output in the mixer's split order ("mamba2": z | x | B | C | dt of the Mamba2 in_proj)."""

    module: str
    key: str
    side: str = "output"
    index: int | None = None
    segments: str | None = None
