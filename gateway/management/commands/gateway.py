"""``impri gateway import FILE | export | tools NAME``."""

from __future__ import annotations

from pathlib import Path

from asgiref.sync import async_to_sync
from django.core.management.base import BaseCommand, CommandError

from gateway import config, services
from gateway.proxy import build_gateway_server


class Command(BaseCommand):
    help = "Manage MCP gateways: import a YAML file, export them, list an upstream's tools."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True)
        imp = sub.add_parser(
            "import", help="Replace every gateway with FILE (atomically; running servers follow)."
        )
        imp.add_argument("file")
        sub.add_parser("export", help="Print the gateways as YAML (secrets stay ${VAR}).")
        tools = sub.add_parser(
            "tools", help="Ask the upstream of gateway NAME for its tools; show each one's policy."
        )
        tools.add_argument("name")

    def handle(self, *args, subcommand: str, **options):
        if subcommand == "export":
            self.stdout.write(config.export_yaml(), ending="")
        elif subcommand == "import":
            parsed = self._load(options["file"])
            config.replace_all(parsed, by="cli")
            names = ", ".join(p.upstream.name for p in parsed) or "none"
            self.stdout.write(f"Imported {len(parsed)} gateway(s): {names}.")
        else:
            self._tools(options["name"])

    def _load(self, path: str):
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        try:
            return config.parse_yaml(text)
        except config.ConfigError as exc:
            raise CommandError(f"{path}: {exc}") from None

    def _tools(self, name: str) -> None:
        if not services.exists(name):
            raise CommandError(f"no enabled gateway named {name!r}: see `impri gateway export`")
        tools, error = async_to_sync(build_gateway_server(name).fetch_tools)()
        if error:
            self.stderr.write(f"{error}")
            if not tools:
                raise CommandError(f"gateway {name!r}: the upstream did not answer")
            self.stderr.write("showing the tools it offered when last reached:")
        gateway = services.load(name)
        explicit = services.policies(gateway)
        width = max((len(t.name) for t in tools), default=4)
        for tool in sorted(tools, key=lambda t: t.name):
            verdict = services.effective(gateway, tool.name, explicit)
            stored = explicit[tool.name].policy if tool.name in explicit else gateway.default_policy
            source = "" if tool.name in explicit else " (default)"
            if verdict != stored:
                source = f" (policy {stored}; a rule names its kind {services.kind_for(name, tool.name)})"
            self.stdout.write(f"{tool.name:<{width}}  {verdict}{source}")
        for missing in sorted(set(explicit) - {t.name for t in tools}):
            self.stdout.write(
                f"{missing:<{width}}  {explicit[missing].policy} (not offered upstream)"
            )
