"""`quickdraft doctor`: what `quickdraft serve` will run on this machine, what is missing, and
the exact next step for each missing piece. Exit status 1 when the server could not start.

It reads the settings the server starts with (machine defaults < the same flags as `serve`),
checks the models in the store (sha256 once; a stamp then remembers it, see
engine/models/registry.py), the Medusa heads, and the editor clients of this checkout.
No model is loaded.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from engine.modes import needs_draft_model
from lsp_server.workspace.settings import add_setting_flags, machine_defaults, settings_from_flags

GB = 1e9
CHECKOUT = Path(__file__).resolve().parents[2]  # lsp_server/cli/doctor.py → the repository root
NEOVIM_PLUGIN_FILES = ("init.lua", "ghost.lua", "cursor.lua", "compat.lua")
NEOVIM_MINIMUM = (0, 7)
PLAN_SETTINGS = ("verifier", "draft", "drafter", "dtype", "device", "budget_ms")  # what the plan depends on


def add_parsers(sub) -> None:
    doctor = sub.add_parser("doctor", help="what this machine will run, what is missing, and the next step")
    # The flags `serve` takes that change what it loads; unset: the machine's defaults.
    add_setting_flags(doctor, PLAN_SETTINGS)
    doctor.add_argument("--calibrate", action="store_true",
                        help="CPU: time each installed model's typing pass and prompt reading, and keep the verifier "
                             "this machine affords as its default (engine/calibration.py)")
    doctor.add_argument("--rehash", action="store_true",
                        help="hash every model file again, even where a verified stamp says nothing changed")
    doctor.set_defaults(handler=run_doctor)


@dataclass
class Check:
    what: str
    ok: bool
    detail: str
    next_step: str = ""
    fatal: bool = False  # the server cannot start without it


@dataclass
class Plan:
    """What `quickdraft serve` runs with these settings on this machine."""

    verifier: str
    draft: str  # a spec, or "none"
    drafter: str  # as asked for
    device: str
    device_detail: str
    precision: str  # "int8 weights, bfloat16" as the server's ready line says it
    budget_ms: float
    context: str  # the prompt's token budget
    problem: str = ""  # why the settings cannot run here (a CUDA device without CUDA, ...)


def settings_for(args: argparse.Namespace):
    return settings_from_flags(machine_defaults(), args)


def machine_plan(settings) -> Plan:
    """The device, precision and prompt budget `CompletionEngine.load` picks for these settings."""
    import torch

    from engine.completion import CPU_CONTEXT_BUDGET
    from engine.errors import QuickdraftError
    from engine.models import presets
    from engine.models.loading import cpu_has_fast_bf16, cpu_weights, describe_precision, parse_device, parse_precision
    from engine.text.prompt import ContextBudget

    verifier = settings.verifier or presets.PAIRS["default"]["verifier"]
    draft = settings.draft or presets.PAIRS["default"]["draft"]
    plan = Plan(verifier, draft if needs_draft_model(settings.drafter) else "none", settings.drafter,
                device="?", device_detail="", precision="?", budget_ms=settings.budget_ms, context="")
    try:
        device = parse_device(settings.device)
        dtype = settings.dtype
        if dtype in (None, "auto") and device.type == "cpu":
            dtype = cpu_weights()  # as CompletionEngine.load
        float_dtype, weights = parse_precision(dtype, device)
    except QuickdraftError as error:
        plan.problem = str(error)
        return plan
    plan.device = str(device)
    if device.type == "cuda":
        plan.device_detail = f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda})"
    else:
        from engine.bench.common import cpu_model

        fast = "fast bf16 (AVX512-BF16 or AMX)" if cpu_has_fast_bf16() else "no fast bf16: float32 activations"
        plan.device_detail = f"{cpu_model()}, {os.cpu_count()} cores, {fast}; no CUDA GPU"
    plan.precision = describe_precision(float_dtype, weights)
    budget = CPU_CONTEXT_BUDGET if device.type == "cpu" else ContextBudget()
    plan.context = (f"{budget.prefix_tokens} / {budget.suffix_tokens} / {budget.other_documents_tokens} tokens "
                    "(before the cursor / after it / other open files)")
    return plan


# ----------------------------------------------------------------------------- models


def model_check(role: str, spec: str, rehash: bool) -> Check:
    from engine.models import presets, registry, store

    spec = presets.PAIRS[spec][role] if spec in presets.PAIRS else spec
    if spec in presets.PRESETS:
        path = store.installed_path(spec)
        if path is None:
            return Check(role, False, f"{spec} is not installed (looked in {store.model_dir(spec)})",
                         f"quickdraft models pull {spec}", fatal=True)
        manifest = store.read_manifest(path)
        size = f"{manifest.get('size_bytes', 0) / GB:.2f} GB, from {(manifest.get('source') or {}).get('kind', '?')}"
        verified = None if rehash else registry.verified_at(spec)
        if verified is None:
            sys.stdout.flush()
            print(f"verifying {spec}: sha256 of every file (once; a stamp remembers it) …", file=sys.stderr, flush=True)
            [report] = registry.verify(spec)
            if not report.ok:
                return Check(role, False, f"{spec} is damaged: {'; '.join(report.problems[:-1])}",
                             f"quickdraft models pull --force {spec}", fatal=True)
            verified = "just now"
        return Check(role, True, f"{spec} ({size}); sha256 verified {verified.replace('T', ' ')[:16]}")
    path = Path(spec).expanduser()
    if path.exists():
        return Check(role, True, f"{path} (a local model: no published checksum to verify)")
    if re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", spec) and not spec.startswith("."):
        return Check(role, True, f"{spec}: a Hugging Face hub id, fetched when the server starts (needs the hub)")
    preset = presets.PAIRS["default"][role]
    return Check(role, False, f"model not found at {path.absolute()}",
                 f"pass an existing --{role}, or use the preset: quickdraft models pull {preset}", fatal=True)


def heads_check(plan: Plan) -> tuple[Check, str]:
    """Trained heads for the verifier (Medusa, feature), and the drafter that actually runs (as CompletionEngine.set_drafter)."""
    from engine.medusa.store import KINDS, heads_dir, read_manifest

    trained = {kind: manifest for kind in KINDS if (manifest := read_manifest(heads_dir(plan.verifier, kind=kind)))}
    drafter = plan.drafter
    tree = "-tree" if drafter.endswith("-tree") else ""
    if needs_draft_model(drafter) and plan.draft == "none" and not (drafter == "hybrid" and trained):
        drafter = "lookup" + tree
    if drafter in KINDS and drafter not in trained:
        drafter = "lookup"
    uses_heads = plan.drafter in KINDS or (plan.drafter == "hybrid" and plan.draft == "none")
    train = f"quickdraft heads train --model {plan.verifier}"
    if trained:
        kinds = ", ".join(f"{kind} trained {str(manifest.get('created', '?'))[:10]}" for kind, manifest in trained.items())
        return Check("Medusa heads", True, f"{kinds}; {'used by' if uses_heads else 'not used by'} drafter {plan.drafter}"), \
            drafter
    if plan.drafter in KINDS:
        flag = " --kind feature" if plan.drafter == "feature" else ""
        return Check("Medusa heads", False, f"none for {plan.verifier}: drafter {plan.drafter} falls back to prompt lookup",
                     train + flag), drafter
    return Check("Medusa heads", True, f"none (optional; drafter {plan.drafter} does not need them: {train})"), drafter


# ----------------------------------------------------------------------------- editor clients


def vscode_check(root: Path) -> Check:
    folder = root / "editor-clients" / "vscode"
    vsix = folder / "quickdraft.vsix"
    install = f"code --install-extension {vsix}"
    if not folder.is_dir():
        return Check("VS Code extension", False, f"no editor-clients/ here ({root} is not a quickdraft checkout)")
    if not vsix.is_file():
        needs = "" if shutil.which("npm") else " (needs Node.js 20 and npm)"
        return Check("VS Code extension", False, f"{vsix.relative_to(root)} is not built{needs}",
                     f"make vsix && {install}")
    sources = [*folder.glob("src/*.ts"), folder / "package.json"]
    newest = max((p.stat().st_mtime for p in sources if p.is_file()), default=0)
    if newest > vsix.stat().st_mtime:
        return Check("VS Code extension", False, f"{vsix.relative_to(root)} is older than its sources",
                     f"make vsix && {install}")
    on_path = "" if shutil.which("code") else " (`code` is not on PATH here)"
    return Check("VS Code extension", True, f"{vsix.relative_to(root)} built; install it with: {install}{on_path}")


def neovim_checks(root: Path) -> list[Check]:
    plugin = root / "editor-clients" / "neovim"
    missing = [name for name in NEOVIM_PLUGIN_FILES if not (plugin / "lua" / "quickdraft" / name).is_file()]
    checks = [Check("Neovim plugin", not missing,
                    f"{plugin} (lazy.nvim / packer: see the README)" if not missing
                    else f"{plugin}/lua/quickdraft/ lacks {', '.join(missing)}",
                    "" if not missing else "git checkout the repository again (editor-clients/neovim is part of it)")]
    found = []
    for nvim in dict.fromkeys(filter(None, [shutil.which("nvim"), str(root / ".venv" / "bin" / "nvim")])):
        version = nvim_version(nvim)
        if version is not None:
            found.append((nvim, version))
    good = [f"{'.'.join(map(str, v))} ({path})" for path, v in found if v[:2] >= NEOVIM_MINIMUM]
    if good:
        checks.append(Check("nvim", True, ", ".join(good)))
    else:
        old = ", ".join(f"{'.'.join(map(str, v))} ({path})" for path, v in found)
        checks.append(Check("nvim", False, f"no Neovim ≥ 0.7{' (found ' + old + ')' if old else ''}",
                            "sudo apt-get install neovim (Debian has 0.7.2), or any Neovim ≥ 0.7 on PATH"))
    return checks


def nvim_version(nvim: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"NVIM v(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(part) for part in match.groups()) if match else None


# ----------------------------------------------------------------------------- report


def run_doctor(args: argparse.Namespace) -> int:
    if args.calibrate:
        calibrate(settings_for(args).budget_ms)
    settings = settings_for(args)
    print("quickdraft doctor: what `quickdraft serve` runs here by default (and with the flags given)\n")
    plan = machine_plan(settings)
    server: list[Check] = []
    if plan.problem:
        server.append(Check("device", False, plan.problem, "pass --device cpu", fatal=True))
    else:
        server.append(Check("device", True, f"{plan.device}: {plan.device_detail}"))
        server.append(Check("precision", True, plan.precision))
    server.append(model_check("verifier", plan.verifier, args.rehash))
    if plan.device == "cpu":
        server.append(calibration_check(args.verifier))
    elif plan.device.startswith("cuda"):
        server.append(gpu_pair_check(args.verifier))
    if plan.draft == "none":
        server.append(Check("draft", True, f"none (drafter {plan.drafter} needs no draft model)"))
    else:
        server.append(model_check("draft", plan.draft, args.rehash))
    heads, drafter = heads_check(plan)
    runs = drafter if drafter == plan.drafter else f"{drafter} ({plan.drafter} asked for; see Medusa heads)"
    server.append(Check("drafter", True, runs))
    server.append(Check("budget", True, f"{plan.budget_ms:.0f} ms per completion"
                                        + (f"; prompt {plan.context}" if plan.context else "")))
    server.append(heads)
    editors = [vscode_check(CHECKOUT), *neovim_checks(CHECKOUT)]

    for title, checks in (("server", server), ("editor clients", editors)):
        print(title)
        width = max(len(c.what) for c in checks)
        for check in checks:
            mark = "ok " if check.ok else ("!! " if check.fatal else "-- ")
            print(f"  {mark}{check.what:<{width}}  {check.detail}")
        print()
    steps = [c for c in server + editors if c.next_step]
    if steps:
        print("next steps")
        for check in steps:
            print(f"  {check.what}: {check.next_step}")
        print()
    fatal = [c for c in server if c.fatal]
    if fatal:
        print(f"The server cannot start: {fatal[0].detail}.\nNext step: {fatal[0].next_step}")
        return 1
    print("The server can start: `quickdraft serve` (editors start it themselves).")
    return 0


def calibrate(budget_ms: float) -> None:
    """Measure the installed CPU verifiers, print what each costs, choose and keep the choice."""
    from engine.bench import calibration

    names = calibration.installed_candidates()
    if not names:
        print("calibration: no candidate model installed (quickdraft models pull qwen2.5-coder-0.5b)\n")
        return
    print(f"calibration: timing {', '.join(names)} as a CPU engine loads them (a minute or two)")
    speeds = []
    for name in names:
        speed = calibration.measure(name)
        speeds.append(speed)
        print(f"  {name} ({speed.precision}): {calibration.TYPING_PASS_TOKENS}-token pass {speed.pass_ms:.0f} ms, "
              f"1-token {speed.one_token_ms:.0f} ms, prompt {speed.prompt_tokens_per_s:.0f} tokens/s")
    choice = calibration.choose_verifier(speeds, budget_ms)
    path = calibration.save(speeds, choice, budget_ms)
    print(f"  chosen: {choice.verifier}: {choice.reason}\n  kept in {path}\n")


def calibration_check(verifier_flag: str | None) -> Check:
    from engine.bench import calibration

    record = calibration.load()
    if record is None:
        return Check("calibration", True, "none for this machine: the CPU default verifier",
                     "quickdraft doctor --calibrate (times the installed models, picks the verifier this CPU affords)")
    overridden = " (--verifier overrides it)" if verifier_flag else ""
    return Check("calibration", True, f"{record['verifier']} chosen {record['time'][:10]}{overridden}: {record['reason']}")



def gpu_pair_check(verifier_flag: str | None, gpu_memory: int | None = None) -> Check:
    """The pair this card's memory affords (engine/models/gpu_pairs.py) and why; a larger one that
    fits but is not installed is a next step, not a failure."""
    from lsp_server.workspace.settings import gpu_choice

    choice = gpu_choice(gpu_memory)
    if choice is None:
        return Check("GPU pair", True, "no CUDA card to measure: the GPU default pair")
    overridden = " (--verifier overrides it)" if verifier_flag else ""
    return Check("GPU pair", True, f"{choice.pair} = {choice.verifier} + {choice.draft}{overridden}: {choice.reason}",
                 f"quickdraft models pull {choice.larger} (a larger pair this card affords)" if choice.larger else "")
