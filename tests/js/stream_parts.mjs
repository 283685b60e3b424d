// What the tests check of a streamText run's full stream: the part types seen, and the error
// parts' messages (none expected).
export async function streamParts(streamed) {
  const parts = [];
  const errors = [];
  for await (const part of streamed.fullStream) {
    parts.push(part.type);
    if (part.type === 'error') errors.push(String(part.error?.message ?? part.error));
  }
  return { partTypes: [...new Set(parts)], errors };
}
