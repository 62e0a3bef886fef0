"""CPU threads: one rule for every computing command (--threads, else $DRAFTLAB_THREADS, else the
physical cores this process may use), applied once and recorded in the result's provenance."""

from __future__ import annotations

import json

import pytest
import torch

from draftlab.cli import main


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"input_ids": list(b"def f(x):\n")}) + "\n")
    return path


@pytest.fixture
def threads_restored():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("argv_extra, env, expected", [
    (["--threads", "2"], "1", (2, "--threads")),
    ([], "1", (1, "DRAFTLAB_THREADS")),
])
def test_generate_sets_and_records_its_threads(toy_pair, prompts, capsys, monkeypatch, threads_restored,
                                               argv_extra, env, expected):
    monkeypatch.setenv("DRAFTLAB_THREADS", env)
    torch.set_num_threads(3)
    code = main(["generate", "--target", str(toy_pair.target_dir), "--prompts", str(prompts), "--no-draft",
                 "--max-new-tokens", "4", "--json", *argv_extra])
    assert code == 0
    provenance = json.loads(capsys.readouterr().out)["provenance"]
    assert (provenance["threads"], provenance["threads_from"]) == expected
    assert torch.get_num_threads() == expected[0]


def test_the_default_is_the_physical_cores_this_process_may_use(monkeypatch, tmp_path):
    from draftlab import threads

    sysfs = tmp_path / "cpu"
    for cpu, core in ((0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (5, 2)):  # three cores, two hyperthreads each
        topology = sysfs / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert threads.physical_cores({0, 1, 2, 3, 4, 5}, sysfs) == 3
    assert threads.physical_cores({0, 1, 2}, sysfs) == 2  # affinity: only these logical CPUs
    assert threads.physical_cores({0, 7}, sysfs) == 2  # topology unknown for cpu7: every CPU counts
    monkeypatch.delenv("DRAFTLAB_THREADS")
    monkeypatch.setattr(threads, "machine_load", lambda: 0.2)  # an idle machine
    monkeypatch.setattr(threads, "allowed_cpus", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(threads, "physical_cores", lambda cpus: len(cpus) // 2)
    assert threads.choose_threads(None) == (2, "physical cores available")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun: the host's cores shared among its processes
    assert threads.choose_threads(None) == (1, "physical cores available")


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_bad_environment_value_is_one_line_exit_2(toy_pair, prompts, capsys, monkeypatch, value):
    monkeypatch.setenv("DRAFTLAB_THREADS", value)
    code = main(["generate", "--target", str(toy_pair.target_dir), "--prompts", str(prompts), "--no-draft"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "DRAFTLAB_THREADS" in err and "Traceback" not in err


def test_a_busy_machine_gets_fewer_threads_and_says_why(monkeypatch):
    """The issue's machine: 2 cores, another job running (load 2.6): 2 threads made generate 15x slower than 1."""
    from draftlab import threads

    monkeypatch.delenv("DRAFTLAB_THREADS", raising=False)
    monkeypatch.setattr(threads, "allowed_cpus", lambda: {0, 1})
    monkeypatch.setattr(threads, "physical_cores", lambda cpus: len(cpus))
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    for load, expected in ((0.3, 2), (1.2, 1), (2.6, 1), (40.0, 1)):
        monkeypatch.setattr(threads, "machine_load", lambda load=load: load)
        count, why = threads.choose_threads(None)
        assert count == expected
        assert ("load average" in why) == (expected < 2)
    # a process allowed 2 of 64 CPUs sees only its share of a load of 16 (a quarter of the machine busy)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(threads, "machine_load", lambda: 16.0)
    assert threads.choose_threads(None)[0] == 2


@pytest.mark.parametrize("argv, env", [(["--threads", "100000"], None), ([], "100000")])
def test_more_threads_than_cpus_is_one_line_exit_2(toy_pair, prompts, capsys, monkeypatch, argv, env):
    import os

    if env is None:
        monkeypatch.delenv("DRAFTLAB_THREADS", raising=False)
    else:
        monkeypatch.setenv("DRAFTLAB_THREADS", env)
    code = main(["generate", "--target", str(toy_pair.target_dir), "--prompts", str(prompts), "--no-draft", *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert f"give at most {len(os.sched_getaffinity(0))}" in err and "100000" in err
