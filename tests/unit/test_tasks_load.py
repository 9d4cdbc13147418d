"""Task loading: every supported source format and row shape, image naming, bad rows,
duplicates and filters. Fixtures are small files written by the tests (real JSONL / JSON /
Parquet on disk); the bundled demo set is loaded as it ships."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polar_cli.errors import InputError, RecipeError
from polar_cli.recipe.schema import TasksConfig
from polar_cli.tasks import Dataset, default_image, load_tasks
from polar_cli.tasks.images import detect_dataset

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "recipes" / "tasks"


def swe_row(iid: str = "django__django-11099", **extra: object) -> dict[str, object]:
    """A SWE-bench-shaped row: F2P / P2P as JSON strings, environment_setup_commit present."""
    row: dict[str, object] = {
        "instance_id": iid,
        "repo": "django/django",
        "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
        "environment_setup_commit": "419a78300f7cd27611196e1e464d50fd0385ff27",
        "problem_statement": "UsernameValidator allows trailing newline in usernames",
        "patch": "diff --git a/x b/x\n",
        "test_patch": "diff --git a/tests/t.py b/tests/t.py\n",
        "FAIL_TO_PASS": json.dumps(["test_ascii_validator (auth_tests.test_validators.T)"]),
        "PASS_TO_PASS": json.dumps([]),
        "hints_text": "",
        "version": "3.0",
    }
    row.update(extra)
    return row


def gym_row(iid: str = "getmoto__moto-5752", **extra: object) -> dict[str, object]:
    """A SWE-Gym-shaped row: real lists, no environment_setup_commit."""
    row: dict[str, object] = {
        "instance_id": iid,
        "repo": "getmoto/moto",
        "base_commit": "b2300f1eae1323e3e8bc45f97e530ce129dff12e",
        "problem_statement": "describe_parameters depends on filter order",
        "patch": "",
        "test_patch": "diff --git a/tests/test_ssm.py b/tests/test_ssm.py\n",
        "FAIL_TO_PASS": ["tests/test_ssm.py::test_describe_parameters__multiple_tags"],
        "PASS_TO_PASS": ["tests/test_ssm.py::test_get_parameter"],
        "version": "4.0",
    }
    row.update(extra)
    return row


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def load(source: Path | str, **kw: object) -> object:
    return load_tasks(TasksConfig(source=str(source), **kw))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- formats


def test_jsonl_swe_bench_rows_parse_json_string_test_lists(tmp_path: Path) -> None:
    ts = load(write_jsonl(tmp_path / "t.jsonl", [swe_row(), swe_row("astropy__astropy-12907")]))
    assert [t.instance_id for t in ts.tasks] == ["django__django-11099", "astropy__astropy-12907"]
    task = ts.tasks[0]
    assert task.fail_to_pass == ("test_ascii_validator (auth_tests.test_validators.T)",)
    assert task.pass_to_pass == ()
    assert task.image == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert task.source_index == 0 and ts.problems == [] and ts.total_rows == 2


def test_json_list_and_wrapped_object(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([gym_row()]))
    (tmp_path / "b.json").write_text(json.dumps({"rows": [gym_row("x__y-1", repo="x/y")]}))
    assert [t.instance_id for t in load(tmp_path / "a.json").tasks] == ["getmoto__moto-5752"]
    assert [t.repo for t in load(tmp_path / "b.json").tasks] == ["x/y"]


def test_parquet_with_list_columns(tmp_path: Path) -> None:
    rows = [gym_row(), gym_row("python__mypy-1", repo="python/mypy")]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train.parquet")
    ts = load(tmp_path / "train.parquet")
    assert ts.tasks[0].fail_to_pass == (
        "tests/test_ssm.py::test_describe_parameters__multiple_tags",
    )
    # real lists and no environment_setup_commit: SWE-Gym naming
    assert ts.tasks[1].image == "xingyaoww/sweb.eval.x86_64.python_s_mypy-1:latest"


def test_directory_of_files_reads_only_the_split_when_named(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.Table.from_pylist([swe_row("a__b-1")]), data / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist([swe_row("a__b-2")]), data / "test-00000-of-00001.parquet")
    assert [t.instance_id for t in load(tmp_path).tasks] == ["a__b-1"]
    assert [t.instance_id for t in load(tmp_path, split="test").tasks] == ["a__b-2"]
    # without split-named files, every file is read, indices run across files
    other = tmp_path / "other"
    other.mkdir()
    write_jsonl(other / "one.jsonl", [swe_row("a__b-3")])
    write_jsonl(other / "two.jsonl", [swe_row("a__b-4")])
    ts = load(other)
    assert [(t.instance_id, t.source_index) for t in ts.tasks] == [("a__b-3", 0), ("a__b-4", 1)]


def test_skyrl_instance_column_holds_the_swe_gym_record(tmp_path: Path) -> None:
    rows = [
        {"data_source": "SWE-Gym", "instance": gym_row()},
        {"data_source": "SWE-Gym", "instance": json.dumps(gym_row("pydantic__pydantic-1"))},
    ]
    pq.write_table(pa.Table.from_pylist(rows[:1]), tmp_path / "skyrl.parquet")
    ts = load(tmp_path / "skyrl.parquet")
    assert ts.tasks[0].image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752:latest"
    ts = load(write_jsonl(tmp_path / "skyrl.jsonl", rows))
    assert [t.instance_id for t in ts.tasks] == ["getmoto__moto-5752", "pydantic__pydantic-1"]
    # SWE-Gym naming although the inner record alone would not say so
    assert ts.tasks[1].image == "xingyaoww/sweb.eval.x86_64.pydantic_s_pydantic-1:latest"


def test_swe_rebench_install_config_and_docker_image(tmp_path: Path) -> None:
    install = {
        "test_cmd": "pytest --no-header -rA -p no:cacheprovider",
        "log_parser": "parse_log_pytest",
    }
    rows = [
        swe_row("Owner__Repo-42", repo="Owner/Repo", install_config=install),
        swe_row(
            "a__b-7",
            repo="a/b",
            install_config=json.dumps({"test_cmd": ["make", "pytest -rA"]}),
            docker_image="swerebench/custom:tag",
        ),
    ]
    ts = load(write_jsonl(tmp_path / "rebench.jsonl", rows))
    first, second = ts.tasks
    assert first.test_cmd == "pytest --no-header -rA -p no:cacheprovider"
    assert first.log_parser == "parse_log_pytest"
    assert first.image == "swerebench/sweb.eval.x86_64.owner_1776_repo-42"
    assert second.test_cmd == "make && pytest -rA"
    assert second.image == "swerebench/custom:tag"  # the row's own field wins


# ----------------------------------------------------------------------------- images


@pytest.mark.parametrize(
    ("dataset", "iid", "image"),
    [
        (
            Dataset.SWE_BENCH,
            "sympy__sympy-20590",
            "swebench/sweb.eval.x86_64.sympy_1776_sympy-20590:latest",
        ),
        (
            Dataset.SWE_BENCH,
            "Django__Django-1",
            "swebench/sweb.eval.x86_64.django_1776_django-1:latest",
        ),
        (
            Dataset.SWE_GYM,
            "getmoto__moto-5752",
            "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752:latest",
        ),
        (
            Dataset.SWE_REBENCH,
            "Kozea__WeasyPrint-2012",
            "swerebench/sweb.eval.x86_64.kozea_1776_weasyprint-2012",
        ),
    ],
)
def test_default_image_names(dataset: Dataset, iid: str, image: str) -> None:
    assert default_image(dataset, iid) == image


def test_source_name_decides_the_dataset(tmp_path: Path) -> None:
    # A SWE-bench-shaped row (JSON-string lists) in a file named for SWE-Gym gets SWE-Gym names.
    path = write_jsonl(tmp_path / "swe-gym-subset.jsonl", [swe_row()])
    assert load(path).tasks[0].image.startswith("xingyaoww/")
    assert detect_dataset({"install_config": {}}, None) is Dataset.SWE_REBENCH
    assert detect_dataset(swe_row(), None) is Dataset.SWE_BENCH
    assert detect_dataset(gym_row(), None) is Dataset.SWE_GYM


def test_image_template(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", [swe_row(), swe_row("b__c-1", image="own/img:1")])
    ts = load(path, image_template="docker://reg/{owner}/{name}:{docker_id}-v{version}")
    assert ts.tasks[0].image == "docker://reg/django/django:django_1776_django-11099-v3.0"
    assert ts.tasks[1].image == "own/img:1"
    with pytest.raises(RecipeError, match="unknown field"):
        load(path, image_template="img:{commit}")


# ----------------------------------------------------------------------------- bad rows


def test_bad_rows_are_reported_with_index_id_and_field_and_skipped(tmp_path: Path) -> None:
    rows: list[object] = [
        swe_row("ok__ok-1"),
        swe_row("bad__f2p-1", FAIL_TO_PASS="[not json"),
        swe_row("bad__empty-1", FAIL_TO_PASS="[]"),
        {k: v for k, v in swe_row("bad__nocommit-1").items() if k != "base_commit"},
        swe_row("bad__repo-1", repo="norepo"),
        swe_row("bad__ids-1", PASS_TO_PASS=[1, 2]),
        ["not", "an", "object"],
        swe_row("bad__snap-1", snapshot="repos/missing.bundle"),
    ]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with path.open("a") as fh:
        fh.write("{broken json\n")
    ts = load(path)
    assert [t.instance_id for t in ts.tasks] == ["ok__ok-1"]
    got = [(p.index, p.instance_id, p.field) for p in ts.problems]
    assert got == [
        (1, "bad__f2p-1", "FAIL_TO_PASS"),
        (2, "bad__empty-1", "FAIL_TO_PASS"),
        (3, "bad__nocommit-1", "base_commit"),
        (4, "bad__repo-1", "repo"),
        (5, "bad__ids-1", "PASS_TO_PASS"),
        (6, "", "<row>"),
        (7, "bad__snap-1", "snapshot"),
        (8, "", "<row>"),
    ]
    assert "missing.bundle does not exist" in str(ts.problems[6])
    assert str(ts.problems[0]).startswith("row 1 (bad__f2p-1) [t.jsonl:2]: FAIL_TO_PASS:")


def test_duplicate_instance_ids_are_an_error_naming_both_rows(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "t.jsonl", [swe_row("a__b-1"), swe_row("c__d-1"), swe_row("a__b-1")]
    )
    with pytest.raises(InputError) as info:
        load(path)
    text = str(info.value)
    assert "a__b-1: row 0 (t.jsonl:1) and row 2 (t.jsonl:3)" in text
    assert info.value.exit_code == 2


def test_missing_source_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="neither an existing file"):
        load(tmp_path / "nope.jsonl")
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="not a readable Parquet"):
        load(tmp_path / "x.parquet")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no"):
        load(tmp_path / "empty")


def test_hub_name_offline_and_not_cached_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    with pytest.raises(InputError, match="not in the local Hugging Face cache and offline"):
        load("polar-test-owner/definitely-not-cached-dataset")


# ----------------------------------------------------------------------------- filters


def test_filters_ids_repos_sample_limit(tmp_path: Path) -> None:
    rows = [swe_row(f"o__r-{i}", repo=f"o/r{i % 3}") for i in range(12)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    ts = load(path, instance_ids=["o__r-1", "o__r-4", "o__r-99"])
    assert [t.instance_id for t in ts.tasks] == ["o__r-1", "o__r-4"]
    assert [(p.field, p.instance_id) for p in ts.problems] == [("tasks.instance_ids", "o__r-99")]
    assert {t.repo for t in load(path, repos=["o/r2"]).tasks} == {"o/r2"}
    a = [t.instance_id for t in load(path, sample=5, seed=3).tasks]
    b = [t.instance_id for t in load(path, sample=5, seed=3).tasks]
    c = [t.instance_id for t in load(path, sample=5, seed=4).tasks]
    assert a == b and len(a) == 5 and a != c
    assert a == sorted(a, key=lambda i: int(i.split("-")[1]))  # source order kept
    assert len(load(path, limit=3).tasks) == 3
    assert load(path, repos=["o/r0"]).repo_counts() == {"o/r0": 4}


# ----------------------------------------------------------------------------- demo set


def test_bundled_demo_set_loads_with_absolute_snapshots() -> None:
    ts = load(DEMO)
    assert ts.problems == []
    assert len(ts.tasks) >= 12
    assert len(ts.repo_counts()) >= 4
    for task in ts.tasks:
        assert task.snapshot is not None and Path(task.snapshot).is_absolute()
        assert Path(task.snapshot).is_file()
        assert task.fail_to_pass and task.pass_to_pass and task.patch and task.test_patch
        assert task.image is None  # a local task: its repository comes from the snapshot
        assert task.test_cmd and "pytest" in task.test_cmd
    # relative snapshot paths resolve against the task file, not the working directory
    assert load(DEMO / "tasks.jsonl").tasks[0].snapshot == ts.tasks[0].snapshot
