"""The end-of-run summary is a few lines however many metrics a run writes."""

from pathlib import Path

import pytest

from selfcaps.records import get_record, list_records
from selfcaps.run.summary import format_summary


def test_summary_shows_headline_and_notes_not_every_metric():
    metrics = {f"purity_capsule_{j:02d}": 50.0 + j for j in range(60)}
    metrics |= {"method": "poe", "dataset": "mnist5k", "purity_mean": 61.25,
                "purity_mean_untrained": 99.5, "stages_completed": 3, "epochs_trained": 6,
                "train_time_s": 90.0, "best_checkpoint": "last"}  # fmt: skip
    text = format_summary(
        metrics,
        Path("runs/poe"),
        "class purity",
        {"top1": "purity_mean", "top5": None, "random_init": "purity_mean_untrained"},
        {"stages completed": "stages_completed", "absent note": "no_such_key"},
    )
    lines = text.strip().splitlines()
    assert len(lines) == 7, text
    assert "class purity                 61.25" in text
    assert "baseline: untrained network  99.50" in text
    assert "stages completed             3" in text
    assert "note: class purity (61.25) is no better than the untrained network (99.50)" in text
    assert "purity_capsule" not in text and "absent note" not in text
    assert "trained 6 epochs in 1.5 min" in text and "runs/poe/metrics.json" in text


#: Measured on an untrained network where its method has no untrained baseline to equal:
#: ``selfcaps run sparsecaps --data mnist5k --epochs 0 --threads 1`` (2026-11-29).
_MEASURED_UNTRAINED = {"sparsecaps": {"svm_mnist": 20.80, "svm_mnist_pixels": 96.60}}


#: What an untrained network scores, per headline: the untrained baseline where the
#: method measures one (the same network class, untrained: equal up to its random draw),
#: a measured number (above), else guessing (MCAE and EncapNet with ``--epochs 0`` test
#: untrained class capsules).
def _untrained_metrics(record, chance):
    protocol, keys, notes = record.headline()
    m = {"method": record.name, "dataset": "mnist5k", "epochs_trained": 0,
         "train_time_s": 0.0, "best_checkpoint": "last (no validation ran)"}  # fmt: skip
    for name, base in (("top1", "random_init"), ("top5", "random_init_top5")):
        if keys.get(name):
            m[keys[name]] = float(chance if name == "top1" else 5 * chance)
        if keys.get(name) and keys.get(base):
            m[keys[base]] = m[keys[name]]
    m.update(_MEASURED_UNTRAINED.get(record.name, {}))
    return protocol, keys, notes, m


@pytest.mark.parametrize("record", list_records(), ids=lambda r: r.name)
def test_no_headline_reads_as_success_for_an_untrained_network(record):
    chance = 10.0  # ten classes
    protocol, keys, notes, m = _untrained_metrics(record, chance)
    if record.name == "poe":  # what an untrained PoE printed: 100% pure, one class covered
        m.update(purity_classes_covered=1, purity_classes_covered_untrained=1,
                 purity_mean=100.0, purity_mean_untrained=100.0)  # fmt: skip
    text = format_summary(m, Path("r"), protocol, keys, notes,
                          chance if record.headline_is_accuracy else None)  # fmt: skip
    headline = text.splitlines()[2]
    assert "100.00" not in headline, text  # no maxed-out number leads the summary
    for name in ("top1", "top5"):
        if keys.get(name):
            label = ("{protocol}" if name == "top1" else "{protocol}, top-5").format(
                protocol=protocol
            )
            assert f"note: {label} (" in text and "is no better than" in text, text


def test_poe_leads_with_classes_covered_not_purity():
    protocol, keys, notes = get_record("poe").headline()
    m = {"method": "poe", "dataset": "mnist5k", "purity_mean": 100.0, "epochs_trained": 6,
         "purity_mean_untrained": 100.0, "purity_classes_covered": 1, "train_time_s": 6.0,
         "purity_classes_covered_untrained": 1, "best_checkpoint": "x"}  # fmt: skip
    lines = format_summary(m, Path("r"), protocol, keys, notes).splitlines()
    assert lines[2].split() == ["classes", "covered", "by", "the", "capsules'", "samples", "1"]
    assert any("mean purity of samples" in x and "100.00" in x for x in lines)
    assert "note: classes covered by the capsules' samples (1) is no better than the " \
        "untrained network (1)" in "\n".join(lines)  # fmt: skip


def test_top5_below_its_baselines_is_said():
    protocol, keys, notes = get_record("coca").headline()
    m = {"method": "coca", "dataset": "mnist5k", "knn_top1_backbone": 94.0,
         "knn_top5_backbone": 99.2, "knn_top1_pixels": 91.5, "knn_top5_pixels": 99.7,
         "knn_top1_random_init": 89.0, "knn_top5_random_init": 99.7, "epochs_trained": 16,
         "train_time_s": 60.0, "best_checkpoint": "x"}  # fmt: skip
    text = format_summary(m, Path("r"), protocol, keys, notes, 10.0)
    assert "baseline: raw pixels, top-5         99.70" in text, text
    assert "baseline: untrained network, top-5  99.70" in text, text
    assert "note: kNN, top-5 (99.20) is no better than raw pixels (99.70) and the " \
        "untrained network (99.70)" in text  # fmt: skip
    assert "note: kNN (" not in text  # the top-1 beats both
    assert "chance" not in text  # shown only for a headline without other baselines
