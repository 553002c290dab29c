"""Thm 6 and Thm 7 (framework paper §5.1): vert(P) by LP, the ReLU construction F = I, the linear
network's loss and its Eckart-Young bound, and vert(P F) = vert(P) for full-row-rank F."""

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import ConvexHull

from smaso.theorems.relu_vs_linear import (
    all_vert,
    best_linear_loss,
    eckart_young_loss,
    is_vertex,
    ladder_linear_loss_lower_bound,
    ladder_linear_rank_bounds,
    linear_loss_lower_bound,
    plot_relu_vs_linear,
    propagate_relu,
    relu_identity_ladder,
    relu_identity_weights,
    relu_region_forward,
    relu_vs_linear_curve,
    spherical_table,
    vert,
    vertices,
)
from teachers.ladder import Ladder
from teachers.statistics import exact_statistics


def _brute_vertices(P: np.ndarray) -> np.ndarray:
    """Carathéodory: p_i is in the hull of the other rows iff it is in the hull of some affinely
    independent subset of at most n + 1 of them, where the barycentric coordinates are unique;
    so enumerate subsets, solve exactly (lstsq) and accept non-negative exact solutions."""
    m, n = P.shape
    out = np.ones(m, dtype=bool)
    for i in range(m):
        others = [j for j in range(m) if j != i]
        for k in range(1, min(len(others), n + 1) + 1):
            for S in itertools.combinations(others, k):
                A = np.vstack([P[list(S)].T, np.ones(k)])
                rhs = np.concatenate([P[i], [1.0]])
                a, *_ = np.linalg.lstsq(A, rhs, rcond=None)
                if np.allclose(A @ a, rhs, atol=1e-9) and (a >= -1e-9).all():
                    out[i] = False
                    break
            if not out[i]:
                break
    return out


def _dirichlet_rows(rng, m, n, alpha=1.0):
    return rng.dirichlet(np.full(n, alpha), size=m)


# --------------------------------------------------------------------------- vert by LP
@pytest.mark.slow  # brute force over many matrices (about 3 s) (slow tier: default-tier budget)
def test_vertices_match_brute_force_on_small_integer_matrices():
    rng = np.random.default_rng(0)
    checked = non_vertices = 0
    for _ in range(150):
        m, n = int(rng.integers(1, 7)), int(rng.integers(1, 4))
        P = rng.integers(0, 3, size=(m, n)).astype(float)
        want = _brute_vertices(P)
        got = vertices(P)
        assert (got == want).all(), (P, got, want)
        assert vert(P) == want.sum() and all_vert(P) == want.all()
        assert [is_vertex(P, i) for i in range(m)] == list(want)
        checked += m
        non_vertices += int((~want).sum())
    assert non_vertices > 50 and checked - non_vertices > 50  # both answers exercised


def test_exhaustive_tiny_binary_matrices():
    # every 3 x 2 matrix with entries in {0, 1} (64 matrices)
    for bits in itertools.product([0.0, 1.0], repeat=6):
        P = np.array(bits).reshape(3, 2)
        assert (vertices(P) == _brute_vertices(P)).all(), P


@pytest.mark.parametrize("dim", [2, 3])
def test_vertices_match_convex_hull(dim):
    rng = np.random.default_rng(dim)
    for _ in range(15):
        X = rng.standard_normal((int(rng.integers(dim + 2, 12)), dim))  # general position, no duplicates
        want = np.zeros(len(X), dtype=bool)
        want[ConvexHull(X).vertices] = True
        assert (vertices(X) == want).all()


def test_stochastic_rows_inside_the_simplex():
    # rows in the 2-simplex, projected to 2-D for ConvexHull
    rng = np.random.default_rng(5)
    for _ in range(10):
        P = _dirichlet_rows(rng, 9, 3)
        want = np.zeros(9, dtype=bool)
        want[ConvexHull(P[:, :2]).vertices] = True
        assert (vertices(P, require_stochastic=True) == want).all()
    assert all_vert(np.eye(4), require_stochastic=True)


def test_vertex_edge_cases():
    assert vertices(np.array([[0.3, 0.7]])).tolist() == [True]  # a single row is a vertex
    P = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert vertices(P).tolist() == [False, False, True]  # equal rows: each is in the hull of the other
    mid = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    assert vert(mid) == 2 and not all_vert(mid)
    assert vert(torch.eye(3)) == 3  # torch input


def test_vertex_bad_inputs():
    with pytest.raises(ValueError, match=r"^P\[0, 1\].*negative"):
        vertices([[1.2, -0.2], [0.0, 1.0]], require_stochastic=True)
    with pytest.raises(ValueError, match=r"^P: row 1 sums to 0.9"):
        vert([[1.0, 0.0], [0.5, 0.4]], require_stochastic=True)
    assert vert([[1.0, 0.0], [0.5, 0.4]]) == 2  # not stochastic is fine when not required
    with pytest.raises(ValueError, match=r"^P: expected a non-empty 2-D"):
        vert([0.5, 0.5])
    with pytest.raises(ValueError, match=r"^P: contains NaN"):
        vert([[np.nan, 1.0]])
    with pytest.raises(ValueError, match=r"^P: expected a 2-D array of numbers"):
        vert([["a", "b"]])
    with pytest.raises(ValueError, match=r"^i: expected a row index in \[0, 2\)"):
        is_vertex(np.eye(2), 2)
    with pytest.raises(ValueError, match=r"^i:"):
        is_vertex(np.eye(2), True)


# --------------------------------------------------------------------------- Thm 6, ReLU side
def _assert_identity_construction(Ps, Fs, Ws, bias, k, margin=1.0):
    U, F = relu_region_forward(Ps, Fs, Ws, bias)
    m = U.shape[0]
    # the paper's proof: diagonal exactly 1 (each child contributes 1/|ch|), off-diagonal < 0
    np.testing.assert_allclose(np.diag(U), 1.0, rtol=0, atol=1e-10)
    assert (U[~np.eye(m, dtype=bool)] <= -0.5 * margin).all()
    np.testing.assert_allclose(F, np.eye(m), rtol=0, atol=1e-10)


@pytest.mark.parametrize("m_a,m_b,k", [(3, 3, 1), (4, 5, 2), (5, 5, 3)])
def test_relu_construction_per_child_dirichlet(m_a, m_b, k):
    rng = np.random.default_rng(m_a * 10 + k)
    Ps = [_dirichlet_rows(rng, m_a, m_b) for _ in range(k)]  # m_a <= m_b random rows: all-vert a.s.
    assert all(all_vert(P) for P in Ps)
    Ws, bias = relu_identity_weights(Ps)
    assert [W.shape for W in Ws] == [(m_b, m_a)] * k and bias.shape == (m_a,)
    _assert_identity_construction(Ps, None, Ws, bias, k)


def test_relu_construction_many_events_few_child_events():
    # m_a = 24 events from children of only 3 events each: all-vert, far beyond any linear rank
    Ps = [spherical_table(24, 3, seed=s, frequency=f) for s, f in [(0, 1), (1, 5)]]
    assert all(all_vert(P, require_stochastic=True) for P in Ps)
    Ws, bias = relu_identity_weights(Ps, margin=0.1)
    _assert_identity_construction(Ps, None, Ws, bias, 2, margin=0.1)
    Ps4 = [spherical_table(10, 4, seed=3)]
    assert all_vert(Ps4[0])
    _assert_identity_construction(Ps4, None, *relu_identity_weights(Ps4), 1)


def test_relu_construction_on_full_row_rank_inputs():
    # Thm 7: P F all-vert when P is and F has full row rank, so the construction works on F_b != I
    rng = np.random.default_rng(7)
    Ps = [_dirichlet_rows(rng, 4, 4) for _ in range(2)]
    Fs = [rng.standard_normal((4, 6)) for _ in range(2)]
    Ws, bias = relu_identity_weights(Ps, Fs)
    assert [W.shape for W in Ws] == [(6, 4), (6, 4)]
    _assert_identity_construction(Ps, Fs, Ws, bias, 2)


def test_relu_construction_joint_split_when_children_repeat_rows():
    # parent event = (z_1, z_2): each P_ab has repeated rows (not all-vert), the concatenation is
    codes = list(itertools.product(range(2), repeat=2))
    Ps = [np.eye(2)[[c[b] for c in codes]] for b in range(2)]
    assert not all_vert(Ps[0])
    with pytest.raises(ValueError, match=r"^P_list\[0\]: row 0 of P_ab F_b is not a vertex"):
        relu_identity_weights(Ps)
    Ws, bias = relu_identity_weights(Ps, split="joint")
    _, F = relu_region_forward(Ps, None, Ws, bias)
    np.testing.assert_allclose(F, np.eye(4), rtol=0, atol=1e-12)
    # three equal rows: no unit can single them out, whatever the split
    with pytest.raises(ValueError, match=r"^P_list: row 0 of the concatenated input"):
        relu_identity_weights([np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])], split="joint")


def test_relu_construction_bad_inputs():
    good = np.eye(3)
    with pytest.raises(ValueError, match=r"^P_list\[1\]: row 0 sums to"):
        relu_identity_weights([good, np.ones((3, 3))])
    with pytest.raises(ValueError, match=r"^P_list\[0\]\[0, 0\] = -0.5 is negative"):
        relu_identity_weights([[[-0.5, 1.5], [0.0, 1.0]]])
    with pytest.raises(ValueError, match=r"^P_list\[1\]: has 2 rows"):
        relu_identity_weights([good, np.eye(2)])
    with pytest.raises(ValueError, match=r"^F_list: 1 child inputs for 2 children"):
        relu_identity_weights([good, good], [good])
    with pytest.raises(ValueError, match=r"^F_list\[0\]: expected 3 rows"):
        relu_identity_weights([good], [np.eye(2)])
    with pytest.raises(ValueError, match=r"^split:"):
        relu_identity_weights([good], split="both")
    with pytest.raises(ValueError, match=r"^margin:"):
        relu_identity_weights([good], margin=0.0)
    with pytest.raises(ValueError, match=r"^P_list: a parent region needs at least one child"):
        relu_identity_weights([])
    with pytest.raises(ValueError, match=r"^W_list\[0\]: expected shape \(3, 2\)"):
        relu_region_forward([good], None, [np.ones((2, 2))])
    with pytest.raises(ValueError, match=r"^bias: expected shape"):
        relu_region_forward([good], None, [np.eye(3)], np.zeros(2))


LADDERS = [
    (lambda: Ladder.random(depth=2, branching=2, events=4, seed=1), "per_child"),
    (lambda: Ladder.random(depth=3, branching=2, events=[3, 4, 5, 6], concentration=0.5, seed=3), "per_child"),
    (lambda: Ladder.random(depth=2, branching=[3, 2], events=5, seed=4), "per_child"),
    (lambda: Ladder.fully_informative(depth=2, branching=2, leaf_events=2), "joint"),
    (lambda: Ladder.fully_informative(depth=1, branching=3, leaf_events=3, concentration=1.0, seed=2), "joint"),
]


@pytest.mark.parametrize("make,split", LADDERS)
def test_relu_identity_ladder_gives_identity_everywhere(make, split):
    lad = make()
    c = relu_identity_ladder(lad, split=split)
    assert c.loss < 1e-20
    for l in range(lad.depth + 1):
        assert c.F[l].shape == (lad.num_regions[l], lad.events[l], lad.events[l])
        eye = torch.eye(lad.events[l], dtype=torch.float64)
        assert (c.F[l] - eye).abs().max() < 1e-10, l
    for l in range(lad.depth):
        assert c.weights[l].shape == (lad.num_regions[l + 1], lad.events[l + 1], lad.events[l])
        assert c.biases[l].shape == (lad.num_regions[l], lad.events[l])
    # re-propagating the returned weights (Eq 9 with the ReLU gates) reproduces the result
    stats = exact_statistics(lad)
    leaves = torch.eye(lad.events[-1], dtype=torch.float64).expand(lad.num_regions[-1], -1, -1)
    _, F = propagate_relu(stats.P_down, c.weights, c.biases, leaves, lad.branching)
    assert torch.equal(F[0], c.F[0])
    # while the best-possible linear network of the same shape cannot reach 0 on the fully informative ladder
    if split == "joint" and lad.depth == 2:
        assert ladder_linear_loss_lower_bound(lad) == 7.0  # 16 - min(16, 2 * min(4, 2 * 2 + 1) + 1)


def test_relu_identity_ladder_with_gaussian_style_leaf_inputs():
    lad = Ladder.random(depth=2, branching=2, events=4, seed=8)
    rng = np.random.default_rng(0)
    leaves = rng.standard_normal((lad.num_regions[-1], 4, 6))  # full row rank a.s. (Thm 7)
    c = relu_identity_ladder(lad, leaf_inputs=leaves)
    assert c.loss < 1e-20 and c.weights[-1].shape == (4, 6, 4)


def test_relu_identity_ladder_errors():
    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=2)
    with pytest.raises(ValueError, match=r"^ladder: level 1 region 0: P_list\[0\]: row 0"):
        relu_identity_ladder(lad)  # repeated rows per child: the paper's per-child split cannot work
    with pytest.raises(ValueError, match=r"^leaf_inputs: expected shape \(4, 2, n_d\)"):
        relu_identity_ladder(lad, leaf_inputs=np.zeros((4, 3, 3)), split="joint")
    with pytest.raises(ValueError, match=r"^ladder: expected a Ladder"):
        relu_identity_ladder("ladder")
    with pytest.raises(ValueError, match=r"^weights\[0\]: shape"):
        stats = exact_statistics(lad)
        propagate_relu(stats.P_down[:2], [torch.zeros(2, 3, 16)], [None], torch.zeros(2, 4, 4), [2])


def test_ladder_constructions_refuse_a_tree_without_branching_by_name():
    # a tree whose regions have different numbers of children has no branching: a ValueError saying so, not a
    # TypeError from indexing None
    tree = Ladder.tree([[2], [1, 2]], [2, 2, 2], seed=0)
    for build in (relu_identity_ladder, ladder_linear_rank_bounds):
        with pytest.raises(ValueError, match=r"^ladder\.branching: set only on a uniform tree$"):
            build(tree)


# --------------------------------------------------------------------------- Thm 6, linear side
def test_eckart_young_loss():
    rng = np.random.default_rng(1)
    T = rng.standard_normal((6, 5))
    U, s, Vt = np.linalg.svd(T)
    for r in range(6):
        trunc = (U[:, :r] * s[:r]) @ Vt[:r]
        assert eckart_young_loss(T, r) == pytest.approx(((T - trunc) ** 2).sum(), abs=1e-12)
    assert eckart_young_loss(np.eye(7), 3) == pytest.approx(4.0)
    with pytest.raises(ValueError, match=r"^rank:"):
        eckart_young_loss(T, -1)
    with pytest.raises(ValueError, match=r"^target:"):
        eckart_young_loss([1.0, 2.0], 1)


@pytest.mark.parametrize("m,k,m_c", [(4, 2, 3), (12, 2, 3), (30, 3, 3), (20, 2, 4), (5, 1, 5)])
def test_best_linear_loss_at_least_bound(m, k, m_c):
    Ps = [spherical_table(m, m_c, seed=b) for b in range(k)] if m_c < m else [
        _dirichlet_rows(np.random.default_rng(m), m, m_c) for _ in range(k)]
    loss, Ws, c = best_linear_loss(Ps)
    bound = linear_loss_lower_bound(Ps)
    assert loss >= bound - 1e-9 and bound >= 0
    # the least-squares weights achieve the reported loss and it is m - rank([P_a1 ... P_ak, 1])
    U = sum(P @ W for P, W in zip(Ps, Ws, strict=True)) + c[None]
    assert ((U - np.eye(m)) ** 2).sum() == pytest.approx(loss, abs=1e-9)
    X = np.hstack([*Ps, np.ones((m, 1))])
    assert loss == pytest.approx(m - np.linalg.matrix_rank(X), abs=1e-8)
    assert bound == max(0, m - (k * m_c + 1))
    if m > k * m_c + 1:
        assert bound > 0 and loss > 0
    # random linear weights never beat the optimum
    rng = np.random.default_rng(0)
    Wr = [rng.standard_normal(W.shape) for W in Ws]
    assert ((sum(P @ W for P, W in zip(Ps, Wr, strict=True)) - np.eye(m)) ** 2).sum() >= loss
    _, _, c0 = best_linear_loss(Ps, bias=False)
    assert (c0 == 0).all() and linear_loss_lower_bound(Ps, bias=False) == max(0, m - k * m_c)


def test_ladder_linear_bound_holds_for_random_linear_networks():
    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=3)  # m = (81, 9, 3)
    assert ladder_linear_rank_bounds(lad) == [15, 7, 3]  # min(m_l, 2 r_{l+1} + 1)
    bound = ladder_linear_loss_lower_bound(lad)
    assert bound == 81 - 15
    assert ladder_linear_loss_lower_bound(lad, bias=False) == 81 - 12
    stats = exact_statistics(lad)
    leaves = torch.eye(3, dtype=torch.float64).expand(4, -1, -1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):  # linear network = Eq 9 without gates; its rank (and so its loss) obeys the bound
        W = [torch.randn(lad.num_regions[l + 1], lad.events[l + 1], lad.events[l], generator=gen,
                         dtype=torch.float64) for l in range(2)]
        bias = [torch.randn(lad.num_regions[l], lad.events[l], generator=gen, dtype=torch.float64) for l in range(2)]
        F = leaves
        for l in (1, 0):
            contrib = torch.einsum("cab,cbk,ckj->caj", stats.P_down[l + 1], F, W[l])
            F = contrib.reshape(lad.num_regions[l], 2, lad.events[l], -1).sum(1) + bias[l][:, None]
        assert torch.linalg.matrix_rank(F[0]) <= 15
        # best rescaling of this network's output by a last linear map is still above the bound
        X = F[0].numpy()
        sol, *_ = np.linalg.lstsq(X, np.eye(81), rcond=None)
        assert ((X @ sol - np.eye(81)) ** 2).sum() >= bound - 1e-8
    with pytest.raises(ValueError, match=r"^leaf_rank:"):
        ladder_linear_rank_bounds(lad, leaf_rank=-1)


# --------------------------------------------------------------------------- Thm 7
def test_thm7_vert_invariant_under_full_row_rank_F():
    rng = np.random.default_rng(11)
    for trial in range(25):
        m, n = int(rng.integers(3, 8)), int(rng.integers(2, 5))
        P = _dirichlet_rows(rng, m, n, alpha=0.7)
        if trial % 2:  # add rows inside the hull so that vert(P) < m
            a = rng.dirichlet(np.ones(m), size=2)
            P = np.vstack([P, a @ P])
        F = rng.standard_normal((n, n + int(rng.integers(0, 3))))  # n x r, r >= n: full row rank a.s.
        assert np.linalg.matrix_rank(F) == n
        vP, vPF = vertices(P), vertices(P @ F)
        assert (vP == vPF).all()
        assert all_vert(P @ F) == all_vert(P)
        if trial % 2:
            assert vert(P) < len(P)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 6), st.integers(1, 3), st.integers(0, 2))
def test_thm7_hypothesis_integer_matrices(seed, m, n, extra):
    # small integer P (repeated and interior rows are common) and an integer F of full row rank
    rng = np.random.default_rng(seed)
    P = rng.integers(0, 3, size=(m, n)).astype(float)
    F = rng.integers(-2, 3, size=(n, n + extra)).astype(float)
    if np.linalg.matrix_rank(F) < n:
        F[:, :n] += 7 * np.eye(n)  # |eigenvalues| of the block <= 3 * 2 < 7: full row rank
    assert np.linalg.matrix_rank(F) == n
    assert (vertices(P @ F) == vertices(P)).all()
    assert (vertices(P) == _brute_vertices(P)).all()


def test_thm7_fails_for_rank_deficient_F():
    P = np.eye(3)  # all-vert
    F = np.array([[1.0], [0.0], [-1.0]])  # rank 1 < 3 rows: the middle row lands between the others
    assert vert(P) == 3 and vert(P @ F) == 2 and not all_vert(P @ F)
    F2 = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])  # rows 0 and 2 collapse onto each other
    assert vert(P @ F2) == 1


# --------------------------------------------------------------------------- the figure
def test_curve_and_plot(tmp_path):
    _, rows = plot_relu_vs_linear([4, 8, 16, 32], tmp_path / "fig.png")
    assert (tmp_path / "fig.png").stat().st_size > 1000
    assert [r["m"] for r in rows] == [4, 8, 16, 32]
    for r in rows:
        assert r["relu_loss"] < 1e-20
        assert r["linear_loss"] >= r["lower_bound"] - 1e-9 >= -1e-9
    assert rows[-1]["lower_bound"] == 32 - 7 and rows[-1]["linear_loss"] == pytest.approx(32 - 5)
    assert relu_vs_linear_curve([16], children=3)[0]["lower_bound"] == 16 - 10
    with pytest.raises(ValueError, match=r"^ms:"):
        relu_vs_linear_curve([])
    with pytest.raises(ValueError, match=r"^m_child:"):
        spherical_table(5, 2)
    with pytest.raises(ValueError, match=r"^frequency:"):
        spherical_table(6, 3, frequency=2)


def test_example_script(tmp_path, capsys):
    path = Path(__file__).parents[1] / "examples" / "relu_vs_linear.py"
    spec = importlib.util.spec_from_file_location("relu_vs_linear_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = mod.main(["--ms", "4,16", "--out", str(tmp_path / "f.png")])
    assert (tmp_path / "f.png").exists() and len(rows) == 2
    assert "linear" in capsys.readouterr().out


# --------------------------------------------------------------------------- the student and the reformulation
def _student_with(lad, c):
    from smaso.student.network import LadderStudent

    student = LadderStudent(lad, list(lad.events[1:-1]), activation="relu", top_activation="relu",
                            dtype=torch.float64)
    with torch.no_grad():
        for l in range(lad.depth):
            student.weights[l].copy_(c.weights[l])
            student.biases[l].copy_(c.biases[l])
    return student


@pytest.mark.parametrize("make,split", [LADDERS[0], LADDERS[3]])
def test_reformulate_with_relu_gates_gives_identity(make, split):
    # smaso.student.reformulation.reformulate itself (Eq 9), D = the ReLU gates of the constructed pre-activations
    from types import SimpleNamespace

    from smaso.student.reformulation import reformulate

    lad = make()
    c = relu_identity_ladder(lad, split=split)
    d = lad.depth
    leaves = torch.eye(lad.events[-1], dtype=torch.float64).expand(lad.num_regions[-1], -1, -1)
    D = [(u > 0).to(torch.float64) if u is not None else None for u in c.U]
    measured = SimpleNamespace(D=D, Dp=[torch.ones_like(f) for f in c.F], Fbar=[None] * d + [leaves])
    ref = reformulate(_student_with(lad, c), exact_statistics(lad), measured)
    for l in range(d):
        assert (ref.F[l] - torch.eye(lad.events[l], dtype=torch.float64)).abs().max() < 1e-10
    # F_omega = I: the squared-loss gradient at the top vanishes
    assert ref.G_tilde[0].abs().max() < 1e-10


def test_student_outputs_the_label_on_fully_informative_samples():
    # with delta P(x | z) the per-sample outputs are the rows of F: the student is exact on data
    from teachers.sampling import sample_ladder

    lad = Ladder.fully_informative(depth=2, branching=2, leaf_events=2, concentration=1.0, seed=1)
    student = _student_with(lad, relu_identity_ladder(lad, split="joint"))
    s = sample_ladder(lad, 500, seed=0)
    with torch.no_grad():
        f = student(s.inputs(dtype=torch.float64))
    onehot = torch.nn.functional.one_hot(s.y.long(), lad.events[0]).to(torch.float64)
    assert (f - onehot).abs().max() < 1e-10
