"""Tiny, randomly initialised models and a tokenizer trained in-process, for tests.

Nothing here touches the network or the disk: a byte-level BPE tokenizer is trained on a small
built-in corpus in milliseconds, and models are built from a config. Use them to test code that
runs on any Hugging Face decoder.
"""

from __future__ import annotations

import torch

_CORPUS = [
    "The cat sat on the mat and looked at the door.",
    "A dog runs in the park while children play football.",
    "Paris is the capital of France and a city of museums.",
    "The quick brown fox jumps over the lazy dog.",
    "Machine learning models learn patterns from data.",
    "She sells sea shells by the sea shore every summer.",
    "Rain fell on the roof all night, and the river rose.",
    "Stocks rose sharply after the central bank cut rates.",
    "He plays the piano, the guitar and a little violin.",
    "Water boils at one hundred degrees at sea level.",
] * 4

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]

# Per architecture, the config class and the fields that make a model tiny. Differences between
# architectures are data here, not code.
ARCHITECTURES = {
    "llama": ("LlamaConfig", {}),
    "qwen2": ("Qwen2Config", {"use_sliding_window": False}),
}


def tiny_tokenizer(vocab_size: int = 320):
    """A byte-level BPE tokenizer (transformers' fast tokenizer) with EOS and pad tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|pad|>", bos_token="<|im_start|>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return tokenizer


def tiny_model(
    architecture: str = "llama",
    vocab_size: int = 384,
    hidden_size: int = 64,
    layers: int = 2,
    attn_implementation: str = "sdpa",
    seed: int = 0,
) -> torch.nn.Module:
    """A randomly initialised decoder of the given architecture, in float32, in eval mode."""
    import transformers

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture={architecture!r} is not one of {sorted(ARCHITECTURES)}")
    config_name, extra = ARCHITECTURES[architecture]
    config = getattr(transformers, config_name)(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        **extra,
    )
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation)
    return model.float().eval()


def tiny_magnet(architecture: str = "llama", adapted: bool = True, **model_kwargs):
    """A :class:`magnetsdk.Magnet` around a tiny model and tokenizer.

    ``adapted=True`` gives the config of an adapted model (bidirectional, last-token pooling),
    ``False`` the defaults of an unadapted one (causal, mean pooling).
    """
    from magnetsdk.config import MagnetConfig
    from magnetsdk.magnet import Magnet

    tokenizer = tiny_tokenizer()
    model = tiny_model(architecture, **model_kwargs)
    name = f"tiny-{architecture}"
    config = MagnetConfig(base_model=name) if adapted else MagnetConfig.for_base_model(name)
    return Magnet(model, tokenizer, config, name=name)
