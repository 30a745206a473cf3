"""Small in-memory tokenizers with each FIM family's special tokens (no network).

A byte-level BPE (Qwen, StarCoder, DeepSeek-Coder are byte-level) or a Metaspace BPE
(CodeLlama is SentencePiece) is trained on a few code strings, the family's control
tokens are added, and the result is wrapped in ``transformers.PreTrainedTokenizerFast``.
"""

from __future__ import annotations

import functools

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

CORPUS = [
    "def add(a, b):\n    return a + b\n\n\nclass Point:\n    def __init__(self, x, y):\n        self.x = x\n",
    "import os\nimport sys\n\nfor i in range(10):\n    print(i)\n",
    "function add(a, b) {\n  return a + b;\n}\nconst x = [1, 2, 3];\nconsole.log(x);\n",
    "func main() {\n\tfmt.Println(\"hello\")\n}\n",
    "fn main() {\n    let v: Vec<i32> = vec![1, 2, 3];\n    println!(\"{:?}\", v);\n}\n",
    "interface Foo { bar: string; }\nexport default function baz(): number { return 1; }\n",
]

FAMILY_TOKENS: dict[str, dict] = {
    "qwen2.5-coder": dict(
        special=["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                 "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>"],
        eos="<|endoftext|>",
    ),
    "starcoder2": dict(
        special=["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>",
                 "<repo_name>", "<file_sep>", "<filename>"],
        eos="<|endoftext|>",
    ),
    "starcoder": dict(
        special=["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<filename>"],
        eos="<|endoftext|>",
    ),
    "deepseek-coder": dict(
        special=["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜fim▁begin｜>", "<｜fim▁hole｜>",
                 "<｜fim▁end｜>", "<|EOT|>"],
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
    ),
    "codellama": dict(
        special=["<unk>", "<s>", "</s>", "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"],
        bos="<s>",
        eos="</s>",
        unk="<unk>",
        metaspace=True,
    ),
    "plain": dict(special=["<|endoftext|>"], eos="<|endoftext|>"),
}


@functools.cache
def make_tokenizer(family: str, *, fim_tokens_special: bool = True) -> PreTrainedTokenizerFast:
    """A tiny trained tokenizer carrying ``family``'s control tokens.

    ``fim_tokens_special=False`` adds the FIM tokens as ordinary added tokens (as some
    converted checkpoints do), which ``split_special_tokens`` alone does not protect.
    """
    spec = FAMILY_TOKENS[family]
    if spec.get("metaspace"):
        tok = Tokenizer(models.BPE(unk_token=spec.get("unk"), byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        alphabet = sorted(set("".join(CORPUS).replace(" ", "▁")) | {"▁"})
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=spec["special"], initial_alphabet=alphabet)
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=600, special_tokens=spec["special"][:1], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=spec.get("bos"),
        eos_token=spec.get("eos"),
        unk_token=spec.get("unk"),
    )
    extra = [t for t in spec["special"] if t not in (spec.get("bos"), spec.get("eos"), spec.get("unk"))]
    if fim_tokens_special:
        wrapped.add_special_tokens({"additional_special_tokens": extra})
    else:
        wrapped.add_tokens(extra)
    return wrapped
