/**
 * The TokenSpeed flavour of the simulator's wire (engine-wire.md section 4): ADD = `TokenizedGenerateReqInput`
 * finalized and validated like TokenSpeed (4.5, 4.6; `request.ts`); ABORT = `list[str]`, silent (4.7); each step's
 * rows = one 14-element `BatchTokenIDOutSlim` with the load tail (4.8, 4.9; `output.ts`), never an empty batch;
 * validation rejections as terminal `abort` rows with the next round (4.6); no wave messages (5.12: the TokenSpeed
 * wire has none). Ready response: `prefix_granularity`, `vllm_version` "tokenspeed-sim", `kv_cache_size_tokens`
 * filled (2.5).
 */
import { decodeAbortPayload } from '../protocols/tokenspeed/abort.js';
import { decodeTokenizedGenerateReqInput } from '../protocols/tokenspeed/request.js';
import { encodeSimBatch } from './output.js';
import { toSimRequest } from './request.js';
import type { SimStep, SimWire, SimWireContext } from './wire.js';

/** A step's rows as one `BatchTokenIDOutSlim` frame, or null when there are none. Throws `WireEncodeError`. */
function encodeRows(step: SimStep): Uint8Array[] | null {
  if (step.rows.length === 0) return null;
  return [encodeSimBatch({ engineIndex: step.engineIndex, rows: step.rows, tail: step.tail })];
}

/** The TokenSpeed wire for one rank. Stateless. */
export function createTokenSpeedSimWire(ctx: SimWireContext): SimWire {
  return {
    family: 'tokenspeed',
    granularityKey: 'prefix_granularity',
    version: 'tokenspeed-sim',
    defaultInstanceId: 'tokenspeed-sim',
    reportsKvCacheSizeTokens: true,
    rejectAt: 'round',
    finishRules: 'tokenspeed',
    waves: null,
    extraRequestTypes: [],
    utility: null,
    decodeAdd(payload) {
      const request = toSimRequest(decodeTokenizedGenerateReqInput(payload), {
        vocabSize: ctx.vocabSize,
        enableOutputLogprobs: ctx.enableOutputLogprobs,
        tokens: ctx.tokens,
      });
      return { request, requestWave: 0 };
    },
    decodeAbort: decodeAbortPayload,
    noteAborted() {
      // 4.7: a client abort is silent.
    },
    hasPendingReport: () => false,
    encodeRejections: encodeRows,
    encodeStep: encodeRows,
  };
}
