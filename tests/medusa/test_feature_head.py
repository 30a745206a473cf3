"""The feature-level head (EAGLE-style): `quickdraft heads train --kind feature` on a tiny model
beats the untrained head on held-out files and in τ, decoding with it stays exactly greedy,
training resumes to the same head, and a broken or foreign head is never loaded."""

from __future__ import annotations

import json
import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import FeatureDrafter, MedusaDrafter, make_drafter
from engine.medusa.data import Shard
from engine.medusa.feature_head import FeatureHead
from engine.medusa.feature_train import FeatureData, train_feature_head
from engine.medusa.store import LoadedHeads, find_heads, heads_dir
from engine.medusa.train import TrainConfig
from engine.models.tiny import write_tiny_model
from lsp_server.cli import main
from support.tiny_models import random_heads
from test_medusa import assert_resumes_as_if_never_stopped, synthetic_module, taught  # noqa: F401 (taught: a fixture)


def run(model, drafter, prompt: list[int]):
    return SpeculativeDecoder(model, drafter).generate(prompt, GenerationConfig(max_new_tokens=40))


def test_the_feature_head_trains_decodes_exactly_and_raises_tau(taught, tmp_path, monkeypatch, capsys):  # noqa: F811
    directory, corpus = taught
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path))
    args = ["heads", "train", "--kind", "feature", "--model", str(directory), "--corpus", str(corpus), "--heads", "3",
            "--steps", "200", "--max-tokens", "8000", "--vocab", "256", "--dtype", "float32"]
    assert main(args) == 0
    assert "feature heads for" in capsys.readouterr().out
    folder = heads_dir(str(directory), tmp_path, kind="feature")
    manifest = json.loads((folder / "manifest.json").read_text())
    before, after = manifest["held_out"]["before"], manifest["held_out"]["after"]
    assert manifest["kind"] == "feature" and all(a < b for a, b in zip(after["loss"], before["loss"]))
    assert after["top1"][0] > before["top1"][0] and manifest["held_out"]["expected_tau"] > 1.0
    assert find_heads(str(directory), None, tmp_path) is None  # the Medusa kind is not there

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    trained = find_heads(str(directory), model, tmp_path, kind="feature")
    assert trained is not None and isinstance(trained.heads, FeatureHead)
    untrained = FeatureHead(model.config.hidden_size, trained.heads.vocab_ids).attach(
        model.lm_head.weight, model.get_input_embeddings().weight)
    rng = random.Random(99)  # modules the corpus does not hold
    prompts = [tokenizer(synthetic_module(rng)[:200])["input_ids"] for _ in range(4)]
    taus = {}
    for name, head in (("trained", trained.heads), ("untrained", untrained)):
        passes = emitted = 0
        for prompt in prompts:
            result = run(model, FeatureDrafter(model, head), prompt)
            assert result.token_ids == run(model, None, prompt).token_ids  # exactly the verifier's greedy output
            passes += result.stats.verifier_passes
            emitted += result.stats.emitted
        taus[name] = emitted / passes
    print(f"tau: {taus}")
    assert taus["trained"] > taus["untrained"] + 0.2

    # Without a draft model, hybrid takes the feature head (with lookup) over Medusa heads.
    hybrid = make_drafter("hybrid", None, verifier=model, heads=random_heads(model, seed=1), feature_head=trained)
    assert isinstance(hybrid, FeatureDrafter) and hybrid.lookup is not None
    assert isinstance(make_drafter("medusa", None, verifier=model, heads=random_heads(model, seed=1),
                                   feature_head=trained), MedusaDrafter)

    # A second run with the same settings keeps them; a truncated weights file is never loaded.
    assert main(args) == 0 and "already trained" in capsys.readouterr().out
    weights = folder / "heads.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert find_heads(str(directory), model, tmp_path, kind="feature") is None


def fake_data(windows: int, length: int, hidden: int, vocab: int, seed: int) -> FeatureData:
    generator = torch.Generator().manual_seed(seed)
    n = windows * length
    shard = Shard(torch.randn(n, hidden, generator=generator), torch.randint(vocab, (n, 4), generator=generator),
                  torch.rand(n, 4, generator=generator).softmax(dim=-1), torch.arange(windows).repeat_interleave(length))
    return FeatureData.of(shard, torch.randint(vocab, (n,), generator=generator), torch.arange(vocab), vocab)


def test_feature_training_resumes_where_it_stopped(tmp_path):
    generator = torch.Generator().manual_seed(0)
    lm_head, embedding = torch.randn(32, 16, generator=generator), torch.randn(32, 16, generator=generator)
    train, held = fake_data(6, 20, 16, 32, seed=1), fake_data(2, 20, 16, 32, seed=2)
    config = TrainConfig(num_heads=2, steps=120, batch=16, vocab_size=32)

    def run(checkpoint, on_step):
        torch.manual_seed(0)  # the head's MLP starts random
        head = FeatureHead(16, torch.arange(32)).attach(lm_head, embedding)
        return train_feature_head(head, train, held, config, checkpoint=checkpoint, on_step=on_step)

    assert_resumes_as_if_never_stopped(run, tmp_path / "checkpoint.pt", config.steps)


def test_an_untrained_feature_head_repeats_the_feature_it_was_given():
    generator = torch.Generator().manual_seed(0)
    head = FeatureHead(16, torch.arange(32)).attach(torch.randn(32, 16, generator=generator),
                                                    torch.randn(32, 16, generator=generator))
    feature = torch.randn(3, 16, generator=generator)
    assert torch.allclose(head.step(feature, torch.tensor([1, 2, 3])), feature)
    paths = head.draft(feature[0], 5, depth=3)
    assert len(paths[0]) == 3 and [len(p) for p in paths[1:]] == [1, 2, 3]  # the chain, then runners-up
    assert head.draft(feature[0], 5, depth=3, stop_below=1.0, branch_below=0.0) == [paths[0][:1]]  # unsure: one step


def test_a_head_for_another_model_is_refused(taught, tmp_path):  # noqa: F811
    directory, _ = taught
    other = AutoModelForCausalLM.from_pretrained(write_tiny_model(tmp_path / "other", seed=5)).eval()
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    head = FeatureHead(model.config.hidden_size, torch.arange(64)).attach(model.lm_head.weight,
                                                                          model.get_input_embeddings().weight)
    from engine.medusa.heads import fingerprint
    from engine.medusa.store import save_heads

    folder = heads_dir(str(directory), tmp_path, kind="feature")
    save_heads(folder, head, {"model": str(directory), "fingerprint": fingerprint(model.lm_head.weight)})
    assert isinstance(find_heads(str(directory), model, tmp_path, kind="feature"), LoadedHeads)
    assert find_heads(str(directory), other, tmp_path, kind="feature") is None
