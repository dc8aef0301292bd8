/**
 * What the gateway logs about a rank's ready response beyond the join line (issue #14; src/gateway/engine-groups.ts
 * `logReadyNotes`): each decoder note as a warning, and a dtype outside the three SMG knows once per value.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import { logReadyNotes } from '../src/gateway/index.js';
import { DEFAULT_READY_RESPONSE } from '../src/protocols/handshake.js';
import type { ConnectedEngine } from '../src/engine-client/link.js';

test('logReadyNotes: decoder notes are warnings; an unknown dtype is logged once per value, a known one never', () => {
  const lines: Array<{ msg: string; dtype?: string; note?: string; level: number }> = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const rank = (i: number, over: Partial<ConnectedEngine['ready']>): ConnectedEngine => ({
    identity: Uint8Array.of(i, 0),
    engineIndex: i,
    ready: { ...DEFAULT_READY_RESPONSE, maxModelLen: 4096, ...over },
  });
  const seen = new Set<string>();
  logReadyNotes(
    log,
    rank(0, {
      dtype: 'float8_e4m3fn',
      notes: ['EngineCoreReadyResponse.world_size: expected uint, got str (treated as not reported)'],
    }),
    seen,
  );
  logReadyNotes(log, rank(1, { dtype: 'float8_e4m3fn' }), seen);
  logReadyNotes(log, rank(2, { dtype: 'bfloat16' }), seen);
  logReadyNotes(log, rank(3, { dtype: null }), seen);
  logReadyNotes(log, rank(4, { dtype: 'int4' }), seen);
  assert.deepEqual(
    lines.map((l) => [l.msg.split(':')[0], l.dtype ?? l.note]),
    [
      ['ready response', 'EngineCoreReadyResponse.world_size: expected uint, got str (treated as not reported)'],
      ['ready response', 'float8_e4m3fn'],
      ['ready response', 'int4'],
    ],
  );
  assert.ok(
    lines.every((l) => l.level === 40),
    'warnings',
  );
});
