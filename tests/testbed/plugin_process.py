"""`nri-podlevel run` (and any other command of the test bed) as a child process, for the demo and the
integration tests.

Its log (stdout and stderr) is kept line by line and echoed with a prefix, so a reader sees the plugin's
decisions beside its own output. Waiting is on log lines with a deadline, never a sleep; the process is
stopped (SIGTERM, then SIGKILL) or killed outright to play a crash, always by its own PID.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Final

from podlevel.state.formats import CPUCheckpoint, MemoryCheckpoint, decode
from podlevel.state.journal import replayed
from podlevel.state.store import CPU_STATE_FILE, MEMORY_STATE_FILE, read_journal
from testbed.wait import wait_until

REGISTER_TIMEOUT_S: Final = 90.0
"""A plugin under TCG on a loaded host has taken more than 30 s to start."""
STOP_TIMEOUT_S: Final = 10.0
REGISTERED: Final = "registered with"
"""What the stub logs once the runtime has configured and synchronized it."""


def free_port() -> int:
    """A loopback TCP port nothing listens on right now (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_help() -> str:
    """`nri-podlevel run --help`: which flags the plugin under test has."""
    done = subprocess.run([sys.executable, "-m", "podlevel.cli.main", "run", "--help"], capture_output=True,
                          text=True, check=True, timeout=REGISTER_TIMEOUT_S)
    return done.stdout


class PluginExited(RuntimeError):
    """A child process ended while something was still expected of it."""


class LoggedProcess:
    """`command` in a child process; `lines` is its log (stdout and stderr) so far, echoed with `prefix`
    unless `echo` is off. `name` says what it is in errors."""

    def __init__(self, command: Sequence[str], *, name: str, prefix: str, echo: bool = True) -> None:
        self.name = name
        self.prefix = prefix
        self.echo = echo
        self.on_line: Callable[[str], None] | None = None
        """Called with each log line as soon as it is read, on the reader thread (a crash timed to a line)."""
        self.lines: list[str] = []
        self.process = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._echo, args=(self.process.stdout,), daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _echo(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line.rstrip())
            if self.on_line is not None:
                self.on_line(line)
            if self.echo:
                print(f"{self.prefix}{line.rstrip()}", flush=True)

    def wait_for_line(self, text: str, timeout: float, *, after: int = 0) -> str:
        """The first log line from index `after` on that contains `text`; raises PluginExited if the
        process ends first, DeadlineExceeded after `timeout` seconds."""

        def found() -> str | None:
            match = next((line for line in self.lines[after:] if text in line), None)
            if match is None and self.process.poll() is not None:
                self._reader.join(timeout=STOP_TIMEOUT_S)
                match = next((line for line in self.lines[after:] if text in line), None)
                if match is None:
                    raise PluginExited(
                        f"{self.name} exited with status {self.process.returncode} before logging "
                        f"{text!r}; last lines: {self.lines[-10:]}"
                    )
            return match

        return wait_until(found, timeout, f"{self.name} to log {text!r}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it is still there after STOP_TIMEOUT_S; waits for its log to end."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(timeout=STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL: the process dies as in a crash, with no chance to say goodbye."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._reader.join(timeout=STOP_TIMEOUT_S)


class PluginProcess(LoggedProcess):
    """`nri-podlevel run --nri-socket SOCKET --state-dir DIR EXTRA...` in a child process. A plugin started
    again with the same `state_dir` restores from the checkpoints there. Its probes and metrics listen on a
    free loopback port, `metrics_address`, its operator views on another, `debug_address`, and its
    PodResources service on `podresources_socket` in the state directory, so several plugins never collide."""

    def __init__(
        self, nri_socket: Path, extra: Sequence[str] = (), *, state_dir: Path, prefix: str = "  plugin | ",
        echo: bool = True,
    ) -> None:
        self.state_dir = state_dir
        self.metrics_address = f"127.0.0.1:{free_port()}"
        self.debug_address = f"127.0.0.1:{free_port()}"
        self.podresources_socket = state_dir / "pod-resources.sock"
        command = [
            sys.executable, "-m", "podlevel.cli.main", "run", "--nri-socket", str(nri_socket),
            "--state-dir", str(state_dir), "--metrics-address", self.metrics_address,
            "--debug-address", self.debug_address,
            "--podresources-socket", str(self.podresources_socket), *extra,
        ]
        super().__init__(command, name="nri-podlevel run", prefix=prefix, echo=echo)

    def wait_registered(self, timeout: float = REGISTER_TIMEOUT_S) -> str:
        return self.wait_for_line(REGISTERED, timeout)


def recorded(state_dir: Path) -> tuple[CPUCheckpoint, MemoryCheckpoint]:
    """What a plugin's state directory records now, as a restart would start from it: both checkpoint files
    (each must verify) with the decision journal's records replayed over them. A running plugin folds the
    journal into the files within `FOLD_WITHIN_S`, so the files alone may lag an answer."""
    cpu, memory = (decode((state_dir / name).read_bytes()) for name in (CPU_STATE_FILE, MEMORY_STATE_FILE))
    assert cpu.valid and memory.valid, (cpu.checks, memory.checks)
    assert isinstance(cpu.content, CPUCheckpoint) and isinstance(memory.content, MemoryCheckpoint)
    replayed_cpu, replayed_memory = replayed(cpu.content, memory.content, read_journal(state_dir).deltas)
    assert replayed_memory is not None
    return replayed_cpu, replayed_memory
