"""Medusa heads: `quickdraft heads train` on a tiny model lowers held-out loss and raises τ over
untrained heads; training resumes; heads are found for their model and refused for another."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import make_drafter
from engine.errors import ModelError
from engine.medusa.choices import build_tree, expected_length, tune_choices
from engine.medusa.data import Shard
from engine.medusa.heads import MedusaHeads
from engine.medusa.store import LoadedHeads, find_heads, heads_dir, load_heads
from engine.medusa.train import TrainConfig, train_heads
from engine.models.tiny import write_tiny_model
from lsp_server.cli import main

NAMES = ["alpha", "beta", "gamma", "delta", "count", "total", "name", "value", "items", "index", "size", "width"]


def synthetic_module(rng: random.Random) -> str:
    """Regular code (accessors), so a tiny model can learn it and its future is predictable."""
    lines = ["class Thing:", "    def __init__(self):", "        self.items = []", ""]
    for name in rng.sample(NAMES, 8):
        lines += [f"    def get_{name}(self):", f"        return self._{name}", "",
                  f"    def set_{name}(self, {name}):", f"        self._{name} = {name}", ""]
    return "\n".join(lines)


def teach(model, tokenizer, texts: list[str], steps: int, seed: int = 0) -> None:
    """A few hundred steps of language modelling: the random tiny model becomes a (tiny) code model."""
    ids = [tokenizer(t)["input_ids"] for t in texts]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(seed)
    model.train()
    for _ in range(steps):
        batch = []
        for _ in range(8):
            seq = rng.choice(ids)
            start = rng.randrange(max(1, len(seq) - 96))
            batch.append(seq[start:start + 96])
        width = min(map(len, batch))
        x = torch.tensor([b[:width] for b in batch])
        loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    """(model directory, corpus folder): a tiny model taught the synthetic corpus."""
    root = tmp_path_factory.mktemp("medusa")
    directory = write_tiny_model(root / "model", seed=0)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    rng = random.Random(0)
    corpus = root / "corpus"
    corpus.mkdir()
    texts = [synthetic_module(rng) for _ in range(24)]
    for i, text in enumerate(texts):
        (corpus / f"module_{i:02d}.py").write_text(text)
    teach(model, tokenizer, texts, steps=300)
    model.save_pretrained(directory)
    return directory, corpus


def tau_with(model, heads: LoadedHeads, prompts: list[list[int]]) -> float:
    passes = emitted = 0
    for prompt in prompts:
        drafter = make_drafter("medusa", None, verifier=model, heads=heads)
        result = SpeculativeDecoder(model, drafter).generate(prompt, GenerationConfig(max_new_tokens=40))
        passes += result.stats.verifier_passes
        emitted += result.stats.emitted
    return emitted / passes


def test_heads_train_lowers_loss_and_raises_tau(taught, tmp_path, monkeypatch, capsys):
    directory, corpus = taught
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path))
    args = ["heads", "train", "--model", str(directory), "--corpus", str(corpus), "--heads", "3", "--steps", "200",
            "--max-tokens", "8000", "--vocab", "256", "--tree-nodes", "10", "--dtype", "float32"]
    assert main(args) == 0
    assert "held-out loss per head" in capsys.readouterr().out
    folder = heads_dir(str(directory), tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    before, after = manifest["held_out"]["before"], manifest["held_out"]["after"]
    assert all(a < b for a, b in zip(after["loss"], before["loss"]))
    assert manifest["steps"] == 200 and manifest["corpus"]["held_out_files"] >= 1

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    trained = find_heads(str(directory), model, tmp_path)
    assert trained is not None and trained.choices
    untrained = LoadedHeads(MedusaHeads(model.config.hidden_size, 3, trained.heads.vocab_ids).attach(model.lm_head.weight),
                            trained.manifest, folder)
    rng = random.Random(99)  # modules the corpus does not hold
    prompts = [tokenizer(synthetic_module(rng)[:200])["input_ids"] for _ in range(4)]
    tau_trained, tau_untrained = tau_with(model, trained, prompts), tau_with(model, untrained, prompts)
    print(f"tau: trained {tau_trained:.2f}, untrained {tau_untrained:.2f}")
    assert tau_trained > tau_untrained + 0.2

    # Listed, kept on a second run with the same settings, and refused for another model.
    assert main(["models", "list"]) == 0 and "Medusa heads" in capsys.readouterr().out
    assert main(args) == 0 and "already trained" in capsys.readouterr().out
    other = AutoModelForCausalLM.from_pretrained(write_tiny_model(tmp_path / "other", seed=5)).eval()
    with pytest.raises(ModelError, match="another model"):
        load_heads(folder, other)
    assert find_heads(str(directory), other, tmp_path) is None


def fake_shard(windows: int, length: int, hidden: int, vocab: int, seed: int) -> Shard:
    generator = torch.Generator().manual_seed(seed)
    n = windows * length
    probs = torch.rand(n, 4, generator=generator).softmax(dim=-1)
    return Shard(torch.randn(n, hidden, generator=generator), torch.randint(vocab, (n, 4), generator=generator),
                 probs, torch.arange(windows).repeat_interleave(length))


def assert_resumes_as_if_never_stopped(train, checkpoint: Path, steps: int) -> None:
    """`train(checkpoint, on_step)` stopped half-way and run again ends with what one run gives."""
    whole = train(None, None)

    class Interrupted(Exception):
        pass

    def stop_half_way(step, loss):
        if step == steps // 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        train(checkpoint, stop_half_way)
    resumed = train(checkpoint, None)
    assert resumed.steps == steps
    for a, b in zip(whole.heads.state_dict().values(), resumed.heads.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-5)


def test_training_resumes_where_it_stopped(tmp_path):
    lm_head = torch.randn(32, 16, generator=torch.Generator().manual_seed(0))
    train, held = fake_shard(6, 20, 16, 32, seed=1), fake_shard(2, 20, 16, 32, seed=2)
    config = TrainConfig(num_heads=2, steps=120, batch=16, vocab_size=32, tree_nodes=4)

    def run(checkpoint, on_step):
        torch.manual_seed(0)
        heads = MedusaHeads(16, 2, torch.arange(32)).attach(lm_head)
        return train_heads(heads, train, held, 32, config, checkpoint=checkpoint, on_step=on_step)

    assert_resumes_as_if_never_stopped(run, tmp_path / "checkpoint.pt", config.steps)


def test_tree_choices_follow_accuracy():
    accuracy = [[0.8, 0.1, 0.05], [0.6, 0.2, 0.1], [0.5, 0.1, 0.1]]
    choices = tune_choices(accuracy, 5)
    assert choices[0] == (0,) and (0, 0) in choices and (0, 0, 0) in choices  # 0.8, 0.48, 0.24 …
    assert all(c[:-1] in choices or len(c) == 1 for c in choices)  # every parent is in
    assert expected_length(accuracy, choices) > expected_length(accuracy, [(0,)])
    candidates = torch.tensor([[5, 6, 7], [8, 9, 10], [11, 12, 13]])
    tree = build_tree(candidates, choices, max_depth=2)
    assert max(tree.depths()) == 2 and tree.find_path([5, 8]) is not None
