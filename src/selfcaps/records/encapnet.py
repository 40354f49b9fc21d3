"""The record of EncapNet (Li et al. 2018): master/aide capsules with feedback agreement units."""

from __future__ import annotations

from selfcaps.records import MethodRecord
from selfcaps.records.claims import Arm, Claim, Comparison, Rung
from selfcaps.records.flags import CliFlag, on_off

RECORD = MethodRecord(
    name="encapnet",
    method="selfcaps.methods.encapnet:EncapNetMethod",
    model_module="selfcaps.models.encapnet",
    models=(
        "encapnet",
        "encapnet18",
        "encapnet18_resnet",
        "table1_capnet_dynamic",
        "table1_capnet_em",
        "table1_capnet_em_procedure1",
        "table1_cnn",
        "table1_encapnet_master",
        "table1_encapnet_master_aide",
    ),
    config_check="selfcaps.config.checks.encapnet:check",
    flags={
        "--variant": CliFlag("model.variant", str, "EncapNet capConvs", ("master", "master_aide")),
        "--ot": CliFlag("loss.ot", on_off, "feedback agreement units: on|off"),  # type: ignore[arg-type]
    },
    bench_protocol="supervised (test top-1)",
    bench_keys={
        "top1": "test_top1",
        "top5": "test_top5",
        "pixels": None,
        "random_init": None,
    },
    bench_notes={"variant": "variant", "OT": "ot"},
    bench_datasets=("cifar10", "cifar100", "svhn"),
    embedded_data=None,  # its total stride (8) does not divide mnist5k's 28 pixels
    # Li et al. 2018, Table 4, row "EncapNet+" (100 - error): "+ means mild augmentation while
    # ++ stands for strong augmentation", so the row without a mark (4.55, 26.77, 2.01) is
    # without augmentation, and our training recipe (pad-and-crop, flips) is the mild one.
    paper_results={"cifar10": 96.87, "cifar100": 75.99, "svhn": 98.36},
    claim=Claim(
        statement="the feedback unit and the aide branch lower the error",
        source="Li et al. 2018, Table 3 and section 5.1: master alone 9.83% error, "
        "master/aide v3 7.41%; with skip connections 5.82%, with the OT unit 4.55% "
        "(shown here as top-1 = 100 - error)",
        dataset="cifar10",
        paper_dataset="cifar10",
        comparisons=(
            Comparison(
                Arm("OT on", "test_top1", ("--variant", "master_aide", "--ot", "on")),
                Arm("OT off", "test_top1", ("--variant", "master_aide", "--ot", "off")),
                paper=(95.45, 94.18),
            ),
            Comparison(
                Arm("master/aide", "test_top1", ("--variant", "master_aide", "--ot", "off")),
                Arm("master", "test_top1", ("--variant", "master", "--ot", "off")),
                paper=(92.59, 90.17),
            ),
        ),
        args=("--epochs", "1"),  # 3 arms x seeds: one epoch (351 steps) each fits the suite
        long=Rung("cifar10", "quick", (), "3 epochs (1,053 steps of 128)"),
    ),
)
