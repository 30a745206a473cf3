"""Training data for Medusa heads: the verifier reads a code corpus once and we keep what it said.

For every position we keep the verifier's final hidden state (the heads' input) and its
next-token distribution, sparsified to its top `TEACHER_TOP` tokens (the heads' targets:
self-distillation, so the heads learn what the verifier would say, not what the file
says). Reading the corpus is the expensive part of training on a CPU, so it is written
in shards that a resumed run skips.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import torch
from safetensors.torch import load_file, save_file

from engine.text.sources import MAX_FILE_CHARS, SOURCE_SUFFIXES, default_corpus_roots, read_source, walk_sources

log = logging.getLogger(__name__)

TEACHER_TOP = 16  # verifier tokens kept per position: nearly all of its probability mass on code
MIN_FILE_BYTES = 200
HELD_OUT_EVERY = 10  # one file in ten (by a hash of its path) is held out for evaluation


def corpus_files(paths: Sequence[str | Path] = ()) -> list[Path]:
    """Source files under `paths` (files or folders); by default the installed packages' modules."""
    roots = [Path(p) for p in paths] or [default_corpus_roots()["packages"]]
    files: list[Path] = []
    for root in roots:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            suffixes = {".py"} if not paths else SOURCE_SUFFIXES
            files.extend(p for p in walk_sources(root, suffixes) if _worth_reading(p))
        else:
            raise FileNotFoundError(f"no such corpus file or folder: {root}")
    return sorted(set(files), key=_stable_key)


def _worth_reading(path: Path) -> bool:
    """Not empty, not a huge generated table."""
    try:
        return MIN_FILE_BYTES <= path.stat().st_size <= MAX_FILE_CHARS
    except OSError:
        return False


def _stable_key(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()


def is_held_out(path: Path) -> bool:
    return int(_stable_key(path)[:8], 16) % HELD_OUT_EVERY == 0


def split_files(files: Sequence[Path]) -> tuple[list[Path], list[Path]]:
    """(training files, held-out files), decided by each path alone; never an empty held-out set."""
    held = [f for f in files if is_held_out(f)]
    train = [f for f in files if not is_held_out(f)]
    if not held and len(train) > 1:
        held, train = train[-1:], train[:-1]
    return train, held


def token_windows(tokenizer, files: Iterable[Path], window: int, max_tokens: int) -> list[list[int]]:
    """Consecutive `window`-token pieces of the files (in the order given), up to `max_tokens` in all."""
    windows: list[list[int]] = []
    total = 0
    for path in files:
        text = read_source(path)
        if not text:
            continue
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        for start in range(0, len(ids) - window // 4, window):  # a short tail is not worth a window
            piece = ids[start:start + window]
            windows.append(piece)
            total += len(piece)
            if total >= max_tokens:
                return windows
    return windows


@dataclass
class Shard:
    """Positions of several windows, concatenated; `starts` marks where each window begins."""

    hidden: torch.Tensor  # [N, hidden], the verifier's dtype
    top_ids: torch.Tensor  # [N, TEACHER_TOP] int64
    top_probs: torch.Tensor  # [N, TEACHER_TOP] float32
    window_ids: torch.Tensor  # [N] int64: which window each position belongs to


@torch.inference_mode()
def read_window(model, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward: (final hidden states, teacher top ids, teacher top probabilities)."""
    device = next(model.parameters()).device
    hidden = model.get_decoder()(input_ids=torch.tensor([list(ids)], device=device)).last_hidden_state[0]
    logits = model.get_output_embeddings()(hidden).float()
    values, indices = logits.log_softmax(dim=-1).topk(TEACHER_TOP, dim=-1)
    return hidden.cpu(), indices.cpu(), values.exp().cpu()


def collect(model, windows: Sequence[Sequence[int]], folder: Path, *, shard_windows: int = 8,
            on_window: Callable[[int], None] | None = None) -> list[Path]:
    """Read every window with the verifier into shards under `folder`; shards already there are kept."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for first in range(0, len(windows), shard_windows):
        path = folder / f"shard-{first // shard_windows:05d}.safetensors"
        paths.append(path)
        batch = windows[first:first + shard_windows]
        if path.exists():
            if on_window is not None:
                on_window(len(batch))
            continue
        parts = []
        for offset, ids in enumerate(batch):
            hidden, top_ids, top_probs = read_window(model, ids)
            parts.append((hidden, top_ids, top_probs, torch.full((len(ids),), first + offset)))
            if on_window is not None:
                on_window(1)
        tensors = {name: torch.cat([part[i] for part in parts]).contiguous()
                   for i, name in enumerate(("hidden", "top_ids", "top_probs", "window_ids"))}
        tmp = path.with_suffix(".partial")
        save_file(tensors, str(tmp))
        tmp.replace(path)  # a shard is there completely or not at all
    return paths


def load_shards(paths: Sequence[Path]) -> Shard:
    tensors = [load_file(str(path)) for path in paths]
    return Shard(*(torch.cat([t[name] for t in tensors]) for name in ("hidden", "top_ids", "top_probs", "window_ids")))
