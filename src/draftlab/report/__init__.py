"""Rendering results for people: terminal tables (one module per command), and the HTML page of
``draftlab report`` (:mod:`draftlab.report.html`)."""
