"""The ConvMixer backbone's cost per image of each MCAE `paper` preset, against the paper's Table 2.

Table 2 of "Masked Capsule Autoencoders" gives "the mFLOPS (Total Floating Point Operations
/ 10^6) to process one image through the backbone", "calculated using the FVCore library".
fvcore counts one multiply-add as one FLOP and, besides convolutions, counts BatchNorm: 2
FLOPs per element in eval mode, 5 in training mode (``fvcore/nn/jit_handles.py``,
``batchnorm_flop_jit``); GELU and the residual additions are not counted. The project's
counter (:func:`selfcaps.eval.profile.count_flops`) counts 2 FLOPs per multiply-add and
convolutions only, so the multiply-adds are its count / 2; the BatchNorm elements are
``(1 + 2 * depth) * positions * width`` (the stem's and two per block; checked against
hooks in ``tests/methods/test_mcae.py``).

    python benchmarks/mcae_backbone_flops.py
"""

from __future__ import annotations

import torch

from selfcaps.config.loading import load_config
from selfcaps.eval.profile import count_flops
from selfcaps.methods.mcae.method import _input_size
from selfcaps.models.mcae import ConvMixerPrimaryCaps

#: preset: (image channels, the dataset, Table 2's ConvMixer mFLOPs)
TABLE_2 = {
    "paper_mnist": (1, "MNIST", 0.5),
    "paper_fashion_mnist": (1, "Fashion-MNIST", 0.5),
    "paper_smallnorb": (1, "smallNORB", 2.0),
    "paper": (3, "CIFAR-10", 3.0),
    "paper_imagenette": (3, "Imagenette", 13.0),
    "paper_imagewoof": (3, "Imagewoof", 13.0),
}


def main() -> None:
    torch.set_num_threads(1)
    print(
        "| preset | dataset | input | width, kernel, patch | multiply-adds (M) | fvcore, eval "
        "(M) | fvcore, training (M) | Table 2 (mFLOPs) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for preset, (chans, dataset, table) in TABLE_2.items():
        cfg = load_config("mcae", preset)
        m, size = cfg.model, _input_size(cfg)
        mixer = ConvMixerPrimaryCaps(
            chans, m.patch_size, m.dim, m.depth, m.kernel_size, m.primary_caps, m.caps_dim
        ).mixer
        macs = count_flops(mixer.forward_features, torch.randn(1, chans, size, size)) / 2
        norm = (1 + 2 * m.depth) * (size // m.patch_size) ** 2 * m.dim
        print(
            f"| `{preset}` | {dataset} | {chans}x{size}x{size} | {m.dim}, {m.kernel_size}, "
            f"{m.patch_size} | {macs / 1e6:.2f} | {(macs + 2 * norm) / 1e6:.2f} | "
            f"{(macs + 5 * norm) / 1e6:.2f} | {table:g} |"
        )


if __name__ == "__main__":
    main()
