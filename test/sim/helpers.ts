/** Fixtures for the sim tests: temp dirs, hang guards, a pull-style reader of a link's outputs. */
import { freshDir as sharedFreshDir, hangGuard } from '../helpers/async.js';
import type { EngineLink, OutputMessage } from '../../src/engine-client/link.js';
import { tokenspeedProtocol } from '../../src/protocols/tokenspeed/index.js';
import type { EngineBatch } from '../../src/protocols/types.js';
import { decodeEngineCoreOutputs } from '../../src/protocols/vllm/index.js';
import type { EngineCoreOutput, EngineCoreOutputs } from '../../src/protocols/vllm/index.js';

/** Reads a link's output messages one at a time (hang-guarded); subclasses decode them for one engine family. */
class RawOutputReader {
  private readonly it: AsyncIterator<OutputMessage>;
  constructor(link: EngineLink) {
    this.it = link.outputs()[Symbol.asyncIterator]();
  }
  /** The next raw message (hang-guarded). */
  async message(ms = 20_000): Promise<OutputMessage> {
    const r = await hangGuard(this.it.next(), ms, 'next output message');
    if (r.done === true) throw new Error('output stream ended');
    return r.value;
  }
}

/** Reads a link's output messages one at a time, decoding TokenSpeed batches. */
export class OutputReader extends RawOutputReader {
  /** The next decoded batch; throws on anything else. */
  async batch(ms = 20_000): Promise<EngineBatch> {
    const m = await this.message(ms);
    if (m.kind !== 'frames') throw new Error(`expected an output batch, got ${m.kind}`);
    return tokenspeedProtocol.decodeOutput(m.frames);
  }
  /** Batches until every id in `rids` got its terminal row; returns them all. */
  async untilFinished(rids: readonly string[], ms = 20_000): Promise<EngineBatch[]> {
    const pending = new Set(rids);
    const out: EngineBatch[] = [];
    while (pending.size > 0) {
      const b = await this.batch(ms);
      out.push(b);
      for (const id of b.finishedRequestIds) pending.delete(id);
    }
    return out;
  }
}

/** A fresh temporary folder for this suite's sockets (prefix `mgw-sim-`). */
export const freshDir = (): ReturnType<typeof sharedFreshDir> => sharedFreshDir('mgw-sim-');
export { hangGuard };

/** Reads a link's output messages as raw vLLM `EngineCoreOutputs` envelopes (decoded with the vLLM codec directly). */
export class VllmOutputReader extends RawOutputReader {
  /** The next envelope; throws on anything else. */
  async envelope(ms = 20_000): Promise<EngineCoreOutputs> {
    const m = await this.message(ms);
    if (m.kind !== 'frames') throw new Error(`expected an EngineCoreOutputs envelope, got ${m.kind}`);
    return decodeEngineCoreOutputs(m.frames);
  }
  /** Envelopes up to and including the first one `done` accepts. */
  async until(done: (e: EngineCoreOutputs) => boolean, ms = 20_000): Promise<EngineCoreOutputs[]> {
    const out: EngineCoreOutputs[] = [];
    for (;;) {
      const e = await this.envelope(ms);
      out.push(e);
      if (done(e)) return out;
    }
  }
  /** Envelopes until every id in `rids` got a terminal output; returns them all. */
  async untilFinished(rids: readonly string[], ms = 20_000): Promise<EngineCoreOutputs[]> {
    const pending = new Set(rids);
    return this.until((e) => {
      for (const o of e.outputs) if (o.finish_reason !== null) pending.delete(o.request_id);
      return pending.size === 0;
    }, ms);
  }
}

/** Every output of `rid` across `envelopes`, in order. */
export function outputsOf(envelopes: readonly EngineCoreOutputs[], rid: string): EngineCoreOutput[] {
  return envelopes.flatMap((e) => e.outputs.filter((o) => o.request_id === rid));
}
