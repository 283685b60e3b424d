// Server-sent events read with fetch, for the pages that follow a stream (the playground's
// POST, which EventSource cannot send; a response's resume stream, whose every event type
// EventSource would need a listener for): frames end at a blank line, and the `data:` lines of
// a frame are one JSON event (https://html.spec.whatwg.org/multipage/server-sent-events.html).
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").filter((line) => line.startsWith("data: ")).map((line) => line.slice(6)).join("\n");
      if (data && data !== "[DONE]") yield JSON.parse(data);
    }
  }
}
