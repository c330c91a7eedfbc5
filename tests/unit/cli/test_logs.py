"""cli.log_output and eventlog: the plugin's log lines in both layouts, nothing formatted below the level."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.cli.log_output import configure_logging
from podlevel.engine.cpuset import CPUSet
from podlevel.eventlog import logger
from podlevel.nri import RpcError
from support.builders import container, fast_path, new_engine, sandbox


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def root_logging() -> Iterator[None]:
    """configure_logging replaces the root handlers; give the test's capture back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
            handler.close()
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)


def written(stream: io.StringIO) -> str:
    """What the log thread wrote to `stream` once every line logged so far is out."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    return stream.getvalue()


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in written(stream).splitlines()]


@pytest.mark.usefixtures("root_logging")
def test_json_lines_carry_the_sentence_and_the_fields() -> None:
    stream = io.StringIO()
    configure_logging("info", "auto", stream)  # not a terminal: JSON

    cpus = CPUSet.parse("1,9")
    logger("podlevel.test").info("placed {pod}: cpus={cpus}", pod="default/fast", cpus=cpus, containers=2)
    logging.getLogger("podlevel.nri.stub").warning("plain %s line", "stdlib")

    placed, plain = json_lines(stream)
    assert placed["event"] == "placed default/fast: cpus=1,9"
    assert (placed["pod"], placed["cpus"], placed["containers"]) == ("default/fast", "1,9", 2)
    assert (placed["level"], placed["logger"]) == ("info", "podlevel.test")
    assert placed["timestamp"].endswith("Z")
    assert (plain["event"], plain["level"]) == ("plain stdlib line", "warning")
    assert plain["logger"] == "podlevel.nri.stub"


@pytest.mark.usefixtures("root_logging")
def test_json_when_asked_even_on_a_terminal_with_exceptions() -> None:
    stream = Terminal()
    configure_logging("info", "json", stream)
    try:
        raise ValueError("broken view")
    except ValueError:
        logging.getLogger("podlevel.report").exception("/metrics failed")

    [line] = json_lines(stream)
    assert line["event"] == "/metrics failed" and "ValueError: broken view" in line["exception"]


@pytest.mark.usefixtures("root_logging")
@pytest.mark.parametrize("log_format", ["auto", "console"])
def test_console_layout_on_a_terminal_or_when_asked(log_format: str) -> None:
    stream: io.StringIO = Terminal() if log_format == "auto" else io.StringIO()
    configure_logging("info", log_format, stream)

    logger("podlevel.test").warning("refused {pod}", pod="default/no-room",
                                    error_type="EmptyPodSharedPoolError", cpus=CPUSet.parse("0-3"))

    text = written(stream)
    assert "refused default/no-room" in text and "podlevel.test" in text
    plain = text if log_format == "console" else _without_colours(text)
    assert "error_type=EmptyPodSharedPoolError" in plain and "cpus=0-3" in plain
    assert not plain.lstrip().startswith("{")


def _without_colours(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.mark.usefixtures("root_logging")
@pytest.mark.parametrize("log_format", ["json", "console"])
def test_the_decision_lines_tests_and_the_demo_wait_for_read_alike_in_both_layouts(log_format: str) -> None:
    stream = io.StringIO()
    configure_logging("info", log_format, stream)
    plugin = PodLevelPlugin(Placement(new_engine()))
    fast, no_room = sandbox(fast_path()), sandbox(fast_path("no-room", 2, 2))
    liar = sandbox(fast_path("liar"))
    liar.linux.pod_resources.memory.limit.value = 1

    plugin.synchronize([], [])
    plugin.create_container(fast, container(fast, "app"))
    for refused in (no_room, liar):
        with pytest.raises(RpcError):
            plugin.create_container(refused, container(refused, "app"))

    lines = written(stream).splitlines()
    for expected in (
        "synchronized 0 pods, 0 containers;",
        "placed default/fast container app: pod_exclusive cpus=",
        "refused default/no-room container app: EmptyPodSharedPoolError",
        "bad pod shape for default/liar",
    ):
        assert any(expected in line for line in lines), expected
    if log_format == "json":
        placed = next(line for line in json_lines(stream) if line["event"].startswith("placed"))
        assert {k: placed[k] for k in ("pod", "container", "assignment", "mems", "quota")} == {
            "pod": "default/fast", "container": "app", "assignment": "pod_exclusive", "mems": "0",
            "quota": "off",
        }
        refusal = next(line for line in json_lines(stream) if line["event"].startswith("refused"))
        assert (refusal["error_type"], refusal["resource"]) == ("EmptyPodSharedPoolError", "cpu")
        assert "2 of the pod's 2 CPUs" in refusal["reason"]
        bad = next(line for line in json_lines(stream) if line["event"].startswith("bad pod shape"))
        assert (bad["error_type"], bad["rule"]) == ("InvalidPodShape", "pod shape")


class Loud:
    """A value that records being turned into text."""

    def __init__(self) -> None:
        self.rendered = 0

    def __str__(self) -> str:
        self.rendered += 1
        return "loud"

    __repr__ = __str__


@pytest.mark.usefixtures("root_logging")
def test_nothing_is_formatted_below_the_level() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    loud = Loud()

    logger("podlevel.test").debug("value {value}", value=loud)
    assert written(stream) == "" and loud.rendered == 0

    logger("podlevel.test").info("value {value}", value=loud)
    [line] = json_lines(stream)
    assert loud.rendered == 2
    assert (line["event"], line["value"]) == ("value loud", "loud")


@pytest.mark.usefixtures("root_logging")
def test_a_line_logged_on_an_event_loop_is_formatted_once_the_callback_returned() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    loud = Loud()

    async def handler() -> None:
        logger("podlevel.test").info("value {value}", value=loud)
        assert loud.rendered == 0 and stream.getvalue() == ""
        await asyncio.sleep(0)
        assert loud.rendered == 2

    asyncio.run(handler())
    [line] = json_lines(stream)
    assert (line["event"], line["value"]) == ("value loud", "loud")


def test_every_line_waiting_at_exit_is_written() -> None:
    """Lines logged by the loop's last callback wait for callbacks that never run: the exit writes them."""
    program = (
        "import asyncio\n"
        "from podlevel.cli.log_output import configure_logging\n"
        "from podlevel.eventlog import logger\n"
        "configure_logging('info', 'json')\n"
        "loop = asyncio.new_event_loop()\n"
        "def last() -> None:\n"
        "    for n in range(5000):\n"
        "        logger('podlevel.test').info('line {n}', n=n)\n"
        "    loop.stop()\n"
        "loop.call_soon(last)\n"
        "loop.run_forever()\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                            check=True)
    assert [json.loads(line)["n"] for line in result.stderr.splitlines()] == list(range(5000))
