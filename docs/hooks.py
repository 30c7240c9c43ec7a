"""mkdocs hooks: pages rendered from the code's own declarations, so they are written once.

- `<!-- settings-table ... -->` becomes the settings table of `binloop.core.config.Config`.
- `<!-- readme ... -->` becomes the README (the site's home page), its `docs/` links made
  relative to the site.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_SETTINGS = re.compile(r"<!-- settings-table[^>]*-->")
_README = re.compile(r"<!-- readme[^>]*-->")
_ROOT = Path(__file__).resolve().parents[1]


def readme_as_home_page() -> str:
    text = (_ROOT / "README.md").read_text(encoding="utf-8")
    text = text.replace("](docs/", "](")
    # files outside docs/ are named, not linked (the site does not hold them)
    return re.sub(r"\[([^\]]+)\]\(((?!https?:)[^)#]+\.md)\)",
                  lambda m: m.group(0) if (_ROOT / "docs" / m.group(2)).exists()
                  else f"{m.group(1)} (`{m.group(2)}`)", text)


def on_page_markdown(markdown: str, **_: Any) -> str:
    if _README.search(markdown):
        markdown = _README.sub(lambda _m: readme_as_home_page(), markdown)
    if _SETTINGS.search(markdown):
        from binloop.core.config import render_markdown

        markdown = _SETTINGS.sub(lambda _m: render_markdown(), markdown)
    return markdown
