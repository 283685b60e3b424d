"""What each model gets of the images and documents in a conversation (docs/attachments.md).

A protocol-neutral stage between the canonical request and the backend, used by every
frontend's path (Responses through the orchestrator, Chat and Messages from their routes):

- documents (`FilePart`: data, a Files API id, a URL) become their text for every model, PDF
  text extracted, cut beyond a bound, kept by the hash of their bytes;
- a model that reads images gets them unchanged, one that does not gets, in each image's
  place, a short text that says an image was attached and cannot be shown to it;
- an image or a document that cannot be used (a broken data URL, zero bytes, too large, a
  URL to a non-public address, a file that is not there) becomes such a text too, never an
  error: clients replay their whole history on every turn, and one bad attachment in it
  would otherwise fail every later turn of the thread.

The texts are the same for the same attachment on every turn, so a replayed history gives
a byte-identical prompt (an engine's prefix cache holds). What a model reads is known by its
backend (`Backend.reads_images`); an engine that does not say is sent the images, and its
first refusal that names images teaches it (`generate`: one retry without them).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import mimetypes
import re
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from ..backends import Backend
from ..canonical.conversation import FilePart, GenerationRequest, ImagePart, Message, Part, TextPart
from ..canonical.events import Error, Event
from ..files.extract import HTML_SUFFIXES, ExtractionError, extract_text
from ..files.service import VectorStores
from ..operations import tracing
from ..tools.outbound import FetchError, UrlPolicy

log = logging.getLogger(__name__)

TEXT_ONLY = (
    "[An image was attached here, but this model reads text only: the image cannot be shown to it. "
    "If the image matters, tell the user that you cannot see images.]"
)


def unusable_image(why: str) -> str:
    """The text in place of an image that cannot be given to any model."""
    return f"[An image was attached here, but it cannot be shown to the model: {why}.]"


_IMAGE_REFUSAL = re.compile(r"multi-?modal|image|vision|mmproj", re.IGNORECASE)
"""What an engine's refusal of an image says: vLLM "… is not a multimodal model", llama.cpp's
server "image input is not supported", Ollama and LM Studio "… does not support images"."""

_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,(?P<data>.*)", re.DOTALL)


@dataclass(slots=True)
class _Notes:
    """What one preparation replaced, for its one warning."""

    text_only: int = 0
    unusable: list[str] = field(default_factory=list)


class Attachments:
    """The attachments stage (`prepare`, `generate`); one per app (`app.state.attachments`)."""

    def __init__(
        self,
        urls: UrlPolicy,
        files: VectorStores | None = None,
        *,
        max_image_bytes: int = 20 * 2**20,
        max_document_bytes: int = 32 * 2**20,
        max_document_chars: int = 200_000,
    ) -> None:
        self.urls = urls
        self.files = files
        self.max_image_bytes = max_image_bytes
        self.max_document_bytes = max_document_bytes
        self.max_document_chars = max_document_chars
        self._texts: OrderedDict[str, str] = OrderedDict()
        """Documents' texts by the hash of their bytes (or of their URL): read once per process."""

    # --- before the engine ---------------------------------------------------------------

    async def prepare(self, backend: Backend, generation: GenerationRequest, owner: str | None = None) -> GenerationRequest:
        """The request as `backend` can take it: documents as text, images as the model reads them.

        `owner` is whose Files API files `file_id`s name (None: no file can be read).
        """
        if not any(isinstance(part, (ImagePart, FilePart)) for m in generation.messages for part in m.content):
            return generation
        reads = backend.reads_images(generation.model)
        notes = _Notes()
        messages = [await self._message(message, reads, owner, notes) for message in generation.messages]
        if notes.text_only:
            log.warning("model %s reads text only: %d image(s) given to it as a note that an image was attached",
                        generation.model, notes.text_only)  # fmt: skip
        if notes.unusable:
            log.warning("%d attachment(s) could not be used and are notes instead: %s",
                        len(notes.unusable), "; ".join(notes.unusable))  # fmt: skip
        return replace(generation, messages=messages)

    async def _message(self, message: Message, reads: bool | None, owner: str | None, notes: _Notes) -> Message:
        if not any(isinstance(part, (ImagePart, FilePart)) for part in message.content):
            return message
        parts: list[Part] = []
        for part in message.content:
            if isinstance(part, ImagePart):
                parts.append(await self._image(part, reads, owner, notes))
            elif isinstance(part, FilePart):
                parts.append(TextPart(await self._document(part, owner, notes)))
            else:
                parts.append(part)
        return replace(message, content=parts)

    async def _image(self, part: ImagePart, reads: bool | None, owner: str | None, notes: _Notes) -> Part:
        if reads is False:
            notes.text_only += 1
            return TextPart(TEXT_ONLY)
        why: str | None
        if part.file_id is not None:
            url, why = await self._file_image(part.file_id, owner)
            if url is not None:
                return replace(part, url=url, file_id=None)
        elif part.url.startswith("data:"):
            why = self._data_url_fault(part.url)
        elif part.url.startswith(("http://", "https://")):
            # The engine fetches it: it must not be led into this server's own network.
            refused = await self.urls.refusal(part.url, unresolved_ok=True)
            why = "its URL leads to an address this server does not let be fetched" if refused else None
        else:
            why = "it is neither a data URL nor an http(s) URL"
        if why is None:
            return part
        notes.unusable.append(f"an image ({why})")
        return TextPart(unusable_image(why))

    def _data_url_fault(self, url: str) -> str | None:
        """Why a `data:` URL is no usable image, or None."""
        match = _DATA_URL.fullmatch(url)
        if match is None:
            return "its data URL is malformed"
        try:
            data = base64.b64decode(match["data"], validate=True)
        except (binascii.Error, ValueError):
            return "its data URL is not valid base64"
        if not data:
            return "it is empty"
        if len(data) > self.max_image_bytes:
            return f"it is larger than {self.max_image_bytes} bytes"
        return None

    async def _file_image(self, file_id: str, owner: str | None) -> tuple[str | None, str]:
        """An uploaded image as a data URL, or why it cannot be one."""
        read = await self._file(file_id, owner, self.max_image_bytes)
        if isinstance(read, str):
            return None, read
        filename, data = read
        if not data:
            return None, "it is empty"
        media = mimetypes.guess_type(filename)[0] or "image/png"
        return f"data:{media};base64,{base64.b64encode(data).decode()}", ""

    async def _file(self, file_id: str, owner: str | None, limit: int) -> tuple[str, bytes] | str:
        """An uploaded file's name and bytes, or why it cannot be read."""
        found = None if self.files is None or owner is None else await self.files.catalog.get_file(owner, file_id)
        if found is None:
            return f"file {file_id} was not found"
        if found.bytes > limit:
            return f"file {file_id} is larger than {limit} bytes"
        assert self.files is not None
        data = bytearray()
        async for piece in self.files.blobs.read(found.blob):
            data += piece
        return found.filename, bytes(data)

    # --- documents -----------------------------------------------------------------------

    async def _document(self, part: FilePart, owner: str | None, notes: _Notes) -> str:
        """A document's text headed by its name, or a note saying why it cannot be read."""
        name = part.filename or part.file_id or (PurePath(part.url).name if part.url else None) or "file"
        if part.data is not None:
            payload = part.data.split(",", 1)[1] if part.data.startswith("data:") and "," in part.data else part.data
            try:
                data = base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                return self._unreadable(name, "its data is not valid base64", notes)
            if len(data) > self.max_document_bytes:
                return self._unreadable(name, f"it is larger than {self.max_document_bytes} bytes", notes)
            return self._text(name, data, hashlib.sha256(data).hexdigest())
        if part.file_id is not None:
            read = await self._file(part.file_id, owner, self.max_document_bytes)
            if isinstance(read, str):
                return self._unreadable(name, read, notes)
            stored_name, data = read
            return self._text(part.filename or stored_name, data, hashlib.sha256(data).hexdigest())
        if part.url is not None:
            key = "url:" + hashlib.sha256(part.url.encode()).hexdigest()
            if key in self._texts:
                self._texts.move_to_end(key)
                return self._texts[key]
            try:
                data = await self.urls.fetch(part.url, self.max_document_bytes)
            except FetchError as exc:
                log.warning("file %s at %s cannot be read: %s", name, part.url, exc)
                return self._unreadable(f"{name} at {part.url}", "it could not be fetched", notes)
            return self._text(name, data, key)
        return f"[file {name}]"

    def _unreadable(self, name: str, why: str, notes: _Notes) -> str:
        notes.unusable.append(f"file {name} ({why})")
        return f"[file {name}: {why}]"

    def _text(self, name: str, data: bytes, key: str) -> str:
        """The document's text for the model, kept under `key` (so that each turn reads it once)."""
        found = self._texts.get(key)
        if found is None:
            found = self._texts[key] = self._read(name, data)
            while len(self._texts) > 256:
                self._texts.popitem(last=False)
        else:
            self._texts.move_to_end(key)
        return found

    def _read(self, name: str, data: bytes) -> str:
        suffix = PurePath(name).suffix.lower()
        try:
            if data.startswith(b"%PDF") or suffix == ".pdf":
                text = extract_text("document.pdf", data)
            elif suffix in HTML_SUFFIXES:
                text = extract_text(name, data)
            else:
                text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            return f"[file {name}: binary content that cannot be shown as text]"
        except ExtractionError as exc:
            log.warning("file %s cannot be read: %s", name, exc)
            return f"[file {name}: a PDF whose text cannot be read]"
        if len(text) > self.max_document_chars:
            cut = len(text) - self.max_document_chars
            text = text[: self.max_document_chars] + f"\n[… {cut} more characters of {name} are left out: the file is too long]"
        return f"[file {name}]\n{text}\n[end of file {name}]"

    # --- the engine's refusal --------------------------------------------------------------

    async def generate(
        self, backend: Backend, generation: GenerationRequest, response_id: str | None = None
    ) -> AsyncIterator[Event]:
        """The engine's events for a prepared request; an engine that refuses its images (a 4xx
        naming images, before any answer) has its model learned as text-only, and the request
        is sent once more with notes in the images' places."""
        async with aclosing(tracing.generate(backend, generation, response_id)) as events:
            first = await anext(events, None)
            if not (isinstance(first, Error) and _refuses_images(first, generation)):
                if first is not None:
                    yield first
                async for event in events:
                    yield event
                return
        log.warning("model %s refused an image (%s): it reads text only from now on", generation.model, first.message)
        backend.learn_text_only(generation.model)
        retry = await self.prepare(backend, generation)
        async with aclosing(tracing.generate(backend, retry, response_id)) as events:
            async for event in events:
                yield event


def _refuses_images(error: Error, generation: GenerationRequest) -> bool:
    return (
        400 <= error.status < 500
        and error.status not in (401, 403, 404, 429)
        and _IMAGE_REFUSAL.search(error.message) is not None
        and any(isinstance(part, ImagePart) for m in generation.messages for part in m.content)
    )
