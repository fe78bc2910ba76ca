"""The machine a benchmark ran on, as one markdown line: CPU model, cores, RAM, Python and
torch versions, load average and date. Every table in RESULTS.md carries it, because CPU
timings mean nothing without it (and on a shared machine, the load average says how much)."""

from __future__ import annotations

import datetime as dt
import os
import platform
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True, slots=True)
class Machine:
    cpu: str
    cores: int
    ram_gib: float
    python: str
    torch: str
    load: str
    date: str

    def line(self) -> str:
        return (
            f"{self.cpu}, {self.cores} cores, {self.ram_gib:.0f} GiB RAM; Python {self.python}, "
            f"torch {self.torch}; load average {self.load}; {self.date}"
        )


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def _version(package: str) -> str:
    # Read from package metadata so that asking does not import torch.
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine() -> Machine:
    try:
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        load = "n/a"
    return Machine(
        cpu=_cpu_model(),
        cores=os.cpu_count() or 0,
        ram_gib=_ram_gib(),
        python=platform.python_version(),
        torch=_version("torch"),
        load=load,
        date=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    )


if __name__ == "__main__":
    print(machine().line())
