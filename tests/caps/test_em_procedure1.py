"""EM routing as printed: Procedure 1 of Hinton, Sabour & Frosst (ICLR 2018), transcribed literally.

The transcription below follows the procedure line by line in plain probabilities
(no log domain, no centred costs, a fixed inverse temperature), one sample at a time:

    R_ij <- 1 / |Omega_{L+1}|
    for t iterations: M-STEP for every parent j, then E-STEP for every child i
    M-STEP: R_ij <- R_ij * a_i; mu_j^h, (sigma_j^h)^2 weighted by R_ij;
            cost^h <- (beta_u + log sigma_j^h) sum_i R_ij;
            a_j <- logistic(lambda (beta_a - sum_h cost^h))
    E-STEP: p_j <- exp(-sum_h (V_ij^h - mu_j^h)^2 / (2 (sigma_j^h)^2))
                   / sqrt(prod_h 2 pi (sigma_j^h)^2)
            R_ij <- a_j p_j / sum_k a_k p_k
    return a, M
"""

import math

import pytest
import torch

from selfcaps.caps import em_routing
from selfcaps.models import create_model


def procedure1(V, a_in, beta_u, beta_a, lam, iters):
    """Procedure 1, literally; returns the parents' poses and activations after ``iters``."""
    B, N, M, D = V.shape
    mus = torch.zeros(B, M, D, dtype=torch.float64)
    acts = torch.zeros(B, M, dtype=torch.float64)
    for b in range(B):
        R = [[1.0 / M for _ in range(M)] for _ in range(N)]
        for _ in range(iters):
            mu = [[0.0] * D for _ in range(M)]
            sig2 = [[0.0] * D for _ in range(M)]
            act = [0.0] * M
            for j in range(M):  # M-STEP(a, R, V, j)
                for i in range(N):
                    R[i][j] = R[i][j] * float(a_in[b, i])
                rsum = sum(R[i][j] for i in range(N))
                cost = 0.0
                for h in range(D):
                    mu[j][h] = sum(R[i][j] * float(V[b, i, j, h]) for i in range(N)) / rsum
                    sig2[j][h] = (
                        sum(R[i][j] * (float(V[b, i, j, h]) - mu[j][h]) ** 2 for i in range(N))
                        / rsum
                    )
                    cost += (float(beta_u[j]) + math.log(math.sqrt(sig2[j][h]))) * rsum
                act[j] = 1.0 / (1.0 + math.exp(-lam * (float(beta_a[j]) - cost)))
            for i in range(N):  # E-STEP(mu, sigma, a, V, i)
                p = []
                for j in range(M):
                    norm = math.sqrt(math.prod(2 * math.pi * s for s in sig2[j]))
                    expo = sum(
                        (float(V[b, i, j, h]) - mu[j][h]) ** 2 / (2 * sig2[j][h]) for h in range(D)
                    )
                    p.append(math.exp(-expo) / norm)
                total = sum(act[k] * p[k] for k in range(M))
                R[i] = [act[j] * p[j] / total for j in range(M)]
        mus[b] = torch.tensor(mu, dtype=torch.float64)
        acts[b] = torch.tensor(act, dtype=torch.float64)
    return mus, acts


def _inputs(seed, B=2, N=7, M=3, D=4):
    g = torch.Generator().manual_seed(seed)
    V = torch.randn(B, N, M, D, generator=g, dtype=torch.float64)
    a = torch.rand(B, N, generator=g, dtype=torch.float64) * 0.9 + 0.1
    # beta_a large enough that the textbook logistic is not saturated (the costs are ~ -N).
    bu = torch.randn(M, generator=g, dtype=torch.float64) * 0.1
    ba = torch.randn(M, generator=g, dtype=torch.float64) - 2.0
    return V, a, bu, ba


@pytest.mark.parametrize(("iters", "lam"), [(1, 1.0), (3, 1.0), (3, 0.3)])
def test_procedure1_option_matches_the_literal_transcription(iters, lam):
    V, a, bu, ba = _inputs(iters)
    mu, act, _ = em_routing(V, a, bu, ba, iters, lam, eps=0.0, centre_costs=False)
    mu_ref, act_ref = procedure1(V, a, bu, ba, lam, iters)
    unsaturated = (act_ref > 1e-3) & (act_ref < 1 - 1e-3)
    assert unsaturated.float().mean() > 0.6  # the comparison is not vacuous
    torch.testing.assert_close(mu, mu_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(act, act_ref, rtol=1e-10, atol=1e-12)


def test_default_variant_is_not_procedure1():
    """The default (centred costs, annealed lambda) differs from the printed procedure."""
    V, a, bu, ba = _inputs(5)
    _, act, _ = em_routing(V, a, bu, ba, 3, eps=0.0)
    _, act_ref = procedure1(V, a, bu, ba, 1.0, 3)
    assert (act - act_ref).abs().max() > 1e-3


def test_table1_em_rows_route_by_their_variant(monkeypatch):
    """``table1_capnet_em`` uses the default variant; ``..._procedure1`` the printed one."""
    import selfcaps.models.encapnet as enc

    calls = []

    def spy(*args, **kwargs):
        calls.append((args[5:6], kwargs.get("centre_costs", True)))
        return em_routing(*args, **kwargs)

    monkeypatch.setattr(enc, "em_routing", spy)
    x = torch.randn(1, 3, 16, 16)
    create_model("table1_capnet_em", input_size=16)(x)
    assert calls and all(c == ((), True) for c in calls)
    calls.clear()
    create_model("table1_capnet_em_procedure1", input_size=16)(x)
    assert calls and all(c == ((1.0,), False) for c in calls)
