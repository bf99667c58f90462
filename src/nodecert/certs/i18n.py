"""The languages of what people read: the certificate pages, the hand-over index, PDFs
and verify's summary, in English and Brazilian Portuguese.

Messages are gettext's: marked `_("...")` in templates and code, their translations in
`locale/<lang>/LC_MESSAGES/nodecert.po` (compiled in memory with Babel when first
used, so the catalogue in the tree is the one that runs). English is the source
language. What was signed stays language-neutral: only its rendering is translated;
what a node said (a check's summary, its findings) is shown as measured.
"""

from __future__ import annotations

import gettext
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from nodecert.core.errors import NodecertError

LOCALE_DIR = Path(__file__).parent / "locale"
DOMAIN = "nodecert"
LANGUAGES = {"en": "English", "pt_BR": "Português (Brasil)"}
DEFAULT = "en"


class LanguageError(NodecertError):
    """A language nodecert has no catalogue for (bad input, exit 2)."""


def normalize(lang: str) -> str:
    """'pt-BR', 'pt_br', 'pt', 'pt_BR.UTF-8' -> 'pt_BR'; 'en_US' -> 'en'."""
    base = lang.split(".", maxsplit=1)[0].split("@", maxsplit=1)[0].replace("-", "_").strip()
    if not base or base in ("C", "POSIX"):
        return DEFAULT
    for known in LANGUAGES:
        if base.lower() == known.lower():
            return known
    head = base.split("_")[0].lower()
    for known in LANGUAGES:
        if known.split("_")[0].lower() == head:
            return known
    raise LanguageError(f"no reports in language {lang!r}",
                        hint="use one of " + ", ".join(
                            k.replace("_", "-") for k in LANGUAGES))


def from_environment(env: dict[str, str] | None = None) -> str:
    """The language of the locale (LANGUAGE, LC_ALL, LC_MESSAGES, LANG, in gettext's
    order); English where none is set or nodecert has none of them."""
    env = dict(os.environ) if env is None else env
    for var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        for value in env.get(var, "").split(":"):
            if value:
                try:
                    return normalize(value)
                except LanguageError:
                    continue
    return DEFAULT


def choose(lang: str | None) -> str:
    """--lang as given, else the locale's."""
    return normalize(lang) if lang else from_environment()


@lru_cache(maxsize=8)
def translations(lang: str) -> gettext.NullTranslations:
    """The catalogue of `lang` (English: the messages as written)."""
    lang = normalize(lang)
    if lang == DEFAULT:
        return gettext.NullTranslations()
    po = LOCALE_DIR / lang / "LC_MESSAGES" / f"{DOMAIN}.po"
    with po.open("rb") as f:
        catalog = read_po(f, locale=lang)
    buf = io.BytesIO()
    write_mo(buf, catalog)
    buf.seek(0)
    return gettext.GNUTranslations(buf)


def gettext_for(lang: str) -> gettext.NullTranslations:
    return translations(normalize(lang))


# Languages that write 1.404,5 where English writes 1,404.5.
_COMMA_DECIMAL = {"pt_BR"}


@dataclass(frozen=True)
class Voice:
    """How a page speaks: its messages (gettext) and how it writes numbers."""

    gettext: Callable[[str], str]
    lang: str = DEFAULT

    def __call__(self, message: str) -> str:
        return self.gettext(message)

    def localize(self, number: str) -> str:
        """A number written the English way ('1,404.5') as this language writes it."""
        return number.translate(_SWAP) if self.lang in _COMMA_DECIMAL else number


_SWAP = str.maketrans({",": ".", ".": ","})


def voice(lang: str) -> Voice:
    lang = normalize(lang)
    return Voice(translations(lang).gettext, lang)


ENGLISH = Voice(lambda message: message)


def N_(message: str) -> str:
    """Mark a message for the catalogue where it is defined; translate where shown."""
    return message


__all__ = [
    "DEFAULT",
    "ENGLISH",
    "LANGUAGES",
    "LOCALE_DIR",
    "N_",
    "LanguageError",
    "Voice",
    "choose",
    "from_environment",
    "gettext_for",
    "normalize",
    "translations",
    "voice",
]
