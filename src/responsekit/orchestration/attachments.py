"""What each model gets of the images and documents in a conversation (docs/attachments.md).

A protocol-neutral stage between the canonical request and the backend, used by every
frontend's path (Responses through the orchestrator, Chat and Messages from their routes):

- documents (`FilePart`: data, a Files API id, a URL) become their text for every model, PDF
  text extracted, cut beyond a bound, kept by the hash of their bytes;
- a model that reads images gets them unchanged (an image by URL fetched here and sent inline
  when its engine does not fetch URLs itself), one that does not gets, in each image's place,
  a short text that says an image was attached and cannot be shown to it;
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

import asyncio
import base64
import binascii
import hashlib
import logging
import mimetypes
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import PurePath

from ..backends import Backend
from ..backends.router import ModelRouter
from ..canonical.conversation import FilePart, GenerationRequest, ImagePart, Message, Part, TextPart
from ..canonical.errors import APIError
from ..canonical.events import Error, Event, TextDelta
from ..canonical.ids import storable
from ..files.extract import HTML_SUFFIXES, ExtractionError, extract_text
from ..files.service import VectorStores
from ..operations import tracing
from ..store import Store
from ..tools.outbound import FetchError, UrlPolicy

log = logging.getLogger(__name__)

TEXT_ONLY = (
    "[An image was attached here, but this model reads text only: the image cannot be shown to it. "
    "If the image matters, tell the user that you cannot see images.]"
)


def described(description: str) -> str:
    """The text in place of an image for a text-only model, when a vision model described it."""
    return (f"[An image was attached here. This model reads text only, so another model described the image: "
            f"{description}]")  # fmt: skip


DESCRIBE = (
    "Describe this image for someone who cannot see it: what it shows, and every text, number, "
    "code or data in it, written out exactly. Reply with the description only."
)
IMAGE_FETCH_TIMEOUT = 20.0
"""Seconds to fetch an image by URL for an engine that does not fetch it itself."""
INLINED_KEPT_BYTES = 64 * 2**20
"""How much of the images fetched for such engines is kept in memory (least recently used out)."""
DESCRIPTION_TIMEOUT = 120.0
"""Seconds a vision model has to describe one image; past them, the note without description."""


def unusable_image(why: str) -> str:
    """The text in place of an image that cannot be given to any model."""
    return f"[An image was attached here, but it cannot be shown to the model: {why}.]"


_IMAGE_REFUSAL = re.compile(
    r"multi-?modal|vision|mmproj|images?( input)?[^.]{0,40}(not supported|unsupported)"
    r"|(not|n't) support[^.]{0,20}images?|required for image input",
    re.IGNORECASE,
)
"""What an engine says when its model reads no image (not when one image is bad: that model
still reads others): vLLM "… is not a multimodal model", llama.cpp's server "image input is not
supported", LM Studio "Model does not support images", Ollama "… missing data required for
image input"."""

_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^,;]*)*?);base64,(?P<data>.*)", re.DOTALL)


@dataclass(slots=True)
class _Notes:
    """What one preparation replaced, for its one warning (and how it gives images by URL)."""

    text_only: int = 0
    inline: bool = False
    """The engine does not fetch image URLs: they are fetched here and sent as data URLs."""
    unusable: list[str] = field(default_factory=list)


class Attachments:
    """The attachments stage (`prepare`, `generate`); one per app, the pipeline's (`pipeline.py`)."""

    def __init__(
        self,
        urls: UrlPolicy,
        files: VectorStores | None = None,
        store: Store | None = None,
        router: ModelRouter | None = None,
        *,
        vision_model: str | None = None,
        max_image_bytes: int = 20 * 2**20,
        max_document_bytes: int = 32 * 2**20,
        max_document_chars: int = 200_000,
    ) -> None:
        self.urls = urls
        self.files = files
        self.store = store
        self.router = router
        self.vision_model = vision_model if router is not None else None
        self.max_image_bytes = max_image_bytes
        self.max_document_bytes = max_document_bytes
        self.max_document_chars = max_document_chars
        self._texts: OrderedDict[str, str] = OrderedDict()
        """What attachments read as, by kind and hash: the store's rows this process read last."""
        self._inlined: OrderedDict[str, str] = OrderedDict()
        """Images fetched for engines that do not fetch URLs, as data URLs, by URL (`_inline`)."""
        self._inlined_bytes = 0

    # --- before the engine ---------------------------------------------------------------

    async def prepare(self, backend: Backend, generation: GenerationRequest, owner: str | None = None) -> GenerationRequest:
        """The request as `backend` can take it: documents as text, images as the model reads them.

        `owner` is whose Files API files `file_id`s name (None: no file can be read).
        """
        if not any(isinstance(part, (ImagePart, FilePart)) for m in generation.messages for part in m.content):
            return generation
        reads = backend.reads_images(generation.model)
        notes = _Notes(inline=reads is not False and not backend.fetches_image_urls(generation.model))
        messages = [await self._message(message, reads, owner, notes) for message in generation.messages]
        if notes.text_only:
            log.warning("model %s reads text only: %d image(s) given to it as a note that an image was attached",
                        generation.model, notes.text_only)  # fmt: skip
        if notes.unusable:
            log.warning("%d attachment(s) could not be used and are notes instead: %s",
                        len(notes.unusable), "; ".join(notes.unusable))  # fmt: skip
        return replace(generation, messages=messages)

    async def in_text(self, messages: list[Message], owner: str | None = None) -> list[Message]:
        """The messages with every attachment as text, as for a text-only model: for a transcript
        that a model reads as plain text (a compaction summary)."""
        notes = _Notes()
        return [await self._message(message, False, owner, notes) for message in messages]

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
            if self.vision_model is not None:
                description = await self._description(part, owner)
                if description is not None:
                    return TextPart(described(description))
            return TextPart(TEXT_ONLY)
        why: str | None
        if part.file_id is not None:
            url, why = await self._file_image(part.file_id, owner)
            if url is not None:
                return replace(part, url=url, file_id=None)
        elif part.url.startswith("data:"):
            why = self._data_url_fault(part.url)
        elif part.url.startswith(("http://", "https://")) and notes.inline:
            url, why = await self._inline(part.url)
            if url is not None:
                return replace(part, url=url)
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

    async def _inline(self, url: str) -> tuple[str | None, str]:
        """The image at `url` as a data URL, fetched under the URL policy (each redirect checked,
        at most `max_image_bytes`), for engines that do not fetch URLs; or why it cannot be one.
        Kept in memory by URL, so a history replayed on every turn fetches it once and sends the
        same bytes."""
        found = self._inlined.get(url)
        if found is not None:
            self._inlined.move_to_end(url)
            return found, ""
        try:
            async with asyncio.timeout(IMAGE_FETCH_TIMEOUT):  # the whole fetch, redirects included
                data = await self.urls.fetch(url, self.max_image_bytes, timeout=IMAGE_FETCH_TIMEOUT)
        except (FetchError, TimeoutError) as exc:
            log.warning("the image at %s cannot be fetched: %r", url, exc)
            return None, "its URL could not be fetched"
        if not data:
            return None, "it is empty"
        media = _image_type(data)
        if media is None:
            return None, "its URL does not lead to a PNG, JPEG, GIF, WebP or BMP image"
        inlined = f"data:{media};base64,{base64.b64encode(data).decode()}"
        self._inlined[url] = inlined
        self._inlined_bytes += len(inlined)
        while self._inlined_bytes > INLINED_KEPT_BYTES and len(self._inlined) > 1:
            self._inlined_bytes -= len(self._inlined.popitem(last=False)[1])
        return inlined, ""

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
            return self._shown(name, await self._known("document", _digest(data), _reader(name, data)))
        if part.file_id is not None:
            read = await self._file(part.file_id, owner, self.max_document_bytes)
            if isinstance(read, str):
                return self._unreadable(name, read, notes)
            stored_name, data = read
            name = part.filename or stored_name
            return self._shown(name, await self._known("document", _digest(data), _reader(name, data)))
        if part.url is not None:
            url = part.url

            async def fetched() -> str | None:
                try:
                    data = await self.urls.fetch(url, self.max_document_bytes)
                except FetchError as exc:
                    log.warning("file %s at %s cannot be read: %s", name, url, exc)
                    return None
                return await _reader(name, data)()

            text = await self._kept("document-url", _digest(url.encode()), fetched)
            if text is None:
                return self._unreadable(f"{name} at {url}", "it could not be fetched", notes)
            return self._shown(name, text)
        return f"[file {name}]"

    def _unreadable(self, name: str, why: str, notes: _Notes) -> str:
        notes.unusable.append(f"file {name} ({why})")
        return f"[file {name}: {why}]"

    def _shown(self, name: str, text: str) -> str:
        """A document's text as the model reads it: headed by its name, cut beyond the bound."""
        if text == _BINARY:
            return f"[file {name}: binary content that cannot be shown as text]"
        if text == _UNREADABLE_PDF:
            return f"[file {name}: a PDF whose text cannot be read]"
        if len(text) > self.max_document_chars:
            cut = len(text) - self.max_document_chars
            text = text[: self.max_document_chars] + f"\n[… {cut} more characters of {name} are left out: the file is too long]"
        return f"[file {name}]\n{text}\n[end of file {name}]"

    async def _known(self, kind: str, digest: str, make: Callable[[], Awaitable[str]]) -> str:
        """`_kept` of what can always be made."""
        text = await self._kept(kind, digest, make)
        assert text is not None
        return text

    async def _kept(self, kind: str, digest: str, make: Callable[[], Awaitable[str | None]]) -> str | None:
        """What an attachment reads as: kept in the store by its hash (and in memory), else made
        and kept; None when it cannot be made (not kept: a later turn tries again)."""
        key = f"{kind}:{digest}"
        found = self._texts.get(key)
        if found is None and self.store is not None:
            found = await self.store.attachment_text(kind, digest)
        if found is None:
            found = await make()
            if found is None:
                return None
            if self.store is not None and storable(found):
                await self.store.keep_attachment_text(kind, digest, found)
        self._texts[key] = found
        self._texts.move_to_end(key)
        while len(self._texts) > 256:
            self._texts.popitem(last=False)
        return found

    # --- descriptions by a vision model ------------------------------------------------------

    async def _description(self, part: ImagePart, owner: str | None) -> str | None:
        """What the vision model says the image shows (kept by the image's hash), or None when
        the image cannot be used or the model does not answer."""
        assert self.vision_model is not None
        url: str | None = part.url
        if part.file_id is not None:
            url, _ = await self._file_image(part.file_id, owner)
        elif part.url.startswith("data:"):
            url = None if self._data_url_fault(part.url) else part.url
        elif part.url.startswith(("http://", "https://")):
            url = None if await self.urls.refusal(part.url, unresolved_ok=True) else part.url
        else:
            url = None
        if url is None:
            return None
        match = _DATA_URL.fullmatch(url)
        digest = _digest(base64.b64decode(match["data"]) if match else url.encode())
        image = url
        return await self._kept(f"image-description:{self.vision_model}", digest, lambda: self._describe(image))

    async def _describe(self, url: str) -> str | None:
        assert self.router is not None and self.vision_model is not None
        try:
            backend, model = await self.router.resolve(self.vision_model)
        except APIError as exc:
            log.warning("the vision model %s cannot describe images: %s", self.vision_model, exc.message)
            return None
        if backend.reads_images(model) is False:
            log.warning("the vision model %s reads text only: it cannot describe images", self.vision_model)
            return None
        if url.startswith(("http://", "https://")) and not backend.fetches_image_urls(model):
            inlined, why = await self._inline(url)
            if inlined is None:
                log.warning("the vision model %s cannot be shown the image at %s: %s", self.vision_model, url, why)
                return None
            url = inlined
        request = GenerationRequest(
            model=model,
            messages=[Message("user", [TextPart(DESCRIBE), ImagePart(url)])],
            max_output_tokens=1024,
            reasoning_effort="none",
        )
        pieces: list[str] = []
        try:
            async with asyncio.timeout(DESCRIPTION_TIMEOUT), aclosing(tracing.generate(backend, request)) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        pieces.append(event.text)
                    elif isinstance(event, Error):
                        log.warning("the vision model %s could not describe an image: %s", self.vision_model,
                                    event.message)  # fmt: skip
                        return None
        except TimeoutError:
            log.warning("the vision model %s did not describe an image within %g s", self.vision_model,
                        DESCRIPTION_TIMEOUT)  # fmt: skip
            return None
        return "".join(pieces).strip() or None

    # --- the engine's refusal --------------------------------------------------------------

    def generate(
        self, backend: Backend, generation: GenerationRequest, response_id: str | None = None
    ) -> AsyncIterator[Event]:
        """The engine's events for a prepared request. When the engine refuses it for its images
        (a 4xx naming images, before any answer), it is sent once more with notes in the images'
        places: a refusal that says the model reads no image also teaches that it is text-only
        (later requests send none); one about these images (one the engine could not fetch or
        decode) does not. A request without images gets the engine's stream itself: no layer
        between the engine and the renderer on every token of every answer."""
        if not _has_images(generation):
            return tracing.generate(backend, generation, response_id)
        return self._retried_without_images(backend, generation, response_id)

    async def _retried_without_images(
        self, backend: Backend, generation: GenerationRequest, response_id: str | None
    ) -> AsyncIterator[Event]:
        async with aclosing(tracing.generate(backend, generation, response_id)) as events:
            first = await anext(events, None)
            if not (isinstance(first, Error) and _about_images(first, generation)):
                if first is not None:
                    yield first
                async for event in events:
                    yield event
                return
        if _IMAGE_REFUSAL.search(first.message):
            log.warning("model %s refused an image (%s): it reads text only from now on", generation.model,
                        first.message)  # fmt: skip
            backend.learn_text_only(generation.model)
            retry = await self.prepare(backend, generation)
        else:
            log.warning("the engine of model %s could not take this request's images (%s): sent again without them",
                        generation.model, first.message)  # fmt: skip
            retry = _without_images(generation)
        async with aclosing(tracing.generate(backend, retry, response_id)) as events:
            async for event in events:
                yield event


_UNREADABLE_PDF = "\x00unreadable PDF"
_BINARY = "\x00binary"
"""What a PDF whose text cannot be read and a binary file read as (never a document's text:
NUL is not storable, so these stay in memory)."""


_IMAGE_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
)


def _image_type(data: bytes) -> str | None:
    """The media type of an image by its first bytes (a server's Content-Type may say anything)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((media for signature, media in _IMAGE_SIGNATURES if data.startswith(signature)), None)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _reader(name: str, data: bytes) -> Callable[[], Awaitable[str]]:
    """Reads a document's text off the event loop (pypdf takes a while)."""

    async def read() -> str:
        return await asyncio.to_thread(_read, name, data)

    return read


def _read(name: str, data: bytes) -> str:
    suffix = PurePath(name).suffix.lower()
    try:
        if data.startswith(b"%PDF") or suffix == ".pdf":
            return extract_text("document.pdf", data)
        if suffix in HTML_SUFFIXES:
            return extract_text(name, data)
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return _BINARY
    except ExtractionError as exc:
        log.warning("file %s cannot be read: %s", name, exc)
        return _UNREADABLE_PDF


_NAMES_IMAGES = re.compile(r"image|multi-?modal|vision|mmproj", re.IGNORECASE)


def _about_images(error: Error, generation: GenerationRequest) -> bool:
    """Whether the engine's error is a refusal of the request's images (a 4xx naming images)."""
    return (
        400 <= error.status < 500
        and error.status not in (401, 403, 404, 429)
        and _NAMES_IMAGES.search(error.message) is not None
        and _has_images(generation)
    )


def _has_images(generation: GenerationRequest) -> bool:
    return any(isinstance(part, ImagePart) for message in generation.messages for part in message.content)


ENGINE_FAILED = unusable_image("the model's engine could not read it")


def _without_images(generation: GenerationRequest) -> GenerationRequest:
    """The request with a note in each image's place (the engine could not take them)."""
    messages = [
        replace(m, content=[TextPart(ENGINE_FAILED) if isinstance(part, ImagePart) else part for part in m.content])
        for m in generation.messages
    ]
    return replace(generation, messages=messages)
