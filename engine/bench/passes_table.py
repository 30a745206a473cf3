"""`quickdraft bench passes`'s tables: per pass, draft steps, prefill, replayed decodes, profiled
passes, ops per pass, targets (engine/bench/passes.py measures them). Each fast path measured is a
column beside eager; as text for a terminal, or as markdown (the device run's, for the docs)."""

from __future__ import annotations

from functools import partial

NAMES = {"graphs": "graphs (captured)", "bucketed": "bucketed (the captured computation, uncaptured)",
         "compiled": "the compiled step (torch.compile)", "static-eager": "the static cache, eager"}


def format_table(result: dict, markdown: bool = False) -> str:
    """Every section measured, then the targets and any errors."""
    env, modes = result["environment"], result["config"]["fast_modes"]
    table = partial(_table, markdown=markdown)
    lines = [f"device {env.get('device')} ({env.get('gpu') or env.get('cpu')}), {env.get('dtype')}, eager = Hugging "
             f"Face's forward, dynamic cache; " + "; ".join(f"{m} = {NAMES.get(m, m)}" for m in modes)]
    if result["records"]:
        lines += _timing_tables(result, modes, table)
    if result.get("profiles"):
        lines += _profile_tables(result["profiles"], modes, table)
    if result.get("ops"):
        lines += table(("ops per pass", "context", "k+1", "eager", "compiled", "compiled/eager", "compile s"),
                       [(r["model"], r["context"], r["pass_tokens"], r["eager_ops"], r["compiled_ops"],
                         f"{r['ratio']:.0%}", f"{r['compile_s']:.1f}") for r in result["ops"]])
    if result.get("targets"):
        lines += table(("target", "path", "value", "verdict"),
                       [(t["target"], t["fast_mode"], f"{t['value']:.2f}",
                         "met" if t["met"] else f"MISSED by {t['off_by']:.2f}") for t in result["targets"]])
    lines += [f"error: {error}" for error in result.get("errors", [])]
    if result.get("seconds"):
        lines.append("seconds: " + ", ".join(f"{name} {seconds:.0f}" for name, seconds in result["seconds"].items()))
    return "\n".join(lines)


def _timing_tables(result: dict, modes: list[str], table) -> list[str]:
    def per_mode(*labels):
        return tuple(f"{m} {label}" for m in modes for label in labels)

    lines = table(("model", "context", "k+1", "eager ms", *per_mode("ms", "×")),
                  _side_by_side(result["records"], ("model", "context", "pass_tokens"), modes, lambda r: {
                      "eager": [_ms(r["eager_ms"])], r["fast_mode"]: [_ms(r["fast_ms"]), f"{r['speedup']:.1f}×"]}, 2))
    decode = [r for r in result["records"] if "decode_ms" in r]
    if decode:
        lines += table(("decode attention", "context", "k+1", "sdpa ms", "decode ms", "speedup"),
                       [(r["model"], r["context"], r["pass_tokens"], _ms(r["eager_ms"]), _ms(r["decode_ms"]),
                         f"{r['decode_speedup']:.2f}×") for r in decode])
    lines += table(("draft token", "context", "eager ms", *per_mode("ms")),
                   _side_by_side(result["draft_steps"], ("model", "context"), modes,
                                 lambda d: {"eager": [_ms(d["eager_ms"])], d["fast_mode"]: [_ms(d["fast_ms"])]}))
    if result.get("draft_loops"):
        lines += table(("draft token, k-step loop", "context", "path", "k", "token by token ms", "loop ms", "×",
                        "same drafts"),
                       [(d["model"], d["context"], d["fast_mode"], d["k"], _ms(d["per_token_ms"]), _ms(d["loop_ms"]),
                         f"{d['speedup']:.1f}×", "yes" if d["same_drafts"] else "NO") for d in result["draft_loops"]])
    lines += table(("prefill", "context", "chunk", "eager ms", "eager tok/s", *per_mode("ms", "tok/s")),
                   _side_by_side(result["prefill"], ("model", "context", "chunk"), modes, lambda p: {
                       "eager": [_ms(p["eager_ms"]), f"{p['eager_tokens_per_s']:.0f}"],
                       p["fast_mode"]: [_ms(p["fast_ms"]), f"{p['fast_tokens_per_s']:.0f}"]}, 2))
    replays = [dict(r, replay=f"{r['verifier']} {r['name']}") for r in result["replays"]]
    lines += table(("replayed decode", "τ", "k", "passes", "tokens", "eager ms", *per_mode("ms")),
                   _side_by_side(replays, ("replay", "tau", "draft_tokens", "passes", "new_tokens"), modes,
                                 lambda r: {"eager": [_ms(r["eager_ms"])], r["fast_mode"]: [_ms(r["fast_ms"])]}))
    lines.append("")
    lines.append("warm-up (graph capture, compiling) s: " + ", ".join(
        f"{name} {mode} {seconds:.1f}" for name, by_mode in result["warmup_s"].items() for mode, seconds in by_mode.items()))
    lines.append("fast path used: " + ", ".join(
        f"{name} {mode}: {used}" for name, by_mode in result["fast_mode_used"].items() for mode, used in by_mode.items()))
    return lines


def _profile_tables(profiles: list[dict], modes: list[str], table) -> list[str]:
    unit = profiles[0]["unit"]
    counts = _side_by_side(profiles, ("model", "context", "pass_tokens"), modes, lambda p: {p["path"]: [p["count"]]})
    lines = table((f"{unit} per pass", "context", "k+1", "eager", *modes, *(f"{m}/eager" for m in modes)),
                  [(*row, *(_ratio(row[4 + i], row[3]) for i in range(len(modes)))) for row in counts])
    largest = max(p["pass_tokens"] for p in profiles)
    lines += table((f"top {unit} by time", "path", "k+1", unit, "ms", "the five longest (ms, calls)"),
                   [(p["model"], p["path"], p["pass_tokens"], p["count"], f"{p['ms']:.2f}",
                     "; ".join(f"{_name(t['name'])} {t['ms']:.2f} ×{t['calls']}" for t in p["top"]))
                    for p in profiles if p["pass_tokens"] == largest])
    return lines


def _ratio(count, eager) -> str:
    return f"{count / eager:.0%}" if isinstance(count, int) and isinstance(eager, int) and eager else ""


def _side_by_side(rows: list[dict], keys: tuple[str, ...], modes, cells, width: int = 1) -> list[tuple]:
    """One line per distinct `keys`: eager's cells, then each mode's `width` cells (blank where it was
    not run); `cells(row)` maps the paths a row measured to their cells."""
    merged: dict[tuple, dict[str, list]] = {}
    for row in rows:
        for path, values in cells(row).items():
            merged.setdefault(tuple(row[k] for k in keys), {})[path] = values
    return [(*key, *line.get("eager", [""]), *(c for mode in modes for c in line.get(mode, [""] * width)))
            for key, line in merged.items()]


def _name(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _table(header: tuple, rows: list[tuple], markdown: bool = False) -> list[str]:
    rows = [tuple(str(c) for c in header), *[tuple(str(c) for c in r) for r in rows]]
    if markdown:
        escaped = [tuple(c.replace("|", "\\|") for c in r) for r in rows]
        out = ["| " + " | ".join(r) + " |" for r in escaped]
        out.insert(1, "|" + "|".join("---" for _ in header) + "|")
        return ["", *out]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return ["", *out]
