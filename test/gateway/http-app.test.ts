/**
 * The HTTP app as every process of a gateway listens and closes it (src/gateway/http-app.ts): `listenApp` reports
 * the bound URL (the port bound for port 0, an IPv6 host in brackets) and logs the caller's listening line;
 * `closeApp` does not wait on a connection that never sent a request (Node 20's close leaves it open until the
 * headers timeout, about a minute), so a front's or the gateway's close ends at once.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import Fastify from 'fastify';
import { closeApp, listenApp } from '../../src/gateway/index.js';

test('listenApp: the URL names the port bound, and the listening line is the caller’s', async () => {
  const lines: string[] = [];
  const app = Fastify({
    logger: { level: 'info', stream: { write: (l: string) => void lines.push(JSON.parse(l).msg as string) } },
  });
  const url = await listenApp(app, { port: 0, host: '127.0.0.1', listenText: (a) => `test listening on ${a}` });
  try {
    const address = app.server.address();
    assert.ok(typeof address === 'object' && address !== null);
    assert.equal(url, `http://127.0.0.1:${address.port}`);
    assert.ok(lines.includes(`test listening on ${url}`), lines.join('\n'));
  } finally {
    await app.close();
  }
});

test('listenApp: an IPv6 host is in brackets', async (t) => {
  const app = Fastify();
  let url: string;
  try {
    url = await listenApp(app, { port: 0, host: '::1', listenText: (a) => a });
  } catch (err) {
    t.skip(`no IPv6 loopback here (${String(err)})`);
    return;
  }
  try {
    const address = app.server.address();
    assert.ok(typeof address === 'object' && address !== null);
    assert.equal(url, `http://[::1]:${address.port}`);
  } finally {
    await app.close();
  }
});

test('closeApp: a connection that never sent a request does not hold the close', { timeout: 30_000 }, async () => {
  const app = Fastify();
  app.get('/', async () => 'ok');
  const url = new URL(await listenApp(app, { port: 0, host: '127.0.0.1', listenText: (a) => a }));
  // A client's pre-opened keep-alive socket: connected, nothing sent.
  const idle: Socket = connect(Number(url.port), url.hostname);
  await new Promise<void>((resolve, reject) => idle.once('connect', resolve).once('error', reject));
  const closedByServer = new Promise<void>((resolve) => idle.once('close', () => resolve()));
  await closeApp(app);
  await closedByServer;
  assert.equal(app.server.listening, false);
});
