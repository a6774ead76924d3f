"""`rules import` of no rules is refused unless meant; `rules backtest` refuses what import refuses."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from rules.models import Rule, RuleSet
from tests.factories import SEED_RULES, install_rules


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def in_force(db) -> int:
    install_rules()
    return RuleSet.objects.get().version


@pytest.mark.parametrize(
    "text",
    ["", "\n", "# nothing yet\n", "rules:\n", "rules: []\n", "[]\n"],
    ids=["empty", "blank line", "a comment", "rules: null", "rules: []", "bare []"],
)
def test_a_file_of_no_rules_is_refused_and_the_rules_stay(in_force, tmp_path, text):
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    with pytest.raises(CommandError) as refused:
        run("rules", "import", str(path))
    assert str(refused.value) == (
        f"{path}: no rules in it: importing it would remove the 3 rule(s) in force "
        "(pass --allow-empty to mean it)"
    )
    assert Rule.objects.count() == 3
    assert RuleSet.objects.get().version == in_force


def test_an_empty_file_is_refused_on_a_new_installation_too(db, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("")
    with pytest.raises(CommandError, match=r"no rules in it \(pass --allow-empty to mean it\)"):
        run("rules", "import", str(path))
    assert not RuleSet.objects.filter(version__gt=0).exists()


def test_allow_empty_removes_every_rule_as_asked(in_force, tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("rules: []\n")
    assert "Imported 0 rule(s)" in run("rules", "import", str(path), "--allow-empty")
    assert Rule.objects.count() == 0
    assert RuleSet.objects.get().version == in_force + 1


def test_kinds_alone_declare_kinds_where_no_rule_is_in_force(db, tmp_path):
    path = tmp_path / "kinds.yaml"
    path.write_text("rules: []\nkinds:\n  psp.refund:\n    money: []\n")
    assert "Imported 0 rule(s) and 1 kind(s)" in run("rules", "import", str(path))


def test_kinds_alone_would_remove_the_rules_in_force_so_are_refused(in_force, tmp_path):
    path = tmp_path / "kinds.yaml"
    path.write_text("rules: []\nkinds:\n  psp.refund:\n    money: []\n")
    with pytest.raises(CommandError, match="would remove the 3 rule"):
        run("rules", "import", str(path))
    assert Rule.objects.count() == 3


TYPO = SEED_RULES.replace("group: support-leads", "group: suport-leads")


def test_backtest_refuses_a_group_that_import_refuses(db, tmp_path):
    assert TYPO != SEED_RULES, "the seed rules route to support-leads"
    path = tmp_path / "typo.yaml"
    path.write_text(TYPO)
    with pytest.raises(CommandError) as on_import:
        run("rules", "import", str(path))
    with pytest.raises(CommandError) as on_backtest:
        run("rules", "backtest", str(path))
    assert str(on_backtest.value) == str(on_import.value)
    assert "no reviewer group is named 'suport-leads'" in str(on_backtest.value)


def test_backtest_with_create_groups_replays_as_import_would_create_them(db, tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text(TYPO)
    assert "Replayed 0 action(s)" in run("rules", "backtest", str(path), "--create-groups")
    from django.contrib.auth.models import Group

    assert not Group.objects.filter(name="suport-leads").exists()  # a dry run creates nothing
