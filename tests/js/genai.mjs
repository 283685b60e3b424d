// Drives Google's Gen AI SDK (@google/genai, the Gemini API) against ResponseKit: generateContent and
// generateContentStream, each through one function call and its response, then countTokens and the
// models API. Prints one JSON object of what it saw. Usage: node genai.mjs SERVER_URL
import { GoogleGenAI } from '@google/genai';

const ai = new GoogleGenAI({ apiKey: 'test', httpOptions: { baseUrl: process.argv[2] } });
const model = 'test-model';
const config = {
  tools: [{
    functionDeclarations: [{
      name: 'get_weather',
      description: 'The weather of a city',
      parameters: { type: 'OBJECT', properties: { city: { type: 'STRING' } }, required: ['city'] },
    }],
  }],
  thinkingConfig: { includeThoughts: true },
};
const question = { role: 'user', parts: [{ text: 'What is the weather in Paris?' }] };

function answered(call) {
  return { role: 'user', parts: [{ functionResponse: { id: call.id, name: call.name, response: { output: `sunny and 21C in ${call.args.city}` } } }] };
}

const result = {};

// Not streamed: a call, then the answer to its result.
const first = await ai.models.generateContent({ model, contents: [question], config });
const call = first.functionCalls[0];
const second = await ai.models.generateContent({ model, contents: [question, first.candidates[0].content, answered(call)], config });
result.generate = {
  call: { id: call.id, name: call.name, args: call.args },
  thoughts: first.candidates[0].content.parts.filter((part) => part.thought).map((part) => part.text),
  signed: first.candidates[0].content.parts.some((part) => part.functionCall && part.thoughtSignature),
  finishReason: second.candidates[0].finishReason,
  text: second.text,
  usage: second.usageMetadata,
};

// Streamed: the chunks' parts joined into the model's turn, as a client keeps its history.
async function streamed(contents) {
  const parts = [];
  let finishReason = null;
  let chunks = 0;
  for await (const chunk of await ai.models.generateContentStream({ model, contents, config })) {
    chunks += 1;
    parts.push(...(chunk.candidates?.[0]?.content?.parts ?? []));
    finishReason = chunk.candidates?.[0]?.finishReason ?? finishReason;
  }
  return { parts, finishReason, chunks };
}
const one = await streamed([question]);
const streamedCall = one.parts.find((part) => part.functionCall).functionCall;
const two = await streamed([question, { role: 'model', parts: one.parts }, answered(streamedCall)]);
result.stream = {
  call: { id: streamedCall.id, name: streamedCall.name, args: streamedCall.args },
  chunks: [one.chunks, two.chunks],
  finishReasons: [one.finishReason, two.finishReason],
  text: two.parts.filter((part) => !part.thought).map((part) => part.text ?? '').join(''),
};

result.tokens = (await ai.models.countTokens({ model, contents: 'one two three' })).totalTokens;
const listed = [];
for await (const found of await ai.models.list()) {
  listed.push(found.name);
}
result.models = { listed, got: (await ai.models.get({ model })).name };

try {
  await ai.models.generateContent({ model: 'no-such-model', contents: 'hi' });
  result.error = null;
} catch (error) {
  result.error = { status: error.status, message: String(error.message).slice(0, 300) };
}
console.log(JSON.stringify(result));
