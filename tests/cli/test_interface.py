"""Every command's options and every result's JSON fields as recorded in ``interface_snapshot.json``:
nothing renamed or removed, defaults unchanged (new options and fields may be added freely).

After a deliberate change: ``python tests/cli/interface.py > tests/cli/interface_snapshot.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from interface import interface

SNAPSHOT = json.loads((Path(__file__).parent / "interface_snapshot.json").read_text())
LIVE = interface()


def test_every_command_keeps_its_options():
    for command, params in SNAPSHOT["commands"].items():
        assert command in LIVE["commands"], f"command {command!r} is gone"
        live = LIVE["commands"][command]
        for name, recorded in params.items():
            assert name in live, f"{command}: option {name} ({recorded['opts']}) is gone"
            assert live[name] == recorded, f"{command}: option {name} changed"


def test_every_result_keeps_its_json_fields():
    for cls, fields in SNAPSHOT["json_fields"].items():
        assert cls in LIVE["json_fields"], f"result class {cls} is gone"
        missing = set(fields) - set(LIVE["json_fields"][cls])
        assert not missing, f"{cls} lost JSON fields {sorted(missing)}"
