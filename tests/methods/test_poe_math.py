"""PoE capsules: Algorithm 1, free energy, decoder rule, against loops and autograd.

Every reference here is computed independently of the code under test: explicit
loops over capsules or ``torch.autograd`` on a plain formula, in float64.
"""

import numpy as np
import pytest
import torch

from selfcaps.caps import squash, unsquash
from selfcaps.losses.contrastive_divergence import (
    cd_chain,
    data_term,
    decoder_cd_update,
    decoder_reconstruction_update,
    encoder_cd_terms,
    encoder_cd_update,
    log_marginal,
    sparsity_term,
)
from selfcaps.methods.poe.collapse import (
    capsule_pair_similarity,
    second_moment_spectrum,
    top_direction_share,
)
from selfcaps.methods.poe.judge import class_purity
from selfcaps.methods.poe.method import PoE, stage_of
from selfcaps.methods.poe.reconstruction import reconstruction_stats
from selfcaps.models.poe import PoECapsNet, RoutedCaps

N, DIN, M, DOUT, B = 7, 3, 4, 5, 6


def _layer(normalize="children", seed=0, std=0.5, n=N, din=DIN, m=M, dout=DOUT):
    torch.manual_seed(seed)
    layer = RoutedCaps(n, din, m, dout, iters=3, normalize=normalize, init_std=std).double()
    x = squash(torch.randn(B, n, din, dtype=torch.float64))
    return layer, x


# Weights are in DenseCaps's GEMM layout (N, D_in, M * D_out): the vote of child i for
# parent j is x_i @ w[i, :, j * D_out:(j + 1) * D_out], i.e. W_ij = that block transposed.
def _block(w, i, j, dout):
    return w[i, :, j * dout : (j + 1) * dout]


def _z_loop(w, x, c, dout=DOUT):
    """z_j = sum_i c_ij W_ij x_i, one capsule pair at a time."""
    m = c.shape[2]
    z = torch.zeros(x.shape[0], m, dout, dtype=x.dtype)
    for b in range(x.shape[0]):
        for i in range(w.shape[0]):
            for j in range(m):
                z[b, j] += c[b, i, j] * (x[b, i] @ _block(w, i, j, dout))
    return z


def _x_rec_loop(w, y, c):
    """x~_i = squash(sum_j c_ij W_ij^T y_j), one capsule pair at a time."""
    zt = torch.zeros(y.shape[0], w.shape[0], w.shape[1], dtype=y.dtype)
    for b in range(y.shape[0]):
        for i in range(w.shape[0]):
            for j in range(y.shape[1]):
                zt[b, i] += c[b, i, j] * (_block(w, i, j, y.shape[2]) @ y[b, j])
    return squash(zt)


def _autograd_data_term(w, x, c):
    """d/dW of mean_b sum_j log(1 + |z_j|^2) at fixed c (eq. 10), by autograd."""
    w = w.detach().clone().requires_grad_(True)
    z = _z_loop(w, x, c)
    torch.log1p(z.pow(2).sum(-1)).sum(-1).mean().backward()
    return w.grad


@pytest.mark.parametrize("normalize", ["children", "parents"])
def test_data_term_is_the_gradient_of_the_log_marginal_at_fixed_c(normalize):
    layer, x = _layer(normalize)
    with torch.no_grad():
        _, _, c = layer.route(x)
    if normalize == "children":
        torch.testing.assert_close(c.sum(1), torch.ones(B, M, dtype=torch.float64))
    else:
        torch.testing.assert_close(c.sum(2), torch.ones(B, N, dtype=torch.float64))
    expected = _autograd_data_term(layer.weight, x, c)
    torch.testing.assert_close(data_term(layer, x, c), expected, rtol=1e-10, atol=1e-12)


def test_data_term_with_arbitrary_coefficients():
    layer, x = _layer(std=2.0)  # large weights: |z| >> 1, the 1 / (1 + |z|^2) factor matters
    c = torch.rand(B, N, M, dtype=torch.float64)
    expected = _autograd_data_term(layer.weight, x, c)
    torch.testing.assert_close(data_term(layer, x, c), expected, rtol=1e-10, atol=1e-12)


def test_encoder_update_is_data_minus_reconstruction_term():
    layer, x = _layer()
    with torch.no_grad():
        dw, stats = encoder_cd_update(layer, x)
        z, y, c = layer.route(x)
        x_rec = _x_rec_loop(layer.weight, y, c)
        z_rec = _z_loop(layer.weight, x_rec, c)
    torch.testing.assert_close(z, _z_loop(layer.weight, x, c))
    expected = _autograd_data_term(layer.weight, x, c) - _autograd_data_term(layer.weight, x_rec, c)
    torch.testing.assert_close(dw, expected, rtol=1e-10, atol=1e-12)
    f_data = -torch.log1p(z.pow(2).sum(-1)).sum(-1).mean()
    f_rec = -torch.log1p(z_rec.pow(2).sum(-1)).sum(-1).mean()
    torch.testing.assert_close(stats["free_energy_gap"], f_data - f_rec)


def _penalty(w, x, c, target):
    """1/2 sum_j (mean_b |squash(z_bj)| - p)^2, with |squash(z)| computed from its definition."""
    z = _z_loop(w, x, c)
    lengths = torch.stack(
        [torch.stack([squash(z[b, j]).norm() for j in range(z.shape[1])]) for b in range(B)]
    )
    return 0.5 * (lengths.mean(0) - target).pow(2).sum()


@pytest.mark.parametrize("normalize", ["children", "parents"])
def test_sparsity_term_is_minus_the_gradient_of_the_penalty_at_fixed_c(normalize):
    layer, x = _layer(normalize, std=1.0)
    with torch.no_grad():
        z, _, c = layer.route(x)
    w = layer.weight.detach().clone().requires_grad_(True)
    _penalty(w, x, c, 0.2).backward()
    torch.testing.assert_close(sparsity_term(x, z, c, 0.2), -w.grad, rtol=1e-10, atol=1e-12)


def test_sparsity_adds_to_the_cd_update_and_pulls_the_capsules_towards_the_target():
    layer, x = _layer(std=2.0)
    with torch.no_grad():
        z, y, c = layer.route(x)
        plain, _ = encoder_cd_update(layer, x)
        sparse, stats = encoder_cd_update(layer, x, sparsity=3.0, target=0.05)
        torch.testing.assert_close(sparse, plain + 3.0 * sparsity_term(x, z, c, 0.05))
        torch.testing.assert_close(stats["caps_on"], y.norm(dim=-1).mean())
        assert stats["caps_on"] > 0.3  # far above the target: the penalty must lower it
        w, step = layer.weight, 1e-3 * sparsity_term(x, z, c, 0.05)
        before, after = _penalty(w, x, c, 0.05), _penalty(w + step, x, c, 0.05)
    assert after < before


def test_log_marginal_by_hand():
    z = torch.tensor([[[3.0, 4.0], [0.0, 1.0]]], dtype=torch.float64)
    torch.testing.assert_close(log_marginal(z), torch.log(torch.tensor([26.0 * 2.0])).double())


def test_unsquash_inverts_squash():
    torch.manual_seed(0)
    z = (
        torch.randn(500, 8, dtype=torch.float64)
        * torch.logspace(-2, 1.3, 500).unsqueeze(1).double()
    )
    torch.testing.assert_close(unsquash(squash(z)), z, rtol=1e-8, atol=1e-10)
    assert (squash(z).norm(dim=-1) < 1).all()


def test_one_cd_update_lowers_the_free_energy_gap():
    """dW is the gradient of -(F(x) - F(x~)) at fixed c and x~: a small step lowers the gap.

    The decrease must also match the first-order prediction lr * |dW|^2.
    """
    layer, x = _layer(std=0.3)
    with torch.no_grad():
        ch = cd_chain(layer, x)
        dw, _ = encoder_cd_update(layer, x)

        def gap(w):
            f = -torch.log1p(_z_loop(w, x, ch.c).pow(2).sum(-1)).sum(-1).mean()
            f_rec = -torch.log1p(_z_loop(w, ch.x_rec, ch.c).pow(2).sum(-1)).sum(-1).mean()
            return f - f_rec

        lr = 1e-4
        before, after = gap(layer.weight), gap(layer.weight + lr * dw)
    assert after < before
    predicted = -lr * dw.pow(2).sum()
    torch.testing.assert_close(after - before, predicted, rtol=1e-2, atol=0)


def test_cd_training_on_a_toy_batch_separates_data_from_reconstructions():
    """A few full steps of Algorithm 1 (routing recomputed) push the gap below its start."""
    layer, x = _layer(std=0.05)
    with torch.no_grad():
        start = encoder_cd_update(layer, x)[1]["free_energy_gap"]
        for _ in range(20):
            layer.weight += 0.5 * encoder_cd_update(layer, x)[0]
        end = encoder_cd_update(layer, x)[1]["free_energy_gap"]
    assert end < start < 0.05


def test_our_decoder_update_by_loops_and_descent_of_its_error():
    torch.manual_seed(1)
    n_caps, d_caps, n_prim, d_prim = 3, 4, 6, 2
    dec = RoutedCaps(n_caps, d_caps, n_prim, d_prim, init_std=0.5).double()
    y = squash(torch.randn(B, n_caps, d_caps, dtype=torch.float64))
    x = squash(torch.randn(B, n_prim, d_prim, dtype=torch.float64))
    with torch.no_grad():
        du, stats = decoder_reconstruction_update(dec, y, x)
        _, x_hat, e = dec.route(y)
    u = dec.weight
    expected = torch.zeros_like(u)
    for b in range(B):
        for j in range(n_caps):
            for i in range(n_prim):
                outer = torch.outer(y[b, j], x[b, i] - x_hat[b, i])  # the block of U_ji^T
                _block(expected, j, i, d_prim).add_(2 * e[b, j, i] * outer / B)
    torch.testing.assert_close(du, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(stats["recon_caps_mse"], (x - x_hat).pow(2).mean())

    def err(w):  # squared error of the top-down reconstruction at fixed e
        return (x - squash(_z_loop(w, y, e, d_prim))).pow(2).sum()

    assert err(u + 1e-3 * du) < err(u)


def _decoder_setup(seed=1):
    torch.manual_seed(seed)
    n_caps, d_caps, n_prim, d_prim = 3, 4, 6, 2
    dec = RoutedCaps(n_caps, d_caps, n_prim, d_prim, init_std=0.5).double()
    y = squash(torch.randn(B, n_caps, d_caps, dtype=torch.float64))
    z = 2.0 * torch.randn(B, n_prim, d_prim, dtype=torch.float64)
    return dec, y, z


def _paper_decoder_loop(u, y, z, e):
    """Section 4.1's dU, one (b, j, i) at a time, from the literal z~ and x~ formulas."""
    bsz, n_caps, _ = y.shape
    n_prim, d_prim = z.shape[1:]
    z_t = torch.zeros(bsz, n_prim, d_prim, dtype=y.dtype)  # z~_i = sum_j e_ji U_ji x_j
    for b in range(bsz):
        for i in range(n_prim):
            for j in range(n_caps):
                z_t[b, i] += e[b, j, i] * (y[b, j] @ _block(u, j, i, d_prim))
    x_t = torch.zeros_like(y)  # x~_j = squash(sum_i e_ji U_ji^T z~_i)
    for b in range(bsz):
        for j in range(n_caps):
            for i in range(n_prim):
                x_t[b, j] += e[b, j, i] * (_block(u, j, i, d_prim) @ z_t[b, i])
    x_t = squash(x_t)
    du = torch.zeros_like(u)
    for b in range(bsz):
        for j in range(n_caps):
            for i in range(n_prim):
                pos = torch.outer(y[b, j], z[b, i]) / (1 + z[b, i].pow(2).sum())
                neg = torch.outer(x_t[b, j], z_t[b, i]) / (1 + z_t[b, i].pow(2).sum())
                _block(du, j, i, d_prim).add_(2 * e[b, j, i] * (pos - neg) / bsz)
    return du, z_t, x_t


def test_paper_decoder_rule_against_a_literal_loop():
    dec, y, z = _decoder_setup()
    with torch.no_grad():
        du, stats = decoder_cd_update(dec, y, z)
        _, _, e = dec.route(y)
    expected, z_t, x_t = _paper_decoder_loop(dec.weight, y, z, e)
    torch.testing.assert_close(du, expected, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(stats["recon_caps_mse"], (squash(z) - squash(z_t)).pow(2).mean())
    torch.testing.assert_close(stats["caps_recon_mse"], (y - x_t).pow(2).mean())


def test_a_step_of_the_paper_decoder_rule_raises_the_data_model_contrast():
    """Derived in decoder_cd_update: dU is the gradient of the bilinear contrast D(U).

    D(U) = 2 sum_i [s(z_i) . g_i(U; x) - s(z~_i) . g_i(U; x~)] with e, s(z) and s(z~) fixed;
    an SGD step with grad = -dU (lr, no momentum) raises D by exactly lr |dU|^2. A flipped
    sign would lower it.
    """
    dec, y, z = _decoder_setup(seed=3)
    with torch.no_grad():
        du, _ = decoder_cd_update(dec, y, z)
        _, _, e = dec.route(y)
    _, z_t, x_t = _paper_decoder_loop(dec.weight, y, z, e)

    def stat(v):
        return v / (1 + v.pow(2).sum(-1, keepdim=True))

    s_data, s_model = stat(z), stat(z_t)

    def contrast(u):
        g_data = _z_loop(u, y, e, z.shape[2])  # g_i(U; x) = sum_j e_ji U_ji x_j
        g_model = _z_loop(u, x_t, e, z.shape[2])
        return 2 * ((s_data * g_data).sum() - (s_model * g_model).sum()) / B

    lr = 0.05
    dec.weight.grad = -du
    before = contrast(dec.weight.detach().clone())
    torch.optim.SGD(dec.parameters(), lr=lr).step()
    after = contrast(dec.weight.detach())
    torch.testing.assert_close(after - before, lr * du.pow(2).sum(), rtol=1e-9, atol=0)
    assert after > before


def test_paper_decoder_training_moves_u_output_towards_the_data_code():
    """Full steps (routing recomputed) bring U's routed output z~ towards the data's z."""
    dec, y, z = _decoder_setup(seed=2)
    z = 0.5 * z
    with torch.no_grad():
        start = decoder_cd_update(dec, y, z)[1]["recon_caps_mse"]
        for _ in range(200):
            dec.weight += 0.5 * decoder_cd_update(dec, y, z)[0]
        end = decoder_cd_update(dec, y, z)[1]["recon_caps_mse"]
    assert end < 0.5 * start


def test_stage_schedule_and_purity():
    assert [stage_of(e, [1, 2, 1]) for e in range(5)] == [1, 2, 2, 3, 3]
    assert [stage_of(e, [0, 0, 2]) for e in range(2)] == [3, 3]
    assert class_purity(torch.tensor([1, 1, 1, 1])) == (100.0, 1)
    assert class_purity(torch.tensor([2, 0, 2, 5, 5, 2])) == (50.0, 2)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("model.normalize", "rows", "model.normalize"),
        ("model.stage_epochs", [1, 1], "model.stage_epochs"),
        ("trainer.epochs", 5, "trainer.epochs .5. must equal"),
        ("cd.lr_encoder", 0.0, "cd.lr_encoder"),
        ("model.decoder_normalize", "both", "model.decoder_normalize"),
        ("cd.sparsity", -1.0, "cd.sparsity"),
        ("cd.sparsity_target", 1.0, "cd.sparsity_target"),
        ("cd.decoder_rule", "mirror", "cd.decoder_rule"),
        ("cd.decoder_target", "pixels", "cd.decoder_target"),
        ("model.generation", "zeros", "model.generation"),
    ],
)
def test_validate_config_names_the_key(key, value, match):
    from selfcaps.config.loading import load_config

    cfg = load_config("poe", "quick", [(key, value)])
    with pytest.raises(ValueError, match=match):
        PoE.validate_config(cfg)


def test_reconstruction_spread_is_zero_when_the_capsules_ignore_the_input():
    torch.manual_seed(0)
    net = PoECapsNet(channels=16).double().eval()
    x = torch.rand(6, 1, 28, 28, dtype=torch.float64)
    with torch.no_grad():
        net.encoder.weight.zero_()  # every input: the same capsules, the same reconstruction
    assert reconstruction_stats(net, x)["recon_caps_spread"].item() == 0.0
    with torch.no_grad():
        net.encoder.weight.normal_(0, 0.5)
        net.decoder.weight.normal_(0, 0.5)
        images = net.decode_capsules(net.encode(x)[0])
    by_pixel = [images.flatten(1)[:, p] for p in range(images[0].numel())]
    data = [x.flatten(1)[:, p] for p in range(x[0].numel())]
    spread = sum(float(v.std(unbiased=False)) for v in by_pixel) / len(by_pixel)
    expected = spread / (sum(float(v.std(unbiased=False)) for v in data) / len(data))
    got = reconstruction_stats(net, x)["recon_caps_spread"].item()
    assert got > 0 and got == pytest.approx(expected, rel=1e-9)


def test_capsule_length_and_its_spread_over_inputs_by_loops():
    torch.manual_seed(1)
    net = PoECapsNet(channels=16).double().eval()
    x = torch.rand(5, 1, 28, 28, dtype=torch.float64)
    with torch.no_grad():
        net.encoder.weight.normal_(0, 0.5)
        y = net.encode(x)[0]
    lengths = [[float(y[b, j].pow(2).sum().sqrt()) for j in range(20)] for b in range(5)]
    mean = sum(sum(row) for row in lengths) / 100
    per_capsule = []
    for j in range(20):
        m = sum(lengths[b][j] for b in range(5)) / 5
        per_capsule.append((sum((lengths[b][j] - m) ** 2 for b in range(5)) / 5) ** 0.5)
    stats = reconstruction_stats(net, x)
    assert stats["caps_length"].item() == pytest.approx(mean, rel=1e-9)
    assert stats["caps_length_spread"].item() == pytest.approx(sum(per_capsule) / 20, rel=1e-9)


# ---------------------------------------------------------------- stage 2's collapse
def _capsule_rows_loop(w, n=N, din=DIN, m=M, dout=DOUT):
    """W_j as (dout, n * din), block by block: columns i*din .. (i+1)*din - 1 hold W_ij."""
    rows = np.zeros((m, dout, n * din))
    for j in range(m):
        for i in range(n):
            rows[j, :, i * din : (i + 1) * din] = _block(w, i, j, dout).T.detach().numpy()
    return rows


def _pair_similarity_loop(rows):
    """Mean over j < k of the Frobenius cosine of W_j^T W_j and W_k^T W_k, formed explicitly."""
    grams = [r.T @ r for r in rows]
    sims = []
    for j in range(len(grams)):
        for k in range(j + 1, len(grams)):
            a, b = grams[j], grams[k]
            sims.append(np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b)))
    return float(np.mean(sims))


def test_top_direction_share_against_numpy_eigh_of_the_second_moment():
    layer, x = _layer(std=0.3)
    flat = x.flatten(1).numpy()
    moment = flat.T @ flat / len(flat)  # E[x x^T], N*DIN = 21 square, rank B = 6
    evals, evecs = np.linalg.eigh(moment)
    v = evecs[:, -1]
    got_evals, got_v = second_moment_spectrum(x)
    np.testing.assert_allclose(got_evals.numpy(), evals[::-1][:B], rtol=1e-9, atol=1e-12)
    assert abs(float(got_v.numpy() @ v)) == pytest.approx(1.0, abs=1e-10)
    rows = _capsule_rows_loop(layer.weight)
    expected = sum(np.sum((rows[j] @ v) ** 2) for j in range(M)) / np.sum(rows**2)
    assert float(top_direction_share(layer, got_v)) == pytest.approx(expected, rel=1e-10)
    assert 0.0 < expected < 0.5  # random W: far from aligned


def test_collapsed_w_has_share_one_and_pair_similarity_one():
    """Every row of every W_j a multiple of v (the collapse): share 1 and similarity 1."""
    layer, x = _layer()
    _, v = second_moment_spectrum(x)
    a = torch.randn(M, DOUT, dtype=torch.float64)  # each capsule writes v its own way
    with torch.no_grad():  # gemm layout: weight[i, d, j*DOUT + o] = (W_ij)[o, d] = a[j, o] v[i, d]
        layer.weight.copy_(torch.einsum("id,jo->idjo", v.view(N, DIN), a).reshape(N, DIN, -1))
    rows = _capsule_rows_loop(layer.weight)
    np.testing.assert_allclose(rows[2], np.outer(a[2].numpy(), v.numpy()), atol=1e-12)
    assert float(top_direction_share(layer, v)) == pytest.approx(1.0, abs=1e-12)
    assert float(capsule_pair_similarity(layer)) == pytest.approx(1.0, abs=1e-12)
    assert _pair_similarity_loop(rows) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_capsule_pair_similarity_against_a_literal_loop(seed):
    layer, _ = _layer(seed=seed)
    expected = _pair_similarity_loop(_capsule_rows_loop(layer.weight))
    assert float(capsule_pair_similarity(layer)) == pytest.approx(expected, rel=1e-10)


def test_while_every_capsule_is_off_the_update_is_a_power_iteration():
    """Tiny W (capsules off): the model term vanishes against the data term, and the data
    term is 2 c_ij z_j x_i^T with z_j = sum_i c_ij W_ij x_i (loops): linear in W."""
    layer, x = _layer(std=1e-4)
    with torch.no_grad():
        positive, negative, ch = encoder_cd_terms(layer, x)
    assert negative.norm() < 1e-9 * positive.norm()
    z = _z_loop(layer.weight, x, ch.c)
    expected = torch.zeros_like(layer.weight)
    for b in range(B):
        for i in range(N):
            for j in range(M):
                outer = torch.outer(x[b, i], z[b, j]) * ch.c[b, i, j] / B  # block layout: x z^T
                expected[i, :, j * DOUT : (j + 1) * DOUT] += outer
    torch.testing.assert_close(positive, expected, rtol=1e-6, atol=0)
