"""Waiting for decisions: the waiter hub and the decision long-poll's consumer.

The mechanism of waiting, not its rules: ``hub`` keeps every open wait of a process,
woken by the channel layer or its bounded re-read; ``consumers`` serves
``GET /api/v1/actions/{id}/decision`` as a Channels ``AsyncHttpConsumer``. The rules
(how long a wait lasts, when an action counts as decided) are the service layer's
(``approvals.services.waiting``).
"""
