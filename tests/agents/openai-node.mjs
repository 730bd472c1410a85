// openai-node's Chat Completions through the proxy, as an app uses it: one conversation
// with `metadata` on every request, its history resent whole each turn, and one tool the
// script runs itself (its result goes back in the next request).
//
//   node openai-node.mjs
//
// Environment: PROXY_URL (…/v1), PROXY_API_KEY, MODEL, TURNS (a JSON array of user
// texts), SESSION (an X-Session-Id). Prints one JSON line per turn: its text, and the
// tool results it used.
import { readFile } from 'node:fs/promises';
import OpenAI from 'openai';

const { PROXY_URL, PROXY_API_KEY, MODEL, TURNS, SESSION } = process.env;
const client = new OpenAI({
  baseURL: PROXY_URL,
  apiKey: PROXY_API_KEY,
  defaultHeaders: { 'X-Session-Id': SESSION },
  maxRetries: 0,
});
const tools = [
  {
    type: 'function',
    function: {
      name: 'read_notes',
      description: 'Read the notes file.',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

const messages = [{ role: 'system', content: 'You are terse.' }];
for (const text of JSON.parse(TURNS)) {
  messages.push({ role: 'user', content: text });
  const results = [];
  for (;;) {
    const completion = await client.chat.completions.create({
      model: MODEL,
      messages,
      tools,
      metadata: { app: 'context-proxy-tests', turn: String(messages.length) },
    });
    const message = completion.choices[0].message;
    messages.push(message);
    if (!message.tool_calls?.length) break;
    for (const call of message.tool_calls) {
      const { path } = JSON.parse(call.function.arguments);
      const output = await readFile(path, 'utf8');
      results.push(output);
      messages.push({ role: 'tool', tool_call_id: call.id, content: output });
    }
  }
  const answer = messages.at(-1).content;
  console.log(JSON.stringify({ turn: text, text: answer, tool_results: results }));
}
