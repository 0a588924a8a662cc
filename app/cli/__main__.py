import sys

from app.cli.main import main
from app.huge_pages import reexec_with_huge_pages

reexec_with_huge_pages()
sys.exit(main())
