// Drives the Vercel AI SDK with an image part against ResponseKit, on the Responses API and on
// Chat Completions: one turn with the image, then three more that replay the whole history.
// Prints one JSON object: each API's answers. Usage: node ai_sdk_image.mjs BASE_URL IMAGE.png
import { readFileSync } from 'node:fs';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';

const openai = createOpenAI({ baseURL: process.argv[2], apiKey: 'test' });
const image = new Uint8Array(readFileSync(process.argv[3]));
const result = {};
for (const [api, model] of [['responses', openai.responses('test-model')], ['chat', openai.chat('test-model')]]) {
  const messages = [{ role: 'user', content: [
    { type: 'text', text: `What does this chart show? (${api})` },
    { type: 'image', image, mediaType: 'image/png' },
  ] }];
  const answers = [];
  for (let turn = 0; turn < 4; turn++) {
    if (turn > 0) messages.push({ role: 'user', content: `Follow-up ${turn} (${api})` });
    // The last turn streams: both of the SDK's paths take the replayed image.
    const answer = turn < 3 ? await generateText({ model, messages }) : streamText({ model, messages });
    const text = await answer.text;
    answers.push({ text, finishReason: await answer.finishReason });
    messages.push(...(await answer.response).messages);
  }
  result[api] = answers;
}
console.log(JSON.stringify(result));
