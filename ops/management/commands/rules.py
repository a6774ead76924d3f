from __future__ import annotations

import sys
from collections.abc import Sized
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from approvals.backtest_history import past_action_views as past_actions
from plumbing import strict_json
from plumbing.progress import Progress
from rules import engine, services
from rules import kinds as kinds_
from rules.backtest import backtest, dry_run, parse_since, undeclared_kinds


class Command(BaseCommand):
    help = "Manage the rule set: import, export, test one action, backtest past actions."
    requires_system_checks = []  # a one-shot command: serve, worker and `impri check` run them

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="subcommand", required=True)
        imp = sub.add_parser("import", help="Replace the rule set with FILE (atomically).")
        imp.add_argument("file")
        imp.add_argument(
            "--create-groups",
            action="store_true",
            help="Create the reviewer groups the rules name that do not exist yet "
            "(without it, an unknown group is an error).",
        )
        imp.add_argument(
            "--allow-empty",
            action="store_true",
            help="Import a file of no rules (without it, an empty file is refused, and so is "
            "one that would remove the rules in force).",
        )
        sub.add_parser("export", help="Print the rule set as YAML.")
        kinds = sub.add_parser("kinds", help="List the declared kinds and what money they move.")
        kinds.add_argument(
            "--undeclared",
            action="store_true",
            help="List instead the kinds pushed in the last 30 days that no declaration covers.",
        )
        show = sub.add_parser(
            "show", help="Print the rule set as it stood at a version (default: the current one)."
        )
        show.add_argument("--version", type=int, dest="rules_version", help="Version number")
        show.add_argument(
            "--diff", action="store_true", help="Print the diff from the version before instead"
        )
        test = sub.add_parser("test", help="Show what FILE's rules would do to one action.")
        test.add_argument("file")
        test.add_argument(
            "--action", required=True, help="JSON file: {kind, agent, payload, flags, context}"
        )
        back = sub.add_parser("backtest", help="Replay past actions through FILE's rules.")
        back.add_argument("file")
        back.add_argument(
            "--since",
            default="30d",
            help="How far back: 30d, 12h, 90m (default 30d); 'all' for everything.",
        )
        back.add_argument(
            "--amount-path",
            default=None,
            help="Add up this payload path instead of the actions' amounts (as declared by "
            "their kinds, in their currencies).",
        )
        back.add_argument(
            "--create-groups",
            action="store_true",
            help="Replay as if the reviewer groups the rules name were created, as "
            "`rules import --create-groups` would (without it, an unknown group is an error).",
        )

    def handle(self, *args, subcommand: str, **options):
        if subcommand == "export":
            self.stdout.write(services.export_yaml(), ending="")
            return
        if subcommand == "kinds":
            self.stdout.write(_kinds_text(options["undeclared"]))
            return
        if subcommand == "show":
            self._show(options["rules_version"], options["diff"])
            return
        loaded = self._load(options["file"])
        rules = loaded.rules
        if subcommand == "import":
            try:
                version = services.replace_rules(
                    loaded,
                    by="cli",
                    create_groups=options["create_groups"],
                    allow_empty=options["allow_empty"],
                )
            except engine.RuleError as exc:
                raise CommandError(f"{options['file']}: {exc}") from None
            kinds = f" and {len(loaded.kinds)} kind(s)" if loaded.kinds else ""
            self.stdout.write(
                f"Imported {len(rules)} rule(s){kinds}; the rule set is now version {version}."
            )
        elif subcommand == "test":
            self.stdout.write(dry_run(rules, self._action(options["action"]), loaded.kinds))
        else:
            try:
                if not options["create_groups"]:  # the check `import` makes, so both refuse alike
                    services.check_groups(rules)
            except engine.RuleError as exc:
                raise CommandError(f"{options['file']}: {exc}") from None
            try:
                since = parse_since(options["since"])
            except ValueError as exc:
                raise CommandError(f"--since: {exc}") from None
            path = options["amount_path"]
            history = past_actions(since)
            total = len(history) if isinstance(history, Sized) else None
            with Progress("replaying past actions", total, sys.stderr) as bar:  # a terminal only
                report = backtest(rules, bar.track(history), since, path, loaded.kinds)
            self.stdout.write(report.as_text(path))

    def _show(self, version: int | None, diff: bool):
        if version is None:
            version = services.current_rules().version
        stored = services.rules_at(version)
        if stored is None:
            raise CommandError(
                f"rule set version {version} was not kept (versions are kept from the upgrade "
                "that introduced them on; the current one is "
                f"{services.current_rules().version})"
            )
        self.stderr.write(
            f"rule set v{stored.version}: {stored.change or 'changed'} by "
            f"{stored.changed_by or 'unknown'} at {stored.created_at:%Y-%m-%d %H:%M:%S} UTC"
        )
        self.stdout.write(stored.diff if diff else stored.yaml, ending="")

    def _load(self, path: str) -> services.RuleFile:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        try:
            return services.parse_file(text)
        except engine.RuleError as exc:
            raise CommandError(f"{path}: {exc}") from None

    def _action(self, path: str) -> dict:
        try:
            action = strict_json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read the action in {path}: {exc}") from None
        if not isinstance(action, dict):
            raise CommandError(f"{path}: the action must be a JSON object")
        action.setdefault("flags", [])
        action.setdefault("context", {})
        action.setdefault("payload", {})
        return action


def _kinds_text(undeclared: bool) -> str:
    """``rules kinds``: the declarations in force, or the kinds seen that none covers."""
    declared = services.current_rules().kinds
    if not undeclared:
        return "\n".join(
            f"{name}: {_money_text(spec)}"
            for name, spec in sorted(kinds_.all_declared(declared).items())
        )
    found = undeclared_kinds(past_actions(parse_since("30d")), declared)
    if not found:
        return "Every kind pushed in the last 30 days is declared."
    lines = [f"  {kind}: {n} action(s), last {at:%Y-%m-%d %H:%M} UTC" for kind, n, at in found]
    return "\n".join(
        [f"{len(found)} kind(s) pushed in the last 30 days declare no money (held for review):"]
        + lines
        + ['Declare each under kinds: in the rules file (docs/rules.md, "Kinds and money").']
    )


def _money_text(spec: kinds_.KindSpec) -> str:
    if spec.money is None:
        return "a schema only: its money is not declared (held for review)"
    if not spec.money:
        return "moves no money (money: [])"
    return "; ".join(f"{m.amount} in {m.currency}" for m in spec.money)
