/**
 * The worker-thread side of off-loop prompt tokenization (issue 9: a 100k-token prompt tokenized on the event loop
 * stalled every stream of the process for ~250 ms). Loads the tokenizer directory named by `workerData.dir` once, then
 * answers each `EncodeJob` with the token ids as an `Int32Array` (its buffer transferred) or the error message.
 * Started by ./offloaded-encoder.ts; never imported by the main thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { EncodeJob, EncodeReply } from './offloaded-encoder.js';
import { GatewayTokenizer } from './tokenizer.js';

const port = parentPort;
if (port === null) throw new Error('encode-worker.ts runs as a worker thread');
const loading = GatewayTokenizer.load((workerData as { dir: string }).dir);
port.on('message', (job: EncodeJob) => {
  loading
    .then((tokenizer) => {
      const ids = Int32Array.from(tokenizer.encode(job.text, { addSpecialTokens: job.addSpecialTokens }));
      port.postMessage({ id: job.id, ids } satisfies EncodeReply, [ids.buffer]);
    })
    .catch((err: unknown) => {
      port.postMessage({ id: job.id, error: err instanceof Error ? err.message : String(err) } satisfies EncodeReply);
    });
});
