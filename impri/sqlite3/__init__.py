"""Impri's SQLite database backend (see ``base``)."""
