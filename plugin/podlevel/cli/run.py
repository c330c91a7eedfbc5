"""`nri-podlevel run`: the plugin daemon.

Every setting comes from, in falling precedence: the command line, the environment
(`NRI_PODLEVEL_<FLAG>`, e.g. `NRI_PODLEVEL_NRI_SOCKET`, `NRI_PODLEVEL_POLICY`), the YAML file given with
`--config` (keys are the flag names, `nri-socket: /run/nri/nri.sock`, a list for a repeatable flag, or the
kubelet's KubeletConfiguration keys, `topologyManagerPolicy: restricted`), then the defaults. A repeatable
flag (`--reserved-memory`) takes `;`-separated items from the environment. When the runtime launched the
plugin (`NRI_PLUGIN_SOCKET` set), name and index come from the runtime as NRI requires. Bad configuration
exits with status 2 and a message naming the setting.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from podlevel.agent.drift import DriftRepair
from podlevel.agent.events import Observer
from podlevel.agent.placement import Placement
from podlevel.agent.plugin import PodLevelPlugin
from podlevel.agent.pod_cgroups import PodCgroups, PodCgroupWorker
from podlevel.agent.startup import restored_state
from podlevel.cgroups import DEFAULT_CGROUP_ROOT
from podlevel.cli.config_file import NO_FILE, read_config
from podlevel.cli.engine_flags import add_engine_arguments, engine_config
from podlevel.cli.log_output import LOG_FORMATS, configure_logging
from podlevel.cli.mounts import problems as mount_problems
from podlevel.engine.errors import InputError
from podlevel.engine.limits import shown
from podlevel.engine.manager import Engine
from podlevel.engine.topology import Topology
from podlevel.eventlog import logger
from podlevel.nri import DEFAULT_SOCKET_PATH, InvalidIdentity, Stub
from podlevel.report import DEFAULT_DEBUG_ADDRESS, DEFAULT_METRICS_ADDRESS, DEFAULT_PODRESOURCES_SOCKET
from podlevel.state.store import DEFAULT_STATE_DIR, StateDir, StateDirError
from podlevel.sysfs.reader import read_topology

if TYPE_CHECKING:
    from podlevel.agent.snapshot import NodeSnapshot
    from podlevel.httpd import Server
    from podlevel.report.lazy_grpc import LazyGrpcSocket
    from podlevel.report.metrics import PluginMetrics

log = logger(__name__)

ENV_PREFIX: Final = "NRI_PODLEVEL_"
DEFAULT_NAME: Final = "podlevel"
DEFAULT_INDEX: Final = "10"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help="YAML file with settings (flag names or KubeletConfiguration keys)")
    parser.add_argument("--nri-socket", default=DEFAULT_SOCKET_PATH, help="runtime NRI socket (%(default)s)")
    parser.add_argument("--plugin-name", default=DEFAULT_NAME, help="NRI plugin name (%(default)s)")
    parser.add_argument("--plugin-index", default=DEFAULT_INDEX, help="NRI plugin index (%(default)s)")
    parser.add_argument("--sysfs-root", default="/sys", help="sysfs to read the machine topology from")
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR),
                        help="where the checkpoints live, created 0700 (%(default)s)")
    parser.add_argument("--metrics-address", default=DEFAULT_METRICS_ADDRESS,
                        help="HOST:PORT of probes and metrics (%(default)s); empty: off")
    parser.add_argument("--debug-address", default=DEFAULT_DEBUG_ADDRESS,
                        help="HOST:PORT of the operator views /debug/node and /debug/explain, which name "
                             "every pod and its CPUs (%(default)s; keep it off the pod network); empty: off")
    parser.add_argument("--podresources-socket", default=str(DEFAULT_PODRESOURCES_SOCKET),
                        help="socket of the PodResources v1 service (%(default)s), mode 0600; empty: off")
    parser.add_argument("--podresources-socket-group", default="", metavar="NAME|GID",
                        help="open the PodResources socket to this group too (mode 0660)")
    parser.add_argument("--cgroup-root", default=str(DEFAULT_CGROUP_ROOT),
                        help="cgroup mount holding the pod cgroups (%(default)s); empty: leave them alone")
    parser.add_argument("--reconcile-period", type=float, default=10.0, metavar="SECONDS",
                        help="how often containers' cgroups are compared with what the plugin applied and "
                             "changed values put back, as the kubelet's cpuManagerReconcilePeriod "
                             "(%(default)s; also after every resync); 0: off")
    parser.add_argument("--on-missing-mount", default="exit", choices=["exit", "wait"],
                        help="when a node path is missing or read-only: exit 2 (%(default)s), or stay up, "
                             "alive and not ready, its probes saying which (the DaemonSet: no crash loop)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="auto", choices=LOG_FORMATS,
                        help="log layout on stderr (%(default)s: console on a terminal, else JSON lines)")
    add_engine_arguments(parser)


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run the NRI plugin daemon", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(handler=run)


class _SettingsParser(argparse.ArgumentParser):
    """The run parser for merged settings: errors become InputError instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise InputError("settings", message)


def _settings_parser(*, suppress_defaults: bool = False) -> _SettingsParser:
    """The run parser; with `suppress_defaults`, only the settings actually given end up in the namespace.

    The environment and the config file are fed through this same parser, so it is walked through
    `parser._actions` (argparse's list of the flags it knows, private but stable since Python 3.2 and the
    only way to enumerate them) rather than through a second table of flags that could drift.
    """
    parser = _SettingsParser(prog="nri-podlevel run", add_help=False)
    add_arguments(parser)
    if suppress_defaults:
        for action in parser._actions:
            action.default = argparse.SUPPRESS
    return parser


def resolve(argv: Sequence[str], environ: Mapping[str, str]) -> argparse.Namespace:
    """Settings from defaults < `--config` file < `NRI_PODLEVEL_*` environment < command line.

    Every value, whatever its source, goes through the same parser, so types, choices and repeatable
    flags behave alike; an error names the setting and where its value came from. The namespace's
    `sources` maps each flag not from the command line to where it came from, for later error messages;
    `notices` are what the operator should read once logging is set up.
    """
    given = vars(_settings_parser(suppress_defaults=True).parse_args(argv))
    parser = _settings_parser()
    config = given.get("config") or environ.get(ENV_PREFIX + "CONFIG")
    known = {a.dest for a in parser._actions if a.option_strings} - {"help", "config"}
    from_file = read_config(config, known) if config else NO_FILE
    tokens: list[str] = []
    sources: dict[str, str] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest in given or action.dest == "config":
            continue
        flag = action.option_strings[-1]
        env_name = ENV_PREFIX + action.dest.upper()
        repeatable = isinstance(action, argparse._AppendAction)
        if env_name in environ:
            values: list[str] = environ[env_name].split(";") if repeatable else [environ[env_name]]
            sources[flag] = f"environment {env_name}"
        elif action.dest in from_file.settings:
            setting = from_file.settings[action.dest]
            if isinstance(setting.value, list) and not repeatable:
                raise InputError("--config", f"{config}: {setting.key} takes one value, not a list")
            values = setting.value if isinstance(setting.value, list) else [setting.value]
            named = "" if setting.key == flag[2:] else f", key {setting.key}"
            sources[flag] = f"config file {config}{named}"
        else:
            continue
        # One `--flag=value` token, so a value that starts with "-" stays a value.
        tokens += [f"{flag}={value_text}" for value_text in values]
    try:
        args = parser.parse_args([*tokens, *argv])
    except InputError as err:
        raise InputError("settings", err.message + origin_of(sources, err.message)) from None
    args.sources = sources
    args.notices = [notice] if (notice := from_file.notice()) else []
    return args


def origin_of(sources: Mapping[str, str], message: str) -> str:
    """" (--flag from the environment NAME; ...)" for the flags a message mentions, or for all of them
    when it mentions none (a later check that names only the value)."""
    mentioned = {flag: source for flag, source in sources.items() if flag in message} or sources
    if not mentioned:
        return ""
    return " (" + "; ".join(f"{flag} from the {source}" for flag, source in mentioned.items()) + ")"


def restrict_umask() -> None:
    """Make nothing the agent creates writable by group or others, whatever umask it inherited (a launched
    plugin inherits the runtime's): the explicit modes (the 0700 state dir, 0600 checkpoints and socket) stay,
    and directories made on the way to them get at most 0755."""
    os.umask(os.umask(0o022) | 0o022)


def run(args: argparse.Namespace) -> int:
    try:
        args = resolve(args.argv, os.environ)
    except InputError as err:
        print(f"nri-podlevel run: bad configuration: {err}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, args.log_format)
    restrict_umask()
    for notice in args.notices:
        log.warning("{notice}", notice=notice)
    launched = "NRI_PLUGIN_SOCKET" in os.environ
    if missing := list(mount_problems(args, launched=launched)):
        return wait_unready(args, "; ".join(missing))
    try:
        agent = build_agent(args, launched=launched)
    except (InputError, InvalidIdentity, OSError, ValueError, StateDirError) as err:
        origin = origin_of(args.sources, str(err))
        print(f"nri-podlevel run: bad configuration: {err}{origin}", file=sys.stderr)
        return 2
    config = agent.engine.config
    log.info("node {node}, scope {scope}, policy {policy}, reserved CPUs {reserved}",
             node=agent.engine.topology.describe(), scope=config.scope.value,
             policy=config.topology_policy.value, reserved=agent.engine.reserved_cpus or "none")
    agent.start()
    # What start-up made (modules, classes, the engine's tables) lives as long as the process: out of the
    # cyclic collector's sight, its full collections walk only what the events made.
    gc.freeze()
    # A stop, not the default kill: the log lines still waiting and the checkpoint still pending are written.
    signal.signal(signal.SIGTERM, lambda _signal, _frame: agent.stub.stop())
    try:
        with contextlib.suppress(KeyboardInterrupt):
            agent.stub.run()
    finally:
        agent.stop()
    # The line a rollout's log ends with: nothing was left for a SIGKILL to lose.
    log.info("stopped: last checkpoint written, sockets removed")
    return 0


@dataclass
class Agent:
    """Everything `run` serves, built and bound but not started: `start` starts the HTTP servers, the
    PodResources socket and the drift repair; `stub.run()` then serves the runtime until it stops; `stop`
    undoes it all, the checkpoint written last."""

    engine: Engine
    handler: PodLevelPlugin
    stub: Stub
    servers: list[Server]
    podresources: LazyGrpcSocket | None
    repair: DriftRepair | None

    def start(self) -> None:
        for server in self.servers:
            start_serving(server)
        if self.podresources is not None:
            self.podresources.start()
        if self.repair is not None:
            self.repair.start()

    def stop(self) -> None:
        try:
            if self.repair is not None:
                self.repair.stop()
            if self.podresources is not None:
                self.podresources.stop()
            for server in self.servers:
                server.stop()
        finally:
            self.handler.close()


def build_agent(
    args: argparse.Namespace,
    *,
    launched: bool,
    topology: Topology | None = None,
    plugin: type[PodLevelPlugin] = PodLevelPlugin,
) -> Agent:
    """The agent `args` (from `resolve`) describe, on the machine's topology (read from `--sysfs-root`
    unless given), its handler a `plugin`. The one composition root: `run` and the benchmarks build the
    agent here. What it binds is undone when a later step fails (a bad setting leaves no port held and no
    socket file behind), and the ports are bound only once the PodResources socket was made. Raises
    InputError, InvalidIdentity, OSError, ValueError or StateDirError."""
    with contextlib.ExitStack() as undo:
        topology = topology or read_topology(args.sysfs_root)
        engine = Engine(topology, engine_config(args, topology))
        state = StateDir(Path(args.state_dir))
        # The metrics read the snapshot the handler publishes; without an endpoint nobody counts.
        metrics = plugin_metrics(lambda: handler.snapshot) if args.metrics_address else None
        observer = metrics or Observer()
        handler = plugin(
            Placement(engine, recorded=restored_state(state, engine)),
            state=state,
            pod_cgroups=PodCgroupWorker(PodCgroups(Path(args.cgroup_root), observer)) if args.cgroup_root
            else None,
            observer=observer,
        )
        undo.callback(handler.close)
        if launched:
            stub = Stub.from_environment(handler, observer=metrics)
            check_launched_socket(stub.socket_fd)
        else:
            stub = Stub(handler, args.plugin_name, args.plugin_index, args.nri_socket, observer=metrics)
        handler.send_updates = stub.update_containers
        podresources = podresources_server(args, handler) if args.podresources_socket else None
        if podresources is not None:
            undo.callback(podresources.stop)
        servers = report_servers(args, stub, metrics, handler, undo)
        repair = drift_repair(args, handler, stub, observer)
        undo.pop_all()
    return Agent(engine, handler, stub, servers, podresources, repair)


def wait_unready(args: argparse.Namespace, problem: str) -> int:
    """A node path the agent needs is missing or read-only (`cli.mounts`): say so once; with
    `--on-missing-mount=wait` answer the probes (alive, not ready: `problem`) and wait for the stop rather
    than exit into a crash loop, else (or without a probe endpoint to say it) exit 2."""
    if args.on_missing_mount == "exit" or not args.metrics_address:
        print(f"nri-podlevel run: bad configuration: {problem}", file=sys.stderr)
        return 2
    log.error("cannot start: {problem}", problem=problem)
    from podlevel.httpd import Server
    from podlevel.report.probes import probes

    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    server = Server(args.metrics_address, probes(lambda: problem), name="probes")
    start_serving(server)
    try:
        signal.sigwait(stops)
    finally:
        server.stop()
    return 0


def drift_repair(args: argparse.Namespace, plugin: PodLevelPlugin, stub: Stub,
                 observer: Observer) -> DriftRepair | None:
    """The reconcile loop (`agent.drift`), when containers' cgroups are within reach and a period is set."""
    if not args.cgroup_root or args.reconcile_period <= 0:
        return None
    return DriftRepair(Path(args.cgroup_root), lambda: plugin.snapshot, lambda: plugin.handler_lock,
                       plugin.applied, lambda: stub.ready, args.reconcile_period, observer)


def check_launched_socket(fd: int | None) -> None:
    """The runtime's socket must be an open socket before anything starts: a plugin launched with a bad
    descriptor can never connect, and should say so with status 2 rather than exit 0 after a warning."""
    if fd is None:
        return
    try:
        mode = os.fstat(fd).st_mode
    except (OSError, OverflowError) as err:
        reason = err.strerror if isinstance(err, OSError) else "not a descriptor number"
        raise InputError("NRI_PLUGIN_SOCKET", f"fd {shown(str(fd), 32)}: {reason}") from None
    if not stat.S_ISSOCK(mode):
        raise InputError("NRI_PLUGIN_SOCKET", f"fd {fd} is not a socket")


def plugin_metrics(snapshot: Callable[[], NodeSnapshot]) -> PluginMetrics:
    """The plugin's metrics, reading the handler's snapshots. The Prometheus client is imported only for
    them: a plugin without a metrics endpoint does without it."""
    import prometheus_client

    from podlevel.report.metrics import PluginMetrics

    # A `_created` series beside every counter doubles a scrape for a timestamp the process start gives.
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # the client's annotations lack it
    return PluginMetrics(snapshot)


def report_servers(args: argparse.Namespace, stub: Stub, metrics: PluginMetrics | None,
                   plugin: PodLevelPlugin, undo: contextlib.ExitStack) -> list[Server]:
    """The HTTP endpoints: the probes (ready while registered and synchronized) and `/metrics` on
    `--metrics-address`, the operator views (`report.views`) on `--debug-address`; one server when both
    name the same address. Each bound server's stop goes on `undo`, for a failure after it."""
    from podlevel.httpd import Route, Server
    from podlevel.report.metrics import metrics_route
    from podlevel.report.probes import probes
    from podlevel.report.schema import PathsDocument
    from podlevel.report.views import views

    public: dict[str, Route] = {}
    if metrics is not None:
        public = probes(lambda: None if stub.ready else "not registered and synchronized with the runtime")
        public["/metrics"] = metrics_route(metrics)
    paths: PathsDocument = {"cgroup_root": str(args.cgroup_root) if args.cgroup_root else None}
    debug = views(lambda: plugin.snapshot, paths) if args.debug_address else {}
    if args.debug_address == args.metrics_address:
        endpoints = [("--metrics-address and --debug-address", args.debug_address, {**public, **debug})]
    else:
        endpoints = [("--metrics-address", args.metrics_address, public),
                     ("--debug-address", args.debug_address, debug)]
    servers = []
    for flag, address, routes in endpoints:
        if address:
            try:
                servers.append(Server(address, routes, name="report"))
            except OSError as err:
                raise InputError(flag, f"cannot listen on {address}: {err.strerror or err}") from None
            undo.callback(servers[-1].stop)
    return servers


def start_serving(server: Server) -> None:
    server.start()
    log.info("serving {routes} on {url}", routes=", ".join(sorted(server.routes)), url=server.url)


def podresources_server(args: argparse.Namespace, plugin: PodLevelPlugin) -> LazyGrpcSocket:
    """The PodResources service; gRPC is imported only for it. A socket that cannot be made is bad
    configuration of the flag at fault."""
    from podlevel.report.podresources_socket import podresources_socket
    from podlevel.report.unix_socket import SocketError

    try:
        return podresources_socket(Path(args.podresources_socket), lambda: plugin.snapshot,
                                   group=args.podresources_socket_group)
    except SocketError as err:
        flag = "--podresources-socket-group" if err.about == "group" else "--podresources-socket"
        raise InputError(flag, str(err)) from None
