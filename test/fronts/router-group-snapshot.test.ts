/**
 * With several engine groups, the fronts choose a request's group from the router's SNAPSHOT (src/server/groups.ts
 * `GroupChooser.choose` over `RemoteBackend.rankStates()`), so the router sends every front the new rank states at the
 * end of a turn that placed or finished a request, not only at its periodic tick (src/fronts/router/router-service.ts). Here
 * the tick is ten minutes: only that push can tell front B about front A's request.
 */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { pino } from 'pino';
import type { FrontChannel } from '../../src/fronts/front/front-channel.js';
import { RemoteBackend } from '../../src/fronts/front/remote-backend.js';
import type { GroupSnapshot } from '../../src/fronts/channel/records.js';
import { DEFAULT_SAMPLING, type GenerateRequest } from '../../src/protocols/types.js';
import { ResponsesStore } from '../../src/server/responses/store.js';
import { FakeBackend, rankState } from '../server/fake-backend.js';
import { openTwoFronts, type TwoFronts } from './two-fronts.js';

const log = pino({ level: 'silent' });
let fronts: TwoFronts;
let a: FrontChannel;
let b: FrontChannel;
const first = new FakeBackend({ ranks: [0, 1] });
const second = new FakeBackend({ ranks: [0, 1] });
let placed = 0;

before(async () => {
  const submit = first.submit.bind(first);
  first.submit = (request, options) => {
    placed++;
    return submit(request, options);
  };
  first.rankStates = () => [{ ...rankState(0), inFlight: placed }, rankState(1)];
  fronts = await openTwoFronts(
    'mgw-fronts-groups-',
    {
      groups: [
        { worker: 'ipc:///fake-0', name: 'fake-0', engine: 'tokenspeed', backend: first as never },
        { worker: 'ipc:///fake-1', name: 'fake-1', engine: 'vllm', backend: second as never },
      ],
      store: new ResponsesStore(),
      maxConcurrentRequests: 0,
      logger: log,
      snapshotIntervalMs: 600_000,
    },
    log,
  );
  ({ a, b } = fronts);
});

after(() => fronts.close());

test(
  "a request placed through one front shows in the other front's snapshot at once (two groups)",
  { timeout: 10_000 },
  async () => {
    assert.equal(b.groups[0]!.ranks[0]!.inFlight, 0);
    const seen = new Promise<GroupSnapshot[]>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error('front B got no snapshot with the new in-flight count within 3 s')),
        3000,
      );
      b.on('snapshot', (groups) => {
        if (groups[0]?.ranks[0]?.inFlight === 1) {
          clearTimeout(timer);
          resolve(groups);
        }
      });
    });
    const submitted = first.nextSubmission();
    const request: GenerateRequest = {
      requestId: 'cmpl-g0',
      promptTokenIds: [1, 2, 3],
      sampling: { ...DEFAULT_SAMPLING, maxNewTokens: 4 },
      stream: true,
      returnLogprob: false,
    };
    const stream = await new RemoteBackend(a, 0).submit(request);
    await submitted;
    const groups = await seen;
    assert.equal(groups[0]!.ranks[0]!.inFlight, 1);
    assert.equal(new RemoteBackend(b, 0).rankStates()[0]!.inFlight, 1);
    stream.cancel();
  },
);
