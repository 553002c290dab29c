"""The names of the graph student modules of smaso 0.2 (issue 17) keep working for one release, each with a
DeprecationWarning naming its replacement in the one student of every ladder (issue 24)."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from conftest_student import one_torch_thread  # noqa: F401 (fixture)

from smaso.student.diagnosis import compare_statistics_to_theory
from smaso.student.frequency import FrequencyAccumulator, FrequencyStatistics, ReplicateAccumulator, collect_statistics
from smaso.student.network import LadderStudent, StudentRecord
from teachers.ladder import Ladder
from teachers.sampling import sample_ladder
from teachers.statistics import EventStatistics

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from smaso.student import graph_frequency, graph_network, graph_reformulation

F64 = torch.float64


@pytest.mark.parametrize("module, new", [(graph_network, "smaso.student.network"),
                                         (graph_frequency, "smaso.student.frequency"),
                                         (graph_reformulation, "smaso.student.reformulation")])
def test_old_module_paths_warn_on_import(module, new):
    with pytest.warns(DeprecationWarning, match=new):
        importlib.reload(module)


@pytest.fixture(scope="module")
def dag():
    g = Ladder.fully_informative_conv1d(4, [2, 2, 2], [1, 1, 1])
    s = sample_ladder(g, 400, 0)
    return g, s.inputs(dtype=F64), s.y, s.z.long()


def test_old_student_names_warn_and_return_the_one_student(dag):
    g, x, y, _ = dag
    with pytest.warns(DeprecationWarning, match="LadderStudent"):
        st = graph_network.GraphStudent(g, 3, seed=1, dtype=F64)
    assert type(st) is LadderStudent and isinstance(st, graph_network.GraphStudent)
    assert torch.equal(st.weights[0], LadderStudent(g, 3, seed=1, dtype=F64).weights[0])
    with pytest.warns(DeprecationWarning, match="the student itself"):
        assert graph_network.GraphStudent.from_ladder_student(st) is st
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="student"):
        graph_network.GraphStudent.from_ladder_student(object())
    with pytest.warns(DeprecationWarning, match=r"\.ladder"):
        assert st.graph is g
    rec = st.forward_backward(x, y)
    assert isinstance(rec, graph_network.GraphStudentRecord)
    with pytest.warns(DeprecationWarning, match="StudentRecord"):
        assert type(graph_network.GraphStudentRecord()) is StudentRecord
    with pytest.warns(DeprecationWarning, match="train_ladder_student"):
        hist = graph_network.train_graph_student(st, x, y, steps=2, lr=0.1)
    assert len(hist) == 2
    assert graph_network.level_edges(g, 0) == st.edges[0]


def test_old_statistics_names_warn_and_return_the_one_accumulator(dag):
    g, x, y, z = dag
    st = LadderStudent(g, 3, seed=1, dtype=F64)
    with pytest.warns(DeprecationWarning, match="FrequencyAccumulator"):
        acc = graph_frequency.GraphFrequencyAccumulator(st, F64)
    assert type(acc) is FrequencyAccumulator
    acc.add(st.forward_backward(x, y), z)
    stats = acc.result()
    assert isinstance(stats, graph_frequency.GraphFrequencyStatistics) and isinstance(stats, FrequencyStatistics)
    with pytest.warns(DeprecationWarning, match="collect_statistics"):
        stats2 = graph_frequency.collect_graph_statistics(st, x, y, z, dtype=F64)
    torch.testing.assert_close(stats2.G[1], stats.G[1], rtol=0, atol=1e-12)
    with pytest.warns(DeprecationWarning, match="ReplicateAccumulator"):
        reps = graph_frequency.GraphReplicates(st, F64, 3)
    assert type(reps) is ReplicateAccumulator
    with pytest.warns(DeprecationWarning, match="exact_statistics"):
        P = graph_frequency.GraphEventStatistics.exact(g)
    assert type(P) is EventStatistics and isinstance(P, graph_frequency.GraphEventStatistics)
    with pytest.warns(DeprecationWarning, match="EventStatistics"):
        Q = graph_frequency.GraphEventStatistics(g, P.marginals, P.joints, P.P_down, None)
    assert type(Q) is EventStatistics
    with pytest.warns(DeprecationWarning, match="ladder.events"):
        assert graph_frequency.padded_events(g) == list(g.events)
    with pytest.warns(DeprecationWarning, match=r"\.ladder"):
        assert stats.graph is g
    with pytest.warns(DeprecationWarning, match=r"\.ladder"):
        assert P.graph is g
    with pytest.warns(DeprecationWarning, match="FrequencyStatistics"):
        graph_frequency.GraphFrequencyStatistics(g, stats.num_examples, stats.counts, stats.means, stats.Fc,
                                                 stats.Gp_tilde, stats.dW, stats.db, stats.P, stats.loss)
    with pytest.warns(DeprecationWarning, match="accumulate_statistics"):
        state, _ = graph_frequency.accumulate_graph_statistics(st, sample_ladder(g, 100, 1), dtype=F64)
    assert state.n == 100


def test_old_reformulation_names_warn_and_give_the_one_reformulation(dag):
    g, x, y, z = dag
    st = LadderStudent(g, 3, seed=1, dtype=F64)
    stats = collect_statistics(st, x, y, z, dtype=F64)
    with pytest.warns(DeprecationWarning, match="reformulate"):
        pred = graph_reformulation.graph_reformulate(st, stats.P, stats)
    torch.testing.assert_close(pred.Fbar[0], stats.Fbar[0].to(F64), rtol=0, atol=1e-10)  # Thm 3
    with pytest.warns(DeprecationWarning, match="diagnose"):
        rows = graph_reformulation.graph_conditions(stats)
    assert len(rows) == g.depth + 1
    with pytest.warns(DeprecationWarning, match="compare_statistics_to_theory"):
        old = graph_reformulation.compare_graph_statistics_to_theory(st, stats)
    assert old == compare_statistics_to_theory(st, stats)
