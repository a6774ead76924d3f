"""Reconciliation: the money the processor moved, held against the money that was approved.

Movements come in from the processor (Stripe's signed webhooks, the generic API, CSV
imports), are matched to an action (``metadata.impri_action_id``, else the ``reference``
the agent reported), and get a state (``matched``, ``mismatch``, ``unapproved``,
``duplicate``; per action also ``unsettled`` and ``unreported``). The core only lends a
read of an action's approved money (``approvals.money.approved``) and the reported
``result.reference``; the action's reads learn the state through
``approvals.presenters.RECONCILIATION``, filled in this app's ``AppConfig.ready``.
See docs/reconciliation.md.
"""
