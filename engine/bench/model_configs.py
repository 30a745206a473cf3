"""Model shapes for `quickdraft bench passes`: the exact Qwen2.5-Coder configurations, embedded.

A forward's cost depends on the shapes, not on the weights' values, so a model with random
weights and these configurations costs per pass exactly what the real one does — and needs
no download, which an isolated GPU machine cannot do. 0.5B and 1.5B are the `config.json`
files of the presets (`quickdraft models pull`, converted from GGUF, hence untied embeddings);
7B is Qwen/Qwen2.5-Coder-7B's published configuration, to show how the figures scale; 3B and 14B
are the published configurations of Qwen2.5-Coder-3B (tied embeddings) and -14B-Instruct (copies
of the base 14B's config.json disagree on rms_norm_eps, 1e-5 or 1e-6; the Instruct's is 1e-6;
a constant, it costs nothing either way). Every preset has its shape here (presets.toml's
memory_bytes is 2 bytes a parameter of it: tests/models/test_presets.py); the 3B, 7B and 14B
presets are hub-only, so on an isolated GPU these random-weight shapes are how their passes are timed.
"""

from __future__ import annotations

_QWEN25_CODER = dict(
    architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_act="silu", attention_dropout=0.0,
    bos_token_id=151643, eos_token_id=151645, pad_token_id=151643, initializer_range=0.02,
    max_position_embeddings=32768, max_window_layers=28, rms_norm_eps=9.999999974752427e-07,
    rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"}, sliding_window=None,
    use_sliding_window=False, use_cache=True, tie_word_embeddings=False,
)

QWEN_CONFIGS: dict[str, dict] = {
    "qwen2.5-coder-0.5b": dict(_QWEN25_CODER, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                               num_attention_heads=14, num_key_value_heads=2, vocab_size=151936),
    "qwen2.5-coder-1.5b": dict(_QWEN25_CODER, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                               num_attention_heads=12, num_key_value_heads=2, vocab_size=151936),
    "qwen2.5-coder-3b": dict(_QWEN25_CODER, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                             num_attention_heads=16, num_key_value_heads=2, vocab_size=151936,
                             rms_norm_eps=1e-06, tie_word_embeddings=True, max_window_layers=36),
    "qwen2.5-coder-7b": dict(_QWEN25_CODER, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                             num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                             rms_norm_eps=1e-06),
    "qwen2.5-coder-14b": dict(_QWEN25_CODER, hidden_size=5120, intermediate_size=13824, num_hidden_layers=48,
                              num_attention_heads=40, num_key_value_heads=8, vocab_size=152064,
                              rms_norm_eps=1e-06, max_window_layers=48),
}

# `--quick`: the same architecture, small enough for the CPU test suite.
_QUICK = dict(_QWEN25_CODER, bos_token_id=0, eos_token_id=1, pad_token_id=0, vocab_size=512,
              max_position_embeddings=1024, num_attention_heads=4, num_key_value_heads=2)
QUICK_CONFIGS: dict[str, dict] = {
    "quick-draft": dict(_QUICK, hidden_size=64, intermediate_size=128, num_hidden_layers=2),
    "quick-verifier": dict(_QUICK, hidden_size=128, intermediate_size=256, num_hidden_layers=3),
}

DRAFT = {"full": "qwen2.5-coder-0.5b", "quick": "quick-draft"}
VERIFIERS = {"full": ("qwen2.5-coder-1.5b", "qwen2.5-coder-7b"), "quick": ("quick-verifier",)}


def config_for(name: str) -> dict:
    try:
        return (QWEN_CONFIGS | QUICK_CONFIGS)[name]
    except KeyError:
        known = ", ".join([*QWEN_CONFIGS, *QUICK_CONFIGS])
        raise ValueError(f"unknown model shape {name!r}; choose from {known}") from None
