"""The results registry: validation, config hashes that catch changed presets, generated docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from selfcaps.cli.main import main
from selfcaps.config import loading as config_module
from selfcaps.config.presets import config_text, preset_source
from selfcaps.results.registry import (
    DEFAULT_REGISTRY,
    RegistryError,
    arm_config_hash,
    check_hashes,
    config_hash,
    load_registry,
)
from selfcaps.results.report import (
    BLOCK,
    chance_summary,
    doc_files,
    render_rule_table,
    render_table,
    rule_rows,
    update_text,
)

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
    assert "<code>selfcaps run coca --seed S</code>" in table
    assert "2 cores, 1 thread per run" in table
    assert table.count("<details>") == 1  # the provenance folds into one block per table


def test_a_row_may_name_its_cpu_and_the_table_shows_it(tmp_path):
    rows = load_registry(_write(tmp_path, [_row(), _row(id="y", cpu="Xeon X (AVX512)")]))
    first, second = render_table(rows).splitlines()[-4:-2]
    assert first.startswith("<li><code>x.claim</code>") and "2 cores, 1 thread per run" in first
    assert second.startswith("<li><code>y</code>")
    assert "2 cores (Xeon X (AVX512)), 1 thread per run" in second
    gpu = _row(id="z", cpu="Xeon X", gpu="NVIDIA H200 <TF32 off>")
    (line,) = render_table(load_registry(_write(tmp_path, [gpu]))).splitlines()[-3:-2]
    assert "2 cores (Xeon X), GPU NVIDIA H200 &lt;TF32 off&gt;, 1 thread per run" in line


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


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"units": 0}, r"units: expected an integer in 1\.\.3"),
        ({"units": 4}, r"units: expected an integer in 1\.\.3"),
        ({"units": True}, r"units: expected an integer"),
        ({"equivalence_margin": 0}, "equivalence_margin: expected a positive number"),
        ({"equivalence_margin": "1"}, "equivalence_margin: expected a positive number"),
        ({"no_difference": "yes"}, "no_difference: expected true or false"),
        ({"faithful": ""}, "faithful: expected a non-empty text"),
        ({"departure": "ours"}, "needs budget_images"),
        ({"paper_dataset": True, "budget_images": 0}, "budget_images: expected a positive"),
    ],
)
def test_bad_verdict_and_claims_table_fields_are_refused(tmp_path, change, match):
    with pytest.raises(RegistryError, match=match):
        load_registry(_write(tmp_path, [_row(**change)]))


def test_units_and_equivalence_margins_reach_the_tables(tmp_path):
    # d = 2.0, 2.5, 2.5 in every row; the rows differ only in what they claim
    rows = load_registry(
        _write(
            tmp_path,
            [
                _row(id="one-unit", units=1),
                _row(id="no-margin", no_difference=True),
                # d = -0.1, +0.1, -0.1: interval [-0.32, +0.25], inside +-1 (hand: paired tests)
                _row(id="equal", equivalence_margin=1,
                     treatment={"label": "a", "preset": "quick", "values": [40.0, 41.0, 42.0]},
                     control={"label": "b", "preset": "quick", "values": [40.1, 40.9, 42.1]}),
            ],
        )
    )  # fmt: skip
    lines = render_table(rows).splitlines()[2:5]
    assert "| +2.33 | not resolved (too few independent units) | – | 3 (1 unit) |" in lines[0]
    assert "not resolved (no equivalence margin)" in lines[1]
    assert "| -0.03 [-0.32, +0.25] | **equivalent within ±1** |" in lines[2]
    out = update_text("<!-- value:equal:result -->?<!-- /value -->", rows)
    assert "-->-0.03 [-0.32, +0.25], equivalent within ±1<!--" in out


def test_the_holm_column_adjusts_within_each_method(tmp_path):
    # d = 2.0, 2.5, 2.5: mean 7/3, se 1/6, t = 14 on 2 df, p = 1 - 14/sqrt(198) = 0.00504.
    # Two such rows: Holm's smallest adjusted p is 2 x 0.00504 = 0.0101, the verdict stands;
    # ten: 10 x 0.00504 = 0.0504 >= 0.05, and none stands.
    def table(n: int, method: str = "coca") -> list[str]:
        rows = [_row(id=f"r{i}", method=method) for i in range(n)]
        loaded = load_registry(_write(tmp_path, rows))
        return render_table(loaded[:1], loaded).splitlines()[2].split(" | ")

    assert table(2)[8:10] == ["**holds**", "**holds**"]
    assert table(10)[8:10] == ["**holds**", "not resolved (Holm)"]


def _roles(id: str, method: str = "coca", date: str = "2026-11-26", **fields):
    return _row(id=id, method=method, date=date, **fields)


def test_the_claims_table_rule_picks_by_budget_units_and_date_not_by_verdict(tmp_path):
    reversed_values = {"label": "a", "preset": "quick", "values": [1.0, 1.5, 1.0]}
    rows = load_registry(
        _write(
            tmp_path,
            [
                _roles("f.small", faithful="one reading", budget_images=100),
                _roles("f.big", faithful="one reading", budget_images=200,
                       treatment=reversed_values,
                       control={"label": "b", "preset": "quick", "values": [3.0, 4.0, 3.5]}),
                _roles("f.other", faithful="another reading", budget_images=50),
                _roles("d.one-unit", paper_dataset=True, budget_images=300, units=1),
                _roles("d.three", paper_dataset=True, budget_images=300),
                _roles("d.old", paper_dataset=True, budget_images=300, date="2026-11-01"),
                _roles("dep.big", departure="our recipe", budget_images=400),
                _roles("dep.small", departure="our recipe", budget_images=40),
                _roles("plain"),
                _roles("m2.dep", method="mcae", departure="zero-masking", budget_images=5),
            ],
        )
    )  # fmt: skip
    (coca, shown, missing), (mcae, shown2, missing2) = rule_rows(rows)
    assert coca == "coca" and not missing
    assert [(r.id, labels) for r, labels in shown] == [
        ("f.big", ["(a) the paper's settings and reading: one reading"]),  # reversed: still shown
        ("f.other", ["(a) the paper's settings and reading: another reading"]),
        ("d.three", ["(b) the paper's dataset, largest budget"]),
        ("dep.big", ["(c) our departure, largest budget", "departs from the paper in: our recipe"]),
    ]
    assert mcae == "mcae" and [r.id for r, _ in shown2] == ["m2.dep"]
    assert missing2 == [
        "runs the paper's own settings and reading",
        "is on the paper's own dataset",
    ]
    table = render_rule_table(rows)
    assert "| **reversed** |" in table and "`f.big` |" in table
    assert "- mcae: no paired row is on the paper's own dataset." in table
    assert table.count("<details>") == 1 and "f.small" not in table


def test_the_chance_count_by_hand(tmp_path):
    rows = load_registry(
        _write(
            tmp_path,
            [
                _row(id="holds"),  # p = 0.00504: a signed verdict that survives Holm (m = 2)
                _row(id="open", treatment={"label": "a", "preset": "quick",
                                           "values": [1.0, 3.0, 2.0]},
                     control={"label": "b", "preset": "quick", "values": [2.0, 2.0, 2.1]}),
                _row(id="two", seeds=[0, 1],
                     treatment={"label": "a", "preset": "quick", "values": [3.0, 4.0]},
                     control={"label": "b", "preset": "quick", "values": [1.0, 1.5]}),
            ],
        )
    )  # fmt: skip
    text = chance_summary(rows)
    assert text.startswith("The registry holds 3 paired comparisons. 2 of them have a test")
    assert "about 0.1 signed verdicts among them. They give 1; 1 of these survive" in text
    assert "| coca | 3 | 2 | 1 | 0.1 | 1 |" in text


def test_provenance_is_escaped_html_in_one_collapsed_block(tmp_path):
    rows = load_registry(_write(tmp_path, [_row(command="a < b && c")]))
    table = render_table(rows)
    assert "<code>a &lt; b &amp;&amp; c</code>" in table
    assert table.rstrip().endswith("</ul>\n</details>")


def _readme_claims() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = {m.group("name"): m.group("body") for m in BLOCK.finditer(text)}
    assert "claims-by-rule" in blocks, "README.md has no <!-- registry:claims-by-rule --> block"
    return blocks["claims-by-rule"]


def test_the_readme_shows_every_row_the_rule_picks_faithful_rows_whatever_their_verdict():
    block = _readme_claims()
    rows = load_registry(ROOT / DEFAULT_REGISTRY)
    picked = [(r, labels) for _, shown, _ in rule_rows(rows) for r, labels in shown]
    faithful = [r.id for r, labels in picked if any(lb.startswith("(a)") for lb in labels)]
    assert faithful, "no row of the registry is marked faithful"
    missing = [i for i in (r.id for r, _ in picked) if f"`{i}`" not in block]
    assert not missing, f"rows the rule picks are missing from README.md: {missing}"
    # the rows the README must show: EncapNet at the paper's unit settings (reversed), both
    # readings of SparseCaps (v holds, v' reversed) and CoCa on CIFAR-10 for an hour
    for row_id in ("encapnet.claim.short.ot", "sparsecaps.claim.30000",
                   "sparsecaps.claim.30000.masked", "coca.cifar10.1h.untrained"):  # fmt: skip
        assert f"`{row_id}`" in block
        assert row_id in faithful or "coca" in row_id
    # MCAE's zero-masking rows say so
    for line in block.splitlines():
        if "`mcae.claim." in line:
            assert "zero-masking (pixels_zeroed)" in line, line


def test_the_readme_is_a_front_door_and_quotes_sparsecaps_both_ways():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    flat = " ".join(text.split())
    section_2_3 = "latent capsule boosting and masking is only applied to reconstruction output"
    assert f"{section_2_3} and only affects capsule training" in flat
    assert ('"replaces v as the output of the latent capsules layer used for classification '
            'and reconstruction"') in flat  # fmt: skip


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("- [unclosed\n", "not valid YAML"),
        ("id: x\n", "expected a YAML list, got dict"),
        ("", "got an empty file"),
        ("- !!python/object/apply:os.system ['true']\n", "not valid YAML"),
    ],
)
def test_a_registry_that_is_not_a_yaml_list_is_named(tmp_path, text, match):
    path = tmp_path / "registry.yaml"
    path.write_text(text)
    with pytest.raises(RegistryError, match=match) as err:
        load_registry(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("method: [coca\n", "not valid YAML"),
        ("- coca\n", "expected a YAML mapping, got list"),
        ("", "got an empty file"),
    ],
)
def test_a_run_config_that_is_not_a_yaml_mapping_is_named(tmp_path, text, match):
    from selfcaps.models.weights import CheckpointError
    from selfcaps.run.trained import run_config

    (tmp_path / "config.yaml").write_text(text)
    with pytest.raises(CheckpointError, match=match) as err:
        run_config(tmp_path)
    assert str(tmp_path / "config.yaml") in str(err.value)
    assert run_config(tmp_path / "missing") == {}
