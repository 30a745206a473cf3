"""Tiny random Qwen2 models with a real byte-level tokenizer, for tests and offline smoke runs.

The tokenizer is a small BPE trained on a fixed code corpus and carries Qwen2.5-Coder's
special tokens, so FIM rendering, the LSP server and the editor clients run exactly as
with the real models — only the text is nonsense. Everything is seeded: the same call
gives the same model on every machine.
"""

from __future__ import annotations

from pathlib import Path

QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]

_CORPUS = '''
def add(a, b):
    """Return the sum of a and b."""
    return a + b


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()


function greet(name) {
  return `Hello, ${name}!`;
}

for (let i = 0; i < 10; i++) {
  console.log(i);
}

func main() {
	fmt.Println("hello")
}

fn main() {
    let v: Vec<i32> = (0..10).collect();
    println!("{:?}", v);
}

import os
import sys

if __name__ == "__main__":
    print(os.getcwd(), sys.argv)
'''


def build_tokenizer(vocab_size: int = 384):
    """A byte-level BPE tokenizer with Qwen2.5-Coder's special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=QWEN_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        pad_token="<|fim_pad|>",
        additional_special_tokens=QWEN_SPECIAL_TOKENS[1:],
    )


def build_model(
    vocab_size: int, *, seed: int, hidden_size: int = 64, layers: int = 2, eos_token_id: int = 0,
    initializer_range: float = 0.5,
):
    """A float32 Qwen2 causal LM with random weights drawn from `seed`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        # A wider init than the default 0.02 gives peaked logits, so argmax ties are rare
        # and greedy exactness tests compare real decisions, not float noise.
        initializer_range=initializer_range,
        eos_token_id=eos_token_id,
        bos_token_id=eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.float32).eval()
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id
    return model


def _printable(text: str) -> bool:
    return bool(text) and "\ufffd" not in text and all(c.isprintable() or c in "\n\t" for c in text)


def write_tiny_model(directory: str | Path, *, seed: int = 0, hidden_size: int = 64, layers: int = 2) -> Path:
    """Write a tiny model + tokenizer to `directory` (loadable with `from_pretrained`)."""
    import torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    model = build_model(
        len(tokenizer), seed=seed, hidden_size=hidden_size, layers=layers,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    # A random model picks any token as often as any other. Zero the output rows of special
    # tokens (its completions would end at once) and of tokens that are not printable text
    # on their own (control bytes, halves of UTF-8 characters): what it writes is then
    # nonsense an editor can show, until max_new_tokens.
    silenced = [i for i in range(len(tokenizer)) if not _printable(tokenizer.decode([i]))]
    silenced += tokenizer.convert_tokens_to_ids(QWEN_SPECIAL_TOKENS)
    with torch.no_grad():
        model.lm_head.weight[silenced] = 0.0
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
