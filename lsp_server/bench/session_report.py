"""The session benchmark's figures, table and plots, from its request records."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Protocol, Sequence

from engine.bench.common import fmt, machine, machine_line, pyplot, text_table
from engine.bench.quality import whole_file_errors
from engine.stats import percentile
from engine.text.syntax import language_from


class ReportedSession(Protocol):
    """What the report reads of a typing session (`SessionRun`, lsp_server/bench/session.py)."""

    name: str
    records: list  # SentRequest
    jumps: list[dict]
    typed_chars: int
    budget_ms: float
    status: dict
    files: list  # (path, text, holes) typed, in order
    final_stats: dict


def summarize(run: ReportedSession) -> dict:
    return {"name": run.name, **figures(run, run.records, run.typed_chars),
            "by_language": by_language(run)}


def figures(run: ReportedSession, records: Sequence, typed_chars: int) -> dict:
    answered = [r for r in records if r.status == "answered"]
    latencies = [r.latency_ms for r in answered if r.latency_ms is not None]
    model = [r for r in answered if (r.server or {}).get("source") == "model"]
    shown = [r for r in answered if r.shown]
    exact = [r for r in shown if r.exact_match]
    server_model = [r.server for r in model]
    passes = sum(s.get("verifier_passes", 0) for s in server_model)
    emitted = sum(s.get("emitted", 0) for s in server_model)
    drafted = sum(s.get("drafted", 0) for s in server_model)
    accepted = sum(s.get("accepted", 0) for s in server_model)

    holes = {(hole.path, index): hole for _, _, file_holes in run.files for index, hole in enumerate(file_holes)}
    parsed = [p for p in (parses(holes, r) for r in shown) if p is not None]
    return {
        "drafter": (run.final_stats or {}).get("drafter") or run.name,
        "request_count": len(records),
        "answered": len(answered),
        "cancelled": sum(r.status == "cancelled" for r in records),
        "errors": sum(r.status == "error" for r in records),
        "typed_chars": typed_chars,
        "latency_ms": spread(latencies),
        "latency_ms_model": spread([r.latency_ms for r in model]),
        "within_budget": round(sum(bool(r.within_budget) for r in answered) / len(answered), 4) if answered else None,
        "within_budget_model": round(sum(bool(r.within_budget) for r in model) / len(model), 4) if model else None,
        "budget_ms": run.budget_ms,
        "shown_rate": round(len(shown) / len(answered), 4) if answered else None,
        "exact_match_rate": round(len(exact) / len(shown), 4) if shown else None,
        "exact_match_rate_answered": round(len(exact) / len(answered), 4) if answered else None,
        "exact_match_rate_model": (round(sum(r.exact_match for r in model if r.shown) / sum(bool(r.shown) for r in model), 4)
                                   if any(r.shown for r in model) else None),
        "accepted_chars_per_request": round(sum(r.accepted_chars for r in answered) / len(answered), 2)
        if answered else None,
        "accepted_chars_per_shown": round(sum(r.accepted_chars for r in shown) / len(shown), 2) if shown else None,
        "parses_of_shown": round(sum(parsed) / len(parsed), 4) if parsed else None,
        "server_matched": sum(r.server is not None for r in answered),
        "model_requests": len(model),
        "model_answers_without_pass": without_pass(server_model),
        "typethrough_requests": sum((r.server or {}).get("source") == "typethrough" for r in answered),
        "prefill_tokens": spread([s.get("prefill_tokens", 0) for s in server_model]),
        "prompt_tokens": spread([s.get("prompt_tokens", 0) for s in server_model]),
        "emitted_per_request": round(emitted / len(model), 2) if model else None,
        "tau": round(emitted / passes, 4) if passes else None,
        "draft_acceptance": round(accepted / drafted, 4) if drafted else None,
        "stop_reasons": _count(s.get("stop_reason", "") for s in server_model),
        "withheld": _count(s["withheld"] for s in server_model if s.get("withheld")),  # the confidence gate
        "ready_requests": sum(r.trigger == "ready" for r in records),
        "kept_requests": sum((r.server or {}).get("source") == "kept" for r in answered),
        "keys_on_screen": keys_on_screen(records, typed_chars),
        **jump_figures(run),
        "load_s": round(getattr(run, "load_s", 0.0), 1),
        "server_status": run.status.get("message"),
        "server_stats": {k: v for k, v in (run.final_stats or {}).items() if k != "recent"},
    }


def without_pass(server_model: Sequence[dict]) -> float | None:
    """The share of the model's answers that came at their deadline before one verifier pass ended:
    near 1, no pass fits the budget on this machine now, and the quality figures say so, not the model."""
    return round(sum(not s.get("verifier_passes") for s in server_model) / len(server_model), 4) if server_model else None


def by_language(run: ReportedSession) -> dict:
    """The same figures per language of the files typed (latency, keys shown, exact and parses of shown)."""
    languages: dict[str, list] = {}
    for _, _, holes in run.files:
        for hole in holes:
            languages.setdefault(language_from(None, hole.path) or "other", []).append(hole)
    result = {}
    for language, holes in languages.items():
        paths = {h.path for h in holes}
        records = [r for r in run.records if r.file in paths]
        typed = sum(len(h.middle) for h in holes)
        result[language] = {k: v for k, v in figures(run, records, typed).items() if k in LANGUAGE_FIGURES}
    return result


LANGUAGE_FIGURES = ("typed_chars", "answered", "latency_ms", "latency_ms_model", "within_budget", "shown_rate",
                    "exact_match_rate", "parses_of_shown", "accepted_chars_per_request", "keys_on_screen")


def parses(holes: dict, record) -> bool | None:
    """Whether the file, with the shown completion taken, has no more syntax errors (tree-sitter's,
    and Python's compiler for Python) than it has either as typed so far or after the user's own
    next keys, as many as were shown: a ghost text that opens a block the user is opening too
    parses; one that breaks what the user writes does not. None without a grammar."""
    hole = holes.get((record.file, record.hole))
    if hole is None:
        return None
    typed = hole.prefix + hole.middle[: record.typed]
    own = hole.middle[record.typed: record.typed + len(record.shown)]
    language = language_from(None, hole.path)
    before, truth = _errors(language, typed + hole.suffix), _errors(language, typed + own + hole.suffix)
    after = _errors(language, typed + record.shown + hole.suffix[record.replace_chars:])
    if before is None or truth is None or after is None:
        return None
    return after[0] <= max(before[0], truth[0]) and (after[1] or not (before[1] or truth[1]))


# The file as typed so far recurs for every answer at that key: parse it once.
_errors = functools.lru_cache(maxsize=256)(whole_file_errors)


def keys_on_screen(records, typed_chars: int) -> float | None:
    """Of the keys the user typed, the share the ghost text on screen had right: the last answer
    before each key (typed through, followed or the model's) showed text starting with it."""
    last: dict[tuple, object] = {}
    for r in records:
        if r.status == "answered":
            last[(r.file, r.hole, r.typed)] = r
    right = sum(bool(r.shown) and bool(r.expected) and r.shown[0] == r.expected[0] for r in last.values())
    return round(right / typed_chars, 4) if typed_chars else None


def spread(values: Sequence[float]) -> dict:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "mean": round(sum(values) / len(values), 2) if values else None,
            "max": max(values) if values else None, "n": len(values)}


def jump_figures(run: ReportedSession) -> dict:
    return {"first_ghost_text_after_jump_s": spread(first_ghost_text_after_jumps(run)), "jumps": len(run.jumps),
            "jumps_with_text_before_first_key": text_before_first_key(run)}


def first_ghost_text_after_jumps(run: ReportedSession) -> list[float]:
    """Per jump to a body, seconds until the first non-empty ghost text there (jumps that saw
    none before the user moved on are left out; `jumps` in the summary counts them all)."""
    return [round(shown - jump["jump_s"], 3) for jump in run.jumps
            if (shown := _first_shown_s(_at_jump(run, jump))) is not None]


def text_before_first_key(run: ReportedSession) -> int:
    """Jumps whose first ghost text came before the user's first key there: the answer to the
    emptied body (or to asking again on its ready notification), not to the typing after it."""
    count = 0
    for jump in run.jumps:
        records = _at_jump(run, jump)
        shown = _first_shown_s(records)
        first_key = min((r.sent_s for r in records if r.typed >= 1), default=None)
        count += shown is not None and (first_key is None or shown < first_key)
    return count


def _at_jump(run: ReportedSession, jump: dict) -> list:
    return [r for r in run.records if (r.file, r.hole) == (jump["file"], jump["hole"])]


def _first_shown_s(records: Sequence) -> float | None:
    return min((r.answered_s for r in records if r.status == "answered" and r.shown and r.answered_s is not None),
               default=None)


def summarize_editors(runs: Sequence[ReportedSession]) -> dict:
    """Latency over every editor's requests together: what one shared server gives N users."""
    answered = [r for run in runs for r in run.records if r.status == "answered"]
    model = [r for r in answered if (r.server or {}).get("source") == "model"]
    return {"editors": len(runs), "requests": sum(len(run.records) for run in runs), "answered": len(answered),
            "latency_ms": spread([r.latency_ms for r in answered if r.latency_ms is not None]),
            "latency_ms_model": spread([r.latency_ms for r in model]),
            "within_budget_model": round(sum(bool(r.within_budget) for r in model) / len(model), 4) if model else None,
            "shown_rate": round(sum(bool(r.shown) for r in answered) / len(answered), 4) if answered else None}


def _count(values) -> dict:
    counts: dict = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def environment() -> dict:
    import pygls

    return machine() | {"pygls": getattr(pygls, "__version__", None)}


def format_table(result: dict) -> str:
    header = ("session", "requests", "answered", "p50 ms", "p90 ms", "p99 ms", "max ms", "model p50", "in budget",
              "shown", "exact", "parses", "acc chars", "keys shown", "τ", "prefill", "ready", "jump→text p50/p90 s")
    rows = [header]

    for s in result["modes"]:
        lat, first = s["latency_ms"], s.get("first_ghost_text_after_jump_s") or {}
        rows.append((s["name"], str(s["request_count"]), str(s["answered"]), fmt(lat["p50"]), fmt(lat["p90"]),
                     fmt(lat["p99"]), fmt(lat["max"]), fmt(s["latency_ms_model"]["p50"]),
                     fmt(s["within_budget"], 0, "%", 100), fmt(s["shown_rate"], 0, "%", 100),
                     fmt(s["exact_match_rate"], 0, "%", 100), fmt(s.get("parses_of_shown"), 0, "%", 100),
                     fmt(s["accepted_chars_per_request"], 1),
                     fmt(s.get("keys_on_screen"), 0, "%", 100),
                     fmt(s["tau"], 2), fmt(s["prefill_tokens"]["p50"]), str(s.get("ready_requests", 0)),
                     f"{fmt(first.get('p50'), 2)}/{fmt(first.get('p90'), 2)} "
                     f"({first.get('n', 0)} of {s.get('jumps', 0)}, {s.get('jumps_with_text_before_first_key', 0)} "
                     "before a key)"))
    config = result["config"]
    typing = f"{config['typing_cps']} chars/s, debounce {config['debounce_ms']:.0f} ms"
    return "\n".join([*text_table(rows), *language_table(result["modes"]), *collector_lines(result["modes"]),
                      *verdict_lines(result["modes"]), *too_slow_lines(result["modes"]),
                      f"{machine_line(result['environment'])}; {typing}"])


# A session where at least this share of the model's answers, and this many, ran no verifier pass
# gets a warning line (the first answer after a jump may well have none: one is no sign).
PASSLESS_WARNING_SHARE = 0.5
PASSLESS_WARNING_ANSWERS = 5


def too_slow_lines(modes: Sequence[dict]) -> list[str]:
    """A warning per session whose model answers mostly ran no verifier pass by their deadline: the
    machine (busy with other work, or slow) did not fit a pass in the budget, so every figure but
    latency measures that; with the server's own reading speed where it warmed a prompt."""
    lines = []
    for s in modes:
        share = s.get("model_answers_without_pass")
        if share is None or share < PASSLESS_WARNING_SHARE or share * s["model_requests"] < PASSLESS_WARNING_ANSWERS:
            continue
        warmed = [w for w in ((s.get("server_stats") or {}).get("warming") or {}).get("recent") or []
                  if w.get("fed_tokens") and w.get("ms")]
        per_s = sum(w["fed_tokens"] for w in warmed) / sum(w["ms"] for w in warmed) * 1000 if warmed else None
        speed = f"; the server read the prompt at {per_s:.0f} tokens/s while warming" if per_s else ""
        lines.append(f"WARNING {s['name']}: {share * 100:.0f} % of the model's {s['model_requests']} answers came at "
                     f"their deadline before one verifier pass{speed}: no pass fits the {s['budget_ms']:.0f} ms budget "
                     "on this machine now (busy or slow), so shown, exact and keys shown measure the machine, not the model")
    return lines


def verdict_lines(modes: Sequence[dict]) -> list[str]:
    """Per session that showed the draft first (showDraftFirst): what the verdicts did to the text shown."""
    lines = []
    for s in modes:
        v = (s.get("server_stats") or {}).get("verdicts")
        if not v:
            continue
        seen = v["confirmed"] + v["extended"] + v["replaced"] - v["unseen"]
        per_replaced = f", {v['replaced_chars'] / v['replaced']:.1f} characters each" if v["replaced"] else ""
        lines.append(f"{s['name']}: {v['provisional']} answers shown first; verdicts: {v['confirmed']} the same, "
                     f"{v['extended']} longer, {v['replaced']} replaced ({v['replaced'] / v['provisional'] * 100:.0f} % "
                     f"of those shown{per_replaced}); {seen} came while the user was still there, {v['unseen']} after "
                     f"they typed on; {v['cancelled']} cancelled by the next request, {v['moved']} after another answer")
    return lines


def collector_lines(modes: Sequence[dict]) -> list[str]:
    """The server's full garbage collections while it served (lsp_server/workspace/gc_pauses.py): each stops it."""
    lines = []
    for s in modes:
        collector = (s.get("server_stats") or {}).get("collector")
        if collector:
            lines.append(f"{s['name']}: {collector['fullCollections']} full garbage collections while serving, "
                         f"longest {collector['longestMs']:.0f} ms")
    return lines


def language_table(modes: Sequence[dict]) -> list[str]:
    """Per language of the files typed, when there are several."""
    header = ("session", "language", "typed", "answered", "p99 ms", "model p50", "in budget", "shown", "exact",
              "parses", "acc chars", "keys shown")
    rows = [(s["name"], language, str(f["typed_chars"]), str(f["answered"]), fmt(f["latency_ms"]["p99"]),
             fmt(f["latency_ms_model"]["p50"]), fmt(f["within_budget"], 0, "%", 100), fmt(f["shown_rate"], 0, "%", 100),
             fmt(f["exact_match_rate"], 0, "%", 100), fmt(f["parses_of_shown"], 0, "%", 100),
             fmt(f["accepted_chars_per_request"], 1), fmt(f["keys_on_screen"], 0, "%", 100))
            for s in modes if len(s.get("by_language", {})) > 1 for language, f in s["by_language"].items()]
    return ["", *text_table([header, *rows])] if rows else []


def write_plots(result: dict, out: Path) -> list[Path]:
    """Latency CDF per session mode, and τ / prefill tokens per model request."""
    plt = pyplot()
    if plt is None:
        return []
    env = result["environment"]
    paths = []
    fig, ax = plt.subplots(figsize=(7, 4))
    budget = None
    for index, mode in enumerate(result["modes"]):
        mine = [r for r in result["requests"] if r["session"] == mode["name"] and r["latency_ms"] is not None]
        model = sorted(r["latency_ms"] for r in mine if (r.get("server") or {}).get("source") == "model")
        answered = sorted(r["latency_ms"] for r in mine)
        color = f"C{index}"
        # Over answered requests: cancelled ones (the user typed on) have no latency to show.
        for values, style, what in ((answered, "-", "all answered, type-through included"),
                                    (model, "--", "model runs only")):
            if values:
                ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post", color=color,
                        linestyle=style, label=f"{mode['name']}: {what} (n={len(values)})")
        budget = mode["budget_ms"]
    if budget:
        ax.axvline(budget, color="grey", linestyle="--", linewidth=0.8, label=f"budget {budget:.0f} ms")
    ax.set_xscale("log")
    ax.set_xlabel("end-to-end latency (ms, log scale)")
    ax.set_ylabel("share of answered requests")
    ax.set_ylim(0, 1.02)
    cancelled = ", ".join(f"{m['name']}: {m['cancelled']}/{m['request_count']} cancelled by typing" for m in result["modes"])
    ax.set_title(f"Inline-completion latency CDF (end to end, client side)\n{env['cpu']} ({env['cpu_cores']} cores); "
                 f"{cancelled}", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "session-latency-cdf.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for mode in result["modes"]:
        taus = [r["server"]["tau"] for r in result["requests"] if r["session"] == mode["name"]
                and r.get("server") and r["server"].get("source") == "model" and r["server"].get("verifier_passes")]
        if taus:
            ax.plot(range(1, len(taus) + 1), taus, marker=".", linestyle="-", label=mode["name"])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("model request")
    ax.set_ylabel("τ (tokens per verifier pass)")
    ax.set_title("τ per request (session)", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no model request ran a verifier pass", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    paths.append(out / "session-tau.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths

