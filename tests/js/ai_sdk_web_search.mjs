// Drives the Vercel AI SDK's provider-run web search (openai.tools.webSearch, Responses API)
// against ResponseKit. Prints one JSON object: what generateText and streamText saw.
// Usage: node ai_sdk_web_search.mjs BASE_URL
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { streamParts } from './stream_parts.mjs';

const openai = createOpenAI({ baseURL: process.argv[2], apiKey: 'test' });
const request = {
  model: openai.responses('test-model'),
  prompt: 'Is Etna active?',
  tools: { web_search: openai.tools.webSearch({ searchContextSize: 'low' }) },
};

const summary = (result) => ({
  text: result.text,
  toolCalls: result.toolCalls.map((call) => ({ name: call.toolName, input: call.input, providerExecuted: call.providerExecuted })),
  toolResults: result.toolResults.map((r) => ({ name: r.toolName, output: r.output })),
  sources: result.sources.map((s) => ({ sourceType: s.sourceType, url: s.url, title: s.title })),
  finishReason: result.finishReason,
});

const generated = await generateText(request);
const out = { generate: summary(generated) };
const streamed = streamText(request);
const { partTypes, errors } = await streamParts(streamed);
out.stream = {
  text: await streamed.text,
  sources: (await streamed.sources).map((s) => s.url),
  partTypes,
  errors,
};
console.log(JSON.stringify(out));
