"""The stop rules on their own, without a model: the deadline, EOS, the order of the checks after a
pass. How they end a real decode is tests/decoding/test_decoder_stops.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine.decoding.stops import Deadline, StopReason, Stops

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Config:
    """The fields of a GenerationConfig the stops read."""

    max_new_tokens: int = 10
    eos_token_ids: list[int] = field(default_factory=lambda: [0])
    stop_strings: list[str] = field(default_factory=list)
    deadline: float | None = None
    done_at_line: None = None


def test_stop_reasons_import_without_torch():
    # The server compares stop reasons and never touches tensors.
    code = "import sys; from engine.decoding.stops import StopReason; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_a_deadline_without_an_answer_ends_the_decode():
    config = Config(deadline=time.monotonic() + 60)
    deadline = Deadline(config, None)
    assert not deadline.ends_decode(config.deadline - 1)
    assert deadline.ends_decode(config.deadline) and deadline.ends_decode(config.deadline + 1)
    config.deadline = None
    assert not deadline.ends_decode(time.monotonic() + 3600)


def test_a_deadline_with_an_answer_answers_once_and_decoding_goes_on():
    answers = []
    config = Config(deadline=time.monotonic())
    deadline = Deadline(config, lambda: answers.append(1))
    assert not deadline.ends_decode(config.deadline + 1) and not deadline.ends_decode(config.deadline + 2)
    assert answers == [1] and deadline.answered


def test_the_output_ends_with_its_first_eos():
    stops = Stops(Config(eos_token_ids=[0, 9]), None, None, lambda: None)
    assert stops.through_eos([4, 9, 5, 0]) == [4, 9]
    assert stops.through_eos([4, 5]) == [4, 5]
    assert stops.after_pass([1, 4, 9], time.monotonic()) == StopReason.EOS


def test_after_a_pass_the_limits_are_asked_in_order():
    cancel = threading.Event()
    config = Config(max_new_tokens=3, deadline=time.monotonic() + 3600)
    stops = Stops(config, None, cancel, lambda: None)
    assert stops.after_pass([5, 6], time.monotonic()) is None
    cancel.set()
    assert stops.after_pass([5, 6, 7], time.monotonic()) == StopReason.MAX_NEW_TOKENS
    assert stops.after_pass([5, 6], time.monotonic()) == StopReason.CANCELLED
    cancel.clear()
    # A pass that took 10 s with 5 s left: another like it would end late.
    config.deadline = time.monotonic() + 5
    assert stops.after_pass([5, 6], time.monotonic() - 10) == StopReason.DEADLINE
    assert stops.interrupts() is False and stops.interrupted() == StopReason.DEADLINE
