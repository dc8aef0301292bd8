/**
 * A simulated group's handshake port is derived from the ipc path the gateway picked for it (20000 + a hash mod
 * 10000, engine-wire.md 1.3), so another process on the host (a gateway or test file running beside this one) can
 * hold it: the stress run saw "cannot bind the handshake ROUTER socket … Address already in use". The gateway then
 * moves the group to a fresh path (src/gateway/engine-groups.ts `bindSimGroupLink`), logs it, and serves.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { pino } from 'pino';
import { startGateway } from '../../src/gateway/index.js';
import { gatewayRuntimeDir } from '../../src/runtime-dir.js';
import { deriveEndpoints } from '../../src/transport/endpoints.js';

test(
  'a simulated group whose derived handshake port is taken moves to another path and serves',
  { timeout: 120_000 },
  async () => {
    // The path this process's first simulated group gets (src/gateway/engine-groups.ts `simWorkerUrl`): no other group
    // was made in this file before.
    const first = deriveEndpoints(`ipc://${join(gatewayRuntimeDir(), `sim-${process.pid}`)}`);
    const port = Number(first.handshake.slice(first.handshake.lastIndexOf(':') + 1));
    const blocker = createServer();
    // Held by this test, or already by another process: taken either way.
    await new Promise<void>((resolve) => {
      blocker.once('error', () => resolve());
      blocker.listen(port, '127.0.0.1', () => resolve());
    });
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(
          ...chunk
            .toString()
            .split('\n')
            .filter((l) => l !== ''),
        );
        done();
      },
    });
    const gateway = await startGateway({
      port: 0,
      logger: pino({ level: 'info' }, sink),
      groups: [{ engine: 'tokenspeed', sim: 1 }],
    });
    try {
      const group = gateway.groups[0]!;
      assert.notEqual(group.endpoints.handshake, first.handshake, 'the group left the taken port');
      assert.ok(
        lines.some((l) => l.includes('handshake port of a simulated group is taken') && l.includes(first.workerUrl)),
        lines.join('\n'),
      );
      const res = await fetch(`${gateway.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'qwen3', prompt: 'hello', max_tokens: 4 }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const body = (await res.json()) as { choices: Array<{ finish_reason: string }> };
      assert.equal(body.choices[0]!.finish_reason, 'length');
    } finally {
      await gateway.close();
      await new Promise<void>((resolve) => blocker.close(() => resolve()));
    }
  },
);
