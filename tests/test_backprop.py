"""Back-propagation written out (``smaso.depth.backprop``) against autograd, and the chain-rule warm-up."""

from __future__ import annotations

import itertools

import pytest
import torch

from smaso.depth.backprop import activation_pair, backprop, chain_rule_example, forward_pass, sgd_step

DT = torch.float64


def random_params(widths, gen):
    return [
        (torch.randn(b, a, generator=gen, dtype=DT) / a**0.5, torch.randn(b, generator=gen, dtype=DT))
        for a, b in itertools.pairwise(widths)
    ]


def autograd_reference(params, x, y, activations, frobenius=0.0):
    leaves = [(W.clone().requires_grad_(True), b.clone().requires_grad_(True)) for W, b in params]
    h = x
    for (W, b), name in zip(leaves, activations, strict=True):
        h = activation_pair(name)[0](h @ W.T + b)
    loss = ((h - y) ** 2).sum(dim=1).mean() + frobenius * sum((W**2).sum() for W, _ in leaves)
    flat = torch.autograd.grad(loss, [t for pair in leaves for t in pair])
    return loss, [(flat[2 * i], flat[2 * i + 1]) for i in range(len(leaves))]


@pytest.mark.parametrize("act", ["relu", "leaky_relu:0.1", "tanh", "sigmoid", "abs"])
@pytest.mark.parametrize("seed", range(5))
def test_backprop_equals_autograd(act, seed):
    gen = torch.Generator().manual_seed(seed)
    depth = 1 + seed % 4
    widths = [3, *torch.randint(1, 7, (depth,), generator=gen).tolist(), 2]
    params = random_params(widths, gen)
    x = torch.randn(17, 3, generator=gen, dtype=DT)
    y = torch.randn(17, 2, generator=gen, dtype=DT)
    names = [act] * (len(params) - 1) + ["linear"]
    for frob in (0.0, 0.03):
        loss, grads = backprop(params, x, y, act, frobenius=frob)
        ref_loss, ref = autograd_reference(params, x, y, names, frob)
        torch.testing.assert_close(loss, ref_loss, rtol=1e-13, atol=1e-13)
        for (dW, db), (rW, rb) in zip(grads, ref, strict=True):
            torch.testing.assert_close(dW, rW, rtol=1e-12, atol=1e-13)
            torch.testing.assert_close(db, rb, rtol=1e-12, atol=1e-13)


def test_nonlinear_output_and_per_layer_names():
    gen = torch.Generator().manual_seed(7)
    params = random_params([2, 5, 4, 1], gen)
    x = torch.randn(9, 2, generator=gen, dtype=DT)
    y = torch.rand(9, generator=gen, dtype=DT)  # (batch,) target for one output
    names = ["tanh", "leaky_relu:0.2", "sigmoid"]
    loss, grads = backprop(params, x, y, names)
    ref_loss, ref = autograd_reference(params, x, y[:, None], names)
    torch.testing.assert_close(loss, ref_loss)
    for g, r in zip(grads, ref, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-13)


def test_forward_cache_and_single_neuron():
    # the single-neuron warm-up: dL/dw = 2 (h - y) g'(a) x, dL/db = 2 (h - y) g'(a)
    W, b = torch.tensor([[0.5]], dtype=DT), torch.tensor([0.25], dtype=DT)
    x, y = torch.tensor([[2.0]], dtype=DT), torch.tensor([[0.0]], dtype=DT)
    cache = forward_pass([(W, b)], x, ["tanh"])
    a = torch.tensor(1.25, dtype=DT)
    assert len(cache.h) == 2 and torch.equal(cache.h[0], x)
    torch.testing.assert_close(cache.output[0, 0], torch.tanh(a))
    _, ((dW, db),) = backprop([(W, b)], x, y, ["tanh"])
    expected = 2 * torch.tanh(a) * (1 - torch.tanh(a) ** 2)
    torch.testing.assert_close(db[0], expected)
    torch.testing.assert_close(dW[0, 0], expected * 2.0)


def test_sgd_step_decreases_loss():
    gen = torch.Generator().manual_seed(2)
    params = random_params([1, 8, 1], gen)
    x = torch.rand(64, 1, generator=gen, dtype=DT)
    y = torch.sin(3 * x)
    loss0, params1 = sgd_step(params, x, y, "tanh", lr=0.05, frobenius=1e-3)
    loss1, _ = backprop(params1, x, y, "tanh", frobenius=1e-3)
    assert loss1 < loss0


def test_chain_rule_warm_up_numbers():
    ex = chain_rule_example(1.0)
    assert ex["values"] == {"w": 1.0, "g1": 1.0, "g2": 2.0, "h1": 2.0, "h2": 7.0, "f": 28.0}
    assert len(ex["partials"]) == 8 and len(ex["paths"]) == 4
    assert ex["paths"][("w", "g2", "h1", "f")] == 56.0  # the notes' boxed term
    assert ex["df_dw"] == 296.0 and ex["autograd"] == pytest.approx(296.0, abs=1e-12)
    for w in (-0.7, 0.3, 2.5):
        other = chain_rule_example(w)
        assert other["df_dw"] == pytest.approx(other["autograd"], rel=1e-12)


def test_bad_inputs():
    W, b = torch.ones(2, 3, dtype=DT), torch.zeros(2, dtype=DT)
    with pytest.raises(ValueError, match="layer 0"):
        forward_pass([(W, b)], torch.ones(4, 2, dtype=DT))
    with pytest.raises(ValueError, match="batch, features"):
        forward_pass([(W, b)], torch.ones(3, dtype=DT))
    with pytest.raises(ValueError, match="activation"):
        forward_pass([(W, b)], torch.ones(4, 3, dtype=DT), ["swish"])
    with pytest.raises(ValueError, match="one per layer"):
        forward_pass([(W, b)], torch.ones(4, 3, dtype=DT), ["relu", "relu"])
    with pytest.raises(ValueError, match="y: expected"):
        backprop([(W, b)], torch.ones(4, 3, dtype=DT), torch.ones(5, dtype=DT))
    with pytest.raises(ValueError, match="at least one"):
        forward_pass([], torch.ones(4, 3, dtype=DT))
