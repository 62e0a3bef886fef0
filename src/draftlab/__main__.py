from draftlab.cli import main

raise SystemExit(main())
