"""The Jinja templates of gemmgen, one folder per backend.

They live at the top of the repository, beside `specs/` and `generated/`, and
are installed as the package `gemmgen.templates` (pyproject.toml maps the
package onto this folder), so an editable install, a wheel and an sdist all
find them through `TEMPLATE_DIR`.
"""

from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
