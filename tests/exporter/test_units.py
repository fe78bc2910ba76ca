"""The shared grammars (`exporter.units`): durations, sizes and HOST:PORT, as parse functions and
as argparse types."""

from __future__ import annotations

import argparse

import pytest

from exporter.units import duration, host_port, parse_duration, parse_host_port, parse_size, size


def test_option_parsers() -> None:
    assert (
        duration("1s") == 1 and duration("500ms") == 0.5 and duration("2m") == 120 and duration("1.5") == 1.5
    )
    assert size("10MiB") == 10 << 20 and size("512k") == 512 << 10 and size("100") == 100
    assert host_port("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert host_port("[::1]:80") == ("::1", 80)
    for bad, fn in (("0s", duration), ("fast", duration), ("big", size), ("9400", host_port)):
        with pytest.raises(argparse.ArgumentTypeError):
            fn(bad)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1.5", 1.5),
        (" 1e-3s ", 0.001),
        ("0s", 0),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "-1s", "1d", "1 m s", "fast", "1.2.3s"])
def test_bad_durations_are_value_errors(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_a_unit_can_be_required() -> None:
    assert parse_duration("100ms", require_unit=True) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="give a unit"):
        parse_duration("100", require_unit=True)


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("4096", 4096),
        ("100b", 100),
        ("3KB", 3 << 10),
        ("512KiB", 512 << 10),
        ("10mb", 10 << 20),
        ("1G", 1 << 30),
    ],
)
def test_sizes(text: str, nbytes: int) -> None:
    assert parse_size(text) == nbytes


@pytest.mark.parametrize("text", ["", "big", "-1", "1T", "100ib", "1.5MiB"])
def test_bad_sizes_are_value_errors(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_host_port_forms() -> None:
    assert parse_host_port("gpu-box:8000") == ("gpu-box", 8000)
    assert parse_host_port(":9400") == ("127.0.0.1", 9400)
    assert parse_host_port(":9400", default_host="0.0.0.0") == ("0.0.0.0", 9400)
    assert parse_host_port("[fe80::1]:0") == ("fe80::1", 0)


@pytest.mark.parametrize("text", ["9400", "host:", "host:65536", "host:-1", "host:http"])
def test_bad_host_ports(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_host_port(text)


def test_ipv6_needs_brackets() -> None:
    with pytest.raises(ValueError, match="brackets"):
        parse_host_port("::1:80")


def test_argparse_reports_the_grammar() -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--every", type=duration)
    with pytest.raises(argparse.ArgumentError, match="not a duration"):
        parser.parse_args(["--every", "soon"])
    assert parser.parse_args(["--every", "2m"]).every == 120.0
