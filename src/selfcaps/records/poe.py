"""The record of PoE (Hauser 2019): capsules as a product of experts (contrastive divergence)."""

from __future__ import annotations

from selfcaps.records import MethodRecord
from selfcaps.records.claims import Arm, Claim, Comparison, Rung

RECORD = MethodRecord(
    name="poe",
    method="selfcaps.methods.poe:PoE",
    model_module="selfcaps.models.poe",
    models=("poe",),
    config_check="selfcaps.config.checks.poe:check",
    bench_protocol="generation (class purity of samples)",
    bench_keys={
        "top1": "purity_mean",
        "top5": None,
        "pixels": None,
        "random_init": "purity_mean_untrained",
    },
    bench_notes={
        "stages completed": "stages_completed",
        "classes covered": "purity_classes_covered",
        "untrained covers": "purity_classes_covered_untrained",
        "restricted purity": "purity_mean_restricted",
        "restricted classes covered": "purity_classes_covered_restricted",
        "judge test top-1": "judge_test_top1",
        "reconstruction spread": "recon_caps_spread",
        "capsule length": "caps_length",
        "its spread over inputs": "caps_length_spread",
        "free-energy gap": "free_energy_gap",
        "untrained gap": "free_energy_gap_untrained",
    },
    bench_datasets=("mnist5k", "mnist", "fashion_mnist"),
    # A constant generator is 100% pure, and an untrained capsule layer nearly is: the
    # console leads with the classes the capsules cover, which purity alone cannot fake.
    summary_protocol="classes covered by the capsules' samples",
    summary_keys={
        "top1": "purity_classes_covered",
        "random_init": "purity_classes_covered_untrained",
    },
    summary_notes={
        "mean purity of samples": "purity_mean",
        "untrained purity": "purity_mean_untrained",
        "restricted domain: classes covered": "purity_classes_covered_restricted",
        "restricted domain: purity": "purity_mean_restricted",
        "stages completed": "stages_completed",
        "judge test top-1": "judge_test_top1",
        "free-energy gap": "free_energy_gap",
        "untrained gap": "free_energy_gap_untrained",
    },
    headline_is_accuracy=False,
    claim=Claim(
        statement="single capsules generate specific objects",
        source="Hauser 2019, Figure 2 (qualitative: 'each of the individual capsules learn "
        "specific objects'); measured as the number of digit classes that are some capsule's "
        "majority class in its samples (judged by a classifier), against untrained W and U",
        dataset="mnist5k",
        paper_dataset="mnist",
        comparisons=(
            Comparison(
                Arm("trained", "purity_classes_covered"),
                Arm("untrained", "purity_classes_covered_untrained"),
            ),
        ),
        long=Rung(
            "mnist",
            "paper_mnist54k",
            (),
            "the paper's method on all 54,000 MNIST training images, 1 + 1 + 1 epochs",
        ),
    ),
)
