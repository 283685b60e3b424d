"""Text out of uploaded files, by file type: plain text and code, Markdown, HTML, JSON, CSV and PDF."""

from __future__ import annotations

import io
import json
from html.parser import HTMLParser
from pathlib import PurePath

TEXT_SUFFIXES = frozenset(
    [".txt", ".md", ".markdown", ".rst", ".csv", ".tsv", ".json", ".jsonl", ".xml", ".yaml", ".yml", ".toml", ".ini", ".log", ".tex", ".py", ".js", ".ts", ".tsx", ".jsx", ".java", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".go", ".rs", ".rb", ".php", ".sh", ".css", ".sql", ".swift", ".kt", ".scala", ".lua", ".r", ".pl"]
)
HTML_SUFFIXES = frozenset({".html", ".htm"})


class ExtractionError(Exception):
    """A file whose text cannot be had; `code` is the vector store file's `last_error.code`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def extract_text(filename: str, data: bytes) -> str:
    suffix = PurePath(filename).suffix.lower()
    if suffix == ".pdf":
        return _pdf(data)
    if suffix in HTML_SUFFIXES:
        return _html(_decode(data))
    if suffix == ".json":
        text = _decode(data)
        try:
            json.loads(text)
        except ValueError as exc:
            raise ExtractionError("invalid_file", f"{filename} is not valid JSON: {exc}") from None
        return text
    if suffix in TEXT_SUFFIXES:
        return _decode(data)
    raise ExtractionError("unsupported_file", f"Files of type {suffix or '(no extension)'!r} are not supported.")


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ExtractionError("invalid_file", "The file is not UTF-8 text.") from None


def _pdf(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    except (PdfReadError, ValueError, KeyError) as exc:
        raise ExtractionError("invalid_file", f"The PDF could not be read: {exc}") from None


class _TextOfHTML(HTMLParser):
    """The visible text of a page: no scripts or styles, block elements on lines of their own."""

    BLOCKS = frozenset(["p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "header", "footer", "pre", "blockquote", "table"])
    HIDDEN = frozenset({"script", "style", "template", "noscript", "head"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self.hidden += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def _html(text: str) -> str:
    parser = _TextOfHTML()
    parser.feed(text)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)
