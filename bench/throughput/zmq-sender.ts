/**
 * The sending side of the ZeroMQ receive floor (bench/throughput/floors.ts): a separate process (so its CPU is not
 * counted) that binds a PUSH socket at the ipc address in argv[2] and pushes argv[3] copies of one TokenSpeed
 * `BatchTokenIDOutSlim` of argv[4] rows (one new token each, the shape of a decode step; engine-wire.md 4.8-4.9), as
 * fast as the receiver takes them, then one empty frame as the end marker. Exits when the receiver disconnects.
 */
import { Push } from 'zeromq';
import { encodeBatchTokenIDOutSlim } from '../../src/protocols/tokenspeed/output.js';

const [address, countArg, rowsArg] = process.argv.slice(2);
const count = Number(countArg);
const rows = Number(rowsArg);

const rids = Array.from({ length: rows }, (_, i) => `chatcmpl-${i.toString(16).padStart(32, '0')}`);
const payload = encodeBatchTokenIDOutSlim(
  {
    rids,
    output_ids: rids.map((_, i) => [1000 + i]),
    finished_reasons: rids.map(() => ''),
    prompt_tokens: rids.map(() => 20),
    completion_tokens: rids.map(() => 100),
    cached_tokens: rids.map(() => 0),
    output_token_logprobs_val: rids.map(() => []),
    output_token_logprobs_idx: rids.map(() => []),
    engine_index: 0,
    num_running: rows,
    num_waiting: 0,
    kv_active_pages: rows * 8,
    kv_total_pages: 65536,
  },
  { form: 14 },
);

const push = new Push({ sendHighWaterMark: 1000 });
await push.bind(address!);
process.send?.({ ready: true });
// The receiver disconnects once it has read the end marker: every queued message was delivered by then.
process.on('disconnect', () => {
  push.linger = 0;
  push.close();
  process.exit(0);
});
for (let i = 0; i < count; i++) await push.send(payload);
await push.send(new Uint8Array(0));
