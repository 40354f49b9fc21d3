"""The results registry: validation, config hashes that catch changed presets, generated docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from selfcaps.cli import config as config_module
from selfcaps.cli.main import main
from selfcaps.cli.presets import config_text, preset_source
from selfcaps.cli.registry import (
    DEFAULT_REGISTRY,
    RegistryError,
    arm_config_hash,
    check_hashes,
    config_hash,
    load_registry,
)
from selfcaps.cli.report import doc_files, render_table, update_text

ROOT = Path(__file__).resolve().parents[2]


def _row(**changes):
    row = {
        "id": "x.claim", "kind": "paired", "tables": ["t"], "method": "coca", "what": "w",
        "comparison": "a vs b", "rung": "short", "budget": "1 epoch", "dataset": "mnist5k",
        "metric": "knn_top1_backbone",
        "treatment": {"label": "a", "preset": "quick", "overrides": [], "values": [3.0, 4.0, 3.5]},
        "control": {"label": "b", "preset": "quick", "overrides": [], "values": [1.0, 1.5, 1.0]},
        "seeds": [0, 1, 2], "config_hash": arm_config_hash("coca", "quick", []),
        "command": "selfcaps run coca --seed S", "commit": "abc", "date": "2026-11-26",
        "cores": 2, "threads": 1,
    }  # fmt: skip
    row.update(changes)
    return row


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(rows, sort_keys=False))
    return path


def test_the_repository_registry_is_current_or_marked_stale():
    rows = load_registry(ROOT / DEFAULT_REGISTRY)
    assert len(rows) >= 10
    assert check_hashes(rows) == []


def test_every_generated_table_in_the_docs_matches_the_registry():
    rows = load_registry(ROOT / DEFAULT_REGISTRY)
    shown = 0
    for f in doc_files(ROOT):
        text = f.read_text()
        assert update_text(text, rows) == text, f"{f} is out of date: run `selfcaps report`"
        shown += text.count("<!-- registry:")
    assert shown >= 5  # README, results and claims pages carry generated tables


def _mutated(method: str, preset: str, old: str, new: str):
    """``preset_source`` with ``old`` replaced by ``new`` in one preset's text."""

    def source(m: str, p: str) -> tuple[str, str]:
        name, text = preset_source(m, p)
        return name, text.replace(old, new) if (m, p) == (method, preset) else text

    return source


def test_a_changed_preset_makes_the_rows_behind_it_stale(monkeypatch):
    # The review's mutation: the quick preset's NT-Xent temperature changed, no test noticed.
    text = config_text("coca_quick.yaml")
    assert "temperature: 0.5" in text

    monkeypatch.setattr(
        config_module,
        "preset_source",
        _mutated("coca", "quick", "temperature: 0.5", "temperature: 0.7"),
    )
    rows = load_registry(ROOT / DEFAULT_REGISTRY)
    stale = check_hashes(rows)
    assert any(p.startswith("coca.claim.short.untrained:") for p in stale)
    assert not any(p.startswith("mcae.") for p in stale)  # other presets stay free


def test_the_knn_temperature_is_pinned_too(monkeypatch):
    assert config_text("coca_quick.yaml").count("knn_t: 0.2") == 2  # monitor and eval

    monkeypatch.setattr(
        config_module, "preset_source", _mutated("coca", "quick", "knn_t: 0.2", "knn_t: 0.3")
    )
    assert any(p.startswith("coca.") for p in check_hashes(load_registry(ROOT / DEFAULT_REGISTRY)))


def test_hash_ignores_seed_and_data_root_only():
    a = config_hash({"seed": 0, "data": {"root": "/x", "name": "m"}, "trainer": {"threads": 1}})
    b = config_hash({"seed": 7, "data": {"root": "/y", "name": "m"}, "trainer": {"threads": 1}})
    c = config_hash({"seed": 0, "data": {"root": "/x", "name": "m"}, "trainer": {"threads": 2}})
    assert a == b != c
    assert arm_config_hash("coca", "quick", ["seed=3"]) == arm_config_hash("coca", "quick", [])


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"seeds": [0, 1]}, r"values: expected one number per seed \(2\)"),
        ({"kind": "triple"}, "kind: expected paired or single"),
        ({"comparison": None}, "needs comparison"),
        ({"colour": "red"}, "unknown field"),
        ({"arm": {"label": "a", "preset": "quick", "values": [1, 2, 3]}}, "no arm"),
        ({"what": "share within |cos| >= 0.9"}, r"'\|' in what \(a table cell\)"),
        ({"note": "a | b", "comparison": "x|y"}, r"'\|' in comparison, note"),
        (
            {"treatment": {"label": "|x|", "preset": "quick", "values": [1, 2, 3]}},
            r"'\|' in '\|x\|' label",
        ),
    ],
)
def test_bad_rows_are_refused_with_the_row_named(tmp_path, change, match):
    path = _write(tmp_path, [_row(**change)])
    with pytest.raises(RegistryError, match=match) as err:
        load_registry(path)
    assert "row 0" in str(err.value)


def test_missing_fields_and_repeated_ids_are_refused(tmp_path):
    row = _row()
    del row["commit"]
    with pytest.raises(RegistryError, match=r"missing field.*commit"):
        load_registry(_write(tmp_path, [row]))
    with pytest.raises(RegistryError, match="appears twice"):
        load_registry(_write(tmp_path, [_row(), _row()]))


def test_verdicts_are_computed_by_the_rule_not_typed(tmp_path):
    rows = load_registry(
        _write(
            tmp_path,
            [
                _row(),  # +2.0, +2.5, +2.5: holds
                _row(id="two", seeds=[0, 1],
                     treatment={"label": "a", "preset": "quick", "values": [3.0, 4.0]},
                     control={"label": "b", "preset": "quick", "values": [1.0, 1.5]}),
            ],
        )
    )  # fmt: skip
    table = render_table(rows)
    first, second = table.splitlines()[2:4]
    assert "+2.33 [" in first and "**holds**" in first
    assert "not resolved (too few seeds)" in second and "**" not in second.split("|")[9]
    assert "`selfcaps run coca --seed S`" in table and "2 cores, 1 thread per run" in table


def test_a_row_may_name_its_cpu_and_the_table_shows_it(tmp_path):
    rows = load_registry(_write(tmp_path, [_row(), _row(id="y", cpu="Xeon X (AVX512)")]))
    first, second = render_table(rows).splitlines()[-2:]
    assert first.startswith("- `x.claim`") and "2 cores, 1 thread per run" in first
    assert second.startswith("- `y`") and "2 cores (Xeon X (AVX512)), 1 thread per run" in second


def test_report_check_fails_on_an_outdated_page_and_fixes_it(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    _write(tmp_path / "results", [_row()])
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text("intro\n<!-- registry:t -->\nold numbers\n<!-- /registry:t -->\nend\n")
    assert main(["report", "--check", "--root", str(tmp_path)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert "old numbers" in page.read_text()  # --check changes nothing
    assert main(["report", "--root", str(tmp_path)]) == 0
    text = page.read_text()
    assert "old numbers" not in text and "**holds**" in text and text.endswith("end\n")
    assert main(["report", "--check", "--root", str(tmp_path)]) == 0


def test_report_regenerates_the_tables_of_the_measurement_notes_too(tmp_path, capsys):
    (tmp_path / "results" / "notes").mkdir(parents=True)
    _write(tmp_path / "results", [_row()])
    notes = tmp_path / "results" / "notes" / "m.md"
    notes.write_text("diary\n<!-- registry:t -->\nold numbers\n<!-- /registry:t -->\n")
    assert main(["report", "--check", "--root", str(tmp_path)]) == 1
    assert str(notes) in capsys.readouterr().err
    assert main(["report", "--root", str(tmp_path)]) == 0
    assert "old numbers" not in notes.read_text() and "**holds**" in notes.read_text()


def test_report_check_fails_on_a_stale_row_unless_marked(tmp_path, capsys):
    (tmp_path / "results").mkdir()
    _write(tmp_path / "results", [_row(config_hash="000000000000")])
    assert main(["report", "--check", "--root", str(tmp_path)]) == 1
    assert "x.claim: its arms resolve to config hash" in capsys.readouterr().err
    _write(tmp_path / "results", [_row(config_hash="000000000000", stale="preset changed")])
    assert main(["report", "--check", "--root", str(tmp_path)]) == 0


def test_inline_values_are_the_rows_numbers_computed_by_hand(tmp_path):
    # treatment - control = 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.303 -> 2 +- 2.484
    rows = load_registry(
        _write(
            tmp_path,
            [
                _row(treatment={"label": "a", "preset": "quick", "values": [2.0, 4.0, 6.0]},
                     control={"label": "b", "preset": "quick", "values": [1.0, 2.0, 3.0]}),
                {**{k: v for k, v in _row(id="one", kind="single").items()
                    if k not in ("comparison", "treatment", "control")},
                 "arm": {"label": "a", "preset": "quick", "values": [70.0, 72.0, 74.0]}},
            ],
        )
    )  # fmt: skip
    text = (
        "gap <!-- value:x.claim:result -->old<!-- /value --> and "
        "<!-- value:x.claim:treatment -->?<!-- /value -->; "
        "<!-- value:one:mean -->?<!-- /value --> (<!-- value:one:values -->?<!-- /value -->)\n"
    )
    out = update_text(text, rows)
    assert "-->+2.00 [-0.48, +4.48], not resolved at this budget<!--" in out
    assert "-->4.00 ± 2.00<!--" in out and "-->72.00 ± 2.00<!--" in out
    assert "-->70, 72, 74<!--" in out and "old" not in out
    assert update_text(out, rows) == out  # regenerating changes nothing


@pytest.mark.parametrize(
    ("marker", "match"),
    [
        ("<!-- value:nosuch:result -->1<!-- /value -->", "names row 'nosuch'"),
        ("<!-- value:x.claim:mean -->1<!-- /value -->", "no inline field 'mean'"),
    ],
)
def test_an_inline_value_naming_a_missing_row_or_field_names_the_page(
    tmp_path, capsys, marker, match
):
    (tmp_path / "results").mkdir()
    _write(tmp_path / "results", [_row()])
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text(f"text {marker}\n")
    assert main(["report", "--check", "--root", str(tmp_path)]) == 2
    assert re.search(f"page.md: .*{re.escape(match)}", capsys.readouterr().err)


def test_two_seeds_show_no_interval_and_small_values_keep_their_digits(tmp_path):
    rows = load_registry(
        _write(
            tmp_path,
            [
                _row(id="two", seeds=[0, 1],
                     treatment={"label": "a", "preset": "quick", "values": [3.0, 4.0]},
                     control={"label": "b", "preset": "quick", "values": [1.0, 1.5]}),
                _row(id="mse", treatment={"label": "a", "preset": "quick",
                                          "values": [0.0071, 0.0073, 0.0075]},
                     control={"label": "b", "preset": "quick", "values": [0.008, 0.008, 0.008]}),
            ],
        )
    )  # fmt: skip
    out = update_text(
        "<!-- value:two:result -->?<!-- /value --> <!-- value:mse:treatment -->?<!-- /value -->",
        rows,
    )
    assert "-->+2.25, not resolved (too few seeds)<!--" in out  # no t-interval from 2 seeds
    assert "-->0.0073 ± 0.0002<!--" in out
    assert "| +2.25 | not resolved (too few seeds) |" in render_table(rows[:1])


def test_the_orthogonal_encoder_switch_is_hashed_only_when_on():
    """cd.orthogonal_encoder came after the PoE rows: off, it hashes as before it existed."""
    before = arm_config_hash("poe", "center_parents_sparse", ["trainer.threads=1"])
    off = config_hash({"cd": {"orthogonal_encoder": False, "lr_encoder": 1.0}})
    assert off == config_hash({"cd": {"lr_encoder": 1.0}})
    on = ["trainer.threads=1", "cd.orthogonal_encoder=true"]
    assert before != arm_config_hash("poe", "center_parents_sparse", on)
    assert before == "1677695bd808"  # the recommended preset's rows, measured before the switch
