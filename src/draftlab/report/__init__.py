"""Rendering results for people: terminal tables (and later plots and HTML)."""
