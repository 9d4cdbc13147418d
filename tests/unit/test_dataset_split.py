"""The split is repository-stratified, instance-grouped, seeded and independent of order."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.dataset.split import TEST, TRAIN, assign_splits, count_test

repos = st.sampled_from(["a/x", "b/y", "c/z", "d/w"])
pairs_strategy = st.lists(
    st.tuples(repos, st.integers(0, 40)).map(lambda p: (p[0], f"{p[0]}-{p[1]}")), max_size=120
)


@settings(max_examples=150, deadline=None)
@given(pairs=pairs_strategy, seed=st.integers(0, 5), frac=st.floats(0.0, 0.9), shuffle=st.randoms())
def test_split_properties(pairs: list, seed: int, frac: float, shuffle: random.Random) -> None:
    split = assign_splits(pairs, test_fraction=frac, seed=seed)
    assert set(split) == {i for _, i in pairs}
    assert set(split.values()) <= {TRAIN, TEST}
    # order and duplicates (several sessions of one instance) do not matter
    again = list(pairs) * 2
    shuffle.shuffle(again)
    assert assign_splits(again, test_fraction=frac, seed=seed) == split
    # stratified: per repository exactly count_test(n) instances are test
    for repo in {r for r, _ in pairs}:
        instances = {i for r, i in pairs if r == repo}
        n_test = sum(split[i] == TEST for i in instances)
        assert n_test == count_test(len(instances), frac)
        if len(instances) >= 1:
            assert any(split[i] == TRAIN for i in instances)


@settings(max_examples=100, deadline=None)
@given(pairs=pairs_strategy, cut=st.integers(0, 120))
def test_union_of_shards_equals_one_run(pairs: list, cut: int) -> None:
    """Computing the split over the union of two shards is the same as over one run's set."""
    one_run = assign_splits(pairs, test_fraction=0.2, seed=7)
    merged = assign_splits(pairs[:cut] + pairs[cut:], test_fraction=0.2, seed=7)
    assert merged == one_run


def test_rounding_rule_for_small_repositories() -> None:
    assert [count_test(n, 0.1) for n in (0, 1, 2, 4, 5, 14, 15, 100)] == [0, 0, 0, 0, 1, 1, 2, 10]
    assert count_test(2, 0.5) == 1  # never the whole repository
    assert count_test(3, 0.9) == 2
    assert count_test(10, 0.0) == 0
    assert count_test(45, 0.7) == 32  # 31.5 -> 32 although 45 * 0.7 < 31.5 in binary
    assert count_test(50, 0.29) == 15  # 14.5 -> 15 although 50 * 0.29 < 14.5 in binary


def test_seed_changes_which_instances_are_test() -> None:
    pairs = [("o/r", f"i{k}") for k in range(50)]
    a = assign_splits(pairs, test_fraction=0.1, seed=0)
    b = assign_splits(pairs, test_fraction=0.1, seed=1)
    assert sum(v == TEST for v in a.values()) == sum(v == TEST for v in b.values()) == 5
    assert a != b
