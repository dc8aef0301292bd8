/**
 * The port picker the e2e files hand ports to gateways with (test/helpers/net.ts `freePort`): within a run, a port is
 * below the kernel's ephemeral range (no outgoing connection can take it before the gateway binds it; a restarted
 * gateway binds it long after it was picked) and never handed out twice.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../helpers/net.js';

const range = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number);

test(
  'with a claim folder, ports come from below the ephemeral range, each claimed once',
  { timeout: 30_000 },
  async () => {
    const claims = mkdtempSync(join(tmpdir(), 'port-claims-'));
    const before = process.env.GATEWAY_TEST_PORT_CLAIMS;
    process.env.GATEWAY_TEST_PORT_CLAIMS = claims;
    try {
      const ports = await Promise.all(Array.from({ length: 40 }, () => freePort()));
      assert.equal(new Set(ports).size, ports.length, 'no port handed out twice');
      for (const p of ports)
        assert.ok(p < range[0]! && p > 1024, `${p} is below the ephemeral range ${range.join('-')}`);
      assert.deepEqual(
        readdirSync(claims).map(Number).sort(),
        [...ports].sort(),
        'each port is claimed in the folder (a port found busy stays claimed, so the folder may hold more)',
      );
    } finally {
      if (before === undefined) delete process.env.GATEWAY_TEST_PORT_CLAIMS;
      else process.env.GATEWAY_TEST_PORT_CLAIMS = before;
      rmSync(claims, { recursive: true, force: true });
    }
  },
);
