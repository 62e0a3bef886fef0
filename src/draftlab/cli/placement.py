"""Where a command's models run: ``--dtype``, ``--device``, ``--device-map`` and ``--threads``, spelled
once here and handed as one :class:`Placement` to each command that loads a model (:func:`placement`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Optional

import typer

from draftlab.cli.checks import at_least_one, check_device
from draftlab.cli.groups import OptionGroup, option
from draftlab.threads import use_threads

DtypeOption = Annotated[Optional[str], typer.Option(
    "--dtype", help="float32, bfloat16 or float16 (default bfloat16 on CUDA, float32 on the CPU).")]
DeviceOption = Annotated[Optional[str], typer.Option(
    "--device", callback=check_device, help="cpu, cuda or cuda:N (default cpu).")]
# a device whose default the command's signature gives (shown by --help)
DefaultedDeviceOption = Annotated[str, typer.Option("--device", callback=check_device, help="cpu, cuda or cuda:N.")]
DeviceMapOption = Annotated[Optional[str], typer.Option(
    "--device-map", help="auto: split the target across the GPUs (accelerate); not with --device.")]
ThreadsOption = Annotated[Optional[int], typer.Option(
    "--threads", callback=at_least_one, help="CPU threads torch computes with (default: $DRAFTLAB_THREADS, else "
                                             "the physical cores this process may use).")]


@dataclass(frozen=True)
class Placement:
    """The dtype, device and device map a command's models load with, as given (None: the library
    chooses for the device)."""

    dtype: str | None
    device: str | None
    device_map: str | None = None

    @classmethod
    def of(cls, dtype: str | None, device: str | None, device_map: str | None = None,
           threads: int | None = None) -> Placement:
        """The placement asked for, after setting torch's CPU threads for the command (once): ``--threads``,
        else ``$DRAFTLAB_THREADS``, else the physical cores this process may use; recorded in the
        result's provenance (:mod:`draftlab.threads`)."""
        use_threads(threads)
        return cls(dtype, device, device_map)

    def loading(self) -> dict[str, str | None]:
        """``dtype``, ``device`` and ``device_map``: the keywords the library's model loaders take."""
        return {"dtype": self.dtype, "device": self.device, "device_map": self.device_map}


def placement(dtype: str | None = None, device: str | None = None, *, device_map: bool = True) -> OptionGroup:
    """The placement options with this command's defaults, as one :class:`Placement` (``where: Placement =
    placement()`` under :func:`~draftlab.cli.groups.grouped`). A device default shows in --help;
    ``device_map`` False: no ``--device-map`` (the command places its models on one device)."""
    options = [option("dtype", DtypeOption, dtype),
               option("device", DeviceOption if device is None else DefaultedDeviceOption, device)]
    if device_map:
        options.append(option("device_map", DeviceMapOption))
    return OptionGroup((*options, option("threads", ThreadsOption)), Placement.of)
