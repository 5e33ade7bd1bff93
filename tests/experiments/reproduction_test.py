"""The R1/R2 reproduction runner: plan, per-model learning rate, curves, resume, verdicts."""

import argparse
import dataclasses
import json
import os
import pathlib
import shutil

import numpy as np
import pytest
import tensorflow as tf

from headsize_tf.core.io import write_json
from headsize_tf.experiments.reproduction.__main__ import main
from headsize_tf.experiments.reproduction.plan import plan, run_name, unique_models
from headsize_tf.experiments.reproduction.presets import PRESETS, Preset
from headsize_tf.experiments.reproduction.scheduler import claim, result_arguments
from headsize_tf.experiments.reproduction.summary import orderings, settled_from, summarize
from headsize_tf.experiments.reproduction.sweep import (
    best_learning_rate,
    load_runs,
    model_grid,
    pending,
)

TEST = PRESETS["test"]


class PlanTest(tf.test.TestCase):
    def test_pairs_have_equal_parameters_and_heads_below_the_sequence(self):
        for name in ("cpu", "gpu"):
            preset = PRESETS[name]
            experiments = plan(preset)
            r1 = experiments["R1"]
            for base, fixed in zip(r1[0::2], r1[1::2], strict=True):
                self.assertEqual(base.kind, "standard")
                self.assertEqual((fixed.width, fixed.head_size), (preset.width, 32))
                self.assertLess(abs(fixed.params(preset) / base.params(preset) - 1), 0.05)
            self.assertEqual(
                [m.width for m in r1[0::2]], [preset.width, preset.width * 3 // 2, 2 * preset.width]
            )
            for model in unique_models(experiments).values():
                # Theorem 1's regime: every head is smaller than the sequence.
                self.assertLess(model.head_size, preset.sequence_length)
            r2 = experiments["R2"]
            self.assertEqual([m.heads for m in r2[0::2]], list(preset.r2_heads))
            self.assertEqual({m.head_size for m in r2[1::2]}, {32})
            self.assertEqual(
                [m.head_size for m in r2[0::2]], [preset.width // h for h in preset.r2_heads]
            )

    def test_the_grid_grows_while_the_best_rate_is_at_its_edge(self):
        preset = dataclasses.replace(PRESETS["cpu"], learning_rates=(1e-3, 2e-3, 4e-3))
        key = "std_w64_h4_p16"

        def runs(finals):
            return {(key, lr, 0): {"curve": [{"perplexity": p}]} for lr, p in finals.items()}

        done = runs({1e-3: 140.0, 2e-3: 130.0, 4e-3: 120.0})
        self.assertEqual(model_grid(key, preset, done), [1e-3, 2e-3, 4e-3, 8e-3])
        self.assertIsNone(best_learning_rate(key, preset, done))  # 8e-3 is pending.
        done.update(runs({8e-3: 125.0}))
        self.assertEqual(best_learning_rate(key, preset, done), 4e-3)
        low = runs({1e-3: 100.0, 2e-3: 110.0, 4e-3: 120.0, 5e-4: 90.0, 2.5e-4: 80.0})
        # Two halvings at most: the best may stay at the edge after them.
        self.assertEqual(model_grid(key, preset, low), [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3])
        self.assertEqual(best_learning_rate(key, preset, low), 2.5e-4)
        # A diverged run (NaN perplexity) is never the best and never moves the grid.
        diverged = runs({1e-3: float("nan"), 2e-3: 130.0, 4e-3: 135.0})
        self.assertEqual(model_grid(key, preset, diverged), [1e-3, 2e-3, 4e-3])
        self.assertEqual(best_learning_rate(key, preset, diverged), 2e-3)

    def test_a_moved_grid_keeps_finished_runs_and_shows_their_rates(self):
        out = pathlib.Path(self.get_temp_dir()) / "moved"
        old = dataclasses.replace(TEST, learning_rates=(1e-4, 1e-3, 3e-3, 9e-3))
        new = dataclasses.replace(TEST, learning_rates=(1e-3, 3e-3, 9e-3))
        key = unique_models(plan(TEST))["std_w16_h4_p4"].key
        for lr, ppl in ((1e-4, 150.0), (1e-3, 120.0), (3e-3, 110.0), (9e-3, 130.0)):
            record = {
                "key": key,
                "learning_rate": lr,
                "seed": 0,
                "preset": dataclasses.asdict(old),
                "curve": [{"step": 1, "perplexity": ppl}],
                "test_perplexity": ppl,
                "device": "CPU: test",
            }
            write_json(out / "runs" / f"{run_name(key, lr, 0)}.json", record)
        other_shape = dataclasses.replace(new, steps=TEST.steps + 1)
        self.assertEqual(load_runs(out, other_shape), {})
        runs = load_runs(out, new)  # The old grid's runs still count.
        self.assertEqual(sorted(lr for _, lr, _ in runs), [1e-4, 1e-3, 3e-3, 9e-3])
        self.assertEqual(model_grid(key, new, runs), [1e-3, 3e-3, 9e-3])
        self.assertEqual(best_learning_rate(key, new, runs), 3e-3)
        sweep = summarize(new, plan(new), runs)["sweep"][key]
        self.assertEqual(sweep, {"0.0001": 150.0, "0.001": 120.0, "0.003": 110.0, "0.009": 130.0})

    def test_runs_recorded_before_a_preset_field_existed_keep_counting(self):
        # Records written before `eval_windows` existed lack it: they were made at its
        # default (the whole split); a preset that sets it is another shape.
        out = pathlib.Path(self.get_temp_dir()) / "older"
        cpu = PRESETS["cpu"]
        key = unique_models(plan(cpu))["std_w64_h4_p16"].key
        stored = dataclasses.asdict(cpu)
        del stored["eval_windows"]
        record = {"key": key, "learning_rate": 1e-3, "seed": 0, "preset": stored}
        write_json(out / "runs" / "old.json", record)
        self.assertEqual(list(load_runs(out, cpu)), [(key, 1e-3, 0)])
        self.assertEqual(load_runs(out, dataclasses.replace(cpu, eval_windows=64)), {})

    def test_the_command_leaves_out_scheduling_options(self):
        argv = [
            "--preset",
            "cpu",
            "--keys",
            "a",
            "b",
            "--threads",
            "1",
            "--output",
            "x",
            "--max-runs=3",
            "--summarize-only",
        ]
        self.assertEqual(result_arguments(argv), ["--preset", "cpu", "--output", "x"])

    def test_settled_from(self):
        self.assertEqual(settled_from([3.0, -1.0, -2.0, -0.5]), 1)
        self.assertEqual(settled_from([-1.0, 2.0, -1.0]), 2)
        self.assertEqual(settled_from([1.0, 1.0]), 0)
        self.assertIsNone(settled_from([]))


def _fake_runs(out: pathlib.Path, preset: Preset, test_ppl, valid_ppl) -> None:
    """Every run of the plan as a file, with perplexities from the given functions."""
    experiments = plan(preset)
    runs: dict = {}
    while todo := pending(preset, experiments, runs):
        for model, lr, seed in todo:
            curve = [
                {"step": s, "perplexity": valid_ppl(model, lr, seed, s), "loss": 0.0}
                for s in (2, 4)
            ]
            record = {
                **model.row(preset),
                "kind": model.kind,
                "learning_rate": lr,
                "seed": seed,
                "preset": dataclasses.asdict(preset),
                "curve": curve,
                "test_perplexity": test_ppl(model, seed),
                "device": "CPU: test",
            }
            runs[model.key, lr, seed] = record
            path = out / "runs" / f"{run_name(model.key, lr, seed)}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record))


class SummaryTest(tf.test.TestCase):
    def test_learning_rate_choice_orderings_and_verdicts_from_files(self):
        out = pathlib.Path(self.get_temp_dir()) / "rv2"
        lrs = TEST.learning_rates

        def valid(model, lr, seed, step):
            # Fixed heads prefer the larger rate, baselines the smaller one; fixed is
            # behind at the first checkpoint and ahead at the last.
            best = lrs[-1] if model.kind == "fixed_head" else lrs[0]
            order = (10.0 if step == 2 else -10.0) if model.kind == "fixed_head" else 0.0
            return 100.0 + (0.0 if lr == best else 20.0) + order

        def test(model, seed):
            return (90.0 if model.kind == "fixed_head" else 100.0) + seed * 0.1

        _fake_runs(out, TEST, test, valid)
        self.assertEqual(main(["--preset", "test", "--output", str(out), "--summarize-only"]), 0)
        summary = json.loads((out / "reproduction.json").read_text())
        self.assertTrue(summary["complete"])
        # A model in two places of the plan (e.g. 2 heads of 8 at width 16 is both the
        # R2 baseline and the fixed-head model) is one model: one learning rate, one set of runs.
        models = unique_models(plan(TEST))
        for row in summary["R1"] + summary["R2"]:
            model = models[row["key"]]
            self.assertEqual(
                row["learning_rate"], lrs[-1] if model.kind == "fixed_head" else lrs[0]
            )
            self.assertEqual(row["seeds"], [0, 1, 2])
            want = [test(model, s) for s in (0, 1, 2)]
            self.assertAllClose([row["mean"], row["std"]], [np.mean(want), np.std(want, ddof=1)])
            self.assertAllClose(row["mean_other_seeds"], np.mean(want[1:]))
        verdicts = {v["claim"][:3]: v["verdict"] for v in summary["verdicts"]}
        self.assertEqual(verdicts["R1:"], "reproduced")
        for order in summary["orderings"]:
            self.assertEqual(order["steps"], [2, 4])
            self.assertEqual(order["settled_from_step"], 4)
            self.assertFalse(order["settled"])  # The sign changed at the last checkpoint.
        readme = (out / "README.md").read_text()
        self.assertIn("all planned runs are in", readme)
        self.assertIn("| R1 |", readme)
        self.assertGreater((out / "reproduction.png").stat().st_size, 10_000)
        self.assertGreater((out / "curves.png").stat().st_size, 10_000)

    def test_one_seed_against_the_others_does_not_settle_a_pair(self):
        def curve(*seeds):
            return {
                "steps": [1, 2, 3],
                "seeds": {str(i): c for i, c in enumerate(seeds)},
                "perplexity": np.mean(seeds, axis=0).tolist(),
            }

        rows = [{"key": k, "width": w} for k, w in (("b", 96), ("f", 64))]
        base = curve([100, 90, 80], [100, 90, 80], [100, 90, 80])
        agree = curve([95, 88, 78], [96, 89, 79], [97, 89, 79])
        # Seeds 0 and 1 behind at the end, seed 2 far ahead: the mean says "ahead".
        outlier = curve([95, 91, 81], [96, 91, 81], [60, 50, 40])
        for fixed, settled in ((agree, True), (outlier, False)):
            (o,) = orderings({"R1": rows, "curves": {"b": base, "f": fixed}})
            self.assertEqual(o["seeds"], [0, 1, 2])
            self.assertLess(o["difference"][-1], 0)
            self.assertEqual(o["settled"], settled)
        self.assertAllClose(o["final_by_seed"], [1, 1, -40])
        # Only the seeds both models have count.
        partial = {**outlier, "seeds": {"0": [95, 91, 81]}}
        (o,) = orderings({"R1": rows, "curves": {"b": base, "f": partial}})
        self.assertEqual((o["seeds"], o["settled"]), ([0], True))

    def test_no_verdict_before_every_run_is_in(self):
        out = pathlib.Path(self.get_temp_dir()) / "partial"
        _fake_runs(out, TEST, lambda m, s: 100.0, lambda m, lr, s, st: 100.0 + lr)
        # The width-w baseline with 4 heads is in R1 and in R2: neither is judged.
        shared = plan(TEST)["R1"][0].key
        next((out / "runs").glob(f"{shared}_*seed2.json")).unlink()
        main(["--preset", "test", "--output", str(out), "--summarize-only"])
        summary = json.loads((out / "reproduction.json").read_text())
        self.assertFalse(summary["complete"])
        self.assertEqual(summary["judged"], [])
        self.assertEqual(summary["verdicts"], [])
        self.assertIn("no claim is judged", (out / "README.md").read_text())

    def test_an_experiment_is_judged_once_its_own_runs_are_in(self):
        experiments = plan(TEST)
        r1_keys = {m.key for m in experiments["R1"]}
        r2_only = next(m.key for m in experiments["R2"] if m.key not in r1_keys)
        for missing, judged in ((r2_only, ["R1"]), (experiments["R1"][-1].key, ["R2"])):
            out = pathlib.Path(self.get_temp_dir()) / f"partial_{missing}"
            _fake_runs(out, TEST, lambda m, s: 100.0 + s, lambda m, lr, s, st: 100.0 + lr)
            next((out / "runs").glob(f"{missing}_*seed2.json")).unlink()
            main(["--preset", "test", "--output", str(out), "--summarize-only"])
            summary = json.loads((out / "reproduction.json").read_text())
            self.assertFalse(summary["complete"])
            self.assertEqual(summary["judged"], judged)
            claims = sorted({v["claim"][:2] for v in summary["verdicts"]})
            self.assertEqual(claims, judged)
            self.assertIn(f"({judged[0]}: complete, judged)", (out / "README.md").read_text())


class TrainingTest(tf.test.TestCase):
    @pytest.fixture(autouse=True)
    def _env(self, austen_data_dir, tmp_path, capsys):
        self.data_dir = str(austen_data_dir)
        self.tmp = tmp_path
        self.capsys = capsys

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_runs_record_curves_and_a_rerun_resumes(self):
        out = self.tmp / "out"
        argv = [
            "--preset",
            "test",
            "--output",
            str(out),
            "--work-dir",
            str(self.tmp / "work"),
            "--data-dir",
            self.data_dir,
        ]
        self.assertEqual(main([*argv, "--max-runs", "1"]), 0)
        files = sorted((out / "runs").glob("*.json"))
        self.assertLen(files, 1)
        for path in files:
            record = json.loads(path.read_text())
            self.assertEqual(record["seed"], 0)  # The sweep comes first.
            self.assertEqual([p["step"] for p in record["curve"]], [2, 4])
            self.assertEqual([p["step"] for p in record["train_curve"]], [2, 4])
            for point in record["train_curve"]:  # Full batches: exp(mean loss) = perplexity.
                self.assertAllClose(np.exp(point["loss"]), point["perplexity"], rtol=1e-4)
            self.assertTrue(np.isfinite(record["test_perplexity"]))
            # The test split is not the validation split of the curve.
            self.assertNotAlmostEqual(record["test_perplexity"], record["curve"][-1]["perplexity"])
            self.assertTrue(record["device"].startswith("CPU: "))
            self.assertEqual(record["intra_op_threads"], 0)  # No --threads: the default.
        first = {p.name: p.stat().st_mtime_ns for p in files}
        # The next run was cut off at its last checkpoint in an earlier session: it
        # starts again from step 0 (a resumed input pipeline would change its data).
        model, lr, seed = pending(TEST, plan(TEST), load_runs(out, TEST))[0]
        suffix = f"_steps{TEST.steps}_l{TEST.layers}_n{TEST.sequence_length}"
        done_dir = next(p for p in (self.tmp / "work").iterdir() if p.is_dir())
        cut_off = self.tmp / "work" / f"{run_name(model.key, lr, seed)}{suffix}"
        shutil.copytree(done_dir, cut_off)
        self.capsys.readouterr()
        self.assertEqual(main([*argv, "--max-runs", "1"]), 0)
        printed = self.capsys.readouterr().out
        self.assertEqual(printed.count("[done]"), 1)
        now = sorted((out / "runs").glob("*.json"))
        self.assertLen(now, 2)
        self.assertEqual({p.name: p.stat().st_mtime_ns for p in now if p.name in first}, first)
        readme = (out / "README.md").read_text()
        self.assertIn("2 runs finished", readme)
        self.assertTrue(list((self.tmp / "work").glob("*.log")))  # The trainer's own log.
        log = pathlib.Path(f"{cut_off}.log").read_text()
        # Trained from step 0; only the test evaluation restores its last checkpoint.
        self.assertIn("train | step:      0 | training until step", log)
        self.assertEqual(log.count("restored model from"), 1)
        self.assertNotIn(
            "--max-runs", json.loads((out / "reproduction.json").read_text())["command"]
        )

    @pytest.mark.slow  # end to end, in the full run (docs/testing.md)
    def test_workers_share_the_plan_without_training_a_run_twice(self):
        out = self.tmp / "out"
        argv = [
            "--preset",
            "test",
            "--output",
            str(out),
            "--work-dir",
            str(self.tmp / "work"),
            "--data-dir",
            self.data_dir,
            "--workers",
            "2",
            "--max-runs",
            "1",
        ]
        self.assertEqual(main(argv), 0)
        records = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
        # Each worker trained one run, and not the same one: the first model's two rates.
        self.assertEqual(sorted(r["learning_rate"] for r in records), list(TEST.learning_rates))
        self.assertEqual({r["intra_op_threads"] for r in records}, {1})
        for path in (self.tmp / "work" / "claims").glob("*.claim"):  # Every claim released.
            handle = claim(path.parent, path.name[: -len(".claim")])
            self.assertIsNotNone(handle)
            handle.close()
        self.assertNotIn(
            "--workers", json.loads((out / "reproduction.json").read_text())["command"]
        )


class ClaimTest(tf.test.TestCase):
    def test_a_claim_is_exclusive_until_released_or_its_process_is_gone(self):
        import subprocess
        import sys

        claims = pathlib.Path(self.get_temp_dir()) / "claims"
        mine = claim(claims, "run_a")
        self.assertIsNotNone(mine)
        self.assertIsNone(claim(claims, "run_a"))  # Held, here by this same process.
        holder = (
            "import sys, time, pathlib\n"
            "from headsize_tf.experiments.reproduction.scheduler import claim\n"
            "h = claim(pathlib.Path(sys.argv[1]), 'run_b')\n"
            "print('held' if h else 'refused', flush=True)\n"
            "time.sleep(60)\n"
        )
        other = subprocess.Popen(
            [sys.executable, "-c", holder, str(claims)], stdout=subprocess.PIPE, text=True
        )
        try:
            self.assertEqual(other.stdout.readline().strip(), "held")
            self.assertIsNone(claim(claims, "run_b"))  # Another live worker's.
        finally:
            other.kill()
            other.wait()
        # A worker that died (cut off) leaves no claim behind: the kernel dropped its lock.
        taken = claim(claims, "run_b")
        self.assertIsNotNone(taken)
        self.assertEqual((claims / "run_b.claim").read_text().strip(), str(os.getpid()))
        taken.close()
        mine.close()
        again = claim(claims, "run_a")  # Released by close.
        self.assertIsNotNone(again)
        again.close()


def test_each_run_line_counts_the_pending_runs_with_it(tmp_path, monkeypatch, capsys):
    from headsize_tf.experiments.reproduction import scheduler

    out = tmp_path / "out"
    pending_then = []

    def train_one(model, preset, lr, seed, data_dir, work_dir, framework):
        pending_then.append(len(pending(preset, plan(preset), load_runs(out, preset, framework))))
        return {
            "key": model.key,
            "learning_rate": lr,
            "seed": seed,
            "preset": dataclasses.asdict(preset),
            "framework": framework,
            "curve": [{"perplexity": 100.0 * lr}],
            "test_perplexity": 5.0,
            "train_seconds": 0.0,
        }

    monkeypatch.setattr(scheduler, "train_one", train_one)
    args = argparse.Namespace(
        work_dir=str(tmp_path / "work"), max_runs=2, keys=None, framework="keras3"
    )
    scheduler.run_pending(args, TEST, plan(TEST), out, tmp_path)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[run")]
    first, second = pending_then  # Each run is still pending while it trains.
    assert second == first - 1
    assert [line.split("]")[0] + "]" for line in lines] == [
        f"[run 1; {first} pending, this one included]",
        f"[run 2; {second} pending, this one included]",
    ]


def test_unknown_keys_are_one_line_naming_the_program(tmp_path, capsys):
    from headsize_tf.experiments._entry import run_main

    argv = ["--preset", "test", "--output", str(tmp_path / "out"), "--keys", "nope"]
    with pytest.raises(SystemExit) as exited:
        run_main(lambda: main(argv), "reproduction")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.count("\n") == 1
    assert err.startswith("reproduction: error: --keys nope: not a model of preset 'test'")
    assert not (tmp_path / "out").exists()
