"""``Magnet``: one loaded model, served as an encoder, an infiller and a generator.

One copy of the weights lives on one device. Every call takes the object's lock, so one
``Magnet`` can be shared by several threads (calls run one at a time; tokenizers and key/value
caches are not safe to share mid-call).

This file is longer than the ~400 lines other modules keep to because it is the public facade:
each method checks its arguments, states its contract and takes the lock, and then calls the module
that does the work (encoding, infilling, generation, answering, alignment, model_dir).
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
import torch

from magnetsdk.alignment import PrincipalShift, ShiftMode, key_tokens
from magnetsdk.answering import Answer, AnswerSettings, answer_from_hits, check_question
from magnetsdk.attention import AttentionMode
from magnetsdk.checks import (
    check_line_breaks,
    check_max_length,
    check_temperature,
    check_texts,
    truncate_prompts,
)
from magnetsdk.config import MagnetConfig, Pooling, choice
from magnetsdk.context_cache import ContextCache
from magnetsdk.copies import (
    DEFAULT_CUT_UNCLOSED,
    DEFAULT_INFILL_TOKENS,
    DEFAULT_NO_REPEAT_NGRAM,
    DEFAULT_RESAMPLE_COPIES,
    DEFAULT_RESAMPLE_RANKING,
    DEFAULT_WHOLE_SENTENCES,
    check_resample_copies,
    check_resample_ranking,
    copies_segments,
)
from magnetsdk.decoding import Sampling, check_decoding, check_run_length
from magnetsdk.encoding import embed, fit_embeddings, pad_id, prepare, special_prefix
from magnetsdk.forward import lm_head
from magnetsdk.generation import GenerationSettings, generate_texts
from magnetsdk.infilling import (
    DEFAULT_GAP_MARKER,
    InfillResult,
    decode_spans,
    line_break_ids,
    may_break_lines,
    move_spaces_into_gaps,
    split_gaps,
    without_opening_space,
)
from magnetsdk.layout import InfillLayout, LayoutTokens, infill_layout, resolve_layout_tokens
from magnetsdk.loading import (
    ADAPTER_CONFIG,
    Resolved,
    adapter_sha256,
    load_model_and_tokenizer,
    pick_device,
    pick_dtype,
    resolve,
)
from magnetsdk.ranking import best_fill, candidate_plan, candidate_sampling, sample_settings
from magnetsdk.unclosed import between_sentences, sentence_final_ids
from magnetsdk.unclosed import cut_unclosed as cut_unclosed_fills

if TYPE_CHECKING:  # magnetsdk.index imports faiss; Magnet only calls an index it is given
    from magnetsdk.index import Index


@dataclass(frozen=True)
class ModelIdentity:
    """What an index or a result records to say which model produced a vector."""

    model: str
    adapter: str | None
    adapter_sha256: str | None
    dimension: int
    instruction: str
    encode_attention: str
    pooling: str
    # The applied principal-component shift ("shift:<lambda>:<hash>" or "remove:<hash>"), if any.
    principal_shift: str | None = None
    echo: bool = False  # each text given twice, the second copy pooled
    # The hash of a merged saved model's weights (magnetsdk.model_dir), so that two fine-tunes of
    # one base saved as full models are told apart; None for a base model or base + adapter.
    weights_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The identity as a dict. ``echo`` and ``weights_sha256`` appear only when set, so an
        identity recorded before they existed still equals that of the same model now."""
        data = dict(self.__dict__)
        for key, unset in (("echo", False), ("weights_sha256", None)):
            if data[key] == unset:
                del data[key]
        return data


class Magnet:
    """A decoder LLM that embeds, infills and generates.

    Build one with :meth:`from_pretrained`, or wrap an already-loaded model and tokenizer with
    the constructor (tests and training do this).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        config: MagnetConfig | None = None,
        name: str = "custom",
        adapter: str | None = None,
        adapter_sha256: str | None = None,
        weights_sha256: str | None = None,
    ) -> None:
        if getattr(model.config, "is_causal", True) is False:
            raise ValueError(
                "the model's config says is_causal=False, so its own causal path (generate, causal "
                "encoding) would attend to later tokens; load it with is_causal=True "
                "(AutoModelForCausalLM.from_pretrained(..., is_causal=True), as Magnet.from_pretrained does)"
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config or MagnetConfig.for_base_model(name)
        self.name = name
        self.layout: LayoutTokens
        self.layout, added = resolve_layout_tokens(tokenizer, self.config.layout_tokens or None)
        if added:
            fit_embeddings(model, tokenizer)
        self.config.layout_tokens = self.layout.strings()
        self._adapter = adapter
        self._adapter_sha256 = adapter_sha256
        self._weights_sha256 = weights_sha256
        self._lock = threading.RLock()
        self._prefix = special_prefix(tokenizer)
        self._pad_id = pad_id(tokenizer)
        # A fitted first principal component applied to every embedding (semantic alignment), if any.
        self.principal_shift: PrincipalShift | None = None
        # Keys/values of recently answered contexts (see Magnet.answer and magnetsdk.answering).
        self.context_cache = ContextCache()

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | os.PathLike | None = None,
        adapter: str | os.PathLike | None = None,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        attn_implementation: str = "sdpa",
    ) -> Magnet:
        """Load a model by name or path (see :mod:`magnetsdk.loading`), optionally with an adapter.

        ``device="auto"`` picks CUDA when present; ``dtype="auto"`` is fp32 on CPU and bf16 on CUDA.
        """
        adapter_path = None
        if adapter is not None:
            adapter_path = Path(adapter).expanduser()
            if not (adapter_path / ADAPTER_CONFIG).is_file():
                raise FileNotFoundError(
                    f"adapter directory {adapter_path} not found or without {ADAPTER_CONFIG}"
                )
        resolved = resolve(name_or_path)
        if adapter_path is not None:
            adapted = (
                MagnetConfig.load(adapter_path) if (adapter_path / "magnet_config.json").is_file() else None
            )
            resolved = Resolved(
                base=resolved.base,
                name=resolved.name,
                adapter=adapter_path,
                config=adapted or resolved.config,
                weights_sha256=resolved.weights_sha256,
            )
        torch_device = pick_device(device)
        model, tokenizer = load_model_and_tokenizer(
            resolved, torch_device, pick_dtype(dtype, torch_device), attn_implementation
        )
        config = resolved.config or MagnetConfig.for_base_model(resolved.name)
        sha = adapter_sha256(resolved.adapter) if resolved.adapter is not None else None
        magnet = cls(
            model,
            tokenizer,
            config,
            name=resolved.name,
            adapter=str(resolved.adapter) if resolved.adapter else None,
            adapter_sha256=sha,
            weights_sha256=resolved.weights_sha256,
        )
        for directory in (resolved.adapter, Path(resolved.base)):
            if directory is not None and directory.is_dir() and (shift := PrincipalShift.load(directory)):
                magnet.principal_shift = shift
                break
        return magnet

    # ------------------------------------------------------------------ facts

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def pad_id(self) -> int:
        """The id batches are padded with (padding is masked out; it only has to be a valid id)."""
        return self._pad_id

    @property
    def prefix(self) -> list[int]:
        """The tokens the tokenizer puts before any text (a BOS), which every layout starts with."""
        return list(self._prefix)

    @functools.cached_property
    def _sentence_final_ids(self) -> frozenset[int]:
        """The tokens after which a fill of a gap between sentences may close (found once, on first use)."""
        return sentence_final_ids(self.tokenizer)

    @functools.cached_property
    def _line_break_ids(self) -> frozenset[int]:
        """The tokens a fill that keeps to its line may not hold (found once, on first use)."""
        return line_break_ids(self.tokenizer)

    @property
    def infill_layout(self) -> InfillLayout:
        """The layout :meth:`infill` uses unless told otherwise (``magnet_config.json``'s ``infill_layout``)."""
        return infill_layout(self.config.infill_layout)

    @property
    def lock(self) -> threading.RLock:
        """The lock every call holds; hold it to run ``self.model`` directly beside other threads."""
        return self._lock

    @property
    def dimension(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def max_length(self) -> int:
        """The most tokens :meth:`encode` reads per text by default (instruction included)."""
        return int(self.config.max_length)

    @property
    def identity(self) -> ModelIdentity:
        return ModelIdentity(
            model=self.name,
            adapter=self._adapter,
            adapter_sha256=self._adapter_sha256,
            dimension=self.dimension,
            instruction=self.config.instruction,
            encode_attention=self.config.encode_attention.value,
            pooling=self.config.pooling.value,
            principal_shift=self.principal_shift.describe() if self.principal_shift else None,
            echo=self.config.echo,
            weights_sha256=self._weights_sha256,
        )

    def info(self) -> dict[str, Any]:
        from magnetsdk.forward import attn_implementation

        impl = attn_implementation(self.model)
        custom_masks = impl in ("sdpa", "eager")
        return {
            **self.identity.to_dict(),
            "device": str(self.device),
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "attn_implementation": impl,
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "adapted": self.config.adapted,
            "modes": {
                "encode": custom_masks or self.config.encode_attention is AttentionMode.CAUSAL,
                "infill": custom_masks,
                "generate": True,
            },
            "layout_tokens": self.layout.strings(),
            "infill_layout": self.config.infill_layout,
        }

    # ------------------------------------------------------------------ encode

    def encode(
        self,
        texts: str | list[str],
        instruction: str | None = None,
        batch_size: int = 32,
        normalize: bool = True,
        max_length: int | None = None,
        pooling: Pooling | str | None = None,
        attention: AttentionMode | str | None = None,
        show_progress: bool | None = None,
        echo: bool | None = None,
        principal_shift: bool = True,
    ) -> np.ndarray:
        """Embed texts; returns float32 ``(n, d)`` (``(d,)`` for a single string).

        ``instruction`` defaults to the model's stored instruction ("" for none). ``pooling`` and
        ``attention`` default to the model's config: bidirectional last-token (EOS) pooling for an
        adapted model, causal mean pooling for an unadapted one. ``echo=True`` gives each text twice
        and pools over the second copy (Echo embeddings, for models that were never adapted).
        A fitted principal component (:meth:`fit_principal_component`) is applied before
        normalisation unless ``principal_shift=False``.
        """
        single = isinstance(texts, str)
        batch, max_length = check_texts(texts, "texts"), check_max_length(max_length)
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be at least 1")
        if not batch:
            return np.zeros((0, self.dimension), dtype=np.float32)
        instruction = self.config.instruction if instruction is None else instruction
        mode = choice(AttentionMode, attention or self.config.encode_attention, "attention")
        pool = choice(Pooling, pooling or self.config.pooling, "pooling")
        progress = show_progress if show_progress is not None else len(batch) > 8 * batch_size
        with self._lock, torch.inference_mode():
            echo = self.config.echo if echo is None else echo
            inputs = prepare(
                self.tokenizer, batch, instruction, max_length or self.config.max_length, echo=echo
            )
            shift = self.principal_shift if principal_shift else None
            vectors = embed(
                self.model, inputs, mode, pool, self._pad_id, batch_size, normalize and not shift, progress
            )
        if shift is not None:
            vectors = shift.apply(vectors)
            if normalize:
                vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return vectors[0] if single else vectors

    # ------------------------------------------------------------------ semantic alignment

    def key_tokens(self, texts: str | list[str], k: int = 10, **encode_options: Any) -> list:
        """The ``k`` tokens the LM head reads from each text's embedding, with probabilities.

        The un-normalised embedding (as :meth:`encode` computes it, same options) is projected
        through the LM head; special tokens are skipped. Returns a list of ``(token, probability)``
        per text (one list for a single string).
        """
        single = isinstance(texts, str)
        vectors = self.encode(
            [texts] if single else texts, normalize=False, principal_shift=False, **encode_options
        )
        skip = set(self.tokenizer.all_special_ids) | {
            self.layout.mask_id,
            self.layout.gap_id,
            self.layout.span_id,
            self.layout.end_id,
        }
        with self._lock, torch.inference_mode():
            hidden = torch.from_numpy(vectors).to(self.device, self.model.dtype)
            tokens = key_tokens(lm_head(self.model), hidden, self.tokenizer, k, skip)
        return tokens[0] if single else tokens

    def fit_principal_component(
        self,
        texts: list[str],
        mode: ShiftMode | str = ShiftMode.SHIFT,
        weight: float = 1.0,
        **encode_options: Any,
    ) -> PrincipalShift:
        """Fit the first principal component of this model's embeddings of ``texts`` and apply it
        from now on (``e + weight * v1``, or its removal with ``mode="remove"``). It is saved with the model."""
        vectors = self.encode(texts, normalize=False, principal_shift=False, **encode_options)
        self.principal_shift = PrincipalShift.fit(vectors, mode, weight)
        return self.principal_shift

    # ------------------------------------------------------------------ infill

    @overload
    def infill(self, text: str, **kwargs: Any) -> InfillResult: ...
    @overload
    def infill(self, text: list[str], **kwargs: Any) -> list[InfillResult]: ...

    def infill(
        self,
        text: str | list[str] | None = None,
        *,
        left: str | None = None,
        right: str | None = None,
        gap_marker: str = DEFAULT_GAP_MARKER,
        max_new_tokens: int = DEFAULT_INFILL_TOKENS,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        batch_size: int = 8,
        use_cache: bool = True,
        repetition_penalty: float = 1.0,
        no_repeat_ngram: int = DEFAULT_NO_REPEAT_NGRAM,
        copy_guard: int = 0,
        pool_stops: bool = False,
        resample_copies: int = DEFAULT_RESAMPLE_COPIES,
        resample_ranking: str = DEFAULT_RESAMPLE_RANKING,
        layout: InfillLayout | str | None = None,
        candidates: int | str = "auto",
        candidate_ranking: str = "auto",
        candidate_temperature: float = 0.8,
        candidate_top_p: float = 0.95,
        line_breaks: str = "auto",
        cut_unclosed: bool = DEFAULT_CUT_UNCLOSED,
        whole_sentences: bool = DEFAULT_WHOLE_SENTENCES,
    ) -> InfillResult | list[InfillResult]:
        """Fill each ``gap_marker`` in ``text`` (or the gap between ``left`` and ``right``).

        Greedy by default (``temperature=0``). A list of texts is filled in batches and returns a
        list. ``layout`` defaults to the model's :attr:`infill_layout` (the one it was trained
        with); ``repetition_penalty`` counts the span tokens decoded so far. ``use_cache=False``
        recomputes the whole sequence at every step (the slow reference).

        ``candidates=N`` (N > 1) ranks N fills of each text: the one decoded with the settings above
        and N - 1 sampled at ``candidate_temperature`` / ``candidate_top_p``. ``"auto"`` (the
        default) ranks :data:`~magnetsdk.ranking.AUTO_CANDIDATES` (8) for a text with a gap inside a
        sentence (``unclosed.gap_inside_a_sentence``: "is in [GAP], the capital") or at its start
        ("[GAP] It was the first time ...") and keeps one greedy fill for a text whose gaps sit
        between sentences; measured on each kind of gap (``docs/results.md``, "Gaps inside a
        sentence", "Ranked fills at a text's start"). Unseeded, ``"auto"`` samples as with
        ``seed=0``, so the default call gives the same fill every time. ``candidate_ranking``
        (:data:`~magnetsdk.ranking.RANKINGS`): with ``"total"`` the filled text the model itself
        finds most likely, read left to right, wins; with ``"right"`` the fill after which the text
        that follows is most likely, among fills that end a sentence and copy nothing; ``"auto"``
        (the default) ranks a text that opens with a gap by ``"right"`` and the others by
        ``"total"`` (see :mod:`magnetsdk.ranking`). ``InfillResult.candidates`` lists every
        distinct fill with its score. Sampled
        candidate ``k`` (1..N-1) of the call's text ``i`` is seeded ``seed + i * (N - 1) + k - 1``,
        so a seeded call is reproducible; unseeded, the candidates differ from call to call.

        ``no_repeat_ngram=N`` (N >= 2; 0 is off; 4 by default) is a loop guard: no span repeats a
        run of N of the span tokens decoded so far. ``copy_guard=N`` (N >= 2; 0 is off) keeps every span from
        holding a run of N tokens of its own text (either side of any gap): it bans tokens inside
        the decode. ``pool_stops=True`` counts END and EOS, which both close a span, as one token
        whose probability is their sum, so a greedy fill stops when stopping as a whole beats the
        best word (their tied embedding rows split the model's stop between them).
        ``resample_copies=N`` (0 is off; 8 by default) leaves the decode alone: a fill that holds a
        run of :data:`~magnetsdk.copies.COPY_WORDS` words of its own text is replaced by the
        likeliest of N fills sampled at ``candidate_temperature`` / ``candidate_top_p`` that does
        not (ranked as ``candidates`` are; ``InfillResult.resampled`` says so), and stays when
        every one copies. Its samples are seeded ``seed`` (0 when unseeded, so a greedy call stays
        reproducible) + ``len(texts) * (candidates - 1) + i * N + k`` for text ``i``.
        ``resample_ranking``: ``"total"`` ranks those fills and their shorter cuts by summed
        log-likelihood, as ``candidates`` are ranked; ``"per-token"`` (the default) ranks the
        sampled fills alone, as decoded, by mean log-likelihood per scored token, which a short
        fragment does not win. The three defaults were chosen together by measurement
        (``docs/results.md``, "Loops in fills"): without them most greedy fills of the shipped
        model loop, and a loop guard alone makes more fills copy their context.

        ``line_breaks``: ``"auto"`` lets a text's fills break a line only when the text holds a line
        break itself (a gap inside a line is filled within it); ``"allow"`` always, ``"forbid"`` never.

        ``cut_unclosed=True`` (the default) cuts a fill that reached ``max_new_tokens`` without
        closing after its last whole sentence, when it holds one (:mod:`magnetsdk.unclosed`;
        ``InfillResult.cut``); ``False`` returns the fill as decoded.

        ``whole_sentences=True`` (the default) keeps a gap between whole sentences (the right side
        starts one, the left side is empty or ends one: ``unclosed.between_sentences``) open until
        its fill ends a sentence (or reaches ``max_new_tokens``): the model may not close it after a
        fragment ("[GAP] The museum reopened ..." got "A"; ``docs/results.md``, "Fills closed after
        a fragment"). ``False`` lets the model close any fill after its first token.

        A text that opens with its gap (nothing before it, not even a space) does not open with a
        space: a fill's leading whitespace is dropped there (``infilling.without_opening_space``).
        """
        if text is None:
            if left is None and right is None:
                raise ValueError("infill needs a text with gap markers, or left=... and/or right=...")
            texts, single = [f"{left or ''}{gap_marker}{right or ''}"], True
        else:
            if left is not None or right is not None:
                raise ValueError("pass either text or left/right, not both")
            single = isinstance(text, str)
            texts = check_texts(text, "text")
        check_temperature(temperature)
        check_decoding(max_new_tokens, temperature, top_p)
        sampling = Sampling(temperature, top_p, repetition_penalty, seed, no_repeat_ngram)
        check_run_length(copy_guard, "copy_guard")
        if not isinstance(pool_stops, bool):
            raise ValueError(f"pool_stops={pool_stops!r} must be True or False")
        check_resample_copies(resample_copies)
        check_resample_ranking(resample_ranking)
        chosen_layout = self.infill_layout if layout is None else infill_layout(layout)
        pieces, spaces = zip(*(move_spaces_into_gaps(split_gaps(t, gap_marker)) for t in texts), strict=True)
        plan = candidate_plan(candidates, candidate_ranking, [list(p) for p in pieces])
        counts = [count for count, _ in plan]
        # "auto" samples seeded (0 when unseeded), so the default call is reproducible.
        ranked = replace(sampling, seed=0) if candidates == "auto" and seed is None else sampling
        # Checks ``candidates`` too: a number is every text's count.
        ranking = candidate_sampling(max(counts), candidate_temperature, candidate_top_p, ranked)
        resampling, first_resample = None, len(texts) * (max(counts) - 1)
        if resample_copies:
            resampling = sample_settings(
                candidate_temperature,
                candidate_top_p,
                replace(sampling, seed=0 if seed is None else seed),
                "or resample_copies=0",
            )
        check_line_breaks(line_breaks)
        if not isinstance(cut_unclosed, bool):
            raise ValueError(f"cut_unclosed={cut_unclosed!r} must be True or False")
        if not isinstance(whole_sentences, bool):
            raise ValueError(f"whole_sentences={whole_sentences!r} must be True or False")
        sentence_gaps = [
            tuple(whole_sentences and between_sentences(p[j], p[j + 1]) for j in range(len(p) - 1))
            for p in pieces
        ]

        # A row to decode: a text's token segments, the tokens its fills may not hold, its sentence gaps.
        Row = tuple[list[list[int]], frozenset[int], tuple[bool, ...]]

        def fill(rows: list[Row], how: Sampling, first: int) -> list[list[list[int]]]:
            """The span ids of each row's gaps, decoded ``batch_size`` rows at a time."""
            found: list[list[list[int]]] = []
            for at in range(0, len(rows), batch_size):
                contexts, kept, whole = zip(*rows[at : at + batch_size], strict=True)
                found += decode_spans(
                    self.model,
                    list(contexts),
                    self.layout,
                    self._prefix,
                    self._pad_id,
                    max_new_tokens=max_new_tokens,
                    sampling=how,
                    layout=chosen_layout,
                    use_cache=use_cache,
                    eos_id=self.tokenizer.eos_token_id,
                    first_row=first + at,
                    held_back=kept,
                    copy_guard=copy_guard,
                    pool_stops=pool_stops,
                    sentence_gaps=whole,
                    sentence_final_ids=self._sentence_final_ids if any(map(any, whole)) else frozenset(),
                )
            return found

        results: list[InfillResult] = []
        with self._lock, torch.inference_mode():
            held = [frozenset() if may_break_lines(t, line_breaks) else self._line_break_ids for t in texts]
            for start in range(0, len(pieces), batch_size):
                chunk = pieces[start : start + batch_size]
                contexts = [
                    [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in segments]
                    for segments in chunk
                ]
                rows = list(
                    zip(
                        contexts,
                        held[start : start + batch_size],
                        sentence_gaps[start : start + batch_size],
                        strict=True,
                    )
                )
                options = [[spans] for spans in fill(rows, sampling, start)]
                extras = [n - 1 for n in counts[start : start + batch_size]]
                if len(set(extras)) == 1 and extras[0]:  # every text ranked alike: one batched decode
                    extra = extras[0]
                    sampled = fill([row for row in rows for _ in range(extra)], ranking, start * extra)
                    for i, found in enumerate(options):
                        found += sampled[i * extra : (i + 1) * extra]
                else:  # text i's candidate k is seeded as above: row (start + i) * extra + k
                    for i, extra in enumerate(extras):
                        if extra:
                            options[i] += fill([rows[i]] * extra, ranking, (start + i) * extra)
                moved = spaces[start : start + batch_size]
                for at, (segments, found, space) in enumerate(zip(chunk, options, moved, strict=True)):
                    count, how_ranked = plan[start + at]
                    result = best_fill(self, segments, found, space, ranked=count > 1, ranking=how_ranked)
                    if resampling is not None and copies_segments(result.spans, segments):
                        row = start + at
                        found = found + fill(
                            [rows[at]] * resample_copies, resampling, first_resample + row * resample_copies
                        )
                        better = best_fill(
                            self,
                            segments,
                            found,
                            space,
                            ranked=True,
                            without_copies=True,
                            ranking=resample_ranking,
                        )
                        if better is not None:
                            result = replace(better, resampled=True)
                    result = without_opening_space(result, segments, space, self.tokenizer)
                    if cut_unclosed:
                        result = cut_unclosed_fills(result, segments, max_new_tokens, self.tokenizer)
                    results.append(result)
        return results[0] if single else results

    # ------------------------------------------------------------------ generate

    @overload
    def generate(self, prompt: str, **kwargs: Any) -> str: ...
    @overload
    def generate(self, prompt: list[str], **kwargs: Any) -> list[str]: ...

    def generate(
        self,
        prompt: str | list[str],
        max_new_tokens: int = 64,
        temperature: float = 0.7,
        top_p: float = 0.9,
        repetition_penalty: float = 1.1,
        seed: int | None = None,
        chat: bool = False,
        batch_size: int = 8,
        min_new_tokens: int = 0,
    ) -> str | list[str]:
        """Continue ``prompt`` causally (nucleus sampling by default; ``temperature=0`` is greedy).

        ``chat=True`` wraps the prompt in the tokenizer's chat template as a user message;
        ``min_new_tokens`` holds back the end-of-sequence token until that many tokens exist. The
        layout tokens (:attr:`layout`) are never generated: they belong to infill sequences.
        """
        check_temperature(temperature)
        settings = GenerationSettings(
            max_new_tokens, temperature, top_p, repetition_penalty, seed, chat, min_new_tokens
        )
        single = isinstance(prompt, str)
        prompts = truncate_prompts(
            check_texts(prompt, "prompt"), self.tokenizer, self._prompt_limit(max_new_tokens)
        )
        outputs: list[str] = []
        layout_ids = tuple(self.layout.ids().values())
        with self._lock, torch.inference_mode():
            for start in range(0, len(prompts), batch_size):
                batch = prompts[start : start + batch_size]
                outputs.extend(
                    generate_texts(
                        self.model, self.tokenizer, batch, settings, first_row=start, banned_ids=layout_ids
                    )
                )
        return outputs[0] if single else outputs

    def _prompt_limit(self, max_new_tokens: int) -> int:
        """The most prompt tokens generate keeps: the model's positions less the new tokens."""
        positions = getattr(self.model.config, "max_position_embeddings", None) or 1_000_000
        return max(1, int(positions) - max_new_tokens - 8)  # 8: chat template and special tokens

    # ------------------------------------------------------------------ answer

    def answer(
        self,
        question: str,
        index: Index,
        k: int = 3,
        *,
        max_new_tokens: int = 32,
        reuse: bool = True,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        filter: dict[str, Any] | None = None,
        chat: bool | None = None,
    ) -> Answer:
        """Retrieve the top-``k`` chunks of ``index`` (a :class:`magnetsdk.Index` built with this
        model) and answer ``question`` from them (greedy by default; see :mod:`magnetsdk.answering`).

        ``reuse=True`` reads the chunks bidirectionally and decodes the answer from their cached
        keys/values (kept in :attr:`context_cache`, so the same chunks are not encoded twice);
        ``reuse=False`` is plain causal generation over the same tokens. ``chat`` frames chunks and
        question as one user message of the chat template (default: when the tokenizer has one).
        """
        import time

        settings = AnswerSettings(k, max_new_tokens, reuse, temperature, top_p, seed, chat=chat)
        question = check_question(question)
        index.manifest.check_identity(self.identity.to_dict(), index.directory)
        with self._lock, torch.inference_mode():
            started = time.perf_counter()
            hits = index.search(question, k=k, filter=filter)
            retrieve = time.perf_counter() - started
            return answer_from_hits(
                self.model,
                self.tokenizer,
                self._prefix,
                self.layout,
                question,
                hits,
                settings,
                self.context_cache,
                retrieve,
            )

    # ------------------------------------------------------------------ save and share

    def save(
        self,
        directory: str | os.PathLike,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
    ) -> Path:
        """Write a model directory that ``Magnet.from_pretrained`` and ``SentenceTransformer`` load.

        Merged safetensors weights, the tokenizer, ``magnet_config.json``, the stored principal
        shift and the sentence-transformers files (the stock layout whenever the encode settings
        allow it, so ``SentenceTransformer(directory)`` needs no flag; see :mod:`magnetsdk.model_dir`),
        written to a temporary directory and renamed into place. A directory this code wrote is
        replaced; a non-empty directory holding anything else is refused with
        :class:`magnetsdk.model_dir.ModelDirectoryError` (a ``FileExistsError``), so nothing is
        lost. ``prompts`` are stored for sentence-transformers, where a prompt replaces the
        instruction (``""`` keeps it).
        """
        from magnetsdk.model_dir import save_magnet

        return save_magnet(self, directory, prompts, default_prompt_name)

    def to_sentence_transformer(
        self,
        prompts: dict[str, str] | None = None,
        default_prompt_name: str | None = None,
        normalize: bool = True,
    ) -> Any:
        """This model as a ``sentence_transformers.SentenceTransformer``, sharing these weights.

        ``SentenceTransformer.encode(x)`` then equals ``self.encode(x)``; a prompt replaces the
        instruction (see :mod:`magnetsdk.integrations.sentence_transformers`).
        """
        from magnetsdk.integrations.sentence_transformers import to_sentence_transformer

        return to_sentence_transformer(self, prompts, default_prompt_name, normalize)

    def __repr__(self) -> str:
        return f"Magnet(model={self.name!r}, adapter={self._adapter!r}, device={str(self.device)!r}, d={self.dimension})"
