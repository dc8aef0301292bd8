/**
 * The openai SDK, LangChain JS and the Vercel AI SDK against a gateway with an API key (issue #10 "Done when"):
 * with the key each gets exactly the reply a plain request with the key gets (the simulated ranks are deterministic
 * for a given seed and prompt), streamed and not; with a wrong key each fails with the 401. One gateway over two
 * simulated ranks serves the whole file.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { allChatClients, type ChatAsk } from '../helpers/clients.js';
import { startTestGateway, type TestGateway } from '../helpers/test-gateway.js';

const KEY = 'sk-gateway-test-key';
const ASK: ChatAsk = { model: 'sim', content: 'Tell me something about rivers.', maxTokens: 24, seed: 11 };

describe('third-party clients with an API key', () => {
  let gateway: TestGateway;
  let reference: string;

  before(async () => {
    gateway = await startTestGateway({ sim: 2, edge: { apiKeys: [KEY] } });
    // What the gateway answers a plain request with the key: the reply every client must read unchanged.
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
      body: JSON.stringify({
        model: ASK.model,
        messages: [{ role: 'user', content: ASK.content }],
        max_tokens: ASK.maxTokens,
        seed: ASK.seed,
      }),
    });
    assert.equal(res.status, 200);
    reference = ((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message
      .content;
    assert.ok(reference.length > 0);
  });
  after(() => gateway?.close());

  test('each client, with the key, reads the reference reply, streamed and not', async () => {
    for (const client of allChatClients(gateway.url, KEY)) {
      assert.equal(await client.chat(ASK), reference, `${client.name}: non-streamed`);
      assert.equal(await client.streamChat(ASK), reference, `${client.name}: streamed`);
    }
  });

  test('each client, with a wrong key, fails with the 401', async () => {
    for (const client of allChatClients(gateway.url, `${KEY}-wrong`)) {
      await assert.rejects(
        client.chat(ASK),
        (err: unknown) => {
          const e = err as {
            status?: unknown;
            statusCode?: unknown;
            response?: { status?: unknown };
            message?: unknown;
          };
          const status = e.status ?? e.statusCode ?? e.response?.status;
          assert.ok(
            status === 401 || /401|Incorrect API key/.test(String(e.message)),
            `${client.name}: ${String(e.message)}`,
          );
          return true;
        },
        client.name,
      );
    }
  });
});
