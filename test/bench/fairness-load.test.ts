/**
 * The load of bench:fairness (bench/fairness/load.ts) against a fake HTTP server: what one request reports for a
 * stream, a refusal and a connection that breaks, and the seeded Poisson schedule.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { after, before, test } from 'node:test';
import { offer, sendOne, type TenantLoad } from '../../bench/fairness/load.js';

let server: Server;
let url: string;
const seen: Array<{ auth: string | undefined; band: string | undefined; body: Record<string, unknown> }> = [];

before(async () => {
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (d: Buffer) => (text += d.toString()));
    req.on('end', () => {
      const body = JSON.parse(text) as Record<string, unknown>;
      seen.push({
        auth: req.headers.authorization,
        band: req.headers['x-gateway-inference-objective'] as string,
        body,
      });
      if (req.headers.authorization === 'Bearer refused') {
        res.writeHead(429, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { code: 'rate_limit_exceeded' } }));
      } else if (req.headers.authorization === 'Bearer broken') {
        res.socket?.destroy();
      } else {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('data: {"choices":[{"text":"a"}]}\n\n');
        res.end('data: [DONE]\n\n');
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const a = server.address();
  url = `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`;
});
after(() => new Promise<void>((r) => server.close(() => r())));

const tenant = (key: string, ratePerSecond = 0): TenantLoad => ({ name: key, key, band: 'standard', ratePerSecond });

test(
  'one request: a stream gives a TTFT and 200; a refusal its code; a broken connection status 0',
  { timeout: 10_000 },
  async () => {
    const ok = await sendOne(url, tenant('ok'), 8, 1);
    assert.equal(ok.status, 200);
    assert.equal(ok.code, null);
    assert.ok(ok.ttftMs !== null && ok.ttftMs >= 0 && ok.endedAt >= ok.sentAt);
    assert.deepEqual(seen.at(-1), {
      auth: 'Bearer ok',
      band: 'standard',
      body: { model: 'sim', prompt: 'Request 1: write about the weather.', max_tokens: 8, min_tokens: 8, stream: true },
    });
    const refused = await sendOne(url, tenant('refused'), 8, 2);
    assert.deepEqual([refused.status, refused.code, refused.ttftMs], [429, 'rate_limit_exceeded', null]);
    const broken = await sendOne(url, tenant('broken'), 8, 3);
    assert.deepEqual([broken.status, broken.code], [0, 'network']);
  },
);

test('the schedule: the rate sets how many arrive, from the tenants that have one', { timeout: 10_000 }, async () => {
  const results = await offer(url, [tenant('ok', 200), tenant('idle', 0)], 4, 300, 1);
  // 200 per second for 0.3 s: about 60 requests (Poisson; the seed fixes the schedule, so the count does not depend on
  // how late the timers fire), all from the tenant with a rate.
  assert.ok(results.length > 30 && results.length < 100, `${results.length} requests`);
  assert.ok(results.every((r) => r.tenant === 'ok' && r.status === 200));
});
