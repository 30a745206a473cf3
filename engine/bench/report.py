"""The engine benchmark's output: the terminal table and the plots (speedup and τ per prompt)."""

from __future__ import annotations

from pathlib import Path

from engine.bench.common import fmt, machine_line, pyplot, text_table
from engine.bench.figures import BASELINE


def format_table(result: dict) -> str:
    """The terminal table: one row per mode."""
    header = ("mode", "tok/s", "× greedy", "decode tok/s", "× greedy", "τ", "accept", "tok match", "identical",
              "1st diff")
    rows = [header]
    for m in result["modes"]:
        rows.append((
            m["name"], fmt(m["tokens_per_s"], 2), fmt(m["speedup_vs_hf_greedy"], 2, "×"),
            fmt(m["decode_tokens_per_s"], 2), fmt(m["decode_speedup_vs_hf_greedy"], 2, "×"), fmt(m["tau"], 2),
            fmt(m["draft_acceptance"], 0, "%", 100), fmt(m["match_vs_hf_greedy"], 0, "%", 100),
            fmt(m["identical_completions"], 0, "%", 100), fmt(m["first_difference_median"], 0),
        ))
    lines = text_table(rows)
    for t in result.get("targets", []):
        lines.append(f"target {t['mode']} ≥ {t['target']}× {t['versus']}: median {fmt(t['median_ratio'], 2, '×')} "
                     f"(pooled {fmt(t['pooled_ratio'], 2, '×')}) → {'met' if t['met'] else 'MISSED'}; "
                     f"decode only {fmt(t['decode_median_ratio'], 2, '×')} → {'met' if t['decode_met'] else 'MISSED'}")
    env = result["environment"]
    lines.append(f"{machine_line(env)}; torch {env.get('torch')}, {env.get('dtype')}")
    return "\n".join(lines)


def write_plots(result: dict, out: Path) -> list[Path]:
    """speedup per prompt (bars per mode) and τ per prompt (lines per mode)."""
    plt = pyplot()
    if plt is None:
        return []
    modes = [m for m in result["modes"] if m["name"] != BASELINE]
    prompts = result["prompts"]
    labels = [f"{i + 1}:{p['kind']}" for i, p in enumerate(prompts)]
    env = result["environment"]
    caption = f"{env.get('cpu')}, {env.get('dtype')}; {result['config']['max_new_tokens']} new tokens"
    paths = []

    # End to end (prefill included) and decode only: on a slow CPU the cold prefill dominates the first.
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 1.2 * len(labels) + 2), 7), sharex=True)
    width = 0.8 / max(1, len(modes))
    for ax, key, what in ((axes[0], "speedups_per_prompt", "end to end"),
                          (axes[1], "decode_speedups_per_prompt", "decode only (prompt forwards excluded)")):
        for j, mode in enumerate(modes):
            values = mode[key]
            ax.bar([i + j * width for i in range(len(values))], values, width, label=mode["name"])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_ylabel("tokens/s ÷ hf-greedy")
        ax.set_title(f"Speedup per prompt over HF greedy, {what}", fontsize=9)
    axes[1].set_xticks([i + 0.4 - width / 2 for i in range(len(labels))], labels, rotation=30, ha="right")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(caption, fontsize=9)
    fig.tight_layout()
    paths.append(out / "engine-speedup.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels) + 2), 4))
    for mode in result["modes"]:
        taus = mode["tau_per_prompt"]
        ax.plot(range(len(taus)), [t if t is not None else float("nan") for t in taus], marker="o", label=mode["name"])
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel("τ (tokens per verifier pass)")
    ax.set_title(f"τ per request\n{caption}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "engine-tau.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths

