"""PoE capsules: how many pose dimensions a capsule uses, and which samples miss its class.

For each finished ``poe`` run (its ``best.ckpt``, the run's own judge retrained as its
evaluation trains it, so the purity it recomputes is the run's ``purity_mean_restricted``):

- the rank-one share of every capsule's encoder map ``W_j`` and decoder map ``U_j``
  (``selfcaps.methods.poe.geometry``): 1 when a capsule's 16 pose dimensions act as one; the
  same for the untrained layer (``_untrained``, as the run's evaluation draws it); and how
  closely ``U_j``'s top direction follows ``m_j`` (``decoder_axis_cos``, mean ``|cos|``);
- where the test images' own poses lie: the cosine of each image's longest capsule's pose to
  that capsule's mean pose ``m_j`` (quantiles), and, weighting every pose by its length, the
  share within ``|cos| >= 0.9`` of the line through ``m_j`` and the share on its far side
  (``cos < 0``, outside the restricted half-sphere);
- which restricted-domain samples the judge gives the capsule's majority class, per bin of
  the draw's cosine to ``m_j`` (``--edges``, default 0.1 0.2 0.3), with each bin's share of the
  draws, and split at the first edge (``agreement_near_equator``, ``agreement_off_equator``);
- the complete domain's draws around each pole of ``m_j`` (``|cos| >=`` the first edge), each
  read for its own majority class (``pole_purity_near`` / ``_far``, and how many capsules
  generate different digits at the two poles, ``pole_majorities_differ``).

Prints one JSON line per run and writes ``RUN_DIR/pose_geometry.json``; ``metrics.json`` is
not touched.

Usage::

    PYTHONPATH=src python experiments/poe_pose_geometry.py RUN_DIR [RUN_DIR ...]
        [--edges 0.1 0.2 0.3] [--data-root DIR] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from selfcaps.engine.atomic import atomic_write_json
from selfcaps.engine.progress import set_progress
from selfcaps.methods.poe.geometry import (
    angle_agreement,
    angle_bins,
    decoder_axis_alignment,
    mean_pose_cos,
    pole_purity,
    pose_angles,
    rank_metrics,
)
from selfcaps.methods.poe.judge import capsule_predictions, class_purity, train_judge
from selfcaps.run.evaluate import load_run_dir


def pose_geometry(run_dir: Path, edges: list[float], data_root: str | None) -> dict[str, Any]:
    """The rank-one shares, the test poses' angles and the samples' agreement by angle."""
    method, dm = load_run_dir(run_dir, data_root, method="poe")
    net, cfg = method.poe, method.cfg
    out: dict[str, Any] = rank_metrics(net) | rank_metrics(method.untrained_network(), "_untrained")
    axis = decoder_axis_alignment(net)
    out["decoder_axis_cos"], out["decoder_axis_cos_min"] = float(axis.mean()), float(axis.min())
    cos, length = pose_angles(net, dm.eval_loader("test"), cfg)
    own = cos.gather(1, length.argmax(1, keepdim=True)).flatten()
    q = torch.tensor([0.05, 0.25, 0.5, 0.75, 0.95])
    out["longest_pose_cos_quantiles"] = [round(v, 4) for v in torch.quantile(own, q).tolist()]
    weight = length / length.sum()
    out["pose_on_line_share"] = float((weight * (cos.abs() >= 0.9)).sum())
    out["pose_far_side_share"] = float((weight * (cos < 0)).sum())
    out["test_images"] = len(own)
    judge, top1 = train_judge(dm, cfg, method.info, method.device)
    with torch.no_grad():
        draws, preds = capsule_predictions(net, judge, cfg.samples, method.device, True)
    majority = torch.tensor([class_purity(column)[1] for column in preds.T])  # as the run's
    agrees = preds == majority
    draw_cos = mean_pose_cos(net, draws)
    e = torch.tensor(edges)
    out["judge_test_top1"] = top1
    out["purity_mean_restricted"] = 100.0 * float(agrees.float().mean())
    out["angle_edges"] = edges
    out["angle_agreement"] = angle_agreement(draw_cos.flatten(), agrees.flatten(), e)
    near, off = angle_agreement(draw_cos.flatten(), agrees.flatten(), e[:1])
    out["agreement_near_equator"], out["agreement_off_equator"] = near, off
    bins = angle_bins(draw_cos.flatten(), e)
    out["angle_draw_share"] = [float((bins == k).float().mean()) for k in range(len(edges) + 1)]
    with torch.no_grad():  # the complete domain: both poles of m_j
        draws, preds = capsule_predictions(net, judge, cfg.samples, method.device, False)
    out |= pole_purity(mean_pose_cos(net, draws), preds, edges[0])
    return out


def main() -> None:
    """Read each run; print one JSON line per run."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", type=Path, nargs="+")
    p.add_argument("--edges", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    p.add_argument("--data-root", default=None)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    if args.edges != sorted(args.edges):
        p.error(f"--edges: expected increasing values, got {args.edges}")
    torch.set_num_threads(args.threads)
    set_progress(False)
    for run_dir in args.run_dirs:
        row = pose_geometry(run_dir, args.edges, args.data_root)
        atomic_write_json(run_dir / "pose_geometry.json", row)
        print(json.dumps({"run": str(run_dir), **row}), flush=True)


if __name__ == "__main__":
    main()
