"""The plugin's core, in sub-packages by layer, lowest first: stats < verdict < store < config < record < session.

Each imports only from its own layer and those below it; none imports a workload package, ab/ or cli/
(tests/unit/test_layout.py holds these rules). The layers and the flows through them: docs/architecture.md.
"""
