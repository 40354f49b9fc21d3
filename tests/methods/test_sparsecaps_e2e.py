"""End-to-end SparseCaps runs on a tiny budget: run directory, SVM metrics, boost-state resume."""

import json

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

import selfcaps
from selfcaps.cli import main
from selfcaps.config.loading import load_config, load_yaml
from selfcaps.data import AffNISTLikeDataset
from selfcaps.data.datamodule import SelfcapsDataModule
from selfcaps.losses import MarginLoss
from selfcaps.methods.sparsecaps.method import SparseCaps
from tests.runs import assert_evaluation_record, assert_run_files
from tests.scripts import load_script

# A network small enough for seconds of CPU: conv1 8 filters, 2 primary types, small decoder.
TINY_MODEL = [
    "model.conv_channels=8",
    "model.primary_types=2",
    "model.decoder_widths=[32,64]",
    "model.boost_every=2",
]
TINY = [
    "--data",
    "mnist5k",
    "--no-progress",
    "--batch-size",
    "16",
    "--deterministic",
    "--threads",
    "1",
    "data.train_subset=64",
    "data.val_fraction=0.02",
    "data.eval_batch_size=500",
    "monitor.bank_size=32",
    "monitor.knn_k=5",
    "eval.knn_k=5",
    "eval.svm_max_train=100",
    "eval.affnist_fit=100",
    "eval.affnist_test=100",
    "eval.figure_images=64",
    *TINY_MODEL,
]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    # An empty root: mnist5k is embedded, affnist_like falls back to mnist5k's test digits.
    return str(tmp_path_factory.mktemp("empty_root"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, data_root):
    out = tmp_path_factory.mktemp("sparsecaps") / "run"
    args = ["run", "sparsecaps", "--out", str(out), "--epochs", "2", "--data-root", data_root]
    with pytest.warns(UserWarning, match="affnist"):
        assert main([*args, *TINY]) == 0
    return out


FIGURES = (
    "fig2_reconstructions",
    "fig3_routing_support",
    "fig4_rank_frequency",
    "fig5_equivariance",
)


def test_run_directory_has_every_file(run_dir):
    assert_run_files(run_dir, *(f"figures/{f}.png" for f in FIGURES))


def test_metrics_have_the_three_protocols_per_kind(run_dir):
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["epochs_trained"] == 2 and m["steps"] == 2 * (64 // 16)
    for protocol in ("mnist", "affnist_a", "affnist_b"):
        # the headline reads v (section 2.3), v' = m v (eq. 4) is the second column
        assert 0.0 <= m[f"svm_{protocol}"] <= 100.0
        assert 0.0 <= m[f"svm_{protocol}_masked"] <= 100.0
        assert f"svm_{protocol}_unmasked" not in m
    assert m["variant"] == "sparse" and "feature_kind" not in m
    assert m["affnist_source"].startswith("affnist_like")
    assert m["affnist_fit_images"] == m["affnist_test_images"] == 100
    assert m["svm_train_mnist"] == 64  # train_subset is smaller than svm_max_train
    assert m["best_checkpoint"].startswith("min val_loss")
    assert m["mask_nonzero"] == 6.0  # gamma 12, threshold 0.01, 16 capsules
    assert all(isinstance(v, int | float | str) for v in m.values())
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"val_loss", "val_recon", "train_loss", "recon", "boost_max"} <= set(header)


def _codes(net, ds, canvas):
    """v and v' = m v of every image of ``ds``, centred in the canvas (a plain loop)."""
    v_all, masked_all, labels = [], [], []
    for img, label in ds:
        x = torch.zeros(1, 1, canvas, canvas)
        top = (canvas - img.shape[-1]) // 2
        x[0, :, top : top + img.shape[-2], top : top + img.shape[-1]] = img.float() / 255
        v, psi = net.encode(x)
        mask = net.feature_mask(v, net.rank(psi))
        v_all.append(v.flatten(1))
        masked_all.append((v * mask.unsqueeze(-1)).flatten(1))
        labels.append(label)
    return torch.cat(v_all).numpy(), torch.cat(masked_all).numpy(), labels


def _trained(run_dir):
    """The run's method with ``best.ckpt`` loaded, its network in eval mode, its data."""
    cfg = OmegaConf.create(load_yaml(run_dir / "config.yaml"))
    method = SparseCaps(cfg)
    ckpt = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=False)
    method.load_state_dict(ckpt["state_dict"])
    return method, method.sparse_net.eval(), SelfcapsDataModule(cfg, *method.build_transforms())


@pytest.mark.filterwarnings("ignore:affnist_like")
def test_headline_svm_reads_the_unmasked_capsules(run_dir, data_root):
    """svm_mnist is sklearn's RBF SVM on v (section 2.3), svm_mnist_masked on v' = m v."""
    from sklearn.svm import SVC

    _, net, dm = _trained(run_dir)
    with torch.no_grad():
        fit_v, fit_m, fit_y = _codes(net, dm.split("train"), 40)
        test_v, test_m, test_y = _codes(net, dm.split("test"), 40)
    m = json.loads((run_dir / "metrics.json").read_text())
    for feats, key in (((fit_v, test_v), "svm_mnist"), ((fit_m, test_m), "svm_mnist_masked")):
        svc = SVC(C=100.0, gamma=0.1).fit(feats[0], fit_y)
        expected = 100.0 * (svc.predict(feats[1]) == test_y).mean()
        assert m[key] == pytest.approx(expected), key
    assert m["svm_mnist"] != m["svm_mnist_masked"]  # the two features differ on this run


@pytest.mark.filterwarnings("ignore:affnist_like")
def test_reconstruction_error_is_the_training_loss_on_every_test_image(run_dir):
    """recon_error_mnist: the paper's "batch mean square error" (section 3.5), all test images."""
    method, net, dm = _trained(run_dir)
    _, eval_tf = method.build_transforms()
    test = dm.split("test")
    total = 0.0
    with torch.no_grad():
        for i in range(len(test)):  # one image at a time, through forward()
            x = eval_tf(test[i][0]).unsqueeze(0)
            total += float(((net(x).recon - x) ** 2).sum())
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["svm_test_mnist"] == len(test)
    assert m["recon_error_mnist"] == pytest.approx(total / len(test), rel=1e-4)
    assert m["recon_error_affnist"] > 0


@pytest.mark.filterwarnings("ignore:affnist")
def test_the_reconstruction_script_repeats_the_evaluations_mnist_value(run_dir, data_root):
    script = load_script("sparsecaps_reconstruction")
    errors = script.reconstruction_errors(run_dir, data_root, 20)
    m = json.loads((run_dir / "metrics.json").read_text())
    assert errors["recon_error_mnist"] == pytest.approx(m["recon_error_mnist"], rel=1e-5)
    assert errors["affnist_images"] == 20 and errors["variant"] == "sparse"
    assert errors["checkpoint"] == "best.ckpt"
    last = script.reconstruction_errors(run_dir, data_root, 20, checkpoint="last")
    assert last["checkpoint"] == "last.ckpt" and last["recon_error_mnist"] > 0


def test_weights_load_without_lightning(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    net = selfcaps.create_model(cfg["model"], **cfg["model_kwargs"])
    state = load_file(run_dir / "model.safetensors")
    assert "boosting.boost" in state and "boosting.freq_ema" in state
    net.load_state_dict(state)
    out = net.eval()(torch.zeros(2, 1, 40, 40))
    assert out.recon.shape == (2, 1, 40, 40)


def _pretrain(out, epochs, root, *extra):
    args = ["pretrain", "sparsecaps", "--out", str(out), "--epochs", str(epochs)]
    return main([*args, "--data-root", root, *extra])


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
def test_boost_state_survives_checkpoint_and_resume(tmp_path, data_root, run_dir):
    resumed = tmp_path / "resumed"
    assert _pretrain(resumed, 1, data_root, *TINY) == 0
    first = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)
    assert int(first["state_dict"]["net.boosting.batches"]) == 4  # 64 images / 16
    assert _pretrain(resumed, 2, data_root, "--resume") == 0
    # run_dir trained the same two epochs without interruption
    a = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    b = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert int(b["net.boosting.batches"]) == 8  # continued from 4, not restarted
    assert not torch.equal(a["net.boosting.boost"], torch.ones_like(a["net.boosting.boost"]))
    for key in ("boost", "freq_ema", "batches", "ema_started"):
        torch.testing.assert_close(
            a[f"net.boosting.{key}"], b[f"net.boosting.{key}"], rtol=0, atol=0
        )
    wa, wb = load_file(run_dir / "model.safetensors"), load_file(resumed / "model.safetensors")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=0, atol=0)


def _method(*overrides):
    cfg = load_config("sparsecaps", "quick", [("data.name", "mnist5k"), *overrides])
    cfg.model.conv_channels, cfg.model.primary_types = 8, 2
    return SparseCaps(cfg)


def test_supervised_loss_is_margin_plus_weighted_reconstruction():
    torch.manual_seed(0)
    method = _method(("model.variant", "supervised"))
    x, y = torch.rand(4, 1, 40, 40), torch.tensor([0, 3, 3, 9])
    loss, logs = method.compute_loss((x, y))
    torch.manual_seed(0)
    out = method.net(x, labels=y)
    lengths = out.capsules.norm(dim=-1)
    sse = ((out.recon - x) ** 2).sum(dim=(1, 2, 3)).mean()
    expected = MarginLoss(0.9, 0.1, 0.5)(lengths, y) + 0.0005 * sse
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(logs["recon"], sse)


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")
def test_only_sparse_training_updates_the_boost_state():
    x, y = torch.rand(4, 1, 40, 40), torch.zeros(4, dtype=torch.long)
    for variant, expected in (("sparse", 1), ("dense", 0)):
        method = _method(("model.variant", variant)).train()
        method.compute_loss((x, y))
        assert int(method.sparse_net.boosting.batches) == expected, variant
    method = _method().eval()
    method.validation_step((x, y), 0, dataloader_idx=1)
    assert int(method.sparse_net.boosting.batches) == 0


@pytest.mark.filterwarnings("ignore:affNIST files not found", "ignore:affnist_like")
def test_supervised_evaluation_and_figures_without_training(data_root):
    method = _method(
        ("model.variant", "supervised"),
        ("data.train_subset", 64),
        ("eval.svm_max_train", 50),
        ("eval.affnist_fit", 50),
        ("eval.affnist_test", 50),
        ("eval.figure_images", 50),
    )
    method.cfg.data.root = data_root
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    m = method.eval().evaluate(dm)
    assert m["variant"] == "supervised" and m["mask_nonzero"] == 1.0  # the longest capsule
    for key in ("capsnet_acc_mnist", "capsnet_acc_affnist", "svm_affnist_a_masked"):
        assert 0.0 <= m[key] <= 100.0
    assert m["svm_train_mnist"] == m["affnist_fit_images"] == m["affnist_test_images"] == 50
    figs = method.figures(dm)
    assert figs["fig2_reconstructions"].images.shape == (4 * 2 * 12, 1, 40, 40)  # 10 capsules
    assert figs["fig2_reconstructions"].nrow == 12
    assert figs["fig5_equivariance"].images.shape == (16 * 11, 1, 40, 40)
    ranks = figs["fig4_rank_frequency"].series  # one line per capsule, over 50 affNIST images
    assert len(ranks) == 10 and all(len(ys) == 10 for _, ys in ranks.values())
    assert all(sum(ys) == pytest.approx(100.0) for _, ys in ranks.values())
    assert "50 affNIST test images" in figs["fig4_rank_frequency"].title
    xs, ys = figs["fig3_routing_support"].series["supervised"]
    assert len(xs) == 10 and ys[0] == 1.0 and sorted(ys, reverse=True) == ys


@pytest.mark.filterwarnings("ignore:affNIST files not found", "ignore:affnist_like")
def test_figures_are_the_same_whether_or_not_the_evaluation_ran(data_root):
    """Fig. 4 reads affNIST without an evaluation (``selfcaps pretrain``) as after one."""
    method = _method(("eval.figure_images", 20), ("eval.affnist", "affnist_like"))
    method.cfg.data.root = data_root
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    before = method.figures(dm)  # no evaluate(): what pretrain draws
    assert "20 affNIST test images" in before["fig4_rank_frequency"].title
    method.cfg.eval.svm_max_train, method.cfg.eval.svm_max_test = 20, 20
    method.cfg.eval.affnist_fit, method.cfg.eval.affnist_test = 20, 20
    method.evaluate(dm)
    after = method.figures(dm)
    for stem in ("fig3_routing_support", "fig4_rank_frequency"):
        assert after[stem].series == before[stem].series and after[stem].title == before[stem].title


def test_config_errors_name_the_key(data_root, capsys):
    args = ["run", "sparsecaps", "--data", "mnist5k", "--data-root", data_root]
    assert main([*args, "augment.canvas=28"]) == 2
    assert "augment.canvas" in capsys.readouterr().err
    assert main([*args, "eval.feature=masked"]) == 2  # gone: both features are always reported
    assert "unknown config key 'eval.feature'" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:affnist_like")
@pytest.mark.parametrize(
    ("mode", "fit_split"), [("same_digits", "test"), ("train_digits", "train")]
)
def test_generated_halves_fit_where_their_mode_says(data_root, mode, fit_split, monkeypatch):
    method = _method(
        ("model.variant", "dense"),
        ("data.train_subset", 32),
        ("eval.svm_max_train", 40),
        ("eval.affnist", "affnist_like"),
        ("eval.affnist_halves", mode),
        ("eval.affnist_fit", 40),
        ("eval.affnist_test", 20),
    )
    method.cfg.data.root = data_root
    dm = SelfcapsDataModule(method.cfg, *method.build_transforms())
    encoded = []  # (split of the dataset, indices) of every affNIST encoding
    encode = method.encode

    def spy(ds, kinds, indices=None):
        if isinstance(ds, AffNISTLikeDataset):
            encoded.append((ds.split, list(indices)))
        return encode(ds, kinds, indices)

    monkeypatch.setattr(method, "encode", spy)
    m = method.eval().evaluate(dm)
    assert m["affnist_halves"] == mode
    assert (m["affnist_fit_images"], m["affnist_test_images"]) == (40, 20)
    assert m["affnist_source"] == "affnist_like (32 versions of each mnist5k-test digit)"
    (test_split, test), (split, fit) = encoded
    assert test_split == "test" and split == fit_split and len(fit) == 40
    if mode == "same_digits":  # the test images' digits (1,000 of them), other versions
        assert {i % 1000 for i in fit} <= {i % 1000 for i in test}
        assert not set(fit) & set(test)


def test_same_digits_needs_generated_affnist(data_root, capsys):
    args = ["run", "sparsecaps", "--data", "mnist5k", "--data-root", data_root]
    for mode in ("same_digits", "train_digits"):
        assert main([*args, f"eval.affnist_halves={mode}"]) == 2
        err = capsys.readouterr().err
        assert "eval.affnist" in err and mode in err
    assert main([*args, "eval.affnist_halves=shuffled"]) == 2
    assert "eval.affnist_halves" in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:affnist")
def test_the_svm_records_its_splits_and_the_saved_weights(run_dir):
    m = assert_evaluation_record(run_dir, "eval_svm_mnist")
    assert m["eval_svm_mnist_query_n"] == m["svm_test_mnist"]
    assert m["eval_svm_mnist_bank_n"] == m["svm_train_mnist"]
    assert m["eval_svm_affnist_a_query_n"] == m["affnist_test_images"]
    assert m["eval_svm_affnist_a_weights"] == m["eval_svm_mnist_weights"]
