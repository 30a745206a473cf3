"""`quickdraft bench quality`: are the completions right, and does post-processing help?

For holes cut from installed code (engine.bench.quality_holes: single-line at a typed
indentation, mid-line, multi-line; several languages) each configuration completes every
hole and is judged against what the file had:

- ``exact``: the completion is the removed text (trailing blanks aside);
- ``edit_similarity``: 1 − Levenshtein distance / the longer length;
- ``stray_whitespace``: it starts with a blank where the removed text does not (the model
  writing a deeper line than the one the user is on);
- ``parses``: the file with the (non-empty) completion spliced in has no more tree-sitter error nodes
  than the original (and, for Python, still compiles if it did: tree-sitter forgives an
  unexpected indent, Python does not);
- ``empty``: nothing shown;
- ``accepted_chars``: characters of the answer that match the removed text from its start
  (what Tab-by-word would keep), averaged over every hole.

With ``--budget-ms`` the engine configurations answer as an editor would receive them while
typing: the prompt is warmed first (`CompletionEngine.warm`, as the server's warming does),
then the completion runs with the deadline, and what is verified by then is the answer.
Every engine answer's confidence is recorded (gate off), and the report adds the confidence
gate's curve (engine/bench/quality_gate.py).

Configurations: ``raw`` is the model alone, Hugging Face greedy on the same FIM prompt
(no healing), its first line for single-line holes, cut at nothing else; ``quickdraft``
is `CompletionEngine.complete` (token healing, speculative decoding, post-processing),
with no latency budget; ``noheal`` the same with token healing off, so that healing's
share of the difference shows. Each runs at every prompt budget in ``suffix_tokens``, so the
table also shows quality against suffix length.

Holes come from the languages asked for (default python, javascript, go, rust, those with
files here); ``all`` asks for every language quickdraft has a grammar for (Python, JavaScript,
TypeScript, Java, C, C++, C#, Go, Rust) and measures those with files on the machine
(engine/bench/quality_sources.py), and the report adds a table per language.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Sequence

from engine.bench.quality_gate import accepted_chars, format_gate_table, gate_curves
from engine.bench.quality_holes import DEFAULT_LANGUAGES, QUALITY_KINDS, QualityHole
from engine.text.syntax import syntax_errors

log = logging.getLogger(__name__)

CONFIGS = ("raw", "noheal", "quickdraft")
METRICS = ("exact", "edit_similarity", "stray_whitespace", "parses", "empty")


@dataclass
class QualityBenchConfig:
    holes: int = 36
    seed: int = 0
    languages: Sequence[str] = DEFAULT_LANGUAGES
    kinds: Sequence[str] = QUALITY_KINDS
    configs: Sequence[str] = CONFIGS
    suffix_tokens: Sequence[int | None] = (None,)  # None: the engine's budget for its device
    prefix_tokens: int | None = None
    cold_prefix_tokens: int | None = None  # a hole's prompt is cold: this window (0: prefix_tokens); None: the engine's
    max_new_tokens: int = 48
    budget_ms: float | None = None  # answer within this, warm caches (None: no deadline)
    progress: bool = True


# -- judging ---------------------------------------------------------------------------------


def edit_similarity(a: str, b: str) -> float:
    """1 − Levenshtein(a, b) / max(len): 1.0 for equal strings, 0.0 for nothing in common."""
    if not a and not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1.0 - previous[-1] / max(len(a), len(b))


def whole_file_errors(language: str, text: str) -> tuple[int, bool] | None:
    """(tree-sitter error nodes, whether Python compiles it) for a file; None without a grammar."""
    errors = syntax_errors(language, text)
    return None if errors is None else (errors.count, errors.compiler_row is None)


def judge(hole: QualityHole, shown: str, original: tuple[int, bool] | None, replaces: int = 0) -> dict:
    """The metrics for one completion; ``original`` is `whole_file_errors` of the file as it was.

    The item replaces ``replaces`` characters after the cursor (closers it retypes, `correct_range`):
    accepted, the file holds prefix + shown + the rest of the suffix, and what the user gained
    is ``shown`` less those retyped characters. ``parses`` judges what was shown: an empty
    answer changes nothing (None, counted under ``empty``)."""
    expected = hole.middle.rstrip()
    shown_any = bool(shown.strip())
    retyped = hole.suffix[:replaces]
    added = shown[: len(shown) - replaces] if shown.endswith(retyped) else shown
    spliced = whole_file_errors(hole.language, hole.prefix + shown + hole.suffix[replaces:]) \
        if original is not None and shown_any else None
    parses = None if spliced is None else spliced[0] <= original[0] and (spliced[1] or not original[1])
    return {
        "exact": added.rstrip() == expected and shown.endswith(retyped),
        "accepted_chars": accepted_chars(added.rstrip(), expected),
        "edit_similarity": round(edit_similarity(added.rstrip(), expected), 4),
        "stray_whitespace": shown[:1] in (" ", "\t") and expected[:1] not in (" ", "\t"),
        "parses": parses,
        "empty": not shown_any,
    }


# -- running ---------------------------------------------------------------------------------


class QualityRunner:
    """Completes holes with one loaded `CompletionEngine`, raw or through quickdraft."""

    def __init__(self, engine, config: QualityBenchConfig) -> None:
        self.engine = engine
        self.config = config

    def budget(self, suffix_tokens: int | None):
        budget = self.engine.default_budget
        if self.config.prefix_tokens is not None:
            budget = replace(budget, prefix_tokens=self.config.prefix_tokens)
        if self.config.cold_prefix_tokens is not None:
            budget = replace(budget, cold_prefix_tokens=self.config.cold_prefix_tokens)
        return budget if suffix_tokens is None else replace(budget, suffix_tokens=suffix_tokens)

    def request(self, hole: QualityHole):
        from engine.completion import CompletionRequest

        # The gate off: every answer is judged, and its confidence recorded for the gate's curve.
        return CompletionRequest(prefix=hole.prefix, suffix=hole.suffix, path=hole.path, language=hole.language,
                                 max_new_tokens=self.config.max_new_tokens, multiline=hole.multiline, min_confidence=0.0)

    def warm(self, name: str, hole: QualityHole) -> None:
        """At a budget, prefill the prompt first, as the server's warming does before the user pauses."""
        if name != "raw" and self.config.budget_ms:
            self.engine.heal = name != "noheal"
            self.engine.warm(self.request(hole))

    def quickdraft(self, hole: QualityHole, heal: bool = True) -> tuple[str, int, dict]:
        request = self.request(hole)
        if self.config.budget_ms:
            request = replace(request, budget_ms=self.config.budget_ms, received_at=time.monotonic())
        self.engine.heal = heal
        try:
            result = self.engine.complete(request)
            confidence = result.confidence.to_dict() if result.confidence is not None else None
            # Why an answer is empty at a budget: no pass in time, or a partial line that does not parse.
            details = {"confidence": confidence, "stop_reason": getattr(result.stop_reason, "value", result.stop_reason),
                       "passes": result.stats.verifier_passes, "raw": result.raw_text}
            return result.text, result.replace_after, details
        finally:
            self.engine.heal = True

    def complete(self, name: str, hole: QualityHole) -> tuple[str, int, dict]:
        """(the text shown, characters after the cursor it replaces, details: its confidence, stop
        reason, passes and raw text); the raw model replaces none and has no confidence."""
        if name == "raw":
            return self.raw(hole), 0, {"confidence": None}
        return self.quickdraft(hole, heal=name != "noheal")

    def raw(self, hole: QualityHole) -> str:
        """HF greedy on the FIM prompt quickdraft would build, without healing."""
        import torch

        from engine.text.prompt import build_prompt

        engine = self.engine
        parts = build_prompt(engine.tokenizer, engine.template, hole.prefix, hole.suffix, path=hole.path,
                             budget=engine.context_budget)
        ids = torch.tensor([parts.token_ids], device=engine.verifier.device)
        stops = {} if hole.multiline else {"stop_strings": ["\n"], "tokenizer": engine.tokenizer}
        eos = engine.stop_token_ids(engine.template.stop_tokens)
        with torch.inference_mode():
            out = engine.verifier.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                                 max_new_tokens=self.config.max_new_tokens, eos_token_id=eos,
                                                 pad_token_id=eos[0], **stops)
        text = engine.tokenizer.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=True)
        return text if hole.multiline else text.split("\n", 1)[0]

    def run(self, holes: Sequence[QualityHole], on_result: Callable[[str], None] | None = None) -> list[dict]:
        records = []
        for index, hole in enumerate(holes):
            original = whole_file_errors(hole.language, hole.text)
            results = {}
            for suffix_tokens in self.config.suffix_tokens:
                self.engine.context_budget = self.budget(suffix_tokens)
                for name in self.config.configs:
                    label = self.label(name, suffix_tokens)
                    self.warm(name, hole)
                    started = time.monotonic()
                    shown, replaces, details = self.complete(name, hole)
                    results[label] = {"shown": shown, "replaces": replaces, **details,
                                      "ms": round((time.monotonic() - started) * 1000),
                                      **judge(hole, shown, original, replaces)}
                    if on_result is not None:
                        on_result(label)
            self.engine.context_budget = self.engine.default_budget
            records.append({"hole": index, **hole.describe(), "results": results})
        return records


    def label(self, name: str, suffix_tokens: int | None) -> str:
        label = config_label(name, suffix_tokens, self.config.suffix_tokens)
        return label if name == "raw" or not self.config.budget_ms else f"{label} @{self.config.budget_ms:g}ms"


def config_label(name: str, suffix_tokens: int | None, all_suffix_tokens: Sequence[int | None]) -> str:
    return name if len(all_suffix_tokens) == 1 else f"{name} suffix={suffix_tokens or 'default'}"


# -- summary -----------------------------------------------------------------------------------


def _rates(results: Sequence[dict]) -> dict:
    shown = [r for r in results if not r["empty"]]
    parsed = [r["parses"] for r in results if r["parses"] is not None]
    return {
        "holes": len(results),
        "exact": _share(r["exact"] for r in results),
        "exact_of_shown": _share(r["exact"] for r in shown),
        "accepted_chars": round(sum(r["accepted_chars"] for r in results) / len(results), 2) if results else None,
        "edit_similarity": round(sum(r["edit_similarity"] for r in results) / len(results), 4) if results else None,
        "stray_whitespace": _share(r["stray_whitespace"] for r in shown),  # of the completions shown
        "parses": _share(parsed),
        "empty": _share(r["empty"] for r in results),
        "ms_mean": round(sum(r["ms"] for r in results) / len(results)) if results else None,
    }


def _share(flags) -> float | None:
    flags = list(flags)
    return round(sum(bool(f) for f in flags) / len(flags), 4) if flags else None


def summarize(records: Sequence[dict]) -> dict:
    """Per configuration: all holes, then per kind and per language."""
    labels = list(records[0]["results"]) if records else []
    summary = {}
    for label in labels:
        entry = {"all": _rates([r["results"][label] for r in records])}
        for key in ("kind", "language"):
            for value in sorted({r[key] for r in records}):
                entry[f"{key}={value}"] = _rates([r["results"][label] for r in records if r[key] == value])
        summary[label] = entry
    return summary


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f} %"


def format_table(result: dict) -> str:
    """Every configuration, then its rows per kind and per language; with more than one
    language, the per-language table follows (`format_language_table`)."""
    rows = ["| configuration | holes | exact | exact of shown | edit similarity | stray whitespace | parses | empty | "
            "accepted chars | mean ms |", "|---|---|---|---|---|---|---|---|---|---|"]
    for label, entry in result["summary"].items():
        for group, r in entry.items():
            name = label if group == "all" else f"  {label}, {group.replace('=', ' ')}"
            sim = "–" if r["edit_similarity"] is None else f"{r['edit_similarity']:.2f}"
            rows.append(f"| {name} | {r['holes']} | {_pct(r['exact'])} | {_pct(r['exact_of_shown'])} | {sim} | "
                        f"{_pct(r['stray_whitespace'])} | {_pct(r['parses'])} | {_pct(r['empty'])} | "
                        f"{r['accepted_chars']} | {r['ms_mean']} |")
    languages = _languages(result)
    tables = ["\n".join(rows)] + ([format_language_table(result)] if len(languages) > 1 else [])
    tables += [format_gate_table(curves, label) for label, curves in result.get("gate", {}).items()]
    return "\n\n".join(tables)


def _languages(result: dict) -> list[str]:
    entries = next(iter(result["summary"].values()), {})
    return [group.split("=", 1)[1] for group in entries if group.startswith("language=")]


def format_language_table(result: dict) -> str:
    """One row per language and configuration: exact, edit similarity, parses, empty."""
    rows = ["| language | configuration | holes | exact | exact of shown | edit similarity | parses | empty | "
            "accepted chars |", "|---|---|---|---|---|---|---|---|---|"]
    for language in _languages(result):
        for label, entry in result["summary"].items():
            r = entry[f"language={language}"]
            sim = "–" if r["edit_similarity"] is None else f"{r['edit_similarity']:.2f}"
            rows.append(f"| {language} | {label} | {r['holes']} | {_pct(r['exact'])} | {_pct(r['exact_of_shown'])} | "
                        f"{sim} | {_pct(r['parses'])} | {_pct(r['empty'])} | {r['accepted_chars']} |")
    return "\n".join(rows)


def run_quality_bench(engine, holes: Sequence[QualityHole], config: QualityBenchConfig,
                      environment: dict | None = None) -> dict:
    progress = None
    if config.progress:
        from tqdm import tqdm

        progress = tqdm(total=len(holes) * len(config.configs) * len(config.suffix_tokens), desc="quality", unit="run")
    records = QualityRunner(engine, config).run(holes, on_result=(lambda _: progress.update()) if progress else None)
    if progress is not None:
        progress.close()
    settings = asdict(config)
    settings["languages_measured"] = sorted({hole.language for hole in holes})
    settings["drafter"] = engine.drafter_mode
    settings["context_budget"] = asdict(engine.default_budget)
    return report(settings, environment or {}, records)


def report(settings: dict, environment: dict, records: list[dict]) -> dict:
    """The JSON result: settings, machine, summary, the gate's curves (engine answers only), every hole."""
    labels = [label for label in (records[0]["results"] if records else ())
              if any(r["results"][label]["confidence"] for r in records)]
    return {"config": settings, "environment": environment, "summary": summarize(records),
            "gate": {label: gate_curves(records, label) for label in labels}, "holes": records}


def merge_runs(runs: dict[str, dict]) -> dict:
    """Runs of several engines on the same holes as one result, side by side: each label
    prefixed with its engine's name."""
    first = next(iter(runs.values()))
    records = [{**hole, "results": {}} for hole in first["holes"]]
    for name, run in runs.items():
        for merged, hole in zip(records, run["holes"], strict=True):
            merged["results"].update({f"{name} {label}": r for label, r in hole["results"].items()})
    settings = {**first["config"], "engines": {name: run["config"] for name, run in runs.items()}}
    return report(settings, {name: run["environment"] for name, run in runs.items()}, records)
