from django.apps import AppConfig


class AgentsConfig(AppConfig):
    """The agents' doors: REST (``agent_doors.api``, django-ninja) and MCP (``agent_doors.mcp``).

    Adapters only: they parse a call, hand it to ``approvals.services`` and shape the answer
    with ``approvals.presenters``. No model, no business rule.
    """

    name = "agent_doors"
    label = "agent_doors"
    verbose_name = "Agents"
