"""``draftlab report``: any mix of draftlab's JSON results as one self-contained HTML page.

:mod:`.recognize` reads the files and tells each result's kind from its contents; one module per
family of results (:mod:`.compat`, :mod:`.vocab`, :mod:`.decode`, :mod:`.drift`, :mod:`.plan`,
:mod:`.bench`, :mod:`.train`) turns a result into a :class:`~.markup.Section` whose heading states
the finding; :mod:`.figures` draws inline SVG with matplotlib; :mod:`.page` assembles the page.
"""
