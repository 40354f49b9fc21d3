"""PoE capsules: one trained run's samples under both readings of section 4.2's generation.

The paper (section 4.2) samples capsule ``j`` "with the other 19 capsules having 0 as their
input" (``model.generation=paper``); ours routes capsule ``j`` alone (``alone``). This script
loads a run directory's ``best.ckpt``, trains the run's judge once, and prints, for both
readings: the mean routing coefficient the sampled capsule gets in ``U``'s routing, the
per-capsule class purity of the samples, the classes covered, and the same for the
restricted domain; and the sign statistics of the autoencoder's code on up to 1,000 test
images (share of positive entries; length of the mean primary capsule relative to the mean
length, 1 when every image gives the same direction). It also writes
``figures/samples_<reading>[_restricted].png``.

Usage::

    PYTHONPATH=src python experiments/poe_generation_readings.py RUN_DIR [--data-root DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from omegaconf import OmegaConf

from selfcaps.caps import squash
from selfcaps.config.loading import load_yaml
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.data.paths import resolve_data_root
from selfcaps.engine.checkpoints import load_checkpoint
from selfcaps.methods import get_method
from selfcaps.methods.poe.judge import purity_metrics, train_judge
from selfcaps.viz import render_figure
from selfcaps.viz.figures import ImageGrid


@torch.no_grad()
def active_coefficient(net: torch.nn.Module, capsule: int, draws: torch.Tensor) -> float:
    """Mean coefficient ``e_ji`` of the sampled capsule when all 20 are routed (paper)."""
    y = draws.new_zeros(draws.shape[0], net.num_caps, net.out_dim)
    y[:, capsule] = squash(draws)
    _, _, e = net.decoder.route(y)
    return float(e[:, capsule].mean())


@torch.no_grad()
def code_statistics(net: torch.nn.Module, loader: object, limit: int = 1000) -> dict[str, float]:
    """Share of positive code entries; |mean primary capsule| / mean |primary capsule|."""
    codes = []
    for x, _ in loader:  # type: ignore[attr-defined]
        codes.append(net.ae.encode(x))
        if sum(len(c) for c in codes) >= limit:
            break
    code = torch.cat(codes)[:limit]
    caps = net.code_to_capsules(code)  # (B, 576, 8), centred if the run centres
    ratio = caps.mean(0).norm(dim=-1) / caps.norm(dim=-1).mean(0).clamp_min(1e-12)
    return {
        "code_positive_share": float((code > 0).double().mean()),
        "mean_capsule_length_ratio": float(ratio.mean()),
        "images": float(code.shape[0]),
    }


def main() -> None:
    """Parse arguments, evaluate both readings, print JSON."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--data-root", default=None)
    args = p.parse_args()
    cfg = OmegaConf.create(load_yaml(args.run_dir / "config.yaml"))
    cfg.data.root, source = resolve_data_root(args.data_root, cfg.data.root)
    method = get_method(cfg.method)(cfg)
    ckpt = load_checkpoint(args.run_dir / "checkpoints" / "best.ckpt")
    method.load_state_dict(ckpt["state_dict"])
    method.eval()
    train_tf, eval_tf = method.build_transforms()
    dm = SelfcapsDataModule(method.cfg, train_tf, eval_tf, root_source=source)
    dm.setup("fit")
    judge, judge_acc = train_judge(dm, method.cfg, method.info, method.device)
    net = method.poe
    g = torch.Generator().manual_seed(0)
    draws = torch.randn(200, net.num_caps, net.out_dim, generator=g)
    out: dict[str, object] = {"judge_test_top1": judge_acc}
    out.update(code_statistics(net, dm.eval_loader("test")))
    coef = [active_coefficient(net, j, draws[:, j]) for j in range(net.num_caps)]
    out["paper_active_coefficient_mean"] = sum(coef) / len(coef)
    out["paper_active_coefficient_range"] = [min(coef), max(coef)]
    for reading in ("paper", "alone"):
        net.generation = reading
        with torch.no_grad():
            for restricted in (False, True):
                suffix = "_restricted" if restricted else ""
                m = purity_metrics(
                    net, judge, method.cfg.samples, method.device, suffix, restricted
                )
                for key in ("purity_mean", "purity_classes_covered", "purity_majority_classes"):
                    out[f"{reading}_{key}{suffix}"] = m[key + suffix]
                grid = net.sample_grid(int(cfg.samples.rows), int(cfg.samples.seed), restricted)
                name = f"samples_{reading}{suffix}.png"
                render_figure(ImageGrid(grid, nrow=net.num_caps), args.run_dir / "figures" / name)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
