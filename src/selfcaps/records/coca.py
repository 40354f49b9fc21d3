"""The record of CoCa (Panwar et al. 2022): contrastive capsules."""

from __future__ import annotations

from selfcaps.records import MethodRecord
from selfcaps.records.claims import Arm, Claim, Comparison, Rung

RECORD = MethodRecord(
    name="coca",
    method="selfcaps.methods.coca:CoCa",
    model_module="selfcaps.models.coca",
    models=("coca",),
    bench_datasets=("mnist5k", "mnist", "cifar10"),
    paper_results={"cifar10": 70.50},  # kNN top-1, backbone
    claim=Claim(
        statement="contrastive capsule pretraining learns features",
        source="Panwar et al. 2022, Table II: weighted kNN top-1 70.50% on CIFAR-10 after 500 "
        "epochs (backbone feature, as the reference code evaluates); the paper gives no "
        "untrained or pixel baseline, so both controls come from the same run",
        dataset="mnist5k",
        paper_dataset="cifar10",
        comparisons=(
            Comparison(
                Arm("trained", "knn_top1_backbone"),
                Arm("untrained", "knn_top1_random_init"),
                paper=(70.50, None),
            ),
            Comparison(
                Arm("trained", "knn_top1_backbone"),
                Arm("pixels", "knn_top1_pixels"),
                paper=(70.50, None),
            ),
        ),
        long=Rung("cifar10", "quick_cifar10", (), "6 epochs of CIFAR-10 (4,218 steps of 64)"),
    ),
)
