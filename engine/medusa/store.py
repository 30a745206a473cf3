"""Trained heads on disk: `$QUICKDRAFT_HOME/heads/<model>/` with heads.safetensors and manifest.json
(Medusa heads), `heads/<model>+feature/` the same for the feature-level head.

`<model>` is the preset name, or for a model given by path a readable name plus a short
hash of the path. `work/` beside them holds the corpus reading and the checkpoint of an
unfinished run. The manifest records what the heads were trained for (the model and a
fingerprint of its LM head, which is checked at load time), on what, for how long, and
how well they did on held-out files.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from engine.errors import ModelError
from engine.models.store import quickdraft_home

if TYPE_CHECKING:  # torch is imported only to save or load heads: `models list` stays quick
    from engine.medusa.feature_head import FeatureHead
    from engine.medusa.heads import MedusaHeads

log = logging.getLogger(__name__)

WEIGHTS, MANIFEST = "heads.safetensors", "manifest.json"
KINDS = ("medusa", "feature")  # Medusa heads (engine/medusa/heads.py), the feature head (feature_head.py)


def heads_key(model_name: str) -> str:
    """A folder name for a model spec: the preset name as is, a path as `<basename>-<hash>`."""
    if re.fullmatch(r"[\w.-]+", model_name):
        return model_name
    resolved = str(Path(model_name).expanduser().resolve())
    base = re.sub(r"[^\w.-]+", "_", Path(resolved).name or "model")
    return f"{base}-{hashlib.sha256(resolved.encode()).hexdigest()[:8]}"


def heads_dir(model_name: str, home: Path | None = None, kind: str = "medusa") -> Path:
    if kind not in KINDS:
        raise ValueError(f"unknown kind of heads {kind!r}; choose one of {', '.join(KINDS)}")
    return (home or quickdraft_home()) / "heads" / (heads_key(model_name) + ("" if kind == "medusa" else "+" + kind))


def save_heads(folder: Path, heads: "MedusaHeads | FeatureHead", manifest: dict) -> Path:
    """Write weights and manifest; the manifest goes last, so its presence means complete."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)
    tensors = {name: value.detach().float().cpu().contiguous() for name, value in heads.state_dict().items()}
    tensors["vocab_ids"] = heads.vocab_ids.cpu()
    save_file(tensors, str(folder / WEIGHTS))
    manifest = {**manifest, "kind": heads.kind, "num_heads": heads.num_heads, "hidden_size": heads.hidden_size,
                "vocab_size": len(heads.vocab_ids), "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    tmp = folder / (MANIFEST + ".partial")
    tmp.write_text(json.dumps(manifest, indent=2))
    tmp.replace(folder / MANIFEST)
    return folder


def read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


@dataclass
class LoadedHeads:
    heads: "MedusaHeads | FeatureHead"
    manifest: dict
    folder: Path

    @property
    def choices(self) -> list[tuple[int, ...]]:
        """The tuned tree's choices, most probable first (by the held-out accuracy)."""
        from engine.medusa.choices import by_probability

        accuracy = self.manifest.get("held_out", {}).get("after", {}).get("accuracy")
        return by_probability([tuple(choice) for choice in self.manifest.get("choices", [])], accuracy)


def load_heads(folder: Path, model) -> LoadedHeads:
    """Heads from `folder`, attached to `model`'s LM head; refuses heads trained for another model."""
    from safetensors.torch import load_file

    from engine.medusa.feature_head import FeatureHead
    from engine.medusa.heads import MedusaHeads, fingerprint

    manifest = read_manifest(folder)
    if manifest is None:
        raise ModelError(f"no trained heads in {folder}; run quickdraft heads train --model MODEL")
    weight = model.get_output_embeddings().weight
    if manifest.get("fingerprint") != fingerprint(weight):
        raise ModelError(f"the heads in {folder} were trained for another model ({manifest.get('model')}); "
                         f"train heads for this one with quickdraft heads train")
    try:
        tensors = load_file(str(folder / WEIGHTS))
    except Exception as error:  # safetensors raises its own error for a truncated or garbled file
        raise ModelError(f"the heads in {folder} cannot be read ({error}); train them again with "
                         f"quickdraft heads train --fresh") from None
    if manifest.get("kind", "medusa") == "feature":
        heads = FeatureHead(manifest["hidden_size"], tensors.pop("vocab_ids"), tensors["up.weight"].shape[0])
    else:
        heads = MedusaHeads(manifest["hidden_size"], manifest["num_heads"], tensors.pop("vocab_ids"))
    heads.load_state_dict({**tensors, "vocab_ids": heads.vocab_ids})
    heads = heads.to(device=weight.device, dtype=weight.dtype)
    if heads.kind == "feature":
        heads.attach(weight, model.get_input_embeddings().weight)
    else:
        heads.attach(weight)
    return LoadedHeads(heads.eval(), manifest, folder)


def find_heads(model_name: str, model, home: Path | None = None, kind: str = "medusa") -> LoadedHeads | None:
    """The trained heads of `kind` for `model_name`, if any (a mismatched or broken set is skipped with a warning)."""
    folder = heads_dir(model_name, home, kind)
    if read_manifest(folder) is None:
        return None
    try:
        return load_heads(folder, model)
    except (ModelError, OSError, KeyError, RuntimeError) as error:
        log.warning("ignoring the trained heads in %s: %s", folder, error)
        return None


def list_heads(home: Path | None = None) -> list[dict]:
    """Every complete set of heads: its folder and manifest."""
    root = (home or quickdraft_home()) / "heads"
    found = []
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        manifest = read_manifest(folder)
        if manifest is not None:
            found.append({"folder": str(folder), **manifest})
    return found


def remove_heads(model_name: str, home: Path | None = None) -> bool:
    """Remove every kind of heads trained for `model_name`; False when there were none."""
    folders = [folder for kind in KINDS if (folder := heads_dir(model_name, home, kind)).exists()]
    for folder in folders:
        shutil.rmtree(folder)
    return bool(folders)
