"""``python -m orchestrator`` runs the ``reverie`` command."""

from orchestrator.cli.app import main

main()
