"""The train/test split: repository-stratified, instance-grouped, seeded and order-independent.

Owns: deciding, for a set of (repo, instance_id) pairs, which instances go to `test`.
Out of scope: which instances are in the set (the writer passes those with accepted sessions)
and writing rows (writer.py).

Rule, per repository with n distinct instances:
  n_test = min(floor(n * test_fraction + 0.5), n - 1)     (round half up; never the whole repo)
so with the default 0.1 a repository needs 5 instances before one goes to test, and a repository
with a single instance is always train (its only instance would otherwise be test-only, and a
repository with no train data is no use for training). The n_test instances with the smallest
sha256("{seed}\\0{repo}\\0{instance_id}") go to test. The result depends only on (seed, repo,
the set of instance ids), never on session order or on how the sessions were sharded, so
`polar merge` over shards gives exactly the split one run would have given. All sessions of an
instance share its split.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

TRAIN = "train"
TEST = "test"
SPLITS = (TRAIN, TEST)


def count_test(n: int, test_fraction: float) -> int:
    """How many of a repository's n instances go to test (see the module docstring)."""
    if n <= 1 or test_fraction <= 0:
        return 0
    # round the product to 9 decimals first so 45 * 0.7 (= 31.499999999999996 in binary floating
    # point) rounds half up to 32 as the decimal rule says
    return min(math.floor(round(n * test_fraction, 9) + 0.5), n - 1)


def _rank_key(seed: int, repo: str, instance_id: str) -> bytes:
    return hashlib.sha256(f"{seed}\0{repo}\0{instance_id}".encode()).digest()


def assign_splits(
    pairs: Iterable[tuple[str, str]], *, test_fraction: float, seed: int
) -> dict[str, str]:
    """(repo, instance_id) pairs -> {instance_id: "train" | "test"}.

    An instance id that appears under two repositories is an input error upstream; here the
    first repository (in sorted order) owns it so the result stays deterministic.
    """
    by_repo: dict[str, set[str]] = defaultdict(set)
    owner: dict[str, str] = {}
    for repo, instance_id in sorted(set(pairs)):
        if instance_id in owner:
            continue
        owner[instance_id] = repo
        by_repo[repo].add(instance_id)
    split: dict[str, str] = {}
    for repo, instances in by_repo.items():
        ranked = sorted(instances, key=lambda i: (_rank_key(seed, repo, i), i))
        k = count_test(len(ranked), test_fraction)
        for pos, instance_id in enumerate(ranked):
            split[instance_id] = TEST if pos < k else TRAIN
    return split


def split_counts(split: Mapping[str, str]) -> dict[str, int]:
    counts = dict.fromkeys(SPLITS, 0)
    for name in split.values():
        counts[name] += 1
    return counts
