r"""SparseCaps: does the way protocol (a)'s affNIST halves are drawn move sparse - dense?

For each place where the reference code and selfcaps differ, the question is its
effect on the dense-vs-sparse gap. How the fit and test images of protocol (a) are
drawn needs no training: this script reloads finished runs of one ladder rung
(``<rung>/<variant>_seed<S>`` directories written by ``sparsecaps_ladder.py``),
re-runs the method's own evaluation on ``affnist_like`` once per
``eval.affnist_halves`` mode (:mod:`selfcaps.methods.sparsecaps.affnist_halves`; a run whose
``metrics.json`` already used the mode is read, not re-run), and prints
``svm_affnist_a`` per feature, mean +- sd over seeds, and sparse - dense paired by
seed. Results go to ``<rung>/halves.json`` and ``<rung>/halves.md`` (results already in
``halves.json`` are kept: delete it after the stand-in changes).

Example:
    python experiments/sparsecaps_affnist_halves.py LADDER/steps1687 --data-root DIR \
        --modes permutation file_order same_digits --threads 1
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
from omegaconf import OmegaConf

from selfcaps.config.loading import load_yaml
from selfcaps.data.affine import AFFNIST_VERSIONS
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.methods import get_method
from selfcaps.methods.sparsecaps.svm import svm_metric

# feature name -> kind; values are read with svm_metric, so runs and halves.json files from
# before the headline read v (svm_affnist_a_unmasked) give the same columns
FEATURES = {"v'": "masked", "v": "unmasked"}
PIXELS = "svm_affnist_a_pixels"


def value(run: dict[str, float], name: str) -> float:
    """Protocol (a)'s accuracy of feature ``name`` (``v`` or ``v'``) in a run's results."""
    found = svm_metric(run, "affnist_a", FEATURES[name])
    if found is None:
        raise KeyError(f"no svm_affnist_a value for {name} in {sorted(run)}")
    return found


def recorded(run: Path, mode: str) -> dict[str, float] | None:
    """The run's ``metrics.json`` values if its own evaluation already used ``mode``."""
    m = json.loads((run / "metrics.json").read_text())
    used = m.get("affnist_halves", "permutation")  # runs before the key existed: permutation
    # only the current stand-in (32 versions per digit): older runs were evaluated on another
    source = str(m.get("affnist_source", ""))
    if used != mode or not source.startswith(f"affnist_like ({AFFNIST_VERSIONS} versions"):
        return None
    return {k: float(v) for k, v in m.items() if k.startswith("svm_affnist_a")}


def evaluate(run: Path, mode: str, data_root: str, pixels: bool) -> dict[str, float]:
    """The run's own evaluation (``best.ckpt``) with ``eval.affnist_halves=mode``."""
    cfg = OmegaConf.create(load_yaml(run / "config.yaml"))
    cfg.data.root = data_root
    cfg.eval.affnist = "affnist_like"
    cfg.eval.affnist_halves = mode
    cfg.eval.baselines = pixels
    method = get_method(cfg.method)(cfg)
    method.validate_config(cfg)
    method.load_state_dict(load_checkpoint(run / "checkpoints" / "best.ckpt")["state_dict"])
    method.eval()
    train_tf, eval_tf = method.build_transforms()
    dm = SelfcapsDataModule(cfg, train_tf, eval_tf, root_source="--data-root")
    with torch.no_grad():
        metrics = method.evaluate(dm)
    return {k: float(v) for k, v in metrics.items() if k.startswith("svm_affnist_a")}


def mean_sd(values: list[float]) -> str:
    """``mean +- sd`` (sd over seeds, n - 1)."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} +- {sd:.2f}"


def table(results: dict[str, dict[str, dict[str, float]]], seeds: list[int]) -> str:
    """Markdown: one row per mode; sparse and dense per feature, and paired differences."""
    cols = ["halves", "sparse v'", "sparse v", "dense v", "sparse v' - dense", "sparse v - dense"]
    lines = ["| " + " | ".join([*cols, "pixels"]) + " |", "|" + "---|" * 7]
    for mode, runs in results.items():
        dense = [value(runs[f"dense_seed{s}"], "v") for s in seeds]
        cells = [mode]
        sparse = [runs[f"sparse_seed{s}"] for s in seeds]
        per_feature = {name: [value(r, name) for r in sparse] for name in FEATURES}
        cells += [mean_sd(per_feature["v'"]), mean_sd(per_feature["v"]), mean_sd(dense)]
        for name in ("v'", "v"):
            cells.append(mean_sd([a - b for a, b in zip(per_feature[name], dense, strict=True)]))
        pix = [r[PIXELS] for r in runs.values() if PIXELS in r]
        cells.append(f"{pix[0]:.2f}" if pix else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    """Evaluate every run of the rung under every mode; write and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("rung", type=Path, help="a ladder rung: <rung>/<variant>_seed<S>/")
    p.add_argument("--data-root", required=True)
    p.add_argument("--modes", nargs="+", default=["permutation", "file_order", "same_digits"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    out_json = args.rung / "halves.json"
    results: dict[str, dict[str, dict[str, float]]] = (
        json.loads(out_json.read_text()) if out_json.exists() else {}
    )
    for mode in args.modes:
        runs = results.setdefault(mode, {})
        for variant in ("sparse", "dense"):
            for seed in args.seeds:
                name = f"{variant}_seed{seed}"
                if name not in runs:
                    first = not any(PIXELS in r for r in runs.values())
                    runs[name] = recorded(args.rung / name, mode) or evaluate(
                        args.rung / name, mode, args.data_root, first
                    )
                    out_json.write_text(json.dumps(results, indent=1))
                    print(mode, name, {k: round(v, 2) for k, v in runs[name].items()}, flush=True)
    md = table(results, args.seeds)
    (args.rung / "halves.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
