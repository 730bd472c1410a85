// The Vercel AI SDK through the proxy, as an app uses it: one conversation, its history
// kept as the SDK hands it back (`responseMessages`), one tool the SDK runs itself.
//
//   node ai-sdk.mjs openai|anthropic generate|stream
//
// Environment: PROXY_URL (…/v1), PROXY_API_KEY, MODEL, TURNS (a JSON array of user
// texts), NOTES (the file the tool reads), SESSION (an X-Session-Id, optional).
// Prints one JSON line per turn: its text, the tool results it used, and the item
// references it sent.
import { readFile } from 'node:fs/promises';
import { generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';

const [provider, mode] = process.argv.slice(2);
const { PROXY_URL, PROXY_API_KEY, MODEL, TURNS, SESSION } = process.env;
const headers = SESSION ? { 'X-Session-Id': SESSION } : {};
// Counts the `item_reference` items the SDK sends (the Responses API's earlier output).
let references = 0;
const counted = async (url, init) => {
  const input = init?.body ? JSON.parse(init.body).input : undefined;
  references += (Array.isArray(input) ? input : []).filter((i) => i.type === 'item_reference').length;
  return fetch(url, init);
};
const settings = { baseURL: PROXY_URL, apiKey: PROXY_API_KEY, headers, fetch: counted };
// createOpenAI()(model) is the Responses API: its default since @ai-sdk/openai 2.
const model = (provider === 'anthropic' ? createAnthropic : createOpenAI)(settings)(MODEL);

const tools = {
  read_notes: tool({
    description: 'Read the notes file.',
    inputSchema: jsonSchema({
      type: 'object',
      properties: { path: { type: 'string' } },
      required: ['path'],
    }),
    execute: async ({ path }) => readFile(path, 'utf8'),
  }),
};

const messages = [];
for (const text of JSON.parse(TURNS)) {
  messages.push({ role: 'user', content: text });
  const call = {
    model,
    system: 'You are terse.',
    messages,
    tools,
    stopWhen: stepCountIs(3),
    maxOutputTokens: 1024, // the Anthropic provider's default for a name it does not know: 128,000
  };
  let answer, said, steps;
  if (mode === 'stream') {
    const result = streamText({
      ...call,
      onError: ({ error }) => {
        console.error(error);
        process.exit(1);
      },
    });
    [answer, said, steps] = await Promise.all([result.text, result.responseMessages, result.steps]);
  } else {
    ({ text: answer, responseMessages: said, steps } = await generateText(call));
  }
  messages.push(...said); // every step's: the tool's call and result, then the answer
  const results = steps.flatMap((step) => step.toolResults.map((r) => r.output));
  console.log(JSON.stringify({ turn: text, text: answer, tool_results: results, references }));
  references = 0;
}
