"""`quickdraft heads train` end to end: corpus → the verifier's reading → trained heads on disk.

Resumable at every stage: shards of the corpus reading already under `work/` are kept, and
the training checkpoint resumes when the settings are the same (`fresh=True` starts over).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

from engine.medusa.data import collect, corpus_files, load_shards, split_files, token_windows
from engine.medusa.feature_head import FeatureHead
from engine.medusa.feature_train import FeatureData, train_feature_head
from engine.medusa.heads import MedusaHeads, fingerprint
from engine.medusa.store import heads_dir, read_manifest, save_heads
from engine.medusa.train import TrainConfig, choose_vocabulary, train_heads

log = logging.getLogger(__name__)


def _progress(**kwargs):
    from tqdm.auto import tqdm

    return tqdm(disable=None, dynamic_ncols=True, **kwargs)  # bars on a terminal only


# Long: one training run's steps in order (is it done already, read the corpus, train, save), sharing
# the folder, settings and windows; split, each piece would take them all as arguments.
def fit_heads(model, tokenizer, model_name: str, *, corpus: Sequence[str | Path] = (),
              config: TrainConfig | None = None, home: Path | None = None, fresh: bool = False,
              kind: str = "medusa") -> tuple[Path, dict, bool]:
    """Train heads of `kind` ("medusa" or "feature") for `model` and save them where the engine
    finds them: (folder, manifest, trained now). Heads already trained with the same settings are
    kept unless `fresh`. For the feature head `config.num_heads` is the depth of its training chains.
    """
    config = config or TrainConfig()
    started = time.monotonic()
    torch.manual_seed(config.seed)
    folder = heads_dir(model_name, home, kind)
    work = folder / "work"
    # What the corpus reading depends on: a run that changes only the training keeps the shards.
    reading = {"corpus": [str(Path(p).resolve()) for p in corpus], "window": config.window,
               "max_tokens": config.max_tokens, "fingerprint": fingerprint(model.get_output_embeddings().weight)}
    settings = {**reading, "kind": kind, "config": config.key()}
    done = read_manifest(folder)
    if not fresh and done is not None and done.get("settings") == settings:
        return folder, done, False
    if fresh or _read_json(work / "reading.json") != reading:
        shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / "reading.json").write_text(json.dumps(reading))

    files = corpus_files(corpus)
    if not files:
        raise FileNotFoundError(f"no source files found in {', '.join(map(str, corpus)) or 'the installed packages'}")
    train_files, held_files = split_files(files)
    held_budget = max(config.window, config.max_tokens // 10)
    held_windows = token_windows(tokenizer, held_files, config.window, held_budget)
    train_windows = token_windows(tokenizer, train_files, config.window, config.max_tokens - held_budget)
    if not train_windows or not held_windows:
        raise ValueError("the corpus is too small to train heads: give more source files")

    with _progress(total=len(train_windows) + len(held_windows), desc="reading the corpus", unit="window") as bar:
        train_shard = load_shards(collect(model, train_windows, work / "train", on_window=bar.update))
        held_shard = load_shards(collect(model, held_windows, work / "held-out", on_window=bar.update))

    vocab = model.get_output_embeddings().weight.shape[0]
    vocab_path = work / f"vocab-{config.vocab_size}.safetensors"
    if vocab_path.exists():
        vocab_ids = load_file(str(vocab_path))["vocab_ids"]
    else:
        vocab_ids = choose_vocabulary(train_shard, config.vocab_size, vocab)
        save_file({"vocab_ids": vocab_ids}, str(vocab_path))
    weight = model.get_output_embeddings().weight.detach()

    with _progress(total=config.steps, desc=f"training the {kind} head" + ("s" if kind == "medusa" else ""),
                   unit="step") as bar:
        def on_step(step: int, loss: float) -> None:
            bar.n = step
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            bar.refresh()

        if kind == "feature":
            head = FeatureHead(weight.shape[1], vocab_ids).attach(weight, model.get_input_embeddings().weight.detach())
            tokens = {name: torch.tensor([t for window in windows for t in window])
                      for name, windows in (("train", train_windows), ("held", held_windows))}
            result = train_feature_head(head, FeatureData.of(train_shard, tokens["train"], vocab_ids, vocab),
                                        FeatureData.of(held_shard, tokens["held"], vocab_ids, vocab), config,
                                        checkpoint=work / "checkpoint.pt", on_step=on_step)
        else:
            heads = MedusaHeads(weight.shape[1], config.num_heads, vocab_ids).attach(weight)
            result = train_heads(heads, train_shard, held_shard, vocab, config,
                                 checkpoint=work / "checkpoint.pt", on_step=on_step)

    manifest = {
        "model": model_name,
        "fingerprint": reading["fingerprint"],
        "settings": settings,
        "corpus": {"paths": reading["corpus"] or ["installed packages"], "files": len(train_files),
                   "held_out_files": len(held_files), "tokens": int(len(train_shard.window_ids)),
                   "held_out_tokens": int(len(held_shard.window_ids))},
        "steps": result.steps,
        "best_step": result.best_step,
        "config": config.key(),
        "held_out": {"before": result.before.to_json(), "after": result.after.to_json(),
                     "expected_tau": round(result.expected_tau, 3)},
        "choices": [list(choice) for choice in result.choices],
        "train_seconds": round(time.monotonic() - started, 1),
        "log": result.log,
    }
    save_heads(folder, result.heads, manifest)
    shutil.rmtree(work, ignore_errors=True)  # the corpus reading is large, and the run is complete
    return folder, read_manifest(folder), True


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
