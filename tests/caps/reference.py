"""Straightforward per-sample, per-capsule Python-loop references (slow, obviously right)."""

from __future__ import annotations

import math

import torch


def squash_ref(s: torch.Tensor) -> torch.Tensor:
    n2 = float((s * s).sum())
    n = math.sqrt(n2)
    if n == 0.0:
        return torch.zeros_like(s)
    return s * (n2 / (1.0 + n2)) / n


def softmax_list(xs: list[float]) -> list[float]:
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    z = sum(e)
    return [v / z for v in e]


def dynamic_routing_loop(u_hat, iters, agreement="dot", normalize="parents"):
    """u_hat (B, N, M, D) -> v (B, M, D), c (B, N, M), one sample and one capsule at a time."""
    B, N, M, D = u_hat.shape
    v_all = torch.zeros(B, M, D, dtype=u_hat.dtype)
    c_all = torch.zeros(B, N, M, dtype=u_hat.dtype)
    for b in range(B):
        logits = [[0.0] * M for _ in range(N)]
        for it in range(iters):
            c = [[0.0] * M for _ in range(N)]
            if normalize == "parents":
                for i in range(N):
                    c[i] = softmax_list(logits[i])
            else:
                for j in range(M):
                    col = softmax_list([logits[i][j] for i in range(N)])
                    for i in range(N):
                        c[i][j] = col[i]
            v = []
            for j in range(M):
                s = torch.zeros(D, dtype=u_hat.dtype)
                for i in range(N):
                    s = s + c[i][j] * u_hat[b, i, j]
                v.append(squash_ref(s))
            if it < iters - 1:
                for i in range(N):
                    for j in range(M):
                        if agreement == "dot":
                            logits[i][j] += float(u_hat[b, i, j] @ v[j])
                        else:
                            nu = float(u_hat[b, i, j].norm())
                            nv = float(v[j].norm())
                            logits[i][j] += float(u_hat[b, i, j] @ v[j]) / (nu * nv)
        for j in range(M):
            v_all[b, j] = v[j]
        for i in range(N):
            for j in range(M):
                c_all[b, i, j] = c[i][j]
    return v_all, c_all


def votes_loop(u, W, M):
    """u (B, N, Din), W (N, Din, M*D): u_hat[b, i, j] = W_ij^T-style mat-vec per sample."""
    B, N, _ = u.shape
    D = W.shape[-1] // M
    out = torch.zeros(B, N, M, D, dtype=u.dtype)
    for b in range(B):
        for i in range(N):
            for j in range(M):
                Wij = W[i, :, j * D : (j + 1) * D]  # (Din, D)
                out[b, i, j] = Wij.t() @ u[b, i]
    return out


def self_routing_loop(u_hat, a, logits, eps=1e-8):
    B, N, M, D = u_hat.shape
    v = torch.zeros(B, M, D, dtype=u_hat.dtype)
    a_out = torch.zeros(B, M, dtype=u_hat.dtype)
    for b in range(B):
        c = [softmax_list([float(x) for x in logits[b, i]]) for i in range(N)]
        a_sum = sum(float(a[b, i]) for i in range(N))
        for j in range(M):
            num = torch.zeros(D, dtype=u_hat.dtype)
            den = 0.0
            for i in range(N):
                num = num + c[i][j] * float(a[b, i]) * u_hat[b, i, j]
                den += c[i][j] * float(a[b, i])
            v[b, j] = num / (den + eps)
            a_out[b, j] = den / (a_sum + eps)
    return v, a_out


def em_routing_loop(V, a_in, beta_u, beta_a, lambdas, eps=1e-6):
    """Plain-probability EM routing (Hinton et al. 2018), one sample at a time."""
    B, N, M, D = V.shape
    mus = torch.zeros(B, M, D, dtype=V.dtype)
    acts = torch.zeros(B, M, dtype=V.dtype)
    for b in range(B):
        R = [[1.0 / M] * M for _ in range(N)]
        for it, lam in enumerate(lambdas):
            mu = torch.zeros(M, D, dtype=V.dtype)
            var = torch.zeros(M, D, dtype=V.dtype)
            rsum = [0.0] * M
            costs = [0.0] * M
            for j in range(M):
                rs = [R[i][j] * float(a_in[b, i]) for i in range(N)]
                rsum[j] = sum(rs) + eps
                for i in range(N):
                    mu[j] += rs[i] / rsum[j] * V[b, i, j]
                for i in range(N):
                    var[j] += rs[i] / rsum[j] * (V[b, i, j] - mu[j]) ** 2
                var[j] += eps
                costs[j] = float(((beta_u[j] + 0.5 * torch.log(var[j])) * rsum[j]).sum())
            mean_cost = sum(costs) / M
            act = [
                1.0 / (1.0 + math.exp(-lam * (float(beta_a[j]) - (costs[j] - mean_cost))))
                for j in range(M)
            ]
            if it == len(lambdas) - 1:
                mus[b] = mu
                acts[b] = torch.tensor(act, dtype=V.dtype)
                break
            for i in range(N):
                p = []
                for j in range(M):
                    logp = -float(
                        (
                            (V[b, i, j] - mu[j]) ** 2 / (2 * var[j])
                            + 0.5 * torch.log(2 * math.pi * var[j])
                        ).sum()
                    )
                    p.append(math.log(act[j]) + logp)
                R[i] = softmax_list(p)
    return mus, acts
