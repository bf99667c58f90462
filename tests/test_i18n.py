"""What people read, in English and Brazilian Portuguese: every message of the pages,
the bundle and verify's summary has its translation (extracted from the code as
pybabel does, against the catalogue), the language comes from --lang or the locale,
numbers are written the reader's way, the signed statement is the same in every
language, and the PDF carries its fonts and renders back to a page."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import re
import time
from pathlib import Path

import pypdfium2
import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po
from click.testing import CliRunner
from pypdf import PdfReader

from nodecert.certs import i18n
from nodecert.certs.certify import certify
from nodecert.certs.html import Rendering
from nodecert.certs.signing import KeyPair, init_key, load_private_key
from nodecert.cli import main
from support.runs import REPO, make_run, passing, recorded_results

PO = REPO / "src/nodecert/certs/locale/pt_BR/LC_MESSAGES/nodecert.po"
CERTIFIED = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")


def extracted() -> dict[str | tuple[str, str], str]:
    """Every message the code and templates mark, as `pybabel extract -F babel.cfg -k tr
    -k N_` finds them, with where each is."""
    with (REPO / "babel.cfg").open() as f:
        method_map, options_map = parse_mapping_cfg(f)
    keywords = {"_": None, "gettext": None, "ngettext": (1, 2), "N_": None, "tr": None}
    found: dict[str | tuple[str, str], str] = {}
    for filename, lineno, message, _, _ in extract_from_dir(
            str(REPO), method_map, options_map, keywords=keywords):
        found.setdefault(message, f"{filename}:{lineno}")
    return found


def test_every_message_has_a_portuguese_translation_with_the_same_placeholders() -> None:
    with PO.open("rb") as f:
        catalog = read_po(f, locale="pt_BR")
    translated = {m.id: m.string for m in catalog if m.id}
    messages = extracted()
    assert len(messages) > 150  # the pages, the bundle, verify's words
    missing = [f"{where}: {msg!r}" for msg, where in messages.items()
               if not translated.get(msg)]
    assert missing == [], "untranslated (add them to nodecert.po):\n" + "\n".join(missing)
    stale = [m for m in translated if m not in messages]
    assert stale == [], f"in the catalogue but no longer in the code: {stale}"
    for msg, string in translated.items():
        ids = msg if isinstance(msg, tuple) else (msg,)
        strings = string if isinstance(string, tuple) else (string,)
        assert all(s for s in strings), f"empty translation of {msg!r}"
        want = set(PLACEHOLDER.findall(" ".join(ids)))
        for s in strings:
            assert set(PLACEHOLDER.findall(s)) == want, f"{msg!r} -> {s!r}"
    assert not any(m.fuzzy for m in catalog if m.id)


def test_no_message_is_defined_twice_in_the_catalogue() -> None:
    """Babel keeps the last of two definitions silently; gettext's msgfmt refuses them."""
    ids: list[str] = []
    current: list[str] | None = None
    for line in [*PO.read_text(encoding="utf-8").splitlines(), ""]:
        if line.startswith("msgid "):
            current = [line[6:].strip().strip('"')]
        elif current is not None and line.startswith('"'):
            current.append(line.strip().strip('"'))
        elif current is not None:
            ids.append("".join(current))
            current = None
    dupes = sorted({i for i in ids if ids.count(i) > 1 and i})
    assert not dupes


def test_the_language_comes_from_lang_or_the_locale() -> None:
    assert i18n.normalize("pt-BR") == i18n.normalize("pt_br") == "pt_BR"
    assert i18n.normalize("pt_BR.UTF-8") == i18n.normalize("pt") == "pt_BR"
    assert i18n.normalize("en_US.UTF-8") == i18n.normalize("C") == "en"
    with pytest.raises(i18n.LanguageError, match="no reports in language 'de'"):
        i18n.normalize("de")
    assert i18n.from_environment({"LANG": "pt_BR.UTF-8"}) == "pt_BR"
    assert i18n.from_environment({"LANGUAGE": "de:pt_BR", "LANG": "en_US"}) == "pt_BR"
    assert i18n.from_environment({"LC_ALL": "de_DE.UTF-8"}) == "en"  # none of ours
    assert i18n.from_environment({}) == "en"
    assert i18n.choose("pt-BR") == "pt_BR" and i18n.choose(None) in i18n.LANGUAGES


@pytest.fixture
def signed(tmp_path: Path) -> tuple[KeyPair, Path]:
    key = init_key(tmp_path / "keys", name="k")
    run = make_run(tmp_path, {"n1": {"results": passing(recorded_results()),
                                     "started": 1796005833.0, "finished": 1796005981.0}})
    return key, run


def payload(envelope: Path) -> bytes:
    return base64.b64decode(json.loads(envelope.read_text())["payload"])


def test_the_signed_statement_is_the_same_in_every_language(
        tmp_path: Path, signed: tuple[KeyPair, Path]) -> None:
    key, run = signed
    en = certify(run, load_private_key(key.private), now=CERTIFIED, out_dir=tmp_path / "en")
    pt = certify(run, load_private_key(key.private), now=CERTIFIED, out_dir=tmp_path / "pt",
                 rendering=Rendering("pt_BR"))
    assert payload(en.nodes[0].envelope) == payload(pt.nodes[0].envelope)
    page = pt.nodes[0].html.read_text()
    assert '<html lang="pt-BR">' in page and "Certificado do nó: n1" in page
    assert 'id="verdict">PRONTO' in page and 'data-verdict="PASS"' in page
    assert "Certificado do nó" not in en.nodes[0].html.read_text()
    # Numbers as the reader writes them: 1.404,5 in Portuguese, 1,404.5 in English.
    assert "<dt>RAM</dt><dd>125,9 GB</dd>" in page
    assert "<dt>RAM</dt><dd>125.9 GB</dd>" in en.nodes[0].html.read_text()
    index = (tmp_path / "pt" / "index.html").read_text()
    assert "Certificados da frota: 1 de 1 nós PRONTOS" in index


def test_verify_speaks_the_readers_language(signed: tuple[KeyPair, Path]) -> None:
    key, run = signed
    cert = certify(run, load_private_key(key.private), now=CERTIFIED).nodes[0].envelope
    r = CliRunner().invoke(main, ["verify", str(cert), "--pubkey", str(key.public),
                                  "--lang", "pt-BR"])
    assert r.exit_code == 0, r.output
    assert "VÁLIDO: o certificado é válido e o nó está PRONTO" in r.output
    assert "ok   assinatura" in r.output and r.output.startswith("sujeito: ")
    env = CliRunner().invoke(main, ["verify", str(cert), "--pubkey", str(key.public)],
                             env={"LANG": "pt_BR.UTF-8", "LC_ALL": "", "LANGUAGE": ""})
    assert "VÁLIDO" in env.output  # from the locale
    bad = CliRunner().invoke(main, ["verify", str(cert), "--pubkey", str(key.public),
                                    "--lang", "xx"])
    assert bad.exit_code == 2 and "no reports in language 'xx'" in bad.output


def test_the_pdf_embeds_its_fonts_and_renders_back_to_the_page(
        tmp_path: Path, signed: tuple[KeyPair, Path]) -> None:
    key, _ = signed
    ended = time.time() - 3600  # certify runs now: a run that ended an hour ago
    run = make_run(tmp_path / "now", {"n1": {"results": passing(recorded_results()),
                                             "started": ended - 148.0, "finished": ended}})
    r = CliRunner().invoke(main, ["certify", str(run), "--key", str(key.private), "--lang",
                                  "pt-BR", "--pdf", "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    pdf = tmp_path / "r" / "n1.pdf"
    reader = PdfReader(pdf)
    assert len(reader.pages) >= 2
    fonts: dict[str, bool] = {}
    for page in reader.pages:
        for ref in (page["/Resources"].get("/Font") or {}).values():
            font = ref.get_object()
            desc = font.get("/FontDescriptor")
            if desc is None and "/DescendantFonts" in font:
                desc = font["/DescendantFonts"][0].get_object().get("/FontDescriptor")
            desc = desc.get_object() if desc is not None else {}
            fonts[str(font.get("/BaseFont"))] = any(
                k in desc for k in ("/FontFile", "/FontFile2", "/FontFile3"))
    assert fonts and all(fonts.values()), f"fonts not embedded: {fonts}"
    text = reader.pages[0].extract_text()
    assert "Certificado do nó: n1" in text and "PRONTO" in text
    # Rendered back to an image: a page with a green banner on white, not a blank one.
    doc = pypdfium2.PdfDocument(str(pdf))
    image = doc[0].render(scale=1).to_pil().convert("RGB")
    w, h = image.size
    assert w > h  # A4 landscape
    colours = image.getcolors(maxcolors=1 << 20) or []
    green = sum(n for n, (r_, g, b) in colours if g > 100 and r_ < 60 and b < 80)
    assert green > 2000, "the READY banner is not on the rendered page"
    png = io.BytesIO()
    image.save(png, format="PNG")
    assert len(png.getvalue()) > 20_000
