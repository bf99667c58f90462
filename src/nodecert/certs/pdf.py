"""Certificate pages as PDF, with WeasyPrint: the same HTML the browser shows, laid out
for A4 by its print rules, every font it uses embedded (subset) in the file.

The page is self-contained; the fetcher refuses anything but inline data all the same, so
no text from a node can make the renderer reach out. WeasyPrint needs Pango (the
system's text layout library): this module is imported only when a PDF is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import weasyprint

from nodecert.core.errors import NodecertError


class PdfError(NodecertError):
    """A page could not be rendered to PDF."""


def _no_fetching(url: str, *args: Any, **kwargs: Any) -> Any:
    if url.startswith("data:"):
        return weasyprint.default_url_fetcher(url, *args, **kwargs)
    raise PdfError(f"a certificate page asked for {url[:100]!r}: pages are self-contained")


def render(html: str, base: Path | None = None) -> bytes:
    """The page as PDF bytes."""
    try:
        out = weasyprint.HTML(string=html, base_url=str(base) if base else None,
                              url_fetcher=_no_fetching).write_pdf()
    except (OSError, ValueError) as exc:
        raise PdfError(f"the page could not be rendered to PDF: {exc}") from exc
    assert isinstance(out, bytes)
    return out


__all__ = ["PdfError", "render"]
