"""How the two sessions of a pair are run: one strategy per module behind the PairRunner protocol (protocol.py),
after pytest-xdist's scheduler/: one session after the other (sequential.py) or both at once taking turns
(taking_turns.py). The engine asks a runner for a pair and never learns which runner it has."""
