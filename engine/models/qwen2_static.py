"""Qwen2's forward written for a static KV cache: short enough to compile into a few kernels.

Hugging Face's forward goes module by module (unfused RMSNorm, rotary, SwiGLU, a mask built
over the whole cache), about a thousand small kernels a pass. This one computes the same thing
as plain tensor code that `torch.compile` can fuse (engine/decoding/compiled_step.py): the
tokens of a pass at given positions, their keys and values written into preallocated buffers
by position, and attention over the first `attend` positions only, with a causal mask of the
pass's rows against those positions (stale keys past the live length are masked, never read
into the answer). The weights are the Hugging Face model's own tensors: q/k/v and gate/up are
laid out once as one tensor each (one matrix product instead of three, or two), which the
model's modules then view, so no weight is held twice.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, norm: torch.nn.Module) -> torch.Tensor:
    """Qwen2RMSNorm's arithmetic: in float32, scaled by the weight in the activations' dtype."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return norm.weight * (x.float() * torch.rsqrt(variance + norm.variance_epsilon)).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on (heads, rows, head_dim), halves rotated as Qwen2 does."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def fused_projections(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight (and bias) holding `linears`' rows in order, so a pass runs one matrix product
    instead of several. The linears' own parameters become views of it: Hugging Face's forward
    reads the same values, and no memory is added. A second call finds them laid out already."""
    for linear in linears:
        if type(linear) is not torch.nn.Linear:
            raise ValueError(f"the static Qwen2 step needs float nn.Linear projections, not {type(linear).__name__}")
    fused = []
    for name in ("weight", "bias"):
        parts = [getattr(linear, name) for linear in linears]
        if parts[0] is None:
            fused.append(None)
            continue
        spanning = _spanning_view(parts)
        if spanning is None:
            with torch.no_grad():
                spanning = torch.cat([part.detach() for part in parts])
                offset = 0
                for linear, part in zip(linears, parts):
                    view = spanning[offset:offset + part.shape[0]]
                    setattr(linear, name, torch.nn.Parameter(view, requires_grad=part.requires_grad))
                    offset += part.shape[0]
        fused.append(spanning.detach())
    return fused[0], fused[1]


def _spanning_view(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """The tensor the contiguous `parts` make together when they lie back to back in one storage."""
    first = parts[0]
    offset = first.storage_offset()
    for part in parts:
        if (not part.is_contiguous() or part.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
                or part.storage_offset() != offset):
            return None
        offset += part.numel()
    rows = sum(part.shape[0] for part in parts)
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(), (rows, *first.shape[1:]))


class Layer(torch.nn.Module):
    """One decoder layer's fused projections (views shared with the Hugging Face model) and its
    keys and values, (1, kv_heads, capacity, head_dim) each. Buffers of their own, so a compiled
    pass writes them in place (a view of one buffer for all layers gets copied whole)."""

    def __init__(self, hf_layer: torch.nn.Module) -> None:
        super().__init__()
        attn, mlp = hf_layer.self_attn, hf_layer.mlp
        qkv_weight, qkv_bias = fused_projections([attn.q_proj, attn.k_proj, attn.v_proj])
        gate_up_weight, _ = fused_projections([mlp.gate_proj, mlp.up_proj])
        for name, tensor in (("qkv_weight", qkv_weight), ("qkv_bias", qkv_bias), ("gate_up_weight", gate_up_weight)):
            self.register_buffer(name, tensor, persistent=False)

    def allocate(self, shape: tuple[int, ...], kept: int) -> None:
        """New key/value buffers of `shape`, holding the first `kept` positions of the old ones."""
        keys, values = (torch.zeros(shape, dtype=self.qkv_weight.dtype, device=self.qkv_weight.device)
                        for _ in range(2))
        if kept:
            keys[:, :, :kept] = self.keys[:, :, :kept]
            values[:, :, :kept] = self.values[:, :, :kept]
        self.register_buffer("keys", keys, persistent=False)
        self.register_buffer("values", values, persistent=False)


class StaticQwen2(torch.nn.Module):
    """A loaded `Qwen2ForCausalLM`'s weights plus per-layer key/value buffers of `capacity` positions."""

    def __init__(self, model, capacity: int) -> None:
        super().__init__()
        config = model.config
        kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
        if config.model_type != "qwen2" or kinds != {"full_attention"}:
            raise ValueError(f"the static Qwen2 step runs Qwen2 with full attention only, "
                             f"not {config.model_type} with {sorted(kinds)}")
        rope = getattr(config, "rope_parameters", None) or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"the static Qwen2 step has plain rotary embeddings only, not {rope['rope_type']!r}")
        self.hf = model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.register_buffer("inv_freq", model.model.rotary_emb.inv_freq.detach().clone(), persistent=False)
        self.layers = torch.nn.ModuleList(Layer(layer) for layer in model.model.layers)
        self.capacity = 0
        self.allocate(capacity)

    def allocate(self, capacity: int) -> None:
        """(Re)allocate the key/value buffers, keeping the positions both sizes hold."""
        for layer in self.layers:
            layer.allocate((1, self.kv_heads, capacity, self.head_dim), min(capacity, self.capacity))
        self.capacity = capacity

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, attend: int,
                logits_for: int | None = None) -> torch.Tensor:
        """Logits of `ids` (n,) placed at `positions` (n,), attending over cache positions [0, attend):
        for the last `logits_for` rows (default all), in the weights' dtype.

        Their keys and values are written first, so `attend` must cover the last position.
        """
        hf = self.hf.model
        x = F.embedding(ids, hf.embed_tokens.weight)
        cos, sin = self._rotary(positions, x.dtype)
        key_positions = torch.arange(attend, device=positions.device)
        allowed = key_positions[None, :] <= positions[:, None]  # causal over the attended part only
        for layer, hf_layer in zip(self.layers, hf.layers):
            x = x + self._attention(layer, hf_layer.self_attn, rms_norm(x, hf_layer.input_layernorm),
                                    cos, sin, positions, allowed)
            gate, up = F.linear(rms_norm(x, hf_layer.post_attention_layernorm), layer.gate_up_weight).chunk(2, dim=-1)
            x = x + hf_layer.mlp.down_proj(F.silu(gate) * up)
        if logits_for is not None:
            x = x[-logits_for:]  # a prompt chunk needs its last row's logits, not a vocabulary per row
        return self.hf.lm_head(rms_norm(x, hf.norm))

    def _rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin per row, computed in float32 from the positions as Hugging Face does."""
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def _attention(self, layer: Layer, attn: torch.nn.Module, x: torch.Tensor, cos: torch.Tensor,
                   sin: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        rows, heads, kv_heads = x.shape[0], self.heads, self.kv_heads
        qkv = F.linear(x, layer.qkv_weight, layer.qkv_bias).view(rows, heads + 2 * kv_heads, self.head_dim)
        # Queries and keys rotate together: one kernel, not one each.
        qk = rotate(qkv[:, :heads + kv_heads].transpose(0, 1), cos, sin)
        q, k, v = qk[:heads], qk[heads:], qkv[:, heads + kv_heads:].transpose(0, 1)
        layer.keys[:, :, positions] = k[None]  # in place, by position (index_put_, which inductor keeps in place)
        layer.values[:, :, positions] = v[None]
        attend = allowed.shape[-1]
        out = F.scaled_dot_product_attention(q[None], layer.keys[:, :, :attend], layer.values[:, :, :attend],
                                             attn_mask=allowed, scale=attn.scaling, enable_gqa=True)
        return attn.o_proj(out[0].transpose(0, 1).reshape(rows, heads * self.head_dim))
