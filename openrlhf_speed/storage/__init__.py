"""Files written whole or not at all, for every room that writes one (standard library only,
so the lowest rooms may use it): atomic.py."""
