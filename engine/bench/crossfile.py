"""`quickdraft bench crossfile`: does context from other files make completions right?

Holes from engine/bench/crossfile_holes.py — lines whose answer uses a name another module of the
package defines (``crossfile``), and lines of the same files that use none (``control``) — are
completed by `CompletionEngine.complete` (token healing, speculative decoding, post-processing;
no latency budget) under each configuration, side by side in one run:

- ``raw``: no other documents in the prompt (the CPU default today: other_documents_tokens 0);
- ``context``: the documents open beside the file, as engine/text/crossfile.py picks snippets of them
  (definitions of names near the cursor or imported, windows alike the code before the cursor),
  within ``context_tokens``;
- ``heads``: the same documents, whole from their start as far as the budget goes (what the
  prompt builder did before engine/text/crossfile.py).

Judged like `bench quality` (engine/bench/quality.py): ``exact`` and ``edit_similarity`` against
the removed text, and ``first_name``: the completion starts with the name the line goes on with
(in a cross-file hole, the other file's name) — per hole group.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

from engine.bench.crossfile_holes import CrossFileHole
from engine.bench.quality import judge, whole_file_errors

log = logging.getLogger(__name__)

CONFIGS = ("raw", "context", "heads")
_FIRST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME_CHAR = re.compile(r"[A-Za-z0-9_]")
GROUPS = ("crossfile", "control")


@dataclass
class CrossFileBenchConfig:
    holes: int = 30  # of each group
    seed: int = 0
    configs: Sequence[str] = ("raw", "context")
    context_tokens: int = 512
    max_new_tokens: int = 48
    progress: bool = True


def complete(engine, hole: CrossFileHole, name: str, config: CrossFileBenchConfig) -> tuple[str, int, int]:
    """(text shown, characters after the cursor it replaces, prompt tokens) under configuration ``name``."""
    from engine.completion import CompletionRequest

    tokens = 0 if name == "raw" else config.context_tokens
    engine.context_budget = replace(engine.default_budget, other_documents_tokens=tokens)
    engine.crossfile.enabled = name != "heads"
    engine.prompts.forget()  # every hole and configuration from a fresh prompt: no anchor carried over
    request = CompletionRequest(prefix=hole.prefix, suffix=hole.suffix, path=hole.path, language=hole.language,
                                other_documents=[] if name == "raw" else hole.documents,
                                max_new_tokens=config.max_new_tokens, multiline=False)
    try:
        result = engine.complete(request)
    finally:
        engine.crossfile.enabled = True
        engine.context_budget = engine.default_budget
    return result.text, result.replace_after, result.prompt_tokens


def run(engine, holes: Sequence[CrossFileHole], config: CrossFileBenchConfig,
        on_result: Callable[[], None] | None = None) -> list[dict]:
    records = []
    for index, hole in enumerate(holes):
        original = whole_file_errors(hole.language, hole.text)
        results = {}
        for name in config.configs:
            started = time.monotonic()
            shown, replaces, prompt_tokens = complete(engine, hole, name, config)
            verdict = judge(hole, shown, original, replaces)
            results[name] = {"shown": shown, "replaces": replaces, "prompt_tokens": prompt_tokens,
                             "ms": round((time.monotonic() - started) * 1000),
                             "exact": verdict["exact"], "edit_similarity": verdict["edit_similarity"],
                             "first_name": first_name_right(hole.middle, shown), "empty": verdict["empty"]}
            if on_result is not None:
                on_result()
        records.append({"hole": index, **hole.describe(), "results": results})
    return records


def first_name_right(middle: str, shown: str) -> bool:
    """The completion goes on with the name the line goes on with (in a cross-file hole, the other file's)."""
    name = _FIRST_NAME.match(middle)
    return bool(name) and shown.startswith(name.group(0)) and not _NAME_CHAR.match(shown[name.end():name.end() + 1])


def summarize(records: Sequence[dict], configs: Sequence[str]) -> dict:
    """Per hole group and configuration: exact, edit similarity, empty, prompt tokens, ms (means)."""
    summary = {}
    for group in GROUPS:
        rows = [r for r in records if r["group"] == group]
        summary[group] = {}
        for name in configs:
            results = [r["results"][name] for r in rows]
            n = len(results)
            summary[group][name] = {
                "holes": n,
                **{key: round(sum(float(r[key]) for r in results) / n, 4) if n else None
                   for key in ("exact", "edit_similarity", "first_name", "empty")},
                **{key: round(sum(r[key] for r in results) / n) if n else None for key in ("prompt_tokens", "ms")},
            }
    return summary


def format_table(result: dict) -> str:
    rows = ["| holes | configuration | n | exact | edit similarity | first name right | empty | prompt tokens | mean ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    for group, entries in result["summary"].items():
        for name, r in entries.items():
            if not r["holes"]:
                continue
            rows.append(f"| {group} | {name} | {r['holes']} | {100 * r['exact']:.0f} % | {r['edit_similarity']:.2f} | "
                        f"{100 * r['first_name']:.0f} % | {100 * r['empty']:.0f} % | {r['prompt_tokens']} | {r['ms']} |")
    gains = []
    for group, entries in result["summary"].items():
        raw, context = entries.get("raw"), entries.get("context")
        if raw and context and raw["holes"]:
            gains.append(f"{group}: context − raw = {100 * (context['exact'] - raw['exact']):+.1f} points exact, "
                         f"{context['edit_similarity'] - raw['edit_similarity']:+.3f} edit similarity")
    return "\n".join(rows + ([""] + gains if gains else []))


def run_crossfile_bench(engine, holes: Sequence[CrossFileHole], config: CrossFileBenchConfig,
                        environment: dict | None = None) -> dict:
    progress = None
    if config.progress:
        from tqdm import tqdm

        progress = tqdm(total=len(holes) * len(config.configs), desc="crossfile", unit="run")
    records = run(engine, holes, config, on_result=progress.update if progress else None)
    if progress is not None:
        progress.close()
    settings = asdict(config)
    settings["drafter"] = engine.drafter_mode
    settings["context_budget"] = asdict(engine.default_budget)
    return {"config": settings, "environment": environment or {}, "summary": summarize(records, config.configs),
            "holes": records}
