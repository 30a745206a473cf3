"""`quickdraft bench passes`'s terminal tables: per pass, ops per pass, draft steps, prefill,
replayed decodes, targets (engine/bench/passes.py measures them)."""

from __future__ import annotations


def format_table(result: dict) -> str:
    """Terminal tables: per pass, ops per pass, draft steps and prefill, replayed decodes, targets."""
    env, mode = result["environment"], result["config"]["fast_mode"]
    fast = "the compiled step (torch.compile)" if mode == "compiled" else f"static cache, {mode}"
    lines = [f"device {env.get('device')} ({env.get('gpu') or env.get('cpu')}), {env.get('dtype')}, fast = {fast}"]
    if result["records"]:
        lines += _timing_tables(result)
    if result.get("ops"):
        lines += _table(("ops per pass", "context", "k+1", "eager", "compiled", "compiled/eager", "compile s"),
                        [(r["model"], r["context"], r["pass_tokens"], r["eager_ops"], r["compiled_ops"],
                          f"{r['ratio']:.0%}", f"{r['compile_s']:.1f}") for r in result["ops"]])
    for t in result.get("targets", []):
        lines.append(f"target {'met   ' if t['met'] else 'MISSED'} {t['target']}: {t['value']:.2f}")
    return "\n".join(lines)


def _timing_tables(result: dict) -> list[str]:
    lines = _table(("model", "context", "k+1", "eager ms", "fast ms", "speedup"),
                   [(r["model"], r["context"], r["pass_tokens"], _ms(r["eager_ms"]), _ms(r["fast_ms"]),
                     f"{r['speedup']:.1f}×") for r in result["records"]])
    decode = [r for r in result["records"] if "decode_ms" in r]
    if decode:
        lines += _table(("decode attention", "context", "k+1", "sdpa ms", "decode ms", "speedup"),
                        [(r["model"], r["context"], r["pass_tokens"], _ms(r["eager_ms"]), _ms(r["decode_ms"]),
                          f"{r['decode_speedup']:.2f}×") for r in decode])
    lines += _table(("draft token", "context", "eager ms", "fast ms"),
                    [(d["model"], d["context"], _ms(d["eager_ms"]), _ms(d["fast_ms"])) for d in result["draft_steps"]])
    lines += _table(("prefill", "context", "chunk", "eager tok/s", "fast tok/s"),
                    [(p["model"], p["context"], p["chunk"], f"{p['eager_tokens_per_s']:.0f}",
                      f"{p['fast_tokens_per_s']:.0f}") for p in result["prefill"]])
    lines += _table(("replayed decode", "τ", "k", "passes", "tokens", "eager ms", "fast ms"),
                    [(f"{r['verifier']} {r['name']}", r["tau"], r["draft_tokens"], r["passes"], r["new_tokens"],
                      _ms(r["eager_ms"]), _ms(r["fast_ms"])) for r in result["replays"]])
    lines.append("warm-up (graph capture, compiling) s: "
                 + ", ".join(f"{k} {v:.2f}" for k, v in result["warmup_s"].items()))
    lines.append("fast mode used: " + ", ".join(f"{k} {v}" for k, v in result["fast_mode_used"].items()))
    return lines


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _table(header: tuple, rows: list[tuple]) -> list[str]:
    rows = [tuple(str(c) for c in header), *[tuple(str(c) for c in r) for r in rows]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return ["", *out]
