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
