"""``python -m orchestrator`` runs the ``reverie`` command."""

from orchestrator.cli.app import entry

entry()
