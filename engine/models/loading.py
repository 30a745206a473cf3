"""Load a verifier or draft model: a preset name, a local HF directory, a `.gguf` file or a hub id.

Everything a user can get wrong ends in `ModelError` with the fix in the message.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch

from engine.models import hub, presets, store
from engine.errors import ModelError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

log = logging.getLogger(__name__)

Role = Literal["verifier", "draft"]

_DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class LoadedModel:
    model: "PreTrainedModel"  # eval mode, on device
    tokenizer: "PreTrainedTokenizerBase"
    name: str  # preset name or the path/spec given
    path: Path | None  # None for a hub id
    device: torch.device
    dtype: torch.dtype  # of activations, and of the weights unless quantized
    load_ms: float
    weights: str | None = None  # "int8" or "int4": linear layers hold those (engine/models/quantize.py)

    @property
    def precision(self) -> str:
        """How it computes, for logs and reports: "bfloat16", or "int4 weights, bfloat16"."""
        return describe_precision(self.dtype, self.weights)


def describe_precision(dtype: torch.dtype, weights: str | None) -> str:
    name = str(dtype).removeprefix("torch.")
    return f"{weights} weights, {name}" if weights else name


# ----------------------------------------------------------------------------- device and dtype


def default_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_has_fast_bf16() -> bool:
    # Without AMX or AVX512-BF16, CPU bf16 matmuls are emulated and slower than float32.
    return bool(_cpu_flags() & {"amx_bf16", "avx512_bf16"})


def default_dtype(device: torch.device) -> torch.dtype:
    device = torch.device(device)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16 if cpu_has_fast_bf16() else torch.float32


def parse_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[dtype.lower().removeprefix("torch.")]
    except KeyError:
        raise ModelError(f"unknown dtype {dtype!r}; use one of bf16, fp16, fp32, int8, int4 or auto") from None


WEIGHT_FORMATS = ("int8", "int4")


def cpu_weights() -> str:
    """The weights a CPU engine quantizes to unless told otherwise: 4-bit where our kernel runs
    (docs/models.md, "4-bit weights"), else int8."""
    from engine.kernels import cpu_int4

    reason = cpu_int4.why_unavailable()
    if reason is not None:
        log.info("%s: int8 weights instead", reason)
        return "int8"
    return "int4"


def parse_precision(dtype: str | torch.dtype | None, device: torch.device) -> tuple[torch.dtype, str | None]:
    """(activation dtype, quantized weights) for a --dtype value: a float dtype, "int8" or
    "int4" (those weights, the default float dtype for the rest; CPU only) or auto (a float dtype)."""
    if isinstance(dtype, str) and dtype.lower() in WEIGHT_FORMATS:
        if torch.device(device).type != "cpu":
            raise ModelError(f"{dtype.lower()} weights are for the CPU, not {device}; use bf16 there")
        return default_dtype(device), dtype.lower()
    return parse_dtype(dtype, device), None


def parse_device(device: str | torch.device | None) -> torch.device:
    if device is None or device == "auto":
        return default_device()
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise ModelError(f"unknown device {device!r}; use cpu, cuda, cuda:N or mps") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelError(f"device {device} requested but CUDA is not available here (torch {torch.__version__}, "
                         f"{'a CPU-only build' if torch.version.cuda is None else 'no GPU visible'}); use --device cpu")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ModelError(f"device {device} requested but only {torch.cuda.device_count()} CUDA device(s) are "
                         f"visible; use cuda:0 .. cuda:{torch.cuda.device_count() - 1}")
    return resolved


# ----------------------------------------------------------------------------- spec resolution


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith(("/", "./", "../", "~"))
        or spec.endswith(".gguf")
        or "\\" in spec
        or spec.count("/") > 1
    )


def resolve_model_spec(spec: str | None, role: Role = "verifier") -> str:
    """What to load for a `--verifier`/`--draft` argument: a directory, a .gguf path or a hub id.

    None or "default" → the default pair's member for `role`; a preset → its cached directory
    (an error that says how to pull it when it is missing); an existing path → itself; a hub id
    → itself (load_model decides whether the hub is reachable).
    """
    if role not in ("verifier", "draft"):
        raise ValueError(f"role must be verifier or draft, not {role!r}")
    pair = None
    if spec is None or spec in presets.PAIRS:
        pair = spec or "default"
        spec = presets.PAIRS[pair][role]
    if spec in presets.PRESETS:
        path = store.installed_path(spec)
        if path is None:
            how = f"quickdraft models pull {pair}" if pair else f"quickdraft models pull {spec}"
            raise ModelError(
                f"model {spec} is not installed (looked in {store.model_dir(spec)}); run {how}"
            )
        return str(path)
    path = Path(spec).expanduser()
    if path.exists():
        return str(path)
    if _looks_like_path(spec) or not _HUB_ID.match(spec):
        preset = presets.PAIRS["default"][role]
        raise ModelError(
            f"model not found at {path.absolute()}; pass an existing model directory or .gguf file, "
            f"or a preset ({', '.join(presets.PRESETS)}): run quickdraft models pull {preset}"
        )
    return spec  # org/name: a hub id


# ----------------------------------------------------------------------------- loading


def _locate(target: str, role: Role) -> tuple[str, Path | None, Path | None]:
    """Where the model is: (what from_pretrained reads, the local path if any, the .gguf file if any)."""
    path = Path(target)
    gguf_file: Path | None = None
    if path.exists():
        if path.is_file():
            if path.suffix != ".gguf":
                raise ModelError(f"{path} is a file but not a .gguf model; pass a model directory or a .gguf file")
            gguf_file = path
        elif not (path / "config.json").is_file():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) != 1:
                what = "no config.json and no .gguf file" if not ggufs else f"{len(ggufs)} .gguf files and no config.json"
                raise ModelError(f"{path} holds {what}; pass a Hugging Face model directory or one .gguf file")
            gguf_file = ggufs[0]
        source: str = str(gguf_file.parent if gguf_file else path)
        model_path: Path | None = gguf_file or path
    else:
        if not hub.hub_reachable():
            raise ModelError(
                f"model not found at {path}, and {target!r} cannot be fetched as a Hugging Face hub id: no hub is "
                f"reachable from here; pass a local model directory or .gguf file, or run quickdraft models pull "
                f"{presets.PAIRS['default'][role]}"
            )
        source, model_path = target, None
    return source, model_path, gguf_file


def load_model(
    spec: str | None,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
    role: Role = "verifier",
) -> LoadedModel:
    """Load a causal LM and its tokenizer, in eval mode on `device` (default: CUDA if present, else CPU)."""
    started = time.perf_counter()
    name = presets.PAIRS[spec or "default"][role] if spec is None or spec in presets.PAIRS else spec
    target = resolve_model_spec(spec, role)
    torch_device = parse_device(device)
    torch_dtype, weights = parse_precision(dtype, torch_device)
    source, model_path, gguf_file = _locate(target, role)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict = {"dtype": torch_dtype}
    if gguf_file is not None:
        from transformers import GgufConfig

        kwargs.update(gguf_file=str(gguf_file), quantization_config=GgufConfig(dequantize=True))
        log.info("loading %s (GGUF, dequantized to %s; convert once with `quickdraft models pull` for fast loads)",
                 gguf_file, torch_dtype)
    elif torch_device.type == "cuda":
        kwargs["device_map"] = str(torch_device)  # straight to the GPU, no CPU copy
    hint = _repair_hint(name, model_path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **({"gguf_file": str(gguf_file)} if gguf_file else {}))
    except Exception as error:
        raise ModelError(f"could not load the tokenizer of {model_path or target}: {_short(error)}{hint}") from error
    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
        model = model.to(torch_device).eval()
    except torch.cuda.OutOfMemoryError as error:
        raise ModelError(f"out of GPU memory loading {model_path or target} in {torch_dtype}: {_short(error)}") from error
    except Exception as error:
        raise ModelError(f"could not load the model at {model_path or target}: {_short(error)}{hint}") from error
    if weights:
        _quantize(model, weights, model_path or target)
    if torch_device.type == "cpu":
        from engine.models.cpu_attention import use_decode_attention

        use_decode_attention(model)
    load_ms = (time.perf_counter() - started) * 1000
    loaded = LoadedModel(model, tokenizer, name, model_path, torch_device, torch_dtype, load_ms, weights)
    log.info("loaded %s (%s, %s) in %.0f ms", name, loaded.precision, torch_device, load_ms)
    return loaded


def _quantize(model, weights: str, where) -> None:
    from engine.kernels.cpu_int4 import KernelUnavailable
    from engine.models.quantize import quantize_weights

    try:
        quantize_weights(model, weights)
    except KernelUnavailable as error:
        raise ModelError(f"cannot give {where} {weights} weights: {error}; use --dtype int8") from error


def _short(error: Exception) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}"


def _repair_hint(name: str, path: Path | None) -> str:
    preset = name if name in presets.PRESETS else None
    if preset is None and path is not None:
        preset = next((p for p in presets.PRESETS if store.installed_path(p) == path), None)
    if preset:
        return (f"; the cached copy looks damaged: run quickdraft models verify {preset}, "
                f"then quickdraft models pull --force {preset}")
    return "; the files may be incomplete or corrupt"


def load_pair(
    verifier: str | None,
    draft: str | None,
    *,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
) -> tuple[LoadedModel, LoadedModel]:
    """Load a verifier and a draft (None → the default pair) and check that they share a vocabulary."""
    loaded_verifier = load_model(verifier, dtype=dtype, device=device, role="verifier")
    loaded_draft = load_model(draft, dtype=dtype, device=device, role="draft")
    check_pair(loaded_verifier, loaded_draft)
    return loaded_verifier, loaded_draft


# ----------------------------------------------------------------------------- pair check


def _embedding_rows(loaded: LoadedModel) -> int:
    embeddings = loaded.model.get_input_embeddings()
    return int(embeddings.weight.shape[0]) if embeddings is not None else int(loaded.model.config.vocab_size)


def check_pair(verifier: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a verifier/draft pair that does not share a vocabulary.

    Token ids must mean the same token wherever both tokenizers define them; embedding
    matrices may be padded to different sizes (151936 vs 152064), as long as each model
    can embed every id the other's tokenizer can produce.
    """
    v_vocab = verifier.tokenizer.get_vocab()
    d_vocab = draft.tokenizer.get_vocab()
    v_by_id = {i: t for t, i in v_vocab.items()}
    d_by_id = {i: t for t, i in d_vocab.items()}
    shared = v_by_id.keys() & d_by_id.keys()
    mismatched = sorted(i for i in shared if v_by_id[i] != d_by_id[i])
    if mismatched or not shared:
        examples = ", ".join(f"id {i}: {v_by_id[i]!r} vs {d_by_id[i]!r}" for i in mismatched[:3])
        raise ModelError(
            f"draft {draft.name} does not share the vocabulary of verifier {verifier.name}: "
            f"{len(mismatched)} of {len(shared)} shared token ids differ ({examples or 'no shared ids'}); "
            f"use a draft model from the same family (same tokenizer), e.g. the default pair"
        )
    # Ids only one tokenizer has (padding entries such as [PAD151665]) must still be embeddable by both.
    v_rows, d_rows = _embedding_rows(verifier), _embedding_rows(draft)
    v_max, d_max = max(v_by_id), max(d_by_id)
    if d_rows <= v_max or v_rows <= d_max:
        raise ModelError(
            f"verifier {verifier.name} ({len(v_vocab)} tokens, {v_rows} embedding rows) and draft {draft.name} "
            f"({len(d_vocab)} tokens, {d_rows} embedding rows) do not cover each other's token ids; "
            f"use a draft model from the same family"
        )
    if v_rows != d_rows:
        # Harmless as long as drafts stay below shared_vocab_size(): padding rows are never trained.
        log.info("verifier and draft embeddings are padded differently (%d vs %d rows); compatible", v_rows, d_rows)
    if verifier.device != draft.device:
        log.warning("verifier on %s and draft on %s: every step copies tokens between devices",
                    verifier.device, draft.device)


def shared_vocab_size(verifier: LoadedModel, draft: LoadedModel) -> int:
    """Ids below this exist in both models: a drafter should mask its logits beyond it."""
    return min(_embedding_rows(verifier), _embedding_rows(draft))
