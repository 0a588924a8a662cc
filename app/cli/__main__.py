import sys

from app.cpu_floor import refuse_if_too_old

if code := refuse_if_too_old():  # before NumPy is imported: it needs x86-64-v2
    sys.exit(code)

from app.cli.main import main  # noqa: E402

sys.exit(main())
