// Drives the Vercel AI SDK (ai + @ai-sdk/openai, Responses API) against ResponseKit.
// Prints one JSON object: what generateText and streamText saw. Usage: node ai_sdk.mjs BASE_URL
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { streamParts } from './stream_parts.mjs';
import { z } from 'zod';

const openai = createOpenAI({ baseURL: process.argv[2], apiKey: 'test' });
const tools = {
  get_weather: tool({
    description: 'The weather of a city',
    inputSchema: z.object({ city: z.string() }),
    execute: async ({ city }) => `sunny and 21C in ${city}`,
  }),
};
const request = { model: openai.responses('test-model'), prompt: 'What is the weather in Paris?', tools, stopWhen: stepCountIs(3) };

const generated = await generateText(request);
const result = {
  generate: {
    steps: generated.steps.length,
    finishReason: generated.finishReason,
    text: generated.text,
    toolCalls: generated.steps.flatMap((step) => step.toolCalls.map((call) => ({ name: call.toolName, input: call.input }))),
    toolResults: generated.steps.flatMap((step) => step.toolResults.map((r) => r.output)),
  },
};

const streamed = streamText(request);
const { partTypes, errors } = await streamParts(streamed);
result.stream = {
  steps: (await streamed.steps).length,
  finishReason: await streamed.finishReason,
  text: await streamed.text,
  partTypes,
  errors,
};
console.log(JSON.stringify(result));
