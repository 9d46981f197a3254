"""pytest mechanics: the session object, its hooks' helpers, confirmation, budgets, sizing and taking turns."""
