"""`flag_settings`: text from flags and env vars becomes typed, bounded settings, and every bad
value is named with its flag and env var, all at once."""

from __future__ import annotations

import argparse
from dataclasses import FrozenInstanceError, dataclass
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from vgpu_bridge.flag_settings import FlagSettings, SettingsError, host_port, setting


@dataclass(frozen=True, kw_only=True)
class Example(FlagSettings):
    prog: ClassVar[str] = "example"

    name: str = setting(min_length=1, description="required text")
    count: int = setting(3, ge=1, le=10, description="an integer 1..10")
    seconds: float = setting(1.5, gt=0, description="a positive number")
    enabled: bool = setting(False, description="a switch")
    home: Path = setting(Path("/var/lib/x"), description="a path")
    mode: Literal["fast", "safe"] = setting("safe", description="one of two")
    label: str | None = setting(None, max_length=5, pattern=r"[a-z]+", description="optional")
    listen: str = host_port("", description="HOST:PORT or empty")


def problems_of(**values: object) -> dict[str, str]:
    with pytest.raises(SettingsError) as caught:
        Example.from_values(values)
    return dict(caught.value.problems)


def test_text_becomes_each_fields_type() -> None:
    settings = Example.from_values({"name": "a", "count": " 7 ", "seconds": "0.25",
                                    "enabled": "Yes", "home": "/tmp/h", "mode": "fast",
                                    "label": "abc", "listen": "[::1]:8443"})  # fmt: skip
    assert (settings.count, settings.seconds, settings.enabled) == (7, 0.25, True)
    assert (settings.home, settings.mode, settings.label) == (Path("/tmp/h"), "fast", "abc")


def test_defaults_fill_what_is_not_given_and_settings_are_frozen() -> None:
    settings = Example.from_values({"name": "a"})
    assert (settings.count, settings.seconds, settings.enabled, settings.label) == (
        3,
        1.5,
        False,
        None,
    )
    with pytest.raises(FrozenInstanceError):
        settings.count = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("values", "field", "reason"),
    [
        ({"name": ""}, "name", "must not be empty"),
        ({"count": "lots"}, "count", "must be an integer, got 'lots'"),
        ({"count": "1.0"}, "count", "must be an integer, got '1.0'"),
        ({"count": "0"}, "count", "must be at least 1, got 0"),
        ({"count": "11"}, "count", "must be at most 10, got 11"),
        ({"count": "12345678"}, "count", "must be at most 10, got 12345678"),
        ({"seconds": "-0.5"}, "seconds", "must be more than 0, got -0.5"),
        ({"count": "9" * 5000}, "count", "must be an integer, got '999"),
        ({"seconds": "0"}, "seconds", "must be more than 0, got 0"),
        ({"seconds": "nan"}, "seconds", "must be a finite number, got 'nan'"),
        ({"seconds": "inf"}, "seconds", "must be a finite number, got 'inf'"),
        ({"enabled": "maybe"}, "enabled", "must be true or false, got 'maybe'"),
        ({"mode": "quick"}, "mode", "must be one of 'fast', 'safe', got 'quick'"),
        ({"label": "toolong"}, "label", "must be at most 5 characters, got 7"),
        ({"label": "A"}, "label", "must match the pattern [a-z]+, got 'A'"),
        ({"listen": "localhost:99999"}, "listen", "'localhost:99999' is not HOST:PORT"),
        ({"colour": "red"}, "colour", "unknown setting"),
    ],
)
def test_a_bad_value_is_named_with_the_reason(
    values: dict[str, object], field: str, reason: str
) -> None:
    found = problems_of(**{"name": "a", **values})
    assert found[field].startswith(reason), found


def test_every_bad_value_is_reported_at_once() -> None:
    assert set(problems_of(count="0", seconds="-1", mode="x")) == {
        "name",
        "count",
        "seconds",
        "mode",
    }


def test_values_of_the_wrong_type_are_refused_not_coerced() -> None:
    found = problems_of(name="a", count=True, seconds="1", enabled=1, home=5)
    assert found == {
        "count": "must be an integer, got True",
        "enabled": "must be true or false, got 1",
        "home": "must be a Path, got 5",
    }


def test_a_flag_wins_over_its_env_var_which_wins_over_the_default() -> None:
    parser = argparse.ArgumentParser()
    Example.add_arguments(parser)
    args = parser.parse_args(["--count", "5"])
    environ = {"VGPU_BRIDGE_NAME": "n", "VGPU_BRIDGE_COUNT": "9", "VGPU_BRIDGE_MODE": "fast"}
    settings = Example.from_namespace(args, environ)
    assert (settings.name, settings.count, settings.mode, settings.seconds) == ("n", 5, "fast", 1.5)


def test_the_report_is_one_line_per_problem_naming_flag_and_env_var(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    Example.add_arguments(parser)
    assert Example.from_namespace_or_report(parser.parse_args(["--count", "0"]), {}) is None
    assert capsys.readouterr().err.splitlines() == [
        "example: --name (VGPU_BRIDGE_NAME): required",
        "example: --count (VGPU_BRIDGE_COUNT): must be at least 1, got 0",
    ]


def test_each_setting_has_a_flag_whose_help_names_the_env_var_and_default() -> None:
    parser = argparse.ArgumentParser()
    Example.add_arguments(parser)
    help_text = " ".join(parser.format_help().split())
    assert "--count COUNT an integer 1..10 (VGPU_BRIDGE_COUNT; default 3)" in help_text
    assert "(VGPU_BRIDGE_NAME; required)" in help_text
    assert Example.setting_names() == (
        "name", "count", "seconds", "enabled", "home", "mode", "label", "listen"
    )  # fmt: skip
