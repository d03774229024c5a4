"""The gated delta rule's chunked forward and backward as the restructured CUDA kernels would compute
them, checked in float64 against autograd through the token-by-token definition (transformers'
torch_recurrent_gated_delta_rule): the algebra a kernel rewrite transcribes, shown right before any
CUDA is written (issue 42: gdn_rule.cu is 16.6x flash-linear-attention's time,
bench/results/2026-12-07-h100x1-gdn-fla.md).

Per head, a chunk of L tokens with q (l2-normalised, scaled), k (l2-normalised), v, beta and the
log-decays g: gamma = cumsum(g) within the chunk, e = exp(gamma), f = exp(gamma_L - gamma),
Gamma_ij = exp(gamma_i - gamma_j) for i >= j. Everything that does not need the state is
chunk-parallel (one kernel over every chunk of every head):

  A = strict_lower(diag(beta) (K K^T o Gamma)),  T = (I + A)^-1
  W = T diag(beta e) K,  U = T diag(beta) V,  M = lower(Q K^T o Gamma),  Kf = diag(f) K

and the state S (d_k x d_v) passes the chunks in order, each of its d_v columns on its own (the
kernel's grid: sequence x head x d_v / 32):

  Vn = U - W S,   O = diag(e) Q S + M Vn,   S <- e_L S + Kf^T Vn

The backward's state pass runs the chunks in reverse, again by columns of the state:

  dVn = M^T dO + Kf dS',   dS = (diag(e) Q)^T dO + e_L dS' - W^T dVn

and every other gradient is chunk-parallel from dO, dVn, dS' and the chunk's S (kept by the
forward): the products' gradients, the WY inverse's (dA = -T^T dT T^T on the strict lower part)
and the gates' (through Gamma, e, f, e_L into gamma, then a reverse cumulative sum into g).

    /usr/bin/python3 bench/gdn/chunk_math.py        (torch on the CPU, float64; seconds)
"""
import sys

import torch

torch.set_default_dtype(torch.float64)
B, H, T_LEN, DK, DV, L = 2, 3, 200, 16, 24, 64  # T_LEN not a multiple of L: a short last chunk


def recurrent(q, k, v, beta, g):
    """The definition, token by token: o_t = S_t^T q_t, S_t = e^{g_t} S_{t-1} + k_t beta_t (v_t - (e^{g_t} S_{t-1})^T k_t)^T."""
    S = q.new_zeros(B, H, DK, DV)
    out = []
    for t in range(q.shape[2]):
        S = S * g[:, :, t].exp()[..., None, None]
        delta = (v[:, :, t] - (S * k[:, :, t, :, None]).sum(-2)) * beta[:, :, t, None]
        S = S + k[:, :, t, :, None] * delta[:, :, None, :]
        out.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, 2)


def chunk_terms(q, k, v, beta, g):
    """The chunk-parallel terms of one chunk ([..., n, d] each, n <= L)."""
    n = q.shape[-2]
    gamma = g.cumsum(-1)
    e, e_last = gamma.exp(), gamma[..., -1:].exp()
    f = (gamma[..., -1:] - gamma).exp()
    lower = torch.ones(n, n).tril()
    Gamma = (gamma[..., :, None] - gamma[..., None, :]).clamp(max=0).exp() * lower
    A = (beta[..., :, None] * (k @ k.transpose(-1, -2)) * Gamma) * torch.ones(n, n).tril(-1)
    Tinv = torch.linalg.inv(torch.eye(n) + A)
    W = Tinv @ ((beta * e)[..., None] * k)
    U = Tinv @ (beta[..., None] * v)
    M = (q @ k.transpose(-1, -2)) * Gamma
    return dict(gamma=gamma, e=e, e_last=e_last, f=f, Gamma=Gamma, T=Tinv, W=W, U=U, M=M, Kf=f[..., None] * k)


def chunks(x, dim=2):
    return list(x.split(L, dim))


def forward(q, k, v, beta, g):
    """O and each chunk's starting state."""
    S = q.new_zeros(B, H, DK, DV)
    outs, states = [], []
    for qc, kc, vc, bc, gc in zip(chunks(q), chunks(k), chunks(v), chunks(beta), chunks(g)):
        c = chunk_terms(qc, kc, vc, bc, gc)
        states.append(S)
        Vn = c["U"] - c["W"] @ S
        outs.append(c["e"][..., None] * (qc @ S) + c["M"] @ Vn)
        S = c["e_last"][..., None] * S + c["Kf"].transpose(-1, -2) @ Vn
    return torch.cat(outs, 2), states


def backward(q, k, v, beta, g, dO, states):
    """dq, dk, dv, dbeta, dg by the formulas of the module docstring."""
    grads = {name: [] for name in ("q", "k", "v", "beta", "g")}
    dS1 = q.new_zeros(B, H, DK, DV)
    parts = list(zip(chunks(q), chunks(k), chunks(v), chunks(beta), chunks(g), chunks(dO), states))
    for qc, kc, vc, bc, gc, dOc, S in reversed(parts):
        c = chunk_terms(qc, kc, vc, bc, gc)
        n = qc.shape[-2]
        e, f, e_last, Gamma, T, W, M, Kf = (c[x] for x in ("e", "f", "e_last", "Gamma", "T", "W", "M", "Kf"))
        Vn = c["U"] - W @ S
        # the state pass (by columns of S in the kernel)
        dVn = M.transpose(-1, -2) @ dOc + Kf @ dS1
        dS0 = (e[..., None] * qc).transpose(-1, -2) @ dOc + e_last[..., None] * dS1 - W.transpose(-1, -2) @ dVn
        # the products
        dU, dW = dVn, -dVn @ S.transpose(-1, -2)
        dM = (dOc @ Vn.transpose(-1, -2)) * torch.ones(n, n).tril()
        dOS = dOc @ S.transpose(-1, -2)
        dq = e[..., None] * dOS + (dM * Gamma) @ kc
        dk = (dM * Gamma).transpose(-1, -2) @ qc + f[..., None] * (Vn @ dS1.transpose(-1, -2))
        de = (qc * dOS).sum(-1)
        df = (kc * (Vn @ dS1.transpose(-1, -2))).sum(-1)
        de_last = (S * dS1).sum((-1, -2))[..., None]
        dGamma = dM * (qc @ kc.transpose(-1, -2))
        # the WY form: U = T diag(beta) V, W = T diag(beta e) K, T = (I + A)^-1
        bv, bek = bc[..., None] * vc, (bc * e)[..., None] * kc
        dT = dU @ bv.transpose(-1, -2) + dW @ bek.transpose(-1, -2)
        TdU, TdW = T.transpose(-1, -2) @ dU, T.transpose(-1, -2) @ dW
        dv = bc[..., None] * TdU
        dbeta = (vc * TdU).sum(-1) + (e[..., None] * kc * TdW).sum(-1)
        dk = dk + (bc * e)[..., None] * TdW
        de = de + (bc[..., None] * kc * TdW).sum(-1)
        dA = -(T.transpose(-1, -2) @ dT @ T.transpose(-1, -2)) * torch.ones(n, n).tril(-1)
        KK = kc @ kc.transpose(-1, -2)
        dbeta = dbeta + (dA * KK * Gamma).sum(-1)
        G = bc[..., :, None] * dA * Gamma
        dk = dk + (G + G.transpose(-1, -2)) @ kc
        dGamma = dGamma + bc[..., :, None] * dA * KK
        # the gates into gamma, then g
        dGG = dGamma * Gamma
        dgamma = dGG.sum(-1) - dGG.sum(-2) + de * e - df * f
        dgamma[..., -1] += (df * f).sum(-1) + (de_last * e_last)[..., 0]
        dg = dgamma.flip(-1).cumsum(-1).flip(-1)
        for name, value in zip(("q", "k", "v", "beta", "g"), (dq, dk, dv, dbeta, dg)):
            grads[name].append(value)
        dS1 = dS0
    return [torch.cat(grads[name][::-1], 2) for name in ("q", "k", "v", "beta", "g")]


def main():
    gen = torch.Generator().manual_seed(7)
    rand = lambda *shape: torch.randn(*shape, generator=gen)
    q = torch.nn.functional.normalize(rand(B, H, T_LEN, DK), dim=-1) / DK ** 0.5
    k = torch.nn.functional.normalize(rand(B, H, T_LEN, DK), dim=-1)
    v, dO = rand(B, H, T_LEN, DV), rand(B, H, T_LEN, DV)
    beta = torch.sigmoid(rand(B, H, T_LEN))
    g = -torch.nn.functional.softplus(rand(B, H, T_LEN)) * 0.3
    inputs = [x.clone().requires_grad_(True) for x in (q, k, v, beta, g)]
    want = recurrent(*inputs)
    want.backward(dO)
    got, states = forward(q, k, v, beta, g)
    ok = True
    rel = lambda a, b: ((a - b).norm() / b.norm()).item()
    print(f"o: {rel(got, want.detach()):.2e} relative")
    ok &= rel(got, want.detach()) < 1e-10
    for name, mine, ref in zip(("dq", "dk", "dv", "dbeta", "dg"), backward(q, k, v, beta, g, dO, states), inputs):
        err = rel(mine, ref.grad)
        print(f"{name}: {err:.2e} relative")
        ok &= err < 1e-10
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
