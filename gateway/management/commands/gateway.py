"""``impri gateway import FILE | export | tools NAME | refresh NAME | accept NAME [TOOL…]``."""

from __future__ import annotations

import getpass
from pathlib import Path

from asgiref.sync import async_to_sync
from django.core.management.base import BaseCommand, CommandError

from gateway import config, pins, services, upstream
from gateway.characters import looks_like, shown_name
from gateway.proxy import build_gateway_server
from plumbing.progress import Progress


def operator() -> str:
    """Who runs the command, for the audit trail."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no name for this uid (a container)
        return "cli"


def short(sha: str | None) -> str:
    return sha[:12] if sha else "none"


def about(name: str, text: str) -> str:
    """``text`` said of gateway ``name``: prefixed only when it does not name the upstream already."""
    return text if f"upstream {name!r}" in text else f"gateway {name}: {text}"


class Command(BaseCommand):
    help = (
        "Manage MCP gateways: import a YAML file, export them, list an upstream's tools, "
        "record them (refresh) and accept the changes held for review."
    )
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True)
        imp = sub.add_parser(
            "import",
            help="Replace every gateway with FILE (atomically; running servers follow) and "
            "record the tools of each new gateway's upstream.",
        )
        imp.add_argument("file")
        sub.add_parser("export", help="Print the gateways as YAML (secrets stay ${VAR}).")
        tools = sub.add_parser(
            "tools",
            help="Ask the upstream of gateway NAME for its tools; show each one's policy, kind "
            "and whether it changed upstream.",
        )
        tools.add_argument("name")
        tools.add_argument(
            "--diff", action="store_true", help="Also print the diff of each held change."
        )
        refresh = sub.add_parser(
            "refresh",
            help="Ask the upstream of gateway NAME now: record its tools the first time, "
            "hold what changed since.",
        )
        refresh.add_argument("name")
        accept = sub.add_parser(
            "accept",
            help="Accept the changed definitions held for gateway NAME's pinned tools (all, or "
            "the TOOLs named); a new tool is accepted only when named. A name may be given as "
            "`impri gateway tools` prints it (refund\\u{200B}).",
        )
        accept.add_argument("name")
        accept.add_argument("tools", nargs="*", metavar="TOOL")

    def handle(self, *args, subcommand: str, **options):
        if subcommand == "export":
            self.stdout.write(config.export_yaml(), ending="")
        elif subcommand == "import":
            parsed = self._load(options["file"])
            config.replace_all(parsed, by=operator())
            names = ", ".join(p.upstream.name for p in parsed) or "none"
            self.stdout.write(f"Imported {len(parsed)} gateway(s): {names}.")
            for item in parsed:
                if item.upstream.enabled:
                    self._refresh(item.upstream.name, strict=False)
        elif subcommand == "refresh":
            self._exists(options["name"])
            self._refresh(options["name"], strict=True)
        elif subcommand == "accept":
            self._accept(options["name"], options["tools"])
        else:
            self._tools(options["name"], show_diff=options["diff"])

    def _load(self, path: str):
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        try:
            return config.parse_yaml(text)
        except config.ConfigError as exc:
            raise CommandError(f"{path}: {exc}") from None

    def _exists(self, name: str) -> None:
        if not services.exists(name):
            raise CommandError(f"no enabled gateway named {name!r}: see `impri gateway export`")

    def _refresh(self, name: str, *, strict: bool) -> None:
        """Record the tools the first time the upstream answers; afterwards, hold its changes."""
        target = upstream.Target.of(services.load(name))
        try:
            # A terminal sees the wait (an upstream run with npx may take a while to start).
            asking = Progress(f"gateway {name}: asking the upstream for its tools", None)
            with asking, asking.ticking():
                tools = async_to_sync(upstream.list_tools)(target)
        except (upstream.UpstreamError, upstream.UpstreamRefused) as exc:
            if isinstance(exc, upstream.UpstreamError):
                services.record_state(name, str(exc))
            else:
                exc = f"upstream {name!r} refused to list its tools: {exc}"
            if services.load(name).pinned_at is not None:
                later = "the pinned definitions stand; nothing was compared"
            elif strict:  # this is the refresh: say when to run it again, not to run it
                later = "its tools are not recorded yet; try again once it answers"
            else:
                later = (
                    f"its tools are not recorded yet: run `impri gateway refresh {name}` once "
                    "it answers"
                )
            message = about(name, f"{exc}; {later}")
            if strict:
                raise CommandError(message) from None
            self.stderr.write(message)
            return
        offered = upstream.dump_tools(tools)
        services.record_state(name, "", offered)
        pinned = pins.pin_all(name, offered, by=operator())
        if pinned is not None:
            self.stdout.write(
                f"gateway {name}: recorded {len(pinned)} tool definition(s): "
                f"{', '.join(map(shown_name, pinned)) or 'none'}."
            )
            for tool in pinned:  # recorded as offered, but said: an operator reads this once
                like = looks_like(tool, set(pinned))
                if like and tool > like:
                    self.stderr.write(
                        f"gateway {name}: {shown_name(tool)} looks like `{like}`: check both "
                        f"with `impri gateway tools {name}`, and deny the one you do not want"
                    )
            return
        states = pins.observe(name, offered)
        held = [s for s in states if s.state in ("changed", "new")]
        for state in held:
            self.stdout.write(
                f"gateway {name}: {shown_name(state.name)} "
                f"{'is new' if state.state == 'new' else 'changed'} upstream "
                f"({short(state.pin.sha256)} -> {short(state.pin.pending_sha256)}): "
                f"held for review{self._warnings(state)}"
            )
        if held:
            self.stdout.write(
                f"Review with `impri gateway tools {name} --diff`; accept with "
                f"`impri gateway accept {name} [TOOL ...]` (a new tool only by its name)."
            )
        else:
            self.stdout.write(f"gateway {name}: no change since the tools were recorded.")

    def _accept(self, name: str, tools: list[str]) -> None:
        self._exists(name)
        try:
            accepted = pins.accept(name, tools or None, by=operator())
        except pins.NothingToAccept as exc:
            raise CommandError(str(exc)) from None
        for entry in accepted:
            self.stdout.write(
                f"accepted {name}.{shown_name(entry['tool'])}: {short(entry['old_sha256'])} -> "
                f"{entry['sha256']}"
            )
        new = [pin.tool for pin in pins.pending(name) if not pin.sha256]
        if new and not tools:
            self.stdout.write(
                f"gateway {name}: new tools stay held until accepted by name: "
                f"{', '.join(map(shown_name, new))} (see `impri gateway tools {name} --diff`; "
                f"then `impri gateway accept {name} TOOL`)"
            )
        elif not accepted:
            self.stdout.write(f"gateway {name}: no change is waiting for review.")

    def _tools(self, name: str, *, show_diff: bool) -> None:
        self._exists(name)
        states, error = async_to_sync(build_gateway_server(name).survey)()
        if error and not states:
            raise CommandError(about(name, f"{error}; no tool is recorded to show"))
        if error:
            self.stderr.write(about(name, f"{error}; the tools as recorded:"))
        gateway = services.load(name)
        if gateway.pinned_at is None:
            self.stderr.write(
                f"gateway {name}: its tools are not recorded yet, so none is offered to "
                f"agents: run `impri gateway refresh {name}`"
            )
        explicit = services.policies(gateway)
        width = max((len(shown_name(s.name)) for s in states), default=4)
        for state in states:
            stored = (
                explicit[state.name].policy if state.name in explicit else gateway.default_policy
            )
            source = "" if state.name in explicit else " (default)"
            if state.verdict != stored:
                source = f" (policy {stored}; a rule names its kind)"
            line = f"{shown_name(state.name):<{width}}  {state.verdict}{source}  kind {state.kind}"
            self.stdout.write(line + self._describe(state) + self._warnings(state))
            if show_diff and state.pin is not None and state.pin.held:
                self.stdout.write(pins.diff(state.pin.definition, state.pin.pending_definition))
        for missing in sorted(set(explicit) - {s.name for s in states}):
            self.stdout.write(
                f"{shown_name(missing):<{width}}  {explicit[missing].policy} (not offered upstream)"
            )

    @staticmethod
    def _describe(state: pins.ToolState) -> str:
        pin = state.pin
        if state.state == "changed":
            return (
                f"  CHANGED upstream, held for review ({short(pin.sha256)} -> "
                f"{short(pin.pending_sha256)})"
            )
        if state.state == "new":
            return f"  NEW upstream, held until accepted by name ({short(pin.pending_sha256)})"
        if state.state == "pinned":
            return f"  pinned {short(pin.sha256)}"
        return f"  {state.state}"

    @staticmethod
    def _warnings(state: pins.ToolState) -> str:
        """What to look at before accepting: a look-alike name, unclear characters."""
        found = []
        if state.looks_like:
            found.append(f"looks like `{state.looks_like}`")
        if state.unclear:
            found.append(f"its text holds {', '.join(state.unclear)} (shown as \\u{{...}})")
        return "".join(f"; {warning}" for warning in found).replace("; ", "  ! ", 1)
