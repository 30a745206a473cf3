"""`quickdraft generate` (continue a prompt) and `quickdraft complete` (fill in the middle at a cursor)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.errors import QuickdraftError
from engine.modes import DRAFTER_MODES, MULTILINE_POLICIES, multiline_flag


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Model and decoding flags shared by generate, complete and serve."""
    parser.add_argument("--verifier", help="preset name, model directory or .gguf file (default: the default pair)")
    parser.add_argument("--draft", help="draft model (preset, directory, .gguf) or 'none'")
    parser.add_argument("--drafter", choices=DRAFTER_MODES, default="hybrid", help="drafting mode (default: hybrid)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-draft-tokens", type=int, default=8)
    parser.add_argument("--dtype", help="int8 | int4 | bfloat16 | float16 | float32 "
                                             "(default: 4-bit weights on a CPU, or int8 without AVX2; bf16 on CUDA)")
    parser.add_argument("--device", help="cpu | cuda | cuda:N (default: cuda when available)")


def add_parsers(sub) -> None:
    generate = sub.add_parser("generate", help="continue a prompt with speculative decoding")
    add_model_arguments(generate)
    generate.add_argument("--prompt-file", required=True, help="file holding the prompt ('-' for stdin)")
    add_output_arguments(generate)
    generate.set_defaults(handler=run_generate)

    complete = sub.add_parser("complete", help="fill in the middle at a position of a file")
    add_model_arguments(complete)
    complete.add_argument("file", help="source file")
    complete.add_argument("--line", type=int, required=True, help="0-based line, as in LSP")
    complete.add_argument("--character", type=int, required=True, help="0-based character (code point) in the line")
    complete.add_argument("--multiline", choices=tuple(MULTILINE_POLICIES), default="auto")
    complete.add_argument("--budget-ms", type=float, help="stop at this latency and answer with what is verified")
    add_output_arguments(complete)
    complete.set_defaults(handler=run_complete)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--seed", type=int, help="sampling seed")
    parser.add_argument("--json", action="store_true", help='print {"text", "token_ids", "stats"} as one JSON object')


def load_engine(args: argparse.Namespace):
    from engine.completion import CompletionEngine

    return CompletionEngine.load(
        args.verifier, args.draft, drafter=args.drafter, dtype=args.dtype, device=args.device,
        max_draft_tokens=args.max_draft_tokens,
    )


def read_text(path: str) -> str:
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as error:
        raise QuickdraftError(f"cannot read {path}: {error.strerror}") from error
    if b"\x00" in data[:8192]:
        raise QuickdraftError(f"{path} looks binary (NUL bytes); give a text file")
    return data.decode("utf-8", errors="replace")


def check_limits(args: argparse.Namespace) -> None:
    if args.max_new_tokens < 1:
        raise QuickdraftError("--max-new-tokens must be at least 1")
    if args.temperature < 0:
        raise QuickdraftError("--temperature must be 0 (greedy) or positive")


def run_generate(args: argparse.Namespace) -> int:
    from engine.decoding.verify import SamplingParams

    check_limits(args)
    prompt = read_text(args.prompt_file)
    engine = load_engine(args)
    result = engine.generate(
        prompt, max_new_tokens=args.max_new_tokens,
        sampling=SamplingParams(temperature=args.temperature), seed=args.seed,
    )
    emit(args, result.text, result.token_ids, result.stats.to_dict() | {"stop_reason": result.stop_reason})
    return 0


def run_complete(args: argparse.Namespace) -> int:
    from engine.completion import CompletionRequest

    check_limits(args)
    text = read_text(args.file)
    prefix, suffix = split_at(text, args.line, args.character)
    engine = load_engine(args)
    request = CompletionRequest(
        prefix=prefix, suffix=suffix, path=str(Path(args.file).resolve()), max_new_tokens=args.max_new_tokens,
        multiline=multiline_flag(args.multiline),
        budget_ms=args.budget_ms, temperature=args.temperature, seed=args.seed,
    )
    result = engine.complete(request)
    extra = {"stop_reason": result.stop_reason, "multiline": result.multiline,
             "replace_after": result.replace_after, "raw_text": result.raw_text}
    emit(args, result.text, result.token_ids, result.stats.to_dict() | extra)
    return 0


def split_at(text: str, line: int, character: int) -> tuple[str, str]:
    """Split a document at a 0-based (line, character); out-of-range positions are an error."""
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        raise QuickdraftError(f"line {line} is outside the file (it has {len(lines)} lines, counted from 0)")
    if not 0 <= character <= len(lines[line]):
        raise QuickdraftError(f"character {character} is past the end of line {line} ({len(lines[line])} characters)")
    offset = sum(len(above) + 1 for above in lines[:line]) + character
    return text[:offset], text[offset:]


def emit(args: argparse.Namespace, text: str, token_ids: list[int], stats: dict) -> None:
    if args.json:
        print(json.dumps({"text": text, "token_ids": token_ids, "stats": stats}, ensure_ascii=False))
        return
    sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    tau, acceptance = stats["tau"], stats["acceptance"]
    print(
        f"[{stats['emitted']} tokens in {stats['decode_ms']:.0f} ms, {stats['verifier_passes']} verifier passes, "
        f"tau {tau:.2f}, draft acceptance {'-' if acceptance is None else f'{acceptance:.0%}'}, "
        f"stop: {stats['stop_reason']}]",
        file=sys.stderr,
    )
