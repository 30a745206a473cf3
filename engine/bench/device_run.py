"""`quickdraft bench passes --device-run`: the GPU session's one command (issue 39), a preset of
`bench passes` (engine/bench/passes.py).

In one process, for the 0.5B (the draft model), the 1.5B and the 7B shapes, today's captured path
(the static cache replaying CUDA graphs) and the compiled step side by side, each beside eager:
passes of k+1 = 1 and 8 at 512 tokens of context, a draft token (token by token, and in the draft
loop of k = 4 and 8: one captured graph, one transfer), a cold 2,300-token prompt
(1,024 before the cursor, 256 after, 1,024 from other files), 64-token replays at the τ measured
on the CPU, and one pass of each path under torch.profiler (kernels per pass, the five that took
longest); then the issue's targets, met or missed. Compiling costs most of the run, so the
compiled step compiles two pass sizes (1 and 8) at one attended length, and the lookup replay
drafts 7 tokens (a pass of 8; its drafts cost nothing, so τ, not k, sets its passes).
`--quick` is the same on the CPU with tiny shapes: `bucketed` stands for the captured path.

The 3B and 14B verifier shapes are not in the default list: compiling is most of the run and the
run with the compiled step has not been timed on a GPU yet, so two more models (the 14B compiles
48 layers) could take it past its 8 minutes. `--verifiers qwen2.5-coder-3b,qwen2.5-coder-14b` runs
them in their own device run; `bench passes --device cuda --verifiers ... --contexts 512` times
their captured passes alone, with no compiling (docs/models.md, "Which pair a GPU runs").
"""

from __future__ import annotations

import torch

from engine.bench.pass_replays import REPLAYS, Replay
from engine.bench.pass_targets import COLD_PROMPT
from engine.bench.passes import PassesBenchConfig

REPLAYS_DEVICE = tuple(Replay(r.name, r.tau, 7, r.draft_model) if r.name == "lookup" else r for r in REPLAYS)
OUTPUT = "device-run.json"


def device_run_config(device: str, dtype: torch.dtype, *, quick: bool = False, weights: str | None = None,
                      verifiers: tuple[str, ...] | None = None, repeats: int | None = None) -> PassesBenchConfig:
    captured = "graphs" if torch.device(device).type == "cuda" else "bucketed"
    return PassesBenchConfig(
        device=device, dtype=dtype, weights=weights, quick=quick, verifiers=verifiers, preset="device-run",
        contexts=(32,) if quick else (512,), sizes=(1, 8), ops_sizes=(1, 8), compiled_buckets=(1, 8),
        repeats=repeats or (2 if quick else 20), new_tokens=32 if quick else 64,
        fast_modes=(captured, "compiled"), measure=("times", "profile"), decode_attention=False,
        prefill_contexts=(300,) if quick else (COLD_PROMPT,), prefill_repeats=1 if quick else 3,
        keep_going=True, replays=REPLAYS_DEVICE, draft_loop_ks=(4, 8),
    )
