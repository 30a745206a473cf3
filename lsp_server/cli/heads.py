"""`quickdraft heads train | list | remove`: Medusa heads for a verifier, from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from engine.errors import ModelError


def add_parsers(sub) -> None:
    heads = sub.add_parser("heads", help="train, list and remove Medusa heads (drafts from the verifier itself)",
                           description="Medusa heads: small heads on the verifier's last hidden state that "
                                       "propose the next few tokens at almost no cost (drafter `medusa`, and "
                                       "`hybrid` without a draft model).")
    actions = heads.add_subparsers(dest="heads_command", required=True)

    train = actions.add_parser("train", help="train heads for a model by self-distillation on a code corpus")
    train.add_argument("--model", default="qwen2.5-coder-0.5b",
                       help="preset, model directory or .gguf (default: qwen2.5-coder-0.5b, the CPU verifier)")
    train.add_argument("--corpus", action="append", default=[], metavar="PATH",
                       help="source files or folders, e.g. your workspace (repeatable; default: the installed "
                            "packages' Python modules)")
    train.add_argument("--kind", choices=("medusa", "feature"), default="medusa",
                       help="medusa: K independent heads; feature: one EAGLE-style head run step after step (default medusa)")
    train.add_argument("--heads", type=int, default=4,
                       help="number of heads: tokens t+2 … t+K+1 (default 4); "
                            "for --kind feature, the depth of its training chains")
    train.add_argument("--steps", type=int, help="training steps (default 600; --kind feature 1500)")
    train.add_argument("--max-tokens", type=int,
                       help="corpus tokens the model reads, a tenth held out (default 48000; --kind feature 120000; "
                            "the slow part on a CPU)")
    train.add_argument("--vocab", type=int, default=8192, help="tokens the heads can propose (default 8192)")
    train.add_argument("--tree-nodes", type=int, default=16, help="nodes of the tuned token tree (default 16)")
    train.add_argument("--fresh", action="store_true", help="start over instead of resuming or keeping trained heads")
    train.add_argument("--dtype", help="bfloat16 | float32 (default: bf16 where fast, else fp32)")
    train.add_argument("--device", help="cpu | cuda (default: cuda when available)")
    train.add_argument("--json", action="store_true", help="print the manifest as JSON")
    train.set_defaults(handler=_train)

    listing = actions.add_parser("list", help="trained heads: model, corpus, steps, held-out acceptance")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_list)

    remove = actions.add_parser("remove", help="delete the heads trained for a model")
    remove.add_argument("--model", required=True)
    remove.set_defaults(handler=_remove)


def _train(args: argparse.Namespace) -> int:
    from engine.medusa.fit import fit_heads
    from engine.medusa.train import TrainConfig
    from engine.models.loading import load_model

    # The feature head learns more from more text; its defaults take ~17 min on 2 CPU cores (docs/medusa.md).
    steps, max_tokens = (1500, 120_000) if args.kind == "feature" else (600, 48_000)
    args.steps = steps if args.steps is None else args.steps
    args.max_tokens = max_tokens if args.max_tokens is None else args.max_tokens
    if min(args.heads, args.steps, args.max_tokens, args.vocab, args.tree_nodes) < 1:
        raise ModelError("--heads, --steps, --max-tokens, --vocab and --tree-nodes must be positive")
    loaded = load_model(args.model, dtype=args.dtype, device=args.device, role="verifier")
    config = TrainConfig(num_heads=args.heads, steps=args.steps, max_tokens=args.max_tokens,
                         vocab_size=args.vocab, tree_nodes=args.tree_nodes)
    try:
        folder, manifest, trained = fit_heads(loaded.model, loaded.tokenizer, loaded.name, corpus=args.corpus,
                                              config=config, fresh=args.fresh, kind=args.kind)
    except (FileNotFoundError, ValueError) as error:
        raise ModelError(str(error)) from None
    except OSError as error:  # e.g. a full disk while writing the corpus reading, a checkpoint or the heads
        where = error.filename or "the heads' files under QUICKDRAFT_HOME"
        raise ModelError(f"training stopped at {where}: {error.strerror or error}; make room (or fix its "
                         f"permissions) and run the same command again (what is complete is kept, nothing "
                         f"half-written is used)") from None
    if args.json:
        json.dump(manifest, sys.stdout, indent=2)
        print()
        return 0
    held = manifest["held_out"]
    state = f"trained in {manifest['train_seconds']:.0f} s" if trained else "already trained (--fresh to redo)"
    print(f"{args.kind} heads for {manifest['model']}: {state} — {folder}")
    print(f"  corpus: {manifest['corpus']['tokens']} tokens from {manifest['corpus']['files']} files "
          f"({manifest['corpus']['held_out_files']} held out); {manifest['steps']} steps")
    print(f"  held-out loss per head: {_floats(held['before']['loss'])} untrained → {_floats(held['after']['loss'])}")
    print(f"  held-out top-1 per head: {_floats(held['before']['top1'])} untrained → {_floats(held['after']['top1'])}")
    shape = f"the tuned {len(manifest['choices'])}-node tree" if args.kind == "medusa" else "its greedy chain"
    print(f"  expected tokens per pass with {shape}: {held['expected_tau']:.2f}")
    return 0


def _floats(values) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def _list(args: argparse.Namespace) -> int:
    from engine.medusa.store import list_heads

    found = list_heads()
    if args.json:
        json.dump(found, sys.stdout, indent=2)
        print()
        return 0
    if not found:
        print("no Medusa heads trained yet; run quickdraft heads train --model qwen2.5-coder-0.5b")
    for entry in found:
        print(heads_line(entry))
    return 0


def heads_line(entry: dict) -> str:
    held = entry.get("held_out", {})
    corpus = entry.get("corpus", {})
    return (f"{entry.get('model')}: {entry.get('num_heads')} heads, {entry.get('steps')} steps on "
            f"{corpus.get('tokens')} tokens of {', '.join(corpus.get('paths', []))}; held-out top-1 "
            f"{_floats(held.get('after', {}).get('top1', []))}, expected τ {held.get('expected_tau')} — {entry['folder']}")


def _remove(args: argparse.Namespace) -> int:
    from engine.medusa.store import remove_heads

    if not remove_heads(args.model):
        raise ModelError(f"no heads trained for {args.model}")
    print(f"heads for {args.model} removed")
    return 0
