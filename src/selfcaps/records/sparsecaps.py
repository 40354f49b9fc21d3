"""The record of SparseCaps (Rawlinson et al. 2018): sparse unsupervised capsules."""

from __future__ import annotations

from selfcaps.records import MethodRecord
from selfcaps.records.claims import Arm, Claim, Comparison, Rung
from selfcaps.records.flags import CliFlag

#: ``model.variant``: the paper's network, without the mask, or trained with labels.
VARIANTS: tuple[str, ...] = ("sparse", "dense", "supervised")

RECORD = MethodRecord(
    name="sparsecaps",
    method="selfcaps.methods.sparsecaps:SparseCaps",
    model_module="selfcaps.models.sparsecaps",
    models=("sparsecaps",),
    config_check="selfcaps.config.checks.sparsecaps:check",
    flags={
        "--variant": CliFlag(
            "model.variant",
            str,
            "SparseCaps variant: sparse (the method), dense (no mask), supervised (CapsNet)",
            VARIANTS,
        )
    },
    bench_protocol="SVM (RBF) on latent capsules",
    bench_keys={
        "top1": "svm_mnist",
        "top5": None,
        "pixels": "svm_mnist_pixels",
        "random_init": None,
    },
    bench_notes={
        "variant": "variant",
        "affNIST a": "svm_affnist_a",
        "affNIST b": "svm_affnist_b",
        "affNIST data": "affnist_source",
    },
    bench_datasets=("mnist5k", "mnist"),
    summary_notes={
        "variant": "variant",
        "affNIST (a: SVM fit and tested on affNIST codes)": "svm_affnist_a",
        "affNIST (b: SVM fit on MNIST codes, tested on affNIST)": "svm_affnist_b",
        "affNIST data": "affnist_source",
    },
    claim=Claim(
        statement="sparse capsules generalise better to affine transformations than dense",
        source="Rawlinson et al. 2018, Table 1: RBF SVM fit and tested on disjoint affNIST "
        "codes (protocol a), 90.12% sparse vs 60.63% unmasked, trained on MNIST only; the SVM "
        "reads the unmasked latent capsules v (section 2.3; the reference classifier); here "
        "affNIST is the affnist_like stand-in unless the official files are present",
        dataset="mnist5k",
        paper_dataset="mnist",
        comparisons=(
            Comparison(
                Arm("sparse", "svm_affnist_a", ("--variant", "sparse")),
                Arm("dense", "svm_affnist_a", ("--variant", "dense")),
                paper=(90.12, 60.63),
            ),
        ),
        args=("--epochs", "5"),  # 560 steps a run (quick_mnist5k: 15): 6 runs fit the suite
        long=Rung("mnist", "quick_long", (), "3 epochs of full MNIST (5,061 steps of 32)"),
    ),
)
