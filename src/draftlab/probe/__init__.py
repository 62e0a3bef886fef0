"""The exact offline acceptance probe and target-version drift."""
