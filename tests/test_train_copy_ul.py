"""Copy unlikelihood: the model's own copying fills, pushed down where they continued a copy."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from magnetsdk.train.collate import collate_lm, copy_fill_example
from magnetsdk.train.config import TrainConfig
from magnetsdk.train.data import DataError, read_copy_fills
from magnetsdk.train.objectives import MagnetObjectives
from magnetsdk.train.trainer import train

from magnetsdk.encoding import pad_id, special_prefix
from magnetsdk.layout import resolve_layout_tokens
from magnetsdk.testing import tiny_model, tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

WEIGHTS = (1.0, 0.0, 1.0)
LEFT = "Paris is the capital of France and a city of museums."
RIGHT = " Rain fell on the roof all night."
FILL = " He plays the capital of France and a city of museums."


@pytest.fixture(scope="module")
def copy_fills(repo_script):
    return repo_script("scripts/copy_fills.py")


def test_only_the_words_that_continue_a_five_word_copy_are_avoided(copy_fills):
    inside = copy_fills.copied_words(FILL, [LEFT, RIGHT])
    # " He plays" are the fill's own; "the capital ... museums" (9 words) copies the left side.
    assert inside == [False, False] + [True] * 9
    offsets = copy_fills.avoided_offsets(FILL, [LEFT, RIGHT], keep=2)
    assert [FILL[o : o + 4] for o in offsets] == ["of F", "Fran", "and ", "a ci", "city", "of m", "muse"]
    assert copy_fills.avoided_offsets(FILL, [RIGHT]) == []  # four shared words are no copy
    assert copy_fills.avoided_offsets(" the capital of France and", [LEFT], keep=0) == [1, 5, 13, 16, 23]


def test_the_script_keeps_only_copying_fills_and_refuses_a_result_without_fills(copy_fills, tmp_path):
    result = {
        "details": {
            "infills": {
                "spm": [
                    {"left": LEFT, "right": RIGHT, "generated": FILL},
                    {"left": LEFT, "right": RIGHT, "generated": " A quiet town on the river."},
                ]
            }
        }
    }
    source, out = tmp_path / "fills.json", tmp_path / "copies.jsonl"
    source.write_text(json.dumps(result))
    assert copy_fills.main([str(source), "-o", str(out)]) == 0
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["fill"] == FILL and len(record["avoid"]) == 7
    assert read_copy_fills(str(out))[0].avoid == tuple(record["avoid"])
    source.write_text(json.dumps({"details": {}}))
    with pytest.raises(SystemExit):
        copy_fills.main([str(source), "-o", str(out)])


def test_with_loops_the_script_also_keeps_the_looping_fills_and_avoids_their_repeats(copy_fills, tmp_path):
    looping = " He won the cup in 2001 . He won the cup in 2002 ."
    result = {
        "details": {
            "infills": {"spm": [{"left": LEFT, "right": RIGHT, "generated": g} for g in (FILL, looping)]}
        }
    }
    source, out = tmp_path / "fills.json", tmp_path / "negatives.jsonl"
    source.write_text(json.dumps(result))
    assert copy_fills.main([str(source), "-o", str(out)]) == 0
    assert [json.loads(line)["fill"] for line in out.read_text().splitlines()] == [FILL]  # no loops asked
    assert copy_fills.main([str(source), "--loops", "-o", str(out)]) == 0
    copying, looped = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(copying["avoid"]) == 7  # the copy's words; the fill does not loop
    # " He won the cup in" comes back: "in" completes the repeat; "2002" and "." break it.
    assert looped["fill"] == looping and looped["avoid"] == [looping.rindex(" in") + 1]


def test_a_bad_copy_fills_file_names_its_line(tmp_path):
    path = tmp_path / "copies.jsonl"
    path.write_text(json.dumps({"left": "a", "right": "b", "fill": " c d", "avoid": [9]}) + "\n")
    with pytest.raises(DataError, match="copies.jsonl:1:.*scripts/copy_fills.py"):
        read_copy_fills(str(path))
    path.write_text("")
    with pytest.raises(DataError, match="no copy fills"):
        read_copy_fills(str(path))
    with pytest.raises(DataError, match="not found"):
        read_copy_fills(str(tmp_path / "missing.jsonl"))


def copy_example(layout: str, avoid: list[int]):
    tokenizer = tiny_tokenizer()
    tokens, _ = resolve_layout_tokens(tokenizer)
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in (LEFT, RIGHT, FILL)]
    return ids, copy_fill_example(*ids, avoid, tokens, special_prefix(tokenizer), layout)


@pytest.mark.parametrize("layout", ["spm", "magnet"])
def test_each_avoided_token_is_read_after_the_fill_before_it(layout):
    (left, right, fill), example = copy_example(layout, [5, 2, 5])
    assert example.msg_targets == [fill[2], fill[5]]
    for position, target in zip(example.msg_positions, example.msg_targets, strict=True):
        assert example.input_ids[position + 1] == target
        assert example.is_span[position + 1]
    # Read after the whole context and the fill's first tokens, as when the model wrote them.
    assert example.input_ids[example.msg_positions[0] - 1 : example.msg_positions[0] + 1] == fill[:2]
    assert not example.mntp_positions
    with pytest.raises(ValueError, match="inside the fill"):
        copy_example(layout, [len(fill)])


def lora_model():
    from magnetsdk.train.adaptation import make_trainable

    torch.manual_seed(0)
    return make_trainable(tiny_model(), TrainConfig(data=["unused"], lora_r=4, lora_dropout=0.0), [])


def avoided_probabilities(model, example) -> torch.Tensor:
    """p(avoided token | everything before it), one unpadded causal pass (the spm layout is all causal)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([example.input_ids])).logits[0].float()
    probs = F.softmax(logits[example.msg_positions], dim=-1)
    return probs.gather(1, torch.tensor(example.msg_targets)[:, None]).squeeze(1)


def test_the_term_is_the_mean_unlikelihood_and_training_on_it_lowers_the_copy():
    _, short = copy_example("spm", [3])
    _, long = copy_example("spm", [2, 4, 6])
    batch = collate_lm([short, long], pad_id(tiny_tokenizer()))  # padded: positions must still hold
    model = lora_model()
    term = MagnetObjectives(model, "hybrid", 0.05, copy_ul_weight=0.5)
    p = torch.cat([avoided_probabilities(model, short), avoided_probabilities(model, long)])
    expected = float(-torch.log1p(-p).mean())
    out = term(None, None, WEIGHTS, copies=batch)
    assert out.copy_ul == pytest.approx(expected, rel=1e-4)
    assert float(out.total.detach()) == pytest.approx(0.5 * expected, rel=1e-4)
    assert out.msg is None and out.mntp is None

    optimizer = torch.optim.Adam([q for n, q in model.named_parameters() if "lora_" in n], lr=1e-2)
    for _ in range(5):
        optimizer.zero_grad()
        term(None, None, WEIGHTS, copies=batch).total.backward()
        optimizer.step()
    after = avoided_probabilities(model, long)
    assert float(after.sum()) < 0.5 * float(avoided_probabilities(lora_model(), long).sum())


def test_copy_unlikelihood_needs_its_file_and_its_weight_together():
    with pytest.raises(ValueError, match="--copy-fills.*--copy-ul-weight"):
        TrainConfig(data=["x"], copy_ul_weight=1.0)
    with pytest.raises(ValueError, match="--copy-fills.*--copy-ul-weight"):
        TrainConfig(data=["x"], copy_fills="copies.jsonl")
    with pytest.raises(ValueError, match="must be >= 0"):
        TrainConfig(data=["x"], copy_ul_weight=-1.0, copy_fills="copies.jsonl")
    with pytest.raises(ValueError, match="copy_ul_batch_size"):
        TrainConfig(data=["x"], copy_ul_weight=1.0, copy_fills="c.jsonl", copy_ul_batch_size=0)


def test_a_run_with_copy_fills_logs_the_term(tmp_path, base_dir, data_file, train_config, copy_fills):
    fills = tmp_path / "copies.jsonl"
    record = {"left": LEFT, "right": RIGHT, "fill": FILL}
    record["avoid"] = copy_fills.avoided_offsets(FILL, [LEFT, RIGHT])
    fills.write_text(json.dumps(record) + "\n")
    run = train(
        train_config(
            tmp_path,
            base_dir,
            data_file,
            max_steps=3,
            infill_layout="spm",
            msg_mask_fraction=0.0,
            copy_fills=str(fills),
            copy_ul_weight=1.0,
            copy_ul_batch_size=2,
        )
    )
    rows = [json.loads(line) for line in run.metrics_path.read_text().splitlines()]
    logged = [row["copy_ul"] for row in rows if "copy_ul" in row]
    assert len(logged) == 3 and all(value > 0 for value in logged)
