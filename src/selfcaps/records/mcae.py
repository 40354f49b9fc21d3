"""The record of MCAE (Everett et al. 2025): masked capsule autoencoders."""

from __future__ import annotations

from selfcaps.records import MethodRecord
from selfcaps.records.claims import Arm, Claim, Comparison, Rung
from selfcaps.records.flags import CliFlag

RECORD = MethodRecord(
    name="mcae",
    method="selfcaps.methods.mcae:MCAE",
    model_module="selfcaps.models.mcae",
    models=("mcae",),
    config_check="selfcaps.config.checks.mcae:check",
    flags={
        "--pretrain-epochs": CliFlag(
            "trainer.epochs", int, "MCAE pretraining epochs (0: no pretraining)"
        ),
        "--finetune-epochs": CliFlag("eval.finetune_epochs", int, "MCAE finetuning epochs"),
        "--mask-ratio": CliFlag("model.mask_ratio", float, "MCAE fraction of masked patches"),
        "--backbone": CliFlag("model.backbone", str, "MCAE backbone", ("convmixer", "vit")),
    },
    # ``--epochs`` counts MCAE's pretraining epochs (as ``--pretrain-epochs``); with 0 its
    # finetuning is skipped too and the untrained class capsules are tested.
    # ``--pretrain-epochs 0`` (no pretraining, then the usual finetuning: the no-pretraining
    # baseline of its claim) and an explicit ``--finetune-epochs N`` are unaffected.
    no_training={"eval.finetune_epochs": 0},
    bench_protocol="finetune (class capsules)",
    bench_keys={
        "top1": "finetune_top1",
        "top5": "finetune_top5",
        "pixels": None,
        "random_init": None,
    },
    bench_notes={
        "pretraining epochs": "pretrain_epochs",
        "finetuning epochs": "finetune_epochs",
    },
    bench_datasets=("cifar10", "fashion_mnist", "cifar100"),
    # Everett et al., Table 1 (ConvMixer, 50 + 350 epochs).
    paper_results={
        "mnist": 99.6,
        "fashion_mnist": 95.0,
        "cifar10": 92.8,
        "smallnorb": 95.0,
    },
    claim=Claim(
        statement="masked capsule pretraining improves the finetuned classifier",
        source="Everett et al. 2025, section 4.3.1 and Table 1 (pretrained 92.8% on CIFAR-10; "
        "the no-pretraining column of Table 1 is lost from our copy of the paper) and "
        "Figure 6; both arms get the same finetuning, the control with no pretraining epochs",
        dataset="cifar10",
        paper_dataset="cifar10",
        comparisons=(
            Comparison(
                Arm("pretrained", "finetune_top1"),
                Arm("scratch", "finetune_top1", ("--pretrain-epochs", "0")),
                paper=(92.8, None),
            ),
        ),
        long=Rung(
            "cifar10",
            "cifar10_lf10",
            (),
            "20 pretraining epochs on 45,000 images, then 80 finetuning epochs on 10% of the "
            "labels; each seed pretrains its own network",
            metric_suffix="_lf10",
        ),
    ),
)
