"""The model: groups, roles, cadences, A, and the places it must stay unknown."""
