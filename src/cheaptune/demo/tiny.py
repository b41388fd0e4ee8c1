"""A tiny random Llama with a tokenizer trained on the fly: the offline model for tests and smoke runs.

Real architecture (LlamaForCausalLM), real tokenizer class, real chat template; only small and random.
Building takes about a second, so tests make a fresh one per session instead of shipping weights.
"""

from __future__ import annotations

from pathlib import Path

from cheaptune.train.chat import DEFAULT_CHAT_TEMPLATE as CHAT_TEMPLATE

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<pad>"]

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Fine-tuning a language model on a small dataset teaches it one task.",
    "Translate the sentence into French. The cat sleeps on the mat.",
    "Question: what is two plus two? Answer: four.",
    "user assistant system instruction input output response prompt completion",
    "Spot instances are cheap but can be taken away; checkpoints keep the work safe.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 + - * / = ? ! , . : ; ' \" ( ) [ ] { }",
    "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ",
]


def train_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on a built-in corpus, as a transformers fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<|endoftext|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_llama_config(vocab_size: int, **overrides):
    """A 2-layer GQA Llama config (the architecture of Llama 2/3, Mistral, SmolLM2)."""
    from transformers import LlamaConfig

    kwargs = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
    )
    kwargs.update(overrides)
    return LlamaConfig(**kwargs)


def build_tiny_llama(out_dir: str | Path, seed: int = 0, **config_overrides) -> Path:
    """Write a tiny random Llama (safetensors) and its tokenizer to `out_dir`; return the folder."""
    import torch
    from transformers import LlamaForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer()
    ids = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<pad>"])
    cfg = tiny_llama_config(
        len(tokenizer), bos_token_id=ids[0], eos_token_id=ids[1], pad_token_id=ids[2], **config_overrides
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out
