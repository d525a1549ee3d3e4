"""The examples of every micro-batch, built from the step number alone.

:class:`Batches` reads the data once (text files, pair files), tokenizes and checks it, picks
the positive-view source, and then builds the micro-batch of any (step, micro-batch, process)
from the run positions that slice covers (see :class:`magnetsdk.train.data.Order`), grouped by length
(:class:`~magnetsdk.train.data.BucketedOrder`). Nothing here depends on what happened at earlier
steps, which is what makes ``--resume`` and any process count see the same examples.

Next-token examples: with ``documents``, a share ``no_context_fraction`` of the positions read a
document chunk (EOS only after a document's last chunk) and the rest a text for MNTP + MSG;
without documents they are texts of ``data`` without EOS.

Scored pairs (``scored_pairs``) have an order of their own and a batch of ``scored_batch_size``
pairs per micro-batch (:meth:`Batches.scored_batch`); so do the short texts of the end KL
(``end_kl_weight``, :meth:`Batches.end_batch`) and the copying fills of copy unlikelihood
(``copy_ul_weight``, :meth:`Batches.copy_batch`).

It knows nothing about the model's weights, optimizers or checkpoints.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from magnetsdk.train.collate import (
    EndBatch,
    LMBatch,
    LMExample,
    LMSettings,
    ScoredBatch,
    ViewBatch,
    build_lm_example,
    collate_ends,
    collate_lm,
    collate_scored,
    collate_views,
    copy_fill_example,
)
from magnetsdk.train.config import PositiveSource, TrainConfig
from magnetsdk.train.data import (
    BucketedOrder,
    DataError,
    Order,
    chunk_documents,
    read_copy_fills,
    read_pairs,
    read_scored_pairs,
    read_texts,
    scored_draws,
    tokenize_texts,
)
from magnetsdk.train.ict import ICTViews, mix_in_ict
from magnetsdk.train.masking import SpanShapes, WordBoundaries, example_rng
from magnetsdk.train.views import (
    DropoutViews,
    PairViews,
    ParaphraseViews,
    PositiveViews,
    Views,
    cached_paraphrases,
    load_paraphrase_cache,
)

from magnetsdk.encoding import eos_id, pad_id, special_prefix
from magnetsdk.layout import LayoutTokens


class Batches:
    def __init__(
        self, config: TrainConfig, tokenizer, layout: LayoutTokens, model: torch.nn.Module, accelerator
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.layout = layout
        self.accelerator = accelerator
        self.rank = accelerator.process_index
        self.world = accelerator.num_processes
        self.run_dir = Path(config.output_dir)
        self.vocab_size = min(len(tokenizer), model.get_input_embeddings().weight.shape[0])
        self.prefix = special_prefix(tokenizer)
        self.eos = eos_id(tokenizer)
        self.pad = pad_id(tokenizer)
        self.chunks = []
        self._load_data(model)

    def _load_data(self, model) -> None:
        config = self.config
        texts = read_texts(config.data, config.text_field)
        pairs = read_pairs(config.pairs)
        if config.pairs and not pairs:
            raise DataError(f"the pair files {config.pairs} hold no pairs")
        self.scored = read_scored_pairs(config.scored_pairs) if config.uses_scored else []
        if config.uses_scored:
            if len(self.scored) < 2:
                raise DataError(
                    f"the scored pair files {config.scored_pairs} hold {len(self.scored)} pair(s); "
                    "CoSENT compares pairs, so give at least 2"
                )
            if len({p.score for p in self.scored}) < 2:
                raise DataError(
                    f"every pair in {config.scored_pairs} has the same score; CoSENT learns from "
                    "pairs scored differently"
                )
            self.scored_draws = scored_draws(self.scored, config.scored_source_power, config.scored_pairs)
            self.scored_order = Order(len(self.scored_draws), config.seed + 5)
        if not texts and pairs:
            texts = list(dict.fromkeys(t for p in pairs for t in (p.anchor, p.positive)))
        if not texts and self.scored:
            texts = list(dict.fromkeys(t for p in self.scored for t in (p.text1, p.text2)))
        if not texts:
            raise DataError(
                f"no training text in {config.data}: the files are empty or hold only blank lines; "
                "add text (one per line in .txt, a 'text' field in .jsonl/.csv)"
            )
        global_batch = config.batch_size * self.world
        # Room for the prefix, and a GAP, SPAN and END per span (or the EOS of a next-token example).
        budget = config.max_length - len(self.prefix) - 3 * config.max_spans
        if budget < 8:
            raise ValueError(
                f"max_length={config.max_length} leaves only {budget} text tokens per example; raise it"
            )
        if config.uses_lm:
            tokenized = tokenize_texts(self.tokenizer, texts, budget)
            if not tokenized.ids:
                raise DataError(
                    f"all {len(texts)} texts are shorter than 4 tokens; training needs longer texts"
                )
            if len(tokenized.ids) < global_batch:
                raise DataError(
                    f"only {len(tokenized.ids)} training examples, fewer than one global batch of "
                    f"{global_batch} ({config.batch_size} per process x {self.world}); add data or "
                    "lower --batch-size"
                )
            if tokenized.split:
                self.accelerator.print(
                    f"{tokenized.split} texts were longer than {budget} tokens and were split into pieces"
                )
            if tokenized.dropped:
                self.accelerator.print(
                    f"{tokenized.dropped} texts (or tails) shorter than 4 tokens were skipped"
                )
            self.lm_ids = tokenized.ids
            self.lm_order = Order(len(self.lm_ids), config.seed)
            if config.documents and config.msg_weight and config.no_context_fraction:
                # Room for the prefix and the EOS of a document's last chunk.
                documents = read_texts(config.documents, config.text_field)
                self.chunks = chunk_documents(
                    self.tokenizer, documents, config.max_length - len(self.prefix) - 1
                )
                if not self.chunks:
                    raise DataError(f"the document files {config.documents} hold no text of 4 tokens or more")
                self.chunk_order = Order(len(self.chunks), config.seed + 2)
            self.lm_bucket = BucketedOrder(
                global_batch, config.bucket_batches, config.seed + 3, lambda p: len(self._lm_item(p)[0])
            )
        self.ends: list[list[int]] = []
        if config.end_kl_weight:
            encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
            self.ends = [ids for ids in encoded if 2 <= len(ids) <= config.end_kl_max_tokens]
            if not self.ends:
                raise DataError(
                    f"end_kl_weight > 0 reads texts of at most end_kl_max_tokens={config.end_kl_max_tokens} "
                    f"tokens, and none of the {len(texts)} texts of {config.data} is that short: add "
                    "one-sentence texts, or raise --end-kl-max-tokens"
                )
            self.end_order = Order(len(self.ends), config.seed + 6)
        self.views: PositiveViews | None = None
        if config.trains_embeddings:  # SSCL views and scored pairs are both read after the instruction
            from magnetsdk.encoding import prepare  # the encoder's own input builder

            try:
                prepare(self.tokenizer, ["x"], config.instruction, config.sscl_max_length - 4)
            except ValueError:
                raise ValueError(
                    f"sscl_max_length={config.sscl_max_length} leaves almost no room for text after the "
                    "instruction prefix; raise --sscl-max-length or shorten --instruction"
                ) from None
        if config.uses_sscl:
            self.views = mix_in_ict(self._positive_views(texts, pairs, model), texts, config)
            if self.views.size < max(global_batch, 2):
                raise DataError(
                    f"only {self.views.size} contrastive examples, fewer than one global batch of "
                    f"{max(global_batch, 2)}; add data or lower --batch-size"
                )
            self.view_order = Order(self.views.size, config.seed + 1)
            self.view_bucket = BucketedOrder(
                config.contrastive_batch_size * self.world,
                config.bucket_batches,
                config.seed + 4,
                lambda p: self._view_length(self.view_order.item(p)),
            )
        word_spans = config.span_unit == "word" and config.uses_lm
        self.settings = LMSettings(
            mntp=bool(config.mntp_weight),
            msg=bool(config.msg_weight),
            mntp_probability=config.mntp_probability,
            span_fraction=config.span_fraction,
            max_spans=config.max_spans,
            no_context_fraction=config.no_context_fraction,
            input_mask_probability=config.input_mask_probability,
            layout=config.infill_layout,
            mntp_fraction=config.mntp_fraction,
            msg_mask_fraction=config.msg_mask_fraction,
            span_shapes=SpanShapes(
                config.span_sentence_share,
                config.span_phrase_share,
                config.span_end_share,
                config.phrase_max_words,
                config.max_span_share,
            )
            if word_spans
            else None,
            boundaries=WordBoundaries.from_tokenizer(self.tokenizer) if word_spans else None,
            context_loss=config.context_loss,
        )
        # With documents the kind of each example is chosen by position (see _lm_item).
        self.text_settings = replace(self.settings, no_context_fraction=0.0) if self.chunks else self.settings
        self.chunk_settings = replace(self.settings, no_context_fraction=1.0)
        self.copies = self._copy_examples() if config.copy_ul_weight else []
        if self.copies:
            self.copy_order = Order(len(self.copies), config.seed + 7)

    def _copy_examples(self) -> list[LMExample]:
        """The copying fills of ``copy_fills``, tokenized and laid out in the run's layout."""
        examples = []
        for fill in read_copy_fills(self.config.copy_fills):
            left, right = (
                self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in (fill.left, fill.right)
            )
            encoded = self.tokenizer(fill.fill, add_special_tokens=False, return_offsets_mapping=True)
            offsets = encoded["offset_mapping"]
            # The token holding each avoided word's first character.
            avoid = [next(i for i, (a, b) in enumerate(offsets) if b > c) for c in fill.avoid]
            examples.append(
                copy_fill_example(
                    left, right, encoded["input_ids"], avoid, self.layout, self.prefix, self.settings.layout
                )
            )
        return examples

    def _positive_views(self, texts: list[str], pairs, model) -> PositiveViews:
        config = self.config
        if config.positives is PositiveSource.ICT:
            return ICTViews.for_view_length(texts, config.sscl_max_length)
        if config.positives is PositiveSource.PAIRS:
            return PairViews(pairs)
        unique = list(dict.fromkeys(texts))
        if config.positives is PositiveSource.DROPOUT:
            return DropoutViews(unique)
        cache = Path(config.paraphrase_cache or self.run_dir / "paraphrases.jsonl")
        if self.accelerator.is_main_process:
            cached_paraphrases(unique, cache, self._paraphraser(model), progress=config.progress)
        self.accelerator.wait_for_everyone()
        return ParaphraseViews(unique, load_paraphrase_cache(cache))

    def _paraphraser(self, model):
        from magnetsdk.config import MagnetConfig
        from magnetsdk.magnet import Magnet

        config = self.config
        if config.paraphrase_model:
            writer = Magnet.from_pretrained(config.paraphrase_model, device=self.accelerator.device)
        else:
            writer = Magnet(model, self.tokenizer, MagnetConfig.for_base_model(config.base_model))
        chat = bool(getattr(writer.tokenizer, "chat_template", None))
        return lambda prompts: writer.generate(
            prompts,
            max_new_tokens=config.sscl_max_length,
            temperature=0.7,
            top_p=0.9,
            seed=config.seed,
            chat=chat,
            batch_size=16,
        )

    # ------------------------------------------------------------------ batches

    def positions(self, step: int, micro: int, batch_size: int | None = None) -> range:
        """This process's positions of micro-batch ``micro`` of ``step`` (before bucketing)."""
        config = self.config
        size = batch_size or config.batch_size
        global_batch = size * self.world
        start = (step * config.gradient_accumulation + micro) * global_batch + self.rank * size
        return range(start, start + size)

    def _lm_item(self, position: int) -> tuple[list[int], bool, int]:
        """(token ids, is a document chunk, item index) of the LM example at an original position."""
        if self.chunks and np.random.default_rng([self.config.seed, position, 0xD0C]).random() < (
            self.config.no_context_fraction
        ):
            item = self.chunk_order.item(position)
            return self.chunks[item].ids, True, item
        item = self.lm_order.item(position)
        return self.lm_ids[item], False, item

    def lm_examples(self, positions: range) -> tuple[list[LMExample], list[int]]:
        """The LM examples of ``positions`` (bucketed) and their item indices (chunks negative)."""
        examples, items = [], []
        for position in positions:
            original = self.lm_bucket.arranged(position)
            ids, is_chunk, item = self._lm_item(original)
            ends = is_chunk and self.chunks[item].ends_document
            settings = self.chunk_settings if is_chunk else self.text_settings
            rng = example_rng(self.config.seed, original)
            examples.append(
                build_lm_example(
                    ids, self.layout, self.prefix, self.eos, self.vocab_size, settings, rng, ends
                )
            )
            items.append(-1 - item if is_chunk else item)
        return examples, items

    def _view_length(self, item: int) -> int:
        """Characters of an item's views: what decides its padded length (any positive source)."""
        return sum(len(t[0] or "") for t in self.views.views([item]))

    def view_texts(self, positions: range) -> tuple[Views, list[int]]:
        items = [self.view_order.item(self.view_bucket.arranged(p)) for p in positions]
        anchors, positives, negatives = self.views.views(items)
        if not self.config.hard_negatives:
            negatives = [None] * len(anchors)
        return (anchors, positives, negatives), items

    def scored_batch(self, step: int, micro: int) -> ScoredBatch | None:
        """This process's scored pairs of micro-batch ``micro`` of ``step`` (None without scored pairs)."""
        if not self.scored:
            return None
        positions = self.positions(step, micro, self.config.scored_batch_size)
        pairs = [self.scored[self.scored_draws[self.scored_order.item(p)]] for p in positions]
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*truncated.*")
            batch = collate_scored(
                self.tokenizer, pairs, self.config.instruction, self.config.sscl_max_length, self.pad
            )
        return batch.to(self.accelerator.device)

    def end_batch(self, step: int, micro: int) -> EndBatch | None:
        """This process's short texts of micro-batch ``micro`` of ``step`` for the end KL (None when off)."""
        if not self.ends:
            return None
        positions = self.positions(step, micro, self.config.end_kl_batch_size)
        texts = [self.ends[self.end_order.item(p)] for p in positions]
        return collate_ends(texts, self.prefix, self.pad).to(self.accelerator.device)

    def copy_batch(self, step: int, micro: int) -> LMBatch | None:
        """This process's copying fills of micro-batch ``micro`` of ``step`` (None when copy unlikelihood is off)."""
        if not self.copies:
            return None
        positions = self.positions(step, micro, self.config.copy_ul_batch_size)
        examples = [self.copies[self.copy_order.item(p)] for p in positions]
        return collate_lm(examples, self.pad).to(self.accelerator.device)

    def batch(
        self, step: int, micro: int, weights: tuple[float, float, float]
    ) -> tuple[LMBatch | None, ViewBatch | None, dict[str, list[int]]]:
        """This process's micro-batch: the LM batch, the contrastive views, and the item indices used."""
        device = self.accelerator.device
        lm = views = None
        items: dict[str, list[int]] = {}
        if weights[0] or weights[2]:
            examples, items["lm"] = self.lm_examples(self.positions(step, micro))
            lm = collate_lm(examples, self.pad).to(device)
        if weights[1]:
            texts, items["sscl"] = self.view_texts(
                self.positions(step, micro, self.config.contrastive_batch_size)
            )
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*truncated.*")
                views = collate_views(
                    self.tokenizer, *texts, self.config.instruction, self.config.sscl_max_length, self.pad
                ).to(device)
        return lm, views, items
