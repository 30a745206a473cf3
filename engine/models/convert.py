"""GGUF → safetensors bf16 + tokenizer files, once per pulled preset (loads take seconds after)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from engine.models import disk

if TYPE_CHECKING:
    from engine.models.presets import Preset


def save_converted(model, tokenizer, out_dir: Path) -> None:
    """Write the converted model (tests simulate a full disk here)."""
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def convert_gguf(preset: Preset, gguf: Path, out_dir: Path) -> None:
    """Dequantize the GGUF once and save it as safetensors bf16 + tokenizer files."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    with disk.progress(total=3, desc=f"convert {preset.name}", unit="step") as bar:
        bar.set_postfix_str("tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        bar.update()
        bar.set_postfix_str("dequantize weights")
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.bfloat16
        )
        eos = model.generation_config.eos_token_id
        eos_ids = list(eos) if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else [])
        vocab = tokenizer.get_vocab()
        for token in preset.extra_eos_tokens:
            if token in vocab and vocab[token] not in eos_ids:
                eos_ids.append(vocab[token])
        if eos_ids:
            model.generation_config.eos_token_id = eos_ids
        bar.update()
        bar.set_postfix_str("write safetensors")
        save_converted(model, tokenizer, out_dir)
        bar.update()
    del model

