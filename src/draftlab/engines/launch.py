"""The exact SGLang / vLLM / reference server command for a target (and drafter), and running it safely.

Command lines (``engine_command``):

- SGLang: ``python -m sglang.launch_server --model-path T --tp P --host H --port N`` plus, with a
  drafter, ``--speculative-algorithm EAGLE3 --speculative-draft-model-path D
  --speculative-num-steps S --speculative-eagle-topk K --speculative-num-draft-tokens N`` after
  SGLang's own flag rules (``engines.sglang_flags``; its rewrites are applied and reported, its
  rejections refused), and ``--speculative-draft-window-size W`` for a local Llama drafter trained with a
  sliding window of W: SGLang reads no window from the drafter's config (engines/window.py).
- vLLM: ``vllm serve T --tensor-parallel-size P --host H --port N`` plus ``--speculative-config
  '{"method": "eagle3", "model": D, "num_speculative_tokens": S}'``. vLLM drafts a chain of
  ``num_speculative_tokens``; trees need its experimental ``speculative_token_tree``, which this
  does not translate, so topk > 1 is refused.
- The target's own MTP layers (``--drafter mtp``): SGLang ``--speculative-algorithm NEXTN`` (with the target as
  ``--speculative-draft-model-path`` where SGLang does not fill it in), vLLM ``{"method": "mtp",
  "num_speculative_tokens": S}`` with no model; which releases serve which targets is ``engines/mtp.py``'s.
- draftlab (the reference server, for laptops and tests): ``python -m draftlab serve --target T
  --host H --port N`` plus ``--drafter D --steps S --topk K --num-draft-tokens N``, run by this
  Python with this draftlab on ``PYTHONPATH``. It is not one of ``engines.ENGINES`` (those are the
  aux-layer conventions); it reads the drafter's aux ids the way SGLang does.

Fairness: both arms of an A/B get the same explicit settings. SGLang with EAGLE caps running
requests at 48, turns the overlap scheduler off and mixed chunked prefill off; so every SGLang
command gets ``--max-running-requests`` (48 unless asked) and ``--disable-overlap-schedule``, and
mixed chunking stays at its default (off) for both. vLLM gets ``--max-num-seqs`` (48 unless asked)
on both arms. A chunked-prefill size, when given, goes to both (SGLang ``--chunked-prefill-size``,
vLLM ``--max-num-batched-tokens``). The reference server decodes one request at a time and takes
neither.

Processes (``EngineProcess``): the engine runs in its own session / process group with its output in
a log file; stopping it signals exactly that group (SIGTERM, then SIGKILL), never processes by name.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import draftlab
from draftlab.acceptance.synthetic import SyntheticAcceptance
from draftlab.checkpoint.configs import DrafterConfig
from draftlab.engines import ENGINES
from draftlab.engines.mtp import MTP, sglang_mtp_args, target_support, vllm_mtp_config
from draftlab.engines.schedule import LoadedSchedule, launch_args, schedule_steps
from draftlab.engines.sglang_flags import SpecFlags, exact_spec_flags, resolve_spec_flags
from draftlab.engines.synthetic import with_synthetic
from draftlab.engines.window import SGLANG_WINDOW_FLAG
from draftlab.errors import DraftlabError

SGLANG_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
REFERENCE = "draftlab"  # the reference server, a launch target next to the real engines
LAUNCH_TARGETS = (*ENGINES, REFERENCE)
REFERENCE_CONVENTION = "sglang"  # whose aux-id convention draftlab serve reads (its --engine default)
DEFAULT_PORTS = {"sglang": 30000, "vllm": 8000, REFERENCE: 30000}
# The bench API that gives each server's exact per-run accept length (SGLang: /generate meta_info;
# vLLM: /metrics deltas, with any API; its completions API takes text and token ids).
BENCH_API = {"sglang": "sglang", "vllm": "openai", REFERENCE: "sglang"}
SPEC_MAX_RUNNING_REQUESTS = 48  # SGLang's cap with EAGLE; used for both arms and both engines
HEALTH_PATH = "/health"


@dataclass(frozen=True)
class LaunchRequest:
    """What the user asked for; ``engine_command`` turns it into the engine's exact command."""

    engine: str
    target: str
    drafter: str | None = None
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    tp: int = 1
    host: str = "127.0.0.1"
    port: int | None = None  # None: the engine's usual port
    max_running_requests: int = SPEC_MAX_RUNNING_REQUESTS
    chunked_prefill_size: int | None = None
    extra_args: tuple[str, ...] = ()
    target_architecture: str | None = None  # for SGLang's automatic flags when none are given
    schedule: LoadedSchedule | None = None  # draft length per batch size (engines.schedule.load_schedule)
    extra_config: dict[str, Any] = field(default_factory=dict)  # more keys for vLLM's --speculative-config
    synthetic: SyntheticAcceptance | None = None  # force this acceptance (engines.synthetic)
    engine_version: str | None = None  # the release whose synthetic-acceptance settings apply (None: newest)


@dataclass(frozen=True)
class EngineCommand:
    """A command ready to run: argv, the variables set on top of the environment, and why."""

    engine: str
    argv: list[str]
    env: dict[str, str]
    base_url: str
    host: str
    port: int
    spec: SpecFlags | None
    notes: list[str] = field(default_factory=list)

    @property
    def shell(self) -> str:
        """The command as one copy-pasteable shell line, variables first."""
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def engine_command(request: LaunchRequest, *, context_too_short: bool = False) -> EngineCommand:
    """The engine's command line for ``request``; DraftlabError for what the engine would reject.

    ``context_too_short``: ``check`` found the drafter's context shorter than the target's; SGLang
    then refuses to start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which is set only
    in that case.
    """
    if request.engine not in LAUNCH_TARGETS:
        raise DraftlabError(f"unknown engine {request.engine!r}; choose one of {', '.join(LAUNCH_TARGETS)}")
    for name in ("tp", "max_running_requests", "chunked_prefill_size"):
        value = getattr(request, name)
        if value is not None and value < 1:
            raise DraftlabError(f"--{name.replace('_', '-')} must be at least 1 (got {value})")
    if request.drafter is None and any(v is not None for v in (request.steps, request.topk, request.num_draft_tokens)):
        raise DraftlabError("--steps/--topk/--num-draft-tokens need --drafter; leave them out for the baseline")
    if request.drafter == MTP and request.engine == REFERENCE:
        raise DraftlabError("--drafter mtp: the draftlab reference server serves EAGLE-3 drafters only; launch "
                            "sglang or vllm, or measure the MTP head offline with draftlab generate --drafter mtp")
    port = request.port or DEFAULT_PORTS[request.engine]
    schedule_note = None
    if request.schedule is not None:
        if request.drafter is None:
            raise DraftlabError("--schedule sets the draft length per batch size; it needs --drafter")
        config_keys, schedule_argv, schedule_note = launch_args(request.schedule, request.engine)
        steps = schedule_steps(request.schedule, request.engine, request.steps, request.topk, request.num_draft_tokens)
        request = dataclasses.replace(request, steps=steps, topk=1, num_draft_tokens=steps + 1, schedule=None,
                                      extra_args=(*schedule_argv, *request.extra_args))
        if config_keys:
            request = dataclasses.replace(request, extra_config=config_keys)
    command = _engine_command(request, port, context_too_short)
    if schedule_note is not None:
        command.notes.append(schedule_note)
    return command


def _engine_command(request: LaunchRequest, port: int, context_too_short: bool) -> EngineCommand:
    if request.engine == "sglang":
        command = _sglang(request, port, context_too_short)
    elif request.engine == REFERENCE:
        command = _reference(request, port)
    else:
        command = _vllm(request, port, context_too_short)
    return with_synthetic(command, request.synthetic, request.engine_version)


def _sglang(request: LaunchRequest, port: int, context_too_short: bool) -> EngineCommand:
    argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", request.target, "--tp", str(request.tp),
            "--host", request.host, "--port", str(port),
            "--max-running-requests", str(request.max_running_requests), "--disable-overlap-schedule"]
    notes = [
        f"--max-running-requests {request.max_running_requests} and --disable-overlap-schedule on every arm: "
        "SGLang sets 48 and turns the overlap scheduler off whenever EAGLE is on",
        "mixed chunked prefill off on every arm (SGLang's default; EAGLE forces it off)",
    ]
    if request.chunked_prefill_size is not None:
        argv += ["--chunked-prefill-size", str(request.chunked_prefill_size)]
    env: dict[str, str] = {}
    spec = None
    if request.drafter is not None:
        spec = resolve_spec_flags(request.steps, request.topk, request.num_draft_tokens,
                                  architecture=request.target_architecture)
        if request.drafter == MTP:
            mtp_argv, mtp_note = sglang_mtp_args(request.target, target_support(request.target, "sglang",
                                                                                request.engine_version))
            argv += mtp_argv
            notes.append(mtp_note)
        else:
            argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", request.drafter]
        argv += ["--speculative-num-steps", str(spec.steps), "--speculative-eagle-topk", str(spec.topk),
                 "--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
        if spec.source != "explicit":  # auto (...) or rewritten (...): what SGLang would pick, made explicit
            notes.append(f"speculative flags: SGLang's choice, {spec.source}, written out")
        notes += [f"SGLang rule: {r}" for r in spec.rewrites]
        window = None if request.drafter == MTP else trained_window(request.drafter)
        if window is not None and SGLANG_WINDOW_FLAG not in request.extra_args:
            argv += [SGLANG_WINDOW_FLAG, str(window)]
            notes.append(f"{SGLANG_WINDOW_FLAG} {window}: the drafter was trained with a sliding window of {window} "
                         "(layer_types / sliding_window), which SGLang reads only from this flag (without it, it "
                         "serves full attention: another function)")
        if context_too_short:
            env[SGLANG_CONTEXT_ENV] = "1"
            notes.append(f"{SGLANG_CONTEXT_ENV}=1: check found the drafter's context shorter than the target's "
                         "(SGLang refuses to start otherwise); long prompts may draft poorly")
    if "--enable-mixed-chunk" in request.extra_args and request.drafter is not None:
        notes.append("--enable-mixed-chunk is ignored by SGLang with EAGLE; the arms are not equal")
    argv += list(request.extra_args)
    return EngineCommand("sglang", argv, env, f"http://{_url_host(request.host)}:{port}", request.host, port, spec, notes)


def _vllm(request: LaunchRequest, port: int, context_too_short: bool) -> EngineCommand:
    argv = ["vllm", "serve", request.target, "--tensor-parallel-size", str(request.tp), "--host", request.host,
            "--port", str(port), "--max-num-seqs", str(request.max_running_requests)]
    notes = [f"--max-num-seqs {request.max_running_requests} on every arm (SGLang's EAGLE cap, for like-for-like A/B)"]
    if request.chunked_prefill_size is not None:
        argv += ["--max-num-batched-tokens", str(request.chunked_prefill_size)]
    spec = None
    if request.drafter is not None:
        spec = _vllm_spec(request)
        if request.drafter == MTP:
            config = {**vllm_mtp_config(spec.steps, target_support(request.target, "vllm", request.engine_version)),
                      **request.extra_config}
            notes.append("method mtp without a model: vLLM drafts with the target's own MTP layer, every step "
                         "running it again (config/speculative.py); a chain of num_speculative_tokens")
        else:
            config = {"method": "eagle3", "model": request.drafter, "num_speculative_tokens": spec.steps,
                      **request.extra_config}
        argv += ["--speculative-config", json.dumps(config)]
        if context_too_short:
            notes.append("the drafter's context is shorter than the target's and vLLM has no override: "
                         "prompts beyond it can crash or draft garbage; fix the config with draftlab check --fix")
    argv += list(request.extra_args)
    return EngineCommand("vllm", argv, {}, f"http://{_url_host(request.host)}:{port}", request.host, port, spec, notes)


def _vllm_spec(request: LaunchRequest) -> SpecFlags:
    """vLLM drafts a chain of num_speculative_tokens = steps; it verifies steps + 1 tokens."""
    steps, topk, ndt = request.steps, request.topk, request.num_draft_tokens
    if steps is None:
        raise DraftlabError("vLLM needs --steps (its num_speculative_tokens); it has no automatic choice")
    if steps < 1:
        raise DraftlabError(f"--steps must be at least 1 (got {steps})")
    if topk not in (None, 1):
        raise DraftlabError(
            f"--topk {topk}: vLLM's EAGLE-3 drafts a chain of num_speculative_tokens; trees need its experimental "
            "speculative_token_tree, which draftlab does not translate; use --topk 1 (or SGLang for trees)"
        )
    if ndt is not None and ndt != steps + 1:
        raise DraftlabError(
            f"--num-draft-tokens {ndt}: a vLLM chain of {steps} drafts verifies steps + 1 = {steps + 1} tokens; "
            f"use --num-draft-tokens {steps + 1} or leave it out"
        )
    return SpecFlags(steps, 1, steps + 1, "explicit")


def _reference(request: LaunchRequest, port: int) -> EngineCommand:
    """``draftlab serve``: one device, one request at a time; the flags are checked as SGLang would run them."""
    if request.tp != 1:
        raise DraftlabError(f"--tp {request.tp}: the draftlab reference server runs on one device; use --tp 1")
    if request.chunked_prefill_size is not None:
        raise DraftlabError("--chunked-prefill-size: the draftlab reference server prefills whole prompts; leave it out")
    argv = [sys.executable, "-m", "draftlab", "serve", "--target", request.target, "--host", request.host,
            "--port", str(port)]
    spec = None
    if request.drafter is not None:
        spec = exact_spec_flags(request.steps, request.topk, request.num_draft_tokens,
                                architecture=request.target_architecture)
        argv += ["--drafter", request.drafter, "--steps", str(spec.steps), "--topk", str(spec.topk),
                 "--num-draft-tokens", str(spec.num_draft_tokens)]
    argv += list(request.extra_args)
    notes = ["the reference server decodes one request at a time: concurrency above 1 queues, it does not batch"]
    return EngineCommand(REFERENCE, argv, {"PYTHONPATH": _with_this_draftlab()},
                         f"http://{_url_host(request.host)}:{port}", request.host, port, spec, notes)


def _with_this_draftlab() -> str:
    """PYTHONPATH with the folder holding this draftlab first, so the server runs the same code."""
    root = str(Path(draftlab.__file__).resolve().parents[1])
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return os.pathsep.join([root, *rest])


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


# --- running it ------------------------------------------------------------------------------


def check_port_free(host: str, port: int) -> None:
    """Refuse a port something else already listens on (the engine would die late and unclearly).

    SO_REUSEADDR, as the engines' servers set it: connections of a server that just stopped on this
    port (TIME_WAIT, as between sweep entries) do not count, a listener does.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise DraftlabError(f"port {port} on {host} is in use; choose another --port or stop what listens there") from None


def check_installed(command: EngineCommand) -> None:
    """Refuse an engine that is not installed where the command would run it."""
    env = {**os.environ, **command.env}
    if command.engine == REFERENCE:
        return  # this very package, run by this Python
    if command.engine == "vllm":
        if shutil.which(command.argv[0], path=env.get("PATH")) is None:
            raise DraftlabError(f"'{command.argv[0]}' not found on PATH; install vLLM (pip install vllm) on this machine")
        return
    probe = [command.argv[0], "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"]
    if subprocess.run(probe, env=env, capture_output=True).returncode != 0:
        raise DraftlabError(f"SGLang is not installed for {command.argv[0]}; install it (pip install 'sglang[all]')")


class EngineProcess:
    """One engine server in its own process group; ``stop`` ends exactly that group.

    Use as a context manager: whatever happens inside (error, Ctrl-C), the group is stopped.
    """

    def __init__(self, command: EngineCommand, log_path: str | Path, *, stop_grace_s: float = 10.0) -> None:
        self.command = command
        self.log_path = Path(log_path)
        self.stop_grace_s = stop_grace_s
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        check_installed(self.command)
        check_port_free(self.command.host, self.command.port)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command.argv, env={**os.environ, **self.command.env}, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def wait_healthy(self, timeout_s: float) -> None:
        """Poll ``/health`` until it answers 200; DraftlabError if the engine exits or time runs out."""
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        url = self.command.base_url + HEALTH_PATH
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise DraftlabError(f"{self.command.engine} exited with code {code} before it was healthy: "
                                        f"{self.last_log_line()} (log: {self.log_path})")
                try:
                    if client.get(url).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise DraftlabError(f"{self.command.engine} not healthy at {url} after {timeout_s:g} s; "
                                        f"raise --health-timeout or read the log: {self.log_path}")
                time.sleep(0.25)

    def last_log_line(self) -> str:
        try:
            lines = [ln for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return "(no log)"
        return lines[-1].strip()[:300] if lines else "(empty log)"

    def stop(self) -> None:
        """SIGTERM the whole process group, then SIGKILL whatever is left after the grace time."""
        if self.process is None:
            return
        pgid = self.process.pid  # start_new_session: the leader's pid is the group id
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        while _group_alive(pgid, self.process) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(pgid, self.process):
            _signal_group(pgid, signal.SIGKILL)
            while _group_alive(pgid, self.process):
                time.sleep(0.05)
        self.process.wait()
        self.process = None

    def __enter__(self) -> EngineProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int, leader: subprocess.Popen[bytes]) -> bool:
    """Whether any process of the group still runs (zombies waiting for a reaper do not count)."""
    leader.poll()  # reap the leader so its zombie does not count
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    return bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid`` (Linux /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


# --- check first -----------------------------------------------------------------------------

def trained_window(drafter: str) -> int | None:
    """The sliding window a local Llama drafter was trained with (None: full attention, an MLA drafter, which
    SGLang serves without one whatever its flag says, a hub id or an unreadable config)."""
    config = Path(drafter) / "config.json"
    if not config.is_file():
        return None
    try:
        parsed = DrafterConfig.from_dict(json.loads(config.read_text()))
    except (OSError, ValueError, TypeError, KeyError, AttributeError, DraftlabError):
        return None  # check reports an unreadable config (or --skip-check was asked for)
    return parsed.sliding_window if parsed.variant.mla is None else None


def local_architecture(target: str) -> str | None:
    """The first ``architectures`` entry of a local target's config.json (None for hub ids)."""
    config = Path(target) / "config.json"
    if not config.is_file():  # a hub id, or a FIFO that would block the read
        return None
    try:
        archs = json.loads(config.read_text()).get("architectures")
    except (OSError, ValueError, AttributeError):
        return None
    return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
