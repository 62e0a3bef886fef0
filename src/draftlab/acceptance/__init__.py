"""Acceptance as data: acceptance profiles (ModelOpt's schema) and synthetic acceptance, read by the probe,
the cost model, the engines' settings and the reference server alike."""
