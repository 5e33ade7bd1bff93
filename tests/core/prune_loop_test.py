"""`core.prune_loop` on a numpy model: the loop, the report schema and its reader."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from headsize_tf.core.model_adapter import ModelAdapter
from headsize_tf.core.prune_loop import PruneSchedule, prune_loop
from headsize_tf.core.prune_report import (
    json_scores,
    kept_heads,
    read_prune_report,
    scores_from_json,
)
from headsize_tf.core.pruning_plan import iterative_pruning


class FakeAdapter:
    """Heads with fixed worth: the metric is the worth of the unmasked heads."""

    metric_name = "accuracy"
    report_file = "report.json"
    source = "fake"

    def __init__(self, worth, kinds=None, numbering=None):
        self.worth = np.asarray(worth, np.float64)
        self.kinds = kinds or ["self"] * len(self.worth)
        self.numbering = numbering or [list(range(self.worth.shape[1]))] * len(self.worth)
        self.mask = np.where(np.isnan(self.worth), np.nan, 1.0)
        self.importance_calls = 0

    def attention_kinds(self):
        return list(self.kinds)

    def original_heads(self):
        return [list(r) for r in self.numbering]

    def head_mask(self):
        return self.mask.copy()

    def set_head_mask(self, mask):
        mask = np.asarray(mask, np.float64)
        self.mask = np.where(np.isnan(self.worth), np.nan, mask)

    def head_importance(self):
        self.importance_calls += 1
        return np.where(self.mask != 0, self.worth, np.nan)

    def evaluate(self):
        return {"accuracy": float(np.nansum(self.worth * self.mask)), "loss": 1.0}

    def count_params(self):
        return int(np.sum(np.nan_to_num(self.mask) != 0)) * 10 + 5

    def remove_heads(self, mask):
        new = FakeAdapter(np.where(np.asarray(mask) != 0, self.worth, 0.0), self.kinds)
        new.mask = np.where(np.isnan(self.worth), np.nan, np.asarray(mask, np.float64))
        return new

    def save(self, output, report, overwrite=False):
        path = pathlib.Path(output)
        path.mkdir(parents=True, exist_ok=overwrite)
        np.save(path / "mask.npy", self.mask)
        np.save(path / "worth.npy", self.worth)
        (path / self.report_file).write_text(json.dumps(report))
        return path

    def reload(self, path):
        new = FakeAdapter(np.load(pathlib.Path(path) / "worth.npy"), self.kinds)
        new.mask = np.load(pathlib.Path(path) / "mask.npy")
        return new


WORTH = np.array([[4.0, 1.0, 3.0, 2.0], [8.0, 7.0, 5.0, 6.0]])


def test_the_fake_is_a_model_adapter():
    assert isinstance(FakeAdapter(WORTH), ModelAdapter)
    assert not isinstance(object(), ModelAdapter)


def test_the_loop_prunes_the_least_important_heads_as_the_plan_does(tmp_path):
    adapter = FakeAdapter(WORTH)
    schedule = PruneSchedule(target_fraction=0.5, step=0.25, progress=False)
    report = prune_loop(adapter, schedule, tmp_path / "out")
    expected = iterative_pruning(
        WORTH.shape,
        lambda mask: np.where(mask != 0, WORTH, np.nan),
        lambda mask: float(np.sum(WORTH * mask)),
        target_fraction=0.5,
        step=0.25,
        min_heads_per_layer=1,
        progress=False,
    )
    assert [p["metric"] for p in report["curve"]] == [s.metric for s in expected]
    assert [p["mask"] for p in report["curve"]] == [s.mask for s in expected]
    assert report["kept_heads"] == {"original": [[0, 1, 2, 3]] * 2, "pruned": [[0], [0, 1, 3]]}
    assert report["curve"][-1]["heads_per_layer"] == [1, 3]
    assert report["accuracy"] == {"original": 36.0, "masked": 25.0, "pruned": 25.0}
    assert report["params"] == {"original": 85, "pruned": 45}
    assert "params_before" not in report and "pruned_accuracy" not in report  # One schema.
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report
    assert np.array_equal(adapter.head_mask(), np.ones_like(WORTH))  # Restored.
    # The first step reuses the report's importance; each later step recomputes.
    assert adapter.importance_calls == 2


def test_the_loop_refuses_an_existing_output_before_any_work(tmp_path):
    adapter = FakeAdapter(WORTH)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        prune_loop(adapter, PruneSchedule(progress=False), tmp_path)
    assert adapter.importance_calls == 0


def test_kinds_prune_their_rows_only_and_slots_without_heads_stay_out():
    worth = np.array([[4.0, 1.0, np.nan], [3.0, 2.0, 9.0], [0.5, 0.25, 7.0]])
    adapter = FakeAdapter(worth, kinds=["enc", "dec", "dec"])
    schedule = PruneSchedule(target_fraction=0.5, step=0.5, kinds=("dec",), progress=False)
    report = prune_loop(adapter, schedule)
    final = np.asarray(report["curve"][-1]["mask"])
    assert final[0].tolist() == [1.0, 1.0, 0.0]  # The encoder row is not pruned.
    assert np.count_nonzero(final[1:]) == 3
    assert report["importance"][0][2] is None
    with pytest.raises(ValueError, match="Attention kinds"):
        prune_loop(adapter, PruneSchedule(kinds=("cross",), progress=False))


def test_random_order_is_seeded_and_differs_from_importance():
    first = prune_loop(FakeAdapter(WORTH), PruneSchedule(random_seed=1, progress=False))
    again = prune_loop(FakeAdapter(WORTH), PruneSchedule(random_seed=1, progress=False))
    assert [p["mask"] for p in first["curve"]] == [p["mask"] for p in again["curve"]]


def test_kept_heads_keep_the_original_numbering():
    numbering = [[0, 2, 3, -1], [1, 2, 3, 4]]
    assert kept_heads(np.array([[1, 0, 1, 0], [0, 1, 1, 1]]), numbering) == [[0, 3], [2, 3, 4]]


def test_scores_round_trip_with_none_for_missing_heads():
    scores = np.array([[0.5, np.nan], [np.inf, 0.25]])
    rows = json_scores(scores)
    assert rows == [[0.5, None], [None, 0.25]]
    back = scores_from_json([[0.5, None], [0.25]])
    assert back.shape == (2, 2) and np.isnan(back[0, 1]) and np.isnan(back[1, 1])


def test_reports_before_the_schema_still_read():
    classifier = {
        "params_before": 10,
        "params_after": 6,
        "unpruned_accuracy": 0.9,
        "masked_accuracy": 0.8,
        "pruned_accuracy": 0.8,
        "curve": [{"fraction": 0.0, "metric": 0.9}],
    }
    read = read_prune_report(classifier)
    assert read["params"] == {"original": 10, "pruned": 6}
    assert read["metric"] == "accuracy"
    assert read["accuracy"] == {"original": 0.9, "masked": 0.8, "pruned": 0.8}
    lm = {
        "params": {"original": 10, "pruned": 6},
        "perplexity": {"original": 5.0, "masked": 6.0, "pruned": 6.0},
        "curve": [{"fraction": 0.0, "perplexity": 5.0}],
    }
    read = read_prune_report(lm)
    assert read["metric"] == "perplexity" and read["curve"][0]["metric"] == 5.0
    with pytest.raises(ValueError, match="neither 'params'"):
        read_prune_report({"curve": []})
    with pytest.raises(ValueError, match="names no metric"):
        read_prune_report({"params": {"original": 1, "pruned": 1}})


def test_the_committed_model_dir_reports_read():
    root = pathlib.Path(__file__).parents[2] / "results" / "translation_pruning" / "runs"
    for path in sorted(root.glob("prune_*.json")):
        read = read_prune_report(path)
        assert read["metric"] == "perplexity" and read["params"]["pruned"] > 0


class GroupedFake(FakeAdapter):
    """FakeAdapter whose slots form key/value groups of `size` heads."""

    def __init__(self, worth, size):
        super().__init__(worth)
        self.size = size

    def kv_groups(self):
        return [[s // self.size for s in range(self.worth.shape[1])] for _ in self.worth]


def test_kv_group_unit_prunes_whole_groups_by_summed_importance(tmp_path):
    # Groups of 2: layer 0 sums to (5, 5) -> ties break by order; layer 1 to (15, 11).
    adapter = GroupedFake(WORTH, 2)
    schedule = PruneSchedule(target_fraction=0.5, step=0.25, progress=False, unit="kv_group")
    report = prune_loop(adapter, schedule, tmp_path / "out")

    # The same plan on the group-level problem (numpy oracle: sum within groups).
    groups = WORTH.reshape(2, 2, 2).sum(-1)
    expected = iterative_pruning(
        groups.shape,
        lambda mask: np.where(mask != 0, groups, np.nan),
        lambda mask: float(np.sum(groups * mask)),
        target_fraction=0.5,
        step=0.25,
        min_heads_per_layer=1,
        progress=False,
    )
    heads = [np.repeat(np.asarray(s.mask), 2, axis=1).tolist() for s in expected]
    assert [p["mask"] for p in report["curve"]] == heads
    assert [p["metric"] for p in report["curve"]] == [s.metric for s in expected]
    assert [p["heads_pruned"] for p in report["curve"]] == [0, 2, 4]  # Heads, not groups.
    assert report["curve"][-1]["heads_per_layer"] == [2, 2]
    assert report["kept_heads"]["pruned"] == [[2, 3], [0, 1]]
    assert report["unit"] == "kv_group"
    assert np.array_equal(adapter.head_mask(), np.ones_like(WORTH))  # Restored.


def test_kv_group_unit_keeps_masked_heads_of_kept_groups_and_needs_groups():
    worth = np.array([[4.0, 1.0, 3.0, 2.0, 9.0, 9.0]])
    adapter = GroupedFake(worth, 2)
    adapter.set_head_mask([[1.0, 0.0, 1.0, 1.0, 0.0, 0.0]])  # Group 2 already gone.
    schedule = PruneSchedule(target_fraction=0.5, step=0.5, progress=False, unit="kv_group")
    report = prune_loop(adapter, schedule)
    # Live groups (4 + 0) and (3 + 2): the first goes; group 2 counts as pruned already.
    assert report["curve"][-1]["mask"] == [[0.0, 0.0, 1.0, 1.0, 0.0, 0.0]]
    assert adapter.head_mask().tolist() == [[1.0, 0.0, 1.0, 1.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match="unit 'kv_group' prunes whole key/value groups"):
        prune_loop(FakeAdapter(WORTH), schedule)
    with pytest.raises(ValueError, match="unit='layer'"):
        PruneSchedule(unit="layer")


def test_fractions_are_of_the_heads_a_model_has_not_of_its_widest_layers_slots():
    """Layers of 1 and 4 heads (a pruned, reloaded model): 60% of its 5 heads is 3."""
    worth = np.array([[4.0, np.nan, np.nan, np.nan], [8.0, 7.0, 5.0, 6.0]])
    adapter = FakeAdapter(worth, numbering=[[0, -1, -1, -1], [0, 1, 2, 3]])
    report = prune_loop(adapter, PruneSchedule(target_fraction=0.6, step=0.6, progress=False))
    assert [p["heads_pruned"] for p in report["curve"]] == [0, 3]
    assert report["curve"][-1]["heads_per_layer"] == [1, 1]
    assert report["kept_heads"]["pruned"] == [[0], [0]]


def test_group_fractions_are_of_the_groups_a_model_has():
    class Narrow(FakeAdapter):  # Layer 0: one group of 2 heads; layer 1: two groups.
        def kv_groups(self):
            return [[0, 0, -1, -1], [0, 0, 1, 1]]

    worth = np.array([[4.0, 1.0, np.nan, np.nan], [8.0, 7.0, 5.0, 6.0]])
    adapter = Narrow(worth, numbering=[[0, 1, -1, -1], [0, 1, 2, 3]])
    schedule = PruneSchedule(target_fraction=0.34, step=0.34, progress=False, unit="kv_group")
    report = prune_loop(adapter, schedule)  # 34% of 3 groups: one goes (layer 1's second).
    assert report["curve"][-1]["mask"] == [[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]]
    assert [p["heads_pruned"] for p in report["curve"]] == [0, 2]
