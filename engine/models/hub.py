"""Presets from the Hugging Face hub, when one is reachable (decided quickly, never hangs)."""

from __future__ import annotations

import functools
import logging
import os
import threading
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ModelError
from engine.models import disk, store

if TYPE_CHECKING:
    from engine.models.presets import Preset

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a Hugging Face hub answers, decided within `timeout` seconds whatever DNS does."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        return False
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    result: list[bool] = []

    def probe() -> None:
        try:
            request = urllib.request.Request(f"{endpoint}/api/models/Qwen/Qwen2.5-Coder-0.5B", method="HEAD")
            with urllib.request.urlopen(request, timeout=timeout) as response:
                result.append(response.status < 500)
        except Exception as error:  # any failure (DNS, refused, TLS, HTTP error) means: not usable
            log.debug("hub probe failed: %s", error)
            result.append(False)

    # A daemon thread bounds the wait: urllib's timeout does not cover name resolution.
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    reachable = bool(result and result[0])
    log.debug("hub %s reachable: %s", endpoint, reachable)
    return reachable



def pull_hub(preset: Preset, home: Path, started: float) -> Path:
    from huggingface_hub import snapshot_download

    assert preset.hub_repo is not None
    if preset.hub_revision is None:
        # Said, not hidden: a later push to the repository changes what this pull installs.
        log.warning("%s has no pinned revision: downloading %s as its main branch is today", preset.name, preset.hub_repo)
    disk.check_free_space(home, preset.converted_bytes, f"pulling {preset.name}")
    # A stable name (not per-pid) so that an interrupted hub download resumes.
    tmp = store.models_dir(home) / f".{preset.name}.hub-partial"
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        info = snapshot_download(
            repo_id=preset.hub_repo,
            revision=preset.hub_revision,
            local_dir=tmp,
            allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja", "tokenizer*"],
        )
        log.debug("hub snapshot in %s", info)
        disk.rmtree(tmp / ".cache")  # huggingface_hub's resume bookkeeping, not part of the model
        if not (tmp / "config.json").is_file() or not list(tmp.glob("*.safetensors")):
            raise ModelError(f"{preset.hub_repo} on the hub has no safetensors weights")
        source = {"kind": "hub", "repo": preset.hub_repo, "revision": preset.hub_revision}
        return store.commit(preset, tmp, source, started, home)
    except OSError as error:
        raise disk.disk_error(error, f"downloading {preset.hub_repo}", home, preset.converted_bytes) from None

