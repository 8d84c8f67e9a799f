"""Tool suites: built from configs, deep-copyable, comparable, and in memory only."""

import copy
import os
import random

import pytest

from envs.text.parsing import ToolCall
from envs.text.suites import SUITE_DEFINITIONS, SUITES, Bank, CallFailed, FileSystem, Travel, World


def test_suites_build_from_generated_configs_and_compare_equal_to_copies():
    for name, cls in SUITES.items():
        suite = cls(SUITE_DEFINITIONS[name].initial_config(random.Random(0), False))
        clone = copy.deepcopy(suite)
        assert clone == suite and clone is not suite


def test_state_change_breaks_equality_and_copies_are_independent():
    bank = Bank({"accounts": {"a": 10.0, "b": 0.0}})
    clone = copy.deepcopy(bank)
    bank.transfer("a", "b", 4.0)
    assert bank != clone and clone.accounts == {"a": 10.0, "b": 0.0}


def test_unknown_config_key_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown config key"):
        Bank({"acounts": {}})


def test_state_exposes_only_public_attributes():
    assert set(Travel().state()) == {"budget", "flights", "bookings", "next_booking_id"}


def test_file_system_never_touches_the_host():
    fs = FileSystem({"cwd": "/"})
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do; what matters is no host read
        fs.read_file("/etc/passwd")  # a host file that exists is unknown to the virtual one
    marker = "/tmp/envs_text_virtual_marker_9f2c.txt"
    fs.mkdir("/tmp")
    fs.write_file(marker, "x")
    assert fs.read_file(marker) == "x" and not os.path.exists(marker)


def test_file_system_paths_are_normalised():
    fs = FileSystem({"files": {"/home/u/a.txt": "hi"}, "cwd": "/home/u"})
    assert fs.read_file("../u/./a.txt") == "hi"
    assert fs.cd("/../../home") == "/home" and fs.ls() == ["u/"]


def test_world_reports_failures_by_kind():
    world = World({"bank": Bank({"accounts": {"a": 1.0}})})
    cases = {
        "unknown_tool": ToolCall("launch_rocket", {}),
        "bad_arguments": ToolCall("get_balance", {"acount": "a"}),
        "tool_error": ToolCall("withdraw", {"account": "a", "amount": 5.0}),
    }
    for kind, call in cases.items():
        with pytest.raises(CallFailed) as failure:
            world.execute(call)
        assert failure.value.kind == kind


def test_withheld_tool_is_unknown_to_the_caller():
    world = World({"bank": Bank({"accounts": {"a": 1.0}})})
    with pytest.raises(CallFailed, match="unknown tool"):
        world.execute(ToolCall("get_balance", {"account": "a"}), available={"list_accounts"})


def test_int_arguments_for_float_parameters_give_identical_state():
    one, two = Bank({"accounts": {"a": 0.0}}), Bank({"accounts": {"a": 0.0}})
    World({"bank": one}).execute(ToolCall("deposit", {"account": "a", "amount": 100}))
    World({"bank": two}).execute(ToolCall("deposit", {"account": "a", "amount": 100.0}))
    assert one == two and repr(one) == repr(two)


def test_tool_names_are_unique_across_all_suites():
    World.from_configs({name: {} for name in SUITES}, SUITES)  # raises on a clash
